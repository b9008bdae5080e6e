"""A server's options on their own: each range's edges, each refusal in full (the command line
shows it as is), and how long SIGTERM waits."""

from __future__ import annotations

import dataclasses
import re

import pytest

from roberta_ext.serve import ServeOptions

TAKE_ZERO = {"retry_after_s", "graceful_shutdown_s"}
"""The number options that may be 0 (a ``Retry-After`` of 0, no wait on SIGTERM); the port has a range of its own."""
POSITIVE = [
    field.name
    for field in dataclasses.fields(ServeOptions)
    if field.type in ("int", "float", "int | None", "float | None") and field.name not in {"port", *TAKE_ZERO}
]
"""Every other number option is a limit or a count, which must be positive."""


@pytest.mark.parametrize("port", [1, 65535])
def test_the_ports_range_ends_are_accepted(port):
    assert ServeOptions(port=port).port == port


@pytest.mark.parametrize("port", [0, 65536, -1])
def test_a_port_outside_the_range_is_refused_in_full(port):
    with pytest.raises(ValueError, match=f"^port must be in 1..65535, got {port}$"):
        ServeOptions(port=port)


@pytest.mark.parametrize("name", POSITIVE)
def test_each_positive_option_refuses_zero_and_below_in_full_and_takes_one(name):
    assert len(POSITIVE) == 7  # the batching limits, the payload, the timeout and the threads
    for bad in (0, -2):
        with pytest.raises(ValueError, match=f"^{re.escape(name)} must be > 0, got {bad}$"):
            ServeOptions(**{name: bad})
    assert getattr(ServeOptions(**{name: 1}), name) == 1


def test_the_optional_limits_may_be_none_and_others_may_be_zero():
    options = ServeOptions(max_batch_requests=None, threads=None, retry_after_s=0, graceful_shutdown_s=0.0)
    assert (options.max_batch_requests, options.threads, options.retry_after_s) == (None, None, 0)
    with pytest.raises(ValueError, match=r"^retry_after_s must be >= 0, got -1$"):
        ServeOptions(retry_after_s=-1)


def test_sigterm_waits_the_timeout_and_five_seconds_unless_told():
    assert ServeOptions(timeout_s=12.5).shutdown_wait_s == 17.5
    assert ServeOptions(timeout_s=12.5, graceful_shutdown_s=3.0).shutdown_wait_s == 3.0
    assert ServeOptions(graceful_shutdown_s=0.0).shutdown_wait_s == 0.0
