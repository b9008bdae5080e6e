"""Stop fairseq's data-prefetch threads before the interpreter shuts down.

fairseq's ``BufferedIterator`` (``--data-buffer-size``, 10 by default) fills its queue from a
daemon ``BackgroundConsumer`` thread. When training stops in the middle of an epoch
(``--max-update``), that thread is still collating the next batches as the process exits. A
daemon thread that is inside a torch operator when Python finalizes is killed as soon as the
operator hands a tensor back to Python (it must take the GIL, finds the interpreter finalizing
and calls ``pthread_exit``); the forced unwind crosses a ``noexcept`` C++ frame and the process
aborts with ``terminate called without an active exception`` (exit -6) *after* a successful run.
With torch 2.13 and Python 3.11 this hits most runs whose collater does tensor work, fairseq's own
datasets included.

The fix, registered with :mod:`atexit` when the plugin is imported (atexit handlers run before
daemon threads are stopped): tell every live consumer to stop after the batch in hand, drain its
queue so a blocked ``put`` returns, and join it.

>>> import roberta_ext.fairseq_plugin.shutdown as shutdown
>>> shutdown.stop_background_consumers()    # nothing running: returns at once
0
"""

from __future__ import annotations

import atexit
import queue
import threading
import time

_registered = False


def stop_background_consumers(timeout: float = 10.0) -> int:
    """Stop and join every running fairseq ``BackgroundConsumer``; return how many were stopped.

    A consumer finishes the batch it is collating, then sees its length limit reached and ends;
    the batches it had buffered are discarded (the process is exiting). A consumer still alive
    after ``timeout`` seconds (a data loader worker that hangs) is left to the interpreter.

    >>> stop_background_consumers()
    0
    """
    from fairseq.data.iterators import BackgroundConsumer

    consumers = [t for t in threading.enumerate() if isinstance(t, BackgroundConsumer) and t.is_alive()]
    deadline = time.monotonic() + timeout
    for consumer in consumers:
        consumer._max_len = 0  # its loop breaks once ``count >= _max_len``, after the next put
        while consumer.is_alive() and time.monotonic() < deadline:
            _drain(consumer._queue)
            consumer.join(0.01)
        _drain(consumer._queue)
    return len(consumers)


def _drain(buffer: queue.Queue) -> None:
    try:
        while True:
            buffer.get_nowait()
    except queue.Empty:
        pass


def install() -> None:
    """Register :func:`stop_background_consumers` to run at exit (once per process)."""
    global _registered
    if not _registered:
        atexit.register(stop_background_consumers)
        _registered = True
