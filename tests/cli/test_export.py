"""roberta_ext/cli/export.py: ``roberta-ext export`` in-process, as a user meets it. Its parser
(options, defaults, help, usage errors), the refusals made before the model loads, and what it
asks the library to write, with the library's writers replaced by recorders (the exports
themselves, of 2-layer models, are tests/export/test_export.py's): the model is a 1-layer RoBERTa
with a two-class sentence head."""

from __future__ import annotations

from pathlib import Path

import pytest

from roberta_ext.cli import export as command
from roberta_ext.export import ExportCheckError
from tests.cli.test_arguments import MODEL_DEFAULTS, helps, ran
from tests.test_hub import make_model_dir

PROG = "roberta-ext export"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_files) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, layers=1, labels=["neg", "pos"])


@pytest.fixture
def written(monkeypatch) -> list[tuple[str, Path, dict]]:
    """The command's calls of ``to_onnx`` / ``to_torch_export`` (format, path, keywords),
    recorded instead of exporting."""
    calls: list[tuple[str, Path, dict]] = []

    def recorder(format: str):
        def write(hub, path, **options):
            assert hub.model.cfg.encoder_layers == 1  # the model MODEL names, loaded
            calls.append((format, path, options))
            return path

        return write

    monkeypatch.setattr(command, "to_onnx", recorder("onnx"))
    monkeypatch.setattr(command, "to_torch_export", recorder("torch-export"))
    return calls


def run(argv: list[str], capsys) -> tuple[int, str]:
    """The command's exit status and what it wrote on stderr (nothing on stdout)."""
    status, out, err = ran(command.main, argv, capsys)
    assert out == ""
    return status, err


def test_the_options_and_their_defaults():
    parser = command.build_parser()
    assert parser.prog == PROG
    args = vars(parser.parse_args(["m", "--output", "model.onnx"]))
    assert args == {
        "model": "m",
        **MODEL_DEFAULTS,
        "device": "cpu",  # docs/export.md: "here: cpu by default"
        "format": None,
        "output": Path("model.onnx"),
        "head": None,
        "pooling": None,
        "normalize": None,
        "attention_mask": True,
        "opset": None,
        "check": True,
        "force": False,
        "progress": None,
    }
    given = parser.parse_args(
        "m --output o.pt2 --format onnx --head h --normalize --no-attention-mask --opset 18 --no-check --overwrite "
        "--progress".split()
    )
    assert (given.format, given.output, given.head, given.pooling) == ("onnx", Path("o.pt2"), "h", None)
    assert (given.normalize, given.attention_mask, given.opset, given.check, given.force, given.progress) == (
        True,
        False,
        18,
        False,
        True,
        True,
    )
    other = parser.parse_args("m --output o --format torch-export --pooling mean,cls --no-normalize --force".split())
    assert (other.format, other.pooling, other.normalize, other.force) == ("torch-export", "mean,cls", False, True)


def test_the_help_says_what_each_option_does(capsys):
    parser = command.build_parser()
    assert parser.description == (
        "Export a model's encoder (its features), one of its heads (--head: logits) or a pooled sentence embedding "
        "(--pooling) to ONNX, for onnxruntime, or to a torch.export program (.pt2). Inputs: input_ids (int64, batch x "
        "sequence, padded with <pad>) and attention_mask (int64, 1 on real tokens; a position is padding where it is "
        "0 or the id is <pad>); both axes are dynamic. The file is run on a padded batch and compared with the model "
        "before it is written, and is written whole or not at all."
    )
    assert parser.epilog == (
        "example: roberta-ext export checkpoints --checkpoint-file checkpoint_best.pt --output model.onnx; then "
        "onnxruntime.InferenceSession('model.onnx').run(None, {'input_ids': ids, 'attention_mask': mask})"
    )
    options = helps(parser)
    assert {name: options[name] for name in ("--format", "--output", "--head", "--pooling", "--normalize")} == {
        "--format": "onnx or torch-export (default: from the output's suffix: .pt2 torch-export, else onnx; a format "
        "given here wins over the suffix)",
        "--output": "file to write (.onnx or .pt2)",
        "--head": "output this classification or token head's logits",
        "--pooling": "output sentence embeddings pooled over the real tokens as hub.embed pools: mean, cls, max, "
        "mean_sqrt_len_tokens, weightedmean, lasttoken (several, comma-separated, are concatenated), or 'model': the "
        "model's own (a sentence-transformers folder's pooling and normalisation; else mean)",
        "--normalize": "L2-normalise the embeddings (default: as the model does with --pooling model, else not)",
    }
    assert {name: options[name] for name in ("--no-attention-mask", "--opset", "--no-check", "--force")} == {
        "--no-attention-mask": "the graph takes input_ids alone; padding is where the id is <pad> (fairseq's rule)",
        "--opset": "ONNX opset, 17 to 22 (default: 20); ONNX files are written in float32 or float16 (--dtype), .pt2 "
        "files in any --dtype but int8",
        "--no-check": "write without comparing outputs",
        "--force": "replace an existing --output (default: refuse to)",
    }
    assert "--progress" in options  # shown: the export draws a bar
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: roberta-ext export [-h]")
    assert "--output FILE" in text and "--opset N" in text and "--head NAME | --pooling MODE[,MODE]" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["m"], "the following arguments are required: --output"),
        (
            ["m", "--output", "o.onnx", "--head", "h", "--pooling", "mean"],
            "argument --pooling: not allowed with argument --head",
        ),
        (
            ["m", "--output", "o.onnx", "--format", "tflite"],
            "argument --format: invalid choice: 'tflite' (choose from onnx, torch-export)",
        ),
        (["m", "--output", "o.onnx", "--opset", "x"], "argument --opset: invalid int value: 'x'"),
        (["m", "--output", "o.onnx", "--format", "torch-export", "--opset", "18"], "--opset is for --format onnx"),
    ],
    ids=["no-output", "head-and-pooling", "format", "opset-not-a-number", "opset-for-torch-export"],
)
def test_usage_errors_exit_2_with_argparse_s_line(argv, message, capsys, written):
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    assert exit_.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    # Python 3.12.8 and later name the choices without quotes
    assert line.replace("'onnx', 'torch-export'", "onnx, torch-export") == f"{PROG}: error: {message}"
    assert written == []


def test_what_cannot_be_written_is_refused_in_one_line_before_the_model_loads(tmp_path, capsys, written):
    missing = tmp_path / "no-such-model"  # never read: each refusal comes first
    pt2, onnx, other = tmp_path / "m.pt2", tmp_path / "m.onnx", tmp_path / "m.bin"
    refusals = [
        (["--output", pt2, "--opset", "18"], f"--opset is for ONNX files, and {pt2} is written with torch.export"),
        (
            ["--output", onnx, "--dtype", "int8"],
            "int8 models are not exported: export the float32 model, then quantize the ONNX file with "
            "onnxruntime.quantization.quantize_dynamic (docs/export.md)",
        ),
        (
            ["--output", pt2, "--dtype", "int8"],
            "int8 models are not exported: export the float32 model, then "
            "quantize the ONNX file with onnxruntime.quantization.quantize_dynamic (docs/export.md)",
        ),
        (
            ["--output", other, "--opset", "23"],  # any other suffix: ONNX, checked as such
            f"{other}: opset 23: ONNX files are written at opsets 17 to 22 (default 20): torch's exporter cannot "
            "convert its graph to older ones, and onnxruntime cannot run the attention it writes at newer ones",
        ),
        (
            ["--output", pt2, "--format", "onnx", "--dtype", "bfloat16"],
            f"{pt2}: ONNX files in bfloat16 cannot be run by onnxruntime's CPU provider, which has no bfloat16 "
            "kernels (Add, MatMul, ...): export the model in float16 or float32 (--dtype) for ONNX, or as a "
            "torch.export .pt2 file (--format torch-export), which keeps bfloat16",
        ),
    ]
    for options, message in refusals:
        status, err = run([missing, *options], capsys)
        lines = err.splitlines()
        assert status == 1 and lines[-1] == f"{PROG}: error: {message}", err
    assert written == [] and sorted(tmp_path.iterdir()) == []
    # What passes those checks goes on to load MODEL (here: missing); a .pt2 keeps bfloat16.
    for options in (["--output", pt2, "--dtype", "bfloat16"], ["--output", onnx, "--opset", "17"]):
        status, err = run([missing, *options], capsys)
        assert status == 1 and err.startswith(f"{PROG}: error: cannot load the model from {missing}: "), err


def test_an_existing_output_is_replaced_only_with_force(model_dir, tmp_path, capsys, written):
    output = tmp_path / "model.onnx"
    output.write_text("mine")
    assert run([model_dir, "--output", output], capsys) == (
        1,
        f"{PROG}: error: refusing to overwrite {output} (use --force)\n",
    )
    assert written == [] and output.read_text() == "mine"
    status, err = run([model_dir, "--output", output, "--force"], capsys)
    assert status == 0 and [call[:2] for call in written] == [("onnx", output)]
    assert run([model_dir, "--output", tmp_path / "new.onnx"], capsys)[0] == 0  # a new file needs no --force


def test_the_format_follows_the_suffix_and_format_wins(model_dir, tmp_path, capsys, written):
    cases = [
        (["--output", tmp_path / "a.onnx"], "onnx", ""),
        (["--output", tmp_path / "b.pt2"], "torch-export", ""),
        (["--output", tmp_path / "c.PT2"], "torch-export", ""),
        (["--output", tmp_path / "d.bin"], "onnx", ""),  # any other suffix
        (["--output", tmp_path / "e"], "onnx", ""),
        (["--output", tmp_path / "f.onnx", "--format", "onnx"], "onnx", ""),
        (["--output", tmp_path / "e", "--format", "torch-export"], "torch-export", ""),  # no suffix to contradict
        (["--output", tmp_path / "d.bin", "--format", "torch-export"], "torch-export", ""),
        (
            ["--output", tmp_path / "g.pt2", "--format", "onnx"],
            "onnx",
            f"{PROG}: note: writing onnx to {tmp_path / 'g.pt2'} as asked, though its suffix .pt2 usually means "
            "torch-export\n",
        ),
        (
            ["--output", tmp_path / "h.onnx", "--format", "torch-export"],
            "torch-export",
            f"{PROG}: note: writing torch-export to {tmp_path / 'h.onnx'} as asked, though its suffix .onnx usually "
            "means onnx\n",
        ),
    ]
    for options, format, note in cases:
        written.clear()
        status, err = run([model_dir, *options], capsys)
        assert status == 0 and [(call[0], call[1]) for call in written] == [(format, options[1])], err
        assert err == f"{note}wrote {options[1]}: input_ids, attention_mask -> features\n"


def test_the_options_reach_the_writers(model_dir, tmp_path, capsys, written, threads_asked):
    """Defaults: features, the mask, checked, no bar off a terminal, the default opset (None:
    the library's 20), torch's threads left alone."""
    onnx, pt2 = tmp_path / "m.onnx", tmp_path / "m.pt2"
    default = dict(head=None, pooling=None, normalize=None, attention_mask=True, check=True, progress=False)
    runs = [
        ([onnx], "features", {**default, "opset": None}),
        ([pt2], "features", default),
        (
            [onnx, "--opset", "17", "--no-check", "--progress"],
            "features",
            {**default, "opset": 17, "check": False, "progress": True},
        ),
        (
            [pt2, "--head", "sentence_classification_head"],
            "logits",
            {**default, "head": "sentence_classification_head"},
        ),
        ([pt2, "--pooling", "mean"], "embeddings", {**default, "pooling": ["mean"]}),
        (
            [pt2, "--pooling", "mean,cls,max", "--normalize"],
            "embeddings",
            {**default, "pooling": ["mean", "cls", "max"], "normalize": True},
        ),
        (
            [onnx, "--pooling", "model", "--no-normalize"],
            "embeddings",
            {**default, "pooling": "model", "normalize": False, "opset": None},
        ),
    ]
    for options, output_name, expected in runs:
        written.clear()
        status, err = run([model_dir, "--output", *options], capsys)
        assert status == 0, err
        assert err == f"wrote {options[0]}: input_ids, attention_mask -> {output_name}\n"
        ((_, path, given),) = written
        assert path == options[0] and given == expected
    assert threads_asked == [None, None] * len(runs)
    written.clear()
    threads_asked.clear()
    assert run([model_dir, "--output", pt2, "--no-attention-mask", "--threads", "3"], capsys) == (
        0,
        f"wrote {pt2}: input_ids -> features\n",
    )
    assert written[0][2] == {**default, "attention_mask": False}
    assert threads_asked == [3, None]  # set for the run, then given back


@pytest.mark.parametrize(
    "options, message",
    [
        (
            ["--head", "nli"],
            "no head named 'nli'; the model's classification heads: ['sentence_classification_head'], token heads: []",
        ),
        (["--pooling", "mean,avg"], None),
        (["--normalize"], "normalize=True normalises pooled embeddings: give a pooling too"),
    ],
    ids=["head", "pooling", "normalize-without-pooling"],
)
def test_a_wrong_head_or_pooling_is_one_line_before_any_work(model_dir, tmp_path, capsys, written, options, message):
    from roberta_ext.embedding.pooling import check_modes

    if message is None:  # the pooling's own message
        with pytest.raises(ValueError) as refused:
            check_modes(["mean", "avg"])
        message = str(refused.value)
    output = tmp_path / "m.onnx"
    assert run([model_dir, "--output", output, *options], capsys) == (1, f"{PROG}: error: {message}\n")
    assert written == [] and not output.exists()


@pytest.mark.parametrize(
    "error, message",
    [
        (
            ExportCheckError("m.onnx: the exported graph's outputs differ from the model's"),
            "m.onnx: the exported graph's outputs differ from the model's",
        ),
        (ValueError("a value the writer refuses"), "a value the writer refuses"),
        (KeyError("a key the writer lacks"), "a key the writer lacks"),  # the key's text, not its repr
        (KeyError(), ""),
    ],
    ids=["check", "value", "key", "key-without-args"],
)
def test_a_writer_s_failure_is_one_line_and_exit_1(model_dir, tmp_path, capsys, monkeypatch, error, message):
    def fail(hub, path, **options):
        raise error

    monkeypatch.setattr(command, "to_torch_export", fail)
    assert run([model_dir, "--output", tmp_path / "m.pt2"], capsys) == (1, f"{PROG}: error: {message}\n")


def test_a_model_that_cannot_be_loaded_is_named(tmp_path, capsys, written):
    missing = tmp_path / "nothing-here"
    status, err = run([missing, "--output", tmp_path / "m.onnx"], capsys)
    assert (
        status == 1
        and err.startswith(f"{PROG}: error: cannot load the model from {missing}: ")
        and err.count("\n") == 1
    )
    assert written == []
