"""OrderedRunner: results in input order from worker processes, and a failed run leaves no worker behind."""

from __future__ import annotations

import os
import signal
import time
import warnings
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from roberta_ext.corpus import pool
from roberta_ext.corpus.pool import OrderedRunner
from roberta_ext.corpus.reading import Chunk

CHUNKS = [Chunk(1 + 2 * i, ([f"line {2 * i}".encode(), f"line {2 * i + 1}".encode()],), 14) for i in range(9)]


def _prefix(state: str, chunk: Chunk) -> list[str]:
    return [state + line.decode() for line in chunk.columns[0]]


def _fail_on_line_5(state: object, chunk: Chunk) -> int:
    if chunk.first_line == 5:
        raise ValueError(f"chunk at line {chunk.first_line} is bad")
    if chunk.first_line > 5:
        time.sleep(30)  # still busy when the run fails: no worker leaves by the executor's own shutdown
    return chunk.first_line


def _pid(state: object, chunk: Chunk) -> int:
    return os.getpid()


def _die(state: object, chunk: Chunk) -> None:
    os._exit(3)  # as the kernel's OOM killer would end it: no exception, no result


def _deaf_to_sigterm() -> None:
    # A worker that does not die of SIGTERM: what a worker is when the signal reached it before
    # its fork() returned (CPython clears the signals pending then).
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process: neither gone nor a zombie. (Not ``Process.is_alive()``:
    the executor's own thread may reap a worker first, and then it reads as alive for good.)"""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("workers", [1, 3])
def test_results_come_in_input_order_with_each_workers_state(workers):
    with OrderedRunner(workers, str, (">",)) as runner:
        results = list(runner.map(_prefix, CHUNKS))
        processes = list(runner._executor._processes.values()) if runner._executor is not None else []
    assert [chunk for chunk, _ in results] == CHUNKS
    assert [line for _, lines in results for line in lines] == [f">line {i}" for i in range(18)]
    assert len(processes) == (workers if workers > 1 else 0)
    assert [process.exitcode for process in processes] == [0] * len(processes)  # a clean exit waits for them


def test_one_worker_runs_in_this_process_on_the_state_given():
    with OrderedRunner(1, str, (">",), local_state="local: ") as runner:
        assert runner._executor is None
        assert [lines for _, lines in runner.map(_prefix, CHUNKS[:1])] == [["local: line 0", "local: line 1"]]
        assert [pid for _, pid in runner.map(lambda state, chunk: os.getpid(), CHUNKS[:2])] == [os.getpid()] * 2
    with OrderedRunner(1) as runner:
        assert [first for _, first in runner.map(lambda state, chunk: (state, chunk.first_line), CHUNKS[:2])] == [
            (None, 1),
            (None, 3),
        ]


def test_at_most_two_chunks_a_worker_are_read_ahead_of_the_results():
    read: list[int] = []

    def chunks():
        for chunk in CHUNKS:
            read.append(chunk.first_line)
            yield chunk

    with OrderedRunner(2) as runner:
        results = runner.map(_pid, chunks())
        next(results)
        assert len(read) == 4
        assert len(list(results)) == len(CHUNKS) - 1


def test_a_worker_that_dies_is_one_clear_error():
    with pytest.raises(BrokenProcessPool, match=r"^a worker process died unexpectedly \(out of memory\?\): "):
        with OrderedRunner(2) as runner:
            list(runner.map(_die, CHUNKS))


def test_a_worker_ignores_ctrl_c_dies_of_sigterm_shows_no_warnings_and_holds_its_state(monkeypatch):
    """``_init_worker`` and ``_run_in_worker`` called here, in the test's process (what a worker runs first, then
    per chunk), with the signal handlers, warning filters and worker state put back after."""
    monkeypatch.setattr(pool, "_worker_state", "unset")
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        signal.signal(signal.SIGTERM, lambda signum, frame: None)  # as run_command's handler, inherited by a fork
        with warnings.catch_warnings():
            pool._init_worker(str, (">",))
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
            assert warnings.filters[0][0] == "ignore"
        assert pool._run_in_worker(_prefix, CHUNKS[1]) == [">line 2", ">line 3"]
        pool._init_worker(None, ())
        assert pool._run_in_worker(lambda state, chunk: (state, chunk), CHUNKS[0]) == (None, CHUNKS[0])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_a_failed_run_kills_every_worker_even_one_that_ignores_sigterm():
    with pytest.raises(ValueError, match="chunk at line 5 is bad"):
        with OrderedRunner(3, _deaf_to_sigterm) as runner:
            assert runner._executor is not None
            results = runner.map(_fail_on_line_5, CHUNKS)
            try:
                assert [first_line for _, first_line in results] == [1, 3]
            finally:
                processes = list(runner._executor._processes.values())
    assert len(processes) == 3
    assert not [process.pid for process in processes if _running(process.pid)]
