"""A process pool for corpus jobs: chunks in, results back in input order, memory bounded.

:class:`OrderedRunner` runs ``job(state, chunk)`` over :class:`~roberta_ext.corpus.reading.Chunk` s
in worker processes, each holding its own ``state`` (a tokenizer, say) built once by a factory.
"""

from __future__ import annotations

import os
import signal
import warnings
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from .reading import Chunk

__all__ = ["DEFAULT_WORKERS", "OrderedRunner"]

DEFAULT_WORKERS = min(20, os.cpu_count() or 1)
"""fairseq's script defaults to 20 processes; more than the machine's cores only costs memory."""

_IN_FLIGHT_PER_WORKER = 2  # keeps every worker busy while the parent reads and writes

_worker_state: Any = None  # set in each pool worker by _init_worker


def _init_worker(factory: Callable[..., Any] | None, args: tuple) -> None:
    # Ctrl-C reaches the whole process group; the parent handles it (cancels what is queued and
    # cleans up), so workers ignore it rather than each print a traceback. SIGTERM must still
    # kill a worker, not run the handler the parent may have installed before the fork.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    warnings.simplefilter("ignore")  # the parent already showed the vocabulary's warnings once
    global _worker_state
    _worker_state = factory(*args) if factory is not None else None


def _run_in_worker(job: Callable[[Any, Chunk], Any], chunk: Chunk) -> Any:
    return job(_worker_state, chunk)


class OrderedRunner:
    """``job(state, chunk)`` over chunks, results in input order, at most a few chunks in memory.

    ``Pool.imap`` would do the ordering, but its feeder thread reads the whole input ahead of the
    workers; here the parent reads a chunk only when one of a bounded number of slots is free.
    A ``ProcessPoolExecutor`` rather than a ``Pool``: a worker that dies (killed for memory, or
    its initializer failed) raises ``BrokenProcessPool`` instead of hanging the run forever.
    With ``workers <= 1`` everything runs in this process (no pool, no pickling). ``job`` must
    be a module-level function (or a ``functools.partial`` of one), so that it pickles.

    >>> from roberta_ext.corpus.reading import Chunk
    >>> chunks = [Chunk(1, ([b"a", b"b"],), 4), Chunk(3, ([b"c"],), 2)]
    >>> with OrderedRunner(1) as runner:
    ...     [(chunk.first_line, rows) for chunk, rows in runner.map(lambda state, chunk: len(chunk.columns[0]), chunks)]
    [(1, 2), (3, 1)]
    """

    def __init__(
        self,
        workers: int,
        factory: Callable[..., Any] | None = None,
        args: tuple = (),
        *,
        local_state: Any = None,
    ) -> None:
        """Workers build their state with ``factory(*args)``; in-process, ``local_state`` is used
        if given (the caller often has it already)."""
        self.workers = workers
        self._executor: ProcessPoolExecutor | None = None
        if workers <= 1:
            if local_state is None and factory is not None:
                local_state = factory(*args)
            self._state = local_state
        else:
            self._executor = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(factory, args))

    def __enter__(self) -> OrderedRunner:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._executor is None:
            return
        if exc_type is None:
            self._executor.shutdown(wait=True)
            return
        # After a failure or an interrupt nothing the workers do is wanted: stop them now instead
        # of waiting for running chunks. Waiting could also hang for good when Ctrl-C landed in
        # the middle of submit() and left the executor's bookkeeping half-updated. SIGKILL, not
        # SIGTERM: a worker forked just before cannot lose it (Python drops the signals that reach
        # a child before its fork() returns, and the child would then wait for work for good).
        processes = list((getattr(self._executor, "_processes", None) or {}).values())
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.kill()
        for process in processes:
            process.join(timeout=10)

    def map(self, job: Callable[[Any, Chunk], Any], chunks: Iterable[Chunk]) -> Iterator[tuple[Chunk, Any]]:
        """``(chunk, job(state, chunk))`` for each chunk, in the order of ``chunks``."""
        if self._executor is None:
            for chunk in chunks:
                yield chunk, job(self._state, chunk)
            return
        pending: deque[tuple[Chunk, Future]] = deque()
        for chunk in chunks:
            pending.append((chunk, self._executor.submit(_run_in_worker, job, chunk)))
            if len(pending) >= _IN_FLIGHT_PER_WORKER * self.workers:
                done, future = pending.popleft()
                yield done, _result(future)
        while pending:
            done, future = pending.popleft()
            yield done, _result(future)


def _result(future: Future) -> Any:
    try:
        return future.result()
    except BrokenProcessPool as error:
        raise BrokenProcessPool(f"a worker process died unexpectedly (out of memory?): {error}") from None
