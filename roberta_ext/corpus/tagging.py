"""``roberta-ext prepare-tagging``: token-classification (tagging) data from CoNLL-style files.

It reads ``word<TAB>label`` lines (or whitespace-separated columns: the first is the word, the
last the label; a blank line ends a sentence; CoNLL-2003's ``-DOCSTART-`` lines are skipped and
counted) and writes the layout of ``--task roberta_ext_token_classification`` (see
:mod:`roberta_ext.data.tagging`): ``input0/`` (sub-word tokens) and ``label/`` (one label per
sub-word: the word's label on its first sub-word, ``<pad>`` (:data:`IGNORE_LABEL`) on the others), binarized
by ``fairseq-preprocess`` — or, with ``--text-only``, the text files and the commands to
binarize them. Each word is tokenized on its own, the way the hub's ``tag()`` does it: a GPT-2
word after the first gets its leading space, a word with no token becomes ``<unk>``.

The output folder is built beside its final name and renamed into place only when everything
succeeded (:class:`roberta_ext.corpus.preparation.Preparation`); errors name the file and line.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tqdm import tqdm

from ..data.tagging import IGNORE_LABEL
from ..inference.inputs import word_pieces
from .binarize import PreprocessBatch
from .preparation import Preparation, check_dictionary, only_source, report_lines
from .reading import CorpusError, InputFile
from .tokenize import UNK, TokenWriter, join_tokens

__all__ = [
    "IGNORE_LABEL",
    "SPLITS",
    "TaggedSentence",
    "TagStats",
    "prepare_tagging",
    "read_conll",
]

FAIRSEQ_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
SPLITS = ("train", "valid", "test")


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
    source = InputFile(path)
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
                raise CorpusError(
                    f"{name}:{line_number}: the word {word!r} contains whitespace; the hub's tag() "
                    "splits sentences at whitespace, so words cannot hold any"
                )
            if len(label.split()) != 1 or label in FAIRSEQ_SPECIALS or label.startswith("madeupword"):
                raise CorpusError(
                    f"{name}:{line_number}: {label!r} cannot be a label (whitespace, or a name "
                    "fairseq's dictionaries reserve)"
                )
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
    progress: bool = False,
) -> TagStats:
    """Write ``--task roberta_ext_token_classification`` data from CoNLL-style files.

    ``splits`` maps split names (``train``, ``valid``, ``test``) to files; ``dictionary`` is the
    pretrained model's ``dict.txt``. Writes ``output_dir/text/{split}.input0``,
    ``{split}.label`` and ``label.dict.txt``; then (unless ``text_only``) ``output_dir/input0``
    and ``output_dir/label`` through ``fairseq-preprocess``. The labels are ordered by their
    count in ``train`` (then by name); labels seen only in other splits come last, with a
    warning. Everything is built in a temporary folder that becomes ``output_dir`` at the end;
    an existing ``output_dir`` is replaced only with ``force``. ``progress`` shows progress bars on stderr.

    >>> prepare_tagging(TokenWriter("wordpiece", model="vocab.txt"), "data-bin/dict.txt",
    ...                 {"train": "train.conll", "valid": "dev.conll"}, "ner-bin")  # doctest: +SKIP
    """
    if "train" not in splits:
        raise CorpusError("a train split is needed (it decides the label set)")
    unknown = sorted(set(splits) - set(SPLITS))
    if unknown:
        raise CorpusError(f"unknown splits {unknown}; use {', '.join(SPLITS)}")
    dictionary = check_dictionary(dictionary)
    why = (
        "prepare-tagging binarizes with its fairseq-preprocess; use --text-only and run the printed "
        "fairseq-preprocess commands where fairseq is"
    )
    preparation = Preparation([output_dir], binarize=not text_only, why=why, force=force)
    stats = TagStats()
    read = {}
    for split, path in splits.items():
        read[split], docstarts = read_conll(path)
        stats.docstarts += docstarts
        if not read[split]:
            raise CorpusError(f"{path}: no sentence in the file")
    counts = _label_counts(read, stats, log)

    with preparation.building() as (building,):
        text = building / "text"
        text.mkdir()
        label_dict = text / "label.dict.txt"
        label_dict.write_text("".join(f"{label} {counts[label]}\n" for label in stats.labels), encoding="utf-8")
        for split, sentences in read.items():
            _write_split(writer, sentences, text, split, max_positions, stats, progress)

        def commands(base: Path, dictionary: Path) -> list[list[str]]:  # fairseq-preprocess's arguments
            return [
                only_source(
                    srcdict,
                    {s: str(base / "text" / f"{s}.{column}") for s in SPLITS if s in splits},
                    base / column,
                    workers,
                )
                for column, srcdict in (("input0", dictionary), ("label", base / "text" / "label.dict.txt"))
            ]

        stats.commands = [["fairseq-preprocess", *command] for command in commands(Path(output_dir), dictionary)]
        if not text_only:
            columns = ("input0", "label")
            absolute = commands(building.resolve(), dictionary.resolve())  # run in another folder
            reports = preparation.binarize(
                [PreprocessBatch(column, building, [command]) for column, command in zip(columns, absolute)]
            )
            for column in columns:
                if log is not None:  # fairseq's "PATH: N sents, M tokens, X% replaced (by <unk>)" lines
                    for line in report_lines(reports[column]):
                        print(line, file=log)
                (building / column / "preprocess.log").unlink(missing_ok=True)  # it names the temporary folder
    return stats


def _label_counts(read: dict[str, list[TaggedSentence]], stats: TagStats, log: IO[str] | None) -> Counter[str]:
    """The count of each label in ``train``, the labels in ``stats.labels`` by count (then name);
    labels seen only in other splits come last, with count 0 and a warning on ``log``."""
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
    return counts


def _write_split(
    writer: TokenWriter,
    sentences: list[TaggedSentence],
    text: Path,
    split: str,
    max_positions: int,
    stats: TagStats,
    progress: bool,
) -> None:
    """``text/{split}.input0`` (the sub-word tokens) and ``text/{split}.label`` (a label per token)."""
    with (
        open(text / f"{split}.input0", "w", encoding="utf-8") as tokens_out,
        open(text / f"{split}.label", "w", encoding="utf-8") as labels_out,
    ):

        def count_empty(word: str, *, first: bool) -> list[str]:
            pieces = writer.word_tokens(word, first=first)
            stats.words_without_tokens += not pieces
            return pieces

        for sentence in tqdm(sentences, desc=f"tokenize {split}", disable=not progress, file=sys.stderr):
            # A word is labelled at its first sub-word: the rule the hub's tag() predicts
            # by (ModelInputs.encode_words), from the same function.
            tokens, firsts = word_pieces(sentence.words, count_empty, UNK)
            labels = [IGNORE_LABEL] * len(tokens)
            for first, label in zip(firsts, sentence.labels):
                labels[first] = label
            tokens_out.write(join_tokens(tokens, sentence.where) + "\n")
            labels_out.write(" ".join(labels) + "\n")
            stats.words += len(sentence.words)
            stats.tokens += len(tokens)
            if len(tokens) + 2 > max_positions:
                stats.too_long += 1
                stats.first_too_long = stats.first_too_long or sentence.where
    stats.sentences[split] = len(sentences)
