"""Exporting a model for other runtimes: ONNX files for onnxruntime, ``.pt2`` files of torch.export.

The exported graph is :class:`ServingModule`: the encoder on its plain masked path (one attention
call over the padded batch, padded keys masked out: no packing, no data-dependent branch), then
the features, one named head's logits, or a pooled sentence embedding. Both axes of the inputs
are dynamic: any batch size and any length up to ``max_positions()``.

The contract of the graph (the same for ONNX and torch.export):

* ``input_ids``: int64 ``(batch, sequence)``, the indices :meth:`ServedModel.encode`
  gives (``<s> ... </s>``), padded with ``<pad>`` as :meth:`ServedModel.collate` does;
* ``attention_mask``: int64 ``(batch, sequence)``, 1 on real tokens and 0 on padding, as
  transformers' tokenizers give it. A position is padding where the mask is 0 *or* the id is
  ``<pad>`` (fairseq's rule, which our hub follows), so a batch padded with ``<pad>`` may pass a
  mask of ones. Exported with ``attention_mask=False``, the graph takes ``input_ids`` alone.
* one output: ``features`` ``(batch, sequence, C)`` with zeros at padding, in the model's dtype
  (float32; float16 for a model exported in float16, as are logits); or ``logits``
  of the head ``head`` (``(batch, classes)`` for a sentence head, ``(batch, sequence, labels)``
  for a token head); or ``embeddings`` ``(batch, C)`` (``(batch, k * C)`` for k modes) pooled by
  :func:`roberta_ext.embedding.pooling.pool` over the real tokens, ``<s>`` and ``</s>``
  included, as ``hub.embed`` pools: ``pooling="model"`` is the hub's own setting (a
  sentence-transformers folder's pooling, normalisation and ``truncate_dim``). Pooled rows must
  be right-padded (real tokens first), as ``collate`` and transformers' tokenizers pad them.

Models with local attention layers (ModernBERT) keep their window in the graph: the band is
computed from the positions of the real tokens, whatever the length, and the written file is
checked on texts longer than the window.

Files are written whole or not at all, and only after the written file has been run on a
padded batch and found equal to the hub's own outputs, within what the model's dtype can meet
(:func:`check_tolerance`; :func:`to_onnx`, :func:`to_torch_export`; ``check=False`` skips it).
ONNX files are written in float32 or float16 at the opsets of :data:`ONNX_OPSETS`; anything else
is refused before any work (:func:`check_onnx_options`). int8 inference on the CPU
(``from_pretrained(..., dtype="int8")``) is :mod:`roberta_ext.export.int8`; int8 models are not
exported: export the float32 model, and quantize the ONNX file with onnxruntime's tools. See
docs/export.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

from ..atomic import AtomicFiles
from ..embedding.pooling import check_modes, pool
from ..errors import RobertaExtError
from ..inference.head_outputs import classify
from ..inference.inputs import ServedModel, extract_features
from ..modeling.model import eval_mode
from .int8 import Int8Linear, PerTensorInt8Linear, ordinary_indices

__all__ = [
    "DEFAULT_OPSET",
    "FORMATS",
    "MODEL_POOLING",
    "ONNX_DTYPES",
    "ONNX_OPSETS",
    "ExportCheckError",
    "ExportError",
    "ServingModule",
    "SUFFIXES",
    "check_onnx_options",
    "check_tolerance",
    "example_inputs",
    "export_program",
    "hub_outputs",
    "to_onnx",
    "to_torch_export",
]

FORMATS = ("onnx", "torch-export")
SUFFIXES = {".onnx": "onnx", ".pt2": "torch-export"}
"""The format a file's suffix names: ``roberta-ext export`` writes ``y.pt2`` with torch.export."""
MODEL_POOLING = "model"
"""``pooling=MODEL_POOLING``: the hub's own pooling and normalisation, what ``hub.embed`` does by default."""
CHECK_TOLERANCE = 1e-4
"""Largest difference allowed between an exported file's outputs and the hub's, relative to the
size of the outputs (absolute below 1): what the written file is checked against in float32
(:func:`check_tolerance` for other dtypes)."""
HALF_PRECISION_EPS = 16
"""Half-precision files are checked to within this many of their dtype's eps (relative, as
:data:`CHECK_TOLERANCE`): see :func:`check_tolerance`."""
ONNX_OPSETS = range(17, 23)
"""The ONNX opsets :func:`to_onnx` writes (17 to 22): those torch's exporter can write and
onnxruntime runs. The exporter builds opset 18 and converts it: below 17 the conversion fails
(and the exporter used to keep opset 18 without a word); from 23 on it writes attention as
ONNX's ``Attention`` operator, whose CPU kernel in onnxruntime 1.32 refuses the padding mask
(``inconsistent q_sequence_length``). Measured with torch 2.13, onnxscript 0.7.2 and
onnxruntime 1.32: every opset of the range exports, carries the opset asked for, and equals
the hub within 2e-6."""
DEFAULT_OPSET = 20
"""The opset written when none is asked for: torch 2.13's default, fixed here so that a file's
opset does not change with torch's version."""
ONNX_DTYPES = ("float32", "float16")
"""The dtypes ONNX files are written in. onnxruntime's CPU provider, which runs the check, has
no bfloat16 kernels (``NOT_IMPLEMENTED ... Add(14)``): a bfloat16 model is exported with
torch.export (its ``.pt2`` keeps bfloat16), or loaded in float16 or float32 for ONNX. int8
models are not exported (see the module's docstring)."""


class ExportError(RobertaExtError):
    """The export layer's error: a model that could not be exported as asked."""


class ExportCheckError(ExportError, RuntimeError):
    """An exported file's outputs differ from the hub's, or it cannot be run: the file was not written.
    A ``RuntimeError`` too, as it always was."""


def check_onnx_options(*, dtype: torch.dtype | str, opset: int | None = None) -> None:
    """Refuse what :func:`to_onnx` cannot write and check, before any work: a ``ValueError``
    that says what to do instead. ``dtype`` is the model's (a torch dtype or its name).

    >>> check_onnx_options(dtype=torch.float16, opset=18)
    >>> check_onnx_options(dtype="float32", opset=9)
    Traceback (most recent call last):
    ...
    ValueError: opset 9: ONNX files are written at opsets 17 to 22 (default 20): ...
    """
    name = str(dtype).removeprefix("torch.")
    if name == "bfloat16":
        raise ValueError(
            "ONNX files in bfloat16 cannot be run by onnxruntime's CPU provider, which has no bfloat16 kernels "
            "(Add, MatMul, ...): export the model in float16 or float32 (--dtype) for ONNX, or as a torch.export "
            ".pt2 file (--format torch-export), which keeps bfloat16"
        )
    if name not in ONNX_DTYPES and name != "int8":  # (int8: ServingModule says what to do)
        raise ValueError(f"ONNX files are written in {' or '.join(ONNX_DTYPES)}, not {name}")
    if opset is not None and opset not in ONNX_OPSETS:
        raise ValueError(
            f"opset {opset}: ONNX files are written at opsets {ONNX_OPSETS[0]} to {ONNX_OPSETS[-1]} (default "
            f"{DEFAULT_OPSET}): torch's exporter cannot convert its graph to older ones, and onnxruntime cannot "
            "run the attention it writes at newer ones"
        )


def check_tolerance(dtype: torch.dtype) -> float:
    """The largest difference the check allows between an exported file's outputs and the hub's
    (relative to the outputs' size, absolute below 1) for a model in ``dtype``:
    :data:`CHECK_TOLERANCE` in float32, :data:`HALF_PRECISION_EPS` eps in float16 and bfloat16.

    Two half-precision computations of one graph round differently, each a few eps from the exact
    result, and the difference grows with depth. Measured (float16 ONNX, onnxruntime's CPU
    provider, against the float16 hub on the CPU, largest over features, pooling and a head): 1.9
    eps for 2 layers of 64, 3.5 eps for 12 layers of 256, 5.5 eps for 24 layers of 256 (the ONNX
    file is the closer of the two to float32). 16 eps (1.6% in float16) leaves room for deeper
    models and still fails a wrong graph, which moves outputs by tens of percent. torch.export
    files run the hub's own kernels: they equal it exactly in float16 and bfloat16.

    >>> check_tolerance(torch.float32), check_tolerance(torch.float16)
    (0.0001, 0.015625)
    """
    return max(CHECK_TOLERANCE, HALF_PRECISION_EPS * torch.finfo(dtype).eps)


class ServingModule(nn.Module):
    """What is exported: ``input_ids`` (and ``attention_mask``) -> features, a head's logits or
    pooled embeddings, through the hub's model on its plain masked path (see the module's
    docstring for the contract). Inference only: run it in eval mode.

    ``pooling`` is a mode of :data:`~roberta_ext.embedding.pooling.POOLING_MODES` or several
    (concatenated), or ``"model"``: the hub's own (``hub.sentence_embedding``); ``normalize``
    L2-normalises the pooled vector (default: the hub's own with ``"model"``, else not). It
    equals the hub on real tokens: ``extract_features``, ``predict(..., return_logits=True)``,
    the token heads' logits and ``embed``'s pooling.

    >>> roberta = roberta_ext.from_pretrained("quickstart_out/pretrain", "checkpoint_best.pt")  # doctest: +SKIP
    >>> serving = ServingModule(roberta, pooling="mean").eval()                                  # doctest: +SKIP
    >>> serving(torch.tensor([[0, 713, 2, 1]]), torch.tensor([[1, 1, 1, 0]])).shape              # doctest: +SKIP
    torch.Size([1, 128])
    """

    def __init__(
        self,
        hub: ServedModel,
        *,
        head: str | None = None,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        attention_mask: bool = True,
    ) -> None:
        super().__init__()
        model = hub.model
        if head is not None and pooling is not None:
            raise ValueError("export either a head (head=...) or a pooling (pooling=...), not both")
        if head is not None and head not in model.classification_heads and head not in model.token_heads:
            raise KeyError(
                f"no head named {head!r}; the model's classification heads: {sorted(model.classification_heads)}, "
                f"token heads: {sorted(model.token_heads)}"
            )
        if normalize and pooling is None:
            raise ValueError("normalize=True normalises pooled embeddings: give a pooling too")
        quantized = [
            name for name, module in model.named_modules() if isinstance(module, (Int8Linear, PerTensorInt8Linear))
        ]
        if quantized:
            raise ValueError(
                f"this model is quantized to int8 ({quantized[0]} and {len(quantized) - 1} more): export the float32 "
                "model (from_pretrained without dtype) and quantize the exported ONNX file with "
                "onnxruntime.quantization.quantize_dynamic"
            )
        self.model = model
        self.head = head
        self.modes: tuple[str, ...] | None = None
        self.normalize = bool(normalize)
        self.truncate_dim: int | None = None
        """The first this many values of a pooled embedding are kept (a Matryoshka folder's ``truncate_dim``)."""
        if pooling == MODEL_POOLING:
            self.modes = hub.sentence_embedding.pooling
            self.normalize = hub.sentence_embedding.normalize if normalize is None else normalize
            self.truncate_dim = hub.sentence_embedding.truncate_dim
        elif pooling is not None:
            self.modes = check_modes(pooling)
        self.takes_attention_mask = attention_mask
        self.padding_idx = model.cfg.padding_idx
        # BERT-like models embed segment ids, which the hub derives from the ids (0 up to the
        # first [SEP], 1 after): the graph derives them the same way.
        self.segments: Callable[[torch.Tensor], torch.Tensor] | None = (
            hub.inputs.segments if hub.inputs.layout.segments else None
        )

    @property
    def output_name(self) -> str:
        """``features``, ``logits`` (with a head) or ``embeddings`` (with a pooling)."""
        return "logits" if self.head is not None else "embeddings" if self.modes is not None else "features"

    @property
    def input_names(self) -> list[str]:
        return ["input_ids", "attention_mask"] if self.takes_attention_mask else ["input_ids"]

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        real = input_ids.ne(self.padding_idx)  # (B, T), True on real tokens
        if attention_mask is not None:
            real = real & attention_mask.ne(0)
        tokens = input_ids.masked_fill(~real, self.padding_idx)  # positions count real tokens only
        features = self.encode(tokens, real)  # (B, T, C)
        if self.modes is not None:
            return self.pool(features, real.sum(dim=1))  # (B, k * C)
        if self.head is None:
            return features
        if self.head in self.model.classification_heads:
            return self.model.classify(self.head, features, padding_mask=~real)  # (B, classes)
        return self.model.tag(self.head, features)  # (B, T, labels)

    def pool(self, features: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Right-padded ``features`` (B, T, C) with ``lengths`` (B,) real tokens -> embeddings, as
        ``hub.embed`` pools them (normalised, then truncated)."""
        assert self.modes is not None
        embeddings = pool(features, lengths, self.modes)
        if self.normalize:
            embeddings = F.normalize(embeddings, p=2, dim=-1)
        return embeddings if self.truncate_dim is None else embeddings[:, : self.truncate_dim]

    def encode(self, tokens: torch.Tensor, real: torch.Tensor) -> torch.Tensor:
        """The encoder's :meth:`~roberta_ext.modeling.encoder.TransformerEncoder.forward_masked`:
        every layer on the whole batch, padded keys masked out (its ``forward`` checks whether a
        batch has padding and packs it, which depends on the data: a graph cannot)."""
        segment_labels = self.segments(tokens) if self.segments is not None else None
        features, _ = self.model.transformer.forward_masked(tokens, False, segment_labels)
        return torch.where(real.unsqueeze(-1), features, torch.zeros_like(features))  # zeros at padding


# ------------------------------------------------------------------------------- inputs


def example_inputs(hub: ServedModel, batch: int = 2, length: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """A right-padded batch ``(input_ids, attention_mask)`` of ``batch`` rows, ``<s> ... </s>``,
    the first ``length`` tokens long (at most ``max_positions()``), each next one shorter; the
    tokens between are drawn from the dictionary's ordinary symbols (:func:`~roberta_ext.export.int8.ordinary_indices`).

    >>> ids, mask = example_inputs(hub, batch=2, length=5)   # doctest: +SKIP
    >>> ids.tolist(), mask.tolist()                          # doctest: +SKIP
    ([[0, 17, 40, 23, 2], [0, 31, 9, 2, 1]], [[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    """
    length = max(3, min(length, hub.inputs.max_positions))
    generator = torch.Generator().manual_seed(0)
    dictionary = hub.inputs.dictionary
    ordinary = ordinary_indices(dictionary)
    ids = ordinary[torch.randint(len(ordinary), (batch, length), generator=generator)]
    ids[:, 0] = dictionary.bos()
    lengths = [max(3, length - row) for row in range(batch)]
    mask = torch.zeros(batch, length, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, n - 1] = dictionary.eos()
        ids[row, n:] = dictionary.pad()
        mask[row, :n] = 1
    device = hub.model.device
    return ids.to(device), mask.to(device)


def hub_outputs(hub: ServedModel, serving: ServingModule, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What ``serving`` must give for a right-padded batch (padded with ``<pad>``), computed by
    the hub's own methods, and where it is defined: ``(outputs, where)``, ``where`` being True
    on real tokens for per-token outputs and on every row for sentence-level ones.

    >>> outputs, where = hub_outputs(roberta, ServingModule(roberta, pooling="mean"), ids)   # doctest: +SKIP
    """
    real = input_ids.ne(hub.inputs.dictionary.pad())
    every_row = torch.ones(len(input_ids), dtype=torch.bool)
    with torch.no_grad():
        if serving.head is not None and serving.head in hub.model.classification_heads:
            return classify(hub.model, hub.inputs, serving.head, input_ids, return_logits=True), every_row
        features = extract_features(hub.model, hub.inputs, input_ids)
        assert isinstance(features, torch.Tensor)
        if serving.modes is not None:
            return serving.pool(features, real.sum(dim=1)), every_row
        if serving.head is not None:
            features = hub.model.tag(serving.head, features)
        return features, real


# ------------------------------------------------------------------------------ exporting


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """The ONNX exporter without its notes about itself (warnings, and log lines such as
    'torchvision is not installed' or onnxscript's 'fallback is enabled' when it converts the
    opset): the command's output is ours."""
    loggers = [logging.getLogger(name) for name in ("torch.onnx", "onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _dynamic_shapes(serving: ServingModule) -> dict[str, dict[int, Any]]:
    # min 1: a single sentence is a batch too. (torch.export would take a size-1 example as fixed;
    # the example inputs are 2 x 8.)
    batch = torch.export.Dim("batch", min=1)
    sequence = torch.export.Dim("sequence", min=1, max=serving.model.max_positions())
    return {name: {0: batch, 1: sequence} for name in serving.input_names}


def _trace_inputs(serving: ServingModule, hub: ServedModel) -> tuple[torch.Tensor, ...]:
    ids, mask = example_inputs(hub)
    return (ids, mask) if serving.takes_attention_mask else (ids,)


def _program(serving: ServingModule, hub: ServedModel) -> torch.export.ExportedProgram:
    with eval_mode(serving), torch.no_grad():
        return torch.export.export(
            serving, _trace_inputs(serving, hub), dynamic_shapes=_dynamic_shapes(serving), strict=False
        )


def export_program(
    hub: ServedModel,
    *,
    head: str | None = None,
    pooling: str | Sequence[str] | None = None,
    normalize: bool | None = None,
    attention_mask: bool = True,
) -> torch.export.ExportedProgram:
    """The ``torch.export`` program of ``hub``'s :class:`ServingModule` (same arguments), with
    dynamic batch and sequence axes, traced in eval mode (the hub's modes are left as they were).

    >>> program = export_program(roberta, pooling="mean")          # doctest: +SKIP
    >>> program.module()(input_ids, attention_mask).shape          # doctest: +SKIP
    torch.Size([2, 768])
    """
    serving = ServingModule(hub, head=head, pooling=pooling, normalize=normalize, attention_mask=attention_mask)
    return _program(serving, hub)


@contextlib.contextmanager
def _staged(path: Path) -> Iterator[tuple[Path, Callable[[], None]]]:
    """A staging folder beside ``path`` where the export writes ``path.name`` (and, for ONNX
    files over 2 GB, its external ``.data`` file); ``commit()`` moves every file written there
    into ``path``'s folder, all together (:class:`~roberta_ext.atomic.AtomicFiles`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        with AtomicFiles() as files:

            def commit() -> None:
                for staged in sorted(staging.iterdir()):
                    os.replace(staged, files.temporary(path.parent / staged.name))
                files.commit()

            yield staging / path.name, commit
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _check(
    name: Path, ours: torch.Tensor, reference: torch.Tensor, where: torch.Tensor, *, dtype: torch.dtype = torch.float32
) -> float:
    """The largest difference of ``ours`` from ``reference`` at ``where`` (computed in float32);
    raise :class:`ExportCheckError` above :func:`check_tolerance` of the model's ``dtype``
    (relative to the outputs' size when above 1)."""
    where = where.to(reference.device)
    reference = reference.float()
    difference = float((ours.to(reference) - reference)[where].abs().max())
    scale = max(1.0, float(reference[where].abs().max()))
    allowed = check_tolerance(dtype) * scale
    if not difference <= allowed:  # NaN fails too
        raise ExportCheckError(
            f"{name}: the exported graph's outputs differ from the model's by up to {difference:.3g} on a padded batch "
            f"(allowed in {str(dtype).removeprefix('torch.')}: {allowed:.3g}); {name} was not written "
            "(check=False, --no-check, writes it unchecked)"
        )
    return difference


def to_onnx(
    hub: ServedModel,
    path: str | os.PathLike[str],
    *,
    head: str | None = None,
    pooling: str | Sequence[str] | None = None,
    normalize: bool | None = None,
    attention_mask: bool = True,
    opset: int | None = None,
    check: bool = True,
    progress: bool = False,
) -> Path:
    """Write ``hub``'s model as an ONNX file at ``path``: its features, the logits of the head
    ``head``, or embeddings pooled by ``pooling`` (see :class:`ServingModule` and the module's
    docstring for the inputs and outputs; ``opset``: one of :data:`ONNX_OPSETS`, default
    :data:`DEFAULT_OPSET`). The model is in float32 or float16 (:func:`check_onnx_options`
    refuses others before any work). Needs ``onnx`` and ``onnxscript`` (``pip install
    roberta_ext[export]``). ``check`` (needs ``onnxruntime``) runs the written file on a padded
    batch of another size than the one the graph was traced with, and gives it its name only if
    it equals the hub's outputs (within :func:`check_tolerance` of the model's dtype).
    ``progress`` shows the steps as a progress bar on stderr. Returns ``path``.

    >>> roberta.export_onnx("model.onnx", pooling="mean")              # doctest: +SKIP
    PosixPath('model.onnx')
    """
    destination = Path(path)
    check_onnx_options(dtype=hub.model.dtype, opset=opset)
    opset = DEFAULT_OPSET if opset is None else opset
    serving = ServingModule(hub, head=head, pooling=pooling, normalize=normalize, attention_mask=attention_mask)
    with _steps(destination, check, progress) as bar:
        # The module itself, not a torch.export program: given the module and its dynamic
        # shapes, the exporter names the axes "batch" and "sequence" (from a program: s0, s1).
        with _quiet_exporter(), eval_mode(serving), torch.no_grad():
            onnx_program = torch.onnx.export(
                serving,
                _trace_inputs(serving, hub),
                dynamic_shapes=_dynamic_shapes(serving),
                input_names=serving.input_names,
                output_names=[serving.output_name],
                opset_version=opset,
                dynamo=True,
                verbose=False,
            )
        assert onnx_program is not None  # dynamo=True always returns the program
        written = onnx_program.model.opset_imports.get("")
        if written != opset:  # the exporter keeps its own opset where it cannot convert
            raise ExportCheckError(
                f"{destination}: torch's exporter wrote opset {written}, not the {opset} asked for; "
                f"{destination} was not written"
            )
        bar.update()
        with _staged(destination) as (staged, commit):
            onnx_program.save(staged)
            bar.update()
            if check:
                _check_onnx(hub, serving, staged, destination)
                bar.update()
            commit()
    return destination


def _steps(destination: Path, check: bool, progress: bool) -> tqdm:
    """The export's steps (trace, save, check) as a progress bar on stderr, shown only with ``progress``."""
    return tqdm(
        total=3 if check else 2,
        desc=f"export {destination.name}",
        unit="step",
        leave=False,
        disable=not progress,
        file=sys.stderr,
    )


def _check_batch(hub: ServedModel) -> tuple[torch.Tensor, torch.Tensor]:
    """What a written file is checked on: 3 rows of up to 11 tokens (traced on 2 x 8); for a
    model with local attention layers, of up to ``local_attention + 3``, so that the first and
    last tokens of each row lie outside each other's window (all within ``max_positions()``)."""
    window = hub.model.cfg.local_attention
    length = 11 if window is None else max(11, window + 3)
    return example_inputs(hub, batch=3, length=min(length, hub.inputs.max_positions))


def _check_onnx(hub: ServedModel, serving: ServingModule, path: Path, destination: Path) -> None:
    try:
        import onnxruntime
    except ImportError:
        warnings.warn(f"onnxruntime is not installed: {destination} was written unchecked", stacklevel=3)
        return
    ids, mask = _check_batch(hub)
    feeds = {"input_ids": ids.cpu().numpy(), "attention_mask": mask.cpu().numpy()}
    try:
        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        (ours,) = session.run(None, {name: feeds[name] for name in serving.input_names})
    except Exception as error:  # onnxruntime's errors derive from Exception alone
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ExportCheckError(
            f"{destination}: onnxruntime cannot run the exported graph ({reason}); {destination} was not written "
            "(check=False, --no-check, writes it unchecked)"
        ) from None
    _check(destination, torch.from_numpy(ours), *hub_outputs(hub, serving, ids), dtype=hub.model.dtype)


def to_torch_export(
    hub: ServedModel,
    path: str | os.PathLike[str],
    *,
    head: str | None = None,
    pooling: str | Sequence[str] | None = None,
    normalize: bool | None = None,
    attention_mask: bool = True,
    check: bool = True,
    progress: bool = False,
) -> Path:
    """Write ``hub``'s model as a ``torch.export`` program (``torch.export.save``) at ``path``,
    conventionally ``*.pt2``, with the arguments, inputs and output of :func:`to_onnx`:
    ``torch.export.load(path).module()(input_ids, attention_mask)`` runs it
    (``attention_mask=False``: ``module()(input_ids)``). ``check`` loads the written file back
    and runs it on a padded batch before it takes its name. ``progress``: as :func:`to_onnx`'s.
    Returns ``path``.

    >>> roberta.export_torch("model.pt2")                              # doctest: +SKIP
    PosixPath('model.pt2')
    """
    destination = Path(path)
    serving = ServingModule(hub, head=head, pooling=pooling, normalize=normalize, attention_mask=attention_mask)
    with _steps(destination, check, progress) as bar:
        program = _program(serving, hub)
        bar.update()
        with _staged(destination) as (staged, commit):
            torch.export.save(program, staged)
            bar.update()
            if check:
                loaded = torch.export.load(staged).module()
                ids, mask = _check_batch(hub)
                with torch.no_grad():
                    ours = loaded(ids, mask) if attention_mask else loaded(ids)
                _check(destination, ours, *hub_outputs(hub, serving, ids), dtype=hub.model.dtype)
                bar.update()
            commit()
    return destination
