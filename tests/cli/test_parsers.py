"""Every ``roberta-ext`` sub-command's parser, walked: ``--help`` works through the top-level
parser and through ``main``; the commands that take a model take the same model arguments; the
shared flags (``--progress``/``--no-progress``, ``--force`` alias ``--overwrite``) are on every
command; every option has help; and every ``roberta-ext`` command the docs show still parses."""

from __future__ import annotations

import argparse
import re
import shlex

import pytest

from roberta_ext import cli
from roberta_ext.cli import arguments
from roberta_ext.cli.arguments import MODEL_OPTIONS
from tests.conftest import REPO
from tests.docs.markdown import code_blocks

PARSERS = cli.command_parsers()


def options(parser: argparse.ArgumentParser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_the_top_level_parser_holds_every_command_and_each_helps(capsys):
    top = cli.build_parser()
    assert set(subparsers(top)) == set(cli.COMMANDS)
    for name in cli.COMMANDS:
        for run in (top.parse_args, lambda argv: cli.main(argv)):
            with pytest.raises(SystemExit) as exit_:
                run([name, "--help"])
            assert exit_.value.code == 0, name
            assert capsys.readouterr().out.startswith(f"usage: roberta-ext {name}"), name
    with pytest.raises(SystemExit) as exit_:
        cli.main(["embed", "merge", "--help"])
    assert exit_.value.code == 0 and capsys.readouterr().out.startswith("usage: roberta-ext embed merge")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["no-such-command"])
    assert exit_.value.code == 2 and "invalid choice: 'no-such-command'" in capsys.readouterr().err


@pytest.mark.parametrize("name", cli.MODEL_COMMANDS)
def test_every_command_that_takes_a_model_takes_the_same_model_arguments(name):
    parser = PARSERS[name]
    assert set(MODEL_OPTIONS) <= options(parser), set(MODEL_OPTIONS) - options(parser)
    assert any(action.dest == "model" and not action.option_strings for action in parser._actions)
    required = {"predict": ["--input", "in.txt", "--output", "o.tsv"], "embed": ["--input", "in.txt"]}
    required["embed"] += ["--output", "o.npy"]
    required["export"] = ["--output", "o.onnx"]
    required["serve"] = []
    args = parser.parse_args(
        ["folder", *required[name], "--checkpoint-file", "checkpoint_best.pt", "--data-name-or-path", "data-bin"]
        + ["--bpe", "gpt2", "--gpt2-encoder-json", "e.json", "--gpt2-vocab-bpe", "v.bpe", "--device", "cpu"]
        + ["--dtype", "bfloat16", "--threads", "1"]
    )
    assert (args.model, args.checkpoint_file, args.data_name_or_path) == ("folder", "checkpoint_best.pt", "data-bin")
    assert (args.bpe, args.gpt2_encoder_json, args.gpt2_vocab_bpe) == ("gpt2", "e.json", "v.bpe")
    assert (args.device, args.dtype, args.threads, args.bpe_cased, args.sentencepiece_model) == (
        "cpu",
        "bfloat16",
        1,
        False,
        None,
    )


def test_no_command_takes_half_of_the_model_arguments():
    # GPT-2's BPE files are the corpus commands' too, through the same arguments.add_gpt2_bpe_arguments.
    gpt2 = {"--gpt2-encoder-json", "--gpt2-vocab-bpe"}
    for name, parser in PARSERS.items():
        taken = (set(MODEL_OPTIONS) - gpt2) & options(parser)
        assert taken in (set(), set(MODEL_OPTIONS) - gpt2), f"{name} takes only {sorted(taken)}"
        assert bool(taken) == (name in cli.MODEL_COMMANDS), name


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_progress_force_and_help_are_the_same_everywhere(name):
    parser = PARSERS[name]
    assert {"--progress", "--no-progress"} <= options(parser), name
    progress = next(action for action in parser._actions if "--progress" in action.option_strings)
    assert isinstance(progress, argparse.BooleanOptionalAction) and progress.default is None
    force = [action for action in parser._actions if "--force" in action.option_strings]
    overwrite = [action for action in parser._actions if "--overwrite" in action.option_strings]
    assert force == overwrite, f"{name}: --force and --overwrite are one flag where either is"
    assert [action.option_strings for action in parser._actions if not action.help] == []


def test_the_commands_that_refuse_to_replace_outputs_take_force():
    refusing = {"train-bpe", "prepare-tagging", "glue-preprocess", "prepare-multiple-choice", "embed", "embed merge"}
    refusing |= {"export", "predict"}  # predict once replaced its output silently
    assert {name for name, parser in PARSERS.items() if "--force" in options(parser)} == refusing


def test_force_says_what_it_replaces_in_a_sentence():
    """It said "replace existing <TASK>-bin folders if it exists"."""
    for name, parser in PARSERS.items():
        for action in parser._actions:
            if "--force" in action.option_strings:
                assert re.fullmatch(r"replace (an? |existing )\S.* \(default: refuse to\)", action.help), name
                assert "if it exists" not in action.help, name


def shown(parser: argparse.ArgumentParser) -> set[str]:
    """The option strings ``--help`` lists."""
    return {
        option for action in parser._actions if action.help != argparse.SUPPRESS for option in action.option_strings
    }


def test_each_option_has_one_spelling_and_older_ones_still_parse():
    """``--encoder-json`` (corpus) was ``--gpt2-encoder-json`` (model commands), and ``embed
    --max-tokens`` was ``serve --max-batch-tokens``: one is shown everywhere, the other is a
    hidden alias of the same option, through the command's parser and the combined one."""
    everywhere = set().union(*(shown(parser) for parser in PARSERS.values()))
    assert {"--encoder-json", "--vocab-bpe", "--max-tokens"}.isdisjoint(everywhere)
    gpt2 = {"bpe-encode", "prepare-tagging", "prepare-multiple-choice", *cli.MODEL_COMMANDS}
    assert {name for name, parser in PARSERS.items() if "--gpt2-encoder-json" in shown(parser)} == gpt2
    assert {name for name, parser in PARSERS.items() if "--gpt2-vocab-bpe" in shown(parser)} == gpt2
    assert {name for name, parser in PARSERS.items() if "--max-batch-tokens" in shown(parser)} == {
        "predict",
        "embed",
        "serve",
    }
    top = subparsers(cli.build_parser())
    for parse in (lambda argv: PARSERS["bpe-encode"].parse_args(argv), lambda argv: top["bpe-encode"].parse_args(argv)):
        args = parse(["--encoder-json", "e.json", "--vocab-bpe", "v.bpe"])  # required, given by the old names
        assert (args.gpt2_encoder_json, args.gpt2_vocab_bpe) == ("e.json", "v.bpe")
    model = PARSERS["predict"].parse_args(["m", "--input", "i", "--output", "o", "--encoder-json", "e.json"])
    assert model.gpt2_encoder_json == "e.json"
    for name, required in (
        ("predict", ["--input", "i", "--output", "o"]),
        ("embed", ["--input", "i", "--output", "o.npy"]),
    ):
        for spelling in ("--max-batch-tokens", "--max-tokens"):
            for parser in (PARSERS[name], top[name]):
                assert parser.parse_args(["m", *required, spelling, "64"]).max_tokens == 64
    with pytest.raises(SystemExit):
        PARSERS["embed"].parse_args(["m", "--input", "i", "--output", "o.npy", "--max-tokens", "0"])  # its type too
    with pytest.raises(ValueError, match="--max-tokens is already an option"):
        arguments.add_hidden_alias(PARSERS["embed"], PARSERS["embed"]._actions[0], "--max-tokens")


COUNT_OPTIONS = ("--threads", "--max-batch-tokens", "--batch-size", "--max-batch-requests", "--workers")
"""Options that count something the run needs at least one of: 0 must not pass the parser."""


def test_counts_refuse_zero_and_negatives_in_every_command():
    """Issue 37: a positive-integer type that let 0 through (``--threads 0``, ``--max-tokens 0``,
    ``--batch-size 0``) survived every test."""
    for bad in ("0", "-1"):
        with pytest.raises(argparse.ArgumentTypeError, match=f"must be >= 1, got {bad}"):
            arguments.positive_int(bad)
    assert arguments.positive_int("1") == 1
    seen = set()
    for name, parser in PARSERS.items():
        for action in parser._actions:
            for option in set(action.option_strings) & set(COUNT_OPTIONS):
                assert action.type is arguments.positive_int, f"{name} {option}"
                seen.add(option)
    assert seen == set(COUNT_OPTIONS)


def test_no_metavar_is_a_python_name():
    """quickstart showed ``--pretrain-updates PRETRAIN_UPDATES`` where every other command says ``N``."""
    for name, parser in PARSERS.items():
        for action in parser._actions:
            if action.option_strings and action.nargs != 0 and not action.choices and action.help != argparse.SUPPRESS:
                metavar = action.metavar or action.dest.upper()
                assert "_" not in str(metavar), f"{name} {action.option_strings[0]} {metavar}"


def test_the_tokenizer_options_name_every_tokenizer_and_its_file():
    """prepare-tagging's help left out XLM-R's tokenizer and its sentencepiece.bpe.model."""
    for name in ("tokenize", "prepare-tagging"):
        actions = {option: action for action in PARSERS[name]._actions for option in action.option_strings}
        tokenizer = actions["--tokenizer"]
        assert all(choice in tokenizer.help for choice in tokenizer.choices), name
        assert all(file in actions["--model"].help for file in ("vocab.txt", "spiece.model", "sentencepiece.bpe.model"))


def test_serve_progress_is_hidden_and_says_it_does_nothing(capsys):
    """``serve --progress`` was offered and did nothing: it still parses, so that no command line
    breaks, but is not offered, and says so when given."""
    parser = PARSERS["serve"]
    assert "--progress" not in parser.format_help()
    assert parser.parse_args(["m"]).progress is None and capsys.readouterr().err == ""
    assert parser.parse_args(["m", "--no-progress"]).progress is False
    assert capsys.readouterr().err == (
        "roberta-ext serve: note: --no-progress does nothing here (the server draws no progress bars; it logs)\n"
    )


def doc_invocations() -> list[tuple[str, list[str]]]:
    """``(where, argv)`` of every ``roberta-ext`` command in the docs' and README's shell blocks."""
    found = []
    for page in [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]:
        for block in code_blocks(page, ("sh", "bash", "console")):
            text = re.sub(r"\\\n\s*", " ", block.text)
            for line in text.splitlines():
                start = line.find("roberta-ext ")
                if start < 0 or (start and line[start - 1] not in " (`"):
                    continue
                command = re.split(r"\s(?:\||&&|;|>|2>|#)\s", line[start:] + " ")[0]
                try:
                    argv = shlex.split(command)
                except ValueError:
                    continue
                if len(argv) > 1 and argv[1] in cli.COMMANDS:
                    found.append((f"{block.where}: {command.strip()}", argv[1:]))
    return found


DOC_INVOCATIONS = doc_invocations()


def test_the_docs_show_commands():
    assert len(DOC_INVOCATIONS) > 20 and {argv[0] for _, argv in DOC_INVOCATIONS} >= set(cli.MODEL_COMMANDS)


@pytest.mark.parametrize(("where", "argv"), DOC_INVOCATIONS, ids=[where for where, _ in DOC_INVOCATIONS])
def test_every_command_the_docs_show_parses(where, argv, capsys):
    name, rest = (" ".join(argv[:2]), argv[2:]) if argv[:2] == ["embed", "merge"] else (argv[0], argv[1:])
    try:
        PARSERS[name].parse_args(rest)
    except SystemExit as exit_:
        assert exit_.code == 0, f"{where}: {capsys.readouterr().err}"
