"""``roberta-ext predict``: a fine-tuned model's predictions for a file, with the task's metrics
(:func:`roberta_ext.inference.predict.predict_file` over the rows of :class:`~roberta_ext.corpus.rows.RowReader`).

GLUE's TSV files are read as fairseq's ``examples/roberta/preprocess_GLUE_tasks.sh`` reads them
(:func:`roberta_ext.corpus.glue.glue_layout`: the columns per task and split, which files have a
header line; STS-B's scores are divided by 5 for training, so its predictions are multiplied by 5).

``--input -`` reads standard input and ``--output -`` writes the predictions to standard output
(the summary and the metrics then go to stderr); an existing output file is replaced only with
``--force``, as on every command that writes one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from .._text import counted
from ..atomic import atomic_write
from ..corpus.glue import GLUE_REGRESSION_SCALE, TASKS, GlueTask, glue_layout, glue_split, resolve_tasks
from ..corpus.reading import STDIO, CorpusError
from ..corpus.rows import FORMATS, RowReader, input_format, parse_columns
from ..inference.predict import PredictStats, predict_file
from ..metrics import METRICS, format_metrics
from .arguments import (
    add_batch_tokens_argument,
    add_force_argument,
    add_model_arguments,
    add_progress_argument,
    load_model,
    output_format,
    positive_int,
    show_progress,
)
from .running import CommandError, run_command, say

__all__ = ["build_parser", "main"]

PROG = "roberta-ext predict"
OUTPUT_SUFFIXES = {".jsonl": "jsonl", ".tsv": "tsv", "": "tsv"}
"""``--output-format`` by the output's suffix (``""``: any other)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Predict with a fine-tuned model's classification or regression head for every row of a TSV, JSONL or "
            "text file, and write them in input order: 'index<TAB>prediction' (GLUE's submission format; the "
            "prediction is the label name from label/dict.txt, or the regression value) or JSON lines. When the "
            "input has labels, print the metrics (accuracy; F1, MCC, Pearson, Spearman as asked or as the GLUE task "
            "is scored) as fairseq's sentence_prediction criterion computes them. The file is read in chunks, each "
            "run in length-sorted batches; the output is written whole or not at all ('-': to standard output, "
            "as the rows are predicted)."
        ),
        epilog=(
            "example: roberta-ext predict checkpoints --checkpoint-file checkpoint_best.pt --data-name-or-path "
            "RTE-bin --glue-task RTE --input glue_data/RTE/dev.tsv --output RTE.tsv"
        ),
    )
    add_model_arguments(parser)
    parser.add_argument("--head", metavar="NAME", help="classification head (default: the model's only one)")
    _add_input_arguments(parser.add_argument_group("input"))
    _add_output_arguments(parser.add_argument_group("output"))
    batching = parser.add_argument_group("batching")
    add_batch_tokens_argument(
        batching,
        default=8192,
        help="padded tokens (rows x longest row) per batch, at most (default: 8192; a longer row goes alone)",
    )
    batching.add_argument(
        "--batch-size", type=positive_int, default=256, metavar="N", help="rows per batch, at most (default: 256)"
    )
    batching.add_argument(
        "--chunk-rows",
        type=positive_int,
        default=10_000,
        metavar="N",
        help="rows read and length-sorted at a time; bounds the memory (default: 10000)",
    )
    add_progress_argument(parser)
    return parser


def _add_input_arguments(reading: argparse._ArgumentGroup) -> None:
    reading.add_argument("--input", required=True, metavar="FILE", help="the rows to predict ('-': standard input)")
    reading.add_argument(
        "--format", choices=FORMATS, help="input format (default: from the suffix: .tsv; .jsonl, .ndjson, .json)"
    )
    reading.add_argument(
        "--glue-task",
        metavar="TASK",
        help="read a GLUE TSV as fairseq's preprocess_GLUE_tasks.sh does: its columns for the task and split, its "
        f"header lines, its metrics: {', '.join(t.name for t in TASKS.values())}",
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


def _add_output_arguments(writing: argparse._ArgumentGroup) -> None:
    writing.add_argument(
        "--output", required=True, metavar="FILE", help="predictions file to write ('-': standard output)"
    )
    writing.add_argument(
        "--output-format",
        choices=("tsv", "jsonl"),
        help="default: from the suffix, jsonl for .jsonl, else tsv (a format given here wins)",
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
    add_force_argument(writing, "an existing --output or --metrics-file")


def main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext predict``: a fine-tuned model's predictions for a file.

    >>> main(["checkpoints", "--checkpoint-file", "checkpoint_best.pt", "--data-name-or-path", "RTE-bin",
    ...       "--glue-task", "RTE", "--input", "glue_data/RTE/dev.tsv", "--output", "RTE.tsv"])  # doctest: +SKIP
    accuracy 78.7
    0
    """
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: _predict(args), threads=args.threads)


def _glue_task(args: argparse.Namespace) -> GlueTask | None:
    if not args.glue_task:
        return None
    if args.glue_task.upper() == "ALL":
        raise CorpusError("--glue-task takes one task: the one the model was fine-tuned on")
    if args.format not in (None, "tsv"):
        raise CorpusError(f"--glue-task reads TSV files, not {args.format}")
    return resolve_tasks([args.glue_task])[0]


def _reader(args: argparse.Namespace, task: GlueTask | None) -> RowReader:
    """The input's rows: its format, columns and header line from the options or the GLUE task."""
    format = "tsv" if task is not None else input_format(args.input, args.format)
    if args.columns and format != "tsv":
        raise CorpusError(f"--columns is for TSV input; {args.input} is read as {format} (see --format)")
    if args.fields and format != "jsonl":
        raise CorpusError(f"--fields is for JSONL input; {args.input} is read as {format} (see --format)")
    header, exact_fields = args.header, None
    columns = parse_columns(args.columns or args.fields) if (args.columns or args.fields) else None
    if task is not None:
        layout = glue_layout(task, args.glue_split or glue_split(args.input))
        if columns is None:
            columns, exact_fields = layout.columns, layout.exact_fields
        if header is None:
            header = layout.header
    return RowReader(
        args.input, format=format, columns=columns, header=header, exact_fields=exact_fields, log=sys.stderr
    )


def _refuse_to_replace(args: argparse.Namespace) -> None:
    """Without ``--force``, an existing output file is an error, before any work."""
    if args.force:
        return
    for option, path in (("--output", args.output), ("--metrics-file", args.metrics_file)):
        if path is not None and path != STDIO and Path(path).exists():
            raise CommandError(f"{option} {path} exists; refusing to replace it (use --force)")


def _predict(args: argparse.Namespace) -> int:
    _refuse_to_replace(args)
    task = _glue_task(args)
    reader = _reader(args, task)
    scale = args.regression_scale
    if scale is None:
        scale = GLUE_REGRESSION_SCALE if task is not None and task.regression else 1.0
    metrics = args.metrics.split(",") if args.metrics else (list(task.metrics) if task else None)
    written_format = output_format(PROG, args.output, args.output_format, OUTPUT_SUFFIXES)
    hub = load_model(args)
    progress = show_progress(args)
    stats = predict_file(
        hub.model, hub.inputs, reader, args.output, labels=hub.labels, head=args.head, where=reader.name,
        output_format=written_format, probabilities=args.probabilities, regression=args.regression,
        regression_scale=scale, metrics=metrics, max_tokens=args.max_tokens, batch_size=args.batch_size,
        chunk_rows=args.chunk_rows, truncate=args.truncate, progress=progress,
        total=reader.count() if progress else None,
    )  # fmt: skip
    _report(args, stats, f"{hub.device}, {args.dtype}", written_format, reader.name)
    return 0


def _report(args: argparse.Namespace, stats: PredictStats, running: str, written_format: str, where: str) -> None:
    to_stdout = args.output == STDIO
    target = "standard output" if to_stdout else args.output
    if stats.rows:
        rate = stats.rows / stats.seconds if stats.seconds else 0.0
        print(
            f"{counted(stats.rows, 'row')} -> {target} (head {stats.head!r}, {rate:.0f} rows/s on {running})",
            file=sys.stderr,
        )
    elif to_stdout:  # nothing to predict is not an error, but worth saying
        written = "nothing" if written_format == "jsonl" else "only the header line"
        say(PROG, f"{where} has 0 rows; wrote {written} to standard output")
    else:
        written = "an empty" if written_format == "jsonl" else "a header-only"
        say(PROG, f"{where} has 0 rows; wrote {written} {target}")
    if stats.metrics:  # on stdout, unless the predictions are there
        print(format_metrics(stats.metrics), file=sys.stderr if to_stdout else sys.stdout)
    if args.metrics_file:  # the metrics as fractions; only the row count for unlabelled input
        with atomic_write(args.metrics_file) as out:
            json.dump({"rows": stats.rows, **stats.metrics}, out, indent=2)
            out.write("\n")
