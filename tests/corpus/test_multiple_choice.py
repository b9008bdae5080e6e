"""``roberta-ext prepare-multiple-choice``: reading SWAG-style JSONL, CommonsenseQA and RACE, and
what it writes.

* RACE against fairseq's own scripts, on a made-up RACE folder (newlines, tabs and runs of spaces
  in articles, questions with a ``_`` blank and without, options with odd spacing, non-ASCII
  text): the examples equal the text files of ``preprocess_RACE.py``; the whole output equals,
  byte for byte, what ``preprocess_RACE.py`` then ``preprocess_RACE.sh`` write (BPE with
  ``multiprocessing_bpe_encoder.py``, ``fairseq-preprocess``), run as README.race.md says, with a
  ``wget`` stand-in that copies the test's BPE files and ``os.listdir`` sorted (fairseq's script
  takes the file system's order; ours is sorted).
* Errors name the file and line: bad JSON, a missing field, a label out of range, another number
  of choices; nothing is left behind on failure, an existing folder is kept without ``--force``.
* ``--text-only`` (no fairseq): the BPE ids, the labels and the fairseq-preprocess commands.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roberta_ext.cli.corpus import prepare_multiple_choice_main
from roberta_ext.corpus import CorpusError
from roberta_ext.corpus.multiple_choice import (
    RACE_SPLITS,
    read_commonsense_qa,
    read_jsonl,
    read_race,
)
from roberta_ext.tokenizers import GPT2BPE
from tests import forkserver
from tests.peers import needs, require_installed

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


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but fairseq-preprocess's logs and our text/, by relative path."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "preprocess.log" and path.relative_to(folder).parts[0] != "text"
    }


def bpe_args(bpe_files) -> list[str]:
    return ["--encoder-json", str(bpe_files.encoder_json), "--vocab-bpe", str(bpe_files.vocab_bpe)]


# ----------------------------------------------------------------------------------- RACE


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
    theirs, mine = tree(script_out), tree(ours)
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


# ----------------------------------------------------------------------------- JSONL, CQA


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


# -------------------------------------------------------------------------------- writing


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
