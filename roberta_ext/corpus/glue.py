"""``roberta-ext glue-preprocess``: GLUE's TSV folders -> ``<TASK>-bin/`` for fine-tuning, the
folders fairseq's ``examples/roberta/preprocess_GLUE_tasks.sh`` makes, byte for byte.

What the script does, and so what this does, per task (:data:`TASKS`, in the script's order):

1. read ``GLUE_DIR/<TASK>/{train,dev,test}.tsv`` (MNLI: ``train``, ``dev_matched``,
   ``dev_mismatched``, ``test_matched``, ``test_mismatched``), skipping the header line (CoLA's
   ``train.tsv`` and ``dev.tsv`` have none); MRPC is read from these three files too, not from
   ``msr_paraphrase_*.txt``;
2. for QQP's ``train`` and ``dev`` only, drop the rows that do not have exactly 6 tab-separated
   columns (the script's ``awk 'NF==6'``); they are counted and their line numbers reported;
3. cut the task's columns (``cut -f``: 1-based, tab-separated; test files have their own
   input columns, MNLI's dev files their own label column);
4. GPT-2 BPE-encode the text columns as ``multiprocessing_bpe_encoder.py --keep-empty`` does
   (each line ``str.strip()``-ed; an empty text stays an empty line);
5. binarize with ``fairseq-preprocess --only-source``: ``input0`` (and ``input1`` for pair
   tasks) with the BPE's ``dict.txt``, and the labels with a dictionary built from ``train``;
   STS-B's scores are instead divided by 5 and written as text, ``label/{train,valid}.label``,
   formatted as awk's ``print $1 / 5.0`` formats them (``1``, ``0.76``, ``0.628318``).

Split names are fairseq's: ``dev`` -> ``valid``, and for MNLI ``dev_matched`` -> ``valid``,
``dev_mismatched`` -> ``valid1``, ``test_matched`` -> ``test``, ``test_mismatched`` -> ``test1``.

Where the script would write something wrong without a word (``cut`` prints a row without a
tab whole, and an empty field for a missing column; awk reads a bad score as 0; fairseq-preprocess
maps a dev label unseen in train to ``<unk>``; a carriage return inside a field splits the line in
two for the Python tools and misaligns every later row), this stops with an error naming the file
and line, and writes nothing for the task. Extra columns are ignored, as ``cut`` ignores them.

Every file of every task asked for is read and checked before the slow work (BPE, binarizing)
starts. Each ``<TASK>-bin`` is built beside its final name, and all are renamed into place,
each whole, once every task is done (:class:`roberta_ext.corpus.preparation.Preparation`): after an
error, none is written. The BPE is OpenAI's GPT-2 BPE from the download cache
(fetched on first use, as the script's ``wget`` does; ``ROBERTA_EXT_OFFLINE=1`` forbids that), or
the three files of ``--bpe-dir``. fairseq must be installed: it does the binarizing, as in the
script (:mod:`roberta_ext.corpus.binarize`: one ``python`` process runs fairseq-preprocess's
``cli_main`` once per column of every task, so fairseq's import, seconds long, is paid once).

The same knowledge serves predictions: :func:`glue_layout` is how ``roberta-ext predict
--glue-task`` reads a task's file (the script's columns and header lines), :attr:`GlueTask.metrics`
what the task is scored by, :data:`GLUE_REGRESSION_SCALE` STS-B's factor.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO

from tqdm import tqdm

from .._text import counted, undecodable
from ..tokenizers.dictionary import Dictionary
from ..tokenizers.gpt2_bpe import GPT2BPE
from .binarize import PreprocessBatch
from .bpe import OUTPUT_NAMES, encode_chunk
from .pool import OrderedRunner
from .preparation import Preparation, check_dictionary
from .reading import CorpusError, InputFile, read_chunks
from .rows import Columns

__all__ = [
    "TASKS",
    "GlueStats",
    "GlueTask",
    "awk_number",
    "GLUE_REGRESSION_SCALE",
    "GlueLayout",
    "glue_layout",
    "glue_preprocess",
    "glue_split",
    "resolve_bpe_files",
    "resolve_tasks",
]


@dataclass(frozen=True, kw_only=True)
class GlueTask:
    """One GLUE task as ``preprocess_GLUE_tasks.sh`` reads it. Columns are 1-based, as ``cut -f``."""

    name: str
    """The script's spelling (``STS-B``, ``CoLA``): the folder under ``GLUE_DIR`` and the ``-bin`` name."""
    input_columns: tuple[int, ...]
    """The text columns of ``train`` and ``dev`` files: one (single sentence) or two (pairs)."""
    test_input_columns: tuple[int, ...]
    """The text columns of ``test`` files (which have no label column)."""
    label_column: int
    dev_label_column: int | None = None
    """The label column of the ``dev`` files when it differs from train's (MNLI: ``gold_label``)."""
    splits: tuple[tuple[str, str], ...] = (("train", "train"), ("dev", "valid"), ("test", "test"))
    """``(file stem, fairseq split)`` pairs, in the order the script passes them to fairseq-preprocess."""
    headerless: tuple[str, ...] = ()
    """File stems without a header line (CoLA's ``train`` and ``dev``)."""
    exact_columns: int | None = None
    """QQP: ``train``/``dev`` rows without exactly this many columns are dropped (``awk NF==6``)."""
    regression: bool = False
    """STS-B: the labels are scores, divided by 5 and written as text instead of binarized."""
    metrics: tuple[str, ...] = ("accuracy",)
    """What GLUE scores the task by (``roberta-ext predict --glue-task`` prints them; accuracy is
    printed for every classification task): names of :data:`roberta_ext.metrics.METRICS`."""

    def inputs_of(self, stem: str) -> tuple[int, ...]:
        """The text columns of the file ``stem``.

        >>> TASKS["SST-2"].inputs_of("train"), TASKS["SST-2"].inputs_of("test")
        ((1,), (2,))
        """
        return self.test_input_columns if stem.startswith("test") else self.input_columns

    def label_of(self, stem: str) -> int | None:
        """The label column of the file ``stem`` (``None``: a test file, without labels).

        >>> mnli = TASKS["MNLI"]
        >>> mnli.label_of("train"), mnli.label_of("dev_mismatched"), mnli.label_of("test_matched")
        (12, 16, None)
        """
        if stem.startswith("test"):
            return None
        if stem != "train" and self.dev_label_column is not None:
            return self.dev_label_column
        return self.label_column


_MNLI_SPLITS = (
    ("train", "train"),
    ("dev_matched", "valid"),
    ("dev_mismatched", "valid1"),
    ("test_matched", "test"),
    ("test_mismatched", "test1"),
)

TASKS: dict[str, GlueTask] = {
    task.name: task
    for task in (  # the script's order for ALL, and its column numbers
        GlueTask(
            name="QQP",
            input_columns=(4, 5),
            test_input_columns=(2, 3),
            label_column=6,
            exact_columns=6,
            metrics=("accuracy", "f1"),
        ),
        GlueTask(
            name="MNLI",
            input_columns=(9, 10),
            test_input_columns=(9, 10),
            label_column=12,
            dev_label_column=16,
            splits=_MNLI_SPLITS,
        ),
        GlueTask(name="QNLI", input_columns=(2, 3), test_input_columns=(2, 3), label_column=4),
        GlueTask(
            name="MRPC", input_columns=(4, 5), test_input_columns=(4, 5), label_column=1, metrics=("accuracy", "f1")
        ),
        GlueTask(name="RTE", input_columns=(2, 3), test_input_columns=(2, 3), label_column=4),
        GlueTask(
            name="STS-B",
            input_columns=(8, 9),
            test_input_columns=(8, 9),
            label_column=10,
            regression=True,
            metrics=("pearson", "spearman"),
        ),
        GlueTask(name="SST-2", input_columns=(1,), test_input_columns=(2,), label_column=2),
        GlueTask(
            name="CoLA",
            input_columns=(4,),
            test_input_columns=(2,),
            label_column=2,
            headerless=("train", "dev"),
            metrics=("accuracy", "mcc"),
        ),
    )
}
"""The script's tasks by its names, in the order ``ALL`` processes them."""

ALL = "ALL"
_FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
# What awk reads as the same number we do: a plain decimal, optionally with an exponent.
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def resolve_tasks(names: Sequence[str]) -> list[GlueTask]:
    """The tasks ``names`` ask for, in the order given (``ALL``: every task, in the script's order).

    Names are matched without regard to case (``rte``, ``sts-b``), but otherwise as the script
    spells them: ``STSB`` or ``SST2`` is refused, with the list of valid names.

    >>> [task.name for task in resolve_tasks(["sts-b", "cola"])]
    ['STS-B', 'CoLA']
    >>> len(resolve_tasks(["all"]))
    8
    >>> try:
    ...     resolve_tasks(["STSB"])
    ... except CorpusError as error:
    ...     print(error)
    unknown GLUE task 'STSB'; choose from ALL, QQP, MNLI, QNLI, MRPC, RTE, STS-B, SST-2, CoLA
    """
    by_folded = {name.casefold(): task for name, task in TASKS.items()}
    chosen: dict[str, GlueTask] = {}
    for name in names:
        if name.casefold() == ALL.casefold():
            chosen.update(TASKS)
        elif name.casefold() in by_folded:
            task = by_folded[name.casefold()]
            chosen[task.name] = task
        else:
            raise CorpusError(f"unknown GLUE task {name!r}; choose from {', '.join([ALL, *TASKS])}")
    return list(chosen.values())


def awk_number(value: float) -> str:
    """``value`` as awk's ``print`` writes a number: an integral value as an integer, any other
    with ``OFMT`` (``%.6g``).

    >>> [awk_number(float(score) / 5.0) for score in ("5.000", "3.8", "0", "3.14159", "0.0000005")]
    ['1', '0.76', '0', '0.628318', '1e-07']
    """
    if value == int(value):
        return str(int(value))
    return f"{value:.6g}"


def resolve_bpe_files(bpe_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path, Path]:
    """``(encoder.json, vocab.bpe, dict.txt)``: those in ``bpe_dir``, or else OpenAI's GPT-2 BPE
    files from the download cache, fetched there first if needed (what the script's ``wget -N``
    does; not with ``ROBERTA_EXT_OFFLINE=1``).

    >>> resolve_bpe_files("gpt2_bpe")  # doctest: +SKIP
    (PosixPath('gpt2_bpe/encoder.json'), PosixPath('gpt2_bpe/vocab.bpe'), PosixPath('gpt2_bpe/dict.txt'))
    """
    if bpe_dir is not None:
        folder = Path(bpe_dir)
        if not folder.is_dir():
            raise CorpusError(f"--bpe-dir {folder}: not a folder (it should hold {', '.join(OUTPUT_NAMES)})")
        paths = tuple(folder / name for name in OUTPUT_NAMES)
        missing = [path.name for path in paths if not path.is_file()]
        if missing:
            raise CorpusError(
                f"--bpe-dir {folder}: {', '.join(missing)} not found there (it should hold {', '.join(OUTPUT_NAMES)})"
            )
        encoder_json, vocab_bpe, dict_txt = paths
        return encoder_json, vocab_bpe, dict_txt
    from .. import download  # requests and the cache only when they are needed

    urls = download.GPT2_BPE
    encoder_json, vocab_bpe, dict_txt = (
        download.resolve_file(url) for url in (urls.encoder_json, urls.vocab_bpe, urls.dictionary)
    )
    return encoder_json, vocab_bpe, dict_txt


# ---------------------------------------------------------------------------------- reading


@dataclass
class _SplitText:
    """One TSV file cut into the text files the script makes of it."""

    stem: str
    split: str
    rows: int = 0
    dropped: list[int] = field(default_factory=list)
    """Line numbers of the QQP rows dropped for not having exactly 6 columns."""


def _field_text(raw: bytes, where: str, column: int) -> str:
    """A field decoded, refusing what would break the script's line-based tools."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorpusError(f"{where}: column {column} is not valid UTF-8 ({undecodable(error)})") from None
    # The Python tools read a lone "\r" as a line end: a field holding one would become two lines
    # and shift every later row against the labels. Only a "\r" right before the "\n" is harmless.
    if "\r" in text.removesuffix("\r"):
        raise CorpusError(f"{where}: column {column} contains a carriage return (\\r) inside the text")
    return text


def _cut_split(
    task: GlueTask,
    path: Path,
    stem: str,
    split: str,
    text_dir: Path,
    train_labels: set[str],
    scores: list[str] | None,
) -> _SplitText:
    """Write ``text_dir/{stem}.raw.input{i}`` and ``{stem}.label`` as the script's ``tail``/``awk``/
    ``cut`` write them, checking every row. Train labels are added to ``train_labels``; a dev label
    must be one of them. For STS-B, ``scores`` receives each label line as awk would print it /5."""
    result = _SplitText(stem, split)
    inputs = task.inputs_of(stem)
    label_column = task.label_of(stem)
    needed = max((*inputs, label_column or 0))
    drop_malformed = task.exact_columns is not None and label_column is not None
    skip_header = stem not in task.headerless
    with contextlib.ExitStack() as stack:
        source = stack.enter_context(open(path, "rb"))
        raw_outputs = [stack.enter_context(open(text_dir / f"{stem}.raw.input{i}", "wb")) for i in range(len(inputs))]
        label_output = stack.enter_context(open(text_dir / f"{stem}.label", "wb")) if label_column is not None else None
        # Binary lines end at "\n" only, as for tail, cut and awk; a "\r" stays in the last field.
        for line_number, line in enumerate(source, start=1):
            if skip_header and line_number == 1:
                continue
            line = line.removesuffix(b"\n")
            fields = line.split(b"\t")
            where = f"{path}:{line_number}"
            if drop_malformed and len(fields) != task.exact_columns:
                result.dropped.append(line_number)  # awk -F '\t' 'NF==6': the script drops these
                continue
            if len(fields) < needed:
                missing = [
                    f"{column} ({'the label' if column == label_column else 'a text'})"
                    for column in sorted({*inputs, label_column or 0})
                    if column > len(fields)
                ]
                raise CorpusError(
                    f"{where}: {task.name}'s {stem}.tsv rows need column{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(missing)}, but this row has "
                    f"{len(fields)} tab-separated column{'s' if len(fields) != 1 else ''}"
                )
            for output, column in zip(raw_outputs, inputs):
                _field_text(fields[column - 1], where, column)
                output.write(fields[column - 1] + b"\n")
            if label_column is not None and label_output is not None:
                raw_label = fields[label_column - 1]
                label = _field_text(raw_label, where, label_column)
                if scores is not None:
                    scores.append(_score(label, where, label_column))
                else:
                    _check_label(label, where, label_column, stem, train_labels)
                label_output.write(raw_label + b"\n")
            result.rows += 1
    if result.rows == 0:
        raise CorpusError(f"{path}: no rows" + (" after the header line" if skip_header else ""))
    return result


def _score(label: str, where: str, column: int) -> str:
    """An STS-B score as ``awk '{print $1 / 5.0}'`` prints it, refusing what awk would read as 0."""
    text = label.strip(" \r")
    if not _NUMBER.fullmatch(text) or not math.isfinite(float(text)):
        raise CorpusError(f"{where}: column {column}: STS-B's score must be a number, got {label!r}")
    return awk_number(float(text) / 5.0)


def _check_label(label: str, where: str, column: int, stem: str, train_labels: set[str]) -> None:
    tokens = label.split()  # fairseq-preprocess splits at whitespace: a label must be one token
    if len(tokens) != 1:
        problem = "is empty" if not tokens else "contains whitespace"
        raise CorpusError(f"{where}: column {column}: the label {label!r} {problem}")
    (name,) = tokens
    if name in _FAIRSEQ_SPECIALS or name.startswith("madeupword"):
        raise CorpusError(f"{where}: column {column}: {name!r} cannot be a label (fairseq's dictionaries reserve it)")
    if stem == "train":
        train_labels.add(name)
    elif name not in train_labels:
        raise CorpusError(
            f"{where}: column {column}: the label {name!r} does not occur in train.tsv (the label dictionary is "
            "built from train; fairseq-preprocess would write it as <unk>)"
        )


# ---------------------------------------------------------------------------------- binarizing


def _preprocess_commands(
    task: GlueTask, texts: list[_SplitText], text_dir: str, dict_txt: Path, workers: int
) -> list[list[str]]:
    """The script's fairseq-preprocess runs for ``task`` (their arguments), with paths relative
    to the folder being built: ``text_dir`` there holds the encoded text."""

    def prefixes(column: str, kind: str) -> str:  # fairseq splits these at commas
        return ",".join(f"{text_dir}/{t.stem}.{column}" for t in texts if t.split.startswith(kind))

    commands = []
    for i in range(len(task.input_columns)):
        column = f"input{i}"
        commands.append(
            ["--only-source", "--trainpref", prefixes(column, "train"), "--validpref", prefixes(column, "valid")]
            + ["--testpref", prefixes(column, "test"), "--destdir", column, "--workers", str(workers)]
            + ["--srcdict", str(dict_txt)]
        )
    if not task.regression:
        commands.append(
            ["--only-source", "--trainpref", prefixes("label", "train"), "--validpref", prefixes("label", "valid")]
            + ["--destdir", "label", "--workers", str(workers)]
        )
    return commands


# ---------------------------------------------------------------------------------- the command


@dataclass
class GlueStats:
    """What :func:`glue_preprocess` did for one task."""

    task: str
    output: Path
    rows: dict[str, int] = field(default_factory=dict)
    """Rows written per fairseq split (``train``, ``valid``, ``valid1``, ``test``, ``test1``)."""
    dropped: dict[str, list[int]] = field(default_factory=dict)
    """QQP: line numbers of the dropped rows, per file name."""
    labels: list[str] = field(default_factory=list)
    """The labels in the order of ``label/dict.txt`` (class k is labels[k]), without fairseq's
    ``madeupwordNNNN`` padding; empty for STS-B."""
    report: list[str] = field(default_factory=list)
    """fairseq-preprocess's ``sents, tokens, % replaced`` lines."""


def glue_preprocess(
    glue_dir: str | os.PathLike[str],
    tasks: Sequence[str],
    destdir: str | os.PathLike[str],
    *,
    bpe_dir: str | os.PathLike[str] | None = None,
    workers: int = 1,
    force: bool = False,
    progress: bool = False,
    log: IO[str] | None = None,
) -> list[GlueStats]:
    """Write ``destdir/<TASK>-bin`` for each of ``tasks`` (names, or ``ALL``), as
    ``preprocess_GLUE_tasks.sh GLUE_DIR TASK`` writes ``<TASK>-bin`` in its working folder.

    Every file of every task is read and checked first, so that an error stops the run before the
    slow work, and no folder is written; the folders appear when all tasks are done, each whole.
    An existing one is replaced only with ``force`` (refused, before any work, otherwise).
    ``workers`` is the number of BPE processes and fairseq-preprocess's ``--workers``.
    ``progress`` shows a bar over the rows being BPE-encoded.

    >>> glue_preprocess("glue_data", ["RTE"], ".")  # doctest: +SKIP
    [GlueStats(task='RTE', output=PosixPath('RTE-bin'), rows={'train': 2490, 'valid': 277, 'test': 3000}, ...)]
    """
    chosen = resolve_tasks(tasks)
    glue_dir, destdir = Path(glue_dir), Path(destdir)
    for task in chosen:  # everything that can be checked cheaply, before any work
        for stem, _ in task.splits:
            path = glue_dir / task.name / f"{stem}.tsv"
            if not path.is_file():
                names = ", ".join(f"{s}.tsv" for s, _ in task.splits)
                raise CorpusError(f"{path}: not found ({task.name} needs {names} in {glue_dir / task.name})")
    preparation = Preparation(
        [destdir / f"{task.name}-bin" for task in chosen],
        binarize=True,
        why="glue-preprocess binarizes with its fairseq-preprocess, as preprocess_GLUE_tasks.sh does",
        force=force,
    )
    encoder_json, vocab_bpe, dict_txt = resolve_bpe_files(bpe_dir)
    check_dictionary(dict_txt)  # a malformed dict.txt fails here, naming the file, not in fairseq
    bpe = GPT2BPE.from_files(encoder_json, vocab_bpe)

    with preparation.building() as folders:
        # 1. Read and check every file of every task (fast), so that a bad row anywhere stops the
        # run before the slow work; each task is built in its own temporary folder.
        jobs = [_cut_task(task, glue_dir, destdir, building) for task, building in zip(chosen, folders)]
        # 2. BPE-encode the text columns.
        runner = OrderedRunner(workers, GPT2BPE.from_files, (str(encoder_json), str(vocab_bpe)), local_state=bpe)
        with (
            runner,
            tqdm(
                total=sum(sum(job.stats.rows.values()) for job in jobs),
                desc="glue-preprocess: BPE",
                unit=" rows",
                disable=not progress,
                file=sys.stderr,
            ) as bar,
        ):
            for job in jobs:
                bar.set_postfix_str(job.task.name, refresh=False)
                _encode_task(job, runner, bar)
        # 3. Binarize, as the script does, with fairseq-preprocess; 4. finish each folder.
        if log is not None:
            print(f"binarizing with fairseq-preprocess: {', '.join(t.name for t in chosen)}", file=log)
        batches = []
        for job in jobs:
            commands = _preprocess_commands(job.task, job.texts, _TEXT, dict_txt.resolve(), workers)
            batches.append(PreprocessBatch(job.task.name, job.building, commands))
        reports = preparation.binarize(batches)
        for job in jobs:
            job.stats.report = reports.get(job.task.name, [])
            _finish_task(job)
    # Leaving the block renamed every folder into place.
    if log is not None:
        for job in jobs:
            _report(job.stats, log)
    return [job.stats for job in jobs]


_TEXT = ".text"
"""The folder, inside a task's temporary folder, of its text files (the script's
``GLUE_DIR/<TASK>/processed``); removed before the folder takes its name."""


@dataclass
class _TaskJob:
    task: GlueTask
    building: Path
    stats: GlueStats
    texts: list[_SplitText]
    scores: dict[str, list[str]]
    """STS-B: the label lines of ``train`` and ``valid``, as awk prints them."""


def _cut_task(task: GlueTask, glue_dir: Path, destdir: Path, building: Path) -> _TaskJob:
    text_dir = building / _TEXT
    text_dir.mkdir()
    job = _TaskJob(task, building, GlueStats(task.name, destdir / f"{task.name}-bin"), [], {})
    train_labels: set[str] = set()
    for stem, split in task.splits:
        scores = job.scores.setdefault(split, []) if task.regression and not stem.startswith("test") else None
        path = glue_dir / task.name / f"{stem}.tsv"
        job.texts.append(_cut_split(task, path, stem, split, text_dir, train_labels, scores))
        job.stats.rows[split] = job.texts[-1].rows
        if job.texts[-1].dropped:
            job.stats.dropped[path.name] = job.texts[-1].dropped
    return job


def _encode_task(job: _TaskJob, runner: OrderedRunner, bar: tqdm) -> None:
    """``{stem}.raw.inputN`` -> ``{stem}.inputN``, as ``multiprocessing_bpe_encoder.py --keep-empty``."""
    encode = partial(encode_chunk, keep_empty=True)
    text_dir = job.building / _TEXT
    columns = len(job.task.input_columns)
    for text in job.texts:
        with contextlib.ExitStack() as files:
            sources = []
            for i in range(columns):
                sources.append(InputFile(text_dir / f"{text.stem}.raw.input{i}"))
                files.callback(sources[-1].close)
            outputs = [files.enter_context(open(text_dir / f"{text.stem}.input{i}", "wb")) for i in range(columns)]
            for chunk, (encoded, _) in runner.map(encode, read_chunks(sources)):
                for output, data in zip(outputs, encoded):
                    output.write(data)
                bar.update(len(chunk.columns[0]))


def _finish_task(job: _TaskJob) -> None:
    building = job.building
    for log_file in building.rglob("preprocess.log"):
        log_file.unlink()  # it names the temporary folder
    if job.task.regression:
        (building / "label").mkdir()
        for split in ("train", "valid"):  # the script writes no test labels
            lines = "".join(f"{score}\n" for score in job.scores[split])
            (building / "label" / f"{split}.label").write_text(lines, encoding="utf-8")
    else:
        labels = Dictionary.load(building / "label" / "dict.txt")
        # fairseq pads a dictionary to a multiple of 8 with madeupwordNNNN: not labels
        job.stats.labels = [name for name in labels.symbols[labels.nspecial :] if not name.startswith("madeupword")]
    shutil.rmtree(building / _TEXT)


def _report(stats: GlueStats, log: IO[str]) -> None:
    rows = ", ".join(f"{split} {n}" for split, n in stats.rows.items())
    labels = f"; labels (class 0, 1, ...): {' '.join(stats.labels)}" if stats.labels else "; scores / 5 in label/"
    print(f"{stats.task}: {rows} rows -> {stats.output}{labels}", file=log)
    for name, lines in stats.dropped.items():
        shown = ", ".join(map(str, lines[:10])) + (", ..." if len(lines) > 10 else "")
        print(
            f"{stats.task}: dropped {counted(len(lines), 'row')} of {name} without exactly 6 tab-separated columns, "
            f"as preprocess_GLUE_tasks.sh does ({'line' if len(lines) == 1 else 'lines'} {shown})",
            file=log,
        )
    # fairseq-preprocess's "[None] .text/dev.input1: 30 sents, 539 tokens, 0.0% replaced (by <unk>)"
    tokens, worst, where = 0, 0.0, ""
    for line in stats.report:
        match = _PREPROCESS_REPORT.search(line)
        if match and match["column"].startswith("input"):
            tokens += int(match["tokens"])
            if float(match["percent"]) >= worst:
                worst, where = float(match["percent"]), f" ({match['stem']}.tsv, {match['column']})"
    if tokens:
        print(f"{stats.task}: {tokens} BPE tokens; <unk> (not in dict.txt): at most {worst}%{where}", file=log)


_PREPROCESS_REPORT = re.compile(
    r"(?P<stem>[\w-]+)\.(?P<column>input\d|label): \d+ sents, (?P<tokens>\d+) tokens, (?P<percent>[\d.]+)% replaced"
)


# ------------------------------------------------------------- reading a GLUE file to predict

GLUE_REGRESSION_SCALE = 5.0
"""``preprocess_GLUE_tasks.sh`` divides STS-B's 0-5 scores by 5 for training, so a model
fine-tuned on them predicts score / 5; GLUE's submission wants the 0-5 score back."""


def glue_split(path: str | os.PathLike[str]) -> str:
    """``train``, ``dev`` or ``test``, from a GLUE file's name as the script tells them apart
    (``test*`` files have no label; MNLI's are ``test_matched.tsv`` and ``test_mismatched.tsv``).

    >>> glue_split("glue_data/MNLI/test_matched.tsv"), glue_split("RTE/dev.tsv"), glue_split("train.tsv")
    ('test', 'dev', 'train')
    """
    name = Path(path).name
    return "test" if name.startswith("test") else "train" if name.startswith("train") else "dev"


@dataclass(frozen=True)
class GlueLayout:
    """How to read one GLUE file (:class:`~roberta_ext.corpus.rows.RowReader`): 0-based columns,
    a header line or not, and (QQP's train and dev files) the number of fields a row must have."""

    columns: Columns
    header: bool
    exact_fields: int | None


def glue_layout(task: GlueTask, split: str) -> GlueLayout:
    """The layout fairseq's ``preprocess_GLUE_tasks.sh`` reads a task's ``split`` file with
    (its ``cut -f`` columns minus one).

    >>> glue_layout(TASKS["RTE"], "dev")
    GlueLayout(columns=Columns(texts=('1', '2'), label='3'), header=True, exact_fields=None)
    >>> glue_layout(TASKS["CoLA"], "test").columns, glue_layout(TASKS["CoLA"], "dev").header
    (Columns(texts=('1',), label=None), False)
    """
    label = task.label_of(split)
    columns = Columns(tuple(str(c - 1) for c in task.inputs_of(split)), None if label is None else str(label - 1))
    exact = task.exact_columns if split != "test" else None
    return GlueLayout(columns, split not in task.headerless, exact)
