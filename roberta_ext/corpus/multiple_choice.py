"""``roberta-ext prepare-multiple-choice``: multiple-choice data (SWAG-style JSONL, CommonsenseQA,
RACE) -> the layout of ``--task roberta_ext_multiple_choice`` (fairseq's ``sentence_ranking``).

Three input formats, each read into :class:`ChoiceExample` s (a context, N choices, a label):

* ``jsonl`` — one ``{"context": str, "choices": [str, ...], "label": int}`` per line (SWAG and
  the like; ``label`` may be absent from every line of a test file);
* ``commonsense_qa`` — CommonsenseQA's JSONL: ``question.stem``, ``question.choices[].text``,
  ``answerKey`` (a letter); the context is ``"Q: " + stem`` and each choice ``"A: " + text``,
  the prefixes of fairseq's ``commonsense_qa`` task;
* ``race`` — the RACE folder (``train/``, ``dev/``, ``test/``, each with ``middle/`` and
  ``high/`` files of JSON with ``article``, ``questions``, ``options``, ``answers``), joined
  exactly as fairseq's ``examples/roberta/preprocess_RACE.py`` joins it: the article with its
  whitespace runs made one space; each choice the question with a ``_`` blank replaced by the
  option, or the question, a space and the option; then ``.strip()``-ed, as fairseq's BPE
  script strips each line. Splits ``train``, ``valid`` (dev), ``test`` (middle) and ``test1``
  (high), as ``preprocess_RACE.sh`` names them. Files are read in sorted order (fairseq's
  script takes ``os.listdir``'s, which depends on the file system).

The texts are GPT-2 BPE-encoded (:class:`~roberta_ext.corpus.tokenize.TokenWriter`, byte for byte
what fairseq's ``multiprocessing_bpe_encoder.py`` writes) and binarized by ``fairseq-preprocess``
with the pretrained model's ``dict.txt``::

    OUTPUT/input0/    dict.txt, {split}.bin/.idx     the contexts
    OUTPUT/input1/ ... OUTPUT/inputN/                 choice 1..N
    OUTPUT/label/     {split}.label                  the right choice, 0..N-1 (text)
    OUTPUT/text/      {split}.input0 ... .inputN     the BPE ids fairseq-preprocess read

Every example must have the same number of choices; a bad line (JSON, a missing field, a label
out of range, another number of choices) stops the run with its file and line. The output folder
appears whole or not at all (:class:`roberta_ext.corpus.preparation.Preparation`).
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from .._text import counted
from .binarize import PreprocessBatch
from .preparation import Preparation, check_dictionary, only_source, report_lines
from .reading import CorpusError, InputFile
from .tokenize import TokenWriter

__all__ = [
    "FORMATS",
    "RACE_SPLITS",
    "SPLITS",
    "ChoiceExample",
    "ChoiceStats",
    "prepare_multiple_choice",
    "read_commonsense_qa",
    "read_examples",
    "read_jsonl",
    "read_race",
    "read_splits",
]

FORMATS = ("jsonl", "commonsense_qa", "race")
SPLITS = ("train", "valid", "test")
RACE_SPLITS = {"train": "train", "valid": "dev", "test": "test-middle", "test1": "test-high"}
"""Our split -> the set type of fairseq's ``preprocess_RACE.py`` (and its ``.sh``'s naming)."""


@dataclass
class ChoiceExample:
    """One multiple-choice example."""

    context: str
    choices: list[str]
    label: int | None
    """The index of the right choice; ``None`` in a test file without answers."""
    where: str
    """``file:line`` (``file:question N`` for RACE) it was read from."""


def _lines(path: str | os.PathLike[str]) -> Iterator[tuple[str, Any]]:
    """``(file:line, parsed JSON)`` for each non-blank line of a JSONL file, read as bytes by
    :class:`~roberta_ext.corpus.reading.InputFile` (fairseq's line splitting) and decoded a line at a
    time, so that bytes that are not UTF-8 are named at the line they are on."""
    source = InputFile(path)
    try:
        for number, raw in enumerate(source.lines(), start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise CorpusError(f"{path}:{number}: not valid UTF-8 ({error.reason})") from None
            if not line.strip():
                continue
            try:
                yield f"{path}:{number}", json.loads(line)
            except ValueError as error:
                raise CorpusError(f"{path}:{number}: not valid JSON ({error})") from None
    finally:
        source.close()


def _check_choices(examples: list[ChoiceExample], path: str | os.PathLike[str]) -> list[ChoiceExample]:
    """The same number of choices everywhere, labels in range, all labelled or none."""
    if not examples:
        raise CorpusError(f"{path}: no example in the file")
    first = examples[0]
    for example in examples:
        if len(example.choices) != len(first.choices):
            raise CorpusError(
                f"{example.where}: {counted(len(example.choices), 'choice')}, but {first.where} has "
                f"{len(first.choices)}; "
                "every example needs the same number"
            )
        if example.label is not None and not 0 <= example.label < len(example.choices):
            raise CorpusError(
                f"{example.where}: label {example.label} is out of range for {counted(len(example.choices), 'choice')}"
            )
        if (example.label is None) != (first.label is None):
            raise CorpusError(f"{example.where}: some examples of {path} have a label, others not")
    if len(first.choices) < 2:
        raise CorpusError(f"{first.where}: {len(first.choices)} choice; multiple choice needs two or more")
    return examples


def read_jsonl(path: str | os.PathLike[str]) -> list[ChoiceExample]:
    """SWAG-style JSONL: ``{"context": str, "choices": [str, ...], "label": int}`` per line
    (``label`` left out on every line of a file without answers).

    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "train.jsonl")
    >>> _ = open(path, "w").write('{"context": "He cut", "choices": ["bread.", "the sky."], "label": 0}\\n')
    >>> read_jsonl(path)[0].choices
    ['bread.', 'the sky.']
    """
    examples = []
    for where, row in _lines(path):
        if not isinstance(row, dict):
            raise CorpusError(f"{where}: expected an object with context, choices and label")
        for name in ("context", "choices"):
            if name not in row:
                raise CorpusError(f"{where}: missing field {name!r}")
        context, choices, label = row["context"], row["choices"], row.get("label")
        if not isinstance(context, str):
            raise CorpusError(f"{where}: context must be a string, got {type(context).__name__}")
        if not isinstance(choices, list) or not all(isinstance(c, str) for c in choices):
            raise CorpusError(f"{where}: choices must be a list of strings")
        if label is not None and (isinstance(label, bool) or not isinstance(label, int)):
            raise CorpusError(f"{where}: label must be the index of the right choice, got {label!r}")
        examples.append(ChoiceExample(context, choices, label, where))
    return _check_choices(examples, path)


def read_commonsense_qa(path: str | os.PathLike[str]) -> list[ChoiceExample]:
    """CommonsenseQA's JSONL, with the ``Q: ``/``A: `` prefixes of fairseq's ``commonsense_qa``
    task; the label is ``answerKey``'s letter (A = 0), left out where no line has one.

    >>> import tempfile, os, json
    >>> path = os.path.join(tempfile.mkdtemp(), "valid.jsonl")
    >>> row = {"answerKey": "B", "question": {"stem": "Sky?", "choices": [{"label": "A", "text": "red"},
    ...        {"label": "B", "text": "blue"}]}}
    >>> _ = open(path, "w").write(json.dumps(row) + "\\n")
    >>> example = read_commonsense_qa(path)[0]
    >>> example.context, example.choices, example.label
    ('Q: Sky?', ['A: red', 'A: blue'], 1)
    """
    examples = []
    for where, row in _lines(path):
        try:
            stem = row["question"]["stem"]
            texts = [choice["text"] for choice in row["question"]["choices"]]
        except KeyError as error:
            raise CorpusError(f"{where}: missing field {error}") from None
        except TypeError:
            raise CorpusError(
                f"{where}: expected {{'question': {{'stem': ..., 'choices': [{{'text': ...}}]}}}}"
            ) from None
        if not isinstance(stem, str) or not all(isinstance(t, str) for t in texts):
            raise CorpusError(f"{where}: the stem and the choices' texts must be strings")
        label = None
        if "answerKey" in row:
            key = row["answerKey"]
            if not isinstance(key, str) or len(key) != 1 or not "A" <= key <= "Z":
                raise CorpusError(f"{where}: answerKey must be a capital letter, got {key!r}")
            label = ord(key) - ord("A")
        examples.append(ChoiceExample("Q: " + stem, ["A: " + t for t in texts], label, where))
    return _check_choices(examples, path)


def read_race(input_dir: str | os.PathLike[str], set_type: str) -> list[ChoiceExample]:
    """The examples of one RACE set (``train``, ``dev``, ``test``; ``test-middle``,
    ``test-high`` for one level), joined as fairseq's ``preprocess_RACE.py`` joins them, each
    text then stripped as fairseq's BPE script strips it.

    >>> read_race("RACE", "dev")[0].choices[0]  # doctest: +SKIP
    'What did the writer do? She went to school.'
    """
    levels = ["middle", "high"]
    parts = set_type.split("-")
    if len(parts) == 2:
        set_type, levels = parts[0], [parts[1]]
    examples = []
    for level in levels:
        folder = Path(input_dir, set_type, level)
        if not folder.is_dir():
            raise CorpusError(f"{folder}: no such folder; a RACE folder has {{train,dev,test}}/{{middle,high}}/")
        for name in sorted(os.listdir(folder)):
            path = folder / name
            try:
                data = json.loads(path.read_text(encoding="utf-8"))
                answers, options, questions = data["answers"], data["options"], data["questions"]
                article = data["article"]
            except UnicodeDecodeError as error:
                raise CorpusError(f"{path}: not valid UTF-8 ({error.reason})") from None
            except ValueError as error:
                raise CorpusError(f"{path}: not valid JSON ({error})") from None
            except (KeyError, TypeError) as error:
                raise CorpusError(
                    f"{path}: missing field {error} (RACE files have article, questions, options, answers)"
                ) from None
            if not len(answers) == len(options) == len(questions):
                raise CorpusError(
                    f"{path}: {len(questions)} questions, {len(options)} option lists and {len(answers)} answers"
                )
            # preprocess_RACE.py: newlines, then every whitespace run, become one space.
            context = re.sub(r"\s+", " ", article.replace("\n", " "))
            for i, (answer, question) in enumerate(zip(answers, questions)):
                where = f"{path}:question {i + 1}"
                label = ord(answer) - ord("A") if isinstance(answer, str) and len(answer) == 1 else -1
                choices = []
                for option in options[i]:
                    # A question with a blank ("_") takes the option in its place.
                    joined = question.replace("_", option) if "_" in question else " ".join([question, option])
                    choices.append(re.sub(r"\s+", " ", joined).strip())
                if not 0 <= label < len(choices):
                    raise CorpusError(
                        f"{where}: answer {answer!r} is not the letter of one of {counted(len(choices), 'option')}"
                    )
                examples.append(ChoiceExample(context.strip(), choices, label, where))
    return _check_choices(examples, Path(input_dir, set_type))


def read_examples(format: str, path: str | os.PathLike[str]) -> list[ChoiceExample]:
    """The examples of a ``jsonl`` or ``commonsense_qa`` file (RACE: :func:`read_race`).

    >>> read_examples("jsonl", "swag/train.jsonl")[0].label  # doctest: +SKIP
    2
    """
    if format == "jsonl":
        return read_jsonl(path)
    if format == "commonsense_qa":
        return read_commonsense_qa(path)
    raise CorpusError(f"unknown format {format!r}; read files of {', '.join(FORMATS[:2])}, or a RACE folder")


@dataclass
class ChoiceStats:
    """What :func:`prepare_multiple_choice` did."""

    examples: dict[str, int] = field(default_factory=dict)
    """Examples per split."""
    num_choices: int = 0
    tokens: int = 0
    """BPE tokens written, over all columns and splits."""
    too_long: int = 0
    """Examples whose longest candidate (``<s> choice </s> </s> context </s>``) exceeds
    ``max_positions`` (``--shorten-method truncate`` cuts them, otherwise fairseq skips them)."""
    first_too_long: str | None = None
    commands: list[list[str]] = field(default_factory=list)
    """The fairseq-preprocess commands (run, or to run with ``text_only``)."""


def prepare_multiple_choice(
    writer: TokenWriter,
    dictionary: str | os.PathLike[str],
    splits: dict[str, list[ChoiceExample]],
    output_dir: str | os.PathLike[str],
    *,
    text_only: bool = False,
    max_positions: int = 512,
    workers: int = 1,
    force: bool = False,
    log: IO[str] | None = None,
    progress: bool = False,
) -> ChoiceStats:
    """Write ``--task roberta_ext_multiple_choice`` data from examples.

    ``splits`` maps fairseq's split names (``train``, ``valid``, ``test``, ``test1``, ...) to
    examples; every split needs the same number of choices. ``dictionary`` is the pretrained
    model's ``dict.txt``. Writes ``text/{split}.input{i}`` (BPE ids), ``label/{split}.label``
    and, unless ``text_only``, ``input0/`` ... ``inputN/`` through ``fairseq-preprocess``; all in
    a temporary folder that becomes ``output_dir`` at the end (an existing one is replaced only
    with ``force``). ``progress`` shows progress bars on stderr.

    >>> prepare_multiple_choice(TokenWriter("gpt2", encoder_json="encoder.json", vocab_bpe="vocab.bpe"),
    ...     "dict.txt", {"train": read_jsonl("train.jsonl")}, "mc-bin")  # doctest: +SKIP
    """
    if not splits:
        raise CorpusError("no split to prepare")
    dictionary = check_dictionary(dictionary)
    counts = {split: len(examples[0].choices) for split, examples in splits.items() if examples}
    if len(set(counts.values())) != 1 or len(counts) != len(splits):
        raise CorpusError(f"the splits must have examples with the same number of choices, got {counts}")
    why = (
        "prepare-multiple-choice binarizes with its fairseq-preprocess; use --text-only and run the "
        "printed fairseq-preprocess commands where fairseq is"
    )
    preparation = Preparation([output_dir], binarize=not text_only, why=why, force=force)
    stats = ChoiceStats(num_choices=next(iter(counts.values())))
    columns = [f"input{i}" for i in range(stats.num_choices + 1)]

    with preparation.building() as (building,):
        (building / "text").mkdir()
        (building / "label").mkdir()
        for split, examples in splits.items():
            _write_split(writer, examples, building, split, columns, max_positions, stats, progress)

        def commands(base: str) -> list[list[str]]:
            # test, test1, ...: one --testpref, which fairseq-preprocess numbers after the first
            groups = {"train": ["train"], "valid": ["valid"], "test": [s for s in splits if s.startswith("test")]}
            groups = {kind: [s for s in names if s in splits] for kind, names in groups.items()}
            return [
                only_source(
                    dictionary.resolve(),
                    {
                        kind: ",".join(f"{base}text/{s}.{column}" for s in names)
                        for kind, names in groups.items()
                        if names
                    },
                    f"{base}{column}",
                    workers,
                )
                for column in columns
            ]

        stats.commands = [["fairseq-preprocess", *command] for command in commands(f"{output_dir}/")]
        if not text_only:
            with tqdm(total=1, desc="binarize", disable=not progress, file=sys.stderr) as bar:
                # Paths relative to the folder being built.
                batch = PreprocessBatch("multiple choice", building, commands(""))
                report = preparation.binarize([batch])[batch.name]
                bar.update()
            if log is not None:  # "input1/valid: 100 sents, 812 tokens, 0.0% replaced (by <unk>)"
                for line in report_lines(report):
                    print(line, file=log)
    return stats


def _write_split(
    writer: TokenWriter,
    examples: list[ChoiceExample],
    building: Path,
    split: str,
    columns: list[str],
    max_positions: int,
    stats: ChoiceStats,
    progress: bool,
) -> None:
    """``text/{split}.input0`` (the contexts) ... ``.inputN`` (choice N), BPE-encoded, and
    ``label/{split}.label`` when the examples have labels."""
    outputs = [open(building / "text" / f"{split}.{column}", "w", encoding="utf-8") for column in columns]
    context_cache: dict[str, list[str]] = {}  # RACE repeats an article for each of its questions
    try:
        for example in tqdm(examples, desc=f"encode {split}", disable=not progress, file=sys.stderr):
            context = context_cache.get(example.context)
            if context is None:
                context = context_cache[example.context] = writer.tokens(example.context)
                if len(context_cache) > 10_000:
                    context_cache.clear()
            choices = [writer.tokens(choice) for choice in example.choices]
            for out, tokens in zip(outputs, [context, *choices]):
                out.write(" ".join(tokens) + "\n")
            stats.tokens += len(context) + sum(len(c) for c in choices)
            if len(context) + max(len(c) for c in choices) + 4 > max_positions:
                stats.too_long += 1
                stats.first_too_long = stats.first_too_long or example.where
    finally:
        for out in outputs:
            out.close()
    if examples[0].label is not None:
        (building / "label" / f"{split}.label").write_text(
            "".join(f"{example.label}\n" for example in examples), encoding="utf-8"
        )
    stats.examples[split] = len(examples)


def _split_names(splits: Sequence[str]) -> None:
    tests = [s for s in splits if s.startswith("test")]
    expected = ["test"] + [f"test{i}" for i in range(1, len(tests))]
    if tests != expected[: len(tests)]:
        raise CorpusError(f"test splits must be named {', '.join(expected)} in that order, got {tests}")


def read_splits(
    format: str, files: dict[str, str | os.PathLike[str]], input_dir: str | os.PathLike[str] | None = None
) -> dict[str, list[ChoiceExample]]:
    """The examples of every split: RACE's from ``input_dir`` (:data:`RACE_SPLITS`), the other
    formats' from ``files`` (split -> file). ``train`` and ``valid`` need labels; test splits
    are named ``test``, ``test1``, ... in order.

    >>> read_splits("race", {}, "RACE")  # doctest: +SKIP
    """
    if format == "race":
        if input_dir is None or files:
            raise CorpusError("the race format reads a RACE folder (and no --train/--valid/--test files)")
        splits = {split: read_race(input_dir, set_type) for split, set_type in RACE_SPLITS.items()}
    else:
        if input_dir is not None or not files:
            raise CorpusError(f"the {format} format reads --train, --valid and/or --test files (not a folder)")
        splits = {split: read_examples(format, path) for split, path in files.items()}
        for split in ("train", "valid"):
            if split in splits and splits[split][0].label is None:
                raise CorpusError(f"{files[split]}: the {split} split needs labels")
    _split_names(list(splits))
    return splits
