"""``roberta-ext glue-preprocess`` against fairseq's own ``preprocess_GLUE_tasks.sh``: both run on
the same made-up GLUE folder (every task, the real column layouts) and must write byte-identical
``<TASK>-bin`` trees; then the rows the script would mangle, which are errors here.

The script runs as its README says (``bash preprocess_GLUE_tasks.sh glue_data ALL``), unchanged
but for its line ends (the installed copy has CRLF ones, which bash refuses), with the stand-ins
:func:`run_fairseq_script` describes: they replace the download and make it run in seconds
rather than minutes, and change no byte of its output.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roberta_ext.cli.corpus import glue_preprocess_main
from roberta_ext.corpus import CorpusError
from roberta_ext.corpus.glue import TASKS, glue_preprocess
from tests.peers import needs, require_installed

BIN = Path(sys.executable).parent
needs_fairseq = needs("fairseq", "glue-preprocess binarizes with fairseq-preprocess")

WORDS = ["the", "a", "man", "woman", "dog", "city", "river", "plays", "walks", "near", "is", "was", "not", "big"]
WORDS += ["small", "happy", "red", "runs", "sings", "with", "on", "in", "music", "guitar", "house", "old", "new"]
# Non-ASCII text, spaces the Python tools strip (NBSP, ideographic space) and odd spacing.
ODD = ["café", "naïve", "Zürich", "東京", "Привет", "😀", "Straße", "\u00a0padded\u00a0", "  two  spaces ", "x\u3000"]


def sentence(rng: random.Random, *, short: bool = False) -> str:
    words = [rng.choice(WORDS) for _ in range(rng.randint(2, 5 if short else 9))]
    if rng.random() < 0.3:
        words.insert(rng.randrange(len(words) + 1), rng.choice(ODD))
    text = " ".join(words)
    return text[0].upper() + text[1:] + rng.choice([".", "?", "!", ""])


def _labels(rng: random.Random, names: list[str], count: int) -> list[str]:
    """Every label in the first rows (dev labels must occur in train), then random ones."""
    return [names[i % len(names)] if i < len(names) else rng.choice(names) for i in range(count)]


def _write(path: Path, lines: list[str], *, newline: str = "\n", final_newline: bool = True) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = newline.join(lines) + (newline if final_newline else "")
    path.write_bytes(text.encode("utf-8"))


def write_glue_data(folder: Path, *, rows: int = 30, seed: int = 0, short: bool = False) -> Path:
    """A GLUE folder as ``download_glue_data.py`` writes it, with ``rows`` rows per file and each
    task's real header and columns, plus the cases that matter: QQP rows broken by a newline
    inside a question (the script drops them), CRLF line ends (RTE's dev.tsv), a file without a
    final newline (SST-2's test.tsv), an extra column (MRPC), an empty text (QQP's test.tsv),
    STS-B scores such as 3.8 and 5.000. ``short`` keeps sentences to a few words."""
    rng = random.Random(seed)

    def s() -> str:
        return sentence(rng, short=short)

    # CoLA: no header in train and dev; source, label, the original '*' mark, sentence.
    for stem in ("train", "dev"):
        labels = _labels(rng, ["1", "0"], rows)
        _write(
            folder / "CoLA" / f"{stem}.tsv",
            [f"gj0{i % 9}\t{label}\t{'*' if label == '0' else ''}\t{s()}" for i, label in enumerate(labels)],
        )
    _write(folder / "CoLA" / "test.tsv", ["index\tsentence", *(f"{i}\t{s()}" for i in range(rows))])

    # SST-2: sentence, label; test: index, sentence (no final newline).
    for stem in ("train", "dev"):
        _write(
            folder / "SST-2" / f"{stem}.tsv",
            ["sentence\tlabel", *(f"{s()} \t{label}" for label in _labels(rng, ["0", "1"], rows))],
        )
    _write(
        folder / "SST-2" / "test.tsv", ["index\tsentence", *(f"{i}\t{s()}" for i in range(rows))], final_newline=False
    )

    # MRPC: Quality, #1 ID, #2 ID, #1 String, #2 String (one row with an extra column).
    header = "#1 ID\t#2 ID\t#1 String\t#2 String"
    for stem in ("train", "dev"):
        lines = [f"Quality\t{header}"]
        lines += [
            f"{label}\t{1000 + i}\t{2000 + i}\t{s()}\t{s()}" for i, label in enumerate(_labels(rng, ["1", "0"], rows))
        ]
        lines[3] += "\tan extra column"
        _write(folder / "MRPC" / f"{stem}.tsv", lines)
    _write(
        folder / "MRPC" / "test.tsv",
        [f"index\t{header}", *(f"{i}\t{3000 + i}\t{4000 + i}\t{s()}\t{s()}" for i in range(rows))],
    )

    # QQP: id, qid1, qid2, question1, question2, is_duplicate; test: id, question1, question2.
    for stem in ("train", "dev"):
        lines = ["id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate"]
        lines += [
            f"{i}\t{2 * i}\t{2 * i + 1}\t{s()}?\t{s()}?\t{label}"
            for i, label in enumerate(_labels(rng, ["0", "1"], rows))
        ]
        # A question holding a newline breaks its row in two lines of 4 and 3 columns; and a tab
        # inside a question makes 7. awk 'NF==6' drops all three lines.
        lines[5:5] = [f"{rows}\t{2 * rows}\t{2 * rows + 1}\tWhat is a", f"river?\t{s()}?\t1"]
        lines[9:9] = [f"{rows + 1}\t7\t8\tWhy\tnot?\t{s()}?\t0"]
        _write(folder / "QQP" / f"{stem}.tsv", lines)
    test = [f"{i}\t{s()}?\t{s()}?" for i in range(rows)]
    test[4] = f"4\t{s()}?\t"  # an empty question: kept, as an empty line
    _write(folder / "QQP" / "test.tsv", ["id\tquestion1\tquestion2", *test])

    # STS-B: index, genre, filename, year, old_index, source1, source2, sentence1, sentence2, score.
    scores = ["3.8", "5.000", "0", "2.5", "3.14159", "0.0000005", "4.750", "1.2", "0.000"]
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for stem in ("train", "dev"):
        lines = [f"{header}\tscore"]
        for i in range(rows):
            score = scores[i] if i < len(scores) else f"{rng.uniform(0, 5):.3f}"
            lines.append(f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{s()}\t{s()}\t{score}")
        _write(folder / "STS-B" / f"{stem}.tsv", lines)
    _write(
        folder / "STS-B" / "test.tsv",
        [header, *(f"{i}\tmain-news\theadlines\t2015\t{i:04d}\tnone\tnone\t{s()}\t{s()}" for i in range(rows))],
    )

    # MNLI: 12 columns in train, 16 in dev (five annotator labels, then gold_label), 10 in test.
    parses = "promptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\tsentence1_parse\tsentence2_parse"
    names = ["entailment", "neutral", "contradiction"]

    def mnli_row(i: int, genre: str) -> str:
        first, second = s(), s()
        parsed = f"( {first} )\t( {second} )\t(ROOT {first})\t(ROOT {second})"
        return f"{i}\t{31193 + i}\t{31193 + i}n\t{genre}\t{parsed}\t{first}\t{second}"

    _write(
        folder / "MNLI" / "train.tsv",
        [f"index\t{parses}\tsentence1\tsentence2\tlabel1\tgold_label"]
        + [f"{mnli_row(i, 'government')}\t{label}\t{label}" for i, label in enumerate(_labels(rng, names, rows))],
    )
    for stem, genre in (("dev_matched", "fiction"), ("dev_mismatched", "letters")):
        lines = [f"index\t{parses}\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"]
        for i, label in enumerate(_labels(rng, names, rows)):
            votes = [label, rng.choice(names), label, label, rng.choice(names)]
            lines.append(f"{mnli_row(i, genre)}\t{chr(9).join(votes)}\t{label}")
        _write(folder / "MNLI" / f"{stem}.tsv", lines)
    for stem, genre in (("test_matched", "travel"), ("test_mismatched", "verbatim")):
        _write(
            folder / "MNLI" / f"{stem}.tsv",
            [f"index\t{parses}\tsentence1\tsentence2", *(mnli_row(i, genre) for i in range(rows))],
        )

    # QNLI and RTE: index, two texts, label; test without the label. RTE's dev.tsv has CRLF ends.
    for task, names in (("QNLI", ["entailment", "not_entailment"]), ("RTE", ["not_entailment", "entailment"])):
        first, second = ("question", "sentence") if task == "QNLI" else ("sentence1", "sentence2")
        for stem in ("train", "dev"):
            _write(
                folder / task / f"{stem}.tsv",
                [f"index\t{first}\t{second}\tlabel"]
                + [f"{i}\t{s()}\t{s()}\t{label}" for i, label in enumerate(_labels(rng, names, rows))],
                newline="\r\n" if (task, stem) == ("RTE", "dev") else "\n",
            )
        _write(folder / task / "test.tsv", [f"index\t{first}\t{second}", *(f"{i}\t{s()}\t{s()}" for i in range(rows))])
    return folder


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but fairseq-preprocess's logs, by relative path."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != "preprocess.log"
    }


# fairseq-preprocess runs as the script ran it, once per recorded call, all in one process.
REPLAY = """
import json, sys
from fairseq_cli import preprocess
for line in open(sys.argv[1], encoding="utf-8"):
    sys.argv = ["fairseq-preprocess", *json.loads(line), "--workers", "1"]
    preprocess.cli_main()
    for handler in list(preprocess.logger.handlers):  # main() adds a log file handler per run
        preprocess.logger.removeHandler(handler)
        handler.close()
"""


def run_fairseq_script(glue_data: Path, bpe_dir: Path, folder: Path) -> None:
    """``bash preprocess_GLUE_tasks.sh glue_data ALL`` in ``folder``, on a copy of ``glue_data``
    (the script writes ``processed/`` into it).

    Run as it is, the script starts 67 Python processes that each import fairseq (torch and all:
    seconds each) and fork 60 workers: 20 minutes on 2 busy cores. So, with stand-ins on ``PATH``
    and ``PYTHONPATH`` that change no byte of the output:

    * ``wget`` copies the test's BPE files instead of downloading OpenAI's;
    * ``python -m examples.roberta.multiprocessing_bpe_encoder`` runs fairseq's script (through an
      ``examples`` link to the installed ``fairseq/examples``) with fairseq's own
      ``gpt2_bpe_utils.get_encoder``, under a ``fairseq`` package that holds only that module,
      so that the rest of fairseq is not imported; and with ``--workers 1`` (its output is in
      input order whatever the number of workers);
    * ``fairseq-preprocess`` records its arguments; once the script is done, every recorded call
      runs, in order, through fairseq-preprocess's own ``cli_main`` in one process, with
      ``--workers 1`` (the script's 60 change the speed only). The script reads nothing that
      fairseq-preprocess writes, so running the calls later changes nothing.
    """
    spec = require_installed("fairseq", "the reference is fairseq's own script")
    fairseq_dir = Path(next(iter(spec.submodule_search_locations or [])))
    script = fairseq_dir / "examples" / "roberta" / "preprocess_GLUE_tasks.sh"
    shutil.copytree(glue_data, folder / "glue_data")
    # fairseq-fixed's wheel ships the script with CRLF line ends, which bash cannot run.
    runnable = folder / script.name
    runnable.write_bytes(script.read_bytes().replace(b"\r\n", b"\n"))

    stand_ins = folder / "stand-ins"
    encoders = stand_ins / "fairseq" / "data" / "encoders"
    encoders.mkdir(parents=True)
    (stand_ins / "examples").symlink_to(fairseq_dir / "examples")
    for package in (stand_ins / "fairseq", stand_ins / "fairseq" / "data", encoders):
        (package / "__init__.py").write_text('"""Only fairseq\'s GPT-2 BPE (tests/corpus/test_glue.py)."""\n')
    (encoders / "gpt2_bpe_utils.py").symlink_to(fairseq_dir / "data" / "encoders" / "gpt2_bpe_utils.py")
    (encoders / "gpt2_bpe.py").write_text("from .gpt2_bpe_utils import get_encoder  # noqa: F401\n")
    calls = folder / "fairseq-preprocess.calls"
    tools = {
        "wget": "# `wget -N URL`: copy the file the URL names from the test's BPE folder\n"
        f'for arg; do case "$arg" in -*) ;; *) cp "{bpe_dir}/${{arg##*/}}" . ;; esac; done\n',
        # The script's only `python` call is the encoder: its 60 workers change the speed only.
        "python": f'exec {sys.executable} "$@" --workers 1\n',
        "fairseq-preprocess": f"exec {sys.executable} -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "
        f'"$@" >> {calls}\n',
    }
    for name, body in tools.items():
        (stand_ins / name).write_text(f"#!/bin/sh\n{body}")
        (stand_ins / name).chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{stand_ins}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(stand_ins),
        "LC_ALL": "C.UTF-8",
    }
    result = subprocess.run(
        ["bash", str(runnable), "glue_data", "ALL"], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )
    # The script goes on after a failed step: its exit status tells little, its output more.
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert len(calls.read_text().splitlines()) == 21  # 14 inputs (6 pair tasks, 2 single), 7 label columns
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"} | {"OMP_NUM_THREADS": "1"}
    replay = subprocess.run(
        [sys.executable, "-c", REPLAY, str(calls)], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )
    assert replay.returncode == 0, replay.stdout[-3000:] + replay.stderr[-3000:]


@pytest.fixture(scope="module")
def glue_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_glue_data(tmp_path_factory.mktemp("glue") / "glue_data")


# ------------------------------------------------------------------------- the same bytes


@needs_fairseq
def test_all_tasks_byte_identical_to_fairseqs_script(glue_data: Path, bpe_files, tmp_path: Path, capsys):
    bpe_dir = bpe_files.dict_txt.parent
    run_fairseq_script(glue_data, bpe_dir, tmp_path / "script")

    ours = tmp_path / "ours"
    args = [str(glue_data), "ALL", "--destdir", str(ours), "--bpe-dir", str(bpe_dir), "--workers", "2"]
    assert glue_preprocess_main(args) == 0
    report = capsys.readouterr().err

    for task in TASKS:
        theirs, mine = tree(tmp_path / "script" / f"{task}-bin"), tree(ours / f"{task}-bin")
        assert sorted(mine) == sorted(theirs), task
        for name in theirs:
            assert mine[name] == theirs[name], f"{task}-bin/{name} differs"
    assert sorted(path.name for path in ours.iterdir()) == sorted(f"{task}-bin" for task in TASKS)

    # The layouts the script makes (a sample), and what was reported.
    assert {"input0/dict.txt", "input1/valid1.bin", "input1/test1.idx", "label/valid1.bin"} <= set(
        tree(ours / "MNLI-bin")
    )
    assert not (ours / "CoLA-bin" / "input1").exists() and not (ours / "STS-B-bin" / "label" / "dict.txt").exists()
    assert (ours / "STS-B-bin" / "label" / "train.label").read_text().split()[:6] == [
        "0.76",
        "1",
        "0",
        "0.5",
        "0.628318",
        "1e-07",
    ]
    assert "QQP: dropped 3 rows of train.tsv without exactly 6 tab-separated columns" in report
    assert "(lines 6, 7, 10)" in report
    assert "MNLI: train 30, valid 30, valid1 30, test 30, test1 30 rows" in report
    assert "RTE: train 30, valid 30, test 30 rows" in report and "labels (class 0, 1, ...): " in report


# ------------------------------------------------------------------------- what the script gets wrong


def _break(glue_data: Path, tmp_path: Path, task: str, stem: str, line: int, new: str) -> Path:
    """A copy of ``glue_data`` whose ``task/stem.tsv`` has line ``line`` (1-based) replaced."""
    copy = tmp_path / "glue_data"
    shutil.copytree(glue_data, copy)
    path = copy / task / f"{stem}.tsv"
    lines = path.read_bytes().split(b"\n")
    lines[line - 1] = new.encode("utf-8") if isinstance(new, str) else new
    path.write_bytes(b"\n".join(lines))
    return copy


@needs_fairseq
def test_a_missing_column_halfway_stops_the_run_and_leaves_no_folder(glue_data, bpe_files, tmp_path: Path):
    # ALL reads QQP first, then MNLI, whose train and dev_matched are read before dev_mismatched.
    broken = _break(glue_data, tmp_path, "MNLI", "dev_mismatched", 8, "7\t1\t1n\tletters\tonly four")
    out = tmp_path / "out"
    (out / "QQP-bin").mkdir(parents=True)  # an earlier run's: --force would replace it at the end
    (out / "QQP-bin" / "dict.txt").write_text("old")
    with pytest.raises(CorpusError) as raised:
        glue_preprocess(broken, ["ALL"], out, bpe_dir=bpe_files.dict_txt.parent, force=True)
    message = str(raised.value)
    assert f"{broken / 'MNLI' / 'dev_mismatched.tsv'}:8:" in message
    assert (
        "need columns 9 (a text), 10 (a text), 16 (the label)" in message and "has 5 tab-separated columns" in message
    )
    # Nothing is written, not even the temporary folders, whose QQP and MNLI text was half made.
    assert [path.name for path in out.iterdir()] == ["QQP-bin"]
    assert [path.name for path in (out / "QQP-bin").iterdir()] == ["dict.txt"]


@needs_fairseq
@pytest.mark.parametrize(
    "task, stem, line, new, expected",
    [
        ("RTE", "test", 3, "2\tonly one text", r"RTE's test\.tsv rows need column 3 \(a text\), but this row has 2"),
        (
            "SST-2",
            "train",
            2,
            "no tab at all",
            r"need column 2 \(the label\), but this row has 1 tab-separated column$",
        ),
        ("CoLA", "train", 1, "", r"CoLA/train\.tsv:1: .*this row has 1 tab-separated column"),
        (
            "RTE",
            "dev",
            4,
            "3\ta\tb\tneutral\r",
            r"RTE/dev\.tsv:4: column 4: the label 'neutral' does not occur in train",
        ),
        (
            "QNLI",
            "train",
            2,
            "0\ta\tb\tnot entailed",
            r"QNLI/train\.tsv:2: column 4: the label 'not entailed' contains",
        ),
        ("QNLI", "dev", 2, "0\ta\tb\t", r"QNLI/dev\.tsv:2: column 4: the label '' is empty"),
        ("STS-B", "dev", 5, "4\tg\tf\ty\to\ts\ts\ta\tb\tfive", r"STS-B/dev\.tsv:5: column 10: .*number, got 'five'"),
        ("STS-B", "train", 3, "2\tg\tf\ty\to\ts\ts\ta\tb\t0x10", r"number, got '0x10'"),
        ("RTE", "train", 6, b"5\tcaf\xe9\tb\tentailment", r"RTE/train\.tsv:6: column 2 is not valid UTF-8"),
        ("RTE", "train", 7, "6\ta\rb\tc\tentailment", r"RTE/train\.tsv:7: column 2 contains a carriage return"),
        ("QQP", "test", 2, "0\tonly one question", r"QQP/test\.tsv:2: .*column 3 \(a text\)"),
    ],
)
def test_rows_the_script_would_mangle_are_errors_naming_file_and_line(
    glue_data, bpe_files, tmp_path: Path, task, stem, line, new, expected
):
    broken = _break(glue_data, tmp_path, task, stem, line, new)
    out = tmp_path / "out"
    with pytest.raises(CorpusError, match=expected):
        glue_preprocess(broken, [task], out, bpe_dir=bpe_files.dict_txt.parent)
    assert not out.exists() or not any(out.iterdir())


def test_unknown_task_and_missing_files_fail_before_any_work(glue_data, tmp_path: Path, capsys):
    assert glue_preprocess_main([str(glue_data), "STSB", "--destdir", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert "unknown GLUE task 'STSB'; choose from ALL, QQP, MNLI, QNLI, MRPC, RTE, STS-B, SST-2, CoLA" in error

    empty = tmp_path / "glue_data"
    (empty / "RTE").mkdir(parents=True)
    assert glue_preprocess_main([str(empty), "rte", "--destdir", str(tmp_path / "out")]) == 1
    assert (
        f"{empty / 'RTE' / 'train.tsv'}: not found (RTE needs train.tsv, dev.tsv, test.tsv" in capsys.readouterr().err
    )
    assert not (tmp_path / "out").exists()


def test_bpe_dir_must_hold_the_three_files(glue_data, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setattr("roberta_ext.corpus.preparation.check_fairseq", lambda why: None)  # no fairseq needed here
    (tmp_path / "bpe").mkdir()
    (tmp_path / "bpe" / "encoder.json").write_text("{}")
    args = [str(glue_data), "RTE", "--destdir", str(tmp_path / "out"), "--bpe-dir", str(tmp_path / "bpe")]
    assert glue_preprocess_main(args) == 1
    assert f"--bpe-dir {tmp_path / 'bpe'}: vocab.bpe, dict.txt not found there" in capsys.readouterr().err


def test_offline_without_cached_bpe_says_which_file_and_where(glue_data, tmp_path: Path, monkeypatch, capsys):
    monkeypatch.setenv("ROBERTA_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ROBERTA_EXT_OFFLINE", "1")
    monkeypatch.setattr("roberta_ext.corpus.preparation.check_fairseq", lambda why: None)  # no fairseq needed here
    assert glue_preprocess_main([str(glue_data), "RTE", "--destdir", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert "cannot download https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/encoder.json to " in error
    assert str(tmp_path / "cache") in error and "offline mode is on" in error
    assert not (tmp_path / "out").exists()


def test_existing_output_is_kept_without_force(glue_data, tmp_path: Path, capsys):
    (tmp_path / "out" / "RTE-bin").mkdir(parents=True)
    (tmp_path / "out" / "RTE-bin" / "mine.txt").write_text("keep me")
    assert glue_preprocess_main([str(glue_data), "RTE", "--destdir", str(tmp_path / "out")]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err
    assert (tmp_path / "out" / "RTE-bin" / "mine.txt").read_text() == "keep me"


def test_help(capsys):
    with pytest.raises(SystemExit) as exited:
        glue_preprocess_main(["--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: roberta-ext glue-preprocess [-h] --destdir DIR [--bpe-dir DIR] [--workers N]")
    for needle in (
        "GLUE_DIR TASK [TASK ...]",
        "preprocess_GLUE_tasks.sh",
        "QQP's train and dev rows without exactly 6",
        "dropped (and reported)",
        "error naming the file and line",
        "ALL",
        "STS-B",
    ):
        assert needle in text, needle
