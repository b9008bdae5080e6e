"""The corpus commands, each a parser over a library function of :mod:`roberta_ext.corpus`:

* ``bpe-encode`` (:func:`~roberta_ext.corpus.bpe.bpe_encode_files`, fairseq's
  ``multiprocessing_bpe_encoder.py``) and ``train-bpe`` (:func:`~roberta_ext.corpus.bpe.train_bpe_files`);
* ``tokenize`` (:func:`~roberta_ext.corpus.tokenize.tokenize_files`: WordPiece or SentencePiece tokens);
* ``prepare-tagging`` (:func:`~roberta_ext.corpus.tagging.prepare_tagging`);
* ``glue-preprocess`` (:func:`~roberta_ext.corpus.glue.glue_preprocess`, fairseq's ``preprocess_GLUE_tasks.sh``);
* ``prepare-multiple-choice`` (:func:`~roberta_ext.corpus.multiple_choice.prepare_multiple_choice`).

Each command is a pair: ``X_parser()`` (its options) and ``X_main(argv)`` (parse, run, report).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .._text import counted
from ..corpus.bpe import bpe_encode_files, train_bpe_files
from ..corpus.glue import TASKS, glue_preprocess
from ..corpus.multiple_choice import FORMATS as CHOICE_FORMATS
from ..corpus.multiple_choice import SPLITS as CHOICE_SPLITS
from ..corpus.multiple_choice import prepare_multiple_choice, read_splits
from ..corpus.pool import DEFAULT_WORKERS
from ..corpus.reading import STDIO
from ..corpus.tagging import SPLITS as TAGGING_SPLITS
from ..corpus.tagging import prepare_tagging
from ..corpus.tokenize import PIECE_TOKENIZERS, TOKENIZERS, TokenWriter, tokenize_files
from .arguments import (
    add_force_argument,
    add_gpt2_bpe_arguments,
    add_progress_argument,
    non_negative_int,
    positive_int,
    show_progress,
)
from .running import run_command

__all__ = [
    "bpe_encode_main",
    "bpe_encode_parser",
    "glue_preprocess_main",
    "glue_preprocess_parser",
    "prepare_multiple_choice_main",
    "prepare_multiple_choice_parser",
    "prepare_tagging_main",
    "prepare_tagging_parser",
    "tokenize_main",
    "tokenize_parser",
    "train_bpe_main",
    "train_bpe_parser",
]


def _workers(parser: argparse.ArgumentParser, default: int, help: str) -> None:
    parser.add_argument(
        "--workers", type=positive_int, default=default, metavar="N", help=f"{help} (default: {default})"
    )


def _print_commands(commands: list[list[str]]) -> None:
    print("now run:", file=sys.stderr)
    for command in commands:
        print("  " + " ".join(command), file=sys.stderr)


# ------------------------------------------------------------------------------ bpe-encode


def bpe_encode_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roberta-ext bpe-encode",
        description=(
            "Encode text files with GPT-2 byte-level BPE, one output line of space-separated GPT-2 "
            "ids per input line: byte-identical to fairseq's examples/roberta/"
            "multiprocessing_bpe_encoder.py, with the same options. Lines are read with universal "
            "newlines and stripped; with several parallel inputs, a row is dropped from all outputs "
            "when any of its lines is empty (unless --keep-empty). Outputs appear only when the "
            "whole run succeeded."
        ),
        epilog=(
            "example: roberta-ext bpe-encode --gpt2-encoder-json gpt2_bpe/encoder.json --gpt2-vocab-bpe "
            "gpt2_bpe/vocab.bpe --inputs train.raw --outputs train.bpe --workers 8 (fairseq's spelling, "
            "--encoder-json and --vocab-bpe, is accepted too)"
        ),
    )
    add_gpt2_bpe_arguments(parser, required=True)
    parser.add_argument(
        "--inputs",
        nargs="+",
        default=[STDIO],
        metavar="FILE",
        help="input files to filter/encode; '-' is stdin (default: -). Several files are "
        "PARALLEL COLUMNS, as in fairseq: line i of every file is one row, and they must "
        "have equal numbers of lines. For separate files (train, valid), run once per "
        "file (unlike 'roberta-ext tokenize', whose --inputs are separate files)",
    )
    parser.add_argument(
        "--outputs",
        nargs="+",
        default=[STDIO],
        metavar="FILE",
        help="path to save encoded outputs, one per input; '-' is stdout (default: -)",
    )
    parser.add_argument(
        "--keep-empty",
        action="store_true",
        help="keep empty lines (as empty output lines) instead of dropping their rows",
    )
    _workers(parser, DEFAULT_WORKERS, "processes that encode; 1 runs in this process")
    add_progress_argument(parser, note="; without it, fairseq's 'processed N lines' messages are printed")
    return parser


def bpe_encode_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext bpe-encode``: fairseq's ``multiprocessing_bpe_encoder.py``, same options.

    >>> bpe_encode_main(["--gpt2-encoder-json", "encoder.json", "--gpt2-vocab-bpe", "vocab.bpe",
    ...                  "--inputs", "train.txt", "--outputs", "train.bpe"])  # doctest: +SKIP
    0
    """
    parser = bpe_encode_parser()
    args = parser.parse_args(argv)
    if len(args.inputs) != len(args.outputs):
        parser.error(
            f"number of input and output paths should match: {len(args.inputs)} inputs, {len(args.outputs)} outputs"
        )

    def body() -> int:
        bpe_encode_files(
            args.gpt2_encoder_json,
            args.gpt2_vocab_bpe,
            args.inputs,
            args.outputs,
            keep_empty=args.keep_empty,
            workers=args.workers,
            progress=show_progress(args),
            log=sys.stderr,
        )
        return 0

    return run_command(parser.prog, body)


# ------------------------------------------------------------------------------- train-bpe


def train_bpe_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roberta-ext train-bpe",
        description=(
            "Learn a GPT-2-format byte-level BPE (encoder.json, vocab.bpe) from text files, and the "
            "fairseq dict.txt of the BPE-encoded text: the same file fairseq-preprocess --only-source "
            "would build, so it can be passed as --srcdict. For users without OpenAI's GPT-2 files."
        ),
        epilog=(
            "example: roberta-ext train-bpe --inputs train.raw --output-dir gpt2_bpe --num-merges 30000; "
            "then roberta-ext bpe-encode --gpt2-encoder-json gpt2_bpe/encoder.json --gpt2-vocab-bpe gpt2_bpe/vocab.bpe "
            "--inputs train.raw --outputs train.bpe; fairseq-preprocess --only-source --srcdict "
            "gpt2_bpe/dict.txt --trainpref train.bpe --destdir data-bin"
        ),
    )
    parser.add_argument("--inputs", nargs="+", required=True, metavar="FILE", help="text files to learn from")
    parser.add_argument(
        "--output-dir",
        required=True,
        type=Path,
        metavar="DIR",
        help="folder for encoder.json, vocab.bpe and dict.txt (created if missing)",
    )
    parser.add_argument(
        "--num-merges",
        type=non_negative_int,
        default=30_000,
        metavar="N",
        help="merges to learn; the vocabulary gets up to N + 257 tokens (default: 30000)",
    )
    parser.add_argument(
        "--min-frequency",
        type=positive_int,
        default=2,
        metavar="N",
        help="stop when the best pair occurs fewer than N times (default: 2)",
    )
    parser.add_argument(
        "--dict-from",
        nargs="+",
        metavar="FILE",
        help="text files whose BPE ids dict.txt counts, e.g. just the training split "
        "you will pass to fairseq-preprocess --trainpref (default: --inputs)",
    )
    parser.add_argument(
        "--padding-factor",
        type=positive_int,
        default=8,
        metavar="N",
        help="pad dict.txt with madeupwordNNNN rows as fairseq-preprocess does (default: 8)",
    )
    _workers(parser, DEFAULT_WORKERS, "processes that read and encode text")
    add_force_argument(parser, "an encoder.json, vocab.bpe or dict.txt already in --output-dir")
    add_progress_argument(parser)
    return parser


def train_bpe_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext train-bpe``: learn encoder.json, vocab.bpe and dict.txt from text files.

    >>> train_bpe_main(["--inputs", "train.txt", "--output-dir", "gpt2_bpe"])  # doctest: +SKIP
    0
    """
    parser = train_bpe_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        trained = train_bpe_files(
            args.inputs,
            args.output_dir,
            num_merges=args.num_merges,
            min_frequency=args.min_frequency,
            dict_from=args.dict_from,
            padding_factor=args.padding_factor,
            workers=args.workers,
            force=args.force,
            progress=show_progress(args),
        )
        print(
            f"learned {counted(trained.num_merges, 'merge')} ({counted(trained.vocab_size, 'token')}); dict.txt has "
            f"{counted(trained.dict_size, 'row')}; wrote {trained.encoder_json}, {trained.vocab_bpe}, "
            f"{trained.dict_txt}",
            file=sys.stderr,
        )
        return 0

    return run_command(parser.prog, body)


# -------------------------------------------------------------------------------- tokenize


def tokenize_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roberta-ext tokenize",
        description=(
            "Tokenize text files with BERT's WordPiece (vocab.txt), ALBERT's SentencePiece (spiece.model) or "
            "XLM-R's SentencePiece (sentencepiece.bpe.model): "
            "one output line of space-separated tokens per input line, the input of fairseq-preprocess "
            "--only-source. Empty lines are kept (they separate documents for "
            "--task roberta_ext_sentence_pair_mlm); "
            "unknown tokens are written as fairseq's <unk>. Outputs appear only when the whole run succeeded."
        ),
        epilog=(
            "example: roberta-ext tokenize --tokenizer wordpiece --model vocab.txt --inputs train.txt valid.txt "
            "--outputs train.tok valid.tok; then fairseq-preprocess --only-source --trainpref train.tok "
            "--validpref valid.tok --destdir data-bin"
        ),
    )
    parser.add_argument(
        "--tokenizer",
        required=True,
        choices=PIECE_TOKENIZERS,
        help="wordpiece (BERT, --model vocab.txt), sentencepiece (ALBERT, --model spiece.model) or "
        "xlmr_sentencepiece (XLM-R, --model sentencepiece.bpe.model: fairseq's --bpe sentencepiece)",
    )
    parser.add_argument(
        "--model", required=True, metavar="FILE", help="vocab.txt, spiece.model or sentencepiece.bpe.model"
    )
    parser.add_argument(
        "--cased",
        action="store_true",
        help="keep the case (default: lowercase, as uncased models; xlmr_sentencepiece never lowercases)",
    )
    parser.add_argument(
        "--dict-out",
        metavar="FILE",
        help="xlmr_sentencepiece only: also write XLM-R's dict.txt here, every piece of the model in its order "
        "with its count in the outputs; fairseq-preprocess --srcdict FILE then gives the model XLM-R's indices "
        "(those of transformers' XLMRobertaTokenizer, so that the trained model exports to transformers)",
    )
    parser.add_argument(
        "--inputs",
        nargs="+",
        required=True,
        metavar="FILE",
        help="text files to tokenize, each on its own: SEPARATE files, which may have any "
        "numbers of lines (unlike 'roberta-ext bpe-encode', whose --inputs are parallel "
        "columns of one corpus, as in fairseq)",
    )
    parser.add_argument(
        "--outputs", nargs="+", required=True, metavar="FILE", help="one output per input, in the same order"
    )
    _workers(parser, 1, "processes that tokenize; 1 runs in this process")
    add_progress_argument(parser)
    return parser


def tokenize_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext tokenize``: WordPiece or SentencePiece tokens per line, for fairseq-preprocess.

    >>> tokenize_main(["--tokenizer", "wordpiece", "--model", "vocab.txt",
    ...                "--inputs", "train.txt", "--outputs", "train.tok"])  # doctest: +SKIP
    0
    """
    parser = tokenize_parser()
    args = parser.parse_args(argv)
    if len(args.inputs) != len(args.outputs):
        parser.error(
            f"number of input and output paths should match: {len(args.inputs)} inputs, {len(args.outputs)} outputs"
        )
    if args.dict_out is not None and args.tokenizer != "xlmr_sentencepiece":
        parser.error("--dict-out writes XLM-R's dict.txt: it needs --tokenizer xlmr_sentencepiece")

    def body() -> int:
        writer = TokenWriter(args.tokenizer, model=args.model, cased=args.cased)
        stats = tokenize_files(
            writer,
            args.inputs,
            args.outputs,
            workers=args.workers,
            progress=show_progress(args),
            dict_out=args.dict_out,
        )
        message = (
            f"tokenized {counted(stats.lines, 'line')} ({stats.empty} empty) into {counted(stats.tokens, 'token')}, "
            f"{stats.unknown} of them <unk>"
        )
        if stats.no_tokens:
            message += (
                f"; {counted(stats.no_tokens, 'line')} had text but no token and "
                f"{'was' if stats.no_tokens == 1 else 'were'} written as <unk> (first: {stats.first_without_tokens})"
            )
        print(message, file=sys.stderr)
        return 0

    return run_command(parser.prog, body)


# ------------------------------------------------------------------------- prepare-tagging


def prepare_tagging_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roberta-ext prepare-tagging",
        description=(
            "Make token-classification data for fairseq-train --task roberta_ext_token_classification from files of "
            "'word<TAB>label' lines (or whitespace-separated columns: first = word, last = label), a blank line "
            "between sentences. Each word is tokenized on its own; its label goes on its first sub-word and "
            "<pad> (ignored) on the others. Writes OUTPUT/input0 and OUTPUT/label (binarized by "
            "fairseq-preprocess) and their text in OUTPUT/text."
        ),
        epilog=(
            "example: roberta-ext prepare-tagging --tokenizer wordpiece --model vocab.txt --dict data-bin/dict.txt "
            "--train train.conll --valid dev.conll --output-dir ner-bin; then fairseq-train ner-bin --user-dir "
            "roberta_ext --task roberta_ext_token_classification --criterion roberta_ext_token_classification "
            "--arch bert_ext_base "
            "--restore-file pretrained.pt ..."
        ),
    )
    parser.add_argument(
        "--tokenizer",
        required=True,
        choices=TOKENIZERS,
        help="gpt2 (RoBERTa: --gpt2-encoder-json, --gpt2-vocab-bpe), wordpiece (BERT: --model vocab.txt), "
        "sentencepiece (ALBERT: --model spiece.model) or xlmr_sentencepiece (XLM-R: --model "
        "sentencepiece.bpe.model)",
    )
    parser.add_argument(
        "--model", metavar="FILE", help="vocab.txt, spiece.model or sentencepiece.bpe.model (not for gpt2)"
    )
    add_gpt2_bpe_arguments(parser)
    parser.add_argument("--cased", action="store_true", help="keep the case (default: lowercase, as uncased models)")
    parser.add_argument("--dict", required=True, metavar="FILE", help="the pretrained model's dict.txt")
    for split in TAGGING_SPLITS:
        parser.add_argument(f"--{split}", metavar="FILE", required=split == "train", help=f"the {split} split")
    parser.add_argument("--output-dir", required=True, type=Path, metavar="DIR", help="folder to write")
    parser.add_argument(
        "--text-only", action="store_true", help="write the text files only, and print the fairseq-preprocess commands"
    )
    parser.add_argument(
        "--max-positions",
        type=positive_int,
        default=512,
        metavar="N",
        help="warn about sentences longer than this, <s> and </s> included (default: 512)",
    )
    _workers(parser, 1, "fairseq-preprocess workers")
    add_force_argument(parser, "an existing --output-dir")
    add_progress_argument(parser)
    return parser


def prepare_tagging_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext prepare-tagging``: CoNLL-style files -> ``--task roberta_ext_token_classification`` data.

    >>> prepare_tagging_main(["--tokenizer", "wordpiece", "--model", "vocab.txt", "--dict", "bin/dict.txt",
    ...                       "--train", "train.conll", "--valid", "dev.conll",
    ...                       "--output-dir", "ner-bin"])  # doctest: +SKIP
    0
    """
    parser = prepare_tagging_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        writer = TokenWriter(
            args.tokenizer,
            model=args.model,
            encoder_json=args.gpt2_encoder_json,
            vocab_bpe=args.gpt2_vocab_bpe,
            cased=args.cased,
        )
        splits = {split: getattr(args, split) for split in TAGGING_SPLITS if getattr(args, split)}
        stats = prepare_tagging(
            writer,
            args.dict,
            splits,
            args.output_dir,
            text_only=args.text_only,
            max_positions=args.max_positions,
            workers=args.workers,
            force=args.force,
            log=sys.stderr,
            progress=show_progress(args),
        )
        counts = ", ".join(f"{split} {n}" for split, n in stats.sentences.items())
        print(
            f"{counts} sentences; {counted(stats.words, 'word')} -> {counted(stats.tokens, 'token')}; "
            f"{counted(len(stats.labels), 'label')}: "
            f"{' '.join(stats.labels[:20])}{' ...' if len(stats.labels) > 20 else ''}",
            file=sys.stderr,
        )
        if stats.docstarts:
            print(f"skipped {counted(stats.docstarts, '-DOCSTART- line')}", file=sys.stderr)
        if stats.words_without_tokens:
            n = stats.words_without_tokens
            print(
                f"{counted(n, 'word')} had no token and {'was' if n == 1 else 'were'} written as <unk>", file=sys.stderr
            )
        if stats.too_long:
            print(
                f"warning: {counted(stats.too_long, 'sentence')} {'is' if stats.too_long == 1 else 'are'} longer than "
                f"{args.max_positions} tokens (first: "
                f"{stats.first_too_long}); fairseq-train refuses them unless "
                "--skip-invalid-size-inputs-valid-test",
                file=sys.stderr,
            )
        if args.text_only:
            _print_commands(stats.commands)
        return 0

    return run_command(parser.prog, body)


# ------------------------------------------------------------------------- glue-preprocess


def glue_preprocess_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roberta-ext glue-preprocess",
        description=(
            "Prepare GLUE tasks for fine-tuning as fairseq's examples/roberta/preprocess_GLUE_tasks.sh does, with "
            "byte-identical output: DESTDIR/<TASK>-bin/{input0,input1,label} (input1 for pair tasks only), "
            "binarized by fairseq-preprocess; STS-B's scores divided by 5 in label/{train,valid}.label. Reads "
            "GLUE_DIR/<TASK>/{train,dev,test}.tsv (MNLI: train, dev_matched, dev_mismatched, test_matched, "
            "test_mismatched), as download_glue_data.py writes them; splits become train, valid (valid1), test "
            "(test1). As in the script, QQP's train and dev rows without exactly 6 tab-separated columns are "
            "dropped (and reported). Any other row that lacks a column the task reads, or holds an empty label, a "
            "label with a space, a dev label train lacks, a score that is not a number, text that is not UTF-8 or a "
            "carriage return inside a field, is an error naming the file and line. Every file is checked before "
            "the slow work; the <TASK>-bin folders appear when all tasks are done, and after an error none is "
            "written."
        ),
        epilog=(
            "example: roberta-ext glue-preprocess glue_data RTE --destdir .; then fairseq-hydra-train "
            "--config-dir roberta_ext/config/finetuning --config-name rte task.data=RTE-bin "
            "checkpoint.restore_file=roberta.base/model.pt common.user_dir=$PWD/roberta_ext"
        ),
    )
    parser.add_argument("glue_dir", metavar="GLUE_DIR", type=Path, help="the folder download_glue_data.py wrote")
    parser.add_argument(
        "tasks",
        nargs="+",
        metavar="TASK",
        help=f"{', '.join(TASKS)}, or ALL (every task); any case (rte, sts-b)",
    )
    parser.add_argument(
        "--destdir", required=True, type=Path, metavar="DIR", help="where <TASK>-bin folders are written"
    )
    parser.add_argument(
        "--bpe-dir",
        type=Path,
        metavar="DIR",
        help="a folder holding encoder.json, vocab.bpe and dict.txt (default: OpenAI's GPT-2 BPE files, downloaded "
        "once into the cache, $ROBERTA_EXT_CACHE; ROBERTA_EXT_OFFLINE=1 forbids the download)",
    )
    _workers(parser, DEFAULT_WORKERS, "BPE processes, and fairseq-preprocess --workers")
    add_force_argument(parser, "existing <TASK>-bin folders")
    add_progress_argument(parser)
    return parser


def glue_preprocess_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext glue-preprocess``: GLUE's TSV folders -> ``<TASK>-bin/``, as fairseq's
    ``preprocess_GLUE_tasks.sh``.

    >>> glue_preprocess_main(["glue_data", "RTE", "--destdir", "."])  # doctest: +SKIP
    0
    """
    parser = glue_preprocess_parser()
    args = parser.parse_args(argv)

    def body() -> int:
        glue_preprocess(
            args.glue_dir,
            args.tasks,
            args.destdir,
            bpe_dir=args.bpe_dir,
            workers=args.workers,
            force=args.force,
            progress=show_progress(args),
            log=sys.stderr,
        )
        return 0

    return run_command(parser.prog, body)


# ----------------------------------------------------------------- prepare-multiple-choice


def prepare_multiple_choice_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="roberta-ext prepare-multiple-choice",
        description=(
            "Make multiple-choice data for fairseq-train --task roberta_ext_multiple_choice (fairseq's "
            "sentence_ranking layout): OUTPUT/input0 (contexts), OUTPUT/input1..N (choices), binarized by "
            "fairseq-preprocess with the pretrained dict.txt, and OUTPUT/label/{split}.label. --format jsonl "
            "reads {context, choices, label} per line; commonsense_qa reads CommonsenseQA's JSONL (Q:/A: "
            "prefixes, answerKey); race reads the RACE folder as fairseq's preprocess_RACE.py does (splits "
            "train, valid, test = middle, test1 = high)."
        ),
        epilog=(
            "example: roberta-ext prepare-multiple-choice --format race --input-dir RACE --gpt2-encoder-json "
            "encoder.json --gpt2-vocab-bpe vocab.bpe --dict dict.txt --output-dir RACE-bin; then fairseq-train "
            "RACE-bin --user-dir roberta_ext --task roberta_ext_multiple_choice --criterion "
            "roberta_ext_multiple_choice --num-classes 4 --init-token 0 --separator-token 2 --arch roberta_ext_large "
            "--restore-file model.pt ..."
        ),
    )
    parser.add_argument("--format", choices=CHOICE_FORMATS, default="jsonl", help="input format (default: jsonl)")
    for split in CHOICE_SPLITS:
        parser.add_argument(f"--{split}", metavar="FILE", help=f"the {split} split (jsonl, commonsense_qa)")
    parser.add_argument("--input-dir", metavar="DIR", help="the RACE folder, with train/, dev/ and test/ (race)")
    add_gpt2_bpe_arguments(parser, required=True)
    parser.add_argument("--dict", required=True, metavar="FILE", help="the pretrained model's dict.txt")
    parser.add_argument("--output-dir", required=True, type=Path, metavar="DIR", help="folder to write")
    parser.add_argument(
        "--text-only", action="store_true", help="write the text files only, and print the fairseq-preprocess commands"
    )
    parser.add_argument(
        "--max-positions",
        type=positive_int,
        default=512,
        metavar="N",
        help="warn about examples longer than this, <s> and separators included (default: 512)",
    )
    _workers(parser, 1, "fairseq-preprocess workers")
    add_force_argument(parser, "an existing --output-dir")
    add_progress_argument(parser)
    return parser


def prepare_multiple_choice_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext prepare-multiple-choice``: RACE, CommonsenseQA or SWAG-style JSONL ->
    ``--task roberta_ext_multiple_choice`` data.

    >>> prepare_multiple_choice_main(["--format", "race", "--input-dir", "RACE", "--gpt2-encoder-json", "encoder.json",
    ...     "--gpt2-vocab-bpe", "vocab.bpe", "--dict", "dict.txt", "--output-dir", "RACE-bin"])  # doctest: +SKIP
    0
    """
    parser = prepare_multiple_choice_parser()
    args = parser.parse_args(argv)
    files = {split: getattr(args, split) for split in CHOICE_SPLITS if getattr(args, split)}
    if args.format == "race":
        if args.input_dir is None or files:
            parser.error("--format race reads --input-dir (and no --train/--valid/--test)")
    elif args.input_dir is not None or not files:
        parser.error(f"--format {args.format} reads --train, --valid and/or --test (not --input-dir)")

    def body() -> int:
        writer = TokenWriter("gpt2", encoder_json=args.gpt2_encoder_json, vocab_bpe=args.gpt2_vocab_bpe)
        stats = prepare_multiple_choice(
            writer,
            args.dict,
            read_splits(args.format, files, args.input_dir),
            args.output_dir,
            text_only=args.text_only,
            max_positions=args.max_positions,
            workers=args.workers,
            force=args.force,
            log=sys.stderr,
            progress=show_progress(args),
        )
        counts = ", ".join(f"{split} {n}" for split, n in stats.examples.items())
        print(
            f"{counts} examples of {counted(stats.num_choices, 'choice')}; {counted(stats.tokens, 'token')} -> "
            f"{args.output_dir}",
            file=sys.stderr,
        )
        if stats.too_long:
            print(
                f"warning: {counted(stats.too_long, 'example')} {'has' if stats.too_long == 1 else 'have'} a candidate "
                f"longer than {args.max_positions} tokens (first: "
                f"{stats.first_too_long}); train with --shorten-method truncate (and --max-option-length) to cut "
                "them, or fairseq skips them in training and refuses them in validation",
                file=sys.stderr,
            )
        if args.text_only:
            _print_commands(stats.commands)
        return 0

    return run_command(parser.prog, body)
