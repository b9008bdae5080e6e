"""Multiple choice (roberta_ext/corpus/multiple_choice.py and ``roberta-ext prepare-multiple-choice``):
reading SWAG-style JSONL, CommonsenseQA and RACE, and what it writes.

* Part by part, fast: RACE's reading against fairseq's own ``examples/roberta/preprocess_RACE.py``
  (its ``get_examples``, run in this process), the JSONL and CommonsenseQA readers, the checks of
  choices and labels, the full text of every message naming file and line, the splits, and what
  ``prepare_multiple_choice`` writes (exact bytes, with the small BPE of ``tests/bpe_fixtures.py``),
  the commands it returns, its ``ChoiceStats`` and that a failure leaves nothing; fairseq-preprocess
  is replaced there by a stand-in that records what it is asked.
* RACE against fairseq's own scripts, on a made-up RACE folder (newlines, tabs and runs of spaces
  in articles, questions with a ``_`` blank and without, options with odd spacing, non-ASCII
  text): the examples equal the text files of ``preprocess_RACE.py``; the whole output equals,
  byte for byte, what ``preprocess_RACE.py`` then ``preprocess_RACE.sh`` write (BPE with
  ``multiprocessing_bpe_encoder.py``, ``fairseq-preprocess``), run as README.race.md says, with a
  ``wget`` stand-in that copies the test's BPE files and ``os.listdir`` sorted (fairseq's script
  takes the file system's order; ours is sorted). This one takes minutes.
* The command: errors name the file and line (bad JSON, a missing field, a label out of range,
  another number of choices); nothing is left behind on failure, an existing folder is kept without
  ``--force``; ``--text-only`` (no fairseq) writes the BPE ids, the labels and the fairseq-preprocess
  commands.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import random
import re
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roberta_ext.cli.corpus import prepare_multiple_choice_main
from roberta_ext.corpus import CorpusError, preparation
from roberta_ext.corpus.binarize import PreprocessBatch
from roberta_ext.corpus.multiple_choice import (
    FORMATS,
    RACE_SPLITS,
    SPLITS,
    ChoiceExample,
    ChoiceStats,
    _check_choices,
    _split_names,
    prepare_multiple_choice,
    read_commonsense_qa,
    read_examples,
    read_jsonl,
    read_race,
    read_splits,
)
from roberta_ext.corpus.tokenize import TokenWriter
from roberta_ext.tokenizers import GPT2BPE
from tests import forkserver
from tests.peers import needs, require_installed

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")

BIN = Path(sys.executable).parent
needs_fairseq = needs("fairseq", "prepare-multiple-choice binarizes with fairseq-preprocess")

WORDS = ["the", "girl", "teacher", "school", "river", "garden", "went", "saw", "happy", "old", "with", "and"]
ODD = ["café", "naïve", "’quoted’", "東京", "😀", "Straße", "\u00a0nbsp", "tab\there", "two  spaces"]


def text(rng: random.Random, words: int) -> str:
    picked = [rng.choice(WORDS + ODD if rng.random() < 0.2 else WORDS) for _ in range(words)]
    return " ".join(picked)


def write_race(root: Path, seed: int = 0) -> Path:
    """A RACE folder: {train,dev,test}/{middle,high}/N.txt, each a JSON article with questions."""
    rng = random.Random(seed)
    for set_type in ("train", "dev", "test"):
        for level in ("middle", "high"):
            folder = root / set_type / level
            folder.mkdir(parents=True)
            for number in (1, 2, 10):
                article = f"  {text(rng, 12)}.\n\n{text(rng, 9)}\t{text(rng, 5)}.  \r\n{text(rng, 4)}  "
                questions, options, answers = [], [], []
                for _ in range(rng.randint(1, 3)):
                    blank = rng.random() < 0.5
                    questions.append(f"The {text(rng, 3)} _ {text(rng, 2)}." if blank else f"What did {text(rng, 3)}?")
                    options.append([f" {text(rng, rng.randint(1, 4))}  " for _ in range(4)])
                    answers.append("ABCD"[rng.randrange(4)])
                record = {"answers": answers, "options": options, "questions": questions, "article": article}
                record["id"] = f"{level}{number}.txt"
                path = folder / f"{number}.txt"
                path.write_text(json.dumps(record, ensure_ascii=number != 2), encoding="utf-8")
    return root


def fairseq_examples() -> Path:
    spec = require_installed("fairseq", "the reference is fairseq's own RACE scripts")
    return Path(next(iter(spec.submodule_search_locations or []))) / "examples"


def run_preprocess_race_py(race: Path, extracted: Path) -> None:
    """fairseq's ``preprocess_RACE.py --input-dir race --output-dir extracted``, files sorted."""
    script = fairseq_examples() / "roberta" / "preprocess_RACE.py"
    program = (
        "import os, runpy, sys\n"
        "listdir = os.listdir\n"
        "os.listdir = lambda path='.': sorted(listdir(path))  # the file system's order, made reproducible\n"
        f"sys.argv = ['preprocess_RACE.py', '--input-dir', {str(race)!r}, '--output-dir', {str(extracted)!r}]\n"
        f"runpy.run_path({str(script)!r}, run_name='__main__')\n"
    )
    result = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def binarized_tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but fairseq-preprocess's logs and our text/, by relative path."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "preprocess.log" and path.relative_to(folder).parts[0] != "text"
    }


def bpe_args(bpe_files) -> list[str]:
    return ["--encoder-json", str(bpe_files.encoder_json), "--vocab-bpe", str(bpe_files.vocab_bpe)]


def raises(message: str):
    return pytest.raises(CorpusError, match=re.escape(message) + "$")


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def jsonl(path: Path, *rows: object) -> Path:
    return write(path, "".join((row if isinstance(row, str) else json.dumps(row)) + "\n" for row in rows))


def row(context: str = "He cut the", choices: tuple[str, ...] = ("bread.", "sky."), **extra: object) -> dict:
    return {"context": context, "choices": list(choices), **extra}


def example(where: str, label: int | None = 0, choices: int = 2, context: str = "c") -> ChoiceExample:
    return ChoiceExample(context, [f"{context} {i}" for i in range(choices)], label, where)


def fields(examples: list[ChoiceExample]) -> list[tuple]:
    return [(e.context, e.choices, e.label, e.where) for e in examples]


def test_public_constants():
    assert FORMATS == ("jsonl", "commonsense_qa", "race")
    assert SPLITS == ("train", "valid", "test")
    assert RACE_SPLITS == {"train": "train", "valid": "dev", "test": "test-middle", "test1": "test-high"}


# --------------------------------------------------------------------------------------------- RACE


@pytest.fixture(scope="module")
def race(tmp_path_factory) -> Path:
    return write_race(tmp_path_factory.mktemp("mc") / "RACE", seed=3)


@pytest.fixture(scope="module")
def get_examples():
    """fairseq's ``preprocess_RACE.get_examples``, with ``os.listdir`` sorted (it takes the file system's order)."""
    script = runpy.run_path(str(fairseq_examples() / "roberta" / "preprocess_RACE.py"))

    def sorted_examples(data_dir, set_type):
        listdir = os.listdir
        os.listdir = lambda path=".": sorted(listdir(path))
        try:
            return script["get_examples"](str(data_dir), set_type)
        finally:
            os.listdir = listdir

    return sorted_examples


@pytest.mark.parametrize("set_type", ["train", "dev", "test", "test-middle", "test-high", "dev-high"])
def test_race_examples_equal_fairseqs_get_examples(race, get_examples, set_type):
    theirs = get_examples(race, set_type)
    ours = read_race(race, set_type)
    assert len(ours) == len(theirs) > 3
    for mine, their in zip(ours, theirs):
        assert mine.context == their.paragraph.strip()
        assert mine.choices == [choice.strip() for choice in their.qa_list]
        assert mine.label == their.label


def test_race_reads_levels_middle_then_high_files_sorted_questions_numbered(race):
    levels = {"train": ["middle", "high"], "test-high": ["high"], "dev-middle": ["middle"]}
    for set_type, names in levels.items():
        folder = set_type.split("-")[0]
        expected = [
            f"{race / folder / level / name}:question {i + 1}"
            for level in names
            for name in ["1.txt", "10.txt", "2.txt"]
            for i in range(len(json.loads((race / folder / level / name).read_text(encoding="utf-8"))["answers"]))
        ]
        assert [e.where for e in read_race(race, set_type)] == expected


def race_file(root: Path, record: object, set_type: str = "dev", level: str = "middle", name: str = "1.txt") -> Path:
    data = record if isinstance(record, bytes | str) else json.dumps(record)
    return write(root / set_type / level / name, data)


RECORD = {
    "article": "  One\n\ntwo\tthree   four.\r\n ",
    "questions": ["The girl _ home.", "  Where  did\tshe go? ", "_ and _"],
    "options": [["went", " ran ", "sat", "was"], ["home", "to  school", " out", "in"], ["a", "b", "c", "d"]],
    "answers": ["A", "D", "B"],
}


def test_race_joins_blanks_and_questions_and_strips(tmp_path):
    race_file(tmp_path, RECORD, level="high")
    (tmp_path / "dev" / "middle").mkdir()
    where = tmp_path / "dev" / "high" / "1.txt"
    assert fields(read_race(tmp_path, "dev")) == [
        (
            "One two three four.",
            ["The girl went home.", "The girl ran home.", "The girl sat home.", "The girl was home."],
            0,
            f"{where}:question 1",
        ),
        (
            "One two three four.",
            ["Where did she go? home", "Where did she go? to school", "Where did she go? out", "Where did she go? in"],
            3,
            f"{where}:question 2",
        ),
        ("One two three four.", ["a and a", "b and b", "c and c", "d and d"], 1, f"{where}:question 3"),
    ]


def test_race_takes_every_option_and_the_last_letter(tmp_path):
    record = {"article": "A.", "questions": ["Q?"], "options": [["a", "b", "c", "d", "e"]], "answers": ["E"]}
    race_file(tmp_path, record, "train", "middle")
    (tmp_path / "train" / "high").mkdir()
    (only,) = read_race(tmp_path, "train")
    assert (only.choices, only.label) == (["Q? a", "Q? b", "Q? c", "Q? d", "Q? e"], 4)


@pytest.mark.parametrize(
    ("answer", "shown"), [("E", "'E'"), ("@", "'@'"), ("AB", "'AB'"), ("", "''"), (0, "0"), (None, "None")]
)
def test_race_answer_that_is_no_options_letter_is_refused(tmp_path, answer, shown):
    path = race_file(tmp_path, {**RECORD, "answers": ["A", answer, "B"]})
    with raises(f"{path}:question 2: answer {shown} is not the letter of one of 4 options"):
        read_race(tmp_path, "dev-middle")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b'{"article": "caf\xe9"}', "not valid UTF-8 (invalid continuation byte)"),
        (
            b'{"article": "a",}',
            "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 17 (char 16))",
        ),
        (b"", "not valid JSON (Expecting value: line 1 column 1 (char 0))"),
    ],
)
def test_race_unreadable_file_is_named(tmp_path, content, reason):
    path = race_file(tmp_path, content)
    with raises(f"{path}: {reason}"):
        read_race(tmp_path, "dev-middle")


@pytest.mark.parametrize("missing", ["answers", "options", "questions", "article"])
def test_race_missing_field_is_named(tmp_path, missing):
    path = race_file(tmp_path, {k: v for k, v in RECORD.items() if k != missing})
    with raises(f"{path}: missing field '{missing}' (RACE files have article, questions, options, answers)"):
        read_race(tmp_path, "dev-middle")


def test_race_file_that_is_no_object_is_refused(tmp_path):
    path = race_file(tmp_path, ["article"])
    message = "missing field list indices must be integers or slices, not str"
    with raises(f"{path}: {message} (RACE files have article, questions, options, answers)"):
        read_race(tmp_path, "dev-middle")


@pytest.mark.parametrize(
    ("lengths", "counts"),
    [
        ((2, 3, 3), "3 questions, 3 option lists and 2 answers"),
        ((3, 2, 3), "3 questions, 2 option lists and 3 answers"),
        ((3, 3, 2), "2 questions, 3 option lists and 3 answers"),
    ],
)
def test_race_questions_options_and_answers_must_pair_up(tmp_path, lengths, counts):
    record = {**RECORD, **{k: RECORD[k][:n] for k, n in zip(("answers", "options", "questions"), lengths)}}
    path = race_file(tmp_path, record)
    with raises(f"{path}: {counts}"):
        read_race(tmp_path, "dev-middle")


def test_race_missing_level_folder_and_empty_set_are_named(tmp_path):
    race_file(tmp_path, RECORD)
    with raises(f"{tmp_path / 'dev' / 'high'}: no such folder; a RACE folder has {{train,dev,test}}/{{middle,high}}/"):
        read_race(tmp_path, "dev")
    (tmp_path / "test" / "high").mkdir(parents=True)
    with raises(f"{tmp_path / 'test'}: no example in the file"):
        read_race(tmp_path, "test-high")


def test_race_every_question_needs_the_same_number_of_options(tmp_path):
    race_file(tmp_path, RECORD)
    path = race_file(tmp_path, {**RECORD, "options": [["a", "b", "c"]] * 3, "answers": ["C"] * 3}, name="2.txt")
    with raises(
        f"{path}:question 1: 3 choices, but {tmp_path / 'dev/middle/1.txt'}:question 1 has 4; every example "
        "needs the same number"
    ):
        read_race(tmp_path, "dev-middle")


def test_race_examples_equal_preprocess_race_py(tmp_path):
    race = write_race(tmp_path / "RACE")
    run_preprocess_race_py(race, tmp_path / "extracted")
    for split, set_type in RACE_SPLITS.items():
        examples = read_race(race, set_type)
        columns = [
            (tmp_path / "extracted" / f"{set_type}.input{i}").read_text(encoding="utf-8").split("\n")[:-1]
            for i in range(5)
        ]
        labels = (tmp_path / "extracted" / f"{set_type}.label").read_text().split()
        assert len(examples) == len(labels) > 3, split
        for row, example in enumerate(examples):
            # fairseq's BPE script strips each line; the rest is the script's joining.
            assert example.context == columns[0][row].strip()
            assert example.choices == [columns[i][row].strip() for i in range(1, 5)]
            assert example.label == int(labels[row])
    blanks = [c for s in RACE_SPLITS.values() for e in read_race(race, s) for c in e.choices if "The " in c]
    assert blanks and not any("_" in choice for choice in blanks)  # the option took the blank's place
    assert read_race(race, "train")[0].where.endswith("middle/1.txt:question 1")


@needs_fairseq
def test_race_output_byte_identical_to_fairseqs_scripts(tmp_path, bpe_files):
    race = write_race(tmp_path / "RACE")
    extracted, script_out = tmp_path / "extracted", tmp_path / "script-bin"
    run_preprocess_race_py(race, extracted)

    examples = fairseq_examples()
    script = examples / "roberta" / "preprocess_RACE.sh"
    runnable = tmp_path / "preprocess_RACE.sh"
    # The installed copy has CRLF line ends, which bash refuses; its 10 workers per step only cost
    # time on this machine's 2 cores (the output does not depend on them).
    runnable.write_bytes(script.read_bytes().replace(b"\r\n", b"\n").replace(b"--workers 10", b"--workers 1"))
    stand_ins = tmp_path / "stand-ins"
    stand_ins.mkdir()
    (stand_ins / "examples").symlink_to(examples)
    wget = stand_ins / "wget"
    wget.write_text(
        "#!/bin/sh\n# `wget -N URL`: copy the file the URL names from $RACE_TEST_BPE_DIR instead\n"
        'for arg; do case "$arg" in -*) ;; *) cp "$RACE_TEST_BPE_DIR/${arg##*/}" . ;; esac; done\n'
    )
    wget.chmod(0o755)
    # fairseq-preprocess and `python -m examples...` from the tests' fork server (tests/forkserver.py),
    # which starting puts its socket in os.environ
    shims = forkserver.shim_dir()
    env = {
        **os.environ,
        "PATH": os.pathsep.join((str(stand_ins), str(shims), str(BIN), os.environ["PATH"])),
        "PYTHONPATH": str(stand_ins),
        "RACE_TEST_BPE_DIR": str(bpe_files.dict_txt.parent),
        "LC_ALL": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
    }
    work = tmp_path / "work"
    work.mkdir()
    result = subprocess.run(
        ["bash", str(runnable), str(extracted), str(script_out)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    ours = tmp_path / "RACE-bin"
    args = ["--format", "race", "--input-dir", str(race), *bpe_args(bpe_files), "--dict", str(bpe_files.dict_txt)]
    assert prepare_multiple_choice_main([*args, "--output-dir", str(ours), "--workers", "2"]) == 0
    theirs, mine = binarized_tree(script_out), binarized_tree(ours)
    assert sorted(mine) == sorted(theirs)
    assert {"input0/test1.bin", "input4/valid.idx", "label/test1.label", "input2/dict.txt"} <= set(theirs)
    for name in theirs:
        assert mine[name] == theirs[name], f"{name} differs"


def test_race_errors_name_the_file(tmp_path):
    race = write_race(tmp_path / "RACE")
    path = race / "dev" / "high" / "2.txt"
    record = json.loads(path.read_text(encoding="utf-8"))
    record["answers"][0] = "E"
    path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"dev/high/2.txt:question 1: answer 'E' is not the letter of one of 4"):
        read_race(race, "dev")
    record["answers"][0] = "A"
    record["options"][0] = record["options"][0][:3]
    path.write_text(json.dumps(record), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"dev/high/2.txt:question 1: 3 choices, but .*middle/1.txt:question 1 has 4"):
        read_race(race, "dev")
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(CorpusError, match=r"dev/high/2.txt: not valid JSON"):
        read_race(race, "dev")
    path.write_text(json.dumps({"article": "a", "questions": []}), encoding="utf-8")
    with pytest.raises(CorpusError, match=r"dev/high/2.txt: missing field 'answers'"):
        read_race(race, "dev")
    with pytest.raises(CorpusError, match=r"RACE/valid/middle: no such folder"):
        read_race(race, "valid")


# -------------------------------------------------------------------------------------------- JSONL


def test_jsonl_reads_every_field_and_skips_blank_lines(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", row(" A\nB ", ("x", "y"), label=1), "", "  \t", row("C", ("z", "w"), label=0))
    assert fields(read_jsonl(path)) == [(" A\nB ", ["x", "y"], 1, f"{path}:1"), ("C", ["z", "w"], 0, f"{path}:4")]


def test_jsonl_without_labels_and_with_null_labels(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", row(), row(label=None))
    assert [e.label for e in read_jsonl(path)] == [None, None]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"context": "a", "choices": ["b", "c"]',
            "not valid JSON (Expecting ',' delimiter: line 2 column 1 (char 39))",
        ),
        ("[1, 2]", "expected an object with context, choices and label"),
        ('"text"', "expected an object with context, choices and label"),
        ('{"choices": ["b", "c"]}', "missing field 'context'"),
        ('{"context": "a"}', "missing field 'choices'"),
        ('{"context": 3, "choices": ["b", "c"]}', "context must be a string, got int"),
        ('{"context": null, "choices": ["b", "c"]}', "context must be a string, got NoneType"),
        ('{"context": "a", "choices": "bc"}', "choices must be a list of strings"),
        ('{"context": "a", "choices": ["b", 3]}', "choices must be a list of strings"),
        (
            '{"context": "a", "choices": ["b", "c"], "label": "1"}',
            "label must be the index of the right choice, got '1'",
        ),
        (
            '{"context": "a", "choices": ["b", "c"], "label": 1.0}',
            "label must be the index of the right choice, got 1.0",
        ),
        (
            '{"context": "a", "choices": ["b", "c"], "label": true}',
            "label must be the index of the right choice, got True",
        ),
        (
            '{"context": "a", "choices": ["b", "c"], "label": false}',
            "label must be the index of the right choice, got False",
        ),
    ],
)
def test_jsonl_bad_line_is_named_with_its_number(tmp_path, line, message):
    path = jsonl(tmp_path / "train.jsonl", row(label=0), "", line)
    with raises(f"{path}:3: {message}"):
        read_jsonl(path)


@pytest.mark.parametrize(
    ("lines", "number"),
    [
        ([b'{"context": "\xff"}'], 1),
        ([json.dumps(row(label=0)).encode()] * 2 + [b'{"context": "caf\xc3"}'], 3),
        ([json.dumps(row(label=0)).encode()] * 400 + [b"", b'{"context": "\xe2\x82"}'], 402),
    ],
)
def test_jsonl_bytes_that_are_not_utf8_are_named_with_their_line(tmp_path, lines, number):
    path = write(tmp_path / "train.jsonl", b"".join(line + b"\n" for line in lines))
    reason = "invalid start byte" if number == 1 else "invalid continuation byte"
    with raises(f"{path}:{number}: not valid UTF-8 ({reason})"):
        read_jsonl(path)


def test_read_examples_picks_the_reader_by_format(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", row(label=1))
    assert fields(read_examples("jsonl", path)) == fields(read_jsonl(path))
    cqa = jsonl(tmp_path / "cqa.jsonl", {"question": {"stem": "S", "choices": [{"text": "a"}, {"text": "b"}]}})
    assert fields(read_examples("commonsense_qa", cqa)) == [("Q: S", ["A: a", "A: b"], None, f"{cqa}:1")]
    with raises("unknown format 'race'; read files of jsonl, commonsense_qa, or a RACE folder"):
        read_examples("race", path)


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


GOOD = json.dumps({"context": "He cut the", "choices": ["bread.", "sky.", "river.", "song."], "label": 0})


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            '{"context": "a", "choices": ["b", "c", "d", "e"], "label": 4}',
            "train.jsonl:3: label 4 is out of range for 4",
        ),
        (  # -1 often marks an unlabelled row: it is no choice's index (issue 26: a check of `>= len` alone passed it)
            '{"context": "a", "choices": ["b", "c", "d", "e"], "label": -1}',
            "train.jsonl:3: label -1 is out of range for 4",
        ),
        ('{"context": "a", "choices": ["b", "c"], "label": 1}', "train.jsonl:3: 2 choices, but .*train.jsonl:1 has 4"),
        ('{"context": "a", "choices": ["b", "c", "d", "e"]', "train.jsonl:3: not valid JSON"),
        ('{"choices": ["b", "c", "d", "e"], "label": 0}', "train.jsonl:3: missing field 'context'"),
        ('{"context": "a", "choices": ["b", "c", "d", 5], "label": 0}', "train.jsonl:3: choices must be a list of str"),
        ('{"context": "a", "choices": ["b", "c", "d", "e"], "label": "B"}', "train.jsonl:3: label must be the index"),
        ('{"context": "a", "choices": ["b", "c", "d", "e"], "label": true}', "train.jsonl:3: label must be the index"),
        ('{"context": "a", "choices": ["b", "c", "d", "e"]}', "train.jsonl:3: some examples of .* have a label"),
        ('["a", "b"]', "train.jsonl:3: expected an object"),
    ],
)
def test_jsonl_errors_name_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "train.jsonl", [GOOD, "", line])  # a blank line is skipped, and counted
    with pytest.raises(CorpusError, match=message):
        read_jsonl(path)


def test_jsonl_and_commonsense_qa_read(tmp_path):
    path = write_lines(tmp_path / "test.jsonl", [json.dumps({"context": " A\nB ", "choices": ["x", "y"]})] * 2)
    examples = read_jsonl(path)
    assert [(e.context, e.choices, e.label, e.where) for e in examples][1] == (" A\nB ", ["x", "y"], None, f"{path}:2")
    cqa = {"answerKey": "C", "question": {"stem": "Where?", "choices": [{"label": k, "text": k * 2} for k in "ABCDE"]}}
    path = write_lines(tmp_path / "cqa.jsonl", [json.dumps(cqa)])
    (example,) = read_commonsense_qa(path)
    assert (example.context, example.choices[:2], example.label) == ("Q: Where?", ["A: AA", "A: BB"], 2)
    for broken, message in [
        ({**cqa, "answerKey": "c"}, "cqa.jsonl:1: answerKey must be a capital letter"),
        ({**cqa, "answerKey": "F"}, "cqa.jsonl:1: label 5 is out of range for 5 choices"),
        ({"question": {"choices": []}}, "cqa.jsonl:1: missing field 'stem'"),
        ({"question": "Where?"}, "cqa.jsonl:1: expected"),
    ]:
        write_lines(path, [json.dumps(broken)])
        with pytest.raises(CorpusError, match=message):
            read_commonsense_qa(path)


# ------------------------------------------------------------------------------- choices and labels


@pytest.mark.parametrize("label", [0, 1, 2, None])
def test_check_choices_accepts_labels_in_range_or_none_and_returns_the_examples(label):
    examples = [example("f:1", label, 3), example("f:2", label, 3)]
    assert _check_choices(examples, "f") is examples


@pytest.mark.parametrize("label", [-1, 3, 4, -4])
def test_check_choices_refuses_a_label_that_is_no_choices_index(label):
    with raises(f"f:2: label {label} is out of range for 3 choices"):
        _check_choices([example("f:1", 0, 3), example("f:2", label, 3)], "f")


@pytest.mark.parametrize(("first", "second"), [(0, None), (None, 0)])
def test_check_choices_refuses_labels_on_some_examples_only(first, second):
    with raises("f:3: some examples of path/f have a label, others not"):
        _check_choices([example("f:1", first), example("f:2", first), example("f:3", second)], Path("path/f"))


@pytest.mark.parametrize("choices", [1, 3])
def test_check_choices_refuses_another_number_of_choices(choices):
    noun = "choice" if choices == 1 else "choices"
    with raises(f"f:2: {choices} {noun}, but f:1 has 2; every example needs the same number"):
        _check_choices([example("f:1"), example("f:2", 0, choices), example("f:3")], "f")


@pytest.mark.parametrize(("choices", "label"), [(1, 0), (1, None), (0, None)])
def test_check_choices_needs_two_choices_or_more(choices, label):
    with raises(f"f:1: {choices} choice; multiple choice needs two or more"):
        _check_choices([example("f:1", label, choices), example("f:2", label, choices)], "f")


def test_check_choices_refuses_no_examples():
    with raises("some/f.jsonl: no example in the file"):
        _check_choices([], Path("some/f.jsonl"))


# ------------------------------------------------------------------------------------ CommonsenseQA


def cqa_row(key: object = "B", stem: object = "Where?", texts: tuple = ("here", "there", "nowhere")) -> dict:
    choices = [{"label": chr(ord("A") + i), "text": text} for i, text in enumerate(texts)]
    return {"answerKey": key, "id": "x", "question": {"question_concept": "c", "choices": choices, "stem": stem}}


def test_commonsense_qa_prefixes_and_letters(tmp_path):
    letters = [chr(ord("A") + i) for i in range(26)]
    path = jsonl(tmp_path / "cqa.jsonl", cqa_row("A"), "", cqa_row("C"))
    assert fields(read_commonsense_qa(path)) == [
        ("Q: Where?", ["A: here", "A: there", "A: nowhere"], 0, f"{path}:1"),
        ("Q: Where?", ["A: here", "A: there", "A: nowhere"], 2, f"{path}:3"),
    ]
    jsonl(path, cqa_row("Z", texts=tuple(letters)))
    assert read_commonsense_qa(path)[0].label == 25
    no_key = {k: v for k, v in cqa_row().items() if k != "answerKey"}
    jsonl(path, no_key, no_key)
    assert [e.label for e in read_commonsense_qa(path)] == [None, None]


@pytest.mark.parametrize(
    ("reader", "labelled", "unlabelled"),
    [
        (read_jsonl, row(label=0), row()),
        (read_commonsense_qa, cqa_row(), {k: v for k, v in cqa_row().items() if k != "answerKey"}),
    ],
)
def test_readers_name_the_file_without_examples_or_with_some_labels_only(tmp_path, reader, labelled, unlabelled):
    path = write(tmp_path / "f.jsonl", "\n  \n")
    with raises(f"{path}: no example in the file"):
        reader(path)
    jsonl(path, labelled, unlabelled)
    with raises(f"{path}:2: some examples of {path} have a label, others not"):
        reader(path)
    jsonl(path, unlabelled, labelled)
    with raises(f"{path}:2: some examples of {path} have a label, others not"):
        reader(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (cqa_row("a"), "answerKey must be a capital letter, got 'a'"),
        (cqa_row("@"), "answerKey must be a capital letter, got '@'"),
        (cqa_row("["), "answerKey must be a capital letter, got '['"),
        (cqa_row("AB"), "answerKey must be a capital letter, got 'AB'"),
        (cqa_row(""), "answerKey must be a capital letter, got ''"),
        (cqa_row(1), "answerKey must be a capital letter, got 1"),
        (cqa_row(None), "answerKey must be a capital letter, got None"),
        (cqa_row("D"), "label 3 is out of range for 3 choices"),
        (cqa_row(stem=3), "the stem and the choices' texts must be strings"),
        (cqa_row(texts=("a", None, "c")), "the stem and the choices' texts must be strings"),
        ({"answerKey": "A"}, "missing field 'question'"),
        ({"question": {"choices": []}}, "missing field 'stem'"),
        ({"question": {"stem": "S"}}, "missing field 'choices'"),
        ({"question": {"stem": "S", "choices": [{"label": "A"}]}}, "missing field 'text'"),
        ({"question": "Where?"}, "expected {'question': {'stem': ..., 'choices': [{'text': ...}]}}"),
        (["question"], "expected {'question': {'stem': ..., 'choices': [{'text': ...}]}}"),
        (
            {"question": {"stem": "S", "choices": ["a"]}},
            "expected {'question': {'stem': ..., 'choices': [{'text': ...}]}}",
        ),
        ({"question": {"stem": "S", "choices": 3}}, "expected {'question': {'stem': ..., 'choices': [{'text': ...}]}}"),
        ("{", "not valid JSON (Expecting property name enclosed in double quotes: line 2 column 1 (char 2))"),
    ],
)
def test_commonsense_qa_bad_line_is_named_with_its_number(tmp_path, line, message):
    path = jsonl(tmp_path / "cqa.jsonl", cqa_row(), line)
    with raises(f"{path}:2: {message}"):
        read_commonsense_qa(path)


# ------------------------------------------------------------------------------------------- splits


@pytest.mark.parametrize(
    "names", [[], ["train", "valid"], ["test"], ["train", "test", "test1", "test2"], ["valid", "test", "train"]]
)
def test_split_names_accepts_test_test1_in_order(names):
    assert _split_names(names) is None


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["test1"], "test splits must be named test in that order, got ['test1']"),
        (["train", "test", "test2"], "test splits must be named test, test1 in that order, got ['test', 'test2']"),
        (["test1", "test"], "test splits must be named test, test1 in that order, got ['test1', 'test']"),
        (["test", "test0"], "test splits must be named test, test1 in that order, got ['test', 'test0']"),
        (["testing"], "test splits must be named test in that order, got ['testing']"),
        (
            ["test", "test1", "valid", "test3"],
            "test splits must be named test, test1, test2 in that order, got ['test', 'test1', 'test3']",
        ),
    ],
)
def test_split_names_refuses_other_test_names(names, message):
    with raises(message):
        _split_names(names)


def test_read_splits_of_race_are_its_four_sets(race):
    splits = read_splits("race", {}, race)
    assert list(splits) == ["train", "valid", "test", "test1"]
    for split, set_type in RACE_SPLITS.items():
        assert fields(splits[split]) == fields(read_race(race, set_type))


@pytest.mark.parametrize(("files", "folder"), [({}, None), ({"train": "t.jsonl"}, "RACE")])
def test_read_splits_of_race_needs_a_folder_and_no_files(files, folder):
    with raises("the race format reads a RACE folder (and no --train/--valid/--test files)"):
        read_splits("race", files, folder)


@pytest.mark.parametrize("format", ["jsonl", "commonsense_qa"])
@pytest.mark.parametrize(("files", "folder"), [({}, None), ({"train": "t.jsonl"}, "RACE"), ({}, "RACE")])
def test_read_splits_of_files_needs_files_and_no_folder(format, files, folder):
    with raises(f"the {format} format reads --train, --valid and/or --test files (not a folder)"):
        read_splits(format, files, folder)


def test_read_splits_reads_each_file_in_the_given_order(tmp_path):
    train = jsonl(tmp_path / "train.jsonl", row(label=0), row(label=1))
    test = jsonl(tmp_path / "test.jsonl", row())
    valid = jsonl(tmp_path / "valid.jsonl", row(label=1))
    splits = read_splits("jsonl", {"test": test, "train": train, "valid": valid})
    assert list(splits) == ["test", "train", "valid"]
    assert {split: fields(examples) for split, examples in splits.items()} == {
        "test": fields(read_jsonl(test)),
        "train": fields(read_jsonl(train)),
        "valid": fields(read_jsonl(valid)),
    }
    cqa = jsonl(tmp_path / "cqa.jsonl", cqa_row())
    assert fields(read_splits("commonsense_qa", {"train": cqa})["train"]) == fields(read_commonsense_qa(cqa))


@pytest.mark.parametrize("split", ["train", "valid"])
def test_read_splits_train_and_valid_need_labels(tmp_path, split):
    unlabelled = jsonl(tmp_path / "u.jsonl", row())
    with raises(f"{unlabelled}: the {split} split needs labels"):
        read_splits("jsonl", {"test": unlabelled, split: unlabelled})


def test_read_splits_checks_the_test_names(tmp_path):
    path = jsonl(tmp_path / "t.jsonl", row())
    with raises("test splits must be named test in that order, got ['test1']"):
        read_splits("jsonl", {"test1": path})
    assert list(read_splits("jsonl", {"test": path, "test1": path})) == ["test", "test1"]


# ---------------------------------------------------------------------------------------- preparing


@pytest.fixture(scope="module")
def writer(bpe_files) -> TokenWriter:
    return TokenWriter("gpt2", encoder_json=str(bpe_files.encoder_json), vocab_bpe=str(bpe_files.vocab_bpe))


@pytest.fixture(scope="module")
def bpe(bpe_files) -> GPT2BPE:
    return GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)


def ids(bpe: GPT2BPE, text: str) -> str:
    return " ".join(str(i) for i in bpe.encode(text))


TRAIN = [
    ChoiceExample("The sun is hot.", ["It is hot.", "It is cold.", "No."], 0, "train.jsonl:1"),
    ChoiceExample("Rivers run to the sea, every one of them.", ["Yes.", "They do not.", "Maybe so."], 2, "train:2"),
    ChoiceExample("The sun is hot.", ["Cold.", "Hot, it is very hot today.", "Dark."], 1, "train.jsonl:3"),
]
VALID = [ChoiceExample("Café?", ["naïve 東京", "x", "y"], 1, "valid.jsonl:1")]
TEST = [ChoiceExample("Test.", ["a", "b", "c"], None, "test.jsonl:1")]
TEST1 = [ChoiceExample("Test one.", ["d", "e", "f"], None, "test1.jsonl:1")]


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def expected_text(bpe: GPT2BPE, examples: list[ChoiceExample], column: int) -> bytes:
    texts = [e.context if column == 0 else e.choices[column - 1] for e in examples]
    return "".join(ids(bpe, text) + "\n" for text in texts).encode()


def test_text_only_writes_the_bpe_ids_and_labels_of_every_split(tmp_path, bpe_files, writer, bpe, capsys):
    splits = {"train": TRAIN, "valid": VALID, "test": TEST, "test1": TEST1}
    out = tmp_path / "mc"
    stats = prepare_multiple_choice(writer, bpe_files.dict_txt, splits, out, text_only=True)
    expected = {
        f"text/{s}.input{i}": expected_text(bpe, examples, i) for s, examples in splits.items() for i in range(4)
    }
    expected |= {"label/train.label": b"0\n2\n1\n", "label/valid.label": b"1\n"}
    assert tree(out) == dict(sorted(expected.items()))
    assert sorted(p.name for p in out.iterdir()) == ["label", "text"]
    assert capsys.readouterr() == ("", "")
    texts = [text for examples in splits.values() for e in examples for text in [e.context, *e.choices]]
    assert stats == ChoiceStats(
        examples={"train": 3, "valid": 1, "test": 1, "test1": 1},
        num_choices=3,
        tokens=sum(len(bpe.encode(text)) for text in texts),
        too_long=0,
        first_too_long=None,
        commands=stats.commands,
    )


def every_split_commands(out: Path, dictionary: str, workers: int) -> list[list[str]]:
    """fairseq-preprocess's command for each of the four columns of train, valid, test and test1."""
    return [
        [
            "fairseq-preprocess",
            "--only-source",
            "--srcdict",
            dictionary,
            "--trainpref",
            f"{out}/text/train.input{i}",
            "--validpref",
            f"{out}/text/valid.input{i}",
            "--testpref",
            f"{out}/text/test.input{i},{out}/text/test1.input{i}",
            "--destdir",
            f"{out}/input{i}",
            "--workers",
            str(workers),
        ]
        for i in range(4)
    ]


def test_commands_binarize_every_column_with_the_tests_numbered(tmp_path, bpe_files, writer):
    splits = {"test": TEST, "train": TRAIN, "test1": TEST1, "valid": VALID}
    out = tmp_path / "mc"
    stats = prepare_multiple_choice(writer, bpe_files.dict_txt, splits, out, text_only=True, workers=3)
    dictionary = str(bpe_files.dict_txt.resolve())
    assert stats.commands == every_split_commands(out, dictionary, workers=3)


def test_commands_of_a_test_split_alone(tmp_path, bpe_files, writer, monkeypatch):
    monkeypatch.chdir(bpe_files.dict_txt.parent)
    stats = prepare_multiple_choice(writer, bpe_files.dict_txt.name, {"test": TEST}, tmp_path / "o", text_only=True)
    dictionary = str(bpe_files.dict_txt.resolve())
    assert stats.commands == [
        [
            "fairseq-preprocess",
            "--only-source",
            "--srcdict",
            dictionary,
            "--testpref",
            f"{tmp_path}/o/text/test.input{i}",
            "--destdir",
            f"{tmp_path}/o/input{i}",
            "--workers",
            "1",
        ]
        for i in range(4)
    ]
    assert tree(tmp_path / "o") == {f"text/test.input{i}": expected_text(writer._bpe, TEST, i) for i in range(4)}
    assert (tmp_path / "o" / "label").is_dir()


def test_commands_of_train_and_valid_without_tests(tmp_path, bpe_files, writer):
    out = tmp_path / "o"
    stats = prepare_multiple_choice(writer, bpe_files.dict_txt, {"valid": VALID, "train": TRAIN}, out, text_only=True)
    assert stats.commands[1] == [
        "fairseq-preprocess",
        "--only-source",
        "--srcdict",
        str(bpe_files.dict_txt.resolve()),
        "--trainpref",
        f"{out}/text/train.input1",
        "--validpref",
        f"{out}/text/valid.input1",
        "--destdir",
        f"{out}/input1",
        "--workers",
        "1",
    ]


def lengths(bpe: GPT2BPE, example: ChoiceExample) -> int:
    """``<s> choice </s> </s> context </s>`` of its longest choice."""
    return len(bpe.encode(example.context)) + max(len(bpe.encode(c)) for c in example.choices) + 4


def test_too_long_counts_examples_whose_longest_candidate_exceeds_max_positions(tmp_path, bpe_files, writer, bpe):
    sizes = [lengths(bpe, e) for e in TRAIN]
    assert sizes[0] < sizes[2] < sizes[1]
    cases = [
        (sizes[1], 0, None),
        (sizes[1] - 1, 1, "train:2"),
        (sizes[2] - 1, 2, "train:2"),
        (sizes[0] - 1, 3, "train.jsonl:1"),
    ]
    for number, (max_positions, too_long, first) in enumerate(cases):
        stats = prepare_multiple_choice(
            writer,
            bpe_files.dict_txt,
            {"train": TRAIN},
            tmp_path / str(number),
            text_only=True,
            max_positions=max_positions,
        )
        assert (stats.too_long, stats.first_too_long) == (too_long, first), max_positions
    default = prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": TRAIN}, tmp_path / "d", text_only=True)
    assert (default.too_long, default.first_too_long) == (0, None)
    examples = [ChoiceExample("Some context.", ["y", " x" * n], 0, f"long:{n}") for n in range(490, 510)]
    longest = {lengths(bpe, e): e.where for e in examples}
    assert {512, 513} <= set(longest)
    pair = [e for e in examples if e.where in (longest[512], longest[513])]
    stats = prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": pair}, tmp_path / "l", text_only=True)
    assert (stats.too_long, stats.first_too_long) == (1, longest[513])


def test_a_repeated_context_is_written_for_each_example(tmp_path, bpe_files, writer, bpe):
    examples = [ChoiceExample(f"Article {i % 3}.", ["a", "b"], i % 2, f"f:{i}") for i in range(7)]
    stats = prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": examples}, tmp_path / "o", text_only=True)
    assert (tmp_path / "o" / "text" / "train.input0").read_bytes() == expected_text(bpe, examples, 0)
    assert stats.tokens == 7 * (len(bpe.encode("Article 0.")) + 2)


class FakePreprocess:
    """Records the batch and the text files it was asked to binarize; answers with fairseq's lines."""

    def __init__(self, report: list[str]) -> None:
        self.report = report
        self.batches: list[PreprocessBatch] = []
        self.seen: dict[str, bytes] = {}

    def __call__(self, batches):
        self.batches.extend(batches)
        for batch in batches:
            self.seen = tree(Path(batch.cwd))
            for command in batch.commands:
                (Path(batch.cwd) / command[command.index("--destdir") + 1]).mkdir()
        return {batch.name: self.report for batch in batches}


def test_binarizes_in_the_folder_being_built_and_logs_fairseqs_counts(tmp_path, bpe_files, writer, monkeypatch, capsys):
    fake = FakePreprocess(["text/valid.input1: 1 sents, 7 tokens, 0.0% replaced (by <unk>)", "text/test1.input0: 2 x"])
    monkeypatch.setattr(preparation, "run_fairseq_preprocess", fake)
    out, log = tmp_path / "mc", io.StringIO()
    splits = {"train": TRAIN, "valid": VALID, "test": TEST, "test1": TEST1}
    stats = prepare_multiple_choice(writer, bpe_files.dict_txt, splits, out, log=log, workers=2)
    (batch,) = fake.batches
    assert (batch.name, batch.cwd.parent, batch.cwd.name.startswith(".mc")) == ("multiple choice", tmp_path, True)
    dictionary = str(bpe_files.dict_txt.resolve())
    assert batch.commands == [
        [
            "--only-source",
            "--srcdict",
            dictionary,
            "--trainpref",
            f"text/train.input{i}",
            "--validpref",
            f"text/valid.input{i}",
            "--testpref",
            f"text/test.input{i},text/test1.input{i}",
            "--destdir",
            f"input{i}",
            "--workers",
            "2",
        ]
        for i in range(4)
    ]
    assert fake.seen == tree(out)
    assert sorted(p.name for p in out.iterdir()) == ["input0", "input1", "input2", "input3", "label", "text"]
    assert log.getvalue() == "input1/valid: 1 sents, 7 tokens, 0.0% replaced (by <unk>)\ninput0/test1: 2 x\n"
    assert stats.commands == every_split_commands(out, dictionary, workers=2)
    assert capsys.readouterr() == ("", "")


def test_without_a_log_nothing_is_printed(tmp_path, bpe_files, writer, monkeypatch, capsys):
    monkeypatch.setattr(preparation, "run_fairseq_preprocess", FakePreprocess(["text/train.input0: 3 sents"]))
    prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": TRAIN}, tmp_path / "o")
    assert capsys.readouterr() == ("", "")


def test_a_split_name_with_a_colon_is_logged_whole(tmp_path, bpe_files, writer, monkeypatch):
    report = ["text/test: b.input0: 1 sents, 3 tokens, 0.0% replaced (by <unk>)"]
    monkeypatch.setattr(preparation, "run_fairseq_preprocess", FakePreprocess(report))
    log = io.StringIO()
    prepare_multiple_choice(writer, bpe_files.dict_txt, {"test": TEST, "test: b": TEST1}, tmp_path / "o", log=log)
    assert log.getvalue() == "input0/test: b: 1 sents, 3 tokens, 0.0% replaced (by <unk>)\n"


def test_progress_bars_go_to_stderr(tmp_path, bpe_files, writer, monkeypatch, capsys):
    monkeypatch.setattr(preparation, "run_fairseq_preprocess", FakePreprocess([]))
    splits = {"train": TRAIN, "test": TEST}
    prepare_multiple_choice(writer, bpe_files.dict_txt, splits, tmp_path / "o", progress=True)
    out, err = capsys.readouterr()
    assert out == ""
    assert re.findall(r"(encode train|encode test|binarize): 100%\|[^|]*\| (\d/\d)", err)[-3:] == [
        ("encode train", "3/3"),
        ("encode test", "1/1"),
        ("binarize", "1/1"),
    ]


def test_without_fairseq_only_text_only_works(tmp_path, bpe_files, writer, monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "fairseq_cli" else find_spec(name, *a)
    )
    with raises(
        f"fairseq is not installed for {sys.executable}: prepare-multiple-choice binarizes with its "
        "fairseq-preprocess; use --text-only and run the printed fairseq-preprocess commands where fairseq is"
    ):
        prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": TRAIN}, tmp_path / "o")
    assert list(tmp_path.iterdir()) == []
    prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": TRAIN}, tmp_path / "o", text_only=True)
    assert sorted(tree(tmp_path / "o")) == ["label/train.label", *[f"text/train.input{i}" for i in range(4)]]


# ------------------------------------------------------------------------------- refusals, failures


@pytest.mark.parametrize(
    ("splits", "message"),
    [
        ({}, "no split to prepare"),
        (
            {"train": TRAIN, "valid": [example("v:1")]},
            "the splits must have examples with the same number of choices, got {'train': 3, 'valid': 2}",
        ),
        (
            {"train": TRAIN, "test": []},
            "the splits must have examples with the same number of choices, got {'train': 3}",
        ),
        ({"test": []}, "the splits must have examples with the same number of choices, got {}"),
    ],
)
def test_refuses_splits_that_do_not_fit_together(tmp_path, bpe_files, writer, splits, message):
    with raises(message):
        prepare_multiple_choice(writer, bpe_files.dict_txt, splits, tmp_path / "o", text_only=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dictionary", ["missing.txt", "."])
def test_refuses_a_dictionary_that_is_no_file(tmp_path, writer, dictionary):
    path = tmp_path / dictionary
    with pytest.raises(FileNotFoundError) as error:
        prepare_multiple_choice(writer, path, {"train": TRAIN}, tmp_path / "o", text_only=True)
    assert str(error.value) == f"[Errno 2] dictionary (the pretrained model's dict.txt) not found: '{path}'"
    assert not (tmp_path / "o").exists()


def test_an_existing_output_is_refused_without_force_and_replaced_with_it(tmp_path, bpe_files, writer, bpe):
    out = tmp_path / "o"
    write(out / "keep.txt", "mine")
    write(tmp_path / "file", "mine")
    for existing in (out, tmp_path / "file"):
        with raises(f"refusing to overwrite {existing} (use --force)"):
            prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": TRAIN}, existing, text_only=True)
    assert tree(tmp_path) == {"file": b"mine", "o/keep.txt": b"mine"}
    prepare_multiple_choice(writer, bpe_files.dict_txt, {"test": TEST}, out, text_only=True, force=True)
    assert sorted(tree(out)) == [f"text/test.input{i}" for i in range(4)]
    (tmp_path / "empty").mkdir()
    prepare_multiple_choice(writer, bpe_files.dict_txt, {"test": TEST}, tmp_path / "empty", text_only=True)
    assert tree(tmp_path / "empty") == tree(out)


class FailingWriter:
    def __init__(self, writer: TokenWriter, fail_on: str) -> None:
        self.writer, self.fail_on = writer, fail_on

    def tokens(self, text: str) -> list[str]:
        if text == self.fail_on:
            raise CorpusError(f"cannot encode {text!r}")
        return self.writer.tokens(text)


def test_a_failure_leaves_nothing_or_the_old_output(tmp_path, bpe_files, writer):
    failing = FailingWriter(writer, "y")
    splits = {"train": TRAIN, "valid": VALID}
    with raises("cannot encode 'y'"):
        prepare_multiple_choice(failing, bpe_files.dict_txt, splits, tmp_path / "o", text_only=True)
    assert list(tmp_path.iterdir()) == []
    write(tmp_path / "o" / "keep.txt", "mine")
    with raises("cannot encode 'y'"):
        prepare_multiple_choice(failing, bpe_files.dict_txt, splits, tmp_path / "o", text_only=True, force=True)
    assert tree(tmp_path) == {"o/keep.txt": b"mine"}


def test_a_failing_binarization_leaves_nothing(tmp_path, bpe_files, writer, monkeypatch):
    def fail(batches):
        raise CorpusError("fairseq-preprocess failed")

    monkeypatch.setattr(preparation, "run_fairseq_preprocess", fail)
    with raises("fairseq-preprocess failed"):
        prepare_multiple_choice(writer, bpe_files.dict_txt, {"train": TRAIN}, tmp_path / "o")
    assert list(tmp_path.iterdir()) == []


# -------------------------------------------------------------------------------------- the command


def test_text_only_writes_ids_labels_and_commands(tmp_path, bpe_files, capsys):
    rows = [{"context": "The sun is hot.", "choices": ["It is hot.", "It is cold."], "label": 0}] * 3
    train = write_lines(tmp_path / "train.jsonl", [json.dumps(r) for r in rows])
    test = write_lines(tmp_path / "test.jsonl", [json.dumps({k: v for k, v in rows[0].items() if k != "label"})])
    out = tmp_path / "mc"
    args = [*bpe_args(bpe_files), "--dict", str(bpe_files.dict_txt), "--train", str(train), "--test", str(test)]
    assert prepare_multiple_choice_main([*args, "--output-dir", str(out), "--text-only"]) == 0
    bpe = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)
    ids = " ".join(str(i) for i in bpe.encode("It is cold."))
    assert (out / "text" / "train.input2").read_text() == f"{ids}\n" * 3
    assert (out / "text" / "test.input0").read_text() == " ".join(map(str, bpe.encode("The sun is hot."))) + "\n"
    assert (out / "label" / "train.label").read_text() == "0\n0\n0\n"
    assert not (out / "label" / "test.label").exists()  # no answers: fairseq's task then has no target
    assert sorted(p.name for p in out.iterdir()) == ["label", "text"]
    err = capsys.readouterr().err
    assert "train 3, test 1 examples of 2 choices" in err
    assert (
        f"fairseq-preprocess --only-source --srcdict {bpe_files.dict_txt.resolve()} --trainpref {out}/text/train.input2"
        in err
    )


def test_failure_leaves_nothing_and_existing_output_is_kept(tmp_path, bpe_files, capsys):
    good = write_lines(tmp_path / "train.jsonl", [GOOD] * 2)
    bad = write_lines(tmp_path / "valid.jsonl", [GOOD, GOOD.replace('"label": 0', '"label": 9')])
    base = [*bpe_args(bpe_files), "--dict", str(bpe_files.dict_txt), "--text-only", "--output-dir", str(tmp_path / "o")]
    assert prepare_multiple_choice_main([*base, "--train", str(good), "--valid", str(bad)]) == 1
    assert "valid.jsonl:2: label 9 is out of range for 4 choices" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.jsonl", "valid.jsonl"]
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "keep.txt").write_text("mine")
    assert prepare_multiple_choice_main([*base, "--train", str(good)]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err and (tmp_path / "o" / "keep.txt").exists()
    assert prepare_multiple_choice_main([*base, "--train", str(good), "--force"]) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["label", "text"]


def test_command_line_checks_its_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        prepare_multiple_choice_main(["--help"])
    assert exit_info.value.code == 0 and "--format {jsonl,commonsense_qa,race}" in capsys.readouterr().out
    common = ["--encoder-json", "e", "--vocab-bpe", "v", "--dict", "d", "--output-dir", str(tmp_path / "o")]
    for extra, message in [
        (["--format", "race"], "--format race reads --input-dir"),
        (["--format", "race", "--input-dir", "R", "--train", "t"], "--format race reads --input-dir"),
        (["--input-dir", "R"], "--format jsonl reads --train"),
    ]:
        with pytest.raises(SystemExit):
            prepare_multiple_choice_main([*common, *extra])
        assert message in capsys.readouterr().err
    shutil.rmtree(tmp_path / "o", ignore_errors=True)
