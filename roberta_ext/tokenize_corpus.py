"""Make ``fairseq-preprocess`` input for BERT and ALBERT: sub-word tokenization of text, and
token-classification (tagging) data from CoNLL-style files.

Two commands:

* ``roberta-ext tokenize --tokenizer {wordpiece,sentencepiece} --model VOCAB_OR_SPM --inputs ...
  --outputs ...`` writes each input line as its WordPiece (``vocab.txt``) or SentencePiece
  (``spiece.model``) tokens separated by single spaces — what ``fairseq-preprocess
  --only-source`` reads (GPT-2 BPE has ``roberta-ext bpe-encode``). Empty lines stay empty
  lines: they separate documents for ``--task sentence_pair_mlm``. The tokenizer's unknown
  token becomes fairseq's ``<unk>``; a line with text but no token (only control characters,
  say) is written as ``<unk>`` and counted, so that it never turns into a document break.
* ``roberta-ext prepare-tagging`` reads ``word<TAB>label`` lines (or whitespace-separated
  columns: the first is the word, the last the label; a blank line ends a sentence; CoNLL-2003's
  ``-DOCSTART-`` lines are skipped and counted) and writes the layout of ``--task
  token_classification`` (see :mod:`roberta_ext.fairseq_plugin.tagging`): ``input0/`` (sub-word
  tokens) and ``label/`` (one label per sub-word: the word's label on its first sub-word,
  ``<pad>`` on the others), binarized by ``fairseq-preprocess`` — or, with ``--text-only``, the
  text files and the commands to binarize them. Each word is tokenized on its own, the way the
  hub's ``tag()`` does it: a GPT-2 word after the first gets its leading space, a word with no
  token becomes ``<unk>``.

Both write their outputs under temporary names and move them into place only when everything
succeeded; errors name the file and line. The reading, atomic writing and process pool are
those of :mod:`roberta_ext.corpus` (``bpe-encode``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tqdm import tqdm

from .corpus import (
    CorpusError,
    _AtomicFiles,
    _Chunk,
    _decode_row,
    _InputFile,
    _OrderedRunner,
    _positive_int,
    _read_chunks,
    _run_command,
    _undecodable_error,
    _UndecodableLine,
)

__all__ = [
    "IGNORE_LABEL",
    "PIECE_TOKENIZERS",
    "TOKENIZERS",
    "TaggedSentence",
    "TagStats",
    "TokenizeStats",
    "TokenWriter",
    "prepare_tagging",
    "prepare_tagging_main",
    "read_conll",
    "tokenize_files",
    "tokenize_main",
]

TOKENIZERS = ("gpt2", "wordpiece", "sentencepiece")
PIECE_TOKENIZERS = ("wordpiece", "sentencepiece")
UNK = "<unk>"
"""fairseq's unknown symbol: what the tokenizers' own unknown tokens are written as."""
IGNORE_LABEL = "<pad>"
"""The label of sub-words that continue a word (fairseq's padding symbol; the loss ignores it).
The same constant as :data:`roberta_ext.fairseq_plugin.tagging.IGNORE_LABEL`, kept here so that
this module never imports fairseq."""
FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
SPLITS = ("train", "valid", "test")


class TokenWriter:
    """Text -> the tokens ``fairseq-preprocess`` reads, for one tokenizer.

    ``gpt2`` writes GPT-2 BPE ids (as RoBERTa's ``dict.txt`` lists them), ``wordpiece`` and
    ``sentencepiece`` their pieces. ``cased`` keeps the case (BERT's ``do_lower_case=False``).
    """

    def __init__(self, kind: str, *, model: str | None = None, encoder_json: str | None = None,
                 vocab_bpe: str | None = None, cased: bool = False) -> None:
        if kind not in TOKENIZERS:
            raise CorpusError(f"unknown tokenizer {kind!r}; choose one of {', '.join(TOKENIZERS)}")
        self.kind = kind
        self._args = (kind, model, encoder_json, vocab_bpe, cased)
        if kind == "gpt2":
            if not encoder_json or not vocab_bpe:
                raise CorpusError("the gpt2 tokenizer needs --encoder-json and --vocab-bpe")
            from .tokenizers.gpt2_bpe import GPT2BPE

            self._bpe = GPT2BPE.from_files(encoder_json, vocab_bpe)
            return
        if not model:
            raise CorpusError(f"the {kind} tokenizer needs --model (vocab.txt for wordpiece, spiece.model for "
                              "sentencepiece)")
        try:
            if kind == "wordpiece":
                from .tokenizers.wordpiece import WordPieceTokenizer

                self._pieces = WordPieceTokenizer.from_file(model, do_lower_case=not cased)
            else:
                from .tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer

                self._pieces = SentencePieceTokenizer.from_file(model, do_lower_case=not cased)
        except ValueError as error:  # the tokenizers' format errors name the file
            raise CorpusError(str(error)) from None
        self._unk = self._pieces.unk_token

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text``.

        >>> TokenWriter("wordpiece", model="vocab.txt").tokens("Unaffable!")  # doctest: +SKIP
        ['un', '##aff', '##able', '!']
        """
        if self.kind == "gpt2":
            return [str(i) for i in self._bpe.encode(text)]
        unk = self._unk
        return [UNK if piece == unk else piece for piece in self._pieces.tokenize(text)]

    def word_tokens(self, word: str, *, first: bool) -> list[str]:
        """The tokens of one word of a sentence, as the hub's ``tag()`` makes them: GPT-2 sees a
        word after the first with its leading space (as inside a sentence). May be empty (a word
        of control characters); the caller writes ``<unk>`` then, as ``tag()`` does."""
        return self.tokens(word if first or self.kind != "gpt2" else f" {word}")


def _make_writer(kind: str, model: str | None, encoder_json: str | None, vocab_bpe: str | None,
                 cased: bool) -> TokenWriter:
    return TokenWriter(kind, model=model, encoder_json=encoder_json, vocab_bpe=vocab_bpe, cased=cased)


def _check_tokens(tokens: list[str], where: str) -> str:
    """Tokens joined by spaces; fail if a token holds whitespace (fairseq would split it)."""
    line = " ".join(tokens)
    if len(line.split()) != len(tokens):
        bad = next(token for token in tokens if len(token.split()) != 1)
        raise CorpusError(f"{where}: the tokenizer produced the token {bad!r}, which fairseq would split at "
                          "its whitespace")
    return line


# ------------------------------------------------------------------------------------ tokenize


@dataclass
class TokenizeStats:
    """What :func:`tokenize_files` did."""

    lines: int = 0
    """Lines read, over all inputs."""
    empty: int = 0
    """Lines that were empty after ``strip()`` (written as empty lines)."""
    tokens: int = 0
    """Tokens written."""
    unknown: int = 0
    """Tokens written as ``<unk>``."""
    no_tokens: int = 0
    """Lines with text but no token, written as ``<unk>``."""
    first_without_tokens: str | None = None
    """``file:line`` of the first such line."""


def _tokenize_chunk(writer: TokenWriter, chunk: _Chunk) -> tuple[bytes, TokenizeStats]:
    stats = TokenizeStats()
    out: list[str] = []
    for offset, raw in enumerate(chunk.columns[0]):
        line_number = chunk.first_line + offset
        text = _decode_row((raw,), line_number)[0]
        stats.lines += 1
        if not text:
            stats.empty += 1
            out.append("")
            continue
        tokens = writer.tokens(text)
        if not tokens:
            stats.no_tokens += 1
            if stats.first_without_tokens is None:
                stats.first_without_tokens = str(line_number)
            tokens = [UNK]
        stats.tokens += len(tokens)
        stats.unknown += tokens.count(UNK)
        out.append(_check_tokens(tokens, f"line {line_number}"))
    return "".join(f"{line}\n" for line in out).encode("utf-8"), stats


def tokenize_files(
    writer: TokenWriter,
    inputs: Sequence[str | os.PathLike[str]],
    outputs: Sequence[str | os.PathLike[str]],
    *,
    workers: int = 1,
    progress: bool = False,
) -> TokenizeStats:
    """Tokenize each input into its output, a line of space-separated tokens per input line.

    Lines are read as ``bpe-encode`` reads them (UTF-8, universal newlines, ``strip()``); empty
    lines stay empty. Outputs appear under their names only when every input was tokenized.

    >>> writer = TokenWriter("sentencepiece", model="spiece.model")  # doctest: +SKIP
    >>> tokenize_files(writer, ["train.txt"], ["train.tok"]).lines  # doctest: +SKIP
    120000
    """
    if len(inputs) != len(outputs):
        raise CorpusError(f"number of input and output paths should match: {len(inputs)} inputs, "
                          f"{len(outputs)} outputs")
    if not inputs:
        raise CorpusError("no inputs given")
    names = [str(path) for path in outputs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise CorpusError(f"output path given more than once: {', '.join(duplicates)}")
    overlap = sorted({os.path.realpath(p) for p in inputs} & {os.path.realpath(p) for p in outputs})
    if overlap:
        raise CorpusError(f"an output would overwrite an input: {', '.join(overlap)}")
    if workers < 1:
        raise CorpusError(f"workers must be >= 1, got {workers}")
    total = TokenizeStats()
    sources = [_InputFile(path) for path in inputs]  # fail now if one is missing
    try:
        sizes = [source.size for source in sources]
        with _AtomicFiles() as atomic, _OrderedRunner(workers, _make_writer, writer._args,
                                                      local_state=writer) as runner:
            with tqdm(total=None if None in sizes else sum(sizes), desc="tokenize", unit="B", unit_scale=True,
                      unit_divisor=1024, disable=not progress, file=sys.stderr, dynamic_ncols=True) as bar:
                for source, output in zip(sources, outputs):
                    with open(atomic.temporary(output), "wb") as handle:
                        try:
                            for chunk, (text, stats) in runner.map(_tokenize_chunk, _read_chunks([source])):
                                handle.write(text)
                                bar.update(chunk.nbytes)
                                if stats.first_without_tokens and total.first_without_tokens is None:
                                    total.first_without_tokens = f"{source.name}:{stats.first_without_tokens}"
                                for name in ("lines", "empty", "tokens", "unknown", "no_tokens"):
                                    setattr(total, name, getattr(total, name) + getattr(stats, name))
                        except _UndecodableLine as error:
                            raise _undecodable_error([source], error) from None
                        except CorpusError as error:  # "line N: ..." from a chunk: name the file
                            raise CorpusError(f"{source.name}:{str(error).removeprefix('line ')}") from None
            atomic.commit()
    finally:
        for source in sources:
            source.close()
    return total


def tokenize_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext tokenize``: WordPiece or SentencePiece tokens per line, for fairseq-preprocess.

    >>> tokenize_main(["--tokenizer", "wordpiece", "--model", "vocab.txt",
    ...                "--inputs", "train.txt", "--outputs", "train.tok"])  # doctest: +SKIP
    0
    """
    prog = "roberta-ext tokenize"
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Tokenize text files with BERT's WordPiece (vocab.txt) or ALBERT's SentencePiece (spiece.model): "
            "one output line of space-separated tokens per input line, the input of fairseq-preprocess "
            "--only-source. Empty lines are kept (they separate documents for --task sentence_pair_mlm); "
            "unknown tokens are written as fairseq's <unk>. Outputs appear only when the whole run succeeded."
        ),
        epilog=(
            "example: roberta-ext tokenize --tokenizer wordpiece --model vocab.txt --inputs train.txt valid.txt "
            "--outputs train.tok valid.tok; then fairseq-preprocess --only-source --trainpref train.tok "
            "--validpref valid.tok --destdir data-bin"
        ),
    )
    parser.add_argument("--tokenizer", required=True, choices=PIECE_TOKENIZERS,
                        help="wordpiece (BERT, --model vocab.txt) or sentencepiece (ALBERT, --model spiece.model)")
    parser.add_argument("--model", required=True, metavar="FILE", help="vocab.txt or spiece.model")
    parser.add_argument("--cased", action="store_true", help="keep the case (default: lowercase, as uncased models)")
    parser.add_argument("--inputs", nargs="+", required=True, metavar="FILE",
                        help="text files to tokenize, each on its own: SEPARATE files, which may have any "
                             "numbers of lines (unlike 'roberta-ext bpe-encode', whose --inputs are parallel "
                             "columns of one corpus, as in fairseq)")
    parser.add_argument("--outputs", nargs="+", required=True, metavar="FILE",
                        help="one output per input, in the same order")
    parser.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                        help="processes that tokenize; 1 runs in this process (default: 1)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when stderr is a terminal)")
    args = parser.parse_args(argv)
    if len(args.inputs) != len(args.outputs):
        parser.error(f"number of input and output paths should match: {len(args.inputs)} inputs, "
                     f"{len(args.outputs)} outputs")
    progress = sys.stderr.isatty() if args.progress is None else args.progress

    def body() -> int:
        writer = TokenWriter(args.tokenizer, model=args.model, cased=args.cased)
        stats = tokenize_files(writer, args.inputs, args.outputs, workers=args.workers, progress=progress)
        message = (f"tokenized {stats.lines} lines ({stats.empty} empty) into {stats.tokens} tokens, "
                   f"{stats.unknown} of them <unk>")
        if stats.no_tokens:
            message += (f"; {stats.no_tokens} lines had text but no token and were written as <unk> "
                        f"(first: {stats.first_without_tokens})")
        print(message, file=sys.stderr)
        return 0

    return _run_command(prog, body)


# ------------------------------------------------------------------------------ prepare-tagging


@dataclass
class TaggedSentence:
    """One sentence of a CoNLL-style file."""

    words: list[str]
    labels: list[str]
    where: str
    """``file:line`` of its first word."""


def read_conll(path: str | os.PathLike[str]) -> tuple[list[TaggedSentence], int]:
    """Sentences of a ``word<TAB>label`` file (or whitespace-separated columns: first = word,
    last = label), blank lines between sentences; returns them and the number of
    ``-DOCSTART-`` lines skipped.

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "train.conll")
    >>> _ = open(path, "w").write("-DOCSTART- O\\n\\nAda\\tB-PER\\nsang\\tO\\n\\nHi NN O\\n")
    >>> sentences, skipped = read_conll(path)
    >>> [(s.words, s.labels) for s in sentences], skipped
    ([(['Ada', 'sang'], ['B-PER', 'O']), (['Hi'], ['O'])], 1)
    """
    name = str(path)
    sentences: list[TaggedSentence] = []
    docstarts = 0
    words: list[str] = []
    labels: list[str] = []
    start = 0
    source = _InputFile(path)
    try:
        for line_number, raw in enumerate(source.lines(), start=1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise CorpusError(f"{name}:{line_number}: not valid UTF-8 ({error.reason})") from None
            if not line.strip():
                if words:
                    sentences.append(TaggedSentence(words, labels, f"{name}:{start}"))
                    words, labels = [], []
                continue
            fields = line.split("\t") if "\t" in line else line.split()
            fields = [f.strip() for f in fields]
            if fields[0] == "-DOCSTART-":
                docstarts += 1
                continue
            if len(fields) < 2 or not fields[0] or not fields[-1]:
                raise CorpusError(f"{name}:{line_number}: expected 'word<TAB>label', got {line!r}")
            word, label = fields[0], fields[-1]
            if len(word.split()) != 1:
                raise CorpusError(f"{name}:{line_number}: the word {word!r} contains whitespace; the hub's tag() "
                                  "splits sentences at whitespace, so words cannot hold any")
            if len(label.split()) != 1 or label in FAIRSEQ_SPECIALS or label.startswith("madeupword"):
                raise CorpusError(f"{name}:{line_number}: {label!r} cannot be a label (whitespace, or a name "
                                  "fairseq's dictionaries reserve)")
            if not words:
                start = line_number
            words.append(word)
            labels.append(label)
        if words:
            sentences.append(TaggedSentence(words, labels, f"{name}:{start}"))
    finally:
        source.close()
    return sentences, docstarts


@dataclass
class TagStats:
    """What :func:`prepare_tagging` did."""

    sentences: dict[str, int] = field(default_factory=dict)
    """Sentences per split."""
    words: int = 0
    tokens: int = 0
    docstarts: int = 0
    """``-DOCSTART-`` lines skipped."""
    words_without_tokens: int = 0
    """Words the tokenizer gave no token for, written as one ``<unk>``."""
    too_long: int = 0
    """Sentences longer than ``max_positions`` with ``<s>`` and ``</s>`` (fairseq will refuse them)."""
    first_too_long: str | None = None
    labels: list[str] = field(default_factory=list)
    """The labels, in the order of ``label/dict.txt`` (head output k is labels[k])."""
    commands: list[list[str]] = field(default_factory=list)
    """The fairseq-preprocess commands (run, or to run with ``text_only``)."""


def _find_preprocess() -> str:
    here = Path(sys.executable).parent / "fairseq-preprocess"
    found = str(here) if here.is_file() else shutil.which("fairseq-preprocess")
    if found is None:
        raise CorpusError("fairseq-preprocess not found (is fairseq installed?); use --text-only and run the "
                          "printed commands where fairseq is")
    return found


def prepare_tagging(
    writer: TokenWriter,
    dictionary: str | os.PathLike[str],
    splits: dict[str, str | os.PathLike[str]],
    output_dir: str | os.PathLike[str],
    *,
    text_only: bool = False,
    max_positions: int = 512,
    workers: int = 1,
    force: bool = False,
    log: IO[str] | None = None,
) -> TagStats:
    """Write ``--task token_classification`` data from CoNLL-style files.

    ``splits`` maps split names (``train``, ``valid``, ``test``) to files; ``dictionary`` is the
    pretrained model's ``dict.txt``. Writes ``output_dir/text/{split}.input0``,
    ``{split}.label`` and ``label.dict.txt``; then (unless ``text_only``) ``output_dir/input0``
    and ``output_dir/label`` through ``fairseq-preprocess``. The labels are ordered by their
    count in ``train`` (then by name); labels seen only in other splits come last, with a
    warning. Everything is built in a temporary folder that becomes ``output_dir`` at the end;
    an existing ``output_dir`` is replaced only with ``force``.

    >>> prepare_tagging(TokenWriter("wordpiece", model="vocab.txt"), "data-bin/dict.txt",
    ...                 {"train": "train.conll", "valid": "dev.conll"}, "ner-bin")  # doctest: +SKIP
    """
    if "train" not in splits:
        raise CorpusError("a train split is needed (it decides the label set)")
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown:
        raise CorpusError(f"unknown splits {unknown}; use {', '.join(SPLITS)}")
    if not Path(dictionary).is_file():
        raise FileNotFoundError(2, "dictionary (the pretrained model's dict.txt) not found", str(dictionary))
    output_dir = Path(output_dir)
    if output_dir.exists() and not force and (not output_dir.is_dir() or any(output_dir.iterdir())):
        raise CorpusError(f"refusing to overwrite {output_dir} (use --force)")
    preprocess = None if text_only else _find_preprocess()
    stats = TagStats()
    read = {}
    for split, path in splits.items():
        read[split], docstarts = read_conll(path)
        stats.docstarts += docstarts
        if not read[split]:
            raise CorpusError(f"{path}: no sentence in the file")

    counts = Counter(label for sentence in read["train"] for label in sentence.labels)
    stats.labels = sorted(counts, key=lambda label: (-counts[label], label))
    for split in SPLITS[1:]:
        for sentence in read.get(split, []):
            for label in sentence.labels:
                if label not in counts:
                    counts[label] = 0
                    stats.labels.append(label)
                    if log is not None:
                        print(f"warning: label {label!r} ({sentence.where}) does not occur in train", file=log)

    output_dir.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(dir=output_dir.parent, prefix=f".{output_dir.name}."))
    try:
        text = building / "text"
        text.mkdir()
        label_dict = text / "label.dict.txt"
        label_dict.write_text("".join(f"{label} {counts[label]}\n" for label in stats.labels), encoding="utf-8")
        for split, sentences in read.items():
            with open(text / f"{split}.input0", "w", encoding="utf-8") as tokens_out, \
                    open(text / f"{split}.label", "w", encoding="utf-8") as labels_out:
                for sentence in tqdm(sentences, desc=f"tokenize {split}", disable=log is None or not log.isatty(),
                                     file=sys.stderr):
                    tokens: list[str] = []
                    labels: list[str] = []
                    for i, (word, label) in enumerate(zip(sentence.words, sentence.labels)):
                        pieces = writer.word_tokens(word, first=i == 0)
                        if not pieces:
                            stats.words_without_tokens += 1
                            pieces = [UNK]
                        tokens.extend(pieces)
                        labels.extend([label] + [IGNORE_LABEL] * (len(pieces) - 1))
                    tokens_out.write(_check_tokens(tokens, sentence.where) + "\n")
                    labels_out.write(" ".join(labels) + "\n")
                    stats.words += len(sentence.words)
                    stats.tokens += len(tokens)
                    if len(tokens) + 2 > max_positions:
                        stats.too_long += 1
                        stats.first_too_long = stats.first_too_long or sentence.where
            stats.sentences[split] = len(sentences)

        def commands(base: Path) -> list[list[str]]:
            result = []
            for column, srcdict in (("input0", Path(dictionary)), ("label", base / "text" / "label.dict.txt")):
                command = [preprocess or "fairseq-preprocess", "--only-source", "--srcdict", str(srcdict)]
                for split in (s for s in SPLITS if s in splits):
                    command += [f"--{split}pref", str(base / "text" / f"{split}.{column}")]
                result.append(command + ["--destdir", str(base / column), "--workers", str(workers)])
            return result

        stats.commands = commands(output_dir)
        if preprocess is not None:
            for command, column in zip(commands(building), ("input0", "label")):
                result = subprocess.run(command, capture_output=True, text=True)
                if result.returncode != 0:
                    raise CorpusError(f"fairseq-preprocess failed for {column} ({result.returncode}):\n"
                                      f"{result.stderr[-3000:]}")
                if log is not None:  # its "N sents, M tokens, X% replaced (by <unk>)" lines
                    for line in (result.stdout + result.stderr).splitlines():
                        if "replaced" in line and ": " in line:
                            path, report = line.split("] ", 1)[-1].rsplit(": ", 1)
                            print(f"{column}/{Path(path).stem}: {report}", file=log)
                (building / column / "preprocess.log").unlink(missing_ok=True)  # it names the temporary folder
        if output_dir.exists():
            shutil.rmtree(output_dir)
        os.replace(building, output_dir)
    finally:
        if building.exists():
            shutil.rmtree(building, ignore_errors=True)
    return stats


def prepare_tagging_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext prepare-tagging``: CoNLL-style files -> ``--task token_classification`` data.

    >>> prepare_tagging_main(["--tokenizer", "wordpiece", "--model", "vocab.txt", "--dict", "bin/dict.txt",
    ...                       "--train", "train.conll", "--valid", "dev.conll", "--output-dir", "ner-bin"])  # doctest: +SKIP
    0
    """
    prog = "roberta-ext prepare-tagging"
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Make token-classification data for fairseq-train --task token_classification from files of "
            "'word<TAB>label' lines (or whitespace-separated columns: first = word, last = label), a blank line "
            "between sentences. Each word is tokenized on its own; its label goes on its first sub-word and "
            "<pad> (ignored) on the others. Writes OUTPUT/input0 and OUTPUT/label (binarized by "
            "fairseq-preprocess) and their text in OUTPUT/text."
        ),
        epilog=(
            "example: roberta-ext prepare-tagging --tokenizer wordpiece --model vocab.txt --dict data-bin/dict.txt "
            "--train train.conll --valid dev.conll --output-dir ner-bin; then fairseq-train ner-bin --user-dir "
            "roberta_ext --task token_classification --criterion token_classification --arch bert_ext_base "
            "--restore-file pretrained.pt ..."
        ),
    )
    parser.add_argument("--tokenizer", required=True, choices=TOKENIZERS,
                        help="gpt2 (RoBERTa: --encoder-json, --vocab-bpe), wordpiece (BERT: --model vocab.txt) or "
                             "sentencepiece (ALBERT: --model spiece.model)")
    parser.add_argument("--model", metavar="FILE", help="vocab.txt or spiece.model")
    parser.add_argument("--encoder-json", metavar="FILE", help="GPT-2 encoder.json")
    parser.add_argument("--vocab-bpe", metavar="FILE", help="GPT-2 vocab.bpe")
    parser.add_argument("--cased", action="store_true", help="keep the case (default: lowercase, as uncased models)")
    parser.add_argument("--dict", required=True, metavar="FILE", help="the pretrained model's dict.txt")
    for split in SPLITS:
        parser.add_argument(f"--{split}", metavar="FILE", required=split == "train", help=f"the {split} split")
    parser.add_argument("--output-dir", required=True, type=Path, metavar="DIR", help="folder to write")
    parser.add_argument("--text-only", action="store_true",
                        help="write the text files only, and print the fairseq-preprocess commands")
    parser.add_argument("--max-positions", type=_positive_int, default=512, metavar="N",
                        help="warn about sentences longer than this, <s> and </s> included (default: 512)")
    parser.add_argument("--workers", type=_positive_int, default=1, metavar="N",
                        help="fairseq-preprocess workers (default: 1)")
    parser.add_argument("--force", action="store_true", help="replace an existing --output-dir")
    args = parser.parse_args(argv)

    def body() -> int:
        writer = TokenWriter(args.tokenizer, model=args.model, encoder_json=args.encoder_json,
                             vocab_bpe=args.vocab_bpe, cased=args.cased)
        splits = {split: getattr(args, split) for split in SPLITS if getattr(args, split)}
        stats = prepare_tagging(writer, args.dict, splits, args.output_dir, text_only=args.text_only,
                                max_positions=args.max_positions, workers=args.workers, force=args.force,
                                log=sys.stderr)
        counts = ", ".join(f"{split} {n}" for split, n in stats.sentences.items())
        print(f"{counts} sentences; {stats.words} words -> {stats.tokens} tokens; {len(stats.labels)} labels: "
              f"{' '.join(stats.labels[:20])}{' ...' if len(stats.labels) > 20 else ''}", file=sys.stderr)
        if stats.docstarts:
            print(f"skipped {stats.docstarts} -DOCSTART- lines", file=sys.stderr)
        if stats.words_without_tokens:
            print(f"{stats.words_without_tokens} words had no token and were written as <unk>", file=sys.stderr)
        if stats.too_long:
            print(f"warning: {stats.too_long} sentences are longer than {args.max_positions} tokens (first: "
                  f"{stats.first_too_long}); fairseq-train refuses them unless "
                  "--skip-invalid-size-inputs-valid-test", file=sys.stderr)
        if args.text_only:
            print("now run:", file=sys.stderr)
            for command in stats.commands:
                print("  " + " ".join(command), file=sys.stderr)
        return 0

    return _run_command(prog, body)
