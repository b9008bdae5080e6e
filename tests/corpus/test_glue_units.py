"""``roberta_ext/corpus/glue.py`` part by part, fast: each task's columns and labels against
fairseq's ``examples/roberta/preprocess_GLUE_tasks.sh`` (its ``cut -f`` and ``awk`` rules), STS-B's
scores against the real ``awk``, the BPE files (a folder, or the download cache), the cutting of
every split and every message naming file and line, and the layout ``predict --glue-task`` reads.
The whole command is in ``tests/corpus/test_glue_preprocess.py``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from roberta_ext import download as cache
from roberta_ext.corpus import CorpusError, glue
from roberta_ext.corpus.glue import (
    GLUE_REGRESSION_SCALE,
    TASKS,
    GlueLayout,
    GlueTask,
    awk_number,
    glue_layout,
    glue_split,
    resolve_bpe_files,
    resolve_tasks,
)
from roberta_ext.corpus.rows import Columns


def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


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


# ------------------------------------------------------------------- resolve_tasks


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


# ------------------------------------------------------------------- awk_number and STS-B's scores

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


# ------------------------------------------------------------------- resolve_bpe_files


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


# ------------------------------------------------------------------- cutting one file


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
