"""``roberta-ext embed``: sentence embeddings of a file of texts, streamed into an embedding file
(:func:`roberta_ext.embedding.stream.embed_file`: streaming, resumable, sharded, one run per
output); ``roberta-ext embed merge`` joins the shard files of a sharded run
(:func:`~roberta_ext.embedding.stream.merge_shards`).

``roberta-ext embed MODEL --input FILE --output OUT.npy`` reads text (a text per line), JSONL
(``--field``) or TSV (``--column``), as :mod:`roberta_ext.corpus.rows` reads them, and writes
row ``i`` = the embedding of data row ``i`` as ``.npy`` or ``.safetensors``, with ``OUT.npy.json``
beside it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._text import counted
from ..corpus.rows import FORMATS, input_format
from ..embedding.embedder import DEFAULT_MAX_TOKENS, DEFAULT_MAX_TOKENS_CUDA, Embedder
from ..embedding.locking import Wait
from ..embedding.pooling import POOLING_MODES, check_modes
from ..embedding.stream import (
    DEFAULT_CHUNK_ROWS,
    EmbedError,
    InputSpec,
    Options,
    Shard,
    embed_file,
    merge_shards,
    parts_path,
    receipt_path,
    shard_files,
)
from .arguments import (
    add_batch_tokens_argument,
    add_force_argument,
    add_model_arguments,
    add_progress_argument,
    load_model,
    model_files_given,
    positive_int,
    show_progress,
)
from .running import CommandError, run_command, say

__all__ = ["build_merge_parser", "build_parser", "main", "merge_main"]

PROG = "roberta-ext embed"


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _pooling(text: str) -> tuple[str, ...]:
    try:
        return check_modes(text.split(","), "--pooling")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_wait_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        action="store_true",
        help="when another run is writing the output, wait for it to finish (default: stop at once, naming it)",
    )


def _waiting(prog: str, wait: bool) -> Wait:
    """``--wait``: wait, saying for whom on stderr."""
    return (lambda message: say(prog, message)) if wait else False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Sentence embeddings of every row of a file: text (one per line), JSONL (--field) or TSV (--column) in; "
            ".npy or .safetensors out, row i = data row i, with OUTPUT.json beside it (model, input, options, skipped "
            "lines). Streams the file in chunks; an interrupted run resumes where it stopped when run again; "
            f"--shard I/N (or torchrun's RANK/WORLD_SIZE) embeds every N-th row, and '{PROG} merge' joins the shards."
        ),
        epilog=(
            f"examples: {PROG} my-model --input texts.txt --output emb.npy; "
            f"{PROG} my-model --input qa.jsonl --field question --output q.safetensors --dtype bfloat16; "
            f"{PROG} checkpoints --checkpoint-file checkpoint_best.pt --input texts.txt --output emb.npy; "
            f"{PROG} my-model --input texts.txt --output emb.npy --shard 0/2 (and 1/2), then "
            f"{PROG} merge --output emb.npy"
        ),
    )
    add_model_arguments(parser)
    _add_input_arguments(parser)
    _add_embedding_arguments(parser.add_argument_group("embeddings"))
    writing = parser.add_argument_group("output and running")
    writing.add_argument("--output", required=True, type=Path, metavar="FILE", help=".npy or .safetensors to write")
    writing.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="embed rows i with i %% N == I into OUTPUT.shard-I-of-N (default: torchrun's RANK/WORLD_SIZE, else all)",
    )
    add_batch_tokens_argument(
        writing,
        default=None,
        help=f"padded tokens (rows x longest row) per batch (default: {DEFAULT_MAX_TOKENS}, on a GPU "
        f"{DEFAULT_MAX_TOKENS_CUDA})",
    )
    writing.add_argument(
        "--chunk-rows",
        type=positive_int,
        default=DEFAULT_CHUNK_ROWS,
        metavar="N",
        help=f"rows per part: what is kept of an interrupted run, and what is held in memory (default: "
        f"{DEFAULT_CHUNK_ROWS})",
    )
    add_force_argument(writing)
    _add_wait_argument(parser)
    add_progress_argument(parser)
    return parser


def _add_input_arguments(parser: argparse.ArgumentParser) -> None:
    reading = parser.add_argument_group("input")
    reading.add_argument(
        "--input",
        required=True,
        type=Path,
        metavar="FILE",
        help="the texts ('-': standard input, saved beside the output for the run; a run interrupted resumes "
        "when the same text is piped again)",
    )
    reading.add_argument(
        "--format",
        choices=FORMATS,
        help="how to read --input (default: by its suffix: .jsonl/.ndjson/.json jsonl, .tsv tsv, else text)",
    )
    reading.add_argument(
        "--field", action="append", default=[], metavar="NAME", help="JSONL: the key holding the text (twice: a pair)"
    )
    reading.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME|INDEX",
        help="TSV: the column holding the text, a header name or a 0-based number (twice: a pair)",
    )
    reading.add_argument(
        "--header",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="TSV: the first line names the columns (default: when a --column is a name, not a number)",
    )
    reading.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip lines that cannot be read (not UTF-8, not JSON, no such field): they get no row and are listed "
        "in OUTPUT.json",
    )


def _add_embedding_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--pooling",
        type=_pooling,
        metavar="MODE[,MODE]",
        help=f"{', '.join(POOLING_MODES)} (several: concatenated; default: the model's own, else mean)",
    )
    group.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="L2-normalise (default: as the model does, else not)",
    )
    group.add_argument(
        "--max-length",
        type=positive_int,
        metavar="N",
        help="truncate inputs to N tokens (default: the model's max_seq_length, else its max_positions)",
    )
    group.add_argument(
        "--truncate-dim",
        type=positive_int,
        metavar="N",
        help="keep the first N values of each embedding (Matryoshka; default: the folder's truncate_dim, else all)",
    )
    prompt = group.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT", help="prepend TEXT to every text")
    prompt.add_argument("--prompt-name", metavar="NAME", help="prepend the model's prompt NAME")


def main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext embed``: a file of texts -> an embedding file (``merge`` as first argument
    merges shard files).

    >>> main(["my-model", "--input", "texts.txt", "--output", "emb.npy"])  # doctest: +SKIP
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "merge":
        return merge_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    args.format = input_format(args.input, args.format)
    fields = args.field if args.format == "jsonl" else args.column
    if args.format == "jsonl" and not args.field:
        parser.error("a JSONL input needs --field (the key holding the text)")
    if args.format == "tsv" and not args.column:
        parser.error("a TSV input needs --column (the column holding the text)")
    if args.format == "text" and (args.field or args.column):
        parser.error("--field and --column are for JSONL and TSV inputs (see --format)")
    if len(fields) > 2:
        parser.error("--field/--column take one text or a pair (given at most twice)")
    return run_command(PROG, lambda: _embed(args, tuple(fields)), threads=args.threads)


def _options(args: argparse.Namespace) -> Options:
    """What changes the embeddings: what a resumed run must share with the first."""
    return Options(
        model=args.model,
        pooling=args.pooling,
        normalize=args.normalize,
        max_length=args.max_length,
        prompt=args.prompt,
        prompt_name=args.prompt_name,
        dtype=args.dtype,
        skip_bad_lines=args.skip_bad_lines,
        chunk_rows=args.chunk_rows,
        loaded_with=tuple(model_files_given(args).items()),
    )


def _embedder(args: argparse.Namespace) -> Embedder:
    """The model, loaded, and how it embeds (called once the output's lock is held)."""
    hub = load_model(args)
    try:
        return Embedder.for_hub(
            hub,
            pooling=args.pooling,
            normalize=args.normalize,
            max_length=args.max_length,
            prompt=args.prompt,
            prompt_name=args.prompt_name,
            truncate_dim=args.truncate_dim,
            max_tokens=args.max_tokens,
        )
    except (KeyError, ValueError) as error:  # an option the model cannot take: one line, naming it
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise CommandError(f"{args.model}: {message}") from None


def _embed(args: argparse.Namespace, fields: tuple[str, ...]) -> int:
    shard = args.shard or Shard.from_environment()
    spec = InputSpec(args.input, args.format, fields, args.header)
    target = shard.output(args.output)
    try:
        receipt = embed_file(
            lambda: _embedder(args),
            spec,
            args.output,
            _options(args),
            shard=shard,
            force=args.force,
            progress=show_progress(args),
            wait=_waiting(PROG, args.wait),
        )
    except KeyboardInterrupt:
        print(file=sys.stderr)
        say(
            PROG,
            f"interrupted; the finished chunks are kept in {parts_path(target)}: run the same command again to resume",
        )
        return 130
    _report(receipt, spec, target)
    return 0


def _report(receipt: dict[str, Any], spec: InputSpec, target: Path) -> None:
    rate = receipt.get("rows_per_second")
    message = f"{counted(receipt['rows'], 'row')} x {receipt['dimension']} -> {target}"
    if rate:
        message += f" ({rate:.0f} rows/s)"
    if receipt["skipped"]:
        first = receipt["skipped"][0]
        message += (
            f"; skipped {counted(len(receipt['skipped']), 'bad line')} (first: {spec.name}:{first[1]}: "
            f"{first[2]}), listed in {receipt_path(target)}"
        )
    say(PROG, message)


# ---------------------------------------------------------------------------------- merge


def build_merge_parser() -> argparse.ArgumentParser:
    prog = f"{PROG} merge"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Interleave the shard files of one sharded run (--shard I/N for every I) back into row order.",
        epilog=f"example: {prog} emb.shard-0-of-2.npy emb.shard-1-of-2.npy --output emb.npy "
        f"(or just: {prog} --output emb.npy, which finds emb.shard-*-of-*.npy)",
    )
    parser.add_argument(
        "shards", nargs="*", type=Path, metavar="SHARD", help="shard files (default: OUTPUT's shard-*-of-* siblings)"
    )
    parser.add_argument("--output", required=True, type=Path, metavar="FILE", help=".npy or .safetensors to write")
    add_force_argument(parser)
    _add_wait_argument(parser)
    add_progress_argument(parser, note="; merging shows none: it reads and writes at disk speed")
    return parser


def merge_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext embed merge``: shard files -> one embedding file in row order."""
    parser = build_merge_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        shards = list(args.shards) or shard_files(args.output)
        if not shards:
            raise EmbedError(f"no shard files given, and none named like {args.output.stem}.shard-I-of-N beside it")
        receipt = merge_shards(shards, args.output, force=args.force, wait=_waiting(parser.prog, args.wait))
        say(
            parser.prog,
            f"{counted(len(shards), 'shard')} -> {args.output}: {counted(receipt['rows'], 'row')} x "
            f"{receipt['dimension']}"
            + (f"; {counted(len(receipt['skipped']), 'bad line')} had no row" if receipt["skipped"] else ""),
        )
        return 0

    return run_command(parser.prog, body)
