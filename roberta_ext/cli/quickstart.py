"""``roberta-ext quickstart``: pretrain and fine-tune a small RoBERTa with ``fairseq-train --user-dir
roberta_ext`` on the standard library's docstrings, then use both checkpoints through torch.hub
(:func:`roberta_ext.quickstart.run`)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from ..quickstart import FAMILIES, Options, run
from .arguments import add_progress_argument, positive_int, show_progress

__all__ = ["build_parser", "main"]

DEFAULTS = Options()


def build_parser() -> argparse.ArgumentParser:
    """``roberta-ext quickstart``'s options (their defaults: :class:`~roberta_ext.quickstart.Options`)."""
    parser = argparse.ArgumentParser(
        prog="roberta-ext quickstart",
        description="Pretrain and fine-tune a small RoBERTa with fairseq-train --user-dir roberta_ext on the "
        "standard library's docstrings, then use both checkpoints through torch.hub.",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULTS.out, metavar="DIR", help="working folder (default: %(default)s)"
    )
    parser.add_argument(
        "--family",
        choices=FAMILIES,
        default=DEFAULTS.family,
        help="the model pretrained and fine-tuned: a RoBERTa on fairseq's recipe, or a ModernBERT on its own "
        "(30%% masking, StableAdamW, warmup-stable-decay) (default: %(default)s)",
    )
    counts = (
        ("--merges", "BPE merges to learn"),
        ("--layers", "encoder layers"),
        ("--dim", "model width; heads = dim/32, FFN 4x (RoBERTa) or a GeGLU of 1.5x (ModernBERT)"),
        ("--tokens-per-sample", "pretraining block length"),
        ("--pretrain-updates", "pretraining updates"),
        ("--finetune-updates", "fine-tuning updates"),
        ("--batch-size", "sentences per batch"),
    )
    for flag, meaning in counts:
        default = getattr(DEFAULTS, flag.removeprefix("--").replace("-", "_"))
        parser.add_argument(
            flag, type=positive_int, metavar="N", default=default, help=f"{meaning} (default: %(default)s)"
        )
    parser.add_argument(
        "--lr",
        type=float,
        metavar="X",
        default=DEFAULTS.lr,
        help="peak pretraining learning rate (default: %(default)s)",
    )
    parser.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        default=DEFAULTS.workers,
        help="processes for bpe-encode/preprocess (default: %(default)s)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        metavar="N",
        default=DEFAULTS.seed,
        help="seed of the train/valid/test split, of the label balancing and of both fairseq-train runs "
        "(default: %(default)s)",
    )
    add_progress_argument(parser, note="; the progress is fairseq-train's log lines, shown as they come")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext quickstart``.

    >>> main(["--pretrain-updates", "8", "--finetune-updates", "4"])  # doctest: +SKIP
    0
    """
    args = build_parser().parse_args(argv)
    options = {name: value for name, value in vars(args).items() if name != "progress"}
    return run(Options(**options, progress=show_progress(args)))
