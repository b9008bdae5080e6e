"""Admission by expected wait: how long a request would take, from the tokens queued ahead of it
and the rate the model has been running at, so that one it cannot finish within its timeout is
refused at once (429, with a ``Retry-After`` from the same estimate) instead of waiting the whole
timeout for a 504.

:class:`TokenRate` is the moving estimate of one kind of work (``embed``, ``predict``,
``fill_mask``: their costs per token differ), updated by the worker as each batch finishes.
:func:`expected_wait` turns the work ahead of a request into seconds. Until a kind's first batch
has been measured it has no rate, and a request of that kind is admitted: there is nothing to
estimate from.

>>> rate = TokenRate()
>>> rate.tokens_per_second is None
True
>>> rate.update(tokens=1000, seconds=0.5)
>>> rate.tokens_per_second, rate.batch_seconds
(2000.0, 0.5)
>>> expected_wait(ahead_tokens=4000, own_tokens=1000, rate=rate, running_s=0.25)
Expected(ahead_s=2.25, done_s=2.75, slack_s=0.5)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SMOOTHING", "Expected", "TokenRate", "expected_wait", "retry_after"]

SMOOTHING = 0.2
"""The weight of the newest batch in the moving estimate: about the last ten batches count, so
the rate follows a change of load or of input lengths within a few batches, and one slow batch
(a pause of the machine) raises the time per token by a fifth of its excess, for a few batches."""


class TokenRate:
    """Tokens per second of one kind of work, as an exponentially weighted moving average of
    the tokens and the seconds of its batches (a ratio of averages: a large batch weighs as
    much as its time, and a batch of a few tokens cannot swing the rate).

    >>> rate = TokenRate()
    >>> rate.update(tokens=100, seconds=1.0)
    >>> rate.update(tokens=300, seconds=1.0)
    >>> round(rate.tokens_per_second, 1), rate.batches
    (140.0, 2)
    """

    def __init__(self, smoothing: float = SMOOTHING) -> None:
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing}")
        self.smoothing = smoothing
        self.batches = 0
        self._tokens = 0.0
        self._seconds = 0.0

    def update(self, *, tokens: int, seconds: float) -> None:
        """Take in one finished batch of ``tokens`` (padding not counted) that ran ``seconds``."""
        if tokens <= 0 or seconds <= 0:
            return  # nothing measured
        weight = 1.0 if self.batches == 0 else self.smoothing
        self._tokens += weight * (tokens - self._tokens)
        self._seconds += weight * (seconds - self._seconds)
        self.batches += 1

    @property
    def tokens_per_second(self) -> float | None:
        """The estimate; ``None`` before the first batch."""
        return self._tokens / self._seconds if self.batches else None

    @property
    def batch_seconds(self) -> float:
        """How long a batch of this kind takes, on average lately (0 before the first)."""
        return self._seconds if self.batches else 0.0


@dataclass(frozen=True)
class Expected:
    """What a request waits for, in seconds from now."""

    ahead_s: float
    """Until the work queued (and running) ahead of it is done."""
    done_s: float
    """Until its own work is done too: the time its timeout bounds."""
    slack_s: float
    """One batch more: the batch it runs in may also hold requests that came after it (the
    worker fills a batch with the work of the same kind behind the oldest), and is done only
    when they are."""

    def too_late(self, timeout_s: float) -> bool:
        """Whether the request would not be done within ``timeout_s``. A request with nothing
        ahead of it is never refused: waiting could not make it faster."""
        return self.ahead_s > 0 and self.done_s + self.slack_s > timeout_s


def expected_wait(*, ahead_tokens: float, own_tokens: int, rate: TokenRate, running_s: float = 0.0) -> Expected:
    """How long a request of ``own_tokens`` waits behind ``ahead_tokens`` (of its kind, or already
    counted in seconds in ``running_s``: what is left of the batch running, and the work of other
    kinds), at ``rate``, which must have been measured."""
    per_second = rate.tokens_per_second
    if per_second is None:
        raise ValueError("no rate was measured yet: admit, there is nothing to estimate from")
    ahead = running_s + ahead_tokens / per_second
    return Expected(ahead_s=ahead, done_s=ahead + own_tokens / per_second, slack_s=rate.batch_seconds)


def retry_after(expected: Expected, timeout_s: float) -> int:
    """Seconds after which the work ahead now will have drained enough for the request to be
    done within ``timeout_s`` (work queued meanwhile aside); at least 1, whole seconds as
    ``Retry-After`` takes them.

    >>> retry_after(Expected(ahead_s=9.0, done_s=10.0, slack_s=0.5), timeout_s=5.0)
    6
    """
    return max(1, math.ceil(expected.done_s + expected.slack_s - timeout_s))
