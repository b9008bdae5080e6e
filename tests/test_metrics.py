"""The metrics of ``roberta-ext predict`` (roberta_ext/metrics.py): equal to sklearn's and scipy's,
which fairseq's ``sentence_prediction`` criterion calls, on random inputs and on the edge cases
(empty, constant, huge or float32 values); fairseq's combined means; and the messages of
:func:`check_metrics`. Fast and without a model (tests/test_predict.py checks them end to end)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from roberta_ext.metrics import (
    accuracy,
    check_metrics,
    compute_metrics,
    f1_score,
    format_metrics,
    matthews_corrcoef,
    pearson,
    spearman,
)
from tests.peers import require


@pytest.mark.parametrize("seed", range(12))
def test_classification_metrics_equal_sklearns(seed):
    sk = require("sklearn.metrics", "the metrics are checked against sklearn")
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(2, 60)), 2 if seed % 2 else int(rng.integers(3, 6))
    targets, predictions = rng.integers(0, k, n), rng.integers(0, k, n)
    assert accuracy(predictions, targets) == pytest.approx(sk.accuracy_score(targets, predictions), abs=1e-15)
    assert matthews_corrcoef(predictions, targets) == pytest.approx(
        sk.matthews_corrcoef(targets, predictions), abs=1e-12
    )
    if k == 2:
        assert f1_score(predictions, targets) == pytest.approx(
            sk.f1_score(targets, predictions, zero_division=0.0), abs=1e-12
        )


@pytest.mark.parametrize("seed", range(12))
def test_correlations_equal_scipys(seed):
    stats = require("scipy.stats", "the correlations are checked against scipy")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 60))
    x = rng.normal(size=n) if seed % 3 else rng.integers(0, 4, n).astype(float)  # with ties
    y = x * rng.normal() + rng.normal(size=n)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)


def test_mcc_of_many_rows_equals_sklearns():
    """sklearn sums the confusion matrix in float64: summed in int64 throughout, the product of
    two variances (about rows**4) overflows past 55,000 rows (MCC 1.18 here)."""
    sk = require("sklearn.metrics", "the metrics are checked against sklearn")
    rng = np.random.default_rng(0)
    targets = rng.integers(0, 2, 100_000)
    predictions = np.where(rng.random(100_000) < 0.8, targets, 1 - targets)
    assert matthews_corrcoef(predictions, targets) == pytest.approx(
        sk.matthews_corrcoef(targets, predictions), abs=1e-12
    )


@pytest.mark.parametrize(
    ("predictions", "targets", "expected"),
    [
        ([1, 0], [0, 1], -1.0),  # every prediction wrong: the confusion matrix has no (1, 1) cell
        ([0, 1, 2], [0, 1, 2], 1.0),
        ([1, 0, 1, 1], [1, 1, 1, 0], -1 / 3),  # tp 2, tn 0, fp 1, fn 1: (0 - 1) / sqrt(3 * 3 * 1 * 1)
        ([2, 2, 0], [0, 2, 2], -0.5),  # classes 0 and 2: tp 1, tn 0, fp 1, fn 1: -1 / sqrt(2 * 2 * 1 * 1)
    ],
)
def test_mcc_by_hand(predictions, targets, expected):
    assert matthews_corrcoef(predictions, targets) == pytest.approx(expected, abs=1e-15)


def test_f1_counts_the_positive_class():
    # targets 1 1 0 0, predictions 1 0 1 0: for class 1 (or 0), one true positive of two and two.
    assert f1_score([1, 0, 1, 0], [1, 1, 0, 0]) == 0.5
    assert f1_score([1, 1, 1, 0], [1, 1, 0, 0]) == pytest.approx(2 * 2 / (3 + 2))
    assert f1_score([1, 1, 1, 0], [1, 1, 0, 0], positive=0) == pytest.approx(2 * 1 / (1 + 2))
    assert f1_score([0, 0], [0, 0]) == 0.0  # no positive anywhere: sklearn's zero_division=0.0


@pytest.mark.filterwarnings("error")  # no numpy warning on the user's terminal
@pytest.mark.parametrize(
    ("x", "y"),
    [([], []), ([1.0], [2.0]), ([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]), ([1.0, 2.0, 3.0], [5.0, 5.0, 5.0])],
)
def test_undefined_metrics_are_nan_or_zero_without_a_warning(x, y):
    assert math.isnan(pearson(x, y)) and math.isnan(spearman(x, y))
    if not x:
        assert math.isnan(accuracy(x, y))
    assert matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0  # one class everywhere


@pytest.mark.parametrize(("y", "expected"), [([3.0, 5.0], 1.0), ([5.0, 3.0], -1.0)])
def test_two_values_are_perfectly_correlated(y, expected):
    # Not NaN (two values are enough); scipy gives the same, up to rounding.
    assert pearson([1.0, 2.0], y) == pytest.approx(expected, abs=1e-12)
    assert spearman([1.0, 2.0], y) == pytest.approx(expected, abs=1e-12)


def test_pearson_of_float32_values_is_computed_in_float64():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=50).astype(np.float32), rng.normal(size=50).astype(np.float32)
    exact = pearson(x.astype(np.float64), y.astype(np.float64))
    assert pearson(x, y) == exact and pearson(x, y.astype(np.float64)) == pearson(x.astype(np.float64), y)


@pytest.mark.parametrize("scale", [1e200, 1e-200])
def test_pearson_of_huge_or_tiny_values_does_not_overflow(scale):
    """Centred values are scaled by their largest first, as scipy does: no inf, no 0."""
    x, y = [1.0, 2.0, 4.0, 3.0], [1.0, 3.0, 2.0, 5.0]
    expected = pearson(x, y)
    assert pearson([v * scale for v in x], y) == pytest.approx(expected, abs=1e-12)
    assert pearson(x, [v * scale for v in y]) == pytest.approx(expected, abs=1e-12)


SUMMATION_ORDERS = {
    "numpy": np.dot,
    "first-to-last": lambda a, b: float(sum(a * b)),
    "last-to-first": lambda a, b: float(sum((a * b)[::-1])),
    "correctly-rounded": lambda a, b: math.fsum(a * b),
}
"""Dot products as different machines' vector kernels round them: the last bit of a sum depends on
the order (and width) in which its terms are added."""


@pytest.mark.parametrize("dot", SUMMATION_ORDERS.values(), ids=SUMMATION_ORDERS.keys())
def test_a_correlation_is_never_beyond_one(dot, monkeypatch):
    """A normalized vector's dot product with itself rounds to 1 give or take a few units in the
    last place, up or down depending on the machine's kernels: the x below gave 1 + 2**-52 on one
    machine and 1 - 3 * 2**-53 on another of the same kind, so no test compares with 1.0 exactly.
    Clipped, as scipy clips it, |r| is never beyond 1, whichever way each sum rounds (in each
    order, some of these sums round above 1)."""
    monkeypatch.setattr(np, "dot", dot)
    rng = np.random.default_rng(0)
    first = [0.726093788947765, 0.843732662303268, 1.1648639811110282, 0.7875882217058694, 0.844078680578592]
    for x in [np.array(first), *(rng.normal(size=n) * rng.uniform(0.1, 10) for n in range(3, 100))]:
        for sign in (1.0, -1.0):
            r = pearson(x, sign * x)
            assert -1.0 <= r <= 1.0 and r == pytest.approx(sign, abs=1e-14), (len(x), sign, r)


def test_spearman_ranks_ties_by_their_average():
    # Ranks of x: 1, 2.5, 2.5, 4; of y: 1, 2, 3, 4. Centred: -1.5, 0, 0, 1.5 and -1.5, -0.5, 0.5, 1.5,
    # whose dot product is 4.5 and squared norms 4.5 and 5. Up to rounding: the last bits of a dot
    # product depend on the machine's kernels (test_a_correlation_is_never_beyond_one).
    assert spearman([1.0, 2.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]) == pytest.approx(4.5 / math.sqrt(4.5 * 5), abs=1e-14)
    assert spearman([1.0, 2.0, 3.0, 4.0], [10.0, 30.0, 20.0, 50.0]) == pytest.approx(0.8, abs=1e-14)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["accuracy", "f1"], {"accuracy": 0.5, "f1": 2 / 3, "acc_and_f1": (0.5 + 2 / 3) / 2}),
        (["f1"], {"f1": 2 / 3}),  # the positive class is 1 unless told
        (["mcc"], {"mcc": -1 / 3}),
        (["accuracy"], {"accuracy": 0.5}),
    ],
)
def test_compute_metrics_adds_fairseqs_means_only_where_both_parts_are_asked(names, expected):
    assert compute_metrics(names, [1, 0, 1, 1], [1, 1, 1, 0]) == pytest.approx(expected, abs=1e-15)


@pytest.mark.parametrize("names", [["pearson"], ["spearman"], ["pearson", "spearman"]])
def test_compute_metrics_of_correlations(names):
    predictions, targets = [1.0, 2.0, 3.0, 4.0], [10.0, 30.0, 20.0, 50.0]
    values = compute_metrics(names, predictions, targets)
    expected = {"pearson": pearson(predictions, targets), "spearman": 0.8}  # 0.8 up to rounding
    assert set(values) == set(names) | ({"pearson_and_spearman"} if len(names) == 2 else set())
    for name in names:
        assert values[name] == pytest.approx(expected[name], abs=1e-14)
    if len(names) == 2:
        assert values["pearson_and_spearman"] == pytest.approx((expected["pearson"] + 0.8) / 2, abs=1e-14)


def test_compute_metrics_takes_the_positive_class():
    assert compute_metrics(["f1"], [1, 0, 1, 1], [1, 1, 1, 0], positive=0) == {"f1": 0.0}


def test_format_metrics_as_fairseq_logs_them():
    assert format_metrics({"accuracy": 0.8456, "mcc": 0.0, "f1": 1 / 3}) == "accuracy 84.6 | mcc 0.0 | f1 33.3"


@pytest.mark.parametrize(
    ("metrics", "regression", "num_classes", "message"),
    [
        (["bleu"], False, 2, "unknown metric 'bleu'; choose from accuracy, f1, mcc, pearson, spearman"),
        (["accuracy"], True, 1, "accuracy is a classification metric, and the head is a regression head"),
        (["f1"], True, 1, "f1 is a classification metric, and the head is a regression head"),
        (["mcc"], True, 1, "mcc is a classification metric, and the head is a regression head"),
        (["pearson"], False, 2, "pearson is a regression metric, and the head is a classification head"),
        (["spearman"], False, 2, "spearman is a regression metric, and the head is a classification head"),
        (["accuracy", "f1"], False, 3, "f1 is for two classes, and the head has 3"),
        (["pearson"], True, 2, "correlations need one regression output, and the head has 2"),
    ],
)
def test_metrics_that_do_not_fit_the_head_are_refused_with_why(metrics, regression, num_classes, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_metrics(metrics, regression=regression, num_classes=num_classes)


@pytest.mark.parametrize(
    ("metrics", "regression", "num_classes"),
    [(["accuracy", "f1", "mcc"], False, 2), (["accuracy", "mcc"], False, 3), (["pearson", "spearman"], True, 1)]
    + [([], True, 3)],
)
def test_metrics_that_fit_the_head_are_taken(metrics, regression, num_classes):
    check_metrics(metrics, regression=regression, num_classes=num_classes)
