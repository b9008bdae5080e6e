"""roberta_ext/cli/corpus.py: the corpus commands (bpe-encode, train-bpe, tokenize, prepare-tagging,
glue-preprocess, prepare-multiple-choice) in-process, as a user meets them: their parsers (options,
defaults, help, usage errors), the refusals made before any work, what reaches the library and
what is said. The library's functions are replaced by recorders: their work (fairseq-preprocess in
subprocesses, BPE and SentencePiece training) is tests/corpus/*'s."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from roberta_ext.cli import corpus as command
from roberta_ext.corpus.bpe import TrainedBPE
from roberta_ext.corpus.multiple_choice import ChoiceStats
from roberta_ext.corpus.pool import DEFAULT_WORKERS
from roberta_ext.corpus.reading import CorpusError
from roberta_ext.corpus.tagging import TagStats
from roberta_ext.corpus.tokenize import TokenizeStats
from tests.cli.test_arguments import helps, ran

WRITER = object()
"""What the recorded ``TokenWriter`` gives: the writer the library functions must be handed."""
SPLITS = {"train": ["an example"]}
"""What the recorded ``read_splits`` gives."""


class Library:
    """The library functions the commands call, recorded: ``calls`` is (name, args, keywords) in
    order; ``returns[name]`` is what a call gives (an exception is raised)."""

    DEFAULTS = {
        "bpe_encode_files": None,
        "train_bpe_files": TrainedBPE(Path("o/encoder.json"), Path("o/vocab.bpe"), Path("o/dict.txt"), 1, 258, 264),
        "TokenWriter": WRITER,
        "tokenize_files": TokenizeStats(),
        "prepare_tagging": TagStats(),
        "glue_preprocess": None,
        "read_splits": SPLITS,
        "prepare_multiple_choice": ChoiceStats(),
    }

    def __init__(self, monkeypatch) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        self.returns: dict[str, object] = dict(self.DEFAULTS)
        for name in self.DEFAULTS:
            monkeypatch.setattr(command, name, self._recorder(name))

    def _recorder(self, name: str):
        def call(*args, **kwargs):
            self.calls.append((name, args, kwargs))
            value = self.returns[name]
            if isinstance(value, BaseException):
                raise value
            return value

        return call

    def names(self) -> list[str]:
        return [name for name, _, _ in self.calls]


@pytest.fixture
def library(monkeypatch) -> Library:
    return Library(monkeypatch)


def run(main, argv: list[str], capsys) -> tuple[int, str]:
    """A command's exit status and what it wrote on stderr (nothing on stdout)."""
    status, out, err = ran(main, argv, capsys)
    assert out == ""
    return status, err


def usage_error(parser_of, main, argv: list[str], message: str, capsys) -> None:
    """``argv`` is refused as argparse refuses: the usage, ``PROG: error: MESSAGE``, exit 2."""
    with pytest.raises(SystemExit) as exit_:
        main([str(item) for item in argv])
    assert exit_.value.code == 2
    parser = parser_of()
    assert capsys.readouterr().err == f"{parser.format_usage()}{parser.prog}: error: {message}\n"


GPT2 = ["--gpt2-encoder-json", "e.json", "--gpt2-vocab-bpe", "v.bpe"]


# ------------------------------------------------------------------------------ the parsers


def test_the_options_and_their_defaults():
    parser = command.bpe_encode_parser()
    assert parser.prog == "roberta-ext bpe-encode"
    assert vars(parser.parse_args(GPT2)) == {
        "gpt2_encoder_json": "e.json",
        "gpt2_vocab_bpe": "v.bpe",
        "inputs": ["-"],  # fairseq's multiprocessing_bpe_encoder.py: stdin and stdout by default
        "outputs": ["-"],
        "keep_empty": False,
        "workers": DEFAULT_WORKERS,  # fairseq's 20, or fewer on a machine with fewer cores
        "progress": None,
    }
    parser = command.train_bpe_parser()
    assert parser.prog == "roberta-ext train-bpe"
    assert vars(parser.parse_args(["--inputs", "a", "b", "--output-dir", "o"])) == {
        "inputs": ["a", "b"],
        "output_dir": Path("o"),
        "num_merges": 30_000,
        "min_frequency": 2,
        "dict_from": None,
        "padding_factor": 8,  # fairseq-preprocess's --padding-factor
        "workers": DEFAULT_WORKERS,
        "force": False,
        "progress": None,
    }
    parser = command.tokenize_parser()
    assert parser.prog == "roberta-ext tokenize"
    assert vars(parser.parse_args("--tokenizer wordpiece --model m --inputs a b --outputs c d".split())) == {
        "tokenizer": "wordpiece",
        "model": "m",
        "cased": False,
        "dict_out": None,
        "inputs": ["a", "b"],
        "outputs": ["c", "d"],
        "workers": 1,
        "progress": None,
    }
    parser = command.prepare_tagging_parser()
    assert parser.prog == "roberta-ext prepare-tagging"
    assert vars(parser.parse_args("--tokenizer gpt2 --dict d --train t --output-dir o".split())) == {
        "tokenizer": "gpt2",
        "model": None,
        "gpt2_encoder_json": None,
        "gpt2_vocab_bpe": None,
        "cased": False,
        "dict": "d",
        "train": "t",
        "valid": None,
        "test": None,
        "output_dir": Path("o"),
        "text_only": False,
        "max_positions": 512,
        "workers": 1,
        "force": False,
        "progress": None,
    }
    parser = command.glue_preprocess_parser()
    assert parser.prog == "roberta-ext glue-preprocess"
    assert vars(parser.parse_args("g rte MNLI --destdir d".split())) == {
        "glue_dir": Path("g"),
        "tasks": ["rte", "MNLI"],
        "destdir": Path("d"),
        "bpe_dir": None,
        "workers": DEFAULT_WORKERS,
        "force": False,
        "progress": None,
    }
    parser = command.prepare_multiple_choice_parser()
    assert parser.prog == "roberta-ext prepare-multiple-choice"
    assert vars(parser.parse_args([*GPT2, "--dict", "d", "--output-dir", "o"])) == {
        "format": "jsonl",
        "train": None,
        "valid": None,
        "test": None,
        "input_dir": None,
        "gpt2_encoder_json": "e.json",
        "gpt2_vocab_bpe": "v.bpe",
        "dict": "d",
        "output_dir": Path("o"),
        "text_only": False,
        "max_positions": 512,
        "workers": 1,
        "force": False,
        "progress": None,
    }


def test_options_given_are_parsed():
    given = command.bpe_encode_parser().parse_args(
        [*GPT2, "--inputs", "a", "b", "--outputs", "c", "d", "--keep-empty", "--workers", "3", "--progress"]
    )
    assert (given.inputs, given.outputs, given.keep_empty, given.workers, given.progress) == (
        ["a", "b"],
        ["c", "d"],
        True,
        3,
        True,
    )
    # fairseq's spellings of the BPE files, hidden aliases
    aliased = command.bpe_encode_parser().parse_args("--encoder-json e --vocab-bpe v --no-progress".split())
    assert (aliased.gpt2_encoder_json, aliased.gpt2_vocab_bpe, aliased.progress) == ("e", "v", False)
    given = command.train_bpe_parser().parse_args(
        "--inputs a --output-dir o --num-merges 0 --min-frequency 1 --dict-from x y --padding-factor 1 --workers 1 "
        "--overwrite".split()
    )
    assert (given.num_merges, given.min_frequency, given.dict_from, given.padding_factor, given.force) == (
        0,
        1,
        ["x", "y"],
        1,
        True,
    )
    given = command.tokenize_parser().parse_args(
        "--tokenizer xlmr_sentencepiece --model m --cased --dict-out dict.txt --inputs a --outputs b "
        "--workers 4".split()
    )
    assert (given.tokenizer, given.cased, given.dict_out, given.workers) == ("xlmr_sentencepiece", True, "dict.txt", 4)
    given = command.prepare_tagging_parser().parse_args(
        "--tokenizer sentencepiece --model m --cased --dict d --train t --valid v --test s --output-dir o "
        "--text-only --max-positions 9 --force".split()
    )
    assert (given.cased, given.valid, given.test, given.text_only, given.max_positions, given.force) == (
        True,
        "v",
        "s",
        True,
        9,
        True,
    )
    given = command.glue_preprocess_parser().parse_args("g ALL --destdir d --bpe-dir b --workers 5 --force".split())
    assert (given.tasks, given.bpe_dir, given.workers, given.force) == (["ALL"], Path("b"), 5, True)
    given = command.prepare_multiple_choice_parser().parse_args(
        [*GPT2, "--dict", "d", "--output-dir", "o", "--format", "race", "--input-dir", "R", "--text-only"]
    )
    assert (given.format, given.input_dir, given.text_only) == ("race", "R", True)


def test_the_help_of_bpe_encode_and_train_bpe():
    parser = command.bpe_encode_parser()
    assert parser.description == (
        "Encode text files with GPT-2 byte-level BPE, one output line of space-separated GPT-2 ids per input line: "
        "byte-identical to fairseq's examples/roberta/multiprocessing_bpe_encoder.py, with the same options. Lines "
        "are read with universal newlines and stripped; with several parallel inputs, a row is dropped from all "
        "outputs when any of its lines is empty (unless --keep-empty). Outputs appear only when the whole run "
        "succeeded."
    )
    assert parser.epilog == (
        "example: roberta-ext bpe-encode --gpt2-encoder-json gpt2_bpe/encoder.json --gpt2-vocab-bpe "
        "gpt2_bpe/vocab.bpe --inputs train.raw --outputs train.bpe --workers 8 (fairseq's spelling, --encoder-json "
        "and --vocab-bpe, is accepted too)"
    )
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--gpt2-encoder-json": "GPT-2 encoder.json",
        "--gpt2-vocab-bpe": "GPT-2 vocab.bpe",
        "--inputs": "input files to filter/encode; '-' is stdin (default: -). Several files are PARALLEL COLUMNS, "
        "as in fairseq: line i of every file is one row, and they must have equal numbers of lines. For separate "
        "files (train, valid), run once per file (unlike 'roberta-ext tokenize', whose --inputs are separate files)",
        "--outputs": "path to save encoded outputs, one per input; '-' is stdout (default: -)",
        "--keep-empty": "keep empty lines (as empty output lines) instead of dropping their rows",
        "--workers": f"processes that encode; 1 runs in this process (default: {DEFAULT_WORKERS})",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal; without it, fairseq's "
        "'processed N lines' messages are printed)",
    }
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext bpe-encode [-h] --gpt2-encoder-json FILE --gpt2-vocab-bpe FILE [--inputs FILE "
        "[FILE ...]] [--outputs FILE [FILE ...]] [--keep-empty] [--workers N] [--progress | --no-progress]"
    )
    parser = command.train_bpe_parser()
    assert parser.description == (
        "Learn a GPT-2-format byte-level BPE (encoder.json, vocab.bpe) from text files, and the fairseq dict.txt of "
        "the BPE-encoded text: the same file fairseq-preprocess --only-source would build, so it can be passed as "
        "--srcdict. For users without OpenAI's GPT-2 files."
    )
    assert parser.epilog == (
        "example: roberta-ext train-bpe --inputs train.raw --output-dir gpt2_bpe --num-merges 30000; then "
        "roberta-ext bpe-encode --gpt2-encoder-json gpt2_bpe/encoder.json --gpt2-vocab-bpe gpt2_bpe/vocab.bpe "
        "--inputs train.raw --outputs train.bpe; fairseq-preprocess --only-source --srcdict gpt2_bpe/dict.txt "
        "--trainpref train.bpe --destdir data-bin"
    )
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--inputs": "text files to learn from",
        "--output-dir": "folder for encoder.json, vocab.bpe and dict.txt (created if missing)",
        "--num-merges": "merges to learn; the vocabulary gets up to N + 257 tokens (default: 30000)",
        "--min-frequency": "stop when the best pair occurs fewer than N times (default: 2)",
        "--dict-from": "text files whose BPE ids dict.txt counts, e.g. just the training split you will pass to "
        "fairseq-preprocess --trainpref (default: --inputs)",
        "--padding-factor": "pad dict.txt with madeupwordNNNN rows as fairseq-preprocess does (default: 8)",
        "--workers": f"processes that read and encode text (default: {DEFAULT_WORKERS})",
        "--force": "replace an encoder.json, vocab.bpe or dict.txt already in --output-dir (default: refuse to)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal)",
    }
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext train-bpe [-h] --inputs FILE [FILE ...] --output-dir DIR [--num-merges N] "
        "[--min-frequency N] [--dict-from FILE [FILE ...]] [--padding-factor N] [--workers N] [--force] "
        "[--progress | --no-progress]"
    )


def test_the_help_of_tokenize_and_prepare_tagging():
    parser = command.tokenize_parser()
    assert parser.description == (
        "Tokenize text files with BERT's WordPiece (vocab.txt), ALBERT's SentencePiece (spiece.model) or XLM-R's "
        "SentencePiece (sentencepiece.bpe.model): one output line of space-separated tokens per input line, the "
        "input of fairseq-preprocess --only-source. Empty lines are kept (they separate documents for --task "
        "roberta_ext_sentence_pair_mlm); unknown tokens are written as fairseq's <unk>. Outputs appear only when "
        "the whole run succeeded."
    )
    assert parser.epilog == (
        "example: roberta-ext tokenize --tokenizer wordpiece --model vocab.txt --inputs train.txt valid.txt "
        "--outputs train.tok valid.tok; then fairseq-preprocess --only-source --trainpref train.tok --validpref "
        "valid.tok --destdir data-bin"
    )
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--tokenizer": "wordpiece (BERT, --model vocab.txt), sentencepiece (ALBERT, --model spiece.model) or "
        "xlmr_sentencepiece (XLM-R, --model sentencepiece.bpe.model: fairseq's --bpe sentencepiece)",
        "--model": "vocab.txt, spiece.model or sentencepiece.bpe.model",
        "--cased": "keep the case (default: lowercase, as uncased models; xlmr_sentencepiece never lowercases)",
        "--dict-out": "xlmr_sentencepiece only: also write XLM-R's dict.txt here, every piece of the model in its "
        "order with its count in the outputs; fairseq-preprocess --srcdict FILE then gives the model XLM-R's "
        "indices (those of transformers' XLMRobertaTokenizer, so that the trained model exports to transformers)",
        "--inputs": "text files to tokenize, each on its own: SEPARATE files, which may have any numbers of lines "
        "(unlike 'roberta-ext bpe-encode', whose --inputs are parallel columns of one corpus, as in fairseq)",
        "--outputs": "one output per input, in the same order",
        "--workers": "processes that tokenize; 1 runs in this process (default: 1)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal)",
    }
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext tokenize [-h] --tokenizer {wordpiece,sentencepiece,xlmr_sentencepiece} --model FILE "
        "[--cased] [--dict-out FILE] --inputs FILE [FILE ...] --outputs FILE [FILE ...] [--workers N] "
        "[--progress | --no-progress]"
    )
    parser = command.prepare_tagging_parser()
    assert parser.description == (
        "Make token-classification data for fairseq-train --task roberta_ext_token_classification from files of "
        "'word<TAB>label' lines (or whitespace-separated columns: first = word, last = label), a blank line between "
        "sentences. Each word is tokenized on its own; its label goes on its first sub-word and <pad> (ignored) on "
        "the others. Writes OUTPUT/input0 and OUTPUT/label (binarized by fairseq-preprocess) and their text in "
        "OUTPUT/text."
    )
    assert parser.epilog == (
        "example: roberta-ext prepare-tagging --tokenizer wordpiece --model vocab.txt --dict data-bin/dict.txt "
        "--train train.conll --valid dev.conll --output-dir ner-bin; then fairseq-train ner-bin --user-dir "
        "roberta_ext --task roberta_ext_token_classification --criterion roberta_ext_token_classification --arch "
        "bert_ext_base --restore-file pretrained.pt ..."
    )
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--tokenizer": "gpt2 (RoBERTa: --gpt2-encoder-json, --gpt2-vocab-bpe), wordpiece (BERT: --model vocab.txt), "
        "sentencepiece (ALBERT: --model spiece.model) or xlmr_sentencepiece (XLM-R: --model "
        "sentencepiece.bpe.model)",
        "--model": "vocab.txt, spiece.model or sentencepiece.bpe.model (not for gpt2)",
        "--gpt2-encoder-json": "GPT-2 encoder.json",
        "--gpt2-vocab-bpe": "GPT-2 vocab.bpe",
        "--cased": "keep the case (default: lowercase, as uncased models)",
        "--dict": "the pretrained model's dict.txt",
        "--train": "the train split",
        "--valid": "the valid split",
        "--test": "the test split",
        "--output-dir": "folder to write",
        "--text-only": "write the text files only, and print the fairseq-preprocess commands",
        "--max-positions": "warn about sentences longer than this, <s> and </s> included (default: 512)",
        "--workers": "fairseq-preprocess workers (default: 1)",
        "--force": "replace an existing --output-dir (default: refuse to)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal)",
    }
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext prepare-tagging [-h] --tokenizer {gpt2,wordpiece,sentencepiece,xlmr_sentencepiece} "
        "[--model FILE] [--gpt2-encoder-json FILE] [--gpt2-vocab-bpe FILE] [--cased] --dict FILE --train FILE "
        "[--valid FILE] [--test FILE] --output-dir DIR [--text-only] [--max-positions N] [--workers N] [--force] "
        "[--progress | --no-progress]"
    )


def test_the_help_of_glue_preprocess_and_prepare_multiple_choice():
    parser = command.glue_preprocess_parser()
    assert parser.description == (
        "Prepare GLUE tasks for fine-tuning as fairseq's examples/roberta/preprocess_GLUE_tasks.sh does, with "
        "byte-identical output: DESTDIR/<TASK>-bin/{input0,input1,label} (input1 for pair tasks only), binarized by "
        "fairseq-preprocess; STS-B's scores divided by 5 in label/{train,valid}.label. Reads "
        "GLUE_DIR/<TASK>/{train,dev,test}.tsv (MNLI: train, dev_matched, dev_mismatched, test_matched, "
        "test_mismatched), as download_glue_data.py writes them; splits become train, valid (valid1), test (test1). "
        "As in the script, QQP's train and dev rows without exactly 6 tab-separated columns are dropped (and "
        "reported). Any other row that lacks a column the task reads, or holds an empty label, a label with a "
        "space, a dev label train lacks, a score that is not a number, text that is not UTF-8 or a carriage return "
        "inside a field, is an error naming the file and line. Every file is checked before the slow work; the "
        "<TASK>-bin folders appear when all tasks are done, and after an error none is written."
    )
    assert parser.epilog == (
        "example: roberta-ext glue-preprocess glue_data RTE --destdir .; then fairseq-hydra-train --config-dir "
        "roberta_ext/config/finetuning --config-name rte task.data=RTE-bin "
        "checkpoint.restore_file=roberta.base/model.pt common.user_dir=$PWD/roberta_ext"
    )
    positionals = {action.metavar: action.help for action in parser._actions if not action.option_strings}
    assert positionals == {
        "GLUE_DIR": "the folder download_glue_data.py wrote",
        "TASK": "QQP, MNLI, QNLI, MRPC, RTE, STS-B, SST-2, CoLA, or ALL (every task); any case (rte, sts-b)",
    }
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--destdir": "where <TASK>-bin folders are written",
        "--bpe-dir": "a folder holding encoder.json, vocab.bpe and dict.txt (default: OpenAI's GPT-2 BPE files, "
        "downloaded once into the cache, $ROBERTA_EXT_CACHE; ROBERTA_EXT_OFFLINE=1 forbids the download)",
        "--workers": f"BPE processes, and fairseq-preprocess --workers (default: {DEFAULT_WORKERS})",
        "--force": "replace existing <TASK>-bin folders (default: refuse to)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal)",
    }
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext glue-preprocess [-h] --destdir DIR [--bpe-dir DIR] [--workers N] [--force] "
        "[--progress | --no-progress] GLUE_DIR TASK [TASK ...]"
    )
    parser = command.prepare_multiple_choice_parser()
    assert parser.description == (
        "Make multiple-choice data for fairseq-train --task roberta_ext_multiple_choice (fairseq's sentence_ranking "
        "layout): OUTPUT/input0 (contexts), OUTPUT/input1..N (choices), binarized by fairseq-preprocess with the "
        "pretrained dict.txt, and OUTPUT/label/{split}.label. --format jsonl reads {context, choices, label} per "
        "line; commonsense_qa reads CommonsenseQA's JSONL (Q:/A: prefixes, answerKey); race reads the RACE folder "
        "as fairseq's preprocess_RACE.py does (splits train, valid, test = middle, test1 = high)."
    )
    assert parser.epilog == (
        "example: roberta-ext prepare-multiple-choice --format race --input-dir RACE --gpt2-encoder-json "
        "encoder.json --gpt2-vocab-bpe vocab.bpe --dict dict.txt --output-dir RACE-bin; then fairseq-train RACE-bin "
        "--user-dir roberta_ext --task roberta_ext_multiple_choice --criterion roberta_ext_multiple_choice "
        "--num-classes 4 --init-token 0 --separator-token 2 --arch roberta_ext_large --restore-file model.pt ..."
    )
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--format": "input format (default: jsonl)",
        "--train": "the train split (jsonl, commonsense_qa)",
        "--valid": "the valid split (jsonl, commonsense_qa)",
        "--test": "the test split (jsonl, commonsense_qa)",
        "--input-dir": "the RACE folder, with train/, dev/ and test/ (race)",
        "--gpt2-encoder-json": "GPT-2 encoder.json",
        "--gpt2-vocab-bpe": "GPT-2 vocab.bpe",
        "--dict": "the pretrained model's dict.txt",
        "--output-dir": "folder to write",
        "--text-only": "write the text files only, and print the fairseq-preprocess commands",
        "--max-positions": "warn about examples longer than this, <s> and separators included (default: 512)",
        "--workers": "fairseq-preprocess workers (default: 1)",
        "--force": "replace an existing --output-dir (default: refuse to)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal)",
    }
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext prepare-multiple-choice [-h] [--format {jsonl,commonsense_qa,race}] [--train FILE] "
        "[--valid FILE] [--test FILE] [--input-dir DIR] --gpt2-encoder-json FILE --gpt2-vocab-bpe FILE --dict FILE "
        "--output-dir DIR [--text-only] [--max-positions N] [--workers N] [--force] [--progress | --no-progress]"
    )


# ------------------------------------------------------------------------------ usage errors


@pytest.mark.parametrize(
    "name, argv, message",
    [
        ("bpe_encode", [], "the following arguments are required: --gpt2-encoder-json, --gpt2-vocab-bpe"),
        (
            "bpe_encode",
            [*GPT2, "--inputs", "a", "b"],
            "number of input and output paths should match: 2 inputs, 1 outputs",
        ),
        (
            "bpe_encode",
            [*GPT2, "--inputs", "a", "--outputs", "b", "c", "d"],
            "number of input and output paths should match: 1 inputs, 3 outputs",
        ),
        ("bpe_encode", [*GPT2, "--workers", "0"], "argument --workers: must be >= 1, got 0"),
        ("train_bpe", ["--inputs", "a"], "the following arguments are required: --output-dir"),
        (
            "train_bpe",
            "--inputs a --output-dir o --num-merges -1".split(),
            "argument --num-merges: must be >= 0, got -1",
        ),
        (
            "train_bpe",
            "--inputs a --output-dir o --min-frequency 0".split(),
            "argument --min-frequency: must be >= 1, got 0",
        ),
        (
            "train_bpe",
            "--inputs a --output-dir o --padding-factor 0".split(),
            "argument --padding-factor: must be >= 1, got 0",
        ),
        ("train_bpe", "--inputs a --output-dir o --workers 0".split(), "argument --workers: must be >= 1, got 0"),
        (
            "tokenize",
            "--tokenizer wordpiece --model m --inputs a b --outputs c".split(),
            "number of input and output paths should match: 2 inputs, 1 outputs",
        ),
        (
            "tokenize",
            "--tokenizer sentencepiece --model m --dict-out d --inputs a --outputs c".split(),
            "--dict-out writes XLM-R's dict.txt: it needs --tokenizer xlmr_sentencepiece",
        ),
        (
            "tokenize",
            "--tokenizer gpt2 --model m --inputs a --outputs c".split(),
            "argument --tokenizer: invalid choice: 'gpt2' (choose from 'wordpiece', 'sentencepiece', "
            "'xlmr_sentencepiece')",
        ),
        (
            "tokenize",
            "--tokenizer wordpiece --inputs a --outputs c".split(),
            "the following arguments are required: --model",
        ),
        (
            "prepare_tagging",
            "--tokenizer gpt2 --dict d --output-dir o".split(),
            "the following arguments are required: --train",
        ),
        (
            "prepare_tagging",
            "--tokenizer gpt2 --dict d --train t --output-dir o --max-positions 0".split(),
            "argument --max-positions: must be >= 1, got 0",
        ),
        (
            "prepare_tagging",
            "--tokenizer gpt2 --dict d --train t --output-dir o --workers 0".split(),
            "argument --workers: must be >= 1, got 0",
        ),
        ("glue_preprocess", ["g", "rte"], "the following arguments are required: --destdir"),
        ("glue_preprocess", ["g", "--destdir", "d"], "the following arguments are required: TASK"),
        (
            "prepare_multiple_choice",
            [*GPT2, "--dict", "d", "--output-dir", "o"],
            "--format jsonl reads --train, --valid and/or --test (not --input-dir)",
        ),
        (
            "prepare_multiple_choice",
            [
                *GPT2,
                "--dict",
                "d",
                "--output-dir",
                "o",
                "--format",
                "commonsense_qa",
                "--input-dir",
                "R",
                "--test",
                "t",
            ],
            "--format commonsense_qa reads --train, --valid and/or --test (not --input-dir)",
        ),
        (
            "prepare_multiple_choice",
            [*GPT2, "--dict", "d", "--output-dir", "o", "--format", "race"],
            "--format race reads --input-dir (and no --train/--valid/--test)",
        ),
        (
            "prepare_multiple_choice",
            [*GPT2, "--dict", "d", "--output-dir", "o", "--format", "race", "--input-dir", "R", "--valid", "v"],
            "--format race reads --input-dir (and no --train/--valid/--test)",
        ),
        (
            "prepare_multiple_choice",
            [*GPT2, "--dict", "d", "--output-dir", "o", "--train", "t", "--max-positions", "0"],
            "argument --max-positions: must be >= 1, got 0",
        ),
        (
            "prepare_multiple_choice",
            [*GPT2, "--dict", "d", "--output-dir", "o", "--train", "t", "--workers", "0"],
            "argument --workers: must be >= 1, got 0",
        ),
    ],
)
def test_usage_errors_are_refused_before_any_work(library, capsys, name, argv, message):
    parser_of = getattr(command, f"{name}_parser")
    usage_error(parser_of, getattr(command, f"{name}_main"), argv, message, capsys)
    assert library.calls == []


# ------------------------------------------------------------------------------ bpe-encode, train-bpe


def test_bpe_encode_hands_the_library_its_options(library, capsys):
    assert run(command.bpe_encode_main, GPT2, capsys) == (0, "")
    assert library.calls == [
        (
            "bpe_encode_files",
            ("e.json", "v.bpe", ["-"], ["-"]),
            {"keep_empty": False, "workers": DEFAULT_WORKERS, "progress": False, "log": sys.stderr},
        )
    ]
    library.calls.clear()
    argv = ["--encoder-json", "e", "--vocab-bpe", "v", "--inputs", "a", "b", "--outputs", "c", "d"]
    assert run(command.bpe_encode_main, [*argv, "--keep-empty", "--workers", "1", "--progress"], capsys) == (0, "")
    assert library.calls == [
        (
            "bpe_encode_files",
            ("e", "v", ["a", "b"], ["c", "d"]),
            {"keep_empty": True, "workers": 1, "progress": True, "log": sys.stderr},
        )
    ]


def test_train_bpe_hands_the_library_its_options_and_says_what_it_wrote(library, capsys):
    library.returns["train_bpe_files"] = TrainedBPE(Path("o/e.json"), Path("o/v.bpe"), Path("o/d.txt"), 5, 262, 272)
    assert run(command.train_bpe_main, ["--inputs", "a", "b", "--output-dir", "o"], capsys) == (
        0,
        "learned 5 merges (262 tokens); dict.txt has 272 rows; wrote o/e.json, o/v.bpe, o/d.txt\n",
    )
    assert library.calls == [
        (
            "train_bpe_files",
            (["a", "b"], Path("o")),
            {
                "num_merges": 30_000,
                "min_frequency": 2,
                "dict_from": None,
                "padding_factor": 8,
                "workers": DEFAULT_WORKERS,
                "force": False,
                "progress": False,
            },
        )
    ]
    library.calls.clear()
    library.returns["train_bpe_files"] = TrainedBPE(Path("e"), Path("v"), Path("d"), 1, 1, 1)
    argv = "--inputs a --output-dir o --num-merges 7 --min-frequency 3 --dict-from x --padding-factor 4 --workers 1"
    assert run(command.train_bpe_main, [*argv.split(), "--force", "--progress"], capsys) == (
        0,
        "learned 1 merge (1 token); dict.txt has 1 row; wrote e, v, d\n",
    )
    assert library.calls[0][2] == {
        "num_merges": 7,
        "min_frequency": 3,
        "dict_from": ["x"],
        "padding_factor": 4,
        "workers": 1,
        "force": True,
        "progress": True,
    }


# ------------------------------------------------------------------------------ tokenize


def test_tokenize_hands_the_library_its_options_and_reports(library, capsys):
    library.returns["tokenize_files"] = TokenizeStats(lines=5, empty=2, tokens=9, unknown=1)
    argv = "--tokenizer wordpiece --model vocab.txt --inputs a b --outputs c d"
    assert run(command.tokenize_main, argv.split(), capsys) == (
        0,
        "tokenized 5 lines (2 empty) into 9 tokens, 1 of them <unk>\n",
    )
    assert library.calls == [
        ("TokenWriter", ("wordpiece",), {"model": "vocab.txt", "cased": False}),
        ("tokenize_files", (WRITER, ["a", "b"], ["c", "d"]), {"workers": 1, "progress": False, "dict_out": None}),
    ]
    assert library.calls[1][1][0] is WRITER
    library.calls.clear()
    library.returns["tokenize_files"] = TokenizeStats(lines=1, tokens=1, no_tokens=1, first_without_tokens="a:1")
    argv = "--tokenizer xlmr_sentencepiece --model s.model --cased --dict-out dict.txt --inputs a --outputs c"
    assert run(command.tokenize_main, [*argv.split(), "--workers", "2", "--progress"], capsys) == (
        0,
        "tokenized 1 line (0 empty) into 1 token, 0 of them <unk>; 1 line had text but no token and was written "
        "as <unk> (first: a:1)\n",
    )
    assert library.calls == [
        ("TokenWriter", ("xlmr_sentencepiece",), {"model": "s.model", "cased": True}),
        ("tokenize_files", (WRITER, ["a"], ["c"]), {"workers": 2, "progress": True, "dict_out": "dict.txt"}),
    ]
    library.returns["tokenize_files"] = TokenizeStats(lines=3, tokens=3, no_tokens=2, first_without_tokens="b:2")
    assert run(command.tokenize_main, "--tokenizer sentencepiece --model m --inputs a --outputs c".split(), capsys)[
        1
    ] == (
        "tokenized 3 lines (0 empty) into 3 tokens, 0 of them <unk>; 2 lines had text but no token and were "
        "written as <unk> (first: b:2)\n"
    )


@pytest.mark.parametrize(
    "name, argv",
    [
        ("bpe_encode", GPT2),
        ("train_bpe", ["--inputs", "a", "--output-dir", "o"]),
        ("tokenize", "--tokenizer wordpiece --model m --inputs a --outputs b".split()),
        ("prepare_tagging", "--tokenizer gpt2 --dict d --train t --output-dir o".split()),
        ("glue_preprocess", ["g", "RTE", "--destdir", "d"]),
        ("prepare_multiple_choice", [*GPT2, "--dict", "d", "--output-dir", "o", "--train", "t"]),
    ],
)
def test_a_library_error_is_one_line_under_the_commands_name(library, capsys, name, argv):
    for function in (
        "bpe_encode_files",
        "train_bpe_files",
        "TokenWriter",
        "glue_preprocess",
        "read_splits",
    ):
        library.returns[function] = CorpusError("a.txt:3: not valid UTF-8")
    prog = getattr(command, f"{name}_parser")().prog
    assert run(getattr(command, f"{name}_main"), argv, capsys) == (1, f"{prog}: error: a.txt:3: not valid UTF-8\n")
    assert len(library.calls) == 1


# ------------------------------------------------------------------------------ prepare-tagging


def test_prepare_tagging_hands_the_library_its_options(library, capsys):
    library.returns["prepare_tagging"] = TagStats(sentences={"train": 3}, words=4, tokens=6, labels=["O"])
    argv = "--tokenizer gpt2 --encoder-json e --vocab-bpe v --dict d --train t --output-dir o"
    assert run(command.prepare_tagging_main, argv.split(), capsys) == (
        0,
        "train 3 sentences; 4 words -> 6 tokens; 1 label: O\n",
    )
    assert library.calls == [
        ("TokenWriter", ("gpt2",), {"model": None, "encoder_json": "e", "vocab_bpe": "v", "cased": False}),
        (
            "prepare_tagging",
            (WRITER, "d", {"train": "t"}, Path("o")),
            {
                "text_only": False,
                "max_positions": 512,
                "workers": 1,
                "force": False,
                "log": sys.stderr,
                "progress": False,
            },
        ),
    ]
    library.calls.clear()
    argv = "--tokenizer wordpiece --model vocab.txt --cased --dict d --train t --test s --valid v --output-dir o"
    extra = ["--max-positions", "64", "--workers", "3", "--force", "--progress"]
    assert run(command.prepare_tagging_main, [*argv.split(), *extra], capsys)[0] == 0
    assert library.calls == [
        ("TokenWriter", ("wordpiece",), {"model": "vocab.txt", "encoder_json": None, "vocab_bpe": None, "cased": True}),
        (
            "prepare_tagging",
            (WRITER, "d", {"train": "t", "valid": "v", "test": "s"}, Path("o")),
            {"text_only": False, "max_positions": 64, "workers": 3, "force": True, "log": sys.stderr, "progress": True},
        ),
    ]
    assert list(library.calls[1][1][2]) == ["train", "valid", "test"]  # the splits in their order


def test_prepare_tagging_reports_what_it_made(library, capsys):
    labels = [f"L{i}" for i in range(21)]
    library.returns["prepare_tagging"] = TagStats(
        sentences={"train": 3, "valid": 1},
        words=1,
        tokens=2,
        docstarts=2,
        words_without_tokens=2,
        too_long=2,
        first_too_long="t:7",
        labels=labels,
        commands=[["fairseq-preprocess", "--only-source"], ["fairseq-preprocess", "--trainpref", "x"]],
    )
    argv = "--tokenizer gpt2 --dict d --train t --output-dir o --max-positions 100 --text-only"
    status, err = run(command.prepare_tagging_main, argv.split(), capsys)
    assert status == 0
    assert library.calls[1][2]["text_only"] is True
    assert err == (
        f"train 3, valid 1 sentences; 1 word -> 2 tokens; 21 labels: {' '.join(labels[:20])} ...\n"
        "skipped 2 -DOCSTART- lines\n"
        "2 words had no token and were written as <unk>\n"
        "warning: 2 sentences are longer than 100 tokens (first: t:7); fairseq-train refuses them unless "
        "--skip-invalid-size-inputs-valid-test\n"
        "now run:\n"
        "  fairseq-preprocess --only-source\n"
        "  fairseq-preprocess --trainpref x\n"
    )
    library.returns["prepare_tagging"] = TagStats(
        sentences={"train": 1},
        words=2,
        tokens=1,
        docstarts=1,
        words_without_tokens=1,
        too_long=1,
        first_too_long="t:1",
        labels=labels[:20],
        commands=[["not", "shown"]],
    )
    status, err = run(
        command.prepare_tagging_main, "--tokenizer gpt2 --dict d --train t --output-dir o".split(), capsys
    )
    assert (status, err) == (
        0,
        f"train 1 sentences; 2 words -> 1 token; 20 labels: {' '.join(labels[:20])}\n"
        "skipped 1 -DOCSTART- line\n"
        "1 word had no token and was written as <unk>\n"
        "warning: 1 sentence is longer than 512 tokens (first: t:1); fairseq-train refuses them unless "
        "--skip-invalid-size-inputs-valid-test\n",
    )


# ------------------------------------------------------------------------------ glue-preprocess


def test_glue_preprocess_hands_the_library_its_options(library, capsys):
    assert run(command.glue_preprocess_main, ["g", "rte", "SST-2", "--destdir", "d"], capsys) == (0, "")
    assert library.calls == [
        (
            "glue_preprocess",
            (Path("g"), ["rte", "SST-2"], Path("d")),
            {"bpe_dir": None, "workers": DEFAULT_WORKERS, "force": False, "progress": False, "log": sys.stderr},
        )
    ]
    library.calls.clear()
    argv = ["g", "ALL", "--destdir", "d", "--bpe-dir", "b", "--workers", "1", "--overwrite", "--progress"]
    assert run(command.glue_preprocess_main, argv, capsys) == (0, "")
    assert library.calls == [
        (
            "glue_preprocess",
            (Path("g"), ["ALL"], Path("d")),
            {"bpe_dir": Path("b"), "workers": 1, "force": True, "progress": True, "log": sys.stderr},
        )
    ]


# ------------------------------------------------------------------------------ prepare-multiple-choice


def test_prepare_multiple_choice_hands_the_library_its_options(library, capsys):
    library.returns["prepare_multiple_choice"] = ChoiceStats(examples={"train": 2}, num_choices=4, tokens=30)
    base = [*GPT2, "--dict", "d", "--output-dir", "o"]
    assert run(command.prepare_multiple_choice_main, [*base, "--train", "t"], capsys) == (
        0,
        "train 2 examples of 4 choices; 30 tokens -> o\n",
    )
    assert library.calls == [
        ("TokenWriter", ("gpt2",), {"encoder_json": "e.json", "vocab_bpe": "v.bpe"}),
        ("read_splits", ("jsonl", {"train": "t"}, None), {}),
        (
            "prepare_multiple_choice",
            (WRITER, "d", SPLITS, Path("o")),
            {
                "text_only": False,
                "max_positions": 512,
                "workers": 1,
                "force": False,
                "log": sys.stderr,
                "progress": False,
            },
        ),
    ]
    assert library.calls[2][1][2] is SPLITS
    library.calls.clear()
    argv = [*base, "--format", "commonsense_qa", "--test", "s", "--valid", "v", "--train", "t", "--max-positions"]
    assert (
        run(command.prepare_multiple_choice_main, [*argv, "9", "--workers", "2", "--force", "--progress"], capsys)[0]
        == 0
    )
    assert library.calls[1] == ("read_splits", ("commonsense_qa", {"train": "t", "valid": "v", "test": "s"}, None), {})
    assert list(library.calls[1][1][1]) == ["train", "valid", "test"]
    assert library.calls[2][2] == {
        "text_only": False,
        "max_positions": 9,
        "workers": 2,
        "force": True,
        "log": sys.stderr,
        "progress": True,
    }
    library.calls.clear()
    assert run(command.prepare_multiple_choice_main, [*base, "--format", "race", "--input-dir", "R"], capsys)[0] == 0
    assert library.calls[1] == ("read_splits", ("race", {}, "R"), {})


def test_prepare_multiple_choice_reports_what_it_made(library, capsys):
    library.returns["prepare_multiple_choice"] = ChoiceStats(
        examples={"train": 1, "valid": 3},
        num_choices=1,
        tokens=1,
        too_long=2,
        first_too_long="v.jsonl:4",
        commands=[["fairseq-preprocess", "a"], ["fairseq-preprocess", "b"]],
    )
    argv = [*GPT2, "--dict", "d", "--output-dir", "out", "--train", "t", "--max-positions", "50", "--text-only"]
    assert run(command.prepare_multiple_choice_main, argv, capsys) == (
        0,
        "train 1, valid 3 examples of 1 choice; 1 token -> out\n"
        "warning: 2 examples have a candidate longer than 50 tokens (first: v.jsonl:4); train with --shorten-method "
        "truncate (and --max-option-length) to cut them, or fairseq skips them in training and refuses them in "
        "validation\n"
        "now run:\n"
        "  fairseq-preprocess a\n"
        "  fairseq-preprocess b\n",
    )
    assert library.calls[2][2]["text_only"] is True
    library.returns["prepare_multiple_choice"] = ChoiceStats(
        examples={"test": 1}, num_choices=5, tokens=2, too_long=1, first_too_long="t:1", commands=[["not", "shown"]]
    )
    argv = [*GPT2, "--dict", "d", "--output-dir", "out", "--test", "t"]
    assert run(command.prepare_multiple_choice_main, argv, capsys) == (
        0,
        "test 1 examples of 5 choices; 2 tokens -> out\n"
        "warning: 1 example has a candidate longer than 512 tokens (first: t:1); train with --shorten-method "
        "truncate (and --max-option-length) to cut them, or fairseq skips them in training and refuses them in "
        "validation\n",
    )
