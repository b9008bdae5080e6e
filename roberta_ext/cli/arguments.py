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
* :func:`add_batch_tokens_argument`: ``--max-batch-tokens``, the padded tokens of a forward pass.
* :func:`add_hidden_alias`: another spelling of an option, accepted but not shown in ``--help``
  (``--max-tokens`` for ``--max-batch-tokens``, ``--encoder-json`` for ``--gpt2-encoder-json``).
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
    "add_batch_tokens_argument",
    "add_force_argument",
    "add_gpt2_bpe_arguments",
    "add_hidden_alias",
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
    model.add_argument(
        "--bpe",
        help="gpt2, bert (wordpiece), sentencepiece or hf_tokenizer (tokenizer.json, read by the tokenizers "
        "library) (default: from the files)",
    )
    add_gpt2_bpe_arguments(model)
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


def add_gpt2_bpe_arguments(parser: argparse._ActionsContainer, *, required: bool = False) -> None:
    """``--gpt2-encoder-json`` and ``--gpt2-vocab-bpe``: GPT-2's BPE files, on every command that
    takes them. The spelling is fairseq-train's and ``from_pretrained``'s (``gpt2_encoder_json=``);
    ``--encoder-json`` and ``--vocab-bpe``, the spelling of fairseq's
    ``multiprocessing_bpe_encoder.py`` that the corpus commands used to take, are hidden aliases."""
    encoder = parser.add_argument("--gpt2-encoder-json", required=required, metavar="FILE", help="GPT-2 encoder.json")
    add_hidden_alias(parser, encoder, "--encoder-json")
    vocab = parser.add_argument("--gpt2-vocab-bpe", required=required, metavar="FILE", help="GPT-2 vocab.bpe")
    add_hidden_alias(parser, vocab, "--vocab-bpe")


def add_hidden_alias(parser: argparse._ActionsContainer, action: argparse.Action, *aliases: str) -> None:
    """Accept each of ``aliases`` as another spelling of ``action``'s option, without showing it in
    ``--help``: a spelling the command line used to take (or another tool's), kept so that no command
    line breaks. It is the same action, so ``required``, ``type`` and the messages are the option's
    own (argparse before Python 3.13 has no hidden aliases; :func:`roberta_ext.cli.build_parser`
    copies them onto the combined parser).

    >>> parser = argparse.ArgumentParser()
    >>> add_hidden_alias(parser, parser.add_argument("--max-batch-tokens", type=int), "--max-tokens")
    >>> parser.parse_args(["--max-tokens", "64"]).max_batch_tokens, "--max-tokens" in parser.format_help()
    (64, False)
    """
    for alias in aliases:
        if alias in parser._option_string_actions:
            raise ValueError(f"{alias} is already an option of this parser")
        parser._option_string_actions[alias] = action


def add_batch_tokens_argument(parser: argparse._ActionsContainer, *, default: int | None, help: str) -> None:
    """``--max-batch-tokens N``: the padded tokens (rows x longest row) of one forward pass, as
    ``serve`` and text-embeddings-inference spell it; ``--max-tokens`` (fairseq's spelling, which
    ``predict`` and ``embed`` used to take) is a hidden alias."""
    action = parser.add_argument(
        "--max-batch-tokens", dest="max_tokens", type=positive_int, default=default, metavar="N", help=help
    )
    add_hidden_alias(parser, action, "--max-tokens")


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


def add_force_argument(parser: argparse._ActionsContainer, what: str = "an existing output") -> None:
    """``--force`` (or ``--overwrite``, the same flag): replace ``what`` (a noun phrase: "an
    existing --output-dir", "existing <TASK>-bin folders"), which the command refuses to by default."""
    parser.add_argument(
        "--force", "--overwrite", dest="force", action="store_true", help=f"replace {what} (default: refuse to)"
    )


class _IgnoredFlag(argparse.BooleanOptionalAction):
    """A flag a command accepts so that old command lines still run, though it does nothing
    there: hidden from ``--help``, and saying so on stderr when given."""

    def __init__(self, *args: Any, why: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.why = why

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        super().__call__(parser, namespace, values, option_string)
        say(parser.prog, f"note: {option_string} does nothing here ({self.why})")


def add_progress_argument(parser: argparse._ActionsContainer, note: str = "", *, ignored: str | None = None) -> None:
    """``--progress``/``--no-progress``; :func:`show_progress` reads it. A command that draws no
    progress bars passes ``ignored`` (why): the flag is then hidden, and a note when given."""
    if ignored is not None:
        parser.add_argument("--progress", action=_IgnoredFlag, why=ignored, default=None, help=argparse.SUPPRESS)
        return
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
    by_suffix = suffixes.get(suffix) if suffix else None  # ("": the format of any other suffix, not one named)
    if given is None:
        if by_suffix is None:
            if "" not in suffixes:
                raise CommandError(f"{path}: cannot tell the format from the suffix {suffix!r}: give it explicitly")
            return suffixes[""]
        return by_suffix
    if by_suffix is not None and by_suffix != given:
        say(prog, f"note: writing {given} to {path} as asked, though its suffix {suffix} usually means {by_suffix}")
    return given
