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

from tests.peers import require

require("fairseq", "the tests stop fairseq's prefetch threads")

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
