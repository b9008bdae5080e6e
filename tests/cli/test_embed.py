"""roberta_ext/cli/embed.py: ``roberta-ext embed`` and ``roberta-ext embed merge`` in-process, as a
user meets them. The parsers (options, defaults, help, usage errors), the refusals made before the
model loads, what they ask ``embed_file`` and ``merge_shards`` for (recorders in their place) and
what they report; one real sharded run and its merge on a 1-layer RoBERTa. The streaming, resuming
and locking themselves are tests/embedding/test_command.py's and test_stream_embed_file.py's."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import roberta_ext
from roberta_ext.cli import embed as command
from roberta_ext.cli.arguments import MODEL_OPTIONS
from roberta_ext.embedding.embedder import Embedder
from roberta_ext.embedding.stream import InputSpec, Options, Shard
from tests.cli.test_arguments import MODEL_DEFAULTS, helps, ran, write_lines
from tests.test_hub import make_model_dir

PROG = "roberta-ext embed"
MERGE = "roberta-ext embed merge"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_files) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, layers=1)


@pytest.fixture(autouse=True)
def no_torchrun(monkeypatch) -> None:
    """No ``RANK``/``WORLD_SIZE`` unless a test sets them: a single shard by default."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)


class Recorder:
    """``embed_file`` replaced: records what it was called with, returns ``receipt`` (or raises
    ``raises``)."""

    def __init__(self) -> None:
        self.calls: list[dict] = []
        self.receipt: dict = {"rows": 3, "dimension": 32, "skipped": []}
        self.raises: BaseException | None = None

    def __call__(self, embedder, spec, output, options, **keywords) -> dict:
        self.calls.append({"embedder": embedder, "spec": spec, "output": output, "options": options, **keywords})
        if self.raises is not None:
            raise self.raises
        return self.receipt

    @property
    def call(self) -> dict:
        (call,) = self.calls
        return call


@pytest.fixture
def recorder(monkeypatch) -> Recorder:
    recorder = Recorder()
    monkeypatch.setattr(command, "embed_file", recorder)
    return recorder


class MergeRecorder:
    """``merge_shards`` replaced: records the shards, output and keywords, returns ``receipt``."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, Path, dict]] = []
        self.receipt: dict = {"rows": 5, "dimension": 32, "skipped": []}

    def __call__(self, shards, output, **keywords) -> dict:
        self.calls.append((list(shards), output, keywords))
        return self.receipt


@pytest.fixture
def merged(monkeypatch) -> MergeRecorder:
    recorder = MergeRecorder()
    monkeypatch.setattr(command, "merge_shards", recorder)
    return recorder


def run(argv: list, capsys) -> tuple[int, str, str]:
    """The command's exit status, stdout and stderr."""
    return ran(command.main, argv, capsys)


def options(model: str, **given) -> Options:
    """The ``Options`` of a run with the defaults but ``given``."""
    defaults = dict(
        model=model, pooling=None, normalize=None, max_length=None, prompt=None, prompt_name=None, dtype="float32",
        skip_bad_lines=False, chunk_rows=8192, loaded_with=(),
    )  # fmt: skip
    return Options(**{**defaults, **given})


# ---------------------------------------------------------------------------------- parsers


def test_the_options_and_their_defaults():
    parser = command.build_parser()
    assert parser.prog == PROG
    args = vars(parser.parse_args(["m", "--input", "texts.txt", "--output", "emb.npy"]))
    assert args == {
        "model": "m",
        **MODEL_DEFAULTS,
        "input": Path("texts.txt"),
        "format": None,
        "field": [],
        "column": [],
        "header": None,
        "skip_bad_lines": False,
        "pooling": None,
        "normalize": None,
        "max_length": None,
        "truncate_dim": None,
        "prompt": None,
        "prompt_name": None,
        "output": Path("emb.npy"),
        "shard": None,
        "max_tokens": None,
        "chunk_rows": 8192,
        "force": False,
        "wait": False,
        "progress": None,
    }
    given = parser.parse_args(
        "m --input - --output o.safetensors --format tsv --column 1 --column b --header --skip-bad-lines "
        "--pooling cls,max --normalize --max-length 16 --truncate-dim 8 --prompt p: --shard 1/3 "
        "--max-batch-tokens 64 --chunk-rows 5 --overwrite --wait --progress".split()
    )
    own = {name: value for name, value in vars(given).items() if f"--{name.replace('_', '-')}" not in MODEL_OPTIONS}
    assert own == {
        "model": "m",
        "input": Path("-"),
        "format": "tsv",
        "field": [],
        "column": ["1", "b"],
        "header": True,
        "skip_bad_lines": True,
        "pooling": ("cls", "max"),
        "normalize": True,
        "max_length": 16,
        "truncate_dim": 8,
        "prompt": "p:",
        "prompt_name": None,
        "output": Path("o.safetensors"),
        "shard": Shard(1, 3),
        "max_tokens": 64,
        "chunk_rows": 5,
        "force": True,
        "wait": True,
        "progress": True,
    }
    other = parser.parse_args(
        "m --input i --output o --field q --field a --no-header --no-normalize --prompt-name query --max-tokens 32 "
        "--force --no-progress --pooling lasttoken".split()
    )
    assert (other.field, other.header, other.normalize, other.prompt_name, other.max_tokens) == (
        ["q", "a"],
        False,
        False,
        "query",
        32,
    )
    assert (other.force, other.progress, other.pooling) == (True, False, ("lasttoken",))


def test_the_help_says_what_each_option_does(capsys):
    parser = command.build_parser()
    assert parser.description == (
        "Sentence embeddings of every row of a file: text (one per line), JSONL (--field) or TSV (--column) in; "
        ".npy or .safetensors out, row i = data row i, with OUTPUT.json beside it (model, input, options, skipped "
        "lines). Streams the file in chunks; an interrupted run resumes where it stopped when run again; "
        "--shard I/N (or torchrun's RANK/WORLD_SIZE) embeds every N-th row, and 'roberta-ext embed merge' joins "
        "the shards."
    )
    assert parser.epilog == (
        "examples: roberta-ext embed my-model --input texts.txt --output emb.npy; "
        "roberta-ext embed my-model --input qa.jsonl --field question --output q.safetensors --dtype bfloat16; "
        "roberta-ext embed checkpoints --checkpoint-file checkpoint_best.pt --input texts.txt --output emb.npy; "
        "roberta-ext embed my-model --input texts.txt --output emb.npy --shard 0/2 (and 1/2), then "
        "roberta-ext embed merge --output emb.npy"
    )
    own = {name: text for name, text in helps(parser).items() if name not in MODEL_OPTIONS}
    assert own == {
        "-h": "show this help message and exit",
        "--input": "the texts ('-': standard input, saved beside the output for the run; a run interrupted resumes "
        "when the same text is piped again)",
        "--format": "how to read --input (default: by its suffix: .jsonl/.ndjson/.json jsonl, .tsv tsv, else text)",
        "--field": "JSONL: the key holding the text (twice: a pair)",
        "--column": "TSV: the column holding the text, a header name or a 0-based number (twice: a pair)",
        "--header": "TSV: the first line names the columns (default: when a --column is a name, not a number)",
        "--skip-bad-lines": "skip lines that cannot be read (not UTF-8, not JSON, no such field): they get no row "
        "and are listed in OUTPUT.json",
        "--pooling": "mean, cls, max, mean_sqrt_len_tokens, weightedmean, lasttoken (several: concatenated; "
        "default: the model's own, else mean)",
        "--normalize": "L2-normalise (default: as the model does, else not)",
        "--max-length": "truncate inputs to N tokens (default: the model's max_seq_length, else its max_positions)",
        "--truncate-dim": "keep the first N values of each embedding (Matryoshka; default: the folder's "
        "truncate_dim, else all)",
        "--prompt": "prepend TEXT to every text",
        "--prompt-name": "prepend the model's prompt NAME",
        "--output": ".npy or .safetensors to write",
        "--shard": "embed rows i with i %% N == I into OUTPUT.shard-I-of-N (default: torchrun's RANK/WORLD_SIZE, "
        "else all)",
        "--max-batch-tokens": "padded tokens (rows x longest row) per batch (default: 4096, on a GPU 32768)",
        "--chunk-rows": "rows per part: what is kept of an interrupted run, and what is held in memory (default: 8192)",
        "--force": "replace an existing output (default: refuse to)",
        "--wait": "when another run is writing the output, wait for it to finish (default: stop at once, naming it)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal)",
    }
    usage = " ".join(parser.format_usage().split())
    assert usage.endswith(
        "[--threads N] --input FILE [--format {text,tsv,jsonl}] [--field NAME] [--column NAME|INDEX] "
        "[--header | --no-header] [--skip-bad-lines] [--pooling MODE[,MODE]] [--normalize | --no-normalize] "
        "[--max-length N] [--truncate-dim N] [--prompt TEXT | --prompt-name NAME] --output FILE [--shard I/N] "
        "[--max-batch-tokens N] [--chunk-rows N] [--force] [--wait] [--progress | --no-progress] MODEL"
    )
    titles = {group.title: [action.dest for action in group._group_actions] for group in parser._action_groups}
    assert titles["input"] == ["input", "format", "field", "column", "header", "skip_bad_lines"]
    assert titles["embeddings"] == ["pooling", "normalize", "max_length", "truncate_dim", "prompt", "prompt_name"]
    assert titles["output and running"] == ["output", "shard", "max_tokens", "chunk_rows", "force"]
    assert titles["options"] == ["help", "wait", "progress"]
    with pytest.raises(SystemExit) as exit_:
        command.main(["--help"])
    assert exit_.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "into OUTPUT.shard-I-of-N (default: torchrun's" in shown and "i % N == I" in shown


def test_the_merge_parser_its_options_and_help(capsys):
    parser = command.build_merge_parser()
    assert parser.prog == MERGE
    assert vars(parser.parse_args(["--output", "emb.npy"])) == {
        "shards": [],
        "output": Path("emb.npy"),
        "force": False,
        "wait": False,
        "progress": None,
    }
    given = parser.parse_args("a.npy b.npy --output o.npy --overwrite --wait --no-progress".split())
    assert vars(given) == {
        "shards": [Path("a.npy"), Path("b.npy")],
        "output": Path("o.npy"),
        "force": True,
        "wait": True,
        "progress": False,
    }
    assert parser.description == (
        "Interleave the shard files of one sharded run (--shard I/N for every I) back into row order."
    )
    assert parser.epilog == (
        "example: roberta-ext embed merge emb.shard-0-of-2.npy emb.shard-1-of-2.npy --output emb.npy (or just: "
        "roberta-ext embed merge --output emb.npy, which finds emb.shard-*-of-*.npy)"
    )
    assert helps(parser) == {
        "-h": "show this help message and exit",
        "--output": ".npy or .safetensors to write",
        "--force": "replace an existing output (default: refuse to)",
        "--wait": "when another run is writing the output, wait for it to finish (default: stop at once, naming it)",
        "--progress": "show progress bars on stderr (default: when stderr is a terminal; merging shows none: it "
        "reads and writes at disk speed)",
    }
    (shards,) = [action for action in parser._actions if not action.option_strings]
    assert (shards.metavar, shards.help) == ("SHARD", "shard files (default: OUTPUT's shard-*-of-* siblings)")
    assert " ".join(parser.format_usage().split()) == (
        "usage: roberta-ext embed merge [-h] --output FILE [--force] [--wait] [--progress | --no-progress] [SHARD ...]"
    )
    with pytest.raises(SystemExit) as exit_:
        command.main(["merge", "--help"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("usage: roberta-ext embed merge [-h] --output FILE")


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: MODEL, --input, --output"),
        (["m", "--output", "o.npy"], "the following arguments are required: --input"),
        (["m", "--input", "i"], "the following arguments are required: --output"),
        (
            ["m", "--input", "i", "--output", "o.npy", "--shard", "2"],
            "argument --shard: expected I/N (e.g. 0/4), got '2'",
        ),
        (
            ["m", "--input", "i", "--output", "o.npy", "--shard", "2/2"],
            "argument --shard: shard I/N needs 0 <= I < N, got '2/2'",
        ),
        (
            ["m", "--input", "i", "--output", "o.npy", "--pooling", "mean,sum"],
            "argument --pooling: --pooling: unknown pooling mode 'sum'; supported: mean, cls, max, "
            "mean_sqrt_len_tokens, weightedmean, lasttoken",
        ),
        (
            ["m", "--input", "i", "--output", "o.npy", "--prompt", "p", "--prompt-name", "q"],
            "argument --prompt-name: not allowed with argument --prompt",
        ),
        (["m", "--input", "i", "--output", "o.npy", "--format", "csv"], "argument --format: invalid choice: 'csv'"),
        (["m", "--input", "i", "--output", "o.npy", "--chunk-rows", "0"], "argument --chunk-rows: must be >= 1, got 0"),
        (["m", "--input", "i", "--output", "o.npy", "--max-length", "0"], "argument --max-length: must be >= 1, got 0"),
        (
            ["m", "--input", "i", "--output", "o.npy", "--truncate-dim", "0"],
            "argument --truncate-dim: must be >= 1, got 0",
        ),
        (
            ["m", "--input", "i", "--output", "o.npy", "--max-tokens", "0"],
            "argument --max-batch-tokens: must be >= 1, got 0",
        ),
        (["merge", "a.npy"], "the following arguments are required: --output"),
    ],
    ids=[
        "nothing", "no-input", "no-output", "shard-form", "shard-range", "pooling", "prompts", "format", "chunk-rows",
        "max-length", "truncate-dim", "max-tokens", "merge-no-output",
    ],
)  # fmt: skip
def test_usage_errors_exit_2_with_argparse_s_line(argv, message, capsys, recorder, merged):
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    assert exit_.value.code == 2
    prog = MERGE if argv[:1] == ["merge"] else PROG
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith(f"{prog}: error: {message}")
    assert recorder.calls == [] and merged.calls == []


def test_the_input_s_format_and_its_fields_are_checked_before_the_model_loads(tmp_path, capsys, recorder):
    missing = tmp_path / "no-such-model"  # never read: each refusal comes first
    refusals = [
        (["--input", "q.jsonl"], "a JSONL input needs --field (the key holding the text)"),
        (["--input", "q.NDJSON"], "a JSONL input needs --field (the key holding the text)"),
        (["--input", "q.txt", "--format", "jsonl"], "a JSONL input needs --field (the key holding the text)"),
        (["--input", "q.jsonl", "--column", "0"], "a JSONL input needs --field (the key holding the text)"),
        (["--input", "d.tsv"], "a TSV input needs --column (the column holding the text)"),
        (["--input", "d.tsv", "--field", "text"], "a TSV input needs --column (the column holding the text)"),
        (["--input", "q.jsonl", "--format", "tsv"], "a TSV input needs --column (the column holding the text)"),
        (["--input", "t.txt", "--field", "text"], "--field and --column are for JSONL and TSV inputs (see --format)"),
        (["--input", "t.txt", "--column", "0"], "--field and --column are for JSONL and TSV inputs (see --format)"),
        (
            ["--input", "q.jsonl", "--format", "text", "--field", "text"],
            "--field and --column are for JSONL and TSV inputs (see --format)",
        ),
        (
            ["--input", "q.jsonl", "--field", "a", "--field", "b", "--field", "c"],
            "--field/--column take one text or a pair (given at most twice)",
        ),
        (
            ["--input", "d.tsv", "--column", "0", "--column", "1", "--column", "2"],
            "--field/--column take one text or a pair (given at most twice)",
        ),
    ]
    for given, message in refusals:
        with pytest.raises(SystemExit) as exit_:
            command.main([str(missing), *given, "--output", str(tmp_path / "o.npy")])
        assert exit_.value.code == 2
        err = capsys.readouterr().err
        assert err.splitlines()[-1] == f"{PROG}: error: {message}", given
    assert recorder.calls == [] and list(tmp_path.iterdir()) == []
    # A pair of fields passes, as does a text input with neither (both go on to embed_file).
    for given in (["--input", "q.jsonl", "--field", "a", "--field", "b"], ["--input", "t.txt"]):
        assert run([missing, *given, "--output", tmp_path / "o.npy"], capsys) == (
            0,
            "",
            f"{PROG}: 3 rows x 32 -> {tmp_path / 'o.npy'}\n",
        )


# ---------------------------------------------------------------------------------- what reaches embed_file


def test_the_input_spec_follows_the_format_fields_and_header(tmp_path, capsys, recorder):
    out = tmp_path / "o.npy"
    cases = [
        (["--input", "t.txt"], InputSpec(Path("t.txt"), "text", ())),
        (["--input", "t.TSV", "--format", "text"], InputSpec(Path("t.TSV"), "text", ())),
        (["--input", "q.JSON", "--field", "q"], InputSpec(Path("q.JSON"), "jsonl", ("q",))),
        (["--input", "q.jsonl", "--field", "q", "--field", "a"], InputSpec(Path("q.jsonl"), "jsonl", ("q", "a"))),
        (["--input", "d.tsv", "--column", "1"], InputSpec(Path("d.tsv"), "tsv", ("1",))),
        (
            ["--input", "d.tsv", "--column", "s1", "--column", "s2", "--header"],
            InputSpec(Path("d.tsv"), "tsv", ("s1", "s2"), True),
        ),
        (
            ["--input", "d.txt", "--format", "tsv", "--column", "0", "--no-header"],
            InputSpec(Path("d.txt"), "tsv", ("0",), False),
        ),
        (["--input", "-", "--format", "jsonl", "--field", "t"], InputSpec(Path("-"), "jsonl", ("t",))),
    ]
    for given, spec in cases:
        recorder.calls.clear()
        status, _, err = run(["m", *given, "--output", out], capsys)
        assert status == 0, err
        assert recorder.call["spec"] == spec, given
        assert recorder.call["output"] == out


def test_the_options_reach_embed_file(tmp_path, capsys, recorder, threads_asked):
    out = tmp_path / "o.npy"
    runs = [
        ([], options("m"), {}),
        (
            ["--pooling", "cls,max", "--normalize", "--max-length", "16", "--prompt", "query: ", "--skip-bad-lines"],
            options("m", pooling=("cls", "max"), normalize=True, max_length=16, prompt="query: ", skip_bad_lines=True),
            {},
        ),
        (
            ["--no-normalize", "--prompt-name", "q", "--dtype", "bfloat16", "--chunk-rows", "7"],
            options("m", normalize=False, prompt_name="q", dtype="bfloat16", chunk_rows=7),
            {},
        ),
        (
            ["--checkpoint-file", "checkpoint_best.pt", "--bpe", "gpt2", "--truncate-dim", "8", "--max-tokens", "9"],
            options("m", loaded_with=(("checkpoint_file", "checkpoint_best.pt"), ("bpe", "gpt2"))),
            {},
        ),  # truncate_dim and max_tokens change no row: not in Options
        (["--force", "--progress"], options("m"), dict(force=True, progress=True)),
        (["--no-progress"], options("m"), {}),
        (["--shard", "1/3"], options("m"), dict(shard=Shard(1, 3))),
    ]
    for given, expected, keywords in runs:
        recorder.calls.clear()
        status, _, err = run(["m", "--input", "t.txt", "--output", out, *given], capsys)
        assert status == 0, err
        call = recorder.call
        assert call["options"] == expected, given
        assert {name: call[name] for name in ("shard", "force", "progress", "wait")} == {
            **dict(shard=Shard(), force=False, progress=False, wait=False),
            **keywords,
        }, given
        assert callable(call["embedder"])  # the model loads once the output's lock is held
    assert threads_asked == [None, None] * len(runs)  # torch's threads left alone
    threads_asked.clear()
    assert run(["m", "--input", "t.txt", "--output", out, "--threads", "3"], capsys)[0] == 0
    assert threads_asked == [3, None]  # set for the run, then given back


def test_wait_says_for_whom_it_waits(tmp_path, capsys, recorder, merged):
    out = tmp_path / "o.npy"
    assert run(["m", "--input", "t.txt", "--output", out, "--wait"], capsys)[0] == 0
    wait = recorder.call["wait"]
    wait("process 7 is writing o.npy; waiting for it to finish")
    assert capsys.readouterr() == ("", f"{PROG}: process 7 is writing o.npy; waiting for it to finish\n")
    assert run(["merge", "a.npy", "--output", out, "--wait"], capsys)[0] == 0
    ((_, _, keywords),) = merged.calls
    keywords["wait"]("busy")
    assert capsys.readouterr() == ("", f"{MERGE}: busy\n")


def test_the_shard_comes_from_torchrun_unless_given(tmp_path, capsys, recorder, monkeypatch):
    out = tmp_path / "emb.npy"
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert run(["m", "--input", "t.txt", "--output", out], capsys) == (
        0,
        "",
        f"{PROG}: 3 rows x 32 -> {tmp_path / 'emb.shard-1-of-2.npy'}\n",
    )
    assert recorder.call["shard"] == Shard(1, 2) and recorder.call["output"] == out
    recorder.calls.clear()
    assert run(["m", "--input", "t.txt", "--output", out, "--shard", "0/3"], capsys)[2] == (
        f"{PROG}: 3 rows x 32 -> {tmp_path / 'emb.shard-0-of-3.npy'}\n"
    )
    assert recorder.call["shard"] == Shard(0, 3)
    recorder.calls.clear()
    monkeypatch.setenv("RANK", "2")
    assert run(["m", "--input", "t.txt", "--output", out], capsys) == (
        1,
        "",
        f"{PROG}: error: RANK=2 and WORLD_SIZE=2 do not name a shard\n",
    )
    assert recorder.calls == []


def test_the_embedder_is_made_with_the_options_given(model_dir, tmp_path, capsys, recorder):
    out = tmp_path / "o.npy"
    argv = [model_dir, "--input", "t.txt", "--output", out, "--device", "cpu"]
    assert run(argv, capsys)[0] == 0
    embedder = recorder.call["embedder"]()
    assert isinstance(embedder, Embedder) and embedder.model.cfg.encoder_layers == 1
    assert (embedder.pooling, embedder.normalize, embedder.prompt) == (("mean",), False, "")
    assert (embedder.max_length, embedder.truncate_dim, embedder.max_tokens) == (32, None, 4096)  # the CPU's batches
    recorder.calls.clear()
    given = ["--pooling", "cls,max", "--normalize", "--max-length", "16", "--prompt", "query: "]
    assert run([*argv, *given, "--truncate-dim", "8", "--max-tokens", "64"], capsys)[0] == 0
    embedder = recorder.call["embedder"]()
    assert (embedder.pooling, embedder.normalize, embedder.prompt) == (("cls", "max"), True, "query: ")
    assert (embedder.max_length, embedder.truncate_dim, embedder.max_tokens) == (16, 8, 64)
    assert embedder.dimension == 8


def test_an_option_the_model_cannot_take_is_one_line_naming_the_model(model_dir, tmp_path, capsys, monkeypatch):
    """``embed_file`` runs for real here up to the model: the errors come from making the embedder."""
    texts = write_lines(tmp_path / "t.txt", "a")
    out = tmp_path / "o.npy"
    argv = [model_dir, "--input", texts, "--output", out, "--device", "cpu"]
    assert run([*argv, "--prompt-name", "query"], capsys) == (
        1,
        "",
        f"{PROG}: error: {model_dir}: prompt_name 'query' is not one of the model's prompts (none)\n",
    )
    for error, message in ((ValueError("no such thing"), "no such thing"), (KeyError(), "")):

        def refuse(hub, error=error, **options):
            raise error

        monkeypatch.setattr(Embedder, "for_hub", refuse)
        assert run(argv, capsys) == (1, "", f"{PROG}: error: {model_dir}: {message}\n")
    assert not out.exists()
    assert run([tmp_path / "none", "--input", texts, "--output", out], capsys)[2].startswith(
        f"{PROG}: error: cannot load the model from {tmp_path / 'none'}: "
    )


# ---------------------------------------------------------------------------------- reports


def test_the_report_names_rows_dimension_target_rate_and_skipped_lines(tmp_path, capsys, recorder):
    out = tmp_path / "o.npy"
    argv = ["m", "--input", "t.jsonl", "--field", "text", "--output", out]
    reports = [
        ({"rows": 3, "dimension": 32, "skipped": [], "rows_per_second": 123.4}, f"3 rows x 32 -> {out} (123 rows/s)"),
        ({"rows": 1, "dimension": 8, "skipped": [], "rows_per_second": 0.0}, f"1 row x 8 -> {out}"),
        ({"rows": 0, "dimension": 8, "skipped": [], "rows_per_second": None}, f"0 rows x 8 -> {out}"),
        (
            {"rows": 2, "dimension": 4, "skipped": [[1, 2, "no field 'text'"]], "rows_per_second": 9.5},
            f"2 rows x 4 -> {out} (10 rows/s); skipped 1 bad line (first: t.jsonl:2: no field 'text'), listed in "
            f"{out}.json",
        ),
        (
            {"rows": 1, "dimension": 4, "skipped": [[3, 4, "not JSON"], [5, 7, "not valid UTF-8"]]},
            f"1 row x 4 -> {out}; skipped 2 bad lines (first: t.jsonl:4: not JSON), listed in {out}.json",
        ),
    ]
    for receipt, message in reports:
        recorder.receipt = receipt
        assert run(argv, capsys) == (0, "", f"{PROG}: {message}\n")
    recorder.receipt = {"rows": 1, "dimension": 4, "skipped": [[0, 1, "not JSON"]]}
    stdin = ["m", "--input", "-", "--format", "jsonl", "--field", "text", "--output", out, "--shard", "1/2"]
    target = tmp_path / "o.shard-1-of-2.npy"
    assert run(stdin, capsys)[2] == (
        f"{PROG}: 1 row x 4 -> {target}; skipped 1 bad line (first: <stdin>:1: not JSON), listed in {target}.json\n"
    )


def test_ctrl_c_says_where_the_finished_chunks_are(tmp_path, capsys, recorder):
    out = tmp_path / "o.npy"
    recorder.raises = KeyboardInterrupt()
    assert run(["m", "--input", "t.txt", "--output", out], capsys) == (
        130,
        "",
        f"\n{PROG}: interrupted; the finished chunks are kept in {out}.parts: run the same command again to resume\n",
    )
    assert run(["m", "--input", "t.txt", "--output", out, "--shard", "0/2"], capsys)[2] == (
        f"\n{PROG}: interrupted; the finished chunks are kept in {tmp_path / 'o.shard-0-of-2.npy.parts'}: run the "
        "same command again to resume\n"
    )


def test_main_reads_the_command_line_when_given_no_arguments(tmp_path, capsys, recorder, merged, monkeypatch):
    out = tmp_path / "o.npy"
    monkeypatch.setattr(sys, "argv", ["roberta-ext-embed", "m", "--input", "t.txt", "--output", str(out)])
    assert command.main() == 0 and recorder.call["spec"] == InputSpec(Path("t.txt"), "text")
    monkeypatch.setattr(sys, "argv", ["roberta-ext-embed", "merge", "a.npy", "--output", str(out)])
    assert command.main() == 0 and merged.calls == [([Path("a.npy")], out, {"force": False, "wait": False})]
    capsys.readouterr()


# ---------------------------------------------------------------------------------- merge


def test_merge_takes_the_shards_given_or_finds_them_beside_the_output(tmp_path, capsys, merged, threads_asked):
    out = tmp_path / "emb.npy"
    assert run(["merge", "b.npy", "a.npy", "--output", out], capsys) == (
        0,
        "",
        f"{MERGE}: 2 shards -> {out}: 5 rows x 32\n",
    )
    assert merged.calls == [([Path("b.npy"), Path("a.npy")], out, {"force": False, "wait": False})]
    found = [tmp_path / f"emb.shard-{i}-of-3.npy" for i in (2, 0, 1)]
    for path in [*found, tmp_path / "emb.shard-0-of-3.safetensors", tmp_path / "other.shard-0-of-1.npy"]:
        path.touch()
    merged.calls.clear()
    merged.receipt = {"rows": 1, "dimension": 4, "skipped": [[1, 2, "x"]]}
    assert run(["merge", "--output", out, "--force"], capsys) == (
        0,
        "",
        f"{MERGE}: 3 shards -> {out}: 1 row x 4; 1 bad line had no row\n",
    )
    assert merged.calls == [(sorted(found), out, {"force": True, "wait": False})]
    merged.receipt = {"rows": 2, "dimension": 4, "skipped": [[1, 2, "x"], [3, 4, "y"]]}
    assert run(["merge", tmp_path / "a.npy", "--output", out], capsys)[2] == (
        f"{MERGE}: 1 shard -> {out}: 2 rows x 4; 2 bad lines had no row\n"
    )
    merged.calls.clear()
    nothing = tmp_path / "nothing.npy"
    assert run(["merge", "--output", nothing], capsys) == (
        1,
        "",
        f"{MERGE}: error: no shard files given, and none named like nothing.shard-I-of-N beside it\n",
    )
    assert merged.calls == []
    assert threads_asked == [None, None] * 4


# ---------------------------------------------------------------------------------- a real run


def test_a_real_sharded_run_and_its_merge_give_the_hub_s_embeddings(model_dir, tmp_path, capsys):
    texts = ["Hello world!", "It is a test.", "Hi"]
    source = write_lines(tmp_path / "texts.txt", *texts)
    out = tmp_path / "emb.npy"
    for shard in ("0/2", "1/2"):
        status, stdout, err = run([model_dir, "--input", source, "--output", out, "--shard", shard], capsys)
        assert (status, stdout) == (0, ""), err
    shards = [tmp_path / "emb.shard-0-of-2.npy", tmp_path / "emb.shard-1-of-2.npy"]
    assert err.startswith(f"{PROG}: 1 row x 32 -> {shards[1]} (") and err.endswith(" rows/s)\n")
    assert run(["merge", "--output", out], capsys) == (0, "", f"{MERGE}: 2 shards -> {out}: 3 rows x 32\n")
    expected = roberta_ext.from_pretrained(str(model_dir)).embed(texts).numpy()
    np.testing.assert_allclose(np.load(out), expected, atol=1e-6, rtol=1e-5)
    assert run(["merge", "--output", out], capsys) == (
        1,
        "",
        f"{MERGE}: error: refusing to overwrite {out} (use --force)\n",
    )
