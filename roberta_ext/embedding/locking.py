"""One writer per output file: an exclusive lock on ``OUT``, and the removal of the temporaries a
killed writer left beside it.

``roberta-ext embed`` and ``merge`` hold :func:`output_lock` on ``OUT`` for the whole run: from
before the model is loaded to after the parts folder is removed. A second run on the same output
is refused at once, naming the process that holds it (or, with ``--wait``, waits for it and then
finds the output finished, or its parts to resume). Each shard writes its own file
(``OUT.shard-I-of-N.npy``), hence takes its own lock: shards never wait for each other.

How: ``fcntl.flock`` on ``.OUT.lock`` beside the output. The kernel drops a lock when its process
dies, however it dies, so a lock is never stale; the file holds the holder's process id and host,
for the refusal to name. The holder deletes the file as it lets go, *while still holding the
lock*, and whoever gets the lock checks that the file it locked is still the one at that name
(else the holder deleted it meanwhile, and it tries again on the file there now): without that
check, a run waiting on the deleted file and a newcomer creating a new one would both hold "the"
lock. A run killed with SIGKILL leaves the file: harmless, the next run locks it and writes its
own process id into it.

Not ``fcntl.lockf``/``fcntl(F_SETLK)``: those locks belong to the process, not to the open file,
so a process never conflicts with itself, and closing *any* descriptor of the file drops them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..atomic import is_temporary_of
from ..errors import RobertaExtError

__all__ = ["OutputBusy", "Wait", "lock_path", "output_lock", "remove_stale_temporaries"]


class OutputBusy(RobertaExtError, ValueError):
    """Another process holds the output's lock; the message names it and the output. The lock's
    own error (it was a ``CorpusError``, whose ``ValueError`` it keeps for callers that catch that)."""

    def __init__(self, message: str, *, holder: dict[str, object]) -> None:
        super().__init__(message)
        self.holder = holder


def lock_path(output: Path) -> Path:
    """``emb.npy`` -> ``.emb.npy.lock``: hidden, so that ``merge``'s ``emb.shard-*`` never finds it.

    >>> lock_path(Path("out/emb.shard-1-of-4.npy")).name
    '.emb.shard-1-of-4.npy.lock'
    """
    return output.with_name(f".{output.name}.lock")


def _is_current(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (the holder before us may have deleted it)."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    opened = os.fstat(fd)
    return (opened.st_dev, opened.st_ino) == (named.st_dev, named.st_ino)


def _holder(fd: int) -> dict[str, object]:
    """What the holder wrote into the lock file (``{}`` if it has not yet: it writes just after locking)."""
    for _ in range(20):
        try:
            found = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
        except ValueError:
            found = None
        if isinstance(found, dict):
            return found
        time.sleep(0.01)
    return {}


def _describe(holder: dict[str, object]) -> str:
    if "pid" not in holder:
        return "another run (a process that did not write its id)"
    return f"another run (process {holder['pid']} on host {holder.get('host', 'unknown')})"


Wait = bool | Callable[[str], None]
"""What to do when another process holds the lock: ``False``, refuse (:class:`OutputBusy`); ``True``,
wait for it; a function, wait for it after calling the function once with a message naming it."""


def _acquire(path: Path, output: Path, wait: Wait) -> int:
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o666)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                message = f"{_describe(holder)} is writing {output}"
                if not wait:
                    raise OutputBusy(f"{message}; run with --wait to wait for it to finish", holder=holder) from None
                if callable(wait):
                    wait(f"{message}; waiting for it to finish")
                    wait = True  # say it once, even if the lock changes hands meanwhile
                fcntl.flock(fd, fcntl.LOCK_EX)
            if _is_current(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the holder deleted the file as it let go: lock the one at that name now


@contextlib.contextmanager
def output_lock(output: Path, *, wait: Wait = False) -> Iterator[Path]:
    """Hold the exclusive lock on ``output`` (creating its folder) for the ``with`` block.

    When another process holds it: raises :class:`OutputBusy` naming that process and
    ``output``, or with ``wait`` blocks until it is free (see :data:`Wait`). Yields the lock
    file's path.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     with output_lock(Path(folder, "emb.npy")) as held:
    ...         try:
    ...             with output_lock(Path(folder, "emb.npy")):
    ...                 pass
    ...         except OutputBusy as error:
    ...             print(error.holder["pid"] == os.getpid(), "is writing" in str(error))
    ...     print(held.exists())
    True True
    False
    """
    path = lock_path(output)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = _acquire(path, output, wait)
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode("utf-8"), 0)
        yield path
    finally:
        # Delete it while still holding the lock (see _acquire); then close, which lets go.
        with contextlib.suppress(OSError):
            if _is_current(fd, path):
                path.unlink()
        os.close(fd)


def remove_stale_temporaries(destination: Path) -> list[Path]:
    """Delete the atomic writer's temporaries of ``destination`` (``.NAME.XXXXXXXX.tmp``, files
    only) that a killed write left behind; returns them. Call it only while holding
    ``destination``'s :func:`output_lock`: then no writer of ours is writing one.

    Only that exact name's: ``emb.npy``'s are not ``emb.npy.json``'s nor a shard's.
    """
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(destination.parent):
            if is_temporary_of(entry.name, destination) and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed
