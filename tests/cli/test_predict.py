"""roberta_ext/cli/predict.py: ``roberta-ext predict`` in-process, as a user meets it. Its parser
(options, defaults, help, usage errors), the refusals made before the model loads, how the
input is read (format, columns, header line, GLUE's layouts), what it asks ``predict_file`` for
(with a recorder in its place) and what it reports; one real run on a 1-layer RoBERTa with a
two-class head. The predictions themselves are tests/test_predict.py's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roberta_ext.cli import predict as command
from roberta_ext.cli.arguments import MODEL_FILES, MODEL_OPTIONS
from roberta_ext.corpus.glue import TASKS
from roberta_ext.corpus.rows import Columns
from roberta_ext.inference.predict import PredictStats
from tests.cli.test_arguments import MODEL_DEFAULTS, helps, ran, write_lines
from tests.test_hub import make_model_dir

PROG = "roberta-ext predict"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_files) -> Path:
    """``input0/dict.txt`` and ``label/dict.txt`` (``neg``, ``pos``), as fine-tuning leaves them."""
    return make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, layers=1, labels=["neg", "pos"])


class Recorder:
    """``predict_file`` replaced: records the reader and the keywords it was called with, returns
    ``stats``."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.stats = PredictStats(rows=3, head="sentence_classification_head", seconds=0.5)

    def __call__(self, model, inputs, rows, output, **options) -> PredictStats:
        assert model.cfg.encoder_layers == 1  # the model MODEL names, loaded
        self.calls.append({"rows": rows, "output": output, **options})
        return self.stats

    @property
    def reader(self):
        (call,) = self.calls
        rows = call["rows"]
        return rows.format, rows.columns, rows.header, rows.exact_fields


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(command, "predict_file", recorder)
    return recorder


def run(argv: list, capsys) -> tuple[int, str, str]:
    """The command's exit status, stdout and stderr."""
    return ran(command.main, argv, capsys)


def test_the_options_and_their_defaults():
    parser = command.build_parser()
    assert parser.prog == PROG
    args = vars(parser.parse_args(["m", "--input", "dev.tsv", "--output", "out.tsv"]))
    assert args == {
        "model": "m",
        **MODEL_DEFAULTS,
        "head": None,
        "input": "dev.tsv",
        "format": None,
        "glue_task": None,
        "glue_split": None,
        "columns": None,
        "fields": None,
        "header": None,
        "truncate": False,
        "output": "out.tsv",
        "output_format": None,
        "probabilities": False,
        "regression": None,
        "regression_scale": None,
        "metrics": None,
        "metrics_file": None,
        "force": False,
        "max_tokens": 8192,
        "batch_size": 256,
        "chunk_rows": 10_000,
        "progress": None,
    }
    given = parser.parse_args(
        "m --input - --output - --head h --format jsonl --glue-task RTE --glue-split test --columns 1 --fields t "
        "--header --truncate --output-format jsonl --probabilities --regression --regression-scale 2.5 "
        "--metrics f1 --metrics-file m.json --overwrite --max-tokens 64 --batch-size 4 --chunk-rows 9 "
        "--no-progress".split()
    )
    assert {name: value for name, value in vars(given).items() if name not in MODEL_FILES} == {
        "model": "m",
        "device": "auto",
        "dtype": "float32",
        "threads": None,
        "head": "h",
        "input": "-",
        "format": "jsonl",
        "glue_task": "RTE",
        "glue_split": "test",
        "columns": "1",
        "fields": "t",
        "header": True,
        "truncate": True,
        "output": "-",
        "output_format": "jsonl",
        "probabilities": True,
        "regression": True,
        "regression_scale": 2.5,
        "metrics": "f1",
        "metrics_file": "m.json",
        "force": True,
        "max_tokens": 64,
        "batch_size": 4,
        "chunk_rows": 9,
        "progress": False,
    }
    other = parser.parse_args("m --input i --output o --no-header --no-regression --max-batch-tokens 32".split())
    assert (other.header, other.regression, other.max_tokens) == (False, False, 32)


def test_the_help_says_what_each_option_does():
    parser = command.build_parser()
    assert parser.description == (
        "Predict with a fine-tuned model's classification or regression head for every row of a TSV, JSONL or text "
        "file, and write them in input order: 'index<TAB>prediction' (GLUE's submission format; the prediction is the "
        "label name from label/dict.txt, or the regression value) or JSON lines. When the input has labels, print the "
        "metrics (accuracy; F1, MCC, Pearson, Spearman as asked or as the GLUE task is scored) as fairseq's "
        "sentence_prediction criterion computes them. The file is read in chunks, each run in length-sorted batches; "
        "the output is written whole or not at all ('-': to standard output, as the rows are predicted)."
    )
    assert parser.epilog == (
        "example: roberta-ext predict checkpoints --checkpoint-file checkpoint_best.pt --data-name-or-path RTE-bin "
        "--glue-task RTE --input glue_data/RTE/dev.tsv --output RTE.tsv"
    )
    options = helps(parser)
    own = {name: text for name, text in options.items() if name not in MODEL_OPTIONS}
    assert own == {
        "-h": "show this help message and exit",
        "--head": "classification head (default: the model's only one)",
        "--input": "the rows to predict ('-': standard input)",
        "--format": "input format (default: from the suffix: .tsv; .jsonl, .ndjson, .json)",
        "--glue-task": "read a GLUE TSV as fairseq's preprocess_GLUE_tasks.sh does: its columns for the task and "
        "split, its header lines, its metrics: QQP, MNLI, QNLI, MRPC, RTE, STS-B, SST-2, CoLA",
        "--glue-split": "which file of the GLUE task this is (default: from its name: test*, train*, else dev)",
        "--columns": "TSV: the text column, a second one for pairs, and the label as label=COL: 0-based numbers or "
        "header names, e.g. '1,2,label=3' or 'sentence1,sentence2,label=label'",
        "--fields": "JSONL: the text field, a second one for pairs, and the label as label=FIELD (default: text, and "
        "text_pair and label when the first object has them)",
        "--header": "the TSV starts with a header line (default: when --columns names a column, or as --glue-task "
        "says)",
        "--truncate": "cut rows longer than the model's positions at the end (fairseq's --shorten-method truncate); "
        "default: such a row is an error",
        "--output": "predictions file to write ('-': standard output)",
        "--output-format": "default: from the suffix, jsonl for .jsonl, else tsv (a format given here wins)",
        "--probabilities": "add each class's softmax probability (prob_<label> columns)",
        "--regression": "treat the head as a regression head (default: when it has one output)",
        "--regression-scale": "multiply regression outputs by X (default: 5 for --glue-task STS-B, trained on scores "
        "/ 5, else 1)",
        "--metrics": "metrics to print for labelled input, from accuracy, f1, mcc, pearson, spearman (default: the "
        "GLUE task's; else accuracy for classification, pearson,spearman for regression)",
        "--metrics-file": "also write the metrics (fractions) as JSON",
        "--force": "replace an existing --output or --metrics-file (default: refuse to)",
        "--max-batch-tokens": "padded tokens (rows x longest row) per batch, at most (default: 8192; a longer row "
        "goes alone)",
        "--batch-size": "rows per batch, at most (default: 256)",
        "--chunk-rows": "rows read and length-sorted at a time; bounds the memory (default: 10000)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal)",
    }
    usage = " ".join(parser.format_usage().split())
    assert usage.endswith(
        "[--threads N] [--head NAME] --input FILE [--format {text,tsv,jsonl}] [--glue-task TASK] [--glue-split "
        "{train,dev,test}] [--columns COLS] [--fields FIELDS] [--header | --no-header] [--truncate] --output FILE "
        "[--output-format {tsv,jsonl}] [--probabilities] [--regression | --no-regression] [--regression-scale X] "
        "[--metrics LIST] [--metrics-file FILE] [--force] [--max-batch-tokens N] [--batch-size N] [--chunk-rows N] "
        "[--progress | --no-progress] MODEL"
    )
    titles = {group.title: [action.dest for action in group._group_actions] for group in parser._action_groups}
    assert titles["input"] == ["input", "format", "glue_task", "glue_split", "columns", "fields", "header", "truncate"]
    assert titles["output"] == [
        *("output", "output_format", "probabilities", "regression", "regression_scale", "metrics", "metrics_file"),
        "force",
    ]
    assert titles["batching"] == ["max_tokens", "batch_size", "chunk_rows"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["m", "--output", "o"], "the following arguments are required: --input"),
        (["m", "--input", "i"], "the following arguments are required: --output"),
        (["m", "--input", "i", "--output", "o", "--glue-split", "val"], "argument --glue-split: invalid choice: "),
        (
            ["m", "--input", "i", "--output", "o", "--output-format", "csv"],
            "argument --output-format: invalid choice: ",
        ),
        (["m", "--input", "i", "--output", "o", "--batch-size", "0"], "argument --batch-size: must be >= 1, got 0"),
        (["m", "--input", "i", "--output", "o", "--chunk-rows", "0"], "argument --chunk-rows: must be >= 1, got 0"),
        (
            ["m", "--input", "i", "--output", "o", "--max-tokens", "0"],
            "argument --max-batch-tokens: must be >= 1, got 0",
        ),
    ],
    ids=["no-input", "no-output", "glue-split", "output-format", "batch-size", "chunk-rows", "max-tokens"],
)
def test_usage_errors_exit_2_with_argparse_s_line(argv, message, capsys, recorder):
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"{PROG}: error: {message}")
    assert recorder.calls == []


def test_what_cannot_be_read_is_refused_in_one_line_before_the_model_loads(tmp_path, capsys, recorder):
    missing = tmp_path / "no-such-model"  # never read: each refusal comes first
    dev = write_lines(tmp_path / "dev.tsv", "a\tb")
    jsonl = tmp_path / "dev.jsonl"
    jsonl.write_text('{"text": "a"}\n', encoding="utf-8")
    refusals = [
        (["--glue-task", "all"], "--glue-task takes one task: the one the model was fine-tuned on"),
        (["--glue-task", "ALL"], "--glue-task takes one task: the one the model was fine-tuned on"),
        (["--glue-task", "RTE", "--format", "jsonl"], "--glue-task reads TSV files, not jsonl"),
        (["--glue-task", "RTE", "--format", "text"], "--glue-task reads TSV files, not text"),
        (
            ["--glue-task", "STSB"],
            "unknown GLUE task 'STSB'; choose from ALL, QQP, MNLI, QNLI, MRPC, RTE, STS-B, SST-2, CoLA",
        ),
        (["--format", "jsonl", "--columns", "0"], f"--columns is for TSV input; {dev} is read as jsonl (see --format)"),
        (["--format", "text", "--columns", "0"], f"--columns is for TSV input; {dev} is read as text (see --format)"),
        (["--fields", "text"], f"--fields is for JSONL input; {dev} is read as tsv (see --format)"),
        (["--format", "text", "--fields", "t"], f"--fields is for JSONL input; {dev} is read as text (see --format)"),
        (
            ["--columns", "1,2,3,label=0"],
            "--columns/--fields '1,2,3,label=0': give one text column, or two for "
            "sentence pairs (and the label as label=COLUMN), not 3",
        ),
        ([], f"{dev}: a TSV input needs its columns (--columns) to say which to read"),
        (
            ["--columns", "sentence", "--no-header"],
            f"{dev}: column 'sentence' is a name, but the file is read without a header",
        ),
    ]
    for options, message in refusals:
        status, out, err = run([missing, "--input", dev, "--output", tmp_path / "out.tsv", *options], capsys)
        assert (status, out, err) == (1, "", f"{PROG}: error: {message}\n"), options
    status, out, err = run([missing, "--input", jsonl, "--output", tmp_path / "out.tsv", "--columns", "0"], capsys)
    assert err == f"{PROG}: error: --columns is for TSV input; {jsonl} is read as jsonl (see --format)\n"
    assert recorder.calls == [] and sorted(path.name for path in tmp_path.iterdir()) == ["dev.jsonl", "dev.tsv"]
    # What passes those checks goes on to load MODEL (here: missing).
    for options in (["--columns", "0"], ["--glue-task", "rte"], ["--glue-task", "RTE", "--format", "tsv"]):
        status, out, err = run([missing, "--input", dev, "--output", tmp_path / "out.tsv", *options], capsys)
        assert status == 1 and err.startswith(f"{PROG}: error: cannot load the model from {missing}: "), err


def test_existing_outputs_are_replaced_only_with_force(model_dir, tmp_path, capsys, recorder):
    dev = write_lines(tmp_path / "dev.tsv", "a")
    output, metrics = tmp_path / "out.tsv", tmp_path / "metrics.json"
    common = [model_dir, "--input", dev, "--columns", "0", "--output", output, "--metrics-file", metrics]
    output.write_text("mine")
    assert run(common, capsys) == (
        1,
        "",
        f"{PROG}: error: --output {output} exists; refusing to replace it (use --force)\n",
    )
    output.unlink()
    metrics.write_text("mine")
    assert run(common, capsys) == (
        1,
        "",
        f"{PROG}: error: --metrics-file {metrics} exists; refusing to replace it (use --force)\n",
    )
    assert recorder.calls == [] and metrics.read_text() == "mine"
    output.write_text("mine")
    assert run([*common, "--force"], capsys)[0] == 0 and len(recorder.calls) == 1
    assert json.loads(metrics.read_text()) == {"rows": 3}  # the recorder wrote no output; the metrics file is new
    recorder.calls.clear()
    assert (
        run([model_dir, "--input", dev, "--columns", "0", "--output", "-"], capsys)[0] == 0
    )  # '-' is never "existing"
    assert recorder.calls[0]["output"] == "-"


def test_standard_output_is_never_an_existing_file(model_dir, tmp_path, capsys, recorder, monkeypatch):
    """``--output -`` is standard output even where a file named ``-`` exists (it is left alone)."""
    monkeypatch.chdir(tmp_path)
    dev = write_lines(tmp_path / "dev.tsv", "a")
    Path("-").write_text("mine")
    assert run([model_dir, "--input", dev, "--columns", "0", "--output", "-"], capsys)[0] == 0
    assert recorder.calls[0]["output"] == "-" and Path("-").read_text() == "mine"


def test_how_the_input_is_read(model_dir, tmp_path, capsys, recorder):
    """Format, columns and header line from the options, else the GLUE task's layout for the
    file's split (fairseq's preprocess_GLUE_tasks.sh), else the suffix."""
    rte = tmp_path / "RTE"
    rte.mkdir()
    files = {
        name: write_lines(rte / name, "index\tsentence1\tsentence2\tlabel")
        for name in ("dev.tsv", "test.tsv", "train.tsv")
    }
    cola = write_lines(tmp_path / "in_domain_dev.tsv", "gj04\t1\t\tWe ran.")
    text, jsonl = write_lines(tmp_path / "notes.txt", "a"), write_lines(tmp_path / "rows.ndjson", '{"text": "a"}')
    qqp = write_lines(tmp_path / "QQP-dev.tsv", "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate")
    cases = [
        ([files["dev.tsv"], "--glue-task", "RTE"], ("tsv", Columns(("1", "2"), "3"), True, None)),
        ([files["test.tsv"], "--glue-task", "rte"], ("tsv", Columns(("1", "2"), None), True, None)),
        ([files["train.tsv"], "--glue-task", "RTE"], ("tsv", Columns(("1", "2"), "3"), True, None)),
        (
            [files["test.tsv"], "--glue-task", "RTE", "--glue-split", "dev"],
            ("tsv", Columns(("1", "2"), "3"), True, None),
        ),
        ([qqp, "--glue-task", "QQP"], ("tsv", Columns(("3", "4"), "5"), True, TASKS["QQP"].exact_columns)),
        ([cola, "--glue-task", "CoLA"], ("tsv", Columns(("3",), "1"), False, None)),
        ([cola, "--glue-task", "CoLA", "--header"], ("tsv", Columns(("3",), "1"), True, None)),
        (
            [cola, "--glue-task", "CoLA", "--columns", "3"],
            (
                "tsv",
                Columns(
                    ("3",),
                ),
                False,
                None,
            ),
        ),
        (
            [files["dev.tsv"], "--glue-task", "RTE", "--columns", "sentence1,label=label"],
            ("tsv", Columns(("sentence1",), "label"), True, None),
        ),
        ([text, "--glue-task", "CoLA"], ("tsv", Columns(("3",), "1"), False, None)),  # GLUE's files are TSV
        ([text, "--glue-task", "CoLA", "--format", "tsv"], ("tsv", Columns(("3",), "1"), False, None)),
        ([text], ("text", None, False, None)),
        ([jsonl], ("jsonl", None, False, None)),
        ([jsonl, "--fields", "text,label=gold"], ("jsonl", Columns(("text",), "gold"), False, None)),
        ([text, "--format", "jsonl", "--fields", "t"], ("jsonl", Columns(("t",)), False, None)),
        ([files["dev.tsv"], "--columns", "1,2,label=3"], ("tsv", Columns(("1", "2"), "3"), False, None)),
        ([files["dev.tsv"], "--columns", "1,2,label=3", "--header"], ("tsv", Columns(("1", "2"), "3"), True, None)),
        ([files["dev.tsv"], "--columns", "sentence1"], ("tsv", Columns(("sentence1",)), True, None)),
    ]
    for options, expected in cases:
        recorder.calls.clear()
        status, out, err = run([model_dir, "--input", *options, "--output", tmp_path / "out.tsv", "--force"], capsys)
        assert status == 0, err
        assert recorder.reader == expected, options
        call = recorder.calls[0]
        assert call["rows"].path == str(options[0]) and call["where"] == str(options[0])
        assert call["rows"].log is command.sys.stderr


def test_the_options_reach_predict_file(model_dir, tmp_path, capsys, recorder, threads_asked):
    dev = write_lines(tmp_path / "dev.tsv", "a")
    stsb = write_lines(
        tmp_path / "sts.tsv", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"
    )
    default = dict(
        labels=["neg", "pos"], head=None, output_format="tsv", probabilities=False, regression=None,
        regression_scale=1.0, metrics=None, max_tokens=8192, batch_size=256, chunk_rows=10_000, truncate=False,
        progress=False, total=None,
    )  # fmt: skip
    runs = [
        (["--columns", "0"], "out.tsv", {}),
        (
            ["--columns", "0", "--head", "h", "--probabilities", "--truncate"],
            "out.tsv",
            dict(head="h", probabilities=True, truncate=True),
        ),
        (
            ["--columns", "0", "--regression", "--regression-scale", "2.5"],
            "o.tsv",
            dict(regression=True, regression_scale=2.5),
        ),
        (["--columns", "0", "--no-regression"], "o.txt", dict(regression=False)),
        (["--columns", "0", "--metrics", "f1,mcc"], "o.jsonl", dict(metrics=["f1", "mcc"], output_format="jsonl")),
        (["--columns", "0", "--output-format", "jsonl"], "o.tsv", dict(output_format="jsonl")),
        (
            ["--columns", "0", "--max-tokens", "64", "--batch-size", "3", "--chunk-rows", "7"],
            "o",
            dict(max_tokens=64, batch_size=3, chunk_rows=7),
        ),
        (["--columns", "0", "--progress"], "o.tsv", dict(progress=True, total=1)),
        (
            ["--glue-task", "STS-B", "--input", stsb],
            "o.tsv",
            dict(regression_scale=5.0, metrics=["pearson", "spearman"]),
        ),
        (
            ["--glue-task", "STS-B", "--input", stsb, "--regression-scale", "1"],
            "o.tsv",
            dict(regression_scale=1.0, metrics=["pearson", "spearman"]),
        ),
        (
            ["--glue-task", "STS-B", "--input", stsb, "--metrics", "pearson"],
            "o.tsv",
            dict(regression_scale=5.0, metrics=["pearson"]),
        ),
        (["--glue-task", "MRPC"], "o.tsv", dict(metrics=["accuracy", "f1"])),
    ]
    for options, output, expected in runs:
        recorder.calls.clear()
        status, out, err = run([model_dir, "--input", dev, *options, "--output", tmp_path / output, "--force"], capsys)
        assert status == 0, err
        ((call,),) = [recorder.calls]
        given = {name: value for name, value in call.items() if name not in ("rows", "output", "where")}
        assert given == {**default, **expected}, options
        assert call["output"] == str(tmp_path / output)
    assert threads_asked == [None, None] * len(runs)  # torch's threads left alone
    recorder.calls.clear()
    threads_asked.clear()
    assert run([model_dir, "--input", dev, "--columns", "0", "--output", "-", "--threads", "3"], capsys)[0] == 0
    assert threads_asked == [3, None] and recorder.calls[0]["total"] is None  # set for the run, then given back
    recorder.calls.clear()
    assert run([model_dir, "--input", "-", "--format", "text", "--output", "-", "--progress"], capsys)[0] == 0
    assert (recorder.calls[0]["total"], recorder.calls[0]["where"]) == (None, "<stdin>")  # stdin is not counted


def test_the_output_format_follows_the_suffix_and_output_format_wins(model_dir, tmp_path, capsys, recorder):
    dev = write_lines(tmp_path / "dev.tsv", "a")
    cases = [
        ("o.jsonl", [], "jsonl", ""),
        ("o.JSONL", [], "jsonl", ""),
        ("o.tsv", [], "tsv", ""),
        ("o.txt", [], "tsv", ""),
        ("o.tsv", ["--output-format", "tsv"], "tsv", ""),
        ("o", ["--output-format", "jsonl"], "jsonl", ""),  # no suffix to contradict
        ("o.txt", ["--output-format", "jsonl"], "jsonl", ""),
        (
            "o.tsv",
            ["--output-format", "jsonl"],
            "jsonl",
            f"{PROG}: note: writing jsonl to {tmp_path / 'o.tsv'} as asked, though its suffix .tsv usually means tsv\n",
        ),
        (
            "o.jsonl",
            ["--output-format", "tsv"],
            "tsv",
            f"{PROG}: note: writing tsv to {tmp_path / 'o.jsonl'} as asked, though its suffix .jsonl usually means "
            "jsonl\n",
        ),
    ]
    for output, options, format, note in cases:
        recorder.calls.clear()
        status, out, err = run(
            [model_dir, "--input", dev, "--columns", "0", "--output", tmp_path / output, *options], capsys
        )
        assert status == 0 and recorder.calls[0]["output_format"] == format, (output, options)
        assert err.startswith(note) and (out, err.count("\n")) == ("", 1 + note.count("\n"))


def test_the_report_names_rows_target_head_rate_and_metrics(model_dir, tmp_path, capsys, recorder):
    dev = write_lines(tmp_path / "dev.tsv", "a")
    out = tmp_path / "out.tsv"
    argv = [model_dir, "--input", dev, "--columns", "0", "--dtype", "float32", "--device", "cpu"]
    recorder.stats = PredictStats(rows=3, head="sentence_classification_head", seconds=0.5)
    assert run([*argv, "--output", out], capsys) == (
        0,
        "",
        f"3 rows -> {out} (head 'sentence_classification_head', 6 rows/s on cpu, float32)\n",
    )
    recorder.stats = PredictStats(rows=1, head="h", seconds=0.0, metrics={"accuracy": 0.845, "f1": 0.5})
    assert run([*argv, "--output", out, "--force"], capsys) == (
        0,
        "accuracy 84.5 | f1 50.0\n",
        f"1 row -> {out} (head 'h', 0 rows/s on cpu, float32)\n",
    )
    assert run([*argv, "--output", "-"], capsys) == (
        0,
        "",
        "1 row -> standard output (head 'h', 0 rows/s on cpu, float32)\naccuracy 84.5 | f1 50.0\n",
    )
    metrics_file = tmp_path / "metrics.json"
    assert run([*argv, "--output", "-", "--metrics-file", metrics_file], capsys)[0] == 0
    assert metrics_file.read_text() == '{\n  "rows": 1,\n  "accuracy": 0.845,\n  "f1": 0.5\n}\n'
    recorder.stats = PredictStats(rows=2500, head="h", seconds=2.0)
    assert (
        run([*argv, "--output", out, "--force"], capsys)[2]
        == f"2500 rows -> {out} (head 'h', 1250 rows/s on cpu, float32)\n"
    )


@pytest.mark.parametrize(
    "output, options, message",
    [
        ("-", [], "wrote only the header line to standard output"),
        ("-", ["--output-format", "jsonl"], "wrote nothing to standard output"),
        ("out.tsv", [], "wrote a header-only {out}"),
        ("out.jsonl", [], "wrote an empty {out}"),
    ],
    ids=["stdout-tsv", "stdout-jsonl", "tsv", "jsonl"],
)
def test_an_input_without_rows_is_said_not_an_error(model_dir, tmp_path, capsys, recorder, output, options, message):
    dev = write_lines(tmp_path / "dev.tsv")
    out = output if output == "-" else tmp_path / output
    recorder.stats = PredictStats(rows=0, head="h")
    status, stdout, err = run([model_dir, "--input", dev, "--columns", "0", "--output", out, *options], capsys)
    assert (status, stdout, err) == (0, "", f"{PROG}: {dev} has 0 rows; {message.format(out=out)}\n")


def test_a_real_run_writes_the_predictions_and_the_metrics(model_dir, tmp_path, capsys):
    """The command end to end on three labelled rows (predictions as tests/test_predict.py checks them)."""
    dev = write_lines(tmp_path / "dev.tsv", "Hello world!\tpos", "It is a test.\tneg", "Hi\tpos")
    output, metrics_file = tmp_path / "out.tsv", tmp_path / "metrics.json"
    status, out, err = run(
        [model_dir, "--input", dev, "--columns", "0,label=1", "--output", output, "--metrics-file", metrics_file,
         "--device", "cpu"],
        capsys,
    )  # fmt: skip
    assert status == 0, err
    header, *rows = output.read_text().splitlines()
    assert header == "index\tprediction" and [row.split("\t")[0] for row in rows] == ["0", "1", "2"]
    predicted = [row.split("\t")[1] for row in rows]
    assert set(predicted) <= {"neg", "pos"}
    accuracy = sum(p == gold for p, gold in zip(predicted, ["pos", "neg", "pos"])) / 3
    assert json.loads(metrics_file.read_text()) == {"rows": 3, "accuracy": pytest.approx(accuracy)}
    assert out == f"accuracy {round(accuracy * 100, 1)}\n"
    assert err.startswith(f"3 rows -> {output} (head 'sentence_classification_head', ") and err.endswith(
        " rows/s on cpu, float32)\n"
    )
