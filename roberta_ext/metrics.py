"""The metrics fairseq's ``sentence_prediction`` criterion reports (accuracy, F1, MCC, Pearson,
Spearman), computed with numpy exactly as the criterion's sklearn and scipy calls compute them,
so that ``roberta-ext predict`` needs neither (the tests compare with both)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "METRICS",
    "accuracy",
    "check_metrics",
    "compute_metrics",
    "f1_score",
    "format_metrics",
    "matthews_corrcoef",
    "pearson",
    "spearman",
]

METRICS = ("accuracy", "f1", "mcc", "pearson", "spearman")
Numbers = Sequence[float] | np.ndarray
"""Values a metric takes: class indices or regression values."""


def accuracy(predictions: Numbers, targets: Numbers) -> float:
    """Share of predictions equal to their target (fairseq's ``ncorrect / nsentences``).

    >>> accuracy([1, 0, 1, 1], [1, 1, 1, 0])
    0.5
    """
    p, t = np.asarray(predictions), np.asarray(targets)
    return float((p == t).mean()) if len(p) else math.nan


def f1_score(predictions: Numbers, targets: Numbers, positive: int = 1) -> float:
    """F1 of the class ``positive``: sklearn's ``f1_score(targets, predictions)`` for two
    classes (0.0 where it has no true or predicted positive, as sklearn's ``zero_division``).

    >>> f1_score([1, 0, 1, 1], [1, 1, 1, 0])
    0.6666666666666666
    """
    p, t = np.asarray(predictions) == positive, np.asarray(targets) == positive
    true_positives = float(np.sum(p & t))
    denominator = float(np.sum(p) + np.sum(t))
    return 2 * true_positives / denominator if denominator else 0.0


def matthews_corrcoef(predictions: Numbers, targets: Numbers) -> float:
    """The Matthews correlation coefficient, for two or more classes: sklearn's
    ``matthews_corrcoef(targets, predictions)``, step by step (0.0 where it is undefined).

    >>> round(matthews_corrcoef([1, 0, 1, 1], [1, 1, 1, 0]), 6)
    -0.333333
    """
    p, t = np.asarray(predictions, dtype=np.int64), np.asarray(targets, dtype=np.int64)
    classes, codes = np.unique(np.concatenate([t, p]), return_inverse=True)
    k = len(classes)
    confusion = np.bincount(codes[: len(t)] * k + codes[len(t) :], minlength=k * k).reshape(k, k)
    t_sum = confusion.sum(axis=1, dtype=np.float64)
    p_sum = confusion.sum(axis=0, dtype=np.float64)
    n_correct = np.trace(confusion, dtype=np.float64)
    n_samples = p_sum.sum()
    cov_ytyp = n_correct * n_samples - np.dot(t_sum, p_sum)
    cov_ypyp = n_samples**2 - np.dot(p_sum, p_sum)
    cov_ytyt = n_samples**2 - np.dot(t_sum, t_sum)
    if cov_ypyp * cov_ytyt == 0:
        return 0.0
    return float(cov_ytyp / np.sqrt(cov_ypyp * cov_ytyt))


def pearson(x: Numbers, y: Numbers) -> float:
    """Pearson's correlation, computed as scipy's ``pearsonr(x, y)[0]`` computes it (NaN for a
    constant input or fewer than two values, where scipy warns or raises). Clipped to [-1, 1] as
    scipy clips it; within, the last bit depends on how the machine's kernels round the dot
    product (``pearson(x, x)`` may be 0.9999999999999997), so compare it with a tolerance.

    >>> round(pearson([1.0, 2.0, 3.0, 4.0], [1.0, 3.0, 2.0, 5.0]), 6)
    0.831522
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if len(a) < 2 or np.all(a == a[0]) or np.all(b == b[0]):
        return math.nan
    am, bm = a - a.mean(), b - b.mean()
    am /= np.max(np.abs(am))  # scaled first, as scipy does, against overflow
    bm /= np.max(np.abs(bm))
    r = np.dot(am / np.linalg.norm(am), bm / np.linalg.norm(bm))
    return float(np.clip(r, -1.0, 1.0))


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their average rank (scipy's ``rankdata(x, "average")``)."""
    order = np.argsort(x, kind="mergesort")
    inverse = np.empty(len(x), dtype=np.intp)
    inverse[order] = np.arange(len(x))
    ordered = x[order]
    first = np.r_[True, ordered[1:] != ordered[:-1]]
    dense = np.cumsum(first)[inverse]
    starts = np.r_[np.nonzero(first)[0], len(first)]
    return 0.5 * (starts[dense] + starts[dense - 1] + 1)


def spearman(x: Numbers, y: Numbers) -> float:
    """Spearman's rank correlation: Pearson's on average ranks, as scipy's ``spearmanr(x, y)[0]``.

    >>> round(spearman([1.0, 2.0, 3.0, 4.0], [10.0, 30.0, 20.0, 50.0]), 6)
    0.8
    """
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    return pearson(_average_ranks(a), _average_ranks(b))


def compute_metrics(
    names: Sequence[str], predictions: Numbers, targets: Numbers, *, positive: int = 1
) -> dict[str, float]:
    """The metrics ``names`` of predictions against targets, as fractions (not percentages),
    plus fairseq's means ``acc_and_f1`` and ``pearson_and_spearman`` where both parts are asked.
    Classification takes class indices (F1 counts ``positive`` as the positive class);
    regression takes the values.

    >>> compute_metrics(["accuracy", "f1"], [1, 0, 1, 1], [1, 1, 1, 0])
    {'accuracy': 0.5, 'f1': 0.6666666666666666, 'acc_and_f1': 0.5833333333333333}
    """
    functions = {
        "accuracy": accuracy,
        "f1": lambda p, t: f1_score(p, t, positive),
        "mcc": matthews_corrcoef,
        "pearson": pearson,
        "spearman": spearman,
    }
    values = {name: functions[name](predictions, targets) for name in names}
    if "accuracy" in values and "f1" in values:
        values["acc_and_f1"] = (values["accuracy"] + values["f1"]) / 2
    if "pearson" in values and "spearman" in values:
        values["pearson_and_spearman"] = (values["pearson"] + values["spearman"]) / 2
    return values


def format_metrics(values: dict[str, float]) -> str:
    """The metrics as fairseq logs them: percentages rounded to one decimal, ``|``-separated.

    >>> format_metrics({"accuracy": 0.845, "mcc": 0.0})
    'accuracy 84.5 | mcc 0.0'
    """
    return " | ".join(f"{name} {round(value * 100, 1)}" for name, value in values.items())


def check_metrics(metrics: Sequence[str], *, regression: bool, num_classes: int) -> None:
    """Refuse metrics that do not fit the head: a classification metric of a regression head,
    F1 of more than two classes, correlations of several outputs, an unknown name.

    >>> check_metrics(["accuracy", "mcc"], regression=False, num_classes=3)
    """
    for name in metrics:
        if name not in METRICS:
            raise ValueError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")
        if regression and name in ("accuracy", "f1", "mcc"):
            raise ValueError(f"{name} is a classification metric, and the head is a regression head")
        if not regression and name in ("pearson", "spearman"):
            raise ValueError(f"{name} is a regression metric, and the head is a classification head")
        if name == "f1" and num_classes != 2:
            raise ValueError(f"f1 is for two classes, and the head has {num_classes}")
    if regression and metrics and num_classes != 1:
        raise ValueError(f"correlations need one regression output, and the head has {num_classes}")
