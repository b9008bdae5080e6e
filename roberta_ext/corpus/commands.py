"""What the corpus commands (``bpe-encode``, ``train-bpe``, ``tokenize``, ``prepare-tagging``) share:
argument types, and running a command so that expected failures become one line on stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from concurrent.futures.process import BrokenProcessPool

from ..tokenizers.dictionary import DictionaryFormatError
from ..tokenizers.gpt2_bpe import GPT2BPEFormatError
from .reading import CorpusError

__all__ = ["non_negative_int", "positive_int", "run_command"]


def positive_int(text: str) -> int:
    """An argparse ``type`` for an integer >= 1.

    >>> positive_int("3")
    3
    """
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type`` for an integer >= 0.

    >>> non_negative_int("0")
    0
    """
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


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


def run_command(prog: str, body: Callable[[], int]) -> int:
    """Run a command; expected failures become one line on stderr and exit status 1 (130: Ctrl-C).

    SIGTERM becomes ``SystemExit(128 + 15)`` while ``body`` runs, so that its cleanup (temporary
    files removed) runs too.

    >>> run_command("demo", lambda: 0)
    0
    """
    try:
        with _sigterm_as_exit():
            return body()
    except (CorpusError, GPT2BPEFormatError, DictionaryFormatError, OSError, BrokenProcessPool) as error:
        if isinstance(error, BrokenPipeError):  # e.g. `bpe-encode ... | head`: not worth a message
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted; no output file was written or changed", file=sys.stderr)
        return 130
