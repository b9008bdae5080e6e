"""Atomic files and directories: a reader sees the old version or the whole new one, never half.

Every file roberta_ext writes for someone to read later (``dict.txt``, vocabularies, checkpoints,
corpus outputs, downloads, model folders) goes through here, so that an error, a Ctrl-C or a
SIGTERM turned into ``SystemExit`` in the middle of a write never leaves half a file under a real
name, and an existing file of that name stays as it was.

How: the data goes to a temporary *sibling* (same folder, hence same file system, so that the
final ``os.replace`` is a rename, which POSIX makes atomic), is flushed to disk (``fsync``: after
a crash the rename must not point at blocks never written), and is then renamed onto the real
name. On any exception, ``KeyboardInterrupt`` included, the temporary is removed instead.
Temporaries are hidden and say whose they are: ``.NAME.XXXXXXXX.tmp``.

A new file gets the permissions ``open(path, "w")`` would give it (0o666 minus the umask); a
replaced file keeps its permissions, as it would with ``open``. A new folder gets those of
``os.mkdir`` (0o777 minus the umask).

* :func:`atomic_write` — a file object on the temporary; :func:`write_text_atomic` and
  :func:`write_bytes_atomic` for data already in memory; :func:`atomic_path` — the temporary's
  path, for writers that take a file name (``torch.save``, ``safetensors``).
* :class:`AtomicFiles` — several files that appear together at :meth:`AtomicFiles.commit`
  (e.g. ``encoder.json`` + ``vocab.bpe`` + ``dict.txt``), or none of them.
* :func:`atomic_directory` — a temporary sibling folder renamed into place whole.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

__all__ = [
    "AtomicFiles",
    "atomic_directory",
    "atomic_path",
    "atomic_write",
    "is_temporary_of",
    "write_bytes_atomic",
    "write_text_atomic",
]

StrPath = str | os.PathLike[str]

_TEMPORARY_SUFFIX = ".tmp"


def _temporary_name(destination: Path) -> Path:
    """A fresh hidden name beside ``destination``: ``.NAME.XXXXXXXX.tmp``."""
    return destination.with_name(f".{destination.name}.{secrets.token_hex(4)}{_TEMPORARY_SUFFIX}")


def is_temporary_of(name: str, destination: Path) -> bool:
    """Whether a file called ``name`` is one of this module's temporaries for ``destination``
    (``.NAME.XXXXXXXX.tmp``), e.g. left behind by a write that was killed.

    >>> is_temporary_of(".out.npy.0f3a9c1e.tmp", Path("out.npy"))
    True
    >>> is_temporary_of(".out.npy.json.0f3a9c1e.tmp", Path("out.npy"))  # out.npy.json's
    False
    """
    prefix = f".{destination.name}."
    token = name[len(prefix) : -len(_TEMPORARY_SUFFIX)]
    return (
        name.startswith(prefix)
        and name.endswith(_TEMPORARY_SUFFIX)
        and len(token) == 8
        and all(c in "0123456789abcdef" for c in token)
    )


def _create_temporary_file(destination: Path) -> tuple[int, Path]:
    """Create an empty temporary file beside ``destination``; return its descriptor and path.

    Created with mode 0o666, so the umask makes its permissions those of ``open(path, "w")``
    (``tempfile.mkstemp`` would make it owner-only). ``O_EXCL``: never another's file.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    for _ in range(100):
        temporary = _temporary_name(destination)
        try:
            return os.open(temporary, flags, 0o666), temporary
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(destination))


def _create_temporary_directory(destination: Path) -> Path:
    """Create an empty temporary folder beside ``destination``, with ``os.mkdir``'s permissions."""
    for _ in range(100):
        temporary = _temporary_name(destination)
        try:
            temporary.mkdir(0o777)
            return temporary
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(destination))


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_directory(path: Path) -> None:
    """Make a rename inside ``path`` durable; best effort (not every system can open a folder)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _move_into_place(temporary: Path, destination: Path) -> None:
    """Rename a complete, synced temporary file onto ``destination``, keeping the old file's mode."""
    with contextlib.suppress(FileNotFoundError):
        os.chmod(temporary, stat.S_IMODE(os.stat(destination).st_mode))
    os.replace(temporary, destination)
    _fsync_directory(destination.parent)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


@contextlib.contextmanager
def atomic_path(path: StrPath) -> Iterator[Path]:
    """The path of an empty temporary sibling of ``path``, moved onto ``path`` on success.

    For writers that take a file *name* (``torch.save``, ``safetensors.torch.save_file``): write
    the yielded path however you like. When the ``with`` block ends normally the file there is
    fsync'd and renamed onto ``path``; when it raises (anything, ``KeyboardInterrupt`` included)
    it is removed and ``path`` is untouched. Missing parent folders are created.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with atomic_path(os.path.join(folder, "model.pt")) as temporary:
    ...         _ = temporary.write_bytes(b"weights")
    ...         print(temporary.name.startswith(".model.pt."), os.listdir(folder) == [temporary.name])
    ...     print(os.listdir(folder))
    True True
    ['model.pt']
    """
    destination = Path(path)
    destination.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = _create_temporary_file(destination)
    os.close(fd)
    try:
        yield temporary
        _fsync_file(temporary)
        _move_into_place(temporary, destination)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def atomic_write(
    path: StrPath,
    mode: Literal["w", "wb"] = "w",
    *,
    encoding: str = "utf-8",
    newline: str | None = None,
) -> Iterator[IO[Any]]:
    """A file object open on a temporary sibling of ``path`` that becomes ``path`` on success.

    When the ``with`` block ends normally the file is closed, fsync'd and renamed onto ``path``
    (replacing any file there); when it raises (anything, ``KeyboardInterrupt`` included) the
    temporary is removed and ``path`` is untouched. ``mode`` is ``"w"`` (text, in ``encoding``,
    ``newline`` as for ``open``) or ``"wb"``. Missing parent folders are created.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "notes.txt")
    ...     with atomic_write(path) as file:
    ...         _ = file.write("all or nothing\\n")
    ...     print(os.listdir(folder), repr(open(path).read()))
    ['notes.txt'] 'all or nothing\\n'
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_write writes a whole new file: mode must be 'w' or 'wb', not {mode!r}")
    with atomic_path(path) as temporary:
        file: IO[Any]
        if mode == "wb":
            file = open(temporary, "wb")  # noqa: SIM115  (closed by the caller's with-block) (closed below)
        else:
            file = open(temporary, "w", encoding=encoding, newline=newline)  # noqa: SIM115  (closed by the caller's with-block)
        with file:
            yield file


def write_text_atomic(path: StrPath, text: str, *, encoding: str = "utf-8", newline: str | None = None) -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`).

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "sub", "vocab.bpe")
    ...     write_text_atomic(path, "#version: 0.2\\n")
    ...     print(repr(open(path).read()))
    '#version: 0.2\\n'
    """
    with atomic_write(path, "w", encoding=encoding, newline=newline) as file:
        file.write(text)


def write_bytes_atomic(path: StrPath, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`).

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "spiece.model")
    ...     write_bytes_atomic(path, b"\\x00\\x01")
    ...     print(open(path, "rb").read())
    b'\\x00\\x01'
    """
    with atomic_write(path, "wb") as file:
        file.write(data)


class AtomicFiles:
    """Several files written under temporary names and renamed into place together by :meth:`commit`.

    :meth:`temporary` creates an empty temporary file beside a destination (whose folder must
    exist) and returns its path; write it however you like, and close it. :meth:`commit` syncs
    every temporary to disk and only then renames each onto its destination, so no file appears
    before all are complete. Leaving the ``with`` block without a commit (an error, Ctrl-C, a
    SIGTERM turned into ``SystemExit``) deletes the temporaries: no half-written file under a
    real name, and existing files of those names untouched.

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with AtomicFiles() as files:
    ...         for name in ("train.bpe", "valid.bpe"):
    ...             with open(files.temporary(os.path.join(folder, name)), "w") as file:
    ...                 _ = file.write(name)
    ...         print(len(os.listdir(folder)), [p for p in os.listdir(folder) if not p.startswith(".")])
    ...         files.commit()
    ...     print(sorted(os.listdir(folder)))
    2 []
    ['train.bpe', 'valid.bpe']
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def __enter__(self) -> AtomicFiles:
        return self

    def temporary(self, destination: StrPath) -> Path:
        """Create and return an empty temporary file that :meth:`commit` moves to ``destination``.

        Raises ``FileNotFoundError`` ("output directory does not exist") when the destination's
        folder is missing, and ``OSError`` ("cannot write output") naming the destination when the
        file cannot be created.
        """
        destination = Path(destination)
        directory = destination.parent
        if not directory.is_dir():
            raise FileNotFoundError(errno.ENOENT, "output directory does not exist", str(directory))
        try:
            fd, temporary = _create_temporary_file(destination)
        except OSError as error:
            raise OSError(error.errno, f"cannot write output ({error.strerror})", str(destination)) from None
        os.close(fd)
        self._pending.append((temporary, destination))
        return temporary

    def commit(self) -> None:
        """Rename every temporary onto its destination (after syncing them all to disk)."""
        for temporary, _ in self._pending:
            _fsync_file(temporary)
        while self._pending:
            temporary, destination = self._pending[0]
            _move_into_place(temporary, destination)
            self._pending.pop(0)

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        for temporary, _ in self._pending:
            temporary.unlink(missing_ok=True)
        self._pending.clear()


def _refuse_existing(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{str(target)!r} exists and is not an empty directory; refusing to overwrite it")


def _fsync_tree(root: Path) -> None:
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            if path.is_file() and not path.is_symlink():
                _fsync_file(path)
        _fsync_directory(Path(folder))


@contextlib.contextmanager
def atomic_directory(path: StrPath, *, overwrite: bool = False) -> Iterator[Path]:
    """A temporary sibling folder of ``path``, renamed into place whole when the block succeeds.

    Fill the yielded folder; when the ``with`` block ends normally its files are synced to disk
    and the folder is renamed to ``path``. When it raises (``KeyboardInterrupt`` included), the
    folder is removed and ``path`` is untouched. Missing parent folders are created.

    An existing ``path`` that is not an empty folder is refused with ``FileExistsError`` naming
    it, both on entering (before any work) and at the rename (if something filled it meanwhile),
    unless ``overwrite``: then the old ``path`` is moved aside, the new folder renamed in, and the
    old one deleted (it is put back if the rename fails).

    >>> import os, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     target = os.path.join(folder, "model")
    ...     with atomic_directory(target) as staging:
    ...         _ = (staging / "config.json").write_text("{}")
    ...     print(os.listdir(folder), os.listdir(target))
    ['model'] ['config.json']
    """
    target = Path(path)
    if not overwrite:
        _refuse_existing(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = _create_temporary_directory(target)
    try:
        yield staging
        _fsync_tree(staging)
        aside = None
        if overwrite and (target.exists() or target.is_symlink()):
            aside = _temporary_name(target)
            os.replace(target, aside)
        try:
            os.replace(staging, target)
        except OSError as error:
            if aside is not None:
                os.replace(aside, target)
            if error.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise FileExistsError(
                    f"{str(target)!r} exists and is not an empty directory; refusing to overwrite it"
                ) from None
            raise
        _fsync_directory(target.parent)
        if aside is not None:
            _remove(aside)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
