"""The download cache: known model names, downloads and the on-disk cache. It sits at the bottom of
the package, as tiktoken's ``load.py`` does: tokenizers, corpus tools and checkpoints all use it.

This module turns what a user types (``"roberta.large"``, a model directory, a ``.tar.gz`` archive, an
``https://`` URL) into a local directory holding ``model.pt`` and ``dict.txt``, downloading and unpacking
into a cache when needed.

Guarantees:

- A cache entry is either complete or absent. Files are downloaded to a temporary name and renamed into
  place only once their size matches ``Content-Length``; archives are unpacked into a staging directory
  that gets a marker file last and is then renamed into place. An interrupted run leaves no half-written
  file that a later run could mistake for a good one.
- Archives are unpacked safely: members with absolute paths or ``..`` are refused, and tar archives go
  through :func:`tarfile.data_filter`, which also refuses links pointing outside the destination.
- Offline mode (``offline=True`` or ``ROBERTA_EXT_OFFLINE=1``) never touches the network: what is not in
  the cache raises at once.

Cache layout (under :func:`default_cache_dir`)::

    models/<archive name>-<hash of URL>/           an unpacked remote archive, plus a completion marker
    local/<archive name>-<hash of path, mtime, size>/   an unpacked local archive
    files/<hash of URL>/<file name>                a single downloaded file (e.g. encoder.json)
    downloads/                                     archives while they download; removed once unpacked
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import sys
import tarfile
import time
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from urllib.parse import urlsplit

import requests
from tqdm import tqdm
from tqdm.utils import CallbackIOWrapper

from .atomic import atomic_directory, atomic_write
from .errors import RobertaExtError

logger = logging.getLogger(__name__)

__all__ = [
    "ARCHIVE_SUFFIXES",
    "CACHE_ENV",
    "GPT2_BPE",
    "KNOWN_MODELS",
    "OFFLINE_ENV",
    "ArchiveError",
    "DownloadError",
    "Gpt2BpeFiles",
    "KnownModel",
    "StoreError",
    "default_cache_dir",
    "download",
    "resolve_file",
    "resolve_gpt2_bpe_files",
    "resolve_model",
]

CACHE_ENV = "ROBERTA_EXT_CACHE"
"""Environment variable naming the cache directory; it wins over ``XDG_CACHE_HOME``."""

OFFLINE_ENV = "ROBERTA_EXT_OFFLINE"
"""Environment variable that, set to ``1``, forbids all network access (like ``offline=True``)."""

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")
"""Local files with these endings are unpacked by :func:`resolve_model`; other files are refused."""

MARKER_NAME = ".roberta_ext-complete.json"
"""Written last into an unpacked cache entry; an entry without it is not trusted."""


@dataclass(frozen=True, kw_only=True)
class KnownModel:
    """A released model archive that :func:`resolve_model` can fetch by name."""

    url: str
    """Where the archive is downloaded from. fairseq's archives hold one folder with model.pt, dict.txt
    and NOTE."""

    description: str
    """One line for humans: what the model is."""


# The same names and URLs as fairseq 0.12's `RobertaModel.hub_models()` (fairseq/models/roberta/model.py) and
# `XLMRModel.hub_models()`, plain http:// included, so that a name means the same checkpoint here as in fairseq.
KNOWN_MODELS: Mapping[str, KnownModel] = MappingProxyType(
    {
        "roberta.base": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/roberta.base.tar.gz",
            description="RoBERTa base: 12 layers, 768 hidden, 125M parameters",
        ),
        "roberta.large": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/roberta.large.tar.gz",
            description="RoBERTa large: 24 layers, 1024 hidden, 355M parameters",
        ),
        "roberta.large.mnli": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/roberta.large.mnli.tar.gz",
            description="RoBERTa large fine-tuned on MNLI (classification head 'mnli')",
        ),
        "roberta.large.wsc": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/roberta.large.wsc.tar.gz",
            description="RoBERTa large fine-tuned on the Winograd Schema Challenge (WSC)",
        ),
        # fairseq 0.12's `XLMRModel.hub_models()` (fairseq/models/roberta/model_xlmr.py). The archives hold
        # model.pt, dict.txt and sentencepiece.bpe.model.
        "xlmr.base": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/xlmr.base.tar.gz",
            description="XLM-R base: 100 languages, 12 layers, 768 hidden, 270M parameters",
        ),
        "xlmr.large": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/xlmr.large.tar.gz",
            description="XLM-R large: 100 languages, 24 layers, 1024 hidden, 560M parameters",
        ),
        "xlmr.xl": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/xlmr/xlmr.xl.tar.gz",
            description="XLM-R XL: 100 languages, 36 pre-LN layers, 2560 hidden, 3.5B parameters",
        ),
        "xlmr.xxl": KnownModel(
            url="http://dl.fbaipublicfiles.com/fairseq/models/xlmr/xlmr.xxl.tar.gz",
            description="XLM-R XXL: 100 languages, 48 pre-LN layers, 4096 hidden, 10.7B parameters",
        ),
    }
)


@dataclass(frozen=True, kw_only=True)
class Gpt2BpeFiles:
    """Where the GPT-2 byte-level BPE files used by RoBERTa are downloaded from."""

    encoder_json: str
    """``encoder.json``: BPE token -> GPT-2 id."""

    vocab_bpe: str
    """``vocab.bpe``: the ranked BPE merges."""

    dictionary: str
    """``dict.txt``: fairseq's dictionary over GPT-2 ids (index = line number + 4). Fetch it with
    :func:`resolve_file`; model archives carry their own copy."""


# fairseq 0.12's DEFAULT_ENCODER_JSON / DEFAULT_VOCAB_BPE (fairseq/data/encoders/gpt2_bpe.py), and the
# dict.txt published beside them.
GPT2_BPE = Gpt2BpeFiles(
    encoder_json="https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/encoder.json",
    vocab_bpe="https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/vocab.bpe",
    dictionary="https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/dict.txt",
)


class StoreError(RobertaExtError):
    """The download cache's error: a file it could not fetch, an archive it would not unpack."""


class DownloadError(StoreError, OSError):
    """A file could not be fetched into the cache; the message names the URL, the cache path and why.
    An ``OSError`` too, as it always was."""

    def __init__(self, url: str, path: Path, cause: str) -> None:
        super().__init__(f"cannot download {url} to {path}: {cause}")
        self.url = url
        self.path = path


class ArchiveError(StoreError, ValueError):
    """An archive is unreadable, or holds a member that would land outside the destination.
    A ``ValueError`` too, as it always was."""


def default_cache_dir() -> Path:
    """The cache directory: ``$ROBERTA_EXT_CACHE``, else ``$XDG_CACHE_HOME/roberta_ext``, else
    ``~/.cache/roberta_ext``.

    >>> default_cache_dir().name  # doctest: +SKIP
    'roberta_ext'
    """
    if configured := os.environ.get(CACHE_ENV):
        return Path(configured).expanduser()
    # The XDG spec says an empty XDG_CACHE_HOME counts as unset.
    xdg_cache = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg_cache).expanduser() if xdg_cache else Path.home() / ".cache"
    return base / "roberta_ext"


def download(
    url: str,
    dest_path: str | os.PathLike[str],
    *,
    timeout: float | tuple[float, float] = (10.0, 60.0),
    retries: int = 3,
    backoff: float = 1.0,
    progress: bool | None = None,
) -> Path:
    """Download ``url`` to ``dest_path``, which appears only once the whole file has arrived.

    Args:
        timeout: seconds to wait for the connection and then for each read; one number sets both.
        retries: how many more attempts after connection errors, truncated bodies and HTTP 5xx/408/429.
            Other HTTP errors (404, 403, ...) fail at once.
        backoff: seconds before the first retry; it doubles with every further retry.
        progress: show a progress bar on stderr; ``None`` shows it only when stderr is a terminal.

    Raises:
        DownloadError: naming the URL, the destination and the cause. No partial file is left behind.

    >>> download(GPT2_BPE.vocab_bpe, "/tmp/vocab.bpe")  # doctest: +SKIP
    PosixPath('/tmp/vocab.bpe')
    """
    dest_path = Path(dest_path)
    dest_path.parent.mkdir(parents=True, exist_ok=True)
    attempt = 0
    while True:
        try:
            _download_once(url, dest_path, timeout=timeout, progress=progress)
            return dest_path
        except _TransientError as err:
            if attempt >= retries:
                attempts = "1 attempt" if attempt == 0 else f"{attempt + 1} attempts"
                raise DownloadError(url, dest_path, f"{err} (gave up after {attempts})") from err
            delay = backoff * 2**attempt
            logger.warning("%s: %s; retrying in %.1f s", url, err, delay)
            time.sleep(delay)
            attempt += 1


def resolve_file(
    url: str,
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    progress: bool | None = None,
) -> Path:
    """The cached copy of the single file at ``url``, downloaded first if it is not cached yet.

    >>> resolve_file(GPT2_BPE.dictionary)  # doctest: +SKIP
    PosixPath('/home/me/.cache/roberta_ext/files/5c1ff1e4a1d9b1a2/dict.txt')
    """
    cache = _cache_root(cache_dir)
    path = cache / "files" / _short_hash(url) / _url_file_name(url)
    # Only `download` creates this path, and only with the whole file: existing means complete.
    if path.is_file():
        return path
    if _is_offline(offline):
        raise _offline_error(url, path)
    return download(url, path, progress=progress)


def resolve_gpt2_bpe_files(
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    urls: Gpt2BpeFiles = GPT2_BPE,
    progress: bool | None = None,
) -> tuple[Path, Path]:
    """Paths of the GPT-2 BPE ``(encoder.json, vocab.bpe)``, downloaded into the cache if needed.

    ``urls`` points elsewhere, e.g. at a mirror.

    >>> encoder_json, vocab_bpe = resolve_gpt2_bpe_files()  # doctest: +SKIP
    >>> encoder_json.name, vocab_bpe.name  # doctest: +SKIP
    ('encoder.json', 'vocab.bpe')
    """
    encoder_json = resolve_file(urls.encoder_json, cache_dir=cache_dir, offline=offline, progress=progress)
    vocab_bpe = resolve_file(urls.vocab_bpe, cache_dir=cache_dir, offline=offline, progress=progress)
    return encoder_json, vocab_bpe


def resolve_model(
    name_or_path: str | os.PathLike[str],
    *,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    registry: Mapping[str, KnownModel] = KNOWN_MODELS,
    progress: bool | None = None,
) -> Path:
    """A local model directory (holding model.pt, dict.txt, ...) for a name, path or URL.

    Tried in this order:

    1. an ``http://`` or ``https://`` URL of an archive: downloaded and unpacked into the cache;
    2. an existing directory: returned as it is;
    3. an existing archive file (``.tar.gz``, ``.tgz``, ``.tar.bz2``, ``.tar.xz``, ``.tar``, ``.zip``):
       unpacked into the cache, again whenever the file's size or modification time changes;
    4. a name in ``registry`` (by default :data:`KNOWN_MODELS`): its archive is downloaded and unpacked.

    A local directory therefore wins over a known name with the same spelling. When an archive holds
    exactly one top-level directory, as fairseq's do (``roberta.large/model.pt``), that directory is
    returned; otherwise the directory the archive was unpacked into.

    Raises:
        ValueError: ``name_or_path`` is none of the above; the message lists the known names.
        DownloadError: the download failed, or offline mode is on and the model is not cached.
        ArchiveError: the archive is unreadable or unsafe (a member would land outside the cache).

    >>> resolve_model("roberta.large")  # doctest: +SKIP
    PosixPath('/home/me/.cache/roberta_ext/models/roberta.large-3d2f0e1b9c8a7d6e/roberta.large')
    >>> resolve_model("checkpoints/my_run")  # doctest: +SKIP
    PosixPath('checkpoints/my_run')
    """
    cache = _cache_root(cache_dir)
    spelled = os.fspath(name_or_path)
    if spelled.startswith(("http://", "https://")):
        return _resolve_remote_archive(spelled, cache, offline=_is_offline(offline), progress=progress)

    path = Path(spelled).expanduser()
    if path.is_dir():
        return path
    if path.is_file():
        if not path.name.endswith(ARCHIVE_SUFFIXES):
            raise ValueError(
                f"{spelled!r} is a file, not a model directory or an archive ({', '.join(ARCHIVE_SUFFIXES)})"
            )
        return _resolve_local_archive(path.resolve(), cache, progress=progress)

    if spelled in registry:
        url = registry[spelled].url
        return _resolve_remote_archive(url, cache, offline=_is_offline(offline), progress=progress)

    raise ValueError(
        f"{spelled!r} is not an existing directory or archive, an http(s) URL, or a known model name; "
        f"known names: {', '.join(sorted(registry))}"
    )


# --- downloading -------------------------------------------------------------------------------------


class _TransientError(Exception):
    """A failure that may go away if we try again (dropped connection, overloaded server)."""


# What requests raises when a connection cannot be made, times out, or breaks off mid-body.
_CONNECTION_FAILURES = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)


def _is_retryable_status(status: int) -> bool:
    # 408 Request Timeout and 429 Too Many Requests are the client-side codes that invite a retry.
    return status >= 500 or status in (408, 429)


def _download_once(url: str, dest_path: Path, *, timeout: float | tuple[float, float], progress: bool | None) -> None:
    try:
        response = requests.get(url, stream=True, timeout=timeout)
    except _CONNECTION_FAILURES as err:
        raise _TransientError(f"connection failed: {err}") from err
    except requests.RequestException as err:  # a malformed URL, too many redirects, ...
        raise DownloadError(url, dest_path, str(err)) from err

    with response:
        if response.status_code != 200:
            cause = f"HTTP {response.status_code} {response.reason}"
            if _is_retryable_status(response.status_code):
                raise _TransientError(cause)
            raise DownloadError(url, dest_path, cause)

        content_length = response.headers.get("Content-Length")
        expected_bytes = int(content_length) if content_length is not None else None
        # A unique temporary file beside the destination, renamed onto it only once the whole body
        # has arrived: two processes fetching the same file cannot write into each other's copy, and
        # any failure (KeyboardInterrupt included) removes it.
        with atomic_write(dest_path, "wb") as out:
            with _progress_bar(total=expected_bytes, desc=dest_path.name, progress=progress) as bar:
                try:
                    for chunk in response.iter_content(chunk_size=1 << 20):
                        out.write(chunk)
                        bar.update(len(chunk))
                except _CONNECTION_FAILURES as err:
                    raise _TransientError(f"connection lost during the transfer: {err}") from err
            # Checked here rather than trusting urllib3 to notice a short body (not every version does).
            # raw.tell() counts bytes as sent, which is what Content-Length describes even when requests
            # undoes a Content-Encoding.
            received_bytes = response.raw.tell()
            if expected_bytes is not None and received_bytes != expected_bytes:
                raise _TransientError(f"received {received_bytes} of {expected_bytes} bytes")


def _progress_bar(*, total: int | None, desc: str, progress: bool | None) -> tqdm:
    show = sys.stderr.isatty() if progress is None else progress
    return tqdm(
        total=total,
        desc=desc,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        disable=not show,
    )


def _offline_error(url: str, cache_path: Path) -> DownloadError:
    return DownloadError(
        url,
        cache_path,
        f"offline mode is on (offline=True or {OFFLINE_ENV}=1) and it is not in the cache; "
        "run once online, or pass a local directory or archive instead",
    )


def _is_offline(offline: bool | None) -> bool:
    if offline is not None:
        return offline
    value = os.environ.get(OFFLINE_ENV, "")
    normalized = value.strip().lower()
    if normalized in ("", "0", "false", "no", "off"):
        return False
    if normalized in ("1", "true", "yes", "on"):
        return True
    raise ValueError(f"{OFFLINE_ENV}={value!r} is not understood; use 1 (offline) or 0 (online)")


# --- the cache ---------------------------------------------------------------------------------------


def _cache_root(cache_dir: str | os.PathLike[str] | None) -> Path:
    return Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _url_file_name(url: str) -> str:
    # The URL's last path segment, made safe as a file name: it keeps cache entries recognisable.
    name = urlsplit(url).path.rsplit("/", 1)[-1]
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "download"


def _archive_stem(file_name: str) -> str:
    for suffix in ARCHIVE_SUFFIXES:
        if file_name.endswith(suffix):
            return file_name[: -len(suffix)]
    return file_name


def _resolve_remote_archive(url: str, cache: Path, *, offline: bool, progress: bool | None) -> Path:
    file_name = _url_file_name(url)
    entry = cache / "models" / f"{_archive_stem(file_name)}-{_short_hash(url)}"
    if (model_dir := _completed_model_dir(entry)) is not None:
        return model_dir
    if offline:
        raise _offline_error(url, entry)
    archive = cache / "downloads" / f"{entry.name}-{file_name}"
    try:
        download(url, archive, progress=progress)
        return _unpack_into_cache(archive, entry, source=url, progress=progress)
    finally:
        # Only the unpacked copy is kept: keeping the archive too would double the disk use, and a
        # corrupt one would otherwise be reused by every later attempt.
        archive.unlink(missing_ok=True)


def _resolve_local_archive(archive: Path, cache: Path, *, progress: bool | None) -> Path:
    stat = archive.stat()
    # Keyed by path, mtime and size, so an archive rewritten in place is unpacked again.
    key = _short_hash(f"{archive}\0{stat.st_mtime_ns}\0{stat.st_size}")
    entry = cache / "local" / f"{_archive_stem(archive.name)}-{key}"
    if (model_dir := _completed_model_dir(entry)) is not None:
        return model_dir
    return _unpack_into_cache(archive, entry, source=str(archive), progress=progress)


def _completed_model_dir(entry: Path) -> Path | None:
    try:
        marker = json.loads((entry / MARKER_NAME).read_text())
    except FileNotFoundError:
        return None
    return entry / marker["model_dir"]


def _unpack_into_cache(archive: Path, entry: Path, *, source: str, progress: bool | None) -> Path:
    """Unpack ``archive`` as cache entry ``entry`` and return the model directory inside it."""
    if entry.exists() and _completed_model_dir(entry) is None:
        # Left by something other than this code (a rename cannot leave a half entry): start afresh.
        shutil.rmtree(entry)
    # Unpack beside the entry, then rename: the entry appears whole or not at all.
    try:
        with atomic_directory(entry) as staging:
            _unpack(archive, staging, source=source, progress=progress)
            top_level = list(staging.iterdir())
            single_folder = len(top_level) == 1 and top_level[0].is_dir() and not top_level[0].is_symlink()
            model_dir = top_level[0].name if single_folder else "."
            # The marker goes in last; it is what `_completed_model_dir` trusts.
            (staging / MARKER_NAME).write_text(json.dumps({"source": source, "model_dir": model_dir}))
    except FileExistsError:
        # Another process finished the same entry first; its copy is as good as ours.
        if (finished := _completed_model_dir(entry)) is None:
            raise
        return finished
    return entry / model_dir


def _unpack(archive: Path, dest: Path, *, source: str, progress: bool | None) -> None:
    """Unpack a tar (any compression) or zip ``archive`` into ``dest``; ``source`` names it in errors."""
    is_zip = zipfile.is_zipfile(archive)
    size = archive.stat().st_size
    with (
        open(archive, "rb") as raw,
        _progress_bar(total=size, desc=f"unpacking {archive.name}", progress=progress) as bar,
    ):
        # Progress counts archive bytes read, so it moves smoothly even when one member is 1 GB.
        reader = CallbackIOWrapper(bar.update, raw, "read")
        try:
            if is_zip:
                with zipfile.ZipFile(reader) as zip_file:
                    for info in zip_file.infolist():
                        _check_member_name(info.filename, source)
                    zip_file.extractall(dest)
            else:
                # "r|*": one sequential pass over the (possibly compressed) stream, no seeking back.
                with tarfile.open(fileobj=reader, mode="r|*") as tar_file:
                    tar_file.extractall(dest, members=_checked_tar_members(tar_file, source), filter="data")
        except tarfile.FilterError as err:  # a link pointing outside, a device file, ...
            raise ArchiveError(f"refusing to unpack {source}: {err}") from err
        except (tarfile.TarError, zipfile.BadZipFile, EOFError, zlib.error) as err:
            raise ArchiveError(f"cannot unpack {source}: not a readable tar or zip archive ({err})") from err


def _checked_tar_members(tar_file: tarfile.TarFile, source: str) -> Iterator[tarfile.TarInfo]:
    for member in tar_file:
        _check_member_name(member.name, source)
        yield member


def _check_member_name(name: str, source: str) -> None:
    # tarfile's data filter would quietly strip a leading "/" and zipfile quietly drops ".." parts;
    # an archive that tries either is broken or hostile, so refuse it instead.
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts:
        raise ArchiveError(f"refusing to unpack {source}: member {name!r} would land outside the destination")
