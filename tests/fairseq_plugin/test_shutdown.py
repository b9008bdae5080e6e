"""A process that stops reading a fairseq ``BufferedIterator`` mid-epoch (``--max-update``) exits
cleanly once the plugin is loaded. Without the plugin, torch 2.13 + Python 3.11 abort such a
process at exit ("terminate called without an active exception", -6) in nearly every run: the
prefetch thread is inside a torch operator when the interpreter finalizes. Seen as a failed
``fairseq-train`` after ``done training`` (5 of 10 runs of the ALBERT pretraining test command)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from types import SimpleNamespace

import pytest

from tests.peers import require

require("fairseq", "the tests stop fairseq's prefetch threads")

from roberta_ext.fairseq_plugin import shutdown
from roberta_ext.fairseq_plugin.shutdown import stop_background_consumers
from tests.conftest import REPO

PREFETCH_AND_EXIT = textwrap.dedent("""
    import sys, torch
    from fairseq.data.iterators import BufferedIterator
    if sys.argv[1] == "plugin":
        import roberta_ext.fairseq_plugin  # noqa: F401  (imported for its registrations)

    class Batches:  # endless batches whose collation is torch work, like a masking collater
        def __len__(self):
            return 10**6

        def __iter__(self):
            g = torch.Generator().manual_seed(0)
            while True:
                x = torch.randint(0, 100, (32, 64), generator=g)
                yield [x.masked_select(x > i) for i in range(20)]

    batches = BufferedIterator(10, Batches())
    for _ in range(3):
        next(batches)
    print("stopped reading")
""")


def run_prefetch_and_exit(mode: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", PREFETCH_AND_EXIT, mode], capture_output=True, text=True, env=env, timeout=120
    )


def test_exit_with_a_busy_prefetch_thread_is_clean_with_the_plugin():
    for _ in range(3):
        result = run_prefetch_and_exit("plugin")
        assert result.returncode == 0, result.stderr[-2000:]
        assert "stopped reading" in result.stdout


def test_stop_background_consumers_stops_a_blocked_consumer():
    import torch
    from fairseq.data.iterators import BufferedIterator

    batches = BufferedIterator(2, [torch.arange(i) for i in range(100)])
    next(batches)  # the consumer fills its 2 slots and blocks on the third
    consumer = batches._consumer
    assert consumer.is_alive()
    assert stop_background_consumers(timeout=5.0) == 1
    assert not consumer.is_alive()
    assert stop_background_consumers() == 0


class Endless:
    """Batches without end, as an epoch that ``--max-update`` stops in the middle of."""

    def __len__(self):
        return 10**6

    def __iter__(self):
        import torch

        while True:
            yield torch.arange(4)


class Hanging:
    """A source whose second batch waits until ``release`` is set, as a data loader worker that hangs."""

    def __init__(self):
        self.release = threading.Event()

    def __len__(self):
        return 10

    def __iter__(self):
        import torch

        yield torch.arange(4)
        self.release.wait()
        yield from (torch.arange(4) for _ in range(9))


class FrozenClock:
    """``time.monotonic`` that never moves: a wait that only the deadline ends would never end, so it
    fails after ``limit`` readings instead."""

    def __init__(self, limit: int = 1000):
        self.readings, self.limit = 0, limit

    def monotonic(self) -> float:
        self.readings += 1
        assert self.readings <= self.limit, "still waiting with the consumer stopped"
        return 0.0


@pytest.fixture
def thread_errors(monkeypatch):
    """What the consumers' threads raised (``threading.excepthook``, which prints them at exit)."""
    errors = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    return errors


def test_a_consumer_of_an_endless_source_stops_after_its_batch_in_hand(thread_errors):
    from fairseq.data.iterators import BufferedIterator

    batches = BufferedIterator(2, Endless())
    next(batches)
    consumer = batches._consumer
    assert stop_background_consumers(timeout=5.0) == 1
    assert not consumer.is_alive() and thread_errors == []


def test_the_wait_ends_when_the_consumer_has_stopped_not_at_the_deadline(monkeypatch, thread_errors):
    from fairseq.data.iterators import BufferedIterator

    batches = BufferedIterator(2, Endless())
    next(batches)
    consumer = batches._consumer
    clock = FrozenClock()
    monkeypatch.setattr(shutdown, "time", clock)
    assert stop_background_consumers() == 1
    assert not consumer.is_alive() and thread_errors == []


def test_a_hanging_consumer_is_left_to_the_interpreter_after_the_timeout():
    from fairseq.data.iterators import BufferedIterator

    source = Hanging()
    batches = BufferedIterator(2, source)
    next(batches)
    consumer = batches._consumer
    try:
        assert stop_background_consumers(timeout=0.1) == 1
        assert consumer.is_alive()  # still waiting for its batch: left alone
    finally:
        source.release.set()  # the batch comes, the consumer stops after it (its length limit is 0)
        consumer.join(5.0)
    assert not consumer.is_alive()


class SteppingClock:
    """``time.monotonic`` that moves ``step`` seconds at each reading, as if every wait took that long."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def monotonic(self) -> float:
        self.now += self.step
        return self.now


def test_a_hanging_consumer_is_waited_for_ten_seconds_by_default(monkeypatch):
    from fairseq.data.iterators import BufferedIterator

    source = Hanging()
    batches = BufferedIterator(2, source)
    next(batches)
    consumer = batches._consumer
    clock = SteppingClock(0.75)  # the deadline falls between two readings
    monkeypatch.setattr(shutdown, "time", clock)
    try:
        assert stop_background_consumers() == 1
        assert consumer.is_alive()
        assert clock.now == 15 * 0.75  # the first reading 10 s past the first (0.75) ended the wait
    finally:
        source.release.set()
        consumer.join(5.0)
    assert not consumer.is_alive()


def test_install_registers_the_stop_at_exit_once(monkeypatch):
    registered = []
    monkeypatch.setattr(shutdown, "_registered", False)
    monkeypatch.setattr(shutdown, "atexit", SimpleNamespace(register=registered.append))
    shutdown.install()
    shutdown.install()
    assert registered == [shutdown.stop_background_consumers]


def test_importing_the_plugin_installed_it():
    import roberta_ext.fairseq_plugin  # noqa: F401

    assert shutdown._registered is True
