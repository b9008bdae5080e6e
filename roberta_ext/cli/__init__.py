"""The ``roberta-ext`` command line: every sub-command's parser and ``main``, one module per
command or group, thin over the library functions they call (which take plain arguments).

* :mod:`.arguments` — what the commands share: the model arguments and :func:`~.arguments.load_model`,
  ``--force`` (alias ``--overwrite``), ``--progress``/``--no-progress``, output formats by suffix;
* :mod:`.running` — :func:`~.running.run_command`: expected failures as one line on stderr;
* :mod:`.predict`, :mod:`.embed`, :mod:`.export`, :mod:`.corpus` (``bpe-encode``, ``train-bpe``,
  ``tokenize``, ``prepare-tagging``, ``glue-preprocess``, ``prepare-multiple-choice``),
  :mod:`.quickstart`.

argparse is imported here and nowhere else in the package (tests/test_architecture.py).

>>> sorted(COMMANDS)[:3]
['bpe-encode', 'embed', 'export']
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = ["COMMANDS", "MODEL_COMMANDS", "Command", "build_parser", "command_parsers", "main"]


class Command(NamedTuple):
    """Where a sub-command lives: ``module``'s ``main(argv) -> int`` and ``parser() -> ArgumentParser``."""

    module: str
    main: str
    parser: str
    help: str

    def load(self, name: str) -> Callable[..., object]:
        return getattr(importlib.import_module(self.module), name)


COMMANDS = {
    "quickstart": Command(
        "roberta_ext.cli.quickstart",
        "main",
        "build_parser",
        "pretrain and fine-tune a small RoBERTa with fairseq on the standard library's docstrings",
    ),
    "bpe-encode": Command(
        "roberta_ext.cli.corpus",
        "bpe_encode_main",
        "bpe_encode_parser",
        "GPT-2 BPE-encode text files, as fairseq's multiprocessing_bpe_encoder.py",
    ),
    "train-bpe": Command(
        "roberta_ext.cli.corpus",
        "train_bpe_main",
        "train_bpe_parser",
        "learn encoder.json, vocab.bpe and a fairseq dict.txt from text files",
    ),
    "tokenize": Command(
        "roberta_ext.cli.corpus",
        "tokenize_main",
        "tokenize_parser",
        "WordPiece (BERT) or SentencePiece (ALBERT) tokens per line, for fairseq-preprocess",
    ),
    "prepare-tagging": Command(
        "roberta_ext.cli.corpus",
        "prepare_tagging_main",
        "prepare_tagging_parser",
        "CoNLL-style word/label files -> data for fairseq-train --task roberta_ext_token_classification",
    ),
    "glue-preprocess": Command(
        "roberta_ext.cli.corpus",
        "glue_preprocess_main",
        "glue_preprocess_parser",
        "GLUE TSV folders -> <TASK>-bin/ for fine-tuning, as fairseq's preprocess_GLUE_tasks.sh",
    ),
    "prepare-multiple-choice": Command(
        "roberta_ext.cli.corpus",
        "prepare_multiple_choice_main",
        "prepare_multiple_choice_parser",
        "JSONL of {context, choices, label} -> data for --task roberta_ext_multiple_choice (RACE, CommonsenseQA)",
    ),
    "predict": Command(
        "roberta_ext.cli.predict",
        "main",
        "build_parser",
        "a fine-tuned model's predictions for a TSV/JSONL/text file (GLUE submission format), with metrics",
    ),
    "embed": Command(
        "roberta_ext.cli.embed",
        "main",
        "build_parser",
        "sentence embeddings of a text/JSONL/TSV file -> .npy or safetensors (streaming, resumable, sharded)",
    ),
    "export": Command(
        "roberta_ext.cli.export",
        "main",
        "build_parser",
        "export a model (encoder, a head or the pooling) to ONNX or torch.export",
    ),
    "serve": Command(
        "roberta_ext.cli.serve",
        "main",
        "build_parser",
        "serve a model over HTTP with dynamic batching (TEI/OpenAI-shaped /embed, /predict, ...)",
    ),
}
"""Sub-command -> where it lives. Modules are imported only when their command runs, so that
``roberta-ext --help`` stays fast."""

MODEL_COMMANDS = ("predict", "embed", "export", "serve")
"""The sub-commands that load a model: each takes the arguments of :func:`.arguments.add_model_arguments`."""


def _top_parser() -> tuple[argparse.ArgumentParser, argparse._SubParsersAction]:
    parser = argparse.ArgumentParser(prog="roberta-ext", description="RoBERTa-family encoders: tools.")
    return parser, parser.add_subparsers(dest="command", metavar="COMMAND")


def command_parsers() -> dict[str, argparse.ArgumentParser]:
    """Every sub-command's own parser (``embed merge`` too), each module imported."""
    parsers = {name: command.load(command.parser)() for name, command in COMMANDS.items()}
    parsers["embed merge"] = COMMANDS["embed"].load("build_merge_parser")()
    return {name: parser for name, parser in parsers.items() if isinstance(parser, argparse.ArgumentParser)}


def build_parser() -> argparse.ArgumentParser:
    """The whole ``roberta-ext`` parser: every sub-command's parser under its name (importing
    every command's module: for tests and documentation; :func:`main` imports only one)."""
    parser, sub = _top_parser()
    for name, command_parser in command_parsers().items():
        if " " not in name:
            combined = sub.add_parser(
                name,
                parents=[command_parser],
                add_help=False,
                help=COMMANDS[name].help,
                description=command_parser.description,
                epilog=command_parser.epilog,
            )
            # argparse copies a parent's actions by their shown option strings: hidden aliases
            # (arguments.add_hidden_alias) are copied here, onto the same actions.
            for option, action in command_parser._option_string_actions.items():
                combined._option_string_actions.setdefault(option, action)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext COMMAND ...``: run ``COMMAND``'s ``main`` with the rest of the arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        parser, sub = _top_parser()
        for name, command in COMMANDS.items():
            sub.add_parser(name, help=command.help, add_help=False)
        parser.parse_args(argv or ["--help"])
        return 2
    command = COMMANDS[argv[0]]
    result = command.load(command.main)(argv[1:])
    assert isinstance(result, int)
    return result
