"""Predictions of a fine-tuned model's classification (or regression) head for many rows, written
to a file in input order, with the task's metrics: what ``roberta-ext predict`` runs.

It takes a model and its :class:`~roberta_ext.inference.inputs.ModelInputs` (as the hub holds them) and
rows (:class:`~roberta_ext.corpus.rows.Row`, from :class:`~roberta_ext.corpus.rows.RowReader`),
reads them in chunks, runs each chunk in length-sorted batches under a token budget
(:func:`~roberta_ext.data.batching.length_batches`, the batcher of ``embed`` too) and writes one
prediction per row, in input order: by default GLUE's submission format (``index<TAB>prediction``,
the prediction being the label name of ``label/dict.txt``, as the ``label_fn`` of fairseq's GLUE
tutorial gives it), or JSON lines. Rows with labels are scored by :mod:`roberta_ext.metrics`, as
fairseq's ``sentence_prediction`` criterion scores them. The output is written whole or not at all;
``-`` writes to standard output instead, row by row.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import torch
from tqdm import tqdm

from ..atomic import atomic_write
from ..corpus.reading import STDIO, CorpusError
from ..corpus.rows import Row
from ..metrics import check_metrics, compute_metrics
from ..modeling import EncoderModel
from .head_outputs import HeadError, classify_rows
from .inputs import ModelInputs

__all__ = ["OUTPUT_FORMATS", "PredictStats", "choose_head", "predict_file", "predict_rows"]

OUTPUT_FORMATS = ("tsv", "jsonl")


def choose_head(model: EncoderModel, head: str | None) -> str:
    """The classification head to predict with: ``head``, or the model's only one; else a
    :class:`~roberta_ext.inference.head_outputs.HeadError` naming the model's heads.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import RobertaModel
    >>> model = RobertaModel(preset("tiny"))
    >>> _ = model.register_classification_head("sentiment", num_classes=2)
    >>> choose_head(model, None)
    'sentiment'
    """
    heads = sorted(model.classification_heads)
    if head is not None:
        if head not in heads:
            raise HeadError(f"the model has no classification head {head!r}; its heads: {heads}")
        return head
    if len(heads) == 1:
        return heads[0]
    if not heads:
        raise HeadError("the model has no classification head: predict needs a fine-tuned model")
    raise HeadError(f"the model has {len(heads)} classification heads, {heads}: choose one with --head")


def predict_rows(
    model: EncoderModel,
    inputs: ModelInputs,
    head: str,
    rows: Iterable[Row],
    *,
    max_tokens: int = 8192,
    batch_size: int = 256,
    chunk_rows: int = 10_000,
    truncate: bool = False,
    where: str = "input",
    progress: Callable[[int], object] | None = None,
) -> Iterator[tuple[Row, torch.Tensor]]:
    """``(row, logits (num_classes,) as float32 on the CPU)`` for each row, in input order.

    Rows are read ``chunk_rows`` at a time; each chunk is encoded (``inputs.encode``), sorted
    by length into batches of at most ``batch_size`` rows and ``max_tokens`` padded tokens, run
    through the head ``head``, and given back in input order (``progress`` is called with the
    rows of each batch done). A row longer than ``inputs.max_positions`` is an error naming
    ``where`` and its line, unless ``truncate`` (cut at the end, as fairseq's
    ``--shorten-method truncate`` cut the rows the model was fine-tuned on; the server's
    ``/predict`` follows TEI and transformers instead, a pair's longer side first).

    >>> for row, logits in predict_rows(hub.model, hub.inputs, "sentence_classification_head",
    ...                                 [Row(0, 1, ("Great movie!",))]):  # doctest: +SKIP
    ...     print(logits.softmax(-1))
    tensor([0.1200, 0.8800])
    """
    limit = inputs.max_positions
    rows = iter(rows)
    while chunk := [row for _, row in zip(range(chunk_rows), rows)]:
        encoded = []
        for row in chunk:
            tokens = inputs.encode(*row.texts)
            if len(tokens) > limit:
                if not truncate:
                    raise CorpusError(
                        f"{where}:{row.line}: {len(tokens)} tokens, more than the model's {limit} "
                        "positions (--truncate cuts such rows, as fairseq's --shorten-method truncate)"
                    )
                tokens = tokens[:limit]
            encoded.append(tokens)
        logits = classify_rows(
            model, inputs, head, encoded, max_tokens=max_tokens, batch_size=batch_size, progress=progress
        )
        yield from zip(chunk, logits)


# ------------------------------------------------------------------------------- writing


def _number(value: float) -> str:
    """The shortest text that reads back as the same float32 (``0.1``, not ``0.10000000149``)."""
    return str(np.float32(value))


def _regression_prediction(values: list[float]) -> tuple[float | list[float], str]:
    """A regression head's outputs as JSONL's value and TSV's text, each number as float32's shortest text."""
    shortest = [float(_number(v)) for v in values]
    return shortest[0] if len(shortest) == 1 else shortest, " ".join(_number(v) for v in values)


@dataclass
class PredictStats:
    """What :func:`predict_file` did."""

    rows: int = 0
    head: str = ""
    regression: bool = False
    labels: list[str] = field(default_factory=list)
    """The class names written (class k is labels[k]); empty for regression."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Fractions, as :func:`~roberta_ext.metrics.compute_metrics` gives them; empty without labels."""
    seconds: float = 0.0


def _class_names(labels: Sequence[str] | None, num_classes: int) -> list[str]:
    """The names of the head's classes: the label dictionary's first ``num_classes``, else numbers."""
    known = list(labels or [])[:num_classes]
    if len(known) < num_classes:
        print(
            f"warning: the model's data folder has no label/dict.txt naming its {num_classes} classes: "
            "writing class numbers",
            file=sys.stderr,
        )
        known = [str(k) for k in range(num_classes)]
    return known


class _Scores:
    """Predictions against labels, for the metrics: class indices, or a one-output regression's values."""

    def __init__(self, names: list[str], regression: bool) -> None:
        self.names = names
        self.index = {name: k for k, name in enumerate(names)}
        self.regression = regression
        self.predicted: array = array("d" if regression else "q")
        self.targets: array = array("d" if regression else "q")

    def add(self, label: str | None, prediction: int | list[float], where: str) -> None:
        if label is None:
            return
        if isinstance(prediction, list):  # regression values
            target = _regression_target(label, len(prediction), where)
            if len(prediction) == 1:
                self.predicted.append(prediction[0])
                self.targets.append(target)
            return
        if label not in self.index:
            raise CorpusError(
                f"{where}: label {label!r} is not one of the model's labels {self.names} (its label/dict.txt)"
            )
        self.predicted.append(prediction)
        self.targets.append(self.index[label])

    def metrics(self, names: Sequence[str]) -> dict[str, float]:
        if not len(self.targets):
            return {}
        # F1's positive class: fairseq's criterion turns label names into numbers with int(), so
        # it counts the label named "1"; a model with other names counts class 1 (as the plugin's).
        positive = self.index.get("1", 1)
        extra = ["accuracy"] if not self.regression and "accuracy" not in names else []
        return compute_metrics([*extra, *names], self.predicted, self.targets, positive=positive)


def _regression_target(label: str, outputs: int, where: str) -> float:
    try:
        values = [float(v) for v in label.split()]
    except ValueError:
        values = []
    if len(values) != outputs:
        raise CorpusError(f"{where}: label {label!r} is not {outputs} number(s), as a regression target must be")
    return values[0]


@contextlib.contextmanager
def _opened(output: str) -> Iterator[IO[str]]:
    """``output`` for writing whole or not at all (:func:`~roberta_ext.atomic.atomic_write`), or
    standard output for ``-`` (a stream cannot be taken back: what was written stays)."""
    if output != STDIO:
        with atomic_write(output) as out:
            yield out
        return
    yield sys.stdout
    sys.stdout.flush()


def _write_header(out: IO[str], output_format: str, probabilities: list[str]) -> None:
    if output_format == "tsv":
        out.write("\t".join(["index", "prediction", *(f"prob_{name}" for name in probabilities)]) + "\n")


def _write_row(
    out: IO[str], output_format: str, index: int, prediction: Any, text: str, probabilities: dict[str, float]
) -> None:
    if output_format == "jsonl":
        record: dict[str, Any] = {"index": index, "prediction": prediction}
        if probabilities:
            record["probabilities"] = {name: float(_number(p)) for name, p in probabilities.items()}
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        out.write("\t".join([str(index), text, *(_number(p) for p in probabilities.values())]) + "\n")


def predict_file(
    model: EncoderModel,
    inputs: ModelInputs,
    rows: Iterable[Row],
    output: str,
    *,
    labels: Sequence[str] | None = None,
    head: str | None = None,
    where: str = "input",
    output_format: str = "tsv",
    probabilities: bool = False,
    regression: bool | None = None,
    regression_scale: float = 1.0,
    metrics: Sequence[str] | None = None,
    max_tokens: int = 8192,
    batch_size: int = 256,
    chunk_rows: int = 10_000,
    truncate: bool = False,
    progress: bool = False,
    total: int | None = None,
) -> PredictStats:
    """Predict every row with the classification head ``head`` and write ``output`` whole (or
    not at all): ``index<TAB>prediction`` (TSV, GLUE's submission format) or one JSON object per
    row (``output_format="jsonl"``); ``-`` writes standard output, as the rows are predicted.
    ``probabilities`` adds the softmax of each class. Classes are named by ``labels`` (the hub's
    ``labels``: its ``label/dict.txt``). A head with one output (or ``regression=True``) is a
    regression head: its output times ``regression_scale`` is written. Rows with labels are
    scored by ``metrics`` (default: accuracy for classification, Pearson and Spearman for
    regression). ``progress`` shows a bar on stderr (``total`` rows long).

    >>> hub = roberta_ext.from_pretrained("checkpoints", "checkpoint_best.pt", "RTE-bin")  # doctest: +SKIP
    >>> rows = RowReader("RTE/dev.tsv", format="tsv", columns=parse_columns("1,2,label=3"), header=True)
    ...                                                                      # doctest: +SKIP
    >>> predict_file(hub.model, hub.inputs, rows, "RTE.tsv", labels=hub.labels).metrics  # doctest: +SKIP
    {'accuracy': 0.787}
    """
    if output_format not in OUTPUT_FORMATS:
        raise ValueError(f"output_format {output_format!r} is not one of {', '.join(OUTPUT_FORMATS)}")
    head = choose_head(model, head)
    num_classes = model.num_classes(head)
    regression = num_classes == 1 if regression is None else regression
    names = [] if regression else _class_names(labels, num_classes)
    if metrics is None:
        metrics = (["pearson", "spearman"] if num_classes == 1 else []) if regression else ["accuracy"]
    try:
        check_metrics(metrics, regression=regression, num_classes=num_classes)
    except ValueError as error:
        raise CorpusError(str(error)) from None
    scores = _Scores(names, regression)
    stats = PredictStats(head=head, regression=regression, labels=names)
    shown = names if probabilities and not regression else []
    begun = time.monotonic()
    with (
        tqdm(total=total, desc="predict", unit="rows", disable=not progress, file=sys.stderr) as bar,
        _opened(output) as out,
    ):
        _write_header(out, output_format, shown)
        predicted = predict_rows(
            model, inputs, head, rows, max_tokens=max_tokens, batch_size=batch_size, chunk_rows=chunk_rows,
            truncate=truncate, where=where, progress=bar.update,
        )  # fmt: skip
        for index, (row, logits) in enumerate(predicted):
            if regression:
                values = (logits * regression_scale).tolist()
                prediction: Any
                prediction, text = _regression_prediction(values)
                scores.add(row.label, values, f"{where}:{row.line}")
            else:
                k = int(logits.argmax())
                prediction = text = names[k]
                scores.add(row.label, k, f"{where}:{row.line}")
            softmax = dict(zip(shown, logits.softmax(-1).tolist())) if shown else {}
            _write_row(out, output_format, index, prediction, text, softmax)
            stats.rows += 1
        if bar.total != bar.n:
            bar.total = bar.n
            bar.refresh()
    stats.seconds = time.monotonic() - begun
    stats.metrics = scores.metrics(metrics)
    return stats
