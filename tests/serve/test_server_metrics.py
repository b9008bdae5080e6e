"""The server's Prometheus metrics without a server: what ``GET /metrics`` shows
(:meth:`ServerMetrics.render`) for each metric the server code records into, against what the module's
docstring documents (names, labels), with each metric's help and its histogram's buckets."""

from __future__ import annotations

import math
import re

from roberta_ext.serve import metrics as metrics_module
from roberta_ext.serve.metrics import (
    CONTENT_TYPE,
    COUNT_BUCKETS,
    ERROR_BUCKETS,
    LATENCY_BUCKETS,
    TOKEN_BUCKETS,
    ServerMetrics,
)

METRICS = {
    # attribute the server records into: (the name /metrics shows, its labels, its type, its help)
    "requests": (
        "roberta_ext_requests_total",
        ("endpoint", "status"),
        "counter",
        "HTTP requests answered, by endpoint and status",
    ),
    "errors": (
        "roberta_ext_request_errors_total",
        ("endpoint", "kind"),
        "counter",
        "Requests answered with an error, by kind",
    ),
    "request_duration": (
        "roberta_ext_request_duration_seconds",
        ("endpoint",),
        "histogram",
        "Time from a request's arrival to its answer",
    ),
    "queue_depth": ("roberta_ext_queue_depth", (), "gauge", "Requests waiting for the model worker"),
    "queue_duration": (
        "roberta_ext_queue_duration_seconds",
        (),
        "histogram",
        "Time a request waited before its forward pass began",
    ),
    "batch_requests": ("roberta_ext_batch_requests", (), "histogram", "Requests per forward pass"),
    "batch_rows": ("roberta_ext_batch_rows", (), "histogram", "Inputs (rows) per forward pass"),
    "batch_tokens": (
        "roberta_ext_batch_tokens",
        (),
        "histogram",
        "Padded tokens (rows x longest row) per forward pass",
    ),
    "batch_duration": ("roberta_ext_batch_duration_seconds", (), "histogram", "Time of one group of forward passes"),
    "tokens": ("roberta_ext_tokens_total", (), "counter", "Tokens run through the model (padding not counted)"),
    "tokens_per_second": ("roberta_ext_tokens_per_second", (), "gauge", "Tokens per second of the last forward pass"),
    "admitted": ("roberta_ext_admitted_requests_total", (), "counter", "Requests whose work was queued for the model"),
    "refused": (
        "roberta_ext_refused_requests_total",
        ("reason",),
        "counter",
        "Requests refused 429 before any work: every slot taken (slots), or not to be done within the timeout at "
        "the estimated rate (expected_wait)",
    ),
    "estimated_tokens_per_second": (
        "roberta_ext_estimated_tokens_per_second",
        ("task",),
        "gauge",
        "The moving estimate of the model's rate, by kind of work, that admission uses",
    ),
    "wait_estimate_error": (
        "roberta_ext_wait_estimate_error_seconds",
        (),
        "histogram",
        "A request's time from queued to done, less the time expected when it was queued",
    ),
}

BUCKETS = {
    "roberta_ext_request_duration_seconds": LATENCY_BUCKETS,
    "roberta_ext_queue_duration_seconds": LATENCY_BUCKETS,
    "roberta_ext_batch_duration_seconds": LATENCY_BUCKETS,
    "roberta_ext_batch_requests": COUNT_BUCKETS,
    "roberta_ext_batch_rows": COUNT_BUCKETS,
    "roberta_ext_batch_tokens": TOKEN_BUCKETS,
    "roberta_ext_wait_estimate_error_seconds": ERROR_BUCKETS,
}

SAMPLE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>[^}]*)\})? (?P<value>\S+)$")


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """The sample lines of the text format: name, labels, value (``_created`` timestamps left out)."""
    found = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        if match["name"].endswith("_created"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"] or ""))
        found.append((match["name"], labels, float(match["value"])))
    return found


def comments(text: str, kind: str) -> dict[str, str]:
    """``# HELP name text`` or ``# TYPE name type`` lines, by name (``_created`` ones left out)."""
    found = {}
    for line in text.splitlines():
        if line.startswith(f"# {kind} "):
            name, _, rest = line.removeprefix(f"# {kind} ").partition(" ")
            if not name.endswith("_created"):
                found[name] = rest
    return found


def touched() -> ServerMetrics:
    """A server's metrics with one value recorded into each, labelled metrics with their labels."""
    metrics = ServerMetrics()
    for attribute, (_, labels, kind, _) in METRICS.items():
        metric = getattr(metrics, attribute)
        if labels:
            metric = metric.labels(**{label: f"{label}-1" for label in labels})
        record = {"counter": "inc", "gauge": "set", "histogram": "observe"}[kind]
        getattr(metric, record)(3)
    return metrics


def documented() -> dict[str, tuple[str, ...]]:
    """The metrics the module's docstring names (``name{label, label}``), as a name -> labels map."""
    text = re.sub(r"_\n\s*", "_", metrics_module.__doc__)  # a name cut at the end of a line
    names = re.findall(r"``(roberta_ext_\w+)(?:\{([\w, ]*)\})?``", text)
    return {name: tuple(label.strip() for label in labels.split(",")) if labels else () for name, labels in names}


def test_the_docstring_documents_every_metric_with_its_labels_as_metrics_shows_them():
    shown = {}
    for name, labels, _ in samples(touched().render().decode("utf-8")):
        base = re.sub(r"_(bucket|count|sum)$", "", name)
        shown.setdefault(base, set()).add(tuple(sorted(set(labels) - {"le"})))
    assert documented() == {name: labels for name, labels, _, _ in METRICS.values()}
    assert {name: [tuple(sorted(labels))] for name, labels, _, _ in METRICS.values()} == {
        name: sorted(labels) for name, labels in shown.items()
    }


def test_every_metric_has_its_type_and_help_in_the_text():
    text = ServerMetrics().render().decode("utf-8")
    assert comments(text, "TYPE") == {name: kind for name, _, kind, _ in METRICS.values()}
    assert comments(text, "HELP") == {name: text for name, _, _, text in METRICS.values()}


def test_a_recorded_value_shows_with_its_labels():
    shown = samples(touched().render().decode("utf-8"))
    assert ("roberta_ext_requests_total", {"endpoint": "endpoint-1", "status": "status-1"}, 3.0) in shown
    assert ("roberta_ext_request_errors_total", {"endpoint": "endpoint-1", "kind": "kind-1"}, 3.0) in shown
    assert ("roberta_ext_refused_requests_total", {"reason": "reason-1"}, 3.0) in shown
    assert ("roberta_ext_estimated_tokens_per_second", {"task": "task-1"}, 3.0) in shown
    assert ("roberta_ext_queue_depth", {}, 3.0) in shown
    assert ("roberta_ext_request_duration_seconds_count", {"endpoint": "endpoint-1"}, 1.0) in shown
    assert ("roberta_ext_batch_tokens_sum", {}, 3.0) in shown


def test_each_histogram_shows_its_own_buckets():
    shown: dict[str, list[float]] = {}
    for name, labels, _ in samples(touched().render().decode("utf-8")):
        if name.endswith("_bucket"):
            shown.setdefault(name.removesuffix("_bucket"), []).append(float(labels["le"]))
    assert shown == {name: [*map(float, buckets), math.inf] for name, buckets in BUCKETS.items()}


def test_the_buckets_grow_and_cover_what_they_measure():
    for buckets in (LATENCY_BUCKETS, COUNT_BUCKETS, TOKEN_BUCKETS, ERROR_BUCKETS):
        assert list(buckets) == sorted(set(buckets))
    assert (LATENCY_BUCKETS[0], LATENCY_BUCKETS[-1]) == (0.001, 60.0)  # a millisecond to a minute
    assert COUNT_BUCKETS == tuple(2**i for i in range(11))  # powers of two, 1 to 1024
    assert TOKEN_BUCKETS[0] == 16 and all(b == 2 * a for a, b in zip(TOKEN_BUCKETS[3:], TOKEN_BUCKETS[4:]))
    assert ERROR_BUCKETS == tuple(-b for b in reversed(ERROR_BUCKETS))  # as early as late, around 0
    assert 0.0 in ERROR_BUCKETS


def test_the_wait_estimate_error_has_negative_buckets_and_no_sum():
    metrics = ServerMetrics()
    for seconds in (-0.3, 0.0, 0.2):
        metrics.wait_estimate_error.observe(seconds)
    metrics.queue_duration.observe(0.2)
    shown = {(name, labels.get("le")): value for name, labels, value in samples(metrics.render().decode("utf-8"))}
    name = "roberta_ext_wait_estimate_error_seconds"
    assert shown[(f"{name}_bucket", "-0.5")] == 0 and shown[(f"{name}_bucket", "-0.25")] == 1
    assert shown[(f"{name}_bucket", "0.0")] == 2  # done no later than expected
    assert shown[(f"{name}_count", None)] == 3 and (f"{name}_sum", None) not in shown
    assert shown[("roberta_ext_queue_duration_seconds_sum", None)] == 0.2


def test_two_servers_never_mix_their_counts():
    first, second = ServerMetrics(), ServerMetrics()
    first.tokens.inc(7)
    second.tokens.inc(2)
    assert ("roberta_ext_tokens_total", {}, 7.0) in samples(first.render().decode("utf-8"))
    assert ("roberta_ext_tokens_total", {}, 2.0) in samples(second.render().decode("utf-8"))


def test_a_fresh_server_shows_zeros_and_no_labelled_samples():
    shown = samples(ServerMetrics().render().decode("utf-8"))
    assert all(value == 0 for _, _, value in shown)
    assert not any(labels.keys() - {"le"} for _, labels, _ in shown)


def test_the_text_is_prometheus_text_format():
    assert CONTENT_TYPE.startswith("text/plain; version=")
    assert ServerMetrics().render().decode("utf-8").endswith("\n")
