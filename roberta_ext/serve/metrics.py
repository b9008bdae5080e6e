"""The server's Prometheus metrics, in a registry of its own (one per app: two servers in one
process, as in the tests, never mix their counts).

``GET /metrics`` serves them in Prometheus' text format. What they answer:

* how much is asked and how it goes: ``roberta_ext_requests_total{endpoint, status}``,
  ``roberta_ext_request_errors_total{endpoint, kind}`` (``kind``: the error type of the answer:
  ``Validation``, ``Empty``, ``Overloaded``, ``Timeout``, ``Backend``, ``Unhealthy``,
  and ``ClientClosed`` with status 499 for a client that hung up before its answer: not a
  server error, so that an alert on ``Backend`` or on 5xx stays quiet),
  ``roberta_ext_request_duration_seconds{endpoint}`` (a histogram);
* how the batching does: ``roberta_ext_queue_depth`` (requests waiting for the model worker),
  ``roberta_ext_queue_duration_seconds`` (time a request waited), ``roberta_ext_batch_requests``
  and ``roberta_ext_batch_rows`` (requests and inputs per forward pass),
  ``roberta_ext_batch_tokens`` (padded tokens per forward pass), ``roberta_ext_batch_duration_seconds``;
* how fast the model runs: ``roberta_ext_tokens_total`` (``rate()`` of it is tokens/s over any
  window) and ``roberta_ext_tokens_per_second`` (the last forward pass's rate);
* how admission does (:mod:`.admission`): ``roberta_ext_admitted_requests_total`` (work queued
  for the model), ``roberta_ext_refused_requests_total{reason}`` (``slots``: every slot taken;
  ``expected_wait``: it would not be done within the timeout), ``roberta_ext_estimated_tokens_
  per_second{task}`` (the moving rate each kind of work is estimated at) and
  ``roberta_ext_wait_estimate_error_seconds`` (a request's time from queued to done less the
  time expected when it was queued, for requests queued with a rate known: a histogram with
  negative buckets, so without ``_sum``; ``le="0"`` counts those done no later than expected).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["CONTENT_TYPE", "ServerMetrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
COUNT_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TOKEN_BUCKETS = (16, 64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
ERROR_BUCKETS = (-10.0, -5.0, -2.5, -1.0, -0.5, -0.25, -0.1, -0.05, 0.0, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Seconds a request took more (positive) or less (negative) than it was expected to."""


class ServerMetrics:
    """Every metric of one server, registered in :attr:`registry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.requests = Counter(
            "roberta_ext_requests", "HTTP requests answered, by endpoint and status", ["endpoint", "status"], registry=r
        )
        self.errors = Counter(
            "roberta_ext_request_errors", "Requests answered with an error, by kind", ["endpoint", "kind"], registry=r
        )
        self.request_duration = Histogram(
            "roberta_ext_request_duration_seconds",
            "Time from a request's arrival to its answer",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue_depth = Gauge("roberta_ext_queue_depth", "Requests waiting for the model worker", registry=r)
        self.queue_duration = Histogram(
            "roberta_ext_queue_duration_seconds",
            "Time a request waited before its forward pass began",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.batch_requests = Histogram(
            "roberta_ext_batch_requests", "Requests per forward pass", buckets=COUNT_BUCKETS, registry=r
        )
        self.batch_rows = Histogram(
            "roberta_ext_batch_rows", "Inputs (rows) per forward pass", buckets=COUNT_BUCKETS, registry=r
        )
        self.batch_tokens = Histogram(
            "roberta_ext_batch_tokens",
            "Padded tokens (rows x longest row) per forward pass",
            buckets=TOKEN_BUCKETS,
            registry=r,
        )
        self.batch_duration = Histogram(
            "roberta_ext_batch_duration_seconds",
            "Time of one group of forward passes",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.tokens = Counter("roberta_ext_tokens", "Tokens run through the model (padding not counted)", registry=r)
        self.tokens_per_second = Gauge(
            "roberta_ext_tokens_per_second", "Tokens per second of the last forward pass", registry=r
        )
        self.admitted = Counter(
            "roberta_ext_admitted_requests", "Requests whose work was queued for the model", registry=r
        )
        self.refused = Counter(
            "roberta_ext_refused_requests",
            "Requests refused 429 before any work: every slot taken (slots), or not to be done within "
            "the timeout at the estimated rate (expected_wait)",
            ["reason"],
            registry=r,
        )
        self.estimated_tokens_per_second = Gauge(
            "roberta_ext_estimated_tokens_per_second",
            "The moving estimate of the model's rate, by kind of work, that admission uses",
            ["task"],
            registry=r,
        )
        self.wait_estimate_error = Histogram(
            "roberta_ext_wait_estimate_error_seconds",
            "A request's time from queued to done, less the time expected when it was queued",
            buckets=ERROR_BUCKETS,
            registry=r,
        )

    def render(self) -> bytes:
        """The text format ``GET /metrics`` answers with (:data:`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
