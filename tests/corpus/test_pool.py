"""OrderedRunner: results in input order from worker processes, and a failed run leaves no worker behind."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

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
    assert [chunk for chunk, _ in results] == CHUNKS
    assert [line for _, lines in results for line in lines] == [f">line {i}" for i in range(18)]


def test_a_failed_run_kills_every_worker_even_one_that_ignores_sigterm():
    with pytest.raises(ValueError, match="chunk at line 5 is bad"):
        with OrderedRunner(2, _deaf_to_sigterm) as runner:
            assert runner._executor is not None
            results = runner.map(_fail_on_line_5, CHUNKS)
            try:
                assert [first_line for _, first_line in results] == [1, 3]
            finally:
                processes = list(runner._executor._processes.values())
    assert len(processes) == 2
    assert not [process.pid for process in processes if _running(process.pid)]
