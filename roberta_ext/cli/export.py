"""``roberta-ext export``: a model (its encoder, a head or a pooled embedding) to an ONNX file or a
torch.export ``.pt2`` file (:func:`roberta_ext.export.to_onnx`, :func:`~roberta_ext.export.to_torch_export`).

The format follows the output's suffix (``.onnx``: ONNX, ``.pt2``: torch.export; any other: ONNX);
``--format`` wins over the suffix, and where they disagree the command says so on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..embedding.pooling import POOLING_MODES
from ..export import (
    DEFAULT_OPSET,
    FORMATS,
    MODEL_POOLING,
    ONNX_DTYPES,
    ONNX_OPSETS,
    SUFFIXES,
    ExportCheckError,
    ServingModule,
    check_onnx_options,
    to_onnx,
    to_torch_export,
)
from .arguments import (
    add_force_argument,
    add_model_arguments,
    add_progress_argument,
    load_model,
    output_format,
    show_progress,
)
from .running import CommandError, run_command

__all__ = ["build_parser", "main"]

PROG = "roberta-ext export"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Export a model's encoder (its features), one of its heads (--head: logits) or a pooled sentence "
            "embedding (--pooling) to ONNX, for onnxruntime, or to a torch.export program (.pt2). Inputs: "
            "input_ids (int64, batch x sequence, padded with <pad>) and attention_mask (int64, 1 on real tokens; a "
            "position is padding where it is 0 or the id is <pad>); both axes are dynamic. The file is run on a "
            "padded batch and compared with the model before it is written, and is written whole or not at all."
        ),
        epilog=(
            "example: roberta-ext export checkpoints --checkpoint-file checkpoint_best.pt --output model.onnx; then "
            "onnxruntime.InferenceSession('model.onnx').run(None, {'input_ids': ids, 'attention_mask': mask})"
        ),
    )
    add_model_arguments(parser, device="cpu")
    parser.add_argument(
        "--format",
        choices=FORMATS,
        help="onnx or torch-export (default: from the output's suffix: .pt2 torch-export, else onnx; a format "
        "given here wins over the suffix)",
    )
    parser.add_argument("--output", required=True, type=Path, metavar="FILE", help="file to write (.onnx or .pt2)")
    outputs = parser.add_mutually_exclusive_group()
    outputs.add_argument("--head", metavar="NAME", help="output this classification or token head's logits")
    outputs.add_argument(
        "--pooling",
        metavar="MODE[,MODE]",
        help=f"output sentence embeddings pooled over the real tokens as hub.embed pools: {', '.join(POOLING_MODES)} "
        f"(several, comma-separated, are concatenated), or '{MODEL_POOLING}': the model's own (a "
        "sentence-transformers folder's pooling and normalisation; else mean)",
    )
    parser.add_argument(
        "--normalize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="L2-normalise the embeddings (default: as the model does with --pooling model, else not)",
    )
    parser.add_argument(
        "--no-attention-mask",
        dest="attention_mask",
        action="store_false",
        help="the graph takes input_ids alone; padding is where the id is <pad> (fairseq's rule)",
    )
    parser.add_argument(
        "--opset",
        type=int,
        metavar="N",
        help=f"ONNX opset, {ONNX_OPSETS[0]} to {ONNX_OPSETS[-1]} (default: {DEFAULT_OPSET}); ONNX files are written in "
        f"{' or '.join(ONNX_DTYPES)} (--dtype), .pt2 files in any --dtype but int8",
    )
    parser.add_argument("--no-check", dest="check", action="store_false", help="write without comparing outputs")
    add_force_argument(parser, "an existing --output")
    add_progress_argument(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext export``: a model to an ONNX file or a torch.export ``.pt2`` file.

    >>> main(["checkpoints", "--checkpoint-file", "checkpoint_best.pt", "--pooling", "mean",
    ...       "--output", "model.onnx"])        # doctest: +SKIP
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.opset is not None and args.format == "torch-export":
        parser.error("--opset is for --format onnx")
    return run_command(PROG, lambda: _export(args), threads=args.threads)


def _export(args: argparse.Namespace) -> int:
    written = output_format(PROG, args.output, args.format, {**SUFFIXES, "": "onnx"})
    if args.opset is not None and written != "onnx":
        raise CommandError(f"--opset is for ONNX files, and {args.output} is written with torch.export")
    if args.output.exists() and not args.force:
        raise CommandError(f"refusing to overwrite {args.output} (use --force)")
    # What cannot be written or checked is refused here, before the model loads.
    if args.dtype == "int8":
        raise CommandError(
            "int8 models are not exported: export the float32 model, then quantize the ONNX file with "
            "onnxruntime.quantization.quantize_dynamic (docs/export.md)"
        )
    if written == "onnx":
        try:
            check_onnx_options(dtype=args.dtype, opset=args.opset)
        except ValueError as error:
            raise CommandError(f"{args.output}: {error}") from None
    pooling = args.pooling if args.pooling in (None, MODEL_POOLING) else args.pooling.split(",")
    options: dict[str, Any] = dict(
        head=args.head, pooling=pooling, normalize=args.normalize, attention_mask=args.attention_mask
    )
    hub = load_model(args)
    progress = show_progress(args)
    try:
        serving = ServingModule(hub, **options)  # a wrong --head or --pooling fails here, before any work
        if written == "onnx":
            to_onnx(hub, args.output, opset=args.opset, check=args.check, progress=progress, **options)
        else:
            to_torch_export(hub, args.output, check=args.check, progress=progress, **options)
    except (KeyError, ValueError, ExportCheckError) as error:
        raise CommandError(error.args[0] if isinstance(error, KeyError) and error.args else str(error)) from None
    print(f"wrote {args.output}: {', '.join(serving.input_names)} -> {serving.output_name}", file=sys.stderr)
    return 0
