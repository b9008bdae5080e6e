"""The ``roberta-ext`` command line: one subcommand per tool.

>>> main(["--help"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module with a main(argv) function, one-line help)
COMMANDS = {
    "demo": ("roberta_ext.demo", "build a small RoBERTa from the standard library's docstrings and use it via torch.hub"),
    "bpe-encode": ("roberta_ext.commands.bpe_encode", "GPT-2 BPE-encode text files, as fairseq's multiprocessing_bpe_encoder.py"),
    "train-bpe": ("roberta_ext.commands.train_bpe", "learn encoder.json, vocab.bpe and a fairseq dict.txt from text files"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="roberta-ext", description="RoBERTa-family encoders: tools.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in COMMANDS:
        parser.parse_args(argv or ["--help"])
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])
