"""The arguments the commands share, declared once, and what they resolve to.

* :func:`add_model_arguments` + :func:`load_model`: every command that takes a model (``predict``,
  ``embed``, ``export``) takes ``MODEL``, ``--checkpoint-file``, ``--data-name-or-path``, the
  tokenizer files (``--bpe``, ``--gpt2-encoder-json``, ``--gpt2-vocab-bpe``, ``--bpe-vocab-file``,
  ``--bpe-cased``, ``--sentencepiece-model``), ``--device``, ``--dtype`` and ``--threads``, and
  loads it through one :func:`~roberta_ext.loading.from_pretrained` call.
* :func:`add_force_argument`: replacing an existing output is ``--force`` on every command that
  refuses to replace one (``--overwrite`` is the same flag).
* :func:`add_progress_argument` + :func:`show_progress`: ``--progress``/``--no-progress``; by
  default progress bars show only when stderr is a terminal.
* :func:`output_format`: an output's format follows its suffix; an explicit flag wins.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .running import CommandError, say

if TYPE_CHECKING:
    from ..hub import RobertaHubInterface

__all__ = [
    "DTYPES",
    "MODEL_FILES",
    "MODEL_OPTIONS",
    "add_force_argument",
    "add_model_arguments",
    "add_progress_argument",
    "load_model",
    "model_files_given",
    "non_negative_int",
    "output_format",
    "positive_int",
    "resolve_device",
    "show_progress",
]

DTYPES = ("float32", "bfloat16", "float16", "int8")
"""``--dtype``: a torch dtype's name, or ``int8`` (``from_pretrained(..., dtype="int8")``: the
linear layers in int8, CPU only)."""

MODEL_OPTIONS = (
    "--checkpoint-file",
    "--data-name-or-path",
    "--bpe",
    "--gpt2-encoder-json",
    "--gpt2-vocab-bpe",
    "--bpe-vocab-file",
    "--bpe-cased",
    "--sentencepiece-model",
    "--device",
    "--dtype",
    "--threads",
)
"""The options :func:`add_model_arguments` adds (beside ``MODEL``)."""

MODEL_FILES: dict[str, Any] = {
    "checkpoint_file": "model.pt",
    "data_name_or_path": ".",
    "bpe": None,
    "gpt2_encoder_json": None,
    "gpt2_vocab_bpe": None,
    "bpe_vocab_file": None,
    "bpe_cased": False,
    "sentencepiece_model": None,
}
"""The arguments that choose a model's files, with their defaults (``from_pretrained``'s)."""


def positive_int(text: str) -> int:
    """An argparse ``type`` for an integer >= 1.

    >>> positive_int("3")
    3
    """
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """An argparse ``type`` for an integer >= 0.

    >>> non_negative_int("0")
    0
    """
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


# ----------------------------------------------------------------------------- the model


def add_model_arguments(parser: argparse.ArgumentParser, *, device: str = "auto") -> None:
    """``MODEL`` and the options of :data:`MODEL_OPTIONS`; ``device`` is ``--device``'s default."""
    parser.add_argument(
        "model",
        metavar="MODEL",
        help="a model folder (fairseq: a checkpoint and dict.txt; transformers; sentence-transformers), an archive "
        "of one, or a name from_pretrained knows (roberta.base, ...)",
    )
    model = parser.add_argument_group("model (as from_pretrained reads it)")
    model.add_argument(
        "--checkpoint-file",
        default=MODEL_FILES["checkpoint_file"],
        metavar="FILE",
        help="the checkpoint in MODEL (default: model.pt; a fairseq-train --save-dir holds checkpoint_best.pt)",
    )
    model.add_argument(
        "--data-name-or-path",
        default=MODEL_FILES["data_name_or_path"],
        metavar="DIR",
        help="the folder with dict.txt, or input0/dict.txt and label/dict.txt after fine-tuning; a path starting "
        "with '.' is relative to MODEL (default: ., MODEL itself)",
    )
    model.add_argument("--bpe", help="gpt2, bert (wordpiece) or sentencepiece (default: from the files)")
    model.add_argument("--gpt2-encoder-json", metavar="FILE", help="GPT-2 encoder.json")
    model.add_argument("--gpt2-vocab-bpe", metavar="FILE", help="GPT-2 vocab.bpe")
    model.add_argument("--bpe-vocab-file", metavar="FILE", help="WordPiece vocab.txt")
    model.add_argument("--bpe-cased", action="store_true", help="cased WordPiece vocabulary")
    model.add_argument("--sentencepiece-model", metavar="FILE", help="SentencePiece model")
    running = parser.add_argument_group("running the model")
    running.add_argument(
        "--device",
        default=device,
        help="cpu, cuda, cuda:N or auto: cuda when there is one (under torchrun the LOCAL_RANK-th), else cpu; "
        f"int8 runs on the cpu (default: {device})",
    )
    running.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="the model's dtype (default: float32); int8: its linear layers in int8, on the cpu",
    )
    running.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="CPU threads for the model (default: torch's choice, one per core; 1 is faster on a busy machine)",
    )


def resolve_device(device: str, dtype: str, environ: Mapping[str, str] = os.environ) -> str:
    """``--device`` made concrete: ``auto`` is the cpu for int8, else cuda when there is one,
    else the cpu; cuda under torchrun (``LOCAL_RANK``) is that rank's GPU.

    >>> resolve_device("auto", "int8"), resolve_device("cuda", "float32", {"LOCAL_RANK": "1"})
    ('cpu', 'cuda:1')
    """
    if device == "auto":
        import torch

        device = "cuda" if dtype != "int8" and torch.cuda.is_available() else "cpu"
    local_rank = environ.get("LOCAL_RANK")
    if device == "cuda" and local_rank is not None:
        return f"cuda:{int(local_rank)}"
    return device


def model_files_given(args: argparse.Namespace) -> dict[str, str]:
    """The arguments of :data:`MODEL_FILES` given other values than their defaults, as text:
    with ``MODEL``, what says which model a command ran (a resumed run must find the same).

    >>> model_files_given(argparse.Namespace(**{**MODEL_FILES, "checkpoint_file": "checkpoint_best.pt"}))
    {'checkpoint_file': 'checkpoint_best.pt'}
    """
    return {name: str(getattr(args, name)) for name, default in MODEL_FILES.items() if getattr(args, name) != default}


def load_model(args: argparse.Namespace) -> RobertaHubInterface:
    """The model the arguments of :func:`add_model_arguments` name, loaded by
    :func:`~roberta_ext.loading.from_pretrained`; :class:`CommandError` naming ``MODEL`` when
    it cannot be."""
    from ..loading import from_pretrained

    try:
        return from_pretrained(
            args.model,
            args.checkpoint_file,
            args.data_name_or_path,
            bpe=args.bpe,
            gpt2_encoder_json=args.gpt2_encoder_json,
            gpt2_vocab_bpe=args.gpt2_vocab_bpe,
            bpe_vocab_file=args.bpe_vocab_file,
            bpe_cased=args.bpe_cased,
            sentencepiece_model=args.sentencepiece_model,
            device=resolve_device(args.device, args.dtype),
            dtype=args.dtype,
        )
    except (KeyError, ValueError, OSError) as error:  # a checkpoint or tokenizer file that cannot be read
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        raise CommandError(f"cannot load the model from {args.model}: {message}") from None


# ---------------------------------------------------------------------------- the outputs


def add_force_argument(parser: argparse._ActionsContainer, what: str = "the output") -> None:
    """``--force`` (or ``--overwrite``, the same flag): replace ``what`` when it exists."""
    parser.add_argument(
        "--force", "--overwrite", dest="force", action="store_true", help=f"replace {what} if it exists"
    )


def add_progress_argument(parser: argparse._ActionsContainer, note: str = "") -> None:
    """``--progress``/``--no-progress``; :func:`show_progress` reads it."""
    parser.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help=f"show progress bars on stderr (default: when stderr is a terminal{note})",
    )


def show_progress(args: argparse.Namespace) -> bool:
    """``--progress``, or by default whether stderr is a terminal."""
    return sys.stderr.isatty() if args.progress is None else bool(args.progress)


def output_format(prog: str, path: str | os.PathLike[str], given: str | None, suffixes: Mapping[str, str]) -> str:
    """The format to write ``path`` in: ``given`` (an explicit flag) when there is one, else the
    one its suffix names in ``suffixes`` (``""``: any other suffix). A flag that contradicts the
    suffix wins, and the command says so on stderr.

    >>> output_format("demo", "model.pt2", None, {".pt2": "torch-export", "": "onnx"})
    'torch-export'
    """
    suffix = Path(path).suffix.lower()
    by_suffix = suffixes.get(suffix)
    if given is None:
        if by_suffix is None:
            if "" not in suffixes:
                raise CommandError(f"{path}: cannot tell the format from the suffix {suffix!r}: give it explicitly")
            return suffixes[""]
        return by_suffix
    if by_suffix is not None and by_suffix != given:
        say(prog, f"note: writing {given} to {path} as asked, though its suffix {suffix} usually means {by_suffix}")
    return given
