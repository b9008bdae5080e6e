"""The download cache (roberta_ext/download.py): known names, single files, downloads and their
retries, the cache directory, progress bars and safe unpacking of archives; every message in full.

Everything is served by a local HTTP server on 127.0.0.1 whose routes each test sets up, and which
records every request, so "served from the cache" and "no network attempt" are asserted, not assumed.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import re
import socket
import sys
import tarfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import requests
from requests.structures import CaseInsensitiveDict
from urllib3 import HTTPResponse

from roberta_ext import download as cache
from roberta_ext.download import (
    ARCHIVE_SUFFIXES,
    CACHE_ENV,
    GPT2_BPE,
    KNOWN_MODELS,
    MARKER_NAME,
    OFFLINE_ENV,
    ArchiveError,
    DownloadError,
    Gpt2BpeFiles,
    KnownModel,
    default_cache_dir,
    download,
    resolve_file,
    resolve_gpt2_bpe_files,
    resolve_model,
)
from tests.peers import require_installed

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")

# What a fairseq release archive holds, in miniature: one top-level folder with these files.
MODEL_FILES = {
    "model.pt": b"\x80\x02 stands in for a checkpoint; the store never reads it",
    "dict.txt": b"hello 7\nworld 5\n",
    "NOTE": b"A tiny test model.\n",
}

OFFLINE_CAUSE = (
    "offline mode is on (offline=True or ROBERTA_EXT_OFFLINE=1) and it is not in the cache; "
    "run once online, or pass a local directory or archive instead"
)

Route = Callable[[BaseHTTPRequestHandler], None]


class RecordingServer(ThreadingHTTPServer):
    """Serves `routes` (path -> handler function) and records every requested path."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.routes: dict[str, Route] = {}
        self.requests: list[str] = []

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}{path}"


class _Handler(BaseHTTPRequestHandler):
    server: RecordingServer

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        route = self.server.routes.get(self.path)
        if route is None:
            self.send_error(404)
        else:
            route(self)

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output clean


def send_bytes(body: bytes) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return route


def send_truncated(body: bytes) -> Route:
    """Promise twice the body's length, send the body, then hang up."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Length", str(2 * len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        handler.wfile.flush()
        handler.close_connection = True

    return route


def send_without_length(body: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.end_headers()
        handler.wfile.write(body)
        handler.close_connection = True

    return route


def send_gzip_encoded(body: bytes) -> Callable[[BaseHTTPRequestHandler], None]:
    compressed = gzip.compress(body, mtime=0)

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Encoding", "gzip")
        handler.send_header("Content-Length", str(len(compressed)))
        handler.end_headers()
        handler.wfile.write(compressed)

    return route


def fail_then_send(statuses: list[int], body: bytes) -> Route:
    """Answer the first requests with `statuses` (one each), then with `body`."""
    remaining = list(statuses)

    def route(handler: BaseHTTPRequestHandler) -> None:
        if remaining:
            handler.send_error(remaining.pop(0))
        else:
            send_bytes(body)(handler)

    return route


@pytest.fixture
def server() -> Iterator[RecordingServer]:
    recording_server = RecordingServer()
    # A short poll interval: shutdown() waits for it, once per test.
    thread = threading.Thread(target=recording_server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    yield recording_server
    recording_server.shutdown()
    recording_server.server_close()
    thread.join()


@pytest.fixture(autouse=True)
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The developer's own settings must not leak in: a proxy would swallow requests to 127.0.0.1,
    # and a cache or offline setting would change what the tests observe.
    for variable in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    for variable in (CACHE_ENV, OFFLINE_ENV, "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    # Nor may what a test writes leak out: a store that ignored cache_dir (a mutant under make mutation)
    # would fill ~/.cache, and one unpacking into the working directory would change later tests.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def make_tar_gz(files: dict[str, bytes], *, links: dict[str, str] | None = None) -> bytes:
    """A .tar.gz holding `files` (member name -> content) and symlinks (member name -> target)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buffer.getvalue()


def make_tar(files: dict[str, bytes], mode: str = "w:gz", links: dict[str, str] | None = None) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode=mode) as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(content)
            tar.addfile(info, io.BytesIO(content))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tar.addfile(info)
    return buffer.getvalue()


def make_zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, content in files.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def tiny_model_files(folder: str = "roberta.tiny") -> dict[str, bytes]:
    return {f"{folder}/{name}": content for name, content in MODEL_FILES.items()}


def assert_model_files(model_dir: Path) -> None:
    assert {path.name: path.read_bytes() for path in model_dir.iterdir()} == MODEL_FILES


def all_paths(root: Path) -> list[str]:
    return sorted(str(path.relative_to(root)) for path in root.rglob("*"))


@pytest.fixture
def tiny_registry(server: RecordingServer) -> dict[str, KnownModel]:
    server.routes["/roberta.tiny.tar.gz"] = send_bytes(make_tar_gz(tiny_model_files()))
    return {"roberta.tiny": KnownModel(url=server.url("/roberta.tiny.tar.gz"), description="a test model")}


def short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def local_key(archive: Path) -> str:
    stat = archive.stat()
    return short_hash(f"{archive.resolve()}\0{stat.st_mtime_ns}\0{stat.st_size}")


def raises_exactly(error: type[Exception], message: str):
    return pytest.raises(error, match="^" + re.escape(message) + "$")


@pytest.fixture
def sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(cache, "time", SimpleNamespace(sleep=slept.append))
    return slept


@pytest.fixture
def get_calls(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, object]]:
    calls: list[dict[str, object]] = []
    real_get = requests.get

    def recording_get(url: str, **kwargs: object) -> requests.Response:
        calls.append(kwargs)
        return real_get(url, **kwargs)

    monkeypatch.setattr(requests, "get", recording_get)
    return calls


# --- the tables --------------------------------------------------------------------------------------


def test_known_models_are_described_for_humans() -> None:
    assert {name: model.description for name, model in KNOWN_MODELS.items()} == {
        "roberta.base": "RoBERTa base: 12 layers, 768 hidden, 125M parameters",
        "roberta.large": "RoBERTa large: 24 layers, 1024 hidden, 355M parameters",
        "roberta.large.mnli": "RoBERTa large fine-tuned on MNLI (classification head 'mnli')",
        "roberta.large.wsc": "RoBERTa large fine-tuned on the Winograd Schema Challenge (WSC)",
        "xlmr.base": "XLM-R base: 100 languages, 12 layers, 768 hidden, 270M parameters",
        "xlmr.large": "XLM-R large: 100 languages, 24 layers, 1024 hidden, 560M parameters",
        "xlmr.xl": "XLM-R XL: 100 languages, 36 pre-LN layers, 2560 hidden, 3.5B parameters",
        "xlmr.xxl": "XLM-R XXL: 100 languages, 48 pre-LN layers, 4096 hidden, 10.7B parameters",
    }


def test_known_model_urls_and_gpt2_bpe_urls() -> None:
    fairseq = "http://dl.fbaipublicfiles.com/fairseq/models/"
    assert {name: model.url for name, model in KNOWN_MODELS.items()} == {
        "roberta.base": fairseq + "roberta.base.tar.gz",
        "roberta.large": fairseq + "roberta.large.tar.gz",
        "roberta.large.mnli": fairseq + "roberta.large.mnli.tar.gz",
        "roberta.large.wsc": fairseq + "roberta.large.wsc.tar.gz",
        "xlmr.base": fairseq + "xlmr.base.tar.gz",
        "xlmr.large": fairseq + "xlmr.large.tar.gz",
        "xlmr.xl": fairseq + "xlmr/xlmr.xl.tar.gz",
        "xlmr.xxl": fairseq + "xlmr/xlmr.xxl.tar.gz",
    }
    bpe = "https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/"
    assert (GPT2_BPE.encoder_json, GPT2_BPE.vocab_bpe, GPT2_BPE.dictionary) == (
        bpe + "encoder.json",
        bpe + "vocab.bpe",
        bpe + "dict.txt",
    )


def test_known_models_cannot_be_changed() -> None:
    with pytest.raises(TypeError):
        KNOWN_MODELS["mine"] = KnownModel(url="http://example.invalid/m.tar.gz", description="mine")  # type: ignore[index]


def test_download_error_names_the_url_the_path_and_the_cause(tmp_path: Path) -> None:
    error = DownloadError("http://host/a.bin", tmp_path / "a.bin", "it broke")
    assert str(error) == f"cannot download http://host/a.bin to {tmp_path / 'a.bin'}: it broke"
    assert (error.url, error.path) == ("http://host/a.bin", tmp_path / "a.bin")
    assert isinstance(error, OSError)


def test_known_urls_match_fairseq() -> None:
    """The table must mean what fairseq 0.12 means by the same names.

    fairseq's source is read, not imported: importing it takes seconds and is the plugin's business.
    """
    spec = require_installed("fairseq", "fairseq's source is the reference")
    fairseq_dir = Path(spec.origin).parent
    roberta_source = (fairseq_dir / "models" / "roberta" / "model.py").read_text()
    hub_models = dict(re.findall(r'"(roberta\.[\w.]+)": "(http[^"]+)"', roberta_source))
    xlmr_source = (fairseq_dir / "models" / "roberta" / "model_xlmr.py").read_text()
    hub_models.update(re.findall(r'"(xlmr\.[\w.]+)": "(http[^"]+)"', xlmr_source))
    assert {name: model.url for name, model in KNOWN_MODELS.items()} == hub_models

    bpe_source = (fairseq_dir / "data" / "encoders" / "gpt2_bpe.py").read_text()
    assert f'DEFAULT_ENCODER_JSON = "{GPT2_BPE.encoder_json}"' in bpe_source
    assert f'DEFAULT_VOCAB_BPE = "{GPT2_BPE.vocab_bpe}"' in bpe_source


# --- the cache directory -----------------------------------------------------------------------------


def test_the_cache_variable_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv(CACHE_ENV, "~/models")
    assert default_cache_dir() == tmp_path / "models"


def test_xdg_cache_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "~/xdg")
    assert default_cache_dir() == tmp_path / "xdg" / "roberta_ext"


@pytest.mark.parametrize("variable", [CACHE_ENV, "XDG_CACHE_HOME"])
def test_an_empty_variable_counts_as_unset(variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(variable, "")
    assert default_cache_dir() == tmp_path / ".cache" / "roberta_ext"


def test_a_cache_dir_argument_is_expanded(
    server: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    server.routes["/a.txt"] = send_bytes(b"a")
    url = server.url("/a.txt")
    assert resolve_file(url, cache_dir="~/cache") == tmp_path / "cache" / "files" / short_hash(url) / "a.txt"


def test_the_cache_environment_variable_is_honoured(
    tiny_registry: dict[str, KnownModel], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "from_env"))
    model_dir = resolve_model("roberta.tiny", registry=tiny_registry)
    assert model_dir.is_relative_to(tmp_path / "from_env" / "models")


def test_default_cache_dir_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "roberta_ext"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "roberta_ext"
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "ours"))
    assert default_cache_dir() == tmp_path / "ours"


# --- single files ------------------------------------------------------------------------------------


def test_a_file_lands_under_the_hash_of_its_url_and_is_then_served_from_the_cache(
    server: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/bpe/vocab.bpe"] = send_bytes(b"#version: 0.2\n")
    url = server.url("/bpe/vocab.bpe")
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))

    path = resolve_file(url)
    assert path == tmp_path / "files" / short_hash(url) / "vocab.bpe"
    assert all_paths(tmp_path) == ["files", f"files/{short_hash(url)}", f"files/{short_hash(url)}/vocab.bpe"]
    assert path.read_bytes() == b"#version: 0.2\n"
    assert resolve_file(url, offline=True) == path
    assert server.requests == ["/bpe/vocab.bpe"]


@pytest.mark.parametrize(
    "route, name",
    [
        ("/a%20b+c.txt", "a_20b_c.txt"),
        ("/.hidden", "hidden"),
        ("/folder/", "download"),
        ("/v1.0_x-y.json?token=1", "v1.0_x-y.json"),
        ("/XL.Vocab", "XL.Vocab"),
        ("", "download"),
    ],
)
def test_the_cached_file_name_is_the_urls_last_segment_made_safe(
    route: str, name: str, server: RecordingServer, tmp_path: Path
) -> None:
    server.routes[route or "/"] = send_bytes(b"body")
    url = server.url(route)
    assert resolve_file(url, cache_dir=tmp_path) == tmp_path / "files" / short_hash(url) / name


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_offline_without_a_cached_file_names_the_url_and_the_cache_path(
    how: str, server: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = server.url("/dict.txt")
    if how == "environment":
        monkeypatch.setenv(OFFLINE_ENV, "1")
    path = tmp_path / "files" / short_hash(url) / "dict.txt"
    with raises_exactly(DownloadError, f"cannot download {url} to {path}: {OFFLINE_CAUSE}"):
        resolve_file(url, cache_dir=tmp_path, offline=True if how == "argument" else None)
    assert server.requests == []
    assert all_paths(tmp_path) == []


def test_offline_false_wins_over_the_environment(
    server: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/dict.txt"] = send_bytes(b"a 1\n")
    monkeypatch.setenv(OFFLINE_ENV, "1")
    assert resolve_file(server.url("/dict.txt"), cache_dir=tmp_path, offline=False).read_bytes() == b"a 1\n"


@pytest.mark.parametrize(
    "value, offline",
    [
        ("", False),
        ("0", False),
        ("false", False),
        ("No", False),
        (" off ", False),
        ("1", True),
        ("TRUE", True),
        ("yes", True),
        (" on\n", True),
    ],
)
def test_the_offline_variable_values(
    value: str, offline: bool, server: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/dict.txt"] = send_bytes(b"a 1\n")
    monkeypatch.setenv(OFFLINE_ENV, value)
    if offline:
        with pytest.raises(DownloadError, match="offline mode is on"):
            resolve_file(server.url("/dict.txt"), cache_dir=tmp_path)
    else:
        assert resolve_file(server.url("/dict.txt"), cache_dir=tmp_path).read_bytes() == b"a 1\n"
    assert len(server.requests) == (0 if offline else 1)


def test_an_offline_value_not_understood_is_refused_in_full(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OFFLINE_ENV, "2")
    with raises_exactly(ValueError, "ROBERTA_EXT_OFFLINE='2' is not understood; use 1 (offline) or 0 (online)"):
        resolve_file("http://127.0.0.1:9/x", cache_dir=tmp_path)


def bpe_urls(server: RecordingServer) -> Gpt2BpeFiles:
    server.routes["/bpe/encoder.json"] = send_bytes(b"{}")
    server.routes["/bpe/vocab.bpe"] = send_bytes(b"#version: 0.2\n")
    return Gpt2BpeFiles(
        encoder_json=server.url("/bpe/encoder.json"),
        vocab_bpe=server.url("/bpe/vocab.bpe"),
        dictionary=server.url("/bpe/dict.txt"),
    )


def test_gpt2_bpe_files_follow_the_cache_dir_and_offline_arguments(
    server: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "from_env"))
    monkeypatch.setenv(OFFLINE_ENV, "1")
    urls = bpe_urls(server)
    files = tmp_path / "cache" / "files"
    assert resolve_gpt2_bpe_files(cache_dir=tmp_path / "cache", offline=False, urls=urls) == (
        files / short_hash(urls.encoder_json) / "encoder.json",
        files / short_hash(urls.vocab_bpe) / "vocab.bpe",
    )
    assert all_paths(tmp_path) == sorted(
        ["cache", "cache/files"]
        + [f"cache/files/{short_hash(url)}" for url in (urls.encoder_json, urls.vocab_bpe)]
        + [f"cache/files/{short_hash(urls.encoder_json)}/encoder.json"]
        + [f"cache/files/{short_hash(urls.vocab_bpe)}/vocab.bpe"]
    )


def test_gpt2_bpe_files_are_downloaded_once(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/gpt2_bpe/encoder.json"] = send_bytes(b'{"hello": 0}')
    server.routes["/gpt2_bpe/vocab.bpe"] = send_bytes(b"#version: 0.2\nh e\n")
    urls = Gpt2BpeFiles(
        encoder_json=server.url("/gpt2_bpe/encoder.json"),
        vocab_bpe=server.url("/gpt2_bpe/vocab.bpe"),
        dictionary=server.url("/gpt2_bpe/dict.txt"),
    )

    encoder_json, vocab_bpe = resolve_gpt2_bpe_files(cache_dir=tmp_path, urls=urls)
    assert (encoder_json.name, encoder_json.read_bytes()) == ("encoder.json", b'{"hello": 0}')
    assert (vocab_bpe.name, vocab_bpe.read_bytes()) == ("vocab.bpe", b"#version: 0.2\nh e\n")

    assert resolve_gpt2_bpe_files(cache_dir=tmp_path, urls=urls, offline=True) == (encoder_json, vocab_bpe)
    assert len(server.requests) == 2


# --- download ----------------------------------------------------------------------------------------


def test_a_connection_dropped_mid_body_leaves_no_file(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/big.bin"] = send_truncated(b"x" * 10_000)
    dest = tmp_path / "downloads" / "big.bin"

    with pytest.raises(DownloadError) as raised:
        download(server.url("/big.bin"), dest, retries=1, backoff=0)
    assert server.url("/big.bin") in str(raised.value)
    assert str(dest) in str(raised.value)
    assert len(server.requests) == 2  # a dropped connection is worth one more try
    assert list(dest.parent.iterdir()) == []  # neither the file nor its temporary copy


def test_server_errors_are_retried(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/flaky.bin"] = fail_then_send([503, 503], b"finally")
    dest = download(server.url("/flaky.bin"), tmp_path / "flaky.bin", backoff=0)
    assert dest.read_bytes() == b"finally"
    assert len(server.requests) == 3
    assert list(tmp_path.iterdir()) == [dest]


def test_not_found_is_not_retried(server: RecordingServer, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="HTTP 404") as raised:
        download(server.url("/missing.bin"), tmp_path / "missing.bin", backoff=0)
    assert server.url("/missing.bin") in str(raised.value)
    assert len(server.requests) == 1
    assert list(tmp_path.iterdir()) == []


def test_download_creates_missing_folders_and_returns_a_path(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/x.bin"] = send_bytes(b"x" * 100)
    dest = tmp_path / "a" / "b" / "x.bin"
    assert download(server.url("/x.bin"), str(dest)) == dest
    assert dest.read_bytes() == b"x" * 100
    assert download(server.url("/x.bin"), str(dest)) == dest
    assert all_paths(tmp_path) == ["a", "a/b", "a/b/x.bin"]


def test_download_streams_with_its_default_timeouts(
    server: RecordingServer, tmp_path: Path, get_calls: list[dict[str, object]]
) -> None:
    server.routes["/x.bin"] = send_bytes(b"x")
    download(server.url("/x.bin"), tmp_path / "x.bin")
    download(server.url("/x.bin"), tmp_path / "y.bin", timeout=2.5)
    assert get_calls == [{"stream": True, "timeout": (10.0, 60.0)}, {"stream": True, "timeout": 2.5}]


def test_a_body_without_content_length_is_kept_whole(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/x.bin"] = send_without_length(b"no length" * 1000)
    assert download(server.url("/x.bin"), tmp_path / "x.bin").read_bytes() == b"no length" * 1000


def test_a_gzip_encoded_body_is_decoded_and_its_length_checked_as_sent(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/x.json"] = send_gzip_encoded(b'{"a": 1}' * 500)
    assert download(server.url("/x.json"), tmp_path / "x.json", retries=0).read_bytes() == b'{"a": 1}' * 500
    assert len(server.requests) == 1


@pytest.mark.parametrize("status", [408, 429, 500, 503])
def test_these_statuses_are_retried(status: int, server: RecordingServer, tmp_path: Path, sleeps: list[float]) -> None:
    server.routes["/x.bin"] = fail_then_send([status], b"second time")
    assert download(server.url("/x.bin"), tmp_path / "x.bin", retries=1).read_bytes() == b"second time"
    assert len(server.requests) == 2
    assert sleeps == [1.0]


@pytest.mark.parametrize("status", [400, 403, 404, 499])
def test_these_statuses_fail_at_once_with_the_status_in_the_message(
    status: int, server: RecordingServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.routes["/x.bin"] = fail_then_send([status], b"never")
    url, dest = server.url("/x.bin"), tmp_path / "x.bin"
    reason = BaseHTTPRequestHandler.responses.get(status, ("???",))[0]
    with raises_exactly(DownloadError, f"cannot download {url} to {dest}: HTTP {status} {reason}"):
        download(url, dest)
    assert len(server.requests) == 1
    assert sleeps == []
    assert all_paths(tmp_path) == []


def test_retries_back_off_doubling_then_give_up_naming_the_attempts(
    server: RecordingServer, tmp_path: Path, sleeps: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    server.routes["/x.bin"] = fail_then_send([503] * 10, b"never")
    url, dest = server.url("/x.bin"), tmp_path / "x.bin"
    with (
        caplog.at_level(logging.WARNING, logger="roberta_ext.download"),
        raises_exactly(
            DownloadError, f"cannot download {url} to {dest}: HTTP 503 Service Unavailable (gave up after 3 attempts)"
        ),
    ):
        download(url, dest, retries=2, backoff=0.25)
    assert sleeps == [0.25, 0.5]
    assert {(record.name, record.levelno) for record in caplog.records} == {("roberta_ext.download", logging.WARNING)}
    assert [record.getMessage() for record in caplog.records] == [
        f"{url}: HTTP 503 Service Unavailable; retrying in 0.2 s",
        f"{url}: HTTP 503 Service Unavailable; retrying in 0.5 s",
    ]
    assert len(server.requests) == 3


def test_by_default_three_retries_after_one_two_and_four_seconds(
    server: RecordingServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.routes["/x.bin"] = fail_then_send([500] * 10, b"never")
    url, dest = server.url("/x.bin"), tmp_path / "x.bin"
    with raises_exactly(
        DownloadError, f"cannot download {url} to {dest}: HTTP 500 Internal Server Error (gave up after 4 attempts)"
    ):
        download(url, dest)
    assert sleeps == [1.0, 2.0, 4.0]
    assert len(server.requests) == 4


def test_no_retries_gives_up_after_one_attempt(server: RecordingServer, tmp_path: Path, sleeps: list[float]) -> None:
    server.routes["/x.bin"] = fail_then_send([502], b"never")
    url, dest = server.url("/x.bin"), tmp_path / "x.bin"
    with raises_exactly(
        DownloadError, f"cannot download {url} to {dest}: HTTP 502 Bad Gateway (gave up after 1 attempt)"
    ):
        download(url, dest, retries=0)
    assert sleeps == []


def test_a_refused_connection_is_retried_and_named(tmp_path: Path, sleeps: list[float]) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    url, dest = f"http://127.0.0.1:{port}/x.bin", tmp_path / "x.bin"
    prefix = f"cannot download {url} to {dest}: connection failed: "
    with pytest.raises(
        DownloadError, match="^" + re.escape(prefix) + r".*Connection refused.*\(gave up after 2 attempts\)$"
    ):
        download(url, dest, retries=1, backoff=0.5)
    assert sleeps == [0.5]


def test_a_malformed_url_fails_at_once_with_requests_reason(tmp_path: Path, sleeps: list[float]) -> None:
    with raises_exactly(
        DownloadError, f"cannot download http:// to {tmp_path / 'x'}: Invalid URL 'http://': No host supplied"
    ):
        download("http://", tmp_path / "x")
    assert sleeps == []


def test_a_connection_dropped_mid_body_is_named_and_leaves_nothing(
    server: RecordingServer, tmp_path: Path, sleeps: list[float]
) -> None:
    server.routes["/x.bin"] = send_truncated(b"x" * 1000)
    url, dest = server.url("/x.bin"), tmp_path / "x.bin"
    prefix = f"cannot download {url} to {dest}: connection lost during the transfer: "
    with pytest.raises(
        DownloadError,
        match="^" + re.escape(prefix) + r".*1000 bytes read, 1000 more expected.*\(gave up after 1 attempt\)$",
    ):
        download(url, dest, retries=0)
    assert all_paths(tmp_path) == []


def test_a_short_body_that_the_http_library_let_through_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleeps: list[float]
) -> None:
    def short_get(url: str, **kwargs: object) -> requests.Response:
        response = requests.Response()
        response.status_code, response.reason, response.url = 200, "OK", url
        response.headers = CaseInsensitiveDict({"Content-Length": "10"})
        response.raw = HTTPResponse(
            body=io.BytesIO(b"12345"), status=200, preload_content=False, enforce_content_length=False
        )
        return response

    monkeypatch.setattr(requests, "get", short_get)
    dest = tmp_path / "x.bin"
    with raises_exactly(
        DownloadError, f"cannot download http://host/x.bin to {dest}: received 5 of 10 bytes (gave up after 2 attempts)"
    ):
        download("http://host/x.bin", dest, retries=1)
    assert sleeps == [1.0]
    assert all_paths(tmp_path) == []


# --- progress bars -----------------------------------------------------------------------------------


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def bar_lines(text: str) -> list[str]:
    return [line.rstrip().replace("#", "█") for line in text.replace("\r", "\n").splitlines() if line.strip()]


@pytest.mark.parametrize("progress", [True, None])
def test_the_download_bar_counts_bytes_in_binary_units(
    progress: bool | None, server: RecordingServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.routes["/ten.bin"] = send_bytes(b"x" * 10240)
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    download(server.url("/ten.bin"), tmp_path / "ten.bin", progress=progress)
    assert re.fullmatch(
        r"ten\.bin: 100%\|█{10}\| 10\.0k/10\.0k \[00:00<00:00, *[\d.]+[kMG]?B/s\]", bar_lines(terminal.getvalue())[-1]
    )


def test_progress_true_reaches_every_bar(
    server: RecordingServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "roberta.tiny.zip"
    archive.write_bytes(make_zip(tiny_model_files()))
    resolve_gpt2_bpe_files(cache_dir=tmp_path / "cache", urls=bpe_urls(server), progress=True)
    resolve_model(archive, cache_dir=tmp_path / "cache", progress=True)
    lines = bar_lines(capsys.readouterr().err)
    assert list(dict.fromkeys(line.split(":")[0] for line in lines)) == [
        "encoder.json",
        "vocab.bpe",
        "unpacking roberta.tiny.zip",
    ]


@pytest.mark.parametrize("progress", [False, None])
def test_no_bar_unless_asked_or_on_a_terminal(
    progress: bool | None, server: RecordingServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server.routes["/ten.bin"] = send_bytes(b"x" * 10240)
    archive = tmp_path / "roberta.tiny.tar.gz"
    archive.write_bytes(make_tar_gz(tiny_model_files()))
    download(server.url("/ten.bin"), tmp_path / "ten.bin", progress=progress)
    resolve_model(archive, cache_dir=tmp_path / "cache", progress=progress)
    assert capsys.readouterr() == ("", "")


def test_a_remote_archive_shows_its_download_and_unpacking_bars(
    server: RecordingServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = make_tar(tiny_model_files(), mode="w")
    server.routes["/roberta.tiny.tar"] = send_bytes(body)
    url = server.url("/roberta.tiny.tar")
    resolve_model(url, cache_dir=tmp_path, progress=True)
    name = f"roberta.tiny-{short_hash(url)}-roberta.tiny.tar"
    lines = bar_lines(capsys.readouterr().err)
    size = f"{len(body) / 1024:.1f}k"
    assert [line.split("[")[0] for line in lines if "100%" in line] == [
        f"{name}: 100%|██████████| {size}/{size} ",
        f"unpacking {name}: 100%|██████████| {size}/{size} ",
    ]


# --- resolve_model: known names ----------------------------------------------------------------------


def test_known_name_is_downloaded_and_its_inner_folder_returned(
    server: RecordingServer,
    tiny_registry: dict[str, KnownModel],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cache = tmp_path / "cache"
    model_dir = resolve_model("roberta.tiny", cache_dir=cache, registry=tiny_registry, progress=True)

    assert model_dir.name == "roberta.tiny"
    assert model_dir.is_relative_to(cache / "models")
    assert_model_files(model_dir)
    assert server.requests == ["/roberta.tiny.tar.gz"]
    # Only the unpacked entry remains: no archive, no staging directory, no temporary file.
    assert list((cache / "models").iterdir()) == [model_dir.parent]
    assert list((cache / "downloads").iterdir()) == []
    assert "roberta.tiny" in capsys.readouterr().err  # the forced progress bar was shown


def test_second_call_is_served_from_the_cache(
    server: RecordingServer, tiny_registry: dict[str, KnownModel], tmp_path: Path
) -> None:
    first = resolve_model("roberta.tiny", cache_dir=tmp_path, registry=tiny_registry)
    second = resolve_model("roberta.tiny", cache_dir=tmp_path, registry=tiny_registry)
    assert first == second
    assert len(server.requests) == 1


def test_an_entry_without_its_marker_is_not_trusted(
    server: RecordingServer, tiny_registry: dict[str, KnownModel], tmp_path: Path
) -> None:
    model_dir = resolve_model("roberta.tiny", cache_dir=tmp_path, registry=tiny_registry)
    (model_dir.parent / MARKER_NAME).unlink()
    (model_dir / "model.pt").write_bytes(b"damaged")

    assert resolve_model("roberta.tiny", cache_dir=tmp_path, registry=tiny_registry) == model_dir
    assert_model_files(model_dir)
    assert len(server.requests) == 2


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_offline_uses_the_cache(
    how: str,
    server: RecordingServer,
    tiny_registry: dict[str, KnownModel],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    online = resolve_model("roberta.tiny", cache_dir=tmp_path, registry=tiny_registry)
    if how == "environment":
        monkeypatch.setenv(OFFLINE_ENV, "1")
    offline = True if how == "argument" else None

    cached = resolve_model("roberta.tiny", cache_dir=tmp_path, registry=tiny_registry, offline=offline)
    assert cached == online
    assert len(server.requests) == 1


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_offline_without_a_cached_copy_raises_at_once(
    how: str,
    server: RecordingServer,
    tiny_registry: dict[str, KnownModel],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if how == "environment":
        monkeypatch.setenv(OFFLINE_ENV, "1")
    offline = True if how == "argument" else None

    with pytest.raises(DownloadError, match="offline") as raised:
        resolve_model("roberta.tiny", cache_dir=tmp_path, registry=tiny_registry, offline=offline)
    assert tiny_registry["roberta.tiny"].url in str(raised.value)
    assert str(tmp_path / "models") in str(raised.value)
    assert server.requests == []


def test_offline_environment_value_must_be_understood(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OFFLINE_ENV, "maybe")
    with pytest.raises(ValueError, match=f"{OFFLINE_ENV}='maybe'"):
        resolve_model("roberta.base", cache_dir=tmp_path)


def test_unknown_name_lists_the_known_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="roberta.nonexistent") as raised:
        resolve_model("roberta.nonexistent", cache_dir=tmp_path)
    for name in KNOWN_MODELS:
        assert name in str(raised.value)


# --- resolve_model: paths, URLs and archives ---------------------------------------------------------


def test_an_existing_directory_passes_through(tmp_path: Path) -> None:
    model_dir = tmp_path / "my_model"
    model_dir.mkdir()
    assert resolve_model(model_dir, cache_dir=tmp_path / "cache") == model_dir
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("suffix, make_archive", [(".tar.gz", make_tar_gz), (".zip", make_zip)])
def test_a_local_archive_is_unpacked_into_the_cache(
    suffix: str, make_archive: Callable[[dict[str, bytes]], bytes], tmp_path: Path
) -> None:
    archive = tmp_path / f"roberta.tiny{suffix}"
    archive.write_bytes(make_archive(tiny_model_files()))
    cache = tmp_path / "cache"

    model_dir = resolve_model(archive, cache_dir=cache)
    assert model_dir.name == "roberta.tiny"
    assert model_dir.is_relative_to(cache / "local")
    assert_model_files(model_dir)
    assert resolve_model(str(archive), cache_dir=cache) == model_dir


def test_an_archive_without_a_single_folder_returns_its_unpacked_root(tmp_path: Path) -> None:
    archive = tmp_path / "flat.tar.gz"
    archive.write_bytes(make_tar_gz(MODEL_FILES))
    model_dir = resolve_model(archive, cache_dir=tmp_path / "cache")
    assert sorted(path.name for path in model_dir.iterdir()) == sorted([*MODEL_FILES, MARKER_NAME])


def test_a_file_that_is_not_an_archive_is_refused(tmp_path: Path) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"weights")
    with pytest.raises(ValueError, match="model.pt"):
        resolve_model(checkpoint, cache_dir=tmp_path / "cache")


def test_an_archive_url_is_cached_by_url(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/mirror/roberta.tiny.tar.gz"] = send_bytes(make_tar_gz(tiny_model_files()))
    url = server.url("/mirror/roberta.tiny.tar.gz")

    model_dir = resolve_model(url, cache_dir=tmp_path)
    assert_model_files(model_dir)
    assert resolve_model(url, cache_dir=tmp_path, offline=True) == model_dir
    assert len(server.requests) == 1


@pytest.mark.parametrize("suffix", ARCHIVE_SUFFIXES)
def test_every_archive_suffix_is_unpacked_under_its_stem(
    suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    modes = {".tar.gz": "w:gz", ".tgz": "w:gz", ".tar.bz2": "w:bz2", ".tar.xz": "w:xz", ".tar": "w"}
    files = tiny_model_files()
    archive = tmp_path / f"roberta.tiny{suffix}"
    archive.write_bytes(make_zip(files) if suffix == ".zip" else make_tar(files, modes[suffix]))
    monkeypatch.chdir(tmp_path)

    model_dir = resolve_model(archive.name, cache_dir=tmp_path / "cache")
    entry = tmp_path / "cache" / "local" / f"roberta.tiny-{local_key(archive)}"
    assert model_dir == entry / "roberta.tiny"
    assert_model_files(model_dir)
    assert json.loads((entry / MARKER_NAME).read_text()) == {"source": str(archive), "model_dir": "roberta.tiny"}
    assert (entry / MARKER_NAME).read_text() == json.dumps({"source": str(archive), "model_dir": "roberta.tiny"})


def test_the_archive_suffixes() -> None:
    assert ARCHIVE_SUFFIXES == (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")


def test_a_rewritten_archive_is_unpacked_again(tmp_path: Path) -> None:
    archive = tmp_path / "roberta.tiny.tar.gz"
    archive.write_bytes(make_tar_gz(tiny_model_files()))
    first = resolve_model(archive, cache_dir=tmp_path / "cache")
    archive.write_bytes(make_tar_gz({"roberta.tiny/model.pt": b"new weights"}))
    second = resolve_model(archive, cache_dir=tmp_path / "cache")
    assert second == tmp_path / "cache" / "local" / f"roberta.tiny-{local_key(archive)}" / "roberta.tiny"
    assert second != first
    assert (second / "model.pt").read_bytes() == b"new weights"
    assert_model_files(first)


def test_a_remote_archive_entry_is_named_by_stem_and_url_hash_with_its_marker(
    server: RecordingServer, tmp_path: Path
) -> None:
    server.routes["/m/roberta.tiny.tar.gz"] = send_bytes(make_tar_gz(tiny_model_files()))
    url = server.url("/m/roberta.tiny.tar.gz")
    model_dir = resolve_model(url, cache_dir=tmp_path)
    entry = tmp_path / "models" / f"roberta.tiny-{short_hash(url)}"
    assert model_dir == entry / "roberta.tiny"
    assert (entry / MARKER_NAME).read_text() == json.dumps({"source": url, "model_dir": "roberta.tiny"})
    assert all_paths(tmp_path) == sorted(
        ["downloads", "models", f"models/{entry.name}", f"models/{entry.name}/{MARKER_NAME}"]
        + [f"models/{entry.name}/roberta.tiny"]
        + [f"models/{entry.name}/roberta.tiny/{name}" for name in MODEL_FILES]
    )


def test_a_url_without_an_archive_suffix_keeps_its_whole_name(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/weights/latest"] = send_bytes(make_tar_gz(tiny_model_files()))
    url = server.url("/weights/latest")
    assert resolve_model(url, cache_dir=tmp_path) == tmp_path / "models" / f"latest-{short_hash(url)}" / "roberta.tiny"


def test_an_https_url_is_a_remote_archive(tmp_path: Path) -> None:
    url = "https://example.invalid/models/roberta.tiny.tgz"
    entry = tmp_path / "models" / f"roberta.tiny-{short_hash(url)}"
    with raises_exactly(DownloadError, f"cannot download {url} to {entry}: {OFFLINE_CAUSE}"):
        resolve_model(url, cache_dir=tmp_path, offline=True)


def test_offline_known_name_names_its_url_and_entry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OFFLINE_ENV, "yes")
    url = KNOWN_MODELS["roberta.base"].url
    entry = tmp_path / "models" / f"roberta.base-{short_hash(url)}"
    with raises_exactly(DownloadError, f"cannot download {url} to {entry}: {OFFLINE_CAUSE}"):
        resolve_model("roberta.base", cache_dir=tmp_path)


def test_a_failed_archive_download_leaves_nothing(server: RecordingServer, tmp_path: Path) -> None:
    url = server.url("/gone.tar.gz")
    with pytest.raises(DownloadError, match=re.escape(": HTTP 404 Not Found") + "$"):
        resolve_model(url, cache_dir=tmp_path)
    assert all_paths(tmp_path) == ["downloads"]


def test_a_corrupt_remote_archive_is_not_kept(server: RecordingServer, tmp_path: Path) -> None:
    server.routes["/bad.tar.gz"] = send_bytes(b"not an archive at all" * 50)
    url = server.url("/bad.tar.gz")
    with raises_exactly(ArchiveError, f"cannot unpack {url}: not a readable tar or zip archive (invalid header)"):
        resolve_model(url, cache_dir=tmp_path)
    assert all_paths(tmp_path) == ["downloads", "models"]


def test_a_directory_path_with_a_tilde_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "my_model").mkdir()
    assert resolve_model("~/my_model", cache_dir=tmp_path / "cache") == tmp_path / "my_model"


def test_a_local_directory_wins_over_a_known_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "roberta.base").mkdir()
    assert resolve_model("roberta.base", cache_dir=tmp_path / "cache", offline=True) == Path("roberta.base")


def test_a_file_that_is_not_an_archive_is_refused_in_full(tmp_path: Path) -> None:
    checkpoint = tmp_path / "model.pt"
    checkpoint.write_bytes(b"weights")
    with raises_exactly(
        ValueError,
        f"{str(checkpoint)!r} is a file, not a model directory or an archive "
        "(.tar.gz, .tgz, .tar.bz2, .tar.xz, .tar, .zip)",
    ):
        resolve_model(checkpoint, cache_dir=tmp_path / "cache")


def test_an_unknown_name_lists_the_registrys_names_sorted(tmp_path: Path) -> None:
    registry = {name: KnownModel(url=f"http://host/{name}.tar.gz", description=name) for name in ("zeta", "alpha")}
    with raises_exactly(
        ValueError,
        "'nope' is not an existing directory or archive, an http(s) URL, or a known model name; "
        "known names: alpha, zeta",
    ):
        resolve_model("nope", cache_dir=tmp_path, registry=registry)


# --- unpacking ---------------------------------------------------------------------------------------


def unpack_local(tmp_path: Path, name: str, body: bytes) -> tuple[Path, Path]:
    archive = tmp_path / name
    archive.write_bytes(body)
    return archive, resolve_model(archive, cache_dir=tmp_path / "cache")


def test_a_zip_is_recognised_by_its_content_not_its_name(tmp_path: Path) -> None:
    _, model_dir = unpack_local(tmp_path, "roberta.tiny.tar.gz", make_zip(tiny_model_files()))
    assert_model_files(model_dir)


@pytest.mark.parametrize(
    "files, links",
    [
        pytest.param({"model.pt": b"w"}, {}, id="one-file"),
        pytest.param({"a/model.pt": b"w", "b/model.pt": b"w"}, {}, id="two-folders"),
    ],
)
def test_without_exactly_one_real_folder_the_entry_itself_is_returned(
    files: dict[str, bytes], links: dict[str, str], tmp_path: Path
) -> None:
    archive, model_dir = unpack_local(tmp_path, "flat.tar.gz", make_tar(files, links=links))
    assert model_dir == tmp_path / "cache" / "local" / f"flat-{local_key(archive)}"
    assert json.loads((model_dir / MARKER_NAME).read_text())["model_dir"] == "."


def test_a_single_top_level_link_to_a_folder_is_not_taken_as_the_model_folder(tmp_path: Path) -> None:
    archive, model_dir = unpack_local(tmp_path, "linked.tar", make_tar({}, mode="w", links={"here": "."}))
    assert model_dir == tmp_path / "cache" / "local" / f"linked-{local_key(archive)}"


def test_a_member_with_two_dots_inside_a_name_is_fine(tmp_path: Path) -> None:
    _, model_dir = unpack_local(tmp_path, "dots.zip", make_zip({"m/v1..v2.txt": b"ok", "m/..hidden": b"ok"}))
    assert sorted(path.name for path in model_dir.iterdir()) == ["..hidden", "v1..v2.txt"]


@pytest.mark.parametrize(
    "name, make",
    [
        ("../evil", lambda files: make_tar(files)),
        ("m/../../evil", lambda files: make_zip(files)),
        ("/evil", lambda files: make_tar(files)),
    ],
)
def test_a_member_escaping_the_destination_is_refused_in_full(
    name: str, make: Callable[[dict[str, bytes]], bytes], tmp_path: Path
) -> None:
    archive = tmp_path / "source" / "bad.archive.tar"
    archive.parent.mkdir()
    archive.write_bytes(make({"m/model.pt": b"w", name: b"owned"}))
    with raises_exactly(
        ArchiveError, f"refusing to unpack {archive}: member {name!r} would land outside the destination"
    ):
        resolve_model(archive, cache_dir=tmp_path / "cache")
    assert all_paths(tmp_path) == ["cache", "cache/local", "source", "source/bad.archive.tar"]


def test_an_absolute_zip_member_is_refused(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(zipfile.ZipInfo("/evil"), b"owned")
    path = tmp_path / "abs.zip"
    path.write_bytes(buffer.getvalue())
    with raises_exactly(ArchiveError, f"refusing to unpack {path}: member '/evil' would land outside the destination"):
        resolve_model(path, cache_dir=tmp_path / "cache")


def test_a_link_out_of_the_destination_is_refused_with_tarfiles_reason(tmp_path: Path) -> None:
    archive = tmp_path / "link.tar.gz"
    archive.write_bytes(make_tar({"m/model.pt": b"w"}, links={"m/evil": "../../../evil"}))
    with raises_exactly(
        ArchiveError,
        f"refusing to unpack {archive}: 'm/evil' would link to '{tmp_path / 'cache' / 'evil'}', "
        "which is outside the destination",
    ):
        resolve_model(archive, cache_dir=tmp_path / "cache")
    assert all_paths(tmp_path) == ["cache", "cache/local", "link.tar.gz"]


def corrupt_zip(kind: str) -> bytes:
    compression = zipfile.ZIP_DEFLATED if kind == "deflate" else zipfile.ZIP_STORED
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=compression) as archive:
        archive.writestr("m/model.pt", b"weights " * 200)
    body = bytearray(buffer.getvalue())
    body[60:70] = b"\xff" * 10
    return bytes(body)


@pytest.mark.parametrize(
    "name, body, reason",
    [
        ("short.tar.gz", make_tar_gz(tiny_model_files())[:100], "truncated header"),
        ("junk.tar", b"garbage" * 100, "invalid header"),
        ("crc.zip", corrupt_zip("stored"), "Bad CRC-32 for file 'm/model.pt'"),
        ("inflate.zip", corrupt_zip("deflate"), None),
        ("cut.tar.gz", make_tar_gz({"m/model.pt": bytes(range(256)) * 64})[:-20], None),
    ],
    ids=["short.tar.gz", "junk.tar", "crc.zip", "inflate.zip", "cut.tar.gz"],  # gzip's header holds the time
)
def test_an_unreadable_archive_is_named_in_full_and_leaves_nothing(
    name: str, body: bytes, reason: str | None, tmp_path: Path
) -> None:
    archive = tmp_path / name
    archive.write_bytes(body)
    prefix = f"cannot unpack {archive}: not a readable tar or zip archive ("
    pattern = re.escape(prefix + reason + ")") if reason else re.escape(prefix) + r".+\)"
    with pytest.raises(ArchiveError, match="^" + pattern + "$"):
        resolve_model(archive, cache_dir=tmp_path / "cache")
    assert all_paths(tmp_path) == ["cache", "cache/local", name]


def test_an_entry_left_without_its_marker_is_replaced(tmp_path: Path) -> None:
    archive = tmp_path / "roberta.tiny.zip"
    archive.write_bytes(make_zip(tiny_model_files()))
    entry = tmp_path / "cache" / "local" / f"roberta.tiny-{local_key(archive)}"
    (entry / "stale").mkdir(parents=True)
    (entry / "stale" / "model.pt").write_bytes(b"old")
    assert resolve_model(archive, cache_dir=tmp_path / "cache") == entry / "roberta.tiny"
    assert sorted(path.name for path in entry.iterdir()) == [MARKER_NAME, "roberta.tiny"]


@pytest.mark.parametrize("finished", [True, False])
def test_losing_the_race_to_another_process(finished: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "roberta.tiny.zip"
    archive.write_bytes(make_zip(tiny_model_files()))
    entry = tmp_path / "cache" / "local" / f"roberta.tiny-{local_key(archive)}"
    real_unpack = cache._unpack

    def unpack_while_another_finishes(archive: Path, dest: Path, *, source: str, progress: bool | None) -> None:
        real_unpack(archive, dest, source=source, progress=progress)
        (entry / "theirs").mkdir(parents=True)
        if finished:
            (entry / MARKER_NAME).write_text(json.dumps({"source": source, "model_dir": "theirs"}))

    monkeypatch.setattr(cache, "_unpack", unpack_while_another_finishes)
    if finished:
        assert resolve_model(archive, cache_dir=tmp_path / "cache") == entry / "theirs"
    else:
        with raises_exactly(
            FileExistsError, f"{str(entry)!r} exists and is not an empty directory; refusing to overwrite it"
        ):
            resolve_model(archive, cache_dir=tmp_path / "cache")
    assert sorted(path.name for path in entry.parent.iterdir()) == [entry.name]


@pytest.mark.parametrize(
    "files, links",
    [
        pytest.param({"../evil": b"owned"}, {}, id="dot-dot"),
        pytest.param({"roberta.tiny/../../evil": b"owned"}, {}, id="dot-dot-inside-folder"),
        pytest.param({"/tmp/evil": b"owned"}, {}, id="absolute"),
        pytest.param({}, {"roberta.tiny/evil": "../../../evil"}, id="link-outside"),
    ],
)
def test_a_tar_member_escaping_the_destination_is_refused(
    files: dict[str, bytes], links: dict[str, str], tmp_path: Path
) -> None:
    archive = tmp_path / "source" / "malicious.tar.gz"
    archive.parent.mkdir()
    archive.write_bytes(make_tar_gz({**tiny_model_files(), **files}, links=links))
    cache = tmp_path / "cache"

    with pytest.raises(ArchiveError, match="malicious.tar.gz"):
        resolve_model(archive, cache_dir=cache)
    # Nothing was kept: no cache entry, no staging directory, and no "evil" anywhere.
    assert all_paths(tmp_path) == ["cache", "cache/local", "source", "source/malicious.tar.gz"]


def test_a_zip_member_escaping_the_destination_is_refused(tmp_path: Path) -> None:
    archive = tmp_path / "source" / "malicious.zip"
    archive.parent.mkdir()
    archive.write_bytes(make_zip({**tiny_model_files(), "../evil": b"owned"}))

    with pytest.raises(ArchiveError, match="'../evil'"):
        resolve_model(archive, cache_dir=tmp_path / "cache")
    assert all_paths(tmp_path) == ["cache", "cache/local", "source", "source/malicious.zip"]


def test_a_corrupt_archive_is_named_in_the_error(tmp_path: Path) -> None:
    archive = tmp_path / "broken.tar.gz"
    archive.write_bytes(make_tar_gz(tiny_model_files())[:100])
    with pytest.raises(ArchiveError, match="broken.tar.gz"):
        resolve_model(archive, cache_dir=tmp_path / "cache")
