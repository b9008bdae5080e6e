"""roberta_ext/cli/arguments.py: the arguments the commands share, each on a parser built in the
test (tests/cli/test_parsers.py walks the commands' own parsers): the count types, the model's
arguments and what they resolve to, the hidden aliases, ``--force``, ``--progress`` and the
output's format."""

from __future__ import annotations

import argparse
import io
import re
from pathlib import Path

import pytest
import torch

from roberta_ext import loading
from roberta_ext.cli import arguments
from roberta_ext.cli.arguments import MODEL_FILES, MODEL_OPTIONS
from roberta_ext.cli.running import CommandError


def parser_with(add, *args, **kwargs) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="demo")
    add(parser, *args, **kwargs)
    return parser


def refusal(parser: argparse.ArgumentParser, argv: list[str], capsys) -> str:
    """The last line argparse writes when it refuses ``argv``."""
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    return capsys.readouterr().err.strip().splitlines()[-1]


def helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    return {action.option_strings[0]: action.help for action in parser._actions if action.option_strings}


def ran(main, argv: list, capsys) -> tuple[int, str, str]:
    """A command's exit status, stdout and stderr, its ``main`` run in this process on ``argv`` (paths as text)."""
    status = main([str(item) for item in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def write_lines(path: Path, *lines: str) -> Path:
    """``path`` holding ``lines``, each ended by a newline (UTF-8); returns ``path``."""
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


MODEL_DEFAULTS = {
    **MODEL_FILES,
    "device": "auto",
    "dtype": "float32",
    "threads": None,
}
"""The model options every command that loads one parses (``MODEL_OPTIONS``), when none is given."""


FILES_GIVEN = {
    "bpe": "gpt2",
    "gpt2_encoder_json": "e.json",
    "gpt2_vocab_bpe": "v.bpe",
    "bpe_vocab_file": "vocab.txt",
    "bpe_cased": True,
    "sentencepiece_model": "s.model",
}
"""The tokenizer's files as the command lines below give them, parsed."""


def test_counts_take_their_bounds_and_name_what_they_refuse(capsys):
    assert [arguments.positive_int(text) for text in ("1", "12")] == [1, 12]
    assert [arguments.non_negative_int(text) for text in ("0", "1")] == [0, 1]
    for check, bad, bound in ((arguments.positive_int, "0", 1), (arguments.non_negative_int, "-1", 0)):
        with pytest.raises(argparse.ArgumentTypeError) as refused:
            check(bad)
        assert str(refused.value) == f"must be >= {bound}, got {bad}"
    parser = argparse.ArgumentParser(prog="demo")
    parser.add_argument("--n", type=arguments.non_negative_int)
    assert refusal(parser, ["--n", "-2"], capsys) == "demo: error: argument --n: must be >= 0, got -2"
    assert refusal(parser, ["--n", "two"], capsys) == "demo: error: argument --n: invalid non_negative_int value: 'two'"


def test_the_model_arguments_default_to_from_pretrained_s_and_parse_every_option(capsys):
    parser = parser_with(arguments.add_model_arguments)
    assert {option for action in parser._actions for option in action.option_strings} - {"-h", "--help"} == set(
        MODEL_OPTIONS
    )
    assert {"--encoder-json", "--vocab-bpe"} <= set(parser._option_string_actions)  # hidden aliases
    args = parser.parse_args(["m"])
    assert args.model == "m"
    assert {name: getattr(args, name) for name in MODEL_FILES} == MODEL_FILES
    assert (args.device, args.dtype, args.threads) == ("auto", "float32", None)
    assert parser_with(arguments.add_model_arguments, device="cpu").parse_args(["m"]).device == "cpu"
    given = parser.parse_args(
        "m --checkpoint-file c.pt --data-name-or-path d --bpe gpt2 --gpt2-encoder-json e.json --vocab-bpe v.bpe "
        "--bpe-vocab-file vocab.txt --bpe-cased --sentencepiece-model s.model --device cuda --dtype int8 "
        "--threads 3".split()
    )
    assert vars(given) == {
        "model": "m",
        "checkpoint_file": "c.pt",
        "data_name_or_path": "d",
        **FILES_GIVEN,
        "device": "cuda",
        "dtype": "int8",
        "threads": 3,
    }
    assert refusal(parser, ["m", "--threads", "0"], capsys) == "demo: error: argument --threads: must be >= 1, got 0"
    assert refusal(parser, ["m", "--dtype", "float64"], capsys).startswith(
        "demo: error: argument --dtype: invalid choice: 'float64' (choose from "
    )
    text = parser.format_help()
    assert "model (as from_pretrained reads it):" in text and "running the model:" in text
    assert re.search(r"\n  MODEL +a model folder \(fairseq", text)
    for metavar in ("--checkpoint-file FILE", "--data-name-or-path DIR", "--bpe-vocab-file FILE", "--threads N"):
        assert metavar in text
    assert (
        "--sentencepiece-model FILE" in text and "--gpt2-encoder-json FILE" in text and "--gpt2-vocab-bpe FILE" in text
    )


def test_every_shared_option_says_what_it_is_and_its_default():
    said = helps(parser_with(arguments.add_model_arguments, device="cpu"))
    said["MODEL"] = next(
        action.help for action in parser_with(arguments.add_model_arguments)._actions if action.dest == "model"
    )
    assert said == {
        "-h": "show this help message and exit",
        "MODEL": "a model folder (fairseq: a checkpoint and dict.txt; transformers; sentence-transformers), an archive "
        "of one, or a name from_pretrained knows (roberta.base, ...)",
        "--checkpoint-file": "the checkpoint in MODEL (default: model.pt; a fairseq-train --save-dir holds "
        "checkpoint_best.pt)",
        "--data-name-or-path": "the folder with dict.txt, or input0/dict.txt and label/dict.txt after fine-tuning; a "
        "path starting with '.' is relative to MODEL (default: ., MODEL itself)",
        "--bpe": "gpt2, bert (wordpiece), sentencepiece or hf_tokenizer (tokenizer.json, read by the tokenizers "
        "library) (default: from the files)",
        "--gpt2-encoder-json": "GPT-2 encoder.json",
        "--gpt2-vocab-bpe": "GPT-2 vocab.bpe",
        "--bpe-vocab-file": "WordPiece vocab.txt",
        "--bpe-cased": "cased WordPiece vocabulary",
        "--sentencepiece-model": "SentencePiece model",
        "--device": "cpu, cuda, cuda:N or auto: cuda when there is one (under torchrun the LOCAL_RANK-th), else cpu; "
        "int8 runs on the cpu (default: cpu)",
        "--dtype": "the model's dtype (default: float32); int8: its linear layers in int8, on the cpu",
        "--threads": "CPU threads for the model (default: torch's choice, one per core; 1 is faster on a busy machine)",
    }


def test_gpt2_files_can_be_required_and_their_old_spellings_are_hidden(capsys):
    parser = parser_with(arguments.add_gpt2_bpe_arguments, required=True)
    assert refusal(parser, [], capsys) == (
        "demo: error: the following arguments are required: --gpt2-encoder-json, --gpt2-vocab-bpe"
    )
    args = parser.parse_args(["--encoder-json", "e.json", "--vocab-bpe", "v.bpe"])
    assert (args.gpt2_encoder_json, args.gpt2_vocab_bpe) == ("e.json", "v.bpe")
    assert "--encoder-json" not in parser.format_help() and "--vocab-bpe" not in parser.format_help()
    optional = parser_with(arguments.add_gpt2_bpe_arguments).parse_args([])
    assert (optional.gpt2_encoder_json, optional.gpt2_vocab_bpe) == (None, None)


def test_a_hidden_alias_is_the_same_action_and_cannot_shadow_an_option():
    parser = argparse.ArgumentParser()
    action = parser.add_argument("--new", type=int)
    arguments.add_hidden_alias(parser, action, "--old", "--older")
    assert [parser.parse_args([spelling, "5"]).new for spelling in ("--new", "--old", "--older")] == [5, 5, 5]
    with pytest.raises(ValueError) as refused:
        arguments.add_hidden_alias(parser, action, "--new")
    assert str(refused.value) == "--new is already an option of this parser"


def test_max_batch_tokens_is_a_positive_count_with_fairseq_s_spelling_hidden(capsys):
    parser = parser_with(arguments.add_batch_tokens_argument, default=4096, help="padded tokens a pass")
    assert parser.parse_args([]).max_tokens == 4096
    assert parser.parse_args(["--max-tokens", "64"]).max_tokens == 64
    assert parser.parse_args(["--max-batch-tokens", "32"]).max_tokens == 32
    assert refusal(parser, ["--max-tokens", "0"], capsys).endswith("argument --max-batch-tokens: must be >= 1, got 0")
    text = parser.format_help()
    assert "--max-batch-tokens N  padded tokens a pass" in text and "--max-tokens" not in text


def test_the_device_is_made_concrete(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert arguments.resolve_device("auto", "float32", {}) == "cuda"
    assert arguments.resolve_device("auto", "int8", {}) == "cpu"
    assert arguments.resolve_device("auto", "float32", {"LOCAL_RANK": "2"}) == "cuda:2"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert arguments.resolve_device("auto", "float32", {"LOCAL_RANK": "2"}) == "cpu"
    assert arguments.resolve_device("cuda", "float32", {}) == "cuda"
    assert arguments.resolve_device("cuda", "float32", {"LOCAL_RANK": "03"}) == "cuda:3"
    assert arguments.resolve_device("cuda:1", "float32", {"LOCAL_RANK": "0"}) == "cuda:1"  # a GPU named stays
    assert arguments.resolve_device("cpu", "bfloat16", {"LOCAL_RANK": "0"}) == "cpu"
    monkeypatch.setenv("LOCAL_RANK", "1")  # the process's environment by default
    assert arguments.resolve_device("cuda", "float32") == "cuda:1"
    monkeypatch.delenv("LOCAL_RANK")
    assert arguments.resolve_device("cuda", "float32") == "cuda"


def test_the_model_files_given_are_those_off_their_defaults():
    assert arguments.model_files_given(argparse.Namespace(**MODEL_FILES)) == {}
    given = argparse.Namespace(**{**MODEL_FILES, "data_name_or_path": "d", "bpe_cased": True, "bpe": "bert"})
    assert arguments.model_files_given(given) == {"data_name_or_path": "d", "bpe": "bert", "bpe_cased": "True"}


def test_load_model_passes_every_argument_and_names_the_model_it_cannot_load(monkeypatch):
    parser = parser_with(arguments.add_model_arguments, device="cpu")
    args = parser.parse_args(
        "m --checkpoint-file c.pt --data-name-or-path d --bpe gpt2 --gpt2-encoder-json e.json --gpt2-vocab-bpe v.bpe "
        "--bpe-vocab-file vocab.txt --bpe-cased --sentencepiece-model s.model --dtype bfloat16".split()
    )
    calls = []

    def recorded(*positional, **named):
        calls.append((positional, named))
        return "the hub"

    monkeypatch.setattr(loading, "from_pretrained", recorded)
    assert arguments.load_model(args) == "the hub"
    assert calls == [
        (
            ("m", "c.pt", "d"),
            {**FILES_GIVEN, "device": "cpu", "dtype": "bfloat16"},
        )
    ]
    args.dtype, args.device = "int8", "auto"  # int8 runs on the cpu, even where there is a GPU
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    arguments.load_model(args)
    assert calls[-1][1]["device"] == "cpu"
    for error, said in (
        (KeyError("model"), "model"),  # a KeyError's text is its key, without quotes
        (KeyError(), ""),
        (ValueError("bad file"), "bad file"),
        (ValueError("bad file", 3), "('bad file', 3)"),
        (FileNotFoundError("no such file: m/c.pt"), "no such file: m/c.pt"),
    ):

        def failing(*positional, error=error, **named):
            raise error

        monkeypatch.setattr(loading, "from_pretrained", failing)
        with pytest.raises(CommandError) as refused:
            arguments.load_model(args)
        assert str(refused.value) == f"cannot load the model from m: {said}"
        assert refused.value.__cause__ is None and refused.value.__suppress_context__
    monkeypatch.setattr(loading, "from_pretrained", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("bug")))
    with pytest.raises(RuntimeError, match="^bug$"):  # not a file that cannot be read: not the user's to fix
        arguments.load_model(args)


def test_force_and_its_other_spelling_replace_what_the_command_names():
    parser = parser_with(arguments.add_force_argument, "existing <TASK>-bin folders")
    assert parser.parse_args([]).force is False
    assert parser.parse_args(["--force"]).force is True and parser.parse_args(["--overwrite"]).force is True
    assert helps(parser)["--force"] == "replace existing <TASK>-bin folders (default: refuse to)"
    assert helps(parser_with(arguments.add_force_argument))["--force"] == (
        "replace an existing output (default: refuse to)"
    )


def test_progress_is_a_flag_pair_or_hidden_and_said_to_do_nothing(capsys, monkeypatch):
    parser = parser_with(arguments.add_progress_argument, "; also with --verbose")
    assert [parser.parse_args(argv).progress for argv in ([], ["--progress"], ["--no-progress"])] == [None, True, False]
    assert helps(parser)["--progress"] == (
        "show progress bars on stderr (default: when stderr is a terminal; also with --verbose)"
    )
    assert capsys.readouterr().err == ""
    assert helps(parser_with(arguments.add_progress_argument))["--progress"] == (
        "show progress bars on stderr (default: when stderr is a terminal)"
    )
    ignored = parser_with(arguments.add_progress_argument, ignored="the server draws no bars")
    assert "--progress" not in ignored.format_help()
    assert ignored.parse_args([]).progress is None
    assert capsys.readouterr().err == ""
    for flag, value in (("--progress", True), ("--no-progress", False)):
        assert ignored.parse_args([flag]).progress is value
        assert capsys.readouterr().err == f"demo: note: {flag} does nothing here (the server draws no bars)\n"
    for terminal in (True, False):
        monkeypatch.setattr("sys.stderr", type("Err", (io.StringIO,), {"isatty": lambda self, t=terminal: t})())
        assert arguments.show_progress(argparse.Namespace(progress=None)) is terminal
        assert arguments.show_progress(argparse.Namespace(progress=not terminal)) is (not terminal)
    monkeypatch.setattr("sys.stderr", io.StringIO())
    assert arguments.show_progress(argparse.Namespace(progress=1)) is True


SUFFIXES = {".pt2": "torch-export", ".onnx": "onnx"}


def test_the_output_format_follows_the_suffix_and_a_flag_wins_with_a_note(capsys):
    assert arguments.output_format("demo", "m.pt2", None, SUFFIXES) == "torch-export"
    assert arguments.output_format("demo", "dir/M.ONNX", None, SUFFIXES) == "onnx"  # the suffix in any case
    assert arguments.output_format("demo", "m.bin", None, {**SUFFIXES, "": "onnx"}) == "onnx"
    assert arguments.output_format("demo", "m", None, {**SUFFIXES, "": "torch-export"}) == "torch-export"
    with pytest.raises(CommandError) as refused:
        arguments.output_format("demo", "m.bin", None, SUFFIXES)
    assert str(refused.value) == "m.bin: cannot tell the format from the suffix '.bin': give it explicitly"
    assert capsys.readouterr().err == ""
    assert arguments.output_format("demo", "m.pt2", "torch-export", SUFFIXES) == "torch-export"
    assert arguments.output_format("demo", "m.bin", "onnx", SUFFIXES) == "onnx"  # no suffix to contradict
    # Nor a path without one ("-": standard output), where "" names the format of any other suffix.
    assert arguments.output_format("demo", "-", "jsonl", {".jsonl": "jsonl", "": "tsv"}) == "jsonl"
    assert arguments.output_format("demo", "dir/m", "torch-export", {**SUFFIXES, "": "onnx"}) == "torch-export"
    assert capsys.readouterr().err == ""
    assert arguments.output_format("demo", "m.pt2", "onnx", SUFFIXES) == "onnx"
    assert capsys.readouterr().err == (
        "demo: note: writing onnx to m.pt2 as asked, though its suffix .pt2 usually means torch-export\n"
    )
