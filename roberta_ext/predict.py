"""``roberta-ext predict``: a fine-tuned model's predictions for a file, with the task's metrics.

It loads a model through :func:`roberta_ext.from_pretrained` (no fairseq), reads a TSV, JSONL or
plain-text file in chunks, runs each chunk in length-sorted batches under a token budget through
the hub's ``collate`` and ``predict``, and writes one prediction per input row, in input order:
by default GLUE's submission format (``index<TAB>prediction``, the prediction being the label
name of ``label/dict.txt``, as the ``label_fn`` of fairseq's GLUE tutorial gives it). When the
input has labels it prints the metrics fairseq's ``sentence_prediction`` criterion reports
(accuracy, F1, MCC, Pearson, Spearman), computed here with numpy exactly as the criterion's
sklearn and scipy calls compute them.

GLUE's TSV files are read as fairseq's ``examples/roberta/preprocess_GLUE_tasks.sh`` reads
them (:data:`roberta_ext.corpus.glue.TASKS`, which ``glue-preprocess`` uses too: the columns
per task and split, which files have a header line; STS-B's scores are divided by 5 for
training, so its predictions are multiplied by 5). The output file is written whole or not at all.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import numpy as np
import torch
from tqdm import tqdm

from ._io import atomic_write
from .corpus.commands import positive_int, run_command
from .corpus.glue import TASKS as GLUE_TASKS
from .corpus.glue import GlueTask, resolve_tasks
from .corpus.reading import CorpusError, InputFile

__all__ = [
    "GLUE_METRICS",
    "METRICS",
    "Columns",
    "Example",
    "GlueLayout",
    "PredictStats",
    "accuracy",
    "choose_head",
    "compute_metrics",
    "f1_score",
    "format_metrics",
    "glue_layout",
    "glue_split",
    "matthews_corrcoef",
    "parse_columns",
    "pearson",
    "predict_examples",
    "predict_file",
    "predict_main",
    "read_examples",
    "spearman",
]

FORMATS = ("tsv", "jsonl", "text")
METRICS = ("accuracy", "f1", "mcc", "pearson", "spearman")
Numbers = Sequence[float] | np.ndarray
"""Values a metric takes: class indices or regression values."""

DTYPES: dict[str, torch.dtype | str] = {
    "float32": torch.float32,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
    "int8": "int8",  # from_pretrained(..., dtype="int8"): the linear layers in int8, CPU only
}


# --------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class Columns:
    """Which columns (TSV: 0-based numbers or header names) or fields (JSONL) hold the text,
    the optional second text of a pair, and the optional label."""

    texts: tuple[str, ...]
    label: str | None = None


def parse_columns(spec: str) -> Columns:
    """``--columns``/``--fields``: one or two text columns, and the label marked ``label=``.

    >>> parse_columns("1,2,label=3")
    Columns(texts=('1', '2'), label='3')
    >>> parse_columns("premise,hypothesis,label=gold_label").label
    'gold_label'
    """
    texts: list[str] = []
    label = None
    for item in (part.strip() for part in spec.split(",")):
        if item.startswith("label="):
            if label is not None:
                raise CorpusError(f"--columns/--fields {spec!r}: more than one label= column")
            label = item[len("label=") :].strip()
            if not label:
                raise CorpusError(f"--columns/--fields {spec!r}: label= names no column")
        elif item:
            texts.append(item)
        else:
            raise CorpusError(f"--columns/--fields {spec!r}: an empty column name")
    if not 1 <= len(texts) <= 2:
        raise CorpusError(
            f"--columns/--fields {spec!r}: give one text column, or two for sentence pairs "
            f"(and the label as label=COLUMN), not {len(texts)}"
        )
    return Columns(tuple(texts), label)


@dataclass
class Example:
    """One input row: its 1-based line in the file, its text(s) and its label as written (or None)."""

    line: int
    texts: tuple[str, ...]
    label: str | None = None


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as error:
        raise CorpusError(f"{where}: not valid UTF-8 ({error.reason} at byte {error.start + 1})") from None


def read_examples(
    path: str,
    *,
    format: str,
    columns: Columns | None = None,
    header: bool | None = None,
    exact_fields: int | None = None,
    log: IO[str] | None = None,
) -> Iterator[Example]:
    """The rows of an input file, one at a time (nothing more is held in memory).

    * ``text``: a line is one input (stripped, as fairseq's BPE encoder strips; an empty line
      is an empty input).
    * ``tsv``: fields split at tabs (no quoting, as fairseq's GLUE script's ``cut`` reads them),
      each stripped. ``columns`` are 0-based numbers, or names of the header line; ``header``
      says whether there is one (default: when a column is named); an empty file then is an
      error, and a file with the header line alone has no rows. With ``exact_fields``, a
      row with another number of fields is an error (fairseq's GLUE script drops QQP's).
    * ``jsonl``: one object per line (blank lines skipped). Default ``columns``: ``text``, plus
      ``text_pair`` and ``label`` when the first object has them.

    Errors name the file and line.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "dev.tsv")
    >>> _ = open(path, "w").write("id\\ts1\\ts2\\tgold\\n0\\tA man.\\tA person. \\tyes\\n")
    >>> list(read_examples(path, format="tsv", columns=parse_columns("s1,s2,label=gold")))
    [Example(line=2, texts=('A man.', 'A person.'), label='yes')]
    """
    source = InputFile(path)
    try:
        if format == "text":
            for number, raw in enumerate(source.lines(), start=1):
                yield Example(number, (_decode(raw, f"{source.name}:{number}").strip(),))
        elif format == "tsv":
            yield from _read_tsv(source, columns, header, exact_fields)
        elif format == "jsonl":
            yield from _read_jsonl(source, columns, log)
        else:
            raise CorpusError(f"unknown input format {format!r}; choose one of {', '.join(FORMATS)}")
    finally:
        source.close()


def _read_tsv(
    source: InputFile, columns: Columns | None, header: bool | None, exact_fields: int | None
) -> Iterator[Example]:
    if columns is None:
        raise CorpusError(f"{source.name}: a TSV input needs --columns (or --glue-task) to say which columns to read")
    wanted = (*columns.texts, *([columns.label] if columns.label is not None else []))
    if header is None:
        header = any(not name.isdigit() for name in wanted)
    lines = enumerate(source.lines(), start=1)
    indices: list[int] = []
    if header:
        first = next(lines, None)
        if first is None:  # (a header line and no rows is fine: 0 rows, a header-only output)
            raise CorpusError(f"{source.name} is empty: no header line")
        names = [f.strip() for f in _decode(first[1], f"{source.name}:1").split("\t")]
        for name in wanted:
            if name.isdigit():
                indices.append(int(name))
            elif name in names:
                indices.append(names.index(name))
            else:
                raise CorpusError(f"{source.name}:1: no column named {name!r} in the header line; it has {names}")
    else:
        for name in wanted:
            if not name.isdigit():
                raise CorpusError(f"{source.name}: column {name!r} is a name, but the file is read without a header")
            indices.append(int(name))
    names_of = dict(zip(indices, wanted))
    needed = max(indices) + 1
    n_texts = len(columns.texts)
    for number, raw in lines:
        where = f"{source.name}:{number}"
        fields = _decode(raw, where).split("\t")
        if exact_fields is not None and len(fields) != exact_fields:
            raise CorpusError(
                f"{where}: the line has {len(fields)} tab-separated fields, not {exact_fields}; fairseq's GLUE script "
                "drops such rows (awk NF==6): remove it, or read the file with --columns"
            )
        if len(fields) < needed:
            missing = [names_of[i] for i in indices if i >= len(fields)]
            raise CorpusError(
                f"{where}: the line has {len(fields)} tab-separated fields, so column(s) {', '.join(missing)} "
                "are missing"
            )
        picked = [fields[i].strip() for i in indices]
        yield Example(number, tuple(picked[:n_texts]), picked[n_texts] if len(picked) > n_texts else None)


def _json_label(value: Any, where: str, name: str) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise CorpusError(f"{where}: field {name!r} is {value!r}; a label is a string or a number")


def _read_jsonl(source: InputFile, columns: Columns | None, log: IO[str] | None) -> Iterator[Example]:
    for number, raw in enumerate(source.lines(), start=1):
        where = f"{source.name}:{number}"
        line = _decode(raw, where)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as error:
            raise CorpusError(f"{where}: not valid JSON ({error})") from None
        if not isinstance(record, dict):
            raise CorpusError(f"{where}: expected a JSON object, got {type(record).__name__}")
        if columns is None:  # the first record decides the defaults
            fields = ("text", "text_pair") if "text_pair" in record else ("text",)
            columns = Columns(fields, "label" if "label" in record else None)
            if log is not None:
                said = f"; label from {columns.label!r}" if columns.label else "; no labels"
                print(f"reading fields {', '.join(map(repr, fields))}{said} (set them with --fields)", file=log)
        for name in (*columns.texts, *([columns.label] if columns.label else [])):
            if name not in record:
                raise CorpusError(f"{where}: no field {name!r}; the object has {sorted(record)}")
        texts = []
        for name in columns.texts:
            if not isinstance(record[name], str):
                raise CorpusError(f"{where}: field {name!r} is {record[name]!r}, not a string")
            texts.append(record[name].strip())
        label = _json_label(record[columns.label], where, columns.label) if columns.label else None
        yield Example(number, tuple(texts), label)


# ----------------------------------------------------------------------------------- GLUE

GLUE_METRICS: dict[str, tuple[str, ...]] = {
    "QQP": ("accuracy", "f1"),
    "MNLI": ("accuracy",),
    "QNLI": ("accuracy",),
    "MRPC": ("accuracy", "f1"),
    "RTE": ("accuracy",),
    "STS-B": ("pearson", "spearman"),
    "SST-2": ("accuracy",),
    "CoLA": ("accuracy", "mcc"),
}
"""What GLUE scores each task by (accuracy is printed for every classification task). The
tasks and their columns are :data:`roberta_ext.corpus.glue.TASKS`, fairseq's script's."""

GLUE_REGRESSION_SCALE = 5.0
"""``preprocess_GLUE_tasks.sh`` divides STS-B's 0-5 scores by 5 for training, so a model
fine-tuned on them predicts score / 5; GLUE's submission wants the 0-5 score back."""


def glue_split(path: str) -> str:
    """``train``, ``dev`` or ``test``, from a GLUE file's name as the script tells them apart
    (``test*`` files have no label; MNLI's are ``test_matched.tsv`` and ``test_mismatched.tsv``).

    >>> glue_split("glue_data/MNLI/test_matched.tsv"), glue_split("RTE/dev.tsv"), glue_split("train.tsv")
    ('test', 'dev', 'train')
    """
    name = Path(path).name
    return "test" if name.startswith("test") else "train" if name.startswith("train") else "dev"


@dataclass(frozen=True)
class GlueLayout:
    """How to read one GLUE file: 0-based columns, a header line or not, and (QQP's train and
    dev files) the exact number of fields a row must have."""

    columns: Columns
    header: bool
    exact_fields: int | None


def glue_layout(task: GlueTask, split: str) -> GlueLayout:
    """The layout fairseq's ``preprocess_GLUE_tasks.sh`` reads a task's ``split`` file with
    (its ``cut -f`` columns minus one).

    >>> from roberta_ext.corpus.glue import TASKS
    >>> glue_layout(TASKS["RTE"], "dev")
    GlueLayout(columns=Columns(texts=('1', '2'), label='3'), header=True, exact_fields=None)
    >>> glue_layout(TASKS["CoLA"], "test").columns, glue_layout(TASKS["CoLA"], "dev").header
    (Columns(texts=('1',), label=None), False)
    """
    label = task.label_of(split)
    columns = Columns(tuple(str(c - 1) for c in task.inputs_of(split)), None if label is None else str(label - 1))
    exact = task.exact_columns if split != "test" else None
    return GlueLayout(columns, split not in task.headerless, exact)


# ------------------------------------------------------------------------------ predicting


def choose_head(hub: Any, head: str | None) -> str:
    """The classification head to predict with: ``head``, or the model's only one.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import RobertaModel
    >>> from types import SimpleNamespace
    >>> model = RobertaModel(preset("tiny"))
    >>> _ = model.register_classification_head("sentiment", num_classes=2)
    >>> choose_head(SimpleNamespace(model=model), None)
    'sentiment'
    """
    heads = sorted(hub.model.classification_heads)
    if head is not None:
        if head not in heads:
            raise CorpusError(f"the model has no classification head {head!r}; its heads: {heads}")
        return head
    if len(heads) == 1:
        return heads[0]
    if not heads:
        raise CorpusError("the model has no classification head: predict needs a fine-tuned model")
    raise CorpusError(f"the model has {len(heads)} classification heads, {heads}: choose one with --head")


def _batches(lengths: Sequence[int], max_tokens: int, batch_size: int) -> list[list[int]]:
    """Row numbers grouped into batches, longest rows first (a batch too big for memory fails
    at once), each batch's padded size (rows x longest row) within ``max_tokens``."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # Rows come longest first, so a batch is as wide as its first row.
        if current and ((len(current) + 1) * lengths[current[0]] > max_tokens or len(current) >= batch_size):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def predict_examples(
    hub: Any,
    head: str,
    examples: Iterable[Example],
    *,
    max_tokens: int = 8192,
    batch_size: int = 256,
    chunk_rows: int = 10_000,
    truncate: bool = False,
    where: str = "input",
    progress: tqdm | None = None,
) -> Iterator[tuple[Example, torch.Tensor]]:
    """``(example, logits (num_classes,) as float32 on the CPU)`` for each example, in input order.

    Examples are read ``chunk_rows`` at a time; each chunk is encoded (``hub.encode``), sorted
    by length into batches of at most ``batch_size`` rows and ``max_tokens`` padded tokens,
    run through ``hub.predict(head, ..., return_logits=True)``, and given back in input order.
    A row longer than the model's ``max_positions()`` is an error naming ``where`` and its
    line, unless ``truncate`` (cut at the end, as fairseq's ``--shorten-method truncate``).

    >>> for example, logits in predict_examples(hub, "sentence_classification_head",
    ...                                         [Example(1, ("Great movie!",))]):  # doctest: +SKIP
    ...     print(logits.softmax(-1))
    tensor([0.1200, 0.8800])
    """
    limit = hub.max_positions()
    rows = iter(examples)
    while True:
        chunk = [example for _, example in zip(range(chunk_rows), rows)]
        if not chunk:
            return
        encoded = []
        for example in chunk:
            tokens = hub.encode(*example.texts)
            if tokens.numel() > limit:
                if not truncate:
                    raise CorpusError(
                        f"{where}:{example.line}: {tokens.numel()} tokens, more than the model's {limit} "
                        "positions (--truncate cuts such rows, as fairseq's --shorten-method truncate)"
                    )
                tokens = tokens[:limit]
            encoded.append(tokens)
        results: list[torch.Tensor | None] = [None] * len(chunk)
        for batch in _batches([len(t) for t in encoded], max_tokens, batch_size):
            tokens, _ = hub.collate([encoded[i] for i in batch])
            with torch.inference_mode():
                logits = hub.predict(head, tokens, return_logits=True).float().cpu()  # (B, C)
            for row, i in enumerate(batch):
                results[i] = logits[row]
            if progress is not None:
                progress.update(len(batch))
        for example, result in zip(chunk, results):
            assert result is not None
            yield example, result


# ------------------------------------------------------------------------------- metrics


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
    constant input or fewer than two values, where scipy warns or raises).

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

    >>> spearman([1.0, 2.0, 3.0, 4.0], [10.0, 30.0, 20.0, 50.0])
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


# ------------------------------------------------------------------------------- writing


def _number(value: float) -> str:
    """The shortest text that reads back as the same float32 (``0.1``, not ``0.10000000149``)."""
    return str(np.float32(value))


@dataclass
class PredictStats:
    """What :func:`predict_file` did."""

    rows: int = 0
    head: str = ""
    regression: bool = False
    labels: list[str] = field(default_factory=list)
    """The class names written (class k is labels[k]); empty for regression."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Fractions, as :func:`compute_metrics` gives them; empty without labels."""
    seconds: float = 0.0


def predict_file(
    hub: Any,
    examples: Iterable[Example],
    output: str,
    *,
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
    """Predict every example with the classification head ``head`` and write ``output`` whole
    (or not at all): ``index<TAB>prediction`` (TSV, GLUE's submission format) or one JSON
    object per row (``output_format="jsonl"``); ``probabilities`` adds the softmax of each
    class. A head with one output (or ``regression=True``) is a regression head: its output
    times ``regression_scale`` is written. Examples with labels are scored by ``metrics``
    (default: accuracy for classification, Pearson and Spearman for regression).

    >>> hub = roberta_ext.from_pretrained("checkpoints", "checkpoint_best.pt", "RTE-bin")  # doctest: +SKIP
    >>> rows = read_examples("RTE/dev.tsv", format="tsv", columns=parse_columns("1,2,label=3"), header=True)
    ...                                                                      # doctest: +SKIP
    >>> predict_file(hub, rows, "RTE.tsv").metrics                           # doctest: +SKIP
    {'accuracy': 0.787}
    """
    head = choose_head(hub, head)
    num_classes = hub.model.classification_heads[head].num_classes
    if regression is None:
        regression = num_classes == 1
    names: list[str] = []
    label_index: dict[str, int] = {}
    if not regression:
        known = list(hub.labels or [])[:num_classes]
        if len(known) < num_classes:
            print(
                f"warning: the model's data folder has no label/dict.txt naming its {num_classes} classes: "
                "writing class numbers",
                file=sys.stderr,
            )
            known = [str(k) for k in range(num_classes)]
        names = known
        label_index = {name: k for k, name in enumerate(names)}
    if metrics is None:
        metrics = (["pearson", "spearman"] if num_classes == 1 else []) if regression else ["accuracy"]
    _check_metrics(metrics, regression=regression, num_classes=num_classes)
    # F1's positive class: fairseq's criterion turns label names into numbers with int(), so
    # it counts the label named "1"; a model with other names counts class 1 (as the plugin's).
    positive = label_index.get("1", 1)

    predicted: array = array("d" if regression else "q")
    targets: array = array("d" if regression else "q")
    labelled: bool | None = None
    stats = PredictStats(head=head, regression=regression, labels=names)
    begun = time.monotonic()
    with (
        tqdm(total=total, desc="predict", unit="rows", disable=not progress, file=sys.stderr) as bar,
        atomic_write(output) as out,
    ):
        if output_format == "tsv":
            columns = ["index", "prediction"] + ([f"prob_{name}" for name in names] if probabilities else [])
            out.write("\t".join(columns) + "\n")
        rows = predict_examples(
            hub,
            head,
            examples,
            max_tokens=max_tokens,
            batch_size=batch_size,
            chunk_rows=chunk_rows,
            truncate=truncate,
            where=where,
            progress=bar,
        )
        for index, (example, logits) in enumerate(rows):
            if labelled is None:
                labelled = example.label is not None
            if regression:
                values = (logits * regression_scale).tolist()
                prediction: Any = values[0] if len(values) == 1 else values
                text = " ".join(_number(v) for v in values)
                if example.label is not None:
                    target = _regression_target(example.label, len(values), f"{where}:{example.line}")
                    if len(values) == 1:
                        predicted.append(values[0])
                        targets.append(target)
            else:
                k = int(logits.argmax())
                prediction = text = names[k]
                if example.label is not None:
                    if example.label not in label_index:
                        raise CorpusError(
                            f"{where}:{example.line}: label {example.label!r} is not one of the model's labels "
                            f"{names} (its label/dict.txt)"
                        )
                    predicted.append(k)
                    targets.append(label_index[example.label])
            if output_format == "jsonl":
                record: dict[str, Any] = {"index": index, "prediction": prediction}
                if probabilities and not regression:
                    probs = logits.softmax(-1).tolist()
                    record["probabilities"] = {n: float(_number(p)) for n, p in zip(names, probs)}
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
            else:
                fields = [str(index), text]
                if probabilities and not regression:
                    fields += [_number(p) for p in logits.softmax(-1).tolist()]
                out.write("\t".join(fields) + "\n")
            stats.rows += 1
        if bar.total != bar.n:
            bar.total = bar.n
            bar.refresh()
    stats.seconds = time.monotonic() - begun
    if labelled and len(targets):
        stats.metrics = compute_metrics(
            (["accuracy"] if not regression and "accuracy" not in metrics else []) + list(metrics),
            predicted,
            targets,
            positive=positive,
        )
    return stats


def _regression_target(label: str, outputs: int, where: str) -> float:
    try:
        values = [float(v) for v in label.split()]
    except ValueError:
        values = []
    if len(values) != outputs:
        raise CorpusError(f"{where}: label {label!r} is not {outputs} number(s), as a regression target must be")
    return values[0]


def _check_metrics(metrics: Sequence[str], *, regression: bool, num_classes: int) -> None:
    for name in metrics:
        if name not in METRICS:
            raise CorpusError(f"unknown metric {name!r}; choose from {', '.join(METRICS)}")
        if regression and name in ("accuracy", "f1", "mcc"):
            raise CorpusError(f"{name} is a classification metric, and the head is a regression head")
        if not regression and name in ("pearson", "spearman"):
            raise CorpusError(f"{name} is a regression metric, and the head is a classification head")
        if name == "f1" and num_classes != 2:
            raise CorpusError(f"f1 is for two classes, and the head has {num_classes}")
    if regression and metrics and num_classes != 1:
        raise CorpusError(f"correlations need one regression output, and the head has {num_classes}")


# ---------------------------------------------------------------------------- command line


def _input_format(path: str, given: str | None) -> str:
    if given is not None:
        return given
    suffix = Path(path).suffix.lower()
    return "tsv" if suffix == ".tsv" else "jsonl" if suffix in (".jsonl", ".ndjson") else "text"


def _count_rows(path: str) -> int | None:
    """Lines of a regular file (a progress bar's total), read in blocks; None for standard input."""
    if path == "-" or not Path(path).is_file():
        return None
    count, last = 0, b"\n"
    with open(path, "rb") as file:
        while block := file.read(1 << 24):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def predict_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext predict``: a fine-tuned model's predictions for a file.

    >>> predict_main(["checkpoints", "--checkpoint-file", "checkpoint_best.pt", "--data-name-or-path", "RTE-bin",
    ...               "--glue-task", "RTE", "--input", "glue_data/RTE/dev.tsv", "--output", "RTE.tsv"])
    ...                                                                     # doctest: +SKIP
    accuracy 78.7
    0
    """
    prog = "roberta-ext predict"
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Predict with a fine-tuned model's classification or regression head for every row of a TSV, JSONL or "
            "text file, and write them in input order: 'index<TAB>prediction' (GLUE's submission format; the "
            "prediction is the label name from label/dict.txt, or the regression value) or JSON lines. When the "
            "input has labels, print the metrics (accuracy; F1, MCC, Pearson, Spearman as asked or as the GLUE task "
            "is scored) as fairseq's sentence_prediction criterion computes them. The file is read in chunks, each "
            "run in length-sorted batches; the output is written whole or not at all."
        ),
        epilog=(
            "example: roberta-ext predict checkpoints --checkpoint-file checkpoint_best.pt --data-name-or-path "
            "RTE-bin --glue-task RTE --input glue_data/RTE/dev.tsv --output RTE.tsv"
        ),
    )
    parser.add_argument(
        "model", metavar="MODEL_DIR", help="the model folder (or a name or archive from_pretrained takes)"
    )
    parser.add_argument(
        "--checkpoint-file", default="model.pt", metavar="FILE", help="checkpoint in MODEL_DIR (default: model.pt)"
    )
    parser.add_argument(
        "--data-name-or-path",
        default=".",
        metavar="DIR",
        help="folder with input0/dict.txt and label/dict.txt (the fine-tuning data); a path starting with '.' is "
        "relative to MODEL_DIR (default: ., MODEL_DIR itself)",
    )
    parser.add_argument("--head", metavar="NAME", help="classification head (default: the model's only one)")

    reading = parser.add_argument_group("input")
    reading.add_argument("--input", required=True, metavar="FILE", help="the rows to predict ('-': standard input)")
    reading.add_argument("--format", choices=FORMATS, help="input format (default: from the extension: .tsv, .jsonl)")
    reading.add_argument(
        "--glue-task",
        metavar="TASK",
        help="read a GLUE TSV as fairseq's preprocess_GLUE_tasks.sh does: its columns for the task and split, its "
        f"header lines, its metrics: {', '.join(t.name for t in GLUE_TASKS.values())}",
    )
    reading.add_argument(
        "--glue-split",
        choices=("train", "dev", "test"),
        help="which file of the GLUE task this is (default: from its name: test*, train*, else dev)",
    )
    reading.add_argument(
        "--columns",
        metavar="COLS",
        help="TSV: the text column, a second one for pairs, and the label as label=COL: 0-based numbers or header "
        "names, e.g. '1,2,label=3' or 'sentence1,sentence2,label=label'",
    )
    reading.add_argument(
        "--fields",
        metavar="FIELDS",
        help="JSONL: the text field, a second one for pairs, and the label as label=FIELD (default: text, and "
        "text_pair and label when the first object has them)",
    )
    reading.add_argument(
        "--header",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the TSV starts with a header line (default: when --columns names a column, or as --glue-task says)",
    )
    reading.add_argument(
        "--truncate",
        action="store_true",
        help="cut rows longer than the model's positions at the end (fairseq's --shorten-method truncate); "
        "default: such a row is an error",
    )

    writing = parser.add_argument_group("output")
    writing.add_argument("--output", required=True, metavar="FILE", help="predictions file to write")
    writing.add_argument(
        "--output-format", choices=("tsv", "jsonl"), help="default: jsonl for a .jsonl output, else tsv"
    )
    writing.add_argument(
        "--probabilities", action="store_true", help="add each class's softmax probability (prob_<label> columns)"
    )
    writing.add_argument(
        "--regression",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="treat the head as a regression head (default: when it has one output)",
    )
    writing.add_argument(
        "--regression-scale",
        type=float,
        metavar="X",
        help="multiply regression outputs by X (default: 5 for --glue-task STS-B, trained on scores / 5, else 1)",
    )
    writing.add_argument(
        "--metrics",
        metavar="LIST",
        help=f"metrics to print for labelled input, from {', '.join(METRICS)} (default: the GLUE task's; else "
        "accuracy for classification, pearson,spearman for regression)",
    )
    writing.add_argument("--metrics-file", metavar="FILE", help="also write the metrics (fractions) as JSON")

    running = parser.add_argument_group("running")
    running.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto (default: cuda when available)")
    running.add_argument(
        "--dtype",
        choices=tuple(DTYPES),
        default="float32",
        help="inference dtype (default: float32); int8: the linear layers in int8, on the CPU",
    )
    running.add_argument(
        "--max-tokens",
        type=positive_int,
        default=8192,
        metavar="N",
        help="padded tokens per batch, at most (default: 8192; a longer row goes alone)",
    )
    running.add_argument(
        "--batch-size", type=positive_int, default=256, metavar="N", help="rows per batch, at most (default: 256)"
    )
    running.add_argument(
        "--chunk-rows",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="rows read and length-sorted at a time; bounds the memory (default: 10000)",
    )
    running.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="CPU threads for the model (default: torch's choice, one per core; 1 is faster on a busy machine)",
    )
    running.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="show a progress bar on stderr (default: when stderr is a terminal)",
    )

    tokenizing = parser.add_argument_group("tokenizer files (as from_pretrained takes them)")
    tokenizing.add_argument("--bpe", help="gpt2, bert (wordpiece) or sentencepiece (default: from the files)")
    tokenizing.add_argument("--gpt2-encoder-json", metavar="FILE", help="GPT-2 encoder.json")
    tokenizing.add_argument("--gpt2-vocab-bpe", metavar="FILE", help="GPT-2 vocab.bpe")
    tokenizing.add_argument("--bpe-vocab-file", metavar="FILE", help="WordPiece vocab.txt")
    tokenizing.add_argument("--bpe-cased", action="store_true", help="cased WordPiece vocabulary")
    tokenizing.add_argument("--sentencepiece-model", metavar="FILE", help="SentencePiece model")
    args = parser.parse_args(argv)
    progress = sys.stderr.isatty() if args.progress is None else args.progress

    def body() -> int:
        task = resolve_tasks([args.glue_task])[0] if args.glue_task else None
        if task is not None and args.glue_task.upper() == "ALL":
            raise CorpusError("--glue-task takes one task: the one the model was fine-tuned on")
        input_format = "tsv" if task is not None else _input_format(args.input, args.format)
        if task is not None and args.format not in (None, "tsv"):
            raise CorpusError(f"--glue-task reads TSV files, not {args.format}")
        if args.columns and input_format != "tsv":
            raise CorpusError(f"--columns is for TSV input; {args.input} is read as {input_format} (see --format)")
        if args.fields and input_format != "jsonl":
            raise CorpusError(f"--fields is for JSONL input; {args.input} is read as {input_format} (see --format)")
        header, exact_fields = args.header, None
        columns = parse_columns(args.columns or args.fields) if (args.columns or args.fields) else None
        if task is not None:
            layout = glue_layout(task, args.glue_split or glue_split(args.input))
            if columns is None:
                columns, exact_fields = layout.columns, layout.exact_fields
            if header is None:
                header = layout.header
        scale = args.regression_scale
        if scale is None:
            scale = GLUE_REGRESSION_SCALE if task is not None and task.regression else 1.0
        metrics = args.metrics.split(",") if args.metrics else (list(GLUE_METRICS[task.name]) if task else None)
        output_format = args.output_format or ("jsonl" if Path(args.output).suffix.lower() == ".jsonl" else "tsv")

        from .loading import from_pretrained

        device = args.device
        if device == "auto":  # int8 runs on the CPU
            device = "cuda" if torch.cuda.is_available() and args.dtype != "int8" else "cpu"
        try:
            hub = from_pretrained(
                args.model,
                args.checkpoint_file,
                args.data_name_or_path,
                bpe=args.bpe,
                gpt2_encoder_json=args.gpt2_encoder_json,
                gpt2_vocab_bpe=args.gpt2_vocab_bpe,
                bpe_vocab_file=args.bpe_vocab_file,
                bpe_cased=args.bpe_cased,
                sentencepiece_model=args.sentencepiece_model,
                device=device,
                dtype=DTYPES[args.dtype],
            )
        except ValueError as error:  # a checkpoint or tokenizer file that cannot be read
            raise CorpusError(f"cannot load the model from {args.model}: {error}") from None
        examples = read_examples(
            args.input, format=input_format, columns=columns, header=header, exact_fields=exact_fields, log=sys.stderr
        )
        where = "<stdin>" if args.input == "-" else args.input
        total = _count_rows(args.input) if progress else None
        if total is not None and header:
            total = max(total - 1, 0)
        stats = predict_file(
            hub,
            examples,
            args.output,
            head=args.head,
            where=where,
            output_format=output_format,
            probabilities=args.probabilities,
            regression=args.regression,
            regression_scale=scale,
            metrics=metrics,
            max_tokens=args.max_tokens,
            batch_size=args.batch_size,
            chunk_rows=args.chunk_rows,
            truncate=args.truncate,
            progress=progress,
            total=total,
        )
        if stats.rows:
            rate = stats.rows / stats.seconds if stats.seconds else 0.0
            print(
                f"{stats.rows} rows -> {args.output} (head {stats.head!r}, {rate:.0f} rows/s on {device}, "
                f"{args.dtype})",
                file=sys.stderr,
            )
        else:  # nothing to predict is not an error, but worth saying
            written = "an empty" if output_format == "jsonl" else "a header-only"
            print(f"{prog}: {where} has 0 rows; wrote {written} {args.output}", file=sys.stderr)
        if stats.metrics:
            print(format_metrics(stats.metrics))
        if args.metrics_file:  # the metrics as fractions; only the row count for unlabelled input
            with atomic_write(args.metrics_file) as out:
                json.dump({"rows": stats.rows, **stats.metrics}, out, indent=2)
                out.write("\n")
        return 0

    threads = torch.get_num_threads()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    try:
        return run_command(prog, body)
    finally:  # a caller in the same process (a test, a notebook) keeps its own setting
        torch.set_num_threads(threads)
