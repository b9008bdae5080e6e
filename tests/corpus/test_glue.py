"""GLUE (roberta_ext/corpus/glue.py and ``roberta-ext glue-preprocess``).

Part by part, fast: each task's columns and labels against fairseq's
``examples/roberta/preprocess_GLUE_tasks.sh`` (its ``cut -f`` and ``awk`` rules), STS-B's scores
against the real ``awk``, the BPE files (a folder, or the download cache), the cutting of every split
and every message naming file and line, and the layout ``predict --glue-task`` reads.
(``glue_preprocess`` with a stand-in for fairseq-preprocess is in ``tests/corpus/test_glue_preprocess.py``.)

Then the command against fairseq's own ``preprocess_GLUE_tasks.sh``: both run on the same made-up
GLUE folder (every task, the real column layouts) and must write byte-identical ``<TASK>-bin`` trees;
then the rows the script would mangle, which are errors here. The script runs as its README says
(``bash preprocess_GLUE_tasks.sh glue_data ALL``), unchanged but for its line ends (the installed
copy has CRLF ones, which bash refuses), with the stand-ins :func:`run_fairseq_script` describes:
they replace the download and make it run in seconds rather than minutes, and change no byte of its
output.
"""

from __future__ import annotations

import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from roberta_ext import download as cache
from roberta_ext.cli.corpus import glue_preprocess_main
from roberta_ext.corpus import CorpusError, glue
from roberta_ext.corpus.glue import (
    GLUE_REGRESSION_SCALE,
    TASKS,
    GlueLayout,
    GlueTask,
    awk_number,
    glue_layout,
    glue_preprocess,
    glue_split,
    resolve_bpe_files,
    resolve_tasks,
)
from roberta_ext.corpus.rows import Columns
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


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


def write_lines(path: Path, lines: list[str], *, newline: str = "\n", final_newline: bool = True) -> None:
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
        write_lines(
            folder / "CoLA" / f"{stem}.tsv",
            [f"gj0{i % 9}\t{label}\t{'*' if label == '0' else ''}\t{s()}" for i, label in enumerate(labels)],
        )
    write_lines(folder / "CoLA" / "test.tsv", ["index\tsentence", *(f"{i}\t{s()}" for i in range(rows))])

    # SST-2: sentence, label; test: index, sentence (no final newline).
    for stem in ("train", "dev"):
        write_lines(
            folder / "SST-2" / f"{stem}.tsv",
            ["sentence\tlabel", *(f"{s()} \t{label}" for label in _labels(rng, ["0", "1"], rows))],
        )
    write_lines(
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
        write_lines(folder / "MRPC" / f"{stem}.tsv", lines)
    write_lines(
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
        write_lines(folder / "QQP" / f"{stem}.tsv", lines)
    test = [f"{i}\t{s()}?\t{s()}?" for i in range(rows)]
    test[4] = f"4\t{s()}?\t"  # an empty question: kept, as an empty line
    write_lines(folder / "QQP" / "test.tsv", ["id\tquestion1\tquestion2", *test])

    # STS-B: index, genre, filename, year, old_index, source1, source2, sentence1, sentence2, score.
    scores = ["3.8", "5.000", "0", "2.5", "3.14159", "0.0000005", "4.750", "1.2", "0.000"]
    header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2"
    for stem in ("train", "dev"):
        lines = [f"{header}\tscore"]
        for i in range(rows):
            score = scores[i] if i < len(scores) else f"{rng.uniform(0, 5):.3f}"
            lines.append(f"{i}\tmain-captions\tMSRvid\t2012test\t{i:04d}\tnone\tnone\t{s()}\t{s()}\t{score}")
        write_lines(folder / "STS-B" / f"{stem}.tsv", lines)
    write_lines(
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

    write_lines(
        folder / "MNLI" / "train.tsv",
        [f"index\t{parses}\tsentence1\tsentence2\tlabel1\tgold_label"]
        + [f"{mnli_row(i, 'government')}\t{label}\t{label}" for i, label in enumerate(_labels(rng, names, rows))],
    )
    for stem, genre in (("dev_matched", "fiction"), ("dev_mismatched", "letters")):
        lines = [f"index\t{parses}\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\tlabel5\tgold_label"]
        for i, label in enumerate(_labels(rng, names, rows)):
            votes = [label, rng.choice(names), label, label, rng.choice(names)]
            lines.append(f"{mnli_row(i, genre)}\t{chr(9).join(votes)}\t{label}")
        write_lines(folder / "MNLI" / f"{stem}.tsv", lines)
    for stem, genre in (("test_matched", "travel"), ("test_mismatched", "verbatim")):
        write_lines(
            folder / "MNLI" / f"{stem}.tsv",
            [f"index\t{parses}\tsentence1\tsentence2", *(mnli_row(i, genre) for i in range(rows))],
        )

    # QNLI and RTE: index, two texts, label; test without the label. RTE's dev.tsv has CRLF ends.
    for task, names in (("QNLI", ["entailment", "not_entailment"]), ("RTE", ["not_entailment", "entailment"])):
        first, second = ("question", "sentence") if task == "QNLI" else ("sentence1", "sentence2")
        for stem in ("train", "dev"):
            write_lines(
                folder / task / f"{stem}.tsv",
                [f"index\t{first}\t{second}\tlabel"]
                + [f"{i}\t{s()}\t{s()}\t{label}" for i, label in enumerate(_labels(rng, names, rows))],
                newline="\r\n" if (task, stem) == ("RTE", "dev") else "\n",
            )
        write_lines(
            folder / task / "test.tsv", [f"index\t{first}\t{second}", *(f"{i}\t{s()}\t{s()}" for i in range(rows))]
        )
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


# ------------------------------------------------------------------- the script's tasks and columns

# preprocess_GLUE_tasks.sh: INPUT_COLUMNS, TEST_INPUT_COLUMNS, LABEL_COLUMN, DEV_LABEL_COLUMN, SPLITS.
SCRIPT = {
    "QQP": ((4, 5), (2, 3), 6, None, ("train", "dev", "test")),
    "MNLI": ((9, 10), (9, 10), 12, 16, ("train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched")),
    "QNLI": ((2, 3), (2, 3), 4, None, ("train", "dev", "test")),
    "MRPC": ((4, 5), (4, 5), 1, None, ("train", "dev", "test")),
    "RTE": ((2, 3), (2, 3), 4, None, ("train", "dev", "test")),
    "STS-B": ((8, 9), (8, 9), 10, None, ("train", "dev", "test")),
    "SST-2": ((1,), (2,), 2, None, ("train", "dev", "test")),
    "CoLA": ((4,), (2,), 2, None, ("train", "dev", "test")),
}
FAIRSEQ_SPLITS = {
    "train": "train",
    "dev": "valid",
    "test": "test",
    "dev_matched": "valid",
    "dev_mismatched": "valid1",
    "test_matched": "test",
    "test_mismatched": "test1",
}


def test_tasks_are_the_scripts_in_its_order_for_all():
    assert list(TASKS) == ["QQP", "MNLI", "QNLI", "MRPC", "RTE", "STS-B", "SST-2", "CoLA"]
    assert all(task.name == name for name, task in TASKS.items())


@pytest.mark.parametrize("name", list(SCRIPT))
def test_each_tasks_columns_splits_and_labels_are_the_scripts(name):
    inputs, test_inputs, label, dev_label, stems = SCRIPT[name]
    task = TASKS[name]
    assert task.splits == tuple((stem, FAIRSEQ_SPLITS[stem]) for stem in stems)
    for stem in stems:
        testing = stem.startswith("test")
        assert task.inputs_of(stem) == (test_inputs if testing else inputs), stem
        expected_label = None if testing else dev_label if (dev_label and stem != "train") else label
        assert task.label_of(stem) == expected_label, stem
    assert task.headerless == (("train", "dev") if name == "CoLA" else ())
    assert task.exact_columns == (6 if name == "QQP" else None)
    assert task.regression is (name == "STS-B")


def test_what_each_task_is_scored_by_is_glues_metric():
    assert {name: task.metrics for name, task in TASKS.items()} == {
        "QQP": ("accuracy", "f1"),
        "MNLI": ("accuracy",),
        "QNLI": ("accuracy",),
        "MRPC": ("accuracy", "f1"),
        "RTE": ("accuracy",),
        "STS-B": ("pearson", "spearman"),
        "SST-2": ("accuracy",),
        "CoLA": ("accuracy", "mcc"),
    }
    assert GLUE_REGRESSION_SCALE == 5.0


def test_a_task_made_with_the_defaults_reads_train_dev_test_with_headers():
    task = GlueTask(name="X", input_columns=(1,), test_input_columns=(3,), label_column=2)
    assert task.splits == (("train", "train"), ("dev", "valid"), ("test", "test"))
    assert (task.headerless, task.exact_columns, task.regression, task.metrics) == ((), None, False, ("accuracy",))
    assert task.dev_label_column is None
    assert [task.label_of(stem) for stem in ("train", "dev", "test")] == [2, 2, None]
    assert [task.inputs_of(stem) for stem in ("train", "dev", "test")] == [(1,), (1,), (3,)]


def test_a_task_is_frozen_and_keyword_only():
    with pytest.raises(TypeError):
        GlueTask("X", (1,), (1,), 2)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        TASKS["RTE"].label_column = 3  # type: ignore[misc]


# ------------------------------------------------------------------------------------ resolve_tasks


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["rte"], ["RTE"]),
        (["sts-b", "COLA", "Sst-2"], ["STS-B", "CoLA", "SST-2"]),
        (["ALL"], list(TASKS)),
        (["all"], list(TASKS)),
        (["RTE", "All"], ["RTE", "QQP", "MNLI", "QNLI", "MRPC", "STS-B", "SST-2", "CoLA"]),
        (["mnli", "MNLI", "rte", "Mnli"], ["MNLI", "RTE"]),
        ([], []),
    ],
)
def test_tasks_are_resolved_without_regard_to_case_in_the_order_given_once_each(names, expected):
    assert [task.name for task in resolve_tasks(names)] == expected
    assert all(task is TASKS[task.name] for task in resolve_tasks(names))


@pytest.mark.parametrize("name", ["STSB", "SST2", "glue", "RTE ", "A"])
def test_an_unknown_task_is_refused_with_the_valid_names(name):
    message = f"unknown GLUE task {name!r}; choose from ALL, QQP, MNLI, QNLI, MRPC, RTE, STS-B, SST-2, CoLA"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        resolve_tasks(["RTE", name])


# -------------------------------------------------------------------- awk_number and STS-B's scores

SCORES = ["5.000", "3.8", "0", "0.000", "3.14159", "0.0000005", "4.750", "1.2", "2.5", "4.999999", "1", "5", "0.1"]
SCORES += ["+1", "-2.5", ".5", "5.", "1e1", "2.5E-3", "12345678", "1e9", "0.3333", "2.222222", "4.4444444"]


@pytest.fixture(scope="module")
def awk_printed() -> dict[str, str]:
    """``awk '{print $1 / 5.0}'``, as the script runs it on STS-B's label column."""
    if shutil.which("awk") is None:
        pytest.skip("awk is not installed")
    result = subprocess.run(
        ["awk", "{print $1 / 5.0}"], input="\n".join(SCORES) + "\n", capture_output=True, text=True, check=True
    )
    return dict(zip(SCORES, result.stdout.splitlines(), strict=True))


def test_scores_divided_by_5_are_written_as_awk_prints_them(awk_printed):
    assert {score: awk_number(float(score) / 5.0) for score in SCORES} == awk_printed


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1.0, "1"), (0.0, "0"), (-0.0, "0"), (-3.0, "-3"), (0.76, "0.76"), (0.6283180, "0.628318"), (1e-7, "1e-07")]
    + [(123456.7, "123457"), (1234567.5, "1.23457e+06"), (-0.5, "-0.5"), (2000000000.0, "2000000000")],
)
def test_awk_number_is_an_integer_when_integral_else_6_significant_digits(value, expected):
    assert awk_number(value) == expected


def cut_one(tmp_path: Path, task: str, stem: str, text: str | bytes, train_labels: set[str] | None = None):
    """``glue._cut_split`` of one file: the result, the files it wrote and the STS-B scores."""
    path = write(tmp_path / "glue" / task / f"{stem}.tsv", text)
    out = tmp_path / "text"
    out.mkdir(exist_ok=True)
    scores: list[str] | None = [] if TASKS[task].regression and not stem.startswith("test") else None
    labels = set() if train_labels is None else train_labels
    result = glue._cut_split(TASKS[task], path, stem, FAIRSEQ_SPLITS[stem], out, labels, scores)
    files = {file.name: file.read_bytes() for file in sorted(out.iterdir())}
    return result, files, scores


STSB_HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"


def stsb_row(score: str, first: str = "a", second: str = "b") -> str:
    return f"0\tg\tf\ty\to\ts\ts\t{first}\t{second}\t{score}\n"


def test_stsb_scores_are_divided_by_5_and_the_raw_labels_kept(tmp_path):
    text = STSB_HEADER + stsb_row("5.000") + stsb_row(" 3.8\r") + stsb_row("+1") + stsb_row("1e1")
    result, files, scores = cut_one(tmp_path, "STS-B", "train", text)
    assert scores == ["1", "0.76", "0.2", "2"]
    assert files["train.label"] == b"5.000\n 3.8\r\n+1\n1e1\n"
    assert (result.rows, result.dropped) == (4, [])


@pytest.mark.parametrize(
    "score", ["five", "0x10", "1,5", "", " ", "inf", "-inf", "nan", "1e999", "1e", "e5", ".", "--1", "1X", "\u00a01"]
)
def test_what_awk_would_read_as_0_or_cannot_divide_is_not_a_score(tmp_path, score):
    path = tmp_path / "glue" / "STS-B" / "dev.tsv"
    message = f"{path}:3: column 10: STS-B's score must be a number, got {score!r}"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        cut_one(tmp_path, "STS-B", "dev", STSB_HEADER + stsb_row("1") + stsb_row(score))


# -------------------------------------------------------------------------------- resolve_bpe_files


def test_a_bpe_dir_gives_its_three_files(bpe_files):
    folder = bpe_files.dict_txt.parent
    assert resolve_bpe_files(folder) == (folder / "encoder.json", folder / "vocab.bpe", folder / "dict.txt")
    assert resolve_bpe_files(str(folder)) == tuple(bpe_files)


def test_a_bpe_dir_that_is_no_folder_is_refused(tmp_path):
    missing, a_file = tmp_path / "nothing", write(tmp_path / "file", "")
    for path in (missing, a_file):
        message = f"--bpe-dir {path}: not a folder (it should hold encoder.json, vocab.bpe, dict.txt)"
        with pytest.raises(CorpusError, match=re.escape(message) + "$"):
            resolve_bpe_files(path)


@pytest.mark.parametrize(
    ("present", "missing"),
    [
        ((), "encoder.json, vocab.bpe, dict.txt"),
        (("encoder.json",), "vocab.bpe, dict.txt"),
        (("encoder.json", "dict.txt"), "vocab.bpe"),
        (("vocab.bpe", "dict.txt"), "encoder.json"),
        (("encoder.json", "vocab.bpe"), "dict.txt"),
    ],
)
def test_a_bpe_dir_without_all_three_files_names_those_missing(tmp_path, present, missing):
    (tmp_path / "bpe").mkdir()
    for name in present:
        write(tmp_path / "bpe" / name, "")
    if "dict.txt" not in present:
        (tmp_path / "bpe" / "dict.txt").mkdir()  # a folder is no file
    message = (
        f"--bpe-dir {tmp_path / 'bpe'}: {missing} not found there (it should hold encoder.json, vocab.bpe, dict.txt)"
    )
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        resolve_bpe_files(tmp_path / "bpe")


@pytest.fixture
def download_from(monkeypatch, tmp_path, bpe_files):
    """The cache in ``tmp_path``; downloads copy the test's BPE files, and are recorded."""
    monkeypatch.setenv("ROBERTA_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("ROBERTA_EXT_OFFLINE", raising=False)
    fetched: list[str] = []

    def download(url, path, *, progress=None):
        fetched.append(url)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bpe_files.dict_txt.parent / url.rsplit("/", 1)[1], path)
        return path

    monkeypatch.setattr(cache, "download", download)
    return fetched


def test_without_a_bpe_dir_openais_files_are_fetched_once_into_the_cache(
    download_from, tmp_path, bpe_files, monkeypatch
):
    first = resolve_bpe_files()
    base = "https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/"
    assert download_from == [base + "encoder.json", base + "vocab.bpe", base + "dict.txt"]
    assert [path.name for path in first] == ["encoder.json", "vocab.bpe", "dict.txt"]
    assert all(path.is_relative_to(tmp_path / "cache") for path in first)
    assert [path.read_bytes() for path in first] == [path.read_bytes() for path in bpe_files]

    monkeypatch.setenv("ROBERTA_EXT_OFFLINE", "1")
    assert resolve_bpe_files() == first  # cached: offline is no obstacle
    assert len(download_from) == 3


def test_offline_without_the_cached_bpe_names_the_url_and_the_cache(download_from, tmp_path, monkeypatch):
    monkeypatch.setenv("ROBERTA_EXT_OFFLINE", "1")
    with pytest.raises(cache.DownloadError) as raised:
        resolve_bpe_files()
    assert str(raised.value).startswith(
        f"cannot download https://dl.fbaipublicfiles.com/fairseq/gpt2_bpe/encoder.json to {tmp_path / 'cache'}"
    )
    assert str(raised.value).endswith(
        "offline mode is on (offline=True or ROBERTA_EXT_OFFLINE=1) and it is not in the cache; "
        "run once online, or pass a local directory or archive instead"
    )
    assert download_from == []


# --------------------------------------------------------------------------------- cutting one file


def test_the_header_line_is_skipped_and_each_column_cut_as_cut_f_does(tmp_path):
    text = "index\tsentence1\tsentence2\tlabel\n0\t A \tb\tentailment\n1\tc\t\tnot_entailment\textra\tcolumns\n"
    result, files, scores = cut_one(tmp_path, "RTE", "train", text, labels := set())
    assert files == {
        "train.label": b"entailment\nnot_entailment\n",
        "train.raw.input0": b" A \nc\n",
        "train.raw.input1": b"b\n\n",
    }
    assert (result.stem, result.split, result.rows, result.dropped, scores) == ("train", "train", 2, [], None)
    assert labels == {"entailment", "not_entailment"}


def test_cola_train_and_dev_have_no_header_line_but_its_test_has(tmp_path):
    rows = "gj04\t1\t\tThe sailors rode.\ngj04\t0\t*\tThe sailors rode the.\n"
    result, files, _ = cut_one(tmp_path, "CoLA", "train", rows)
    assert (files["train.raw.input0"], files["train.label"], result.rows) == (
        b"The sailors rode.\nThe sailors rode the.\n",
        b"1\n0\n",
        2,
    )
    result, files, _ = cut_one(tmp_path, "CoLA", "test", "index\tsentence\n0\tFirst.\n1\tSecond.")
    assert (files["test.raw.input0"], result.rows, result.split) == (b"First.\nSecond.\n", 2, "test")
    assert "test.label" not in files and "test.raw.input1" not in files


def test_crlf_line_ends_keep_their_carriage_return_in_the_last_field_as_cut_does(tmp_path):
    text = "index\tsentence1\tsentence2\tlabel\r\n0\ta\tb\tentailment\r\n"
    result, files, _ = cut_one(tmp_path, "RTE", "dev", text, {"entailment"})
    assert files["dev.label"] == b"entailment\r\n" and files["dev.raw.input1"] == b"b\n"
    assert (result.split, result.rows) == ("valid", 1)


def test_mnli_dev_files_take_their_label_from_gold_label(tmp_path):
    fields = [str(i) for i in range(1, 17)]
    fields[8], fields[9], fields[11], fields[15] = "premise", "hypothesis", "neutral", "contradiction"
    header = "\t".join(f"h{i}" for i in range(16)) + "\n"
    result, files, _ = cut_one(tmp_path, "MNLI", "dev_mismatched", header + "\t".join(fields) + "\n", {"contradiction"})
    assert files == {
        "dev_mismatched.label": b"contradiction\n",
        "dev_mismatched.raw.input0": b"premise\n",
        "dev_mismatched.raw.input1": b"hypothesis\n",
    }
    assert result.split == "valid1"


def test_sst2_test_files_read_their_own_column(tmp_path):
    _, files, _ = cut_one(tmp_path, "SST-2", "test", "index\tsentence\n0\tit is good\n")
    assert files == {"test.raw.input0": b"it is good\n"}


QQP_HEADER = "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"


def test_qqp_train_and_dev_rows_without_exactly_6_columns_are_dropped_and_their_lines_kept(tmp_path):
    text = QQP_HEADER + "0\t1\t2\tq1?\tq2?\t0\n" + "1\t3\t4\tWhat is a\n" + "river?\tb?\t1\n"
    text += "2\t5\t6\ta\tb\tc?\t1\n" + "3\t7\t8\tq3?\tq4?\t1\n"
    result, files, _ = cut_one(tmp_path, "QQP", "train", text)
    assert result.dropped == [3, 4, 5] and result.rows == 2
    assert files == {"train.label": b"0\n1\n", "train.raw.input0": b"q1?\nq3?\n", "train.raw.input1": b"q2?\nq4?\n"}


def test_qqp_test_rows_are_not_dropped_an_empty_question_is_kept(tmp_path):
    result, files, _ = cut_one(tmp_path, "QQP", "test", "id\tquestion1\tquestion2\n0\ta?\t\n1\tb?\tc?\textra\n")
    assert (result.rows, result.dropped) == (2, [])
    assert files == {"test.raw.input0": b"a?\nb?\n", "test.raw.input1": b"\nc?\n"}


def test_qqp_rows_that_are_all_dropped_leave_no_rows(tmp_path):
    path = tmp_path / "glue" / "QQP" / "dev.tsv"
    with pytest.raises(CorpusError, match=re.escape(f"{path}: no rows after the header line") + "$"):
        cut_one(tmp_path, "QQP", "dev", QQP_HEADER + "0\t1\t2\tq1?\n")


@pytest.mark.parametrize(
    ("task", "stem", "text", "line", "expected"),
    [
        (
            "RTE",
            "test",
            "h\n0\ta\tb\n2\tonly one text\n",
            3,
            "RTE's test.tsv rows need column 3 (a text), but this row has 2 tab-separated columns",
        ),
        (
            "SST-2",
            "train",
            "h\nno tab at all\n",
            2,
            "SST-2's train.tsv rows need column 2 (the label), but this row has 1 tab-separated column",
        ),
        (
            "CoLA",
            "dev",
            "\n",
            1,
            "CoLA's dev.tsv rows need columns 2 (the label), 4 (a text), but this row has 1 tab-separated column",
        ),
        (
            "MNLI",
            "dev_matched",
            "h\n0\t1\t2\t3\tfour\n",
            2,
            "MNLI's dev_matched.tsv rows need columns 9 (a text), "
            "10 (a text), 16 (the label), but this row has 5 tab-separated columns",
        ),
        (
            "MNLI",
            "train",
            "h\n" + "\t".join("abcdefghij") + "\tk\n",
            2,
            "MNLI's train.tsv rows need column 12 (the label), but this row has 11 tab-separated columns",
        ),
        (
            "MRPC",
            "test",
            "h\n0\t1\t2\tfirst\n",
            2,
            "MRPC's test.tsv rows need column 5 (a text), but this row has 4 tab-separated columns",
        ),
        (
            "QQP",
            "test",
            "h\n0\tonly one question\n",
            2,
            "QQP's test.tsv rows need column 3 (a text), but this row has 2 tab-separated columns",
        ),
    ],
)
def test_a_row_without_the_tasks_columns_names_file_line_and_columns(tmp_path, task, stem, text, line, expected):
    path = tmp_path / "glue" / task / f"{stem}.tsv"
    with pytest.raises(CorpusError, match=re.escape(f"{path}:{line}: {expected}") + "$"):
        cut_one(tmp_path, task, stem, text, {"0"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            b"h\n0\tok\tb\tentailment\n5\tcaf\xe9s\tb\tentailment\n",
            "3: column 2 is not valid UTF-8 (invalid continuation byte at byte offset 3: b'\\xe9')",
        ),
        (
            b"h\n0\ta\t\xffb\tentailment\n",
            "2: column 3 is not valid UTF-8 (invalid start byte at byte offset 0: b'\\xff')",
        ),
        (
            b"h\n0\ta\tb\tentail\xc3\n",
            "2: column 4 is not valid UTF-8 (unexpected end of data at byte offset 6: b'\\xc3')",
        ),
        (b"h\n6\ta\rb\tc\tentailment\n", "2: column 2 contains a carriage return (\\r) inside the text"),
        (b"h\n6\ta\tb\r\r\tentailment\n", "2: column 3 contains a carriage return (\\r) inside the text"),
        (b"h\n6\ta\tb\tentail\rment\r\n", "2: column 4 contains a carriage return (\\r) inside the text"),
        (b"h\n6\ta\tb\t\rentailment\n", "2: column 4 contains a carriage return (\\r) inside the text"),
    ],
)
def test_a_field_that_would_break_the_scripts_line_tools_names_file_line_and_column(tmp_path, text, message):
    path = tmp_path / "glue" / "RTE" / "train.tsv"
    with pytest.raises(CorpusError, match=re.escape(f"{path}:{message}") + "$"):
        cut_one(tmp_path, "RTE", "train", text)


def test_a_text_ending_in_one_carriage_return_is_kept_whole(tmp_path):
    _, files, _ = cut_one(tmp_path, "RTE", "train", b"h\n0\ta\r\tb\r\tentailment\n")
    assert files["train.raw.input0"] == b"a\r\n" and files["train.raw.input1"] == b"b\r\n"


@pytest.mark.parametrize(
    ("label", "problem"),
    [("", "is empty"), (" ", "is empty"), ("\r", "is empty"), ("not entailed", "contains whitespace")]
    + [("a\u00a0b", "contains whitespace"), ("a\tb", None)],
)
def test_a_label_must_be_one_token(tmp_path, label, problem):
    path = tmp_path / "glue" / "QNLI" / "train.tsv"
    if problem is None:  # a tab makes another column: the label is the part before it
        _, files, _ = cut_one(tmp_path, "QNLI", "train", f"h\n0\tq\ts\t{label}\n")
        assert files["train.label"] == b"a\n"
        return
    message = f"{path}:2: column 4: the label {label!r} {problem}"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        cut_one(tmp_path, "QNLI", "train", f"h\n0\tq\ts\t{label}\n")


@pytest.mark.parametrize("label", ["<s>", "<pad>", "</s>", "<unk>", "madeupword0000", "madeupword"])
def test_fairseqs_reserved_symbols_cannot_be_labels(tmp_path, label):
    path = tmp_path / "glue" / "QNLI" / "train.tsv"
    message = f"{path}:3: column 4: {label!r} cannot be a label (fairseq's dictionaries reserve it)"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        cut_one(tmp_path, "QNLI", "train", f"h\n0\tq\ts\tentailment\n1\tq\ts\t {label} \n")


@pytest.mark.parametrize("label", ["<S>", "s", "unk", "amadeupword", "Madeupword1"])
def test_labels_like_the_reserved_symbols_are_labels(tmp_path, label):
    labels: set[str] = set()
    _, files, _ = cut_one(tmp_path, "QNLI", "train", f"h\n0\tq\ts\t{label}\n", labels)
    assert labels == {label} and files["train.label"] == f"{label}\n".encode()


def test_a_dev_label_must_occur_in_train(tmp_path):
    labels = set()
    cut_one(tmp_path, "RTE", "train", "h\n0\ta\tb\tentailment\n", labels)
    assert labels == {"entailment"}
    result, files, _ = cut_one(tmp_path, "RTE", "dev", "h\n0\ta\tb\t entailment\r\n", labels)
    assert (result.rows, files["dev.label"]) == (1, b" entailment\r\n")
    path = tmp_path / "glue" / "RTE" / "dev.tsv"
    message = (
        f"{path}:3: column 4: the label 'neutral' does not occur in train.tsv (the label dictionary is built from "
        "train; fairseq-preprocess would write it as <unk>)"
    )
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        cut_one(tmp_path, "RTE", "dev", "h\n0\ta\tb\tentailment\n1\ta\tb\tneutral\n", labels)
    assert labels == {"entailment"}  # dev labels are not added


@pytest.mark.parametrize(
    ("task", "stem", "text", "suffix"),
    [("RTE", "train", "", " after the header line"), ("RTE", "test", "index\ts1\ts2\n", " after the header line")]
    + [("CoLA", "train", "", ""), ("CoLA", "dev", b"", "")],
)
def test_a_file_without_rows_is_refused(tmp_path, task, stem, text, suffix):
    path = tmp_path / "glue" / task / f"{stem}.tsv"
    with pytest.raises(CorpusError, match=re.escape(f"{path}: no rows{suffix}") + "$"):
        cut_one(tmp_path, task, stem, text)


# ------------------------------------------------------------------- reading a GLUE file to predict


@pytest.mark.parametrize(
    ("path", "split"),
    [("glue_data/MNLI/test_matched.tsv", "test"), ("test.tsv", "test"), ("RTE/dev.tsv", "dev"), ("train.tsv", "train")]
    + [("MNLI/dev_mismatched.tsv", "dev"), (Path("x/train_small.tsv"), "train"), ("test/dev.tsv", "dev")]
    + [("other.tsv", "dev"), ("train/test.tsv", "test")],
)
def test_glue_split_from_the_files_name(path, split):
    assert glue_split(path) == split


@pytest.mark.parametrize("name", list(SCRIPT))
def test_glue_layout_is_the_scripts_columns_minus_one(name):
    inputs, test_inputs, label, dev_label, _ = SCRIPT[name]
    for split in ("train", "dev", "test"):
        layout = glue_layout(TASKS[name], split)
        texts = test_inputs if split == "test" else inputs
        gold = None if split == "test" else (dev_label or label) if split == "dev" else label
        assert layout == GlueLayout(
            Columns(tuple(str(c - 1) for c in texts), None if gold is None else str(gold - 1)),
            header=not (name == "CoLA" and split != "test"),
            exact_fields=6 if name == "QQP" and split != "test" else None,
        ), split


# ------------------------------------------------------------ the command: refusals before any work


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


# -------------------------------------------------------- the command: the same bytes as the script


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


# ---------------------------------------------------------- the command: what the script gets wrong


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
