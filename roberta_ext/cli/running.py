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
from ..download import StoreError
from ..embedding.locking import OutputBusy
from ..errors import RobertaExtError, lookup
from ..export import ExportError
from ..inference.head_outputs import HeadError
from ..inference.inputs import InputError
from ..tokenizers.errors import TokenizerError

__all__ = ["EXIT_STATUS", "CommandError", "exit_status", "run_command", "say"]


class CommandError(RobertaExtError):
    """A failure a command reports in one line (a model that cannot be loaded, options that do
    not go together); the message names what is wrong. The command-line layer's error."""


EXIT_STATUS: dict[type[BaseException], int] = {
    CommandError: 1,
    CheckpointError: 1,  # a model file that cannot be used
    StoreError: 1,  # a download or archive that failed (DownloadError is an OSError too)
    TokenizerError: 1,  # vocabulary files that cannot be read
    CorpusError: 1,  # input rows that cannot be processed
    HeadError: 1,  # the model lacks the head the command needs
    InputError: 1,  # a text the model cannot take (too long, no mask to fill)
    OutputBusy: 1,  # another run is writing the output
    ExportError: 1,
    RobertaExtError: 1,  # any other error the package raises on purpose
    OSError: 1,  # a file that cannot be read or written, a broken pipe
    BrokenProcessPool: 1,  # a worker process died (killed for memory)
}
"""What a command reports as ``PROG: error: MESSAGE`` with an exit status, not as a traceback:
the status of an error's class or its nearest listed ancestor (:func:`exit_status`). Ctrl-C
exits 130, SIGTERM 143 and a usage error 2 (argparse's); docs/index.md lists them."""


def exit_status(error: BaseException) -> int | None:
    """The exit status of ``error`` by :data:`EXIT_STATUS` (its class's, else its nearest
    listed ancestor's), or None for an error that is a bug: it is shown as a traceback.

    >>> exit_status(CorpusError("a.tsv:3: no column 2")), exit_status(KeyError("x")) is None
    (1, True)
    """
    return lookup(EXIT_STATUS, error)


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
    """Run a command; expected failures (:data:`EXIT_STATUS`) become one line on stderr and
    their exit status, Ctrl-C a line saying ``interrupted`` and 130.

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
    except Exception as error:
        status = exit_status(error)
        if status is None:
            raise
        if isinstance(error, BrokenPipeError):  # e.g. `bpe-encode ... | head`: not worth a message
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return status
        say(prog, f"error: {error}")
        return status
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
