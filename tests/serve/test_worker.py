"""The batching worker alone, without HTTP: which jobs share a batch (same task, within the
padded-token and row budgets, in arrival order), what a full queue, a request's slot, a
cancelled job and a failing batch do, and that stopping finishes every accepted job."""

from __future__ import annotations

import threading
import time
from concurrent.futures import CancelledError
from operator import attrgetter

import pytest
import torch

from roberta_ext.serve import BatchingWorker, Job, Overloaded, ShuttingDown, Task, WouldTimeOut
from roberta_ext.serve import worker as worker_module
from roberta_ext.serve.admission import TokenRate
from roberta_ext.serve.metrics import ServerMetrics


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
    assert slot.held
    slot.release()
    assert slot.held is False
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
    with pytest.raises(RuntimeError, match=r"^the worker was started already$"):
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


# ------------------------------------------------------------------- edges a mutation run found


def measured(tokens_per_second: float, batch_seconds: float = 1.0) -> TokenRate:
    """A rate as if one batch of ``batch_seconds`` had run at ``tokens_per_second``."""
    rate = TokenRate()
    rate.update(tokens=tokens_per_second * batch_seconds, seconds=batch_seconds)
    return rate


def sample(worker: BatchingWorker, name: str, **labels: str) -> float | None:
    return worker.metrics.registry.get_sample_value(name, labels)


class FrozenClock:
    """The worker's clock, stopped: a wait after a batch has an exact length and never runs out."""

    def monotonic(self) -> float:
        return 1000.0


class Waits(threading.Condition):
    """The worker's condition, recording the timeout of each wait (``None``: idle, no timeout)."""

    def __init__(self) -> None:
        super().__init__()
        self.timeouts: list[float | None] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return super().wait(timeout)


def gathering_worker(monkeypatch, **options) -> BatchingWorker:
    """A started worker on the frozen clock, whose waits are recorded (``worker._condition.timeouts``)."""
    monkeypatch.setattr(worker_module, "time", FrozenClock())
    worker = BatchingWorker(**{"max_batch_tokens": 100, **options})
    worker._condition = Waits()
    worker.start()
    return worker


def after_a_batch(worker: BatchingWorker, seconds: float, about: int) -> None:
    """As if a batch of ``seconds`` had just ended with ``about`` jobs about (once the last one is recorded)."""
    for _ in range(30_000):
        with worker._condition:
            if worker._running is None:
                worker._last_batch = (1000.0, seconds, about)
                worker._condition.timeouts.clear()
                return
        time.sleep(0.001)
    raise AssertionError("the last batch was never recorded")


def gathers(worker: BatchingWorker, job: Job, waits: int = 1) -> bool:
    """True once the worker has waited ``waits`` times for a batch to fill, False once ``job`` ran."""
    for _ in range(30_000):
        if job.future.done():
            return False
        if sum(timeout is not None for timeout in worker._condition.timeouts) >= waits:
            return True
        time.sleep(0.001)
    raise AssertionError("the worker neither ran the job nor waited")


def listing(batches: list[list[object]], key: str = "embed") -> Task:
    """A task whose batches are appended to ``batches``."""
    return Task(key, lambda items: batches.append(list(items)) or items)


def test_a_tasks_kind_is_the_first_element_of_a_tuple_key():
    assert Task(("embed", "mean"), list).kind == "embed"
    assert Task("embed", list).kind == "embed"
    assert Task((), list).kind == ()


def test_a_job_names_what_it_lacks():
    for items, lengths in (([], []), ([1, 2], [3])):
        with pytest.raises(ValueError) as refused:
            Job(Task("x", list), items, lengths)
        assert str(refused.value) == f"a job needs items and one length each, got {len(items)} and {len(lengths)}"


def test_the_defaults_and_a_worker_never_started():
    worker = BatchingWorker(max_batch_tokens=8)
    assert (worker.max_batch_requests, worker.max_concurrent_requests, worker.threads) == (None, 512, None)
    assert not worker.alive and worker.queue_depth == 0 and worker.token_rate("embed") is None
    with pytest.raises(ShuttingDown, match=r"^the server is shutting down$"):
        worker.admit()
    with pytest.raises(ShuttingDown, match=r"^the server is shutting down$"):
        worker.submit(Job(Task("embed", list), [1], [1]))
    worker.stop()  # nothing to end
    metrics = ServerMetrics()
    assert BatchingWorker(max_batch_tokens=8, metrics=metrics).metrics is metrics


def test_a_request_admitted_before_stop_cannot_queue_work_after_it():
    worker = BatchingWorker(max_batch_tokens=8)
    worker.start()
    slot = worker.admit()
    worker.stop()
    with pytest.raises(ShuttingDown, match=r"^the server is shutting down$"):
        worker.submit(Job(Task("embed", list), [1], [1]), slot=slot)


def test_tasks_run_on_the_named_daemon_thread_with_the_workers_torch_threads():
    seen = []

    def compute(items):
        thread = threading.current_thread()
        seen.append((thread.name, thread.daemon, torch.get_num_threads()))
        return items

    before = torch.get_num_threads()
    threads = 2 if before == 1 else 1
    worker = BatchingWorker(max_batch_tokens=8, threads=threads)
    worker.start()
    try:
        assert list(worker.submit(Job(Task("embed", compute), [1], [1])).future.result(timeout=30)) == [1]
    finally:
        worker.stop()
        torch.set_num_threads(before)  # torch's setting is process-wide
    assert seen == [("roberta-ext-model-worker", True, threads)]


def test_stop_waits_for_the_thread_up_to_its_timeout_and_works_from_a_task():
    recorder = Recorder()
    worker = held_worker(recorder)
    thread = worker._thread
    worker.stop(timeout=0.01)
    assert thread.is_alive()  # the held batch still runs: stop gave up after its timeout
    recorder.release.set()
    worker.stop()
    assert not thread.is_alive()
    # A task may stop its own worker: the thread does not join itself, and the batch is answered.
    worker = BatchingWorker(max_batch_tokens=8)
    worker.start()
    task = Task("embed", lambda items: worker.stop() or items)
    assert list(worker.submit(Job(task, [1], [1])).future.result(timeout=30)) == [1]
    worker._thread.join(30)
    assert not worker._thread.is_alive()


def test_the_expected_wait_adds_the_running_batch_and_other_kinds_at_their_own_rates():
    recorder = Recorder()
    worker = BatchingWorker(max_batch_tokens=1000)
    worker.start()
    worker.submit(Job(recorder.task("hold"), ["hold"], [50]))
    assert recorder.holding.wait(30)
    embed, fill, new = recorder.task("embed"), recorder.task("fill"), recorder.task("new")
    try:
        with worker._condition:
            worker._rates.update(embed=measured(100), fill=measured(10, 2.0), new=TokenRate())
        assert worker.expected(new, 1) is None  # a rate not measured yet
        timing = attrgetter("ahead_s", "done_s", "slack_s")
        assert timing(worker.expected(embed, 30)) == (0.0, 0.3, 1.0)  # the running kind has no rate: nothing
        worker.submit(Job(embed, ["e1", "e2"], [20, 30]))  # 0.5 s of embed
        worker.submit(Job(fill, ["f"], [20]))  # 2 s of fill
        worker.submit(Job(new, ["n"], [1000]))  # a kind without a rate counts nothing
        assert timing(worker.expected(embed, 30)) == pytest.approx((2.5, 2.8, 1.0))
        assert timing(worker.expected(fill, 10)) == pytest.approx((2.5, 3.5, 2.0))
        with worker._condition:
            worker._rates["hold"] = measured(1)  # the running batch's 50 tokens: 50 s, begun just now
        assert 2.5 + 20 < worker.expected(embed, 30).ahead_s <= 2.5 + 50
        with worker._condition:
            worker._rates["hold"] = measured(10)  # the running batch's 50 tokens: 5 s, begun 1 s ago
            worker._running = ("hold", 50, time.monotonic() - 1.0)
        assert worker.expected(embed, 30).ahead_s == pytest.approx(2.5 + 4.0, abs=0.5)
        with worker._condition:
            worker._running = ("hold", 50, time.monotonic() - 100.0)  # overdue: nothing left of it
        assert worker.expected(embed, 30).ahead_s == pytest.approx(2.5)
    finally:
        recorder.release.set()
        worker.stop()


def test_a_refusal_names_the_work_ahead_the_rate_and_when_to_retry():
    recorder = Recorder()
    worker = held_worker(recorder)  # its running kind, "hold", has no rate: it counts nothing
    embed = recorder.task("embed")
    try:
        with worker._condition:
            worker._rates["embed"] = measured(100)
        worker.submit(Job(embed, ["a"], [200]), within=1.0)  # nothing ahead: admitted however long
        with pytest.raises(WouldTimeOut) as refused:
            worker.submit(Job(embed, ["b"], [100]), within=1.0)
        assert str(refused.value) == (
            "the model is overloaded: this request would take about 3.0 s (200 tokens queued ahead of its 100, "
            "at 100 tokens/s), more than the timeout of 1 s; retry after 3 s"
        )
        assert refused.value.retry_after_s == 3  # 3 s and a batch of slack, less the timeout
        assert sample(worker, "roberta_ext_refused_requests_total", reason="expected_wait") == 1
        assert sample(worker, "roberta_ext_admitted_requests_total") == 2
        assert sample(worker, "roberta_ext_queue_depth") == 1 and worker.queue_depth == 1
    finally:
        recorder.release.set()
        worker.stop()


def test_a_full_queue_counts_its_refusals_and_names_the_option():
    recorder = Recorder()
    worker = held_worker(recorder, max_concurrent_requests=1)
    with pytest.raises(Overloaded) as refused:
        worker.admit()
    assert str(refused.value) == ("the model is overloaded: all request slots are taken (--max-concurrent-requests 1)")
    assert sample(worker, "roberta_ext_refused_requests_total", reason="slots") == 1
    recorder.release.set()
    worker.stop()


def test_a_cancelled_job_gives_back_its_queued_tokens():
    recorder = Recorder()
    worker = held_worker(recorder)
    task = recorder.task("embed")
    kept = worker.submit(Job(task, ["kept"], [3]))
    gone = worker.submit(Job(task, ["gone1", "gone2"], [5, 7]))
    assert worker._queued_tokens["embed"] == 15 and sample(worker, "roberta_ext_queue_depth") == 2
    assert gone.future.cancel()
    assert worker._queued_tokens["embed"] == 3 and sample(worker, "roberta_ext_queue_depth") == 1
    recorder.release.set()
    assert list(kept.future.result(timeout=30)) == [("embed", "kept")]
    worker.stop()
    assert worker._queued_tokens["embed"] == 0


def test_a_batch_fits_the_budget_exactly_in_tokens_and_in_requests():
    recorder = Recorder()
    worker = held_worker(recorder, max_batch_tokens=20, max_batch_requests=3)
    task = recorder.task("embed")
    shapes = [("a", 10), ("b", 10), ("c", 1), ("d", 1), ("e", 1), ("f", 1)]  # 2 x 10 = 20; then 3 requests
    jobs = [worker.submit(Job(task, [name], [length])) for name, length in shapes]
    recorder.release.set()
    for job in jobs:
        job.future.result(timeout=30)
    worker.stop()
    assert recorder.batches[1:] == [["a", "b"], ["c", "d", "e"], ["f"]]


def test_a_task_giving_the_wrong_number_of_results_fails_its_job(caplog):
    worker = BatchingWorker(max_batch_tokens=8)
    worker.start()
    job = worker.submit(Job(Task("embed", lambda items: items[:-1]), [1, 2], [1, 1]))
    with pytest.raises(RuntimeError, match=r"^the task gave 1 results for 2 inputs$"):
        job.future.result(timeout=30)
    worker.stop()
    assert [record.getMessage() for record in caplog.records] == ["a batch failed"]
    assert worker.token_rate("embed") is None  # a failed batch measures no rate


def test_a_failing_batch_of_two_is_rerun_job_by_job():
    recorder = Recorder()
    worker = held_worker(recorder)
    task = recorder.task("embed", fail_on="bad")
    ok, bad = (worker.submit(Job(task, [name], [1])) for name in ("ok", "bad"))
    recorder.release.set()
    assert list(ok.future.result(timeout=30)) == [("embed", "ok")]
    with pytest.raises(ValueError, match="cannot compute 'bad'"):
        bad.future.result(timeout=30)
    worker.stop()
    assert recorder.batches[1:] == [["ok", "bad"], ["ok"], ["bad"]]


class Unsliceable(list):
    """Results that cannot be cut past their first job's: a bug in scattering them."""

    def __getitem__(self, index):
        if isinstance(index, slice) and index.start:
            raise LookupError("cannot slice")
        return super().__getitem__(index)


def test_a_batch_whose_results_cannot_be_scattered_fails_what_is_left_and_the_worker_goes_on(caplog):
    recorder = Recorder()
    worker = held_worker(recorder)
    odd = Task("odd", lambda items: Unsliceable(items))
    first, second = (worker.submit(Job(odd, [name], [1])) for name in ("a", "b"))
    recorder.release.set()
    assert list(first.future.result(timeout=30)) == ["a"]
    with pytest.raises(LookupError, match="^cannot slice$"):
        second.future.result(timeout=30)
    assert list(worker.submit(Job(recorder.task("embed"), ["c"], [1])).future.result(timeout=30)) == [("embed", "c")]
    worker.stop()
    assert "the worker failed on a batch" in [record.getMessage() for record in caplog.records]


def test_each_batch_is_measured():
    recorder = Recorder()
    worker = held_worker(recorder)
    seconds: list[float] = []
    record = worker._record
    worker._record = lambda batch, took: seconds.append(took) or record(batch, took)
    task = recorder.task("embed")
    with worker._condition:
        worker._rates["embed"] = measured(1)  # 1 token/s: expected far later than done
    late = worker.submit(Job(task, ["a1", "a2"], [3, 4], queued_at=time.monotonic() - 100))
    early = worker.submit(Job(task, ["b"], [5]))  # expected at 12 s, done at once
    recorder.release.set()
    for job in (late, early):
        job.future.result(timeout=30)
    worker.stop()
    assert recorder.batches[1:] == [["a1", "a2", "b"]] and len(seconds) == 2
    assert sample(worker, "roberta_ext_batch_requests_sum") == 1 + 2
    assert sample(worker, "roberta_ext_batch_rows_sum") == 1 + 3
    assert sample(worker, "roberta_ext_batch_tokens_sum") == 1 + 3 * 5
    assert sample(worker, "roberta_ext_tokens_total") == 1 + 12
    assert sample(worker, "roberta_ext_batch_duration_seconds_sum") == pytest.approx(sum(seconds))
    assert sample(worker, "roberta_ext_tokens_per_second") == pytest.approx(12 / seconds[1])
    assert sample(worker, "roberta_ext_estimated_tokens_per_second", task="embed") == worker.token_rate("embed")
    assert 100 < sample(worker, "roberta_ext_queue_duration_seconds_sum") < 130
    # Waited 100 s more than the 7 s expected, and 12 s less than expected: one error each side.
    assert sample(worker, "roberta_ext_wait_estimate_error_seconds_count") == 2
    assert sample(worker, "roberta_ext_wait_estimate_error_seconds_bucket", le="-10.0") == 1
    assert sample(worker, "roberta_ext_wait_estimate_error_seconds_bucket", le="10.0") == 1


def test_after_a_batch_it_waits_its_share_at_most_gather_max_s(monkeypatch):
    worker = gathering_worker(monkeypatch)
    batches: list[list[object]] = []
    task = listing(batches)
    try:
        for seconds, wait in ((0.2, 0.3 * 0.2), (1000.0, 0.1)):
            after_a_batch(worker, seconds, about=2)
            first = worker.submit(Job(task, ["a"], [1]))
            assert gathers(worker, first)  # one job of the two about: it waits (the clock is stopped)
            second = worker.submit(Job(task, ["b"], [1]))
            for job in (first, second):
                job.future.result(timeout=30)
            assert batches[-1] == ["a", "b"]
            waits = [timeout for timeout in worker._condition.timeouts if timeout is not None]
            assert waits[0] == pytest.approx(wait)
    finally:
        worker.stop()


@pytest.mark.parametrize(
    ("options", "seconds", "about", "length", "waits"),
    [
        ({"max_batch_tokens": 10}, 1000.0, 2, 10, False),  # its batch is full in tokens
        ({"max_batch_requests": 1}, 1000.0, 2, 1, False),  # full in requests
        ({}, 1000.0, 1, 1, False),  # as many jobs as were about
        ({}, 1000.0, 0, 1, False),  # no batch yet
        ({}, 0.0, 2, 1, False),  # no time left to wait: the deadline is now
        ({"max_batch_tokens": 2, "max_batch_requests": 2}, 1000.0, 2, 1, True),  # a row of 1: room for one more
        ({"max_batch_tokens": 1}, 1000.0, 2, 0, True),  # rows without tokens never fill a batch
    ],
)
def test_it_waits_only_while_the_batch_has_room_and_someone_is_missing(
    monkeypatch, options, seconds, about, length, waits
):
    worker = gathering_worker(monkeypatch, **options)
    try:
        after_a_batch(worker, seconds, about=about)
        job = worker.submit(Job(Task("embed", list), ["a"], [length]))
        assert gathers(worker, job) is waits
    finally:
        worker.stop()  # ends a wait too
    assert list(job.future.result(timeout=30)) == ["a"]


def test_jobs_of_other_tasks_do_not_fill_the_oldest_jobs_batch(monkeypatch):
    monkeypatch.setattr(worker_module, "GATHER_MAX_S", 30.0)  # waits end by a new job, not by time
    worker = gathering_worker(monkeypatch, max_batch_tokens=10)
    batches: list[list[object]] = []
    embed, other = listing(batches), listing(batches, "other")
    try:
        after_a_batch(worker, 1000.0, about=3)
        first = worker.submit(Job(embed, ["a"], [1]))
        assert gathers(worker, first)
        worker.submit(Job(other, ["o"], [10]))  # a full batch, but of another task
        assert gathers(worker, first, waits=2)  # still waiting for the oldest job's batch
        worker.submit(Job(embed, ["b"], [1])).future.result(timeout=30)  # three jobs, as were about
        assert batches[0] == ["a", "b"]
    finally:
        worker.stop()


def test_a_job_cancelled_while_the_worker_waits_leaves_it_waiting_for_the_next(monkeypatch):
    worker = gathering_worker(monkeypatch)
    batches: list[list[object]] = []
    task = listing(batches)
    try:
        after_a_batch(worker, 1000.0, about=2)  # waits of 0.1 s, over and over on the stopped clock
        gone = worker.submit(Job(task, ["gone"], [1]))
        assert gathers(worker, gone)
        assert gone.future.cancel()
        for _ in range(30_000):  # back to waiting for a job (a wait without a timeout)
            if worker._condition.timeouts[-1] is None:
                break
            time.sleep(0.001)
        jobs = [worker.submit(Job(task, [name], [1])) for name in ("a", "b")]
        assert [list(job.future.result(timeout=30)) for job in jobs] == [["a"], ["b"]]
        assert batches == [["a", "b"]]
    finally:
        worker.stop()


def test_a_job_cancelled_just_as_the_worker_takes_it_is_skipped_quietly(caplog):
    """Its request ends (a timeout) between the worker taking it from the queue and running it:
    the job is not in the queue to remove, which is no error, and the worker runs the next."""
    worker = BatchingWorker(max_batch_tokens=100)
    select = worker._select

    def select_then_cancel() -> list[Job]:
        batch = select()
        assert batch[0].future.cancel()  # in the worker's thread, which holds the (reentrant) lock
        return batch

    worker._select = select_then_cancel
    worker.start()
    try:
        gone = worker.submit(Job(Task("embed", list), ["gone"], [3]))
        for _ in range(30_000):
            if gone.future.cancelled():
                break
            time.sleep(0.001)
        worker._select = select
        assert list(worker.submit(Job(Task("embed", list), ["kept"], [1])).future.result(timeout=30)) == ["kept"]
    finally:
        worker.stop()
    assert caplog.records == [] and worker._queued_tokens["embed"] == 0
