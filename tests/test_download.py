"""Tests for roberta_ext.download: names, downloads, the cache and safe unpacking.

Everything is served by a local HTTP server on 127.0.0.1 whose routes each test sets up, and which
records every request, so "served from the cache" and "no network attempt" are asserted, not assumed.
"""

from __future__ import annotations

import io
import re
import tarfile
import threading
import zipfile
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from roberta_ext.download import (
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
    resolve_gpt2_bpe_files,
    resolve_model,
)
from tests.peers import require_installed

# What a fairseq release archive holds, in miniature: one top-level folder with these files.
MODEL_FILES = {
    "model.pt": b"\x80\x02 stands in for a checkpoint; the store never reads it",
    "dict.txt": b"hello 7\nworld 5\n",
    "NOTE": b"A tiny test model.\n",
}

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


# --- known names ---------------------------------------------------------------------------------------


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


# --- downloads ---------------------------------------------------------------------------------------


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


# --- paths, URLs and archives ------------------------------------------------------------------------


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


# --- the cache directory -----------------------------------------------------------------------------


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
