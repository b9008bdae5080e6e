"""roberta_ext/cli/__init__.py: the ``roberta-ext`` entry point in-process. Its top-level help (every
command with its line), usage errors, the dispatch of ``roberta-ext COMMAND ...`` to the command's
``main`` (a recorder in its place) with the rest of the arguments and its status; the combined parser
:func:`~roberta_ext.cli.build_parser` (each command's parser under its name, hidden aliases too). The
commands' own parsers are tests/cli/test_<command>.py's; tests/cli/test_parsers.py walks them all
against the docs."""

from __future__ import annotations

import argparse
import importlib
import sys

import pytest

from roberta_ext import cli

TOP_HELP = "RoBERTa-family encoders: tools."


def subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction:
    (action,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action


@pytest.fixture
def called(monkeypatch) -> list[tuple[str, list[str]]]:
    """Every command's ``main`` replaced by a recorder of (command, argv) returning 7."""
    calls: list[tuple[str, list[str]]] = []
    for name, command in cli.COMMANDS.items():

        def record(argv, name=name):
            calls.append((name, argv))
            return 7

        monkeypatch.setattr(importlib.import_module(command.module), command.main, record)
    return calls


def test_each_command_runs_its_main_with_the_rest_of_the_arguments(called):
    for name in cli.COMMANDS:
        called.clear()
        assert cli.main([name, "a", "--b", "c"]) == 7
        assert called == [(name, ["a", "--b", "c"])]
    called.clear()
    assert cli.main(["serve"]) == 7 and called == [("serve", [])]


def test_the_arguments_are_read_from_the_command_line_by_default(called, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["roberta-ext", "export", "m", "--output", "m.onnx"])
    assert cli.main() == 7
    assert called == [("export", ["m", "--output", "m.onnx"])]


def test_a_command_s_status_is_the_entry_point_s(monkeypatch):
    from roberta_ext.cli import quickstart

    monkeypatch.setattr(quickstart, "main", lambda argv: 0)
    assert cli.main(["quickstart"]) == 0
    monkeypatch.setattr(quickstart, "main", lambda argv: None)  # a main without a status is a bug
    with pytest.raises(AssertionError):
        cli.main(["quickstart"])


def test_a_command_loads_its_functions_by_name():
    from roberta_ext.cli import corpus, serve

    assert cli.COMMANDS["serve"].load("main") is serve.main
    assert cli.COMMANDS["serve"].load(cli.COMMANDS["serve"].parser) is serve.build_parser
    assert cli.COMMANDS["tokenize"].load(cli.COMMANDS["tokenize"].main) is corpus.tokenize_main


def test_no_command_shows_the_help_with_every_command_s_line(capsys, called):
    with pytest.raises(SystemExit) as exit_:
        cli.main([])
    assert exit_.value.code == 0
    out, err = capsys.readouterr()
    text = " ".join(out.split())
    assert text.startswith(f"usage: roberta-ext [-h] COMMAND ... {TOP_HELP} positional arguments: COMMAND "), text
    listed = text.split("COMMAND ", 2)[2].split(" options: ")[0]
    assert listed == " ".join(f"{name} {command.help}" for name, command in cli.COMMANDS.items())
    assert text.endswith("options: -h, --help show this help message and exit")
    assert err == "" and called == []
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--help"])
    assert exit_.value.code == 0 and " ".join(capsys.readouterr().out.split()) == text


def test_an_unknown_command_is_a_usage_error_naming_the_commands(capsys, called):
    for argv in (["no-such-command"], ["embed merge"], ["--model"]):
        with pytest.raises(SystemExit) as exit_:
            cli.main(argv)
        assert exit_.value.code == 2
        lines = capsys.readouterr().err.splitlines()
        assert lines[0] == "usage: roberta-ext [-h] COMMAND ..."
        if argv[0].startswith("--"):
            assert lines[-1] == "roberta-ext: error: unrecognized arguments: --model"
        else:  # (Python 3.12.8 and later name the choices without quotes)
            choices = ", ".join(cli.COMMANDS)
            message = f"roberta-ext: error: argument COMMAND: invalid choice: {argv[0]} (choose from {choices})"
            assert lines[-1].replace("'", "") == message
    # An option before the command is refused whatever follows: no help of a command parser without its options.
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--verbose", "serve", "--help"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines()[-1] == "roberta-ext: error: unrecognized arguments: --verbose --help"
    assert called == []


def test_the_combined_parser_holds_every_command_s_parser_under_its_name(capsys):
    parser = cli.build_parser()
    assert (parser.prog, parser.description) == ("roberta-ext", TOP_HELP)
    action = subparsers(parser)
    assert (action.dest, action.metavar) == ("command", "COMMAND")
    assert list(action.choices) == list(cli.COMMANDS)  # not "embed merge": it is embed's own sub-command
    shown = {choice.dest: choice.help for choice in action._choices_actions}
    assert shown == {name: command.help for name, command in cli.COMMANDS.items()}
    own = cli.command_parsers()
    for name, combined in action.choices.items():
        assert combined.prog == f"roberta-ext {name}"
        assert (combined.description, combined.epilog) == (own[name].description, own[name].epilog)
        # every option string, the hidden aliases (--max-tokens, --encoder-json, ...) too, on the same dest
        assert {option: a.dest for option, a in combined._option_string_actions.items()} == {
            option: a.dest for option, a in own[name]._option_string_actions.items()
        }, name
    args = parser.parse_args(["predict", "m", "--input", "in.tsv", "--output", "out.tsv", "--max-tokens", "64"])
    assert (args.command, args.model, args.max_tokens) == ("predict", "m", 64)
    args = parser.parse_args(["bpe-encode", "--encoder-json", "e.json", "--vocab-bpe", "v.bpe", "--inputs", "a"])
    assert (args.command, args.gpt2_encoder_json, args.gpt2_vocab_bpe) == ("bpe-encode", "e.json", "v.bpe")
    assert parser.parse_args(["serve", "m", "--port", "9000"]).port == 9000
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["serve", "--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert text.startswith("usage: roberta-ext serve [-h]") and own["serve"].epilog in text


def test_command_parsers_are_every_command_s_and_embed_merge_s():
    parsers = cli.command_parsers()
    assert list(parsers) == [*cli.COMMANDS, "embed merge"]
    for name, parser in parsers.items():
        assert isinstance(parser, argparse.ArgumentParser) and parser.prog == f"roberta-ext {name}", name
    from roberta_ext.cli import embed

    assert parsers["embed merge"].format_help() == embed.build_merge_parser().format_help()
    assert parsers["serve"].format_help() == cli.COMMANDS["serve"].load("build_parser")().format_help()
