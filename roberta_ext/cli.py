"""The ``roberta-ext`` command line: one subcommand per tool.

>>> main(["--help"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> ("module:function" taking argv and returning an exit code, one-line help).
# Modules are imported only when their command runs, so `--help` stays fast.
COMMANDS = {
    "quickstart": (
        "roberta_ext.quickstart:main",
        "pretrain and fine-tune a small RoBERTa with fairseq on the standard library's docstrings",
    ),
    "bpe-encode": (
        "roberta_ext.corpus.bpe:bpe_encode_main",
        "GPT-2 BPE-encode text files, as fairseq's multiprocessing_bpe_encoder.py",
    ),
    "train-bpe": (
        "roberta_ext.corpus.bpe:train_bpe_main",
        "learn encoder.json, vocab.bpe and a fairseq dict.txt from text files",
    ),
    "tokenize": (
        "roberta_ext.corpus.tokenize:tokenize_main",
        "WordPiece (BERT) or SentencePiece (ALBERT) tokens per line, for fairseq-preprocess",
    ),
    "prepare-tagging": (
        "roberta_ext.corpus.tagging:prepare_tagging_main",
        "CoNLL-style word/label files -> data for fairseq-train --task roberta_ext_token_classification",
    ),
    "glue-preprocess": (
        "roberta_ext.corpus.glue:glue_preprocess_main",
        "GLUE TSV folders -> <TASK>-bin/ for fine-tuning, as fairseq's preprocess_GLUE_tasks.sh",
    ),
    "prepare-multiple-choice": (
        "roberta_ext.corpus.multiple_choice:prepare_multiple_choice_main",
        "JSONL of {context, choices, label} -> data for --task roberta_ext_multiple_choice (RACE, CommonsenseQA)",
    ),
    "predict": (
        "roberta_ext.predict:predict_main",
        "a fine-tuned model's predictions for a TSV/JSONL/text file (GLUE submission format), with metrics",
    ),
    "embed": (
        "roberta_ext.embedding.command:embed_main",
        "sentence embeddings of a text/JSONL/TSV file -> .npy or safetensors (streaming, resumable, sharded)",
    ),
    "export": (
        "roberta_ext.export:export_main",
        "export a model (encoder, a head or the pooling) to ONNX or torch.export",
    ),
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
    module_name, function = COMMANDS[argv[0]][0].split(":")
    return getattr(importlib.import_module(module_name), function)(argv[1:])
