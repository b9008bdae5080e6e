"""Dynamic batching: a bounded queue of requests and ONE model worker thread that serves them
in batches.

Handlers tokenize a request, wrap it in a :class:`Job` (its rows, their lengths and the
:class:`Task` that computes them) and :meth:`BatchingWorker.submit` it; the answer comes back
through the job's :class:`~concurrent.futures.Future`. The worker takes the oldest job and,
behind it, every waiting job of the same task (same pooling, head, ...) in arrival order while
the batch stays within the padded-token budget (rows x longest row <= ``max_batch_tokens``)
and ``max_batch_requests`` rows; it runs them in one call of the task, which sorts the rows by
length and cuts them into forward passes with :func:`~roberta_ext.data.batching.length_batches`
(the one batcher of ``embed`` and ``predict``): a batch within the budget is one forward pass.
Results are scattered back to each job's future. The worker takes what has queued while the
model was busy, so a lone request runs at once and a busy server runs full batches; it waits for
a batch to fill only right after a batch, and only a little (:data:`GATHER_SHARE` of that batch's
time, at most :data:`GATHER_MAX_S`), for as many jobs as were about when that batch ended (its
own and those queued behind it): clients that each send their next request when answered come
back within a loopback round trip, and without the wait they split into two groups taking turns
(32 clients: batches of about 16), where one batch of all of them costs less a row (a 6 x 384
model: 4.8 ms a row in batches of 32 against 5.3 in batches of 16, on one thread).

Why results never depend on batch-mates: the encoder drops padding before its layers
(:class:`~roberta_ext.modeling.attention.Packing`), so a row's features are those it has
alone (equal to 1e-6, as ``embed``'s tests check); the tests compare served results with
in-process ``embed``/``predict``.

What the queue refuses: ``max_concurrent_requests`` slots bound the requests in progress, so
memory stays bounded. The server takes a request's :class:`Slot` with
:meth:`~BatchingWorker.admit` before it reads the body, so that a refusal (:class:`Overloaded`,
answered 429 with ``Retry-After``) costs no parsing and no tokenizing: under a storm of retrying
clients the event loop stays free for the admitted requests and the model stays busy. The slot
is released when the request ends, however it ends. A job submitted without a slot takes one of
its own, released when its future is done. A job submitted ``within`` a timeout is refused
(:class:`WouldTimeOut`, answered 429 with a ``Retry-After`` from the estimate) when the work
queued ahead of it, at the rate its kind of work has run lately (:mod:`.admission`, updated as
each batch finishes), would not let it be done in time: the request gets its answer at once
rather than a 504 after the whole timeout, and the model's time goes to requests it can finish.
A job whose request ended (a timeout, or a client gone, cancels its future) leaves the queue at
once; one already running finishes. A failing batch fails only its own requests: a batch of
several requests that raises is run again one request at a time, so only the request that fails
gets the error, and the worker goes on.
:meth:`~BatchingWorker.stop` refuses new jobs, finishes every accepted one, then ends the thread.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import RobertaExtError
from .admission import Expected, TokenRate, expected_wait, retry_after
from .metrics import ServerMetrics

__all__ = ["BatchingWorker", "Job", "Overloaded", "Results", "ShuttingDown", "Slot", "Task", "WouldTimeOut"]

Results = Sequence[Any] | torch.Tensor
"""What a task gives for N items: anything sliced along its first axis (a list, a tensor ``(N, ...)``)."""

logger = logging.getLogger("roberta_ext.serve")

GATHER_SHARE = 0.3
"""Right after a batch, how long the worker may wait for the next one to fill, as a share of that
batch's time: what waiting can cost the model's throughput, at most."""

GATHER_MAX_S = 0.1
"""The longest such wait, in seconds, however long the batch took."""


class Overloaded(RobertaExtError):
    """The queue is full: the request is refused at once (HTTP 429)."""


class WouldTimeOut(Overloaded):
    """The work queued ahead of a job would keep it past its timeout: refused at once (HTTP 429),
    with the seconds after which it would fit (:attr:`retry_after_s`, ``Retry-After``)."""

    def __init__(self, message: str, *, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class ShuttingDown(RobertaExtError):
    """The worker is stopping and accepts no new work (HTTP 503)."""


@dataclass(frozen=True, eq=False)
class Task:
    """What a batch computes: ``compute(items)`` gives one result per item, in their order, for
    the items of every job in the batch back to back (a tensor ``(N, ...)`` or a list). Jobs
    whose tasks have equal ``key`` are batched together, with the first job's ``compute``."""

    key: Hashable
    compute: Callable[[Sequence[Any]], Results]

    @property
    def kind(self) -> Hashable:
        """The kind of work, whose rate is measured apart (``"embed"`` of ``("embed", ...)``):
        the key's first element, or the key itself."""
        return self.key[0] if isinstance(self.key, tuple) and self.key else self.key


@dataclass(eq=False)
class Job:
    """One request's work: its ``items`` (rows of ids, or texts), the tokens of each (for the
    budget) and where its results go."""

    task: Task
    items: Sequence[Any]
    lengths: Sequence[int]
    future: Future[Results] = field(default_factory=Future)
    queued_at: float = field(default_factory=time.monotonic)
    expected: Expected | None = None
    """How long it was expected to take when it was queued (``None``: its kind had no rate yet)."""

    def __post_init__(self) -> None:
        if len(self.items) != len(self.lengths) or not self.items:
            raise ValueError(f"a job needs items and one length each, got {len(self.items)} and {len(self.lengths)}")


class Slot:
    """One of a worker's ``max_concurrent_requests`` places, held by one request from before its
    body is read until it ends: :meth:`release` frees it (once; a second call does nothing)."""

    def __init__(self, worker: BatchingWorker) -> None:
        self._worker = worker
        self.held = True

    def release(self) -> None:
        with self._worker._condition:
            if self.held:
                self.held = False
                self._worker._in_flight -= 1


class BatchingWorker:
    """The model worker thread and its bounded queue.

    >>> worker = BatchingWorker(max_batch_tokens=64)
    >>> worker.start()
    >>> double = Task("double", lambda items: [2 * x for x in items])
    >>> job = worker.submit(Job(double, [1, 2, 3], [1, 1, 1]))
    >>> list(job.future.result(timeout=10))
    [2, 4, 6]
    >>> worker.token_rate("double") > 0  # measured: later jobs are admitted by their expected wait
    True
    >>> worker.stop()
    """

    def __init__(
        self,
        *,
        max_batch_tokens: int,
        max_batch_requests: int | None = None,
        max_concurrent_requests: int = 512,
        threads: int | None = None,
        metrics: ServerMetrics | None = None,
    ) -> None:
        self.max_batch_tokens = max_batch_tokens
        self.max_batch_requests = max_batch_requests
        self.max_concurrent_requests = max_concurrent_requests
        self.threads = threads
        self.metrics = metrics or ServerMetrics()
        self._pending: deque[Job] = deque()
        self._in_flight = 0  # slots held: requests in progress, and jobs submitted without one
        self._rates: dict[Hashable, TokenRate] = {}  # of each kind of work, as its batches finish
        self._queued_tokens: defaultdict[Hashable, int] = defaultdict(int)  # in _pending, by kind
        self._running: tuple[Hashable, int, float] | None = None  # the batch's kind, tokens, start
        # When the last batch ended, what it took, and the jobs about then (its own, and those
        # queued behind it): the next batch may wait a little for that many (_gather).
        self._last_batch: tuple[float, float, int] = (0.0, 0.0, 0)
        self._stopping = False
        self._condition = threading.Condition()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ the handlers' side

    @property
    def alive(self) -> bool:
        """Whether the worker thread runs and accepts work."""
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    @property
    def queue_depth(self) -> int:
        """Jobs waiting for the worker (the one running not counted)."""
        return len(self._pending)

    def token_rate(self, kind: Hashable) -> float | None:
        """Tokens per second the work of ``kind`` (:attr:`Task.kind`) has run at lately; ``None``
        before its first batch."""
        with self._condition:
            rate = self._rates.get(kind)
            return None if rate is None else rate.tokens_per_second

    def expected(self, task: Task, tokens: int) -> Expected | None:
        """How long a job of ``task`` and ``tokens`` queued now would take (:mod:`.admission`);
        ``None`` while its kind has no measured rate."""
        with self._condition:
            return self._expected(task.kind, tokens)

    def _expected(self, kind: Hashable, tokens: int) -> Expected | None:
        rate = self._rates.get(kind)
        if rate is None or rate.tokens_per_second is None:
            return None
        running_s = 0.0
        if self._running is not None:  # what is left of the batch running, at its kind's rate
            running_kind, running_tokens, started = self._running
            per_second = self._rates[running_kind].tokens_per_second if running_kind in self._rates else None
            if per_second is not None:
                running_s = max(0.0, running_tokens / per_second - (time.monotonic() - started))
        for other, queued in self._queued_tokens.items():  # other kinds' work, at their own rates
            per_second = self._rates[other].tokens_per_second if other in self._rates else None
            if other != kind and queued and per_second is not None:
                running_s += queued / per_second
        return expected_wait(ahead_tokens=self._queued_tokens[kind], own_tokens=tokens, rate=rate, running_s=running_s)

    def admit(self) -> Slot:
        """A slot for one request, taken before any of its work; :class:`Overloaded` at once when
        ``max_concurrent_requests`` are held, :class:`ShuttingDown` once :meth:`stop` was called.
        The caller releases it when the request ends, however it ends."""
        with self._condition:
            if self._stopping or self._thread is None:
                raise ShuttingDown("the server is shutting down")
            if self._in_flight >= self.max_concurrent_requests:
                self.metrics.refused.labels("slots").inc()
                raise Overloaded(
                    f"the model is overloaded: all request slots are taken "
                    f"(--max-concurrent-requests {self.max_concurrent_requests})"
                )
            self._in_flight += 1
            return Slot(self)

    def submit(self, job: Job, *, slot: Slot | None = None, within: float | None = None) -> Job:
        """Queue ``job``, the work of the request holding ``slot``; without one, the job takes a
        slot of its own (:meth:`admit`), released when its future is done. With ``within`` (its
        timeout, in seconds), :class:`WouldTimeOut` when the work ahead of it, at the measured
        rate, would not let it be done in time (never while its kind has no rate yet, nor with
        nothing ahead of it). :class:`ShuttingDown` once :meth:`stop` was called. A job
        cancelled before it runs leaves the queue at once."""
        tokens = sum(job.lengths)
        with self._condition:
            if self._stopping or self._thread is None:
                raise ShuttingDown("the server is shutting down")
            job.expected = self._expected(job.task.kind, tokens)
            if within is not None and job.expected is not None and job.expected.too_late(within):
                self.metrics.refused.labels("expected_wait").inc()
                wait = retry_after(job.expected, within)
                raise WouldTimeOut(
                    f"the model is overloaded: this request would take about {job.expected.done_s:.1f} s "
                    f"({self._queued_tokens[job.task.kind]} tokens queued ahead of its {tokens}, at "
                    f"{self._rates[job.task.kind].tokens_per_second:.0f} tokens/s), more than the timeout of "
                    f"{within:g} s; retry after {wait} s",
                    retry_after_s=wait,
                )
            own = self.admit() if slot is None else None
            self._pending.append(job)
            self._queued_tokens[job.task.kind] += tokens
            self.metrics.admitted.inc()
            self.metrics.queue_depth.set(len(self._pending))
            self._condition.notify()
        job.future.add_done_callback(lambda future: self._done(job, own))
        return job

    def _done(self, job: Job, own: Slot | None) -> None:
        """A job's future is done: free its own slot; a cancelled job leaves the queue (its
        request has ended: answered 504, or gone), so nothing waits behind it."""
        with self._condition:
            if own is not None:
                own.release()
            if job.future.cancelled():
                with contextlib.suppress(ValueError):  # taken by the worker already, and skipped
                    self._pending.remove(job)
                    self._queued_tokens[job.task.kind] -= sum(job.lengths)
                self.metrics.queue_depth.set(len(self._pending))

    # ------------------------------------------------------------------------ the thread

    def start(self) -> None:
        """Start the worker thread; again once a :meth:`stop` has ended it (an ASGI app's
        lifespan may run more than once: a test client entered twice, a server restarted in
        process)."""
        with self._condition:
            if self._thread is not None and self._thread.is_alive():
                raise RuntimeError("the worker was started already")
            self._stopping = False
            self._thread = threading.Thread(target=self._loop, name="roberta-ext-model-worker", daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Refuse new jobs, finish every accepted one, and end the thread (waiting up to ``timeout`` s)."""
        with self._condition:
            self._stopping = True
            self._condition.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def _loop(self) -> None:
        if self.threads is not None:
            # torch's intra-op pool is process-wide; set here too so the setting holds for this thread.
            torch.set_num_threads(self.threads)
        while (batch := self._take()) is not None:
            started = time.monotonic()
            for job in batch:
                self.metrics.queue_duration.observe(started - job.queued_at)
            try:
                self._run(batch)
            except Exception as error:  # a bug in the scattering itself: fail what is left, keep serving
                logger.exception("the worker failed on a batch")
                for job in batch:
                    if not job.future.done():
                        job.future.set_exception(error)
            self._record(batch, time.monotonic() - started)

    def _take(self) -> list[Job] | None:
        """The next batch, every job of it marked running; ``None`` once stopping with nothing left."""
        with self._condition:
            while True:
                while not self._pending and not self._stopping:
                    self._condition.wait()
                if not self._pending:
                    return None
                self._gather()
                if not self._pending:  # cancelled while it waited
                    continue
                batch = self._select()
                for job in batch:
                    self._queued_tokens[job.task.kind] -= sum(job.lengths)
                self.metrics.queue_depth.set(len(self._pending))
                running = [job for job in batch if job.future.set_running_or_notify_cancel()]
                if running:
                    tokens = sum(sum(job.lengths) for job in running)
                    self._running = (running[0].task.kind, tokens, time.monotonic())
                    return running

    def _gather(self) -> None:
        """Right after a batch, wait (the lock released) until as many jobs are queued as were
        about when it ended, the oldest job's batch is full, or :data:`GATHER_SHARE` of the
        batch's time (at most :data:`GATHER_MAX_S`) has passed since it ended."""
        ended, seconds, about = self._last_batch
        deadline = ended + min(GATHER_MAX_S, GATHER_SHARE * seconds)
        while (
            not self._stopping
            and 0 < len(self._pending) < about
            and not self._full()
            and (left := deadline - time.monotonic()) > 0
        ):
            self._condition.wait(left)

    def _full(self) -> bool:
        """Whether the jobs queued of the oldest job's task fill a batch (the budget's tokens or rows)."""
        key = self._pending[0].task.key
        rows, longest = 0, 0
        for job in self._pending:
            if job.task.key == key:
                rows, longest = rows + len(job.items), max(longest, max(job.lengths))
        return self._room(rows, longest) <= 0

    def _room(self, rows: int, longest: int) -> int:
        """The batch budget left by ``rows`` rows padded to ``longest`` tokens: the padded tokens or
        the rows still allowed, whichever runs out first; 0 at the budget, negative over it."""
        room = self.max_batch_tokens - rows * longest
        if self.max_batch_requests is not None:
            room = min(room, self.max_batch_requests - rows)
        return room

    def _select(self) -> list[Job]:
        """The oldest job, and behind it the jobs of the same task that fit the budget (in order)."""
        first = self._pending.popleft()
        batch, rows, longest = [first], len(first.items), max(first.lengths)
        kept: deque[Job] = deque()
        while self._pending:
            job = self._pending.popleft()
            if job.task.key != first.task.key:
                kept.append(job)
                continue
            wider = max(longest, max(job.lengths))
            more = rows + len(job.items)
            if self._room(more, wider) < 0:
                kept.append(job)
                break
            batch.append(job)
            rows, longest = more, wider
        kept.extend(self._pending)
        self._pending = kept
        return batch

    def _run(self, batch: list[Job]) -> None:
        """Compute ``batch`` and give each job its results; when it fails, run its jobs one by
        one, so that only a failing job gets the error."""
        items = [item for job in batch for item in job.items]
        try:
            results = batch[0].task.compute(items)
            if len(results) != len(items):
                raise RuntimeError(f"the task gave {len(results)} results for {len(items)} inputs")
        except Exception as error:
            if len(batch) > 1:
                for job in batch:
                    self._run([job])
                return
            logger.exception("a batch failed")
            batch[0].future.set_exception(error)
            return
        start = 0
        for job in batch:
            job.future.set_result(results[start : start + len(job.items)])
            start += len(job.items)

    def _record(self, batch: list[Job], seconds: float) -> None:
        lengths = [length for job in batch for length in job.lengths]
        tokens = sum(lengths)
        done = time.monotonic()
        with self._condition:
            self._running = None
            self._last_batch = (done, seconds, len(batch) + len(self._pending))
            if all(job.future.exception() is None for job in batch):  # a failed batch measures no rate
                kind = batch[0].task.kind
                rate = self._rates.setdefault(kind, TokenRate())
                rate.update(tokens=tokens, seconds=seconds)
                if rate.tokens_per_second is not None:
                    self.metrics.estimated_tokens_per_second.labels(str(kind)).set(rate.tokens_per_second)
        for job in batch:
            if job.expected is not None and job.future.exception() is None:
                self.metrics.wait_estimate_error.observe((done - job.queued_at) - job.expected.done_s)
        self.metrics.batch_requests.observe(len(batch))
        self.metrics.batch_rows.observe(len(lengths))
        self.metrics.batch_tokens.observe(len(lengths) * max(lengths))
        self.metrics.batch_duration.observe(seconds)
        self.metrics.tokens.inc(tokens)
        if seconds > 0:
            self.metrics.tokens_per_second.set(tokens / seconds)
