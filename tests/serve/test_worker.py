"""The batching worker alone, without HTTP: which jobs share a batch (same task, within the
padded-token and row budgets, in arrival order), what a full queue, a request's slot, a
cancelled job and a failing batch do, and that stopping finishes every accepted job."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError

import pytest

from roberta_ext.serve import BatchingWorker, Job, Overloaded, ShuttingDown, Task
from roberta_ext.serve import worker as worker_module


class Recorder:
    """Tasks whose batches are recorded; the first batch waits for :attr:`release`."""

    def __init__(self) -> None:
        self.batches: list[list[object]] = []
        self.release = threading.Event()
        self.holding = threading.Event()

    def task(self, key: str, *, fail_on: object = None) -> Task:
        def compute(items):
            if not self.batches and not self.release.is_set():
                self.holding.set()
                assert self.release.wait(30)
            self.batches.append(list(items))
            if fail_on is not None and fail_on in items:
                raise ValueError(f"cannot compute {fail_on!r}")
            return [(key, item) for item in items]

        return Task(key, compute)


def held_worker(recorder: Recorder, **options) -> BatchingWorker:
    """A started worker busy with a first job (``"hold"``) until ``recorder.release`` is set."""
    worker = BatchingWorker(**{"max_batch_tokens": 100, **options})
    worker.start()
    worker.submit(Job(recorder.task("hold"), ["hold"], [1]))
    assert recorder.holding.wait(30)
    return worker


def test_jobs_of_one_task_share_a_batch_within_the_budget_in_arrival_order():
    recorder = Recorder()
    worker = held_worker(recorder, max_batch_tokens=40, max_batch_requests=6)
    embed, other = recorder.task("embed"), recorder.task("other")
    jobs = [
        worker.submit(Job(embed, ["a1", "a2"], [5, 5])),
        worker.submit(Job(other, ["o1"], [3])),
        worker.submit(Job(embed, ["b1"], [10])),  # 3 rows x 10 <= 40
        worker.submit(Job(embed, ["c1", "c2"], [4, 4])),  # 5 rows x 10 > 40: the next batch
        worker.submit(Job(embed, ["d1"], [2])),
    ]
    recorder.release.set()
    assert [list(job.future.result(timeout=30)) for job in jobs][2] == [("embed", "b1")]
    worker.stop()
    assert recorder.batches == [["hold"], ["a1", "a2", "b1"], ["o1"], ["c1", "c2", "d1"]]
    assert list(jobs[0].future.result()) == [("embed", "a1"), ("embed", "a2")]


def test_a_job_longer_than_the_budget_runs_alone():
    recorder = Recorder()
    worker = held_worker(recorder, max_batch_tokens=10)
    task = recorder.task("embed")
    jobs = [worker.submit(Job(task, [name], [length])) for name, length in (("long", 50), ("short", 2))]
    recorder.release.set()
    for job in jobs:
        job.future.result(timeout=30)
    worker.stop()
    assert recorder.batches[1:] == [["long"], ["short"]]


def test_a_full_queue_refuses_at_once_and_frees_its_slots():
    recorder = Recorder()
    worker = held_worker(recorder, max_concurrent_requests=2)
    task = recorder.task("embed")
    queued = worker.submit(Job(task, ["a"], [1]))
    with pytest.raises(Overloaded, match=r"all request slots are taken \(--max-concurrent-requests 2\)"):
        worker.submit(Job(task, ["b"], [1]))
    recorder.release.set()
    queued.future.result(timeout=30)
    worker.submit(Job(task, ["c"], [1])).future.result(timeout=30)
    worker.stop()


def test_a_cancelled_job_leaves_the_queue_and_frees_its_slot_at_once():
    """A request answered 504 cancels its job: the job is gone from the queue, and its slot free
    for the next request, while the worker is still busy (not when it reaches the job)."""
    recorder = Recorder()
    worker = held_worker(recorder, max_concurrent_requests=2)
    task = recorder.task("embed")
    given_up = worker.submit(Job(task, ["gone"], [1]))
    assert given_up.future.cancel()
    assert worker.queue_depth == 0
    kept = worker.submit(Job(task, ["kept"], [1]))  # the slot the cancelled job held
    recorder.release.set()
    assert list(kept.future.result(timeout=30)) == [("embed", "kept")]
    worker.stop()
    assert recorder.batches == [["hold"], ["kept"]]
    with pytest.raises(CancelledError):
        given_up.future.result()


def test_a_request_holds_one_slot_for_its_jobs_until_it_releases_it():
    """The server admits a request before reading it; its jobs run in that slot, which stays
    taken until the request ends (release), and is freed once however often it is released."""
    worker = BatchingWorker(max_batch_tokens=100, max_concurrent_requests=1)
    worker.start()
    recorder = Recorder()
    recorder.release.set()  # no holding here
    task = recorder.task("embed")
    slot = worker.admit()
    with pytest.raises(Overloaded):
        worker.admit()
    with pytest.raises(Overloaded):
        worker.submit(Job(task, ["own"], [1]))  # a job without a slot needs one of its own
    job = worker.submit(Job(task, ["a"], [1]), slot=slot)
    assert list(job.future.result(timeout=30)) == [("embed", "a")]
    with pytest.raises(Overloaded):
        worker.admit()  # the request has not ended
    slot.release()
    slot.release()
    second = worker.admit()
    with pytest.raises(Overloaded):
        worker.admit()  # released twice, freed once
    second.release()
    worker.stop()
    with pytest.raises(ShuttingDown):
        worker.admit()


def test_a_failing_batch_is_rerun_job_by_job_and_only_the_culprit_fails():
    recorder = Recorder()
    worker = held_worker(recorder)
    task = recorder.task("embed", fail_on="bad")
    jobs = [worker.submit(Job(task, [name], [1])) for name in ("ok1", "bad", "ok2")]
    recorder.release.set()
    assert list(jobs[0].future.result(timeout=30)) == [("embed", "ok1")]
    with pytest.raises(ValueError, match="cannot compute 'bad'"):
        jobs[1].future.result(timeout=30)
    assert list(jobs[2].future.result(timeout=30)) == [("embed", "ok2")]
    assert worker.submit(Job(task, ["later"], [1])).future.result(timeout=30)
    worker.stop()
    assert recorder.batches[1:] == [["ok1", "bad", "ok2"], ["ok1"], ["bad"], ["ok2"], ["later"]]


def test_stop_finishes_every_accepted_job_then_refuses():
    recorder = Recorder()
    worker = held_worker(recorder)
    task = recorder.task("embed")
    jobs = [worker.submit(Job(task, [i], [1])) for i in range(5)]
    stopper = threading.Thread(target=worker.stop)
    stopper.start()
    while worker.alive:  # stop() refuses new work at once, while the thread still drains
        time.sleep(0.001)
    with pytest.raises(ShuttingDown):
        worker.submit(Job(task, ["late"], [1]))
    recorder.release.set()
    stopper.join(30)
    assert [list(job.future.result(timeout=0)) for job in jobs] == [[("embed", i)] for i in range(5)]
    assert not worker.alive


def test_right_after_a_batch_the_next_waits_a_little_for_as_many_jobs_as_were_about(monkeypatch):
    """Clients answered by a batch come back a round trip later: the next batch waits for them
    (a share of the batch's time) rather than running without them, so that closed-loop clients
    are not split into two groups taking turns; with nobody coming back it runs anyway."""
    monkeypatch.setattr(worker_module, "GATHER_SHARE", 1.0)  # wide margins for a busy test machine
    monkeypatch.setattr(worker_module, "GATHER_MAX_S", 1.0)
    recorder = Recorder()
    worker = BatchingWorker(max_batch_tokens=100)
    worker.start()
    hold = worker.submit(Job(recorder.task("hold"), ["hold"], [1]))
    assert recorder.holding.wait(30)
    task = recorder.task("embed")
    queued = [worker.submit(Job(task, [name], [1])) for name in ("a", "b")]
    time.sleep(0.3)  # a batch of 0.3 s: the next may wait as long for a third job (1 + 2 were about)
    recorder.release.set()
    hold.future.result(timeout=30)
    time.sleep(0.02)  # the client of "hold", coming back
    late = worker.submit(Job(task, ["c"], [1]))
    assert [list(job.future.result(timeout=30)) for job in [*queued, late]] == [[("embed", n)] for n in "abc"]
    assert recorder.batches == [["hold"], ["a", "b", "c"]]
    # Nobody comes back after this one (3 were about, 1 is queued): it runs once the wait is over.
    alone = worker.submit(Job(task, ["d"], [1]))
    assert list(alone.future.result(timeout=30)) == [("embed", "d")]
    worker.stop()
    assert recorder.batches[-1] == ["d"]


def test_a_job_needs_items_with_lengths():
    with pytest.raises(ValueError, match="a job needs items"):
        Job(Task("x", list), [], [])


def test_a_stopped_worker_starts_again_with_its_queue_accounting_intact():
    """An ASGI app's lifespan may run twice (schemathesis loads the document in one, then serves
    the requests in another): the worker restarts after a stop, not while it runs."""
    worker = BatchingWorker(max_batch_tokens=100)
    worker.start()
    with pytest.raises(RuntimeError, match="started already"):
        worker.start()
    task = Task("embed", lambda items: items)
    worker.submit(Job(task, [1, 2], [3, 4])).future.result(timeout=30)
    worker.stop()
    assert not worker.alive
    worker.start()
    assert worker.alive and worker.token_rate("embed") is not None  # what it measured is kept
    assert list(worker.submit(Job(task, [5], [1])).future.result(timeout=30)) == [5]
    assert worker._queued_tokens["embed"] == 0 and worker._in_flight == 0
    worker.stop()
