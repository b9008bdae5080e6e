"""Running a command: expected failures become one line on stderr and an exit status, SIGTERM
and Ctrl-C leave no half-written output, and the torch threads a command sets are given back."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool

from ..checkpoints import CheckpointError
from ..corpus.reading import CorpusError
from ..tokenizers.dictionary import DictionaryFormatError
from ..tokenizers.gpt2_bpe import GPT2BPEFormatError

__all__ = ["CommandError", "run_command", "say"]


class CommandError(Exception):
    """A failure a command reports in one line (a model that cannot be loaded, options that do
    not go together); the message names what is wrong."""


EXPECTED = (
    CommandError,
    CorpusError,
    CheckpointError,
    GPT2BPEFormatError,
    DictionaryFormatError,
    OSError,
    BrokenProcessPool,
)
"""What a command reports as ``PROG: error: MESSAGE`` and exit status 1, not as a traceback."""


def say(prog: str, message: str) -> None:
    """``PROG: MESSAGE`` on stderr, at once."""
    print(f"{prog}: {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while a command runs, so its cleanup (finally) still runs."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_command(
    prog: str,
    body: Callable[[], int],
    *,
    interrupted: str = "no output file was written or changed",
    threads: int | None = None,
) -> int:
    """Run a command; expected failures (:data:`EXPECTED`) become one line on stderr and exit
    status 1, Ctrl-C a line saying ``interrupted`` and 130.

    SIGTERM becomes ``SystemExit(128 + 15)`` while ``body`` runs, so that its cleanup (temporary
    files removed) runs too. ``threads`` sets torch's CPU threads for the run and gives the
    caller's setting back after (a test, a notebook).

    >>> run_command("demo", lambda: 0)
    0
    """
    previous = _set_threads(threads)
    try:
        with _sigterm_as_exit():
            return body()
    except EXPECTED as error:
        if isinstance(error, BrokenPipeError):  # e.g. `bpe-encode ... | head`: not worth a message
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        say(prog, f"error: {error}")
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        say(prog, f"interrupted; {interrupted}")
        return 130
    finally:
        _set_threads(previous)


def _set_threads(threads: int | None) -> int | None:
    """Set torch's CPU threads (nothing for None); the setting it had, or None."""
    if threads is None:
        return None
    import torch  # only the model commands set threads: the others need not import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    return previous
