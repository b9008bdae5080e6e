"""int8 inference on the CPU: every linear layer in int8 (``from_pretrained(..., dtype="int8")``).

Each ``nn.Linear`` becomes an :class:`Int8Linear`: its weight in int8 with one scale per output
row, and each call quantizes its input on the fly to 8 bits with **one scale per token** (row),
multiplies into exact int32 sums and scales the result back to fp32. Where the CPU multiplies
int8 with VNNI or AMX (:func:`onednn_int8`), the product is oneDNN's int8 matmul on a weight
packed once in oneDNN's layout, the weight's scales applied in its epilogue and the inputs fed as
uint8 around a zero point of 128 (``kernel="onednn"``); elsewhere ``torch._int_mm``
(``kernel="int_mm"``). Embeddings, LayerNorms, the attention products and the tied masked-LM
projection stay fp32.

Why per token: trained BERT-like models carry a few hidden dimensions whose activations are
20-30x the others' (all-MiniLM-L6-v2: 28 against a median of 1.3 at the feed-forward inputs).
torch's dynamic quantization (``torch.ao.quantization.quantize_dynamic``) gives a whole input
tensor one scale, 7 bits wide on x86 (fbgemm's guard against 16-bit overflow): outliers anywhere
in the batch leave few levels for everything else. On all-MiniLM-L6-v2 and the standard
library's docstrings its mean-pooled embeddings reached a cosine of only 0.969 to fp32 (0.988
with all 8 bits), where one scale per token gives 0.997.

Per-token scales still leave short texts a tail: a token's scale is set by its outlier channels,
and a 1-3-word line's mean-pooled embedding is a handful of tokens (1st-percentile cosine 0.986 on
MiniLM). So the layers that read the residual stream, where the outliers live (each layer's q/k/v
and fc1: :func:`smoothed_linears`), are *smoothed* as SmoothQuant does (Xiao et al., 2023): each
input channel divided by ``s_c = sqrt(max|x_c| / max|W[:, c]|)`` and the weight's column
multiplied by it, the maxima taken while the fp32 model reads a calibration batch
(:func:`calibration_batches`: random ordinary tokens of its own dictionary, unless the caller
passes text). The division cannot fold into the LayerNorm before (post-LN, that output is also
the residual), so it is one more pass over the input. On MiniLM the 1-3-word lines' 1st percentile
went from 0.986 to 0.996 (docs/export.md). The scaling around the product costs
a few element-wise passes, kept few (per-token maximum from ``amax`` and ``amin``; rounding and
shifting in one multiply-add, truncated to uint8 by the conversion) and cheap with per-thread
work buffers (:class:`_Scratch`). On all-MiniLM-L6-v2, single-threaded on a Sapphire Rapids core
(AMX), ``embed`` ran 1.3-1.4x as fast with oneDNN's kernel as with ``torch._int_mm``, and
1.6-4x onnxruntime's ``quantize_dynamic`` int8 (``benchmarks/int8.py``; docs/export.md).
``quantize_int8(model, activations="per_tensor")`` takes fbgemm's kernel instead, with all 8
bits where the CPU multiplies int8 with VNNI (:class:`PerTensorInt8Linear`): faster than
``torch._int_mm``'s path, no faster than oneDNN's, and its embeddings fall to a 1st-percentile
cosine of 0.986-0.989 on MiniLM. ``benchmarks/int8.py`` measures them all.

torchao, which torch 2.13 names as the successor of ``torch.ao.quantization``, ran a linear
layer slower than fp32 on the CPU with ``Int8DynamicActivationInt8WeightConfig`` without
``torch.compile``.
"""

from __future__ import annotations

import functools
import math
import re
import threading
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

if TYPE_CHECKING:
    from ..inference.inputs import ModelInputs
    from ..tokenizers.dictionary import Dictionary

__all__ = [
    "ACTIVATIONS",
    "SMOOTHING_ALPHA",
    "Int8Linear",
    "PerTensorInt8Linear",
    "calibration_batches",
    "full_range_activations",
    "input_maxima",
    "onednn_int8",
    "ordinary_indices",
    "quantize_int8",
    "smoothed_linears",
]

ACTIVATIONS = ("per_token", "per_tensor")
"""How :func:`quantize_int8` scales a layer's inputs: :class:`Int8Linear` or :class:`PerTensorInt8Linear`."""

VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
"""/proc/cpuinfo flags of CPUs whose int8 products accumulate in 32 bits (no 16-bit overflow)."""


class _Scratch(threading.local):
    """Per-thread work buffers of :class:`Int8Linear`, reused from call to call and layer to layer.

    A new tensor of a few megabytes is often memory that glibc maps fresh from the kernel, and
    touching it page by page can cost more than the int8 product itself (1024 tokens x 384 ->
    1536, on the 2-core development machine: the product 1.5 ms, the scaling pass after it
    3.9-4.7 ms, 0.2 ms when glibc is told to keep freed memory). Only the layer's output, which the
    caller keeps, is a new tensor; the temporaries live here, one set per thread (a model may serve
    several threads at once), as large as the largest call so far: at most tokens x (5 x the
    widest input + 4 x the widest output) bytes, 113 MB for a base model's 4096-token batch.
    """

    def __init__(self) -> None:
        self.buffers: dict[str, torch.Tensor] = {}

    def take(self, name: str, dtype: torch.dtype, shape: tuple[int, ...] | torch.Size) -> torch.Tensor:
        numel = math.prod(shape)
        buffer = self.buffers.get(name)
        if buffer is None or buffer.numel() < numel or buffer.dtype != dtype:
            with torch.inference_mode(False):  # a normal tensor: writable in and out of inference mode
                buffer = self.buffers[name] = torch.empty(numel, dtype=dtype)
        return buffer[:numel].view(shape)


_SCRATCH = _Scratch()

_HALF_UP = torch.tensor(128.5)
"""Added to ``x / scale`` (in -127..127) before truncating to uint8: rounds half up and shifts by the zero point 128."""


class Int8Linear(nn.Module):
    """A linear layer in int8: ``weight`` int8 ``(in, out)`` (stored transposed, as
    ``torch._int_mm`` takes it), ``weight_scale`` ``(out,)``, ``bias`` fp32; inputs quantized per
    token (symmetric, 127 levels each side). Inference only.

    With ``input_scale`` ``(in,)`` (a *smoothed* layer, :meth:`from_linear` with ``smoothing``),
    each input channel is multiplied by it before quantizing and the weight's columns hold the
    inverse: the same product, with the input's outlier channels brought down to the others'
    magnitude so that they no longer set every token's scale alone.

    >>> linear = nn.Linear(16, 4)
    >>> x = torch.randn(3, 5, 16)
    >>> torch.cosine_similarity(Int8Linear.from_linear(linear)(x), linear(x), dim=-1).min() > 0.999
    tensor(True)
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor
    bias: torch.Tensor | None
    input_scale: torch.Tensor | None

    def __init__(self, in_features: int, out_features: int, bias: bool = True, smoothed: bool = False) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("weight", torch.zeros(in_features, out_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)
        self.register_buffer("input_scale", torch.ones(in_features) if smoothed else None)
        self.kernel = "onednn" if onednn_int8() else "int_mm"
        """``"onednn"``: oneDNN's int8 matmul (:meth:`_onednn`, where :func:`onednn_int8`); ``"int_mm"``:
        ``torch._int_mm`` and separate passes (:meth:`_int_mm`). Both compute the same sums."""
        self._onednn_weight: tuple[tuple[int, int], torch.Tensor, torch.Tensor] | None = None

    @classmethod
    def from_linear(cls, linear: nn.Linear, smoothing: torch.Tensor | None = None) -> Int8Linear:
        """``linear``'s weight rounded to int8, one scale per output row (its largest magnitude / 127).

        ``smoothing`` ``(in,)``, positive: SmoothQuant's factors (Xiao et al., 2023). The weight's
        column ``c`` is multiplied by ``smoothing[c]`` before rounding, and the layer divides its
        input's channel ``c`` by it (``input_scale``), so ``x W^T`` is unchanged in exact
        arithmetic while the quantization error moves from the input's outlier channels into the
        weight, which has levels to spare (:func:`quantize_int8` picks them)."""
        weight = linear.weight.detach().float()  # (out, in)
        if smoothing is not None:
            if smoothing.shape != (linear.in_features,) or not bool((smoothing > 0).all()):
                raise ValueError(
                    f"smoothing must be {linear.in_features} positive factors, got {tuple(smoothing.shape)}"
                )
            weight = weight * smoothing.float()
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127  # (out,)
        quantized = cls(
            linear.in_features, linear.out_features, bias=linear.bias is not None, smoothed=smoothing is not None
        )
        quantized.weight = torch.round(weight / scale[:, None]).to(torch.int8).t().contiguous()  # (in, out)
        quantized.weight_scale = scale
        if linear.bias is not None:
            quantized.bias = linear.bias.detach().float().clone()
        if smoothing is not None:
            quantized.input_scale = smoothing.float().reciprocal()
        return quantized.to(linear.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        with torch.no_grad():  # inference only: int8 products have no gradient
            rows = x.reshape(-1, self.in_features).float()  # (N, in)
            if self.input_scale is not None:  # smoothed: channel c divided by its factor
                rows = torch.mul(rows, self.input_scale, out=_SCRATCH.take("smoothed", torch.float32, rows.shape))
            out = self._onednn(rows) if self.kernel == "onednn" and rows.shape[0] else self._int_mm(rows)
        return out.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def _onednn(self, rows: torch.Tensor) -> torch.Tensor:  # (N, in) -> (N, out)
        """oneDNN's int8 matmul on the prepacked weight (AMX or VNNI), the weight's row scales applied
        in its epilogue; around it one read pass for the scales, one pass to quantize, one to scale back.

        The inputs go in as uint8 with zero point 128: ``x / scale + 128.5`` truncated to uint8 is
        ``x / scale`` rounded (half up) and shifted by 128, in a multiply-add and a conversion, where
        rounding to int8 takes a division, a ``round`` and a conversion. (uint8 x int8 is also the
        product VNNI and AMX multiply natively.)"""
        # max |x| per token from the largest and the smallest value: two reads, no temporary.
        scale = torch.maximum(rows.amax(dim=1, keepdim=True), rows.amin(dim=1, keepdim=True).neg_())  # (N, 1)
        scale = scale.clamp_(min=1e-12).div_(127)
        shifted = torch.addcmul(
            _HALF_UP, rows, scale.reciprocal(), out=_SCRATCH.take("work", torch.float32, rows.shape)
        )
        quantized = _SCRATCH.take("quantized_u8", torch.uint8, rows.shape).copy_(shifted)  # truncated: rounded
        packed, zero_points = self._packed()
        out = torch.ops.onednn.qlinear_pointwise(
            quantized, 1.0, 128, packed, self.weight_scale, zero_points, None, 1.0, 0, torch.float32, "none", [], ""
        )  # (N, out): weight_scale * exact int32 sums
        return torch.addcmul(self.bias, out, scale, out=out) if self.bias is not None else out.mul_(scale)

    def _int_mm(self, rows: torch.Tensor) -> torch.Tensor:  # (N, in) -> (N, out)
        """The plain path: ``torch._int_mm`` (any CPU torch runs on), every step its own pass."""
        count = rows.shape[0]
        work = _SCRATCH.take("work", torch.float32, rows.shape)
        # max |x| per token: abs, then amax, is 10x faster than ``vector_norm(ord=inf)`` here.
        scale = torch.abs(rows, out=work).amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(127)  # (N, 1)
        scaled = torch.div(rows, scale, out=work).round_()
        quantized = _SCRATCH.take("quantized", torch.int8, rows.shape).copy_(scaled)
        sums = _SCRATCH.take("sums", torch.int32, (count, self.out_features))
        torch._int_mm(quantized, self.weight, out=sums)
        out = torch.mul(sums, scale, out=torch.empty(count, self.out_features))  # (N, out): exact sums, to fp32
        if self.bias is not None:
            torch.addcmul(self.bias, out, self.weight_scale, out=out)
        else:
            out.mul_(self.weight_scale)
        return out

    def _packed(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The weight in oneDNN's own layout and its zero points, made on first use and again
        whenever ``weight`` changes (``load_state_dict``, ``.to``); never part of the state dict."""
        key = (self.weight.data_ptr(), self.weight._version)
        if self._onednn_weight is None or self._onednn_weight[0] != key:
            with torch.inference_mode(False):
                packed = torch.ops.onednn.qlinear_prepack(self.weight.t().contiguous(), None)  # (out, in) in
                zero_points = torch.zeros(self.out_features, dtype=torch.int32)
            self._onednn_weight = (key, packed, zero_points)
        return self._onednn_weight[1], self._onednn_weight[2]

    def __getstate__(self) -> dict[str, object]:
        # oneDNN's packed weight has no storage to copy or pickle; it is made again on first use.
        return {**super().__getstate__(), "_onednn_weight": None}

    def extra_repr(self) -> str:
        smoothed = ", smoothed" if self.input_scale is not None else ""
        return f"in_features={self.in_features}, out_features={self.out_features}, per-token int8 inputs{smoothed}"


@functools.cache
def _vnni() -> bool:
    """Whether /proc/cpuinfo lists one of :data:`VNNI_FLAGS` (False where it cannot be read)."""
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: keep torch's safe default
        return False
    found = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.M)
    flags = found.group(1).split() if found else []
    return any(flag in flags for flag in VNNI_FLAGS)


@functools.cache
def full_range_activations() -> bool:
    """Whether fbgemm may quantize inputs to all 8 bits here: the CPU multiplies int8 with VNNI
    (or the engine is QNNPACK, which never narrows the range).

    >>> isinstance(full_range_activations(), bool)
    True
    """
    return torch.backends.quantized.engine == "qnnpack" or _vnni()


@functools.cache
def onednn_int8() -> bool:
    """Whether :class:`Int8Linear` multiplies with oneDNN here (its ``kernel`` ``"onednn"``): torch
    has oneDNN and its int8 linear op, and the CPU multiplies uint8 by int8 with VNNI or AMX into
    32-bit sums (without VNNI the products pass through 16 bits, which full-range inputs overflow).

    >>> isinstance(onednn_int8(), bool)
    True
    """
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_pointwise") and _vnni()


class PerTensorInt8Linear(DynamicQuantizedLinear):
    """torch's dynamically quantized ``Linear`` (fbgemm: one scale per input tensor, one fused
    kernel), with inputs quantized to all 8 bits where :func:`full_range_activations` allows
    (torch's own always asks for 7)."""

    reduce_range = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.ops.quantized.linear_dynamic(x, self._packed_params._packed_params, reduce_range=self.reduce_range)
        return out.to(x.dtype)

    @classmethod
    def from_float(cls, mod: nn.Module, use_precomputed_fake_quant: bool = False) -> PerTensorInt8Linear:
        quantized = super().from_float(mod, use_precomputed_fake_quant=use_precomputed_fake_quant)
        quantized.reduce_range = not full_range_activations()
        return quantized

    def _get_name(self) -> str:
        return "PerTensorInt8Linear"

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, {7 if self.reduce_range else 8}-bit inputs"


SMOOTHING_ALPHA = 0.5
"""SmoothQuant's migration strength: factor ``s_c = max|x_c| ** a / max|W[:, c]| ** (1 - a)`` for
input channel ``c``; 0.5 splits the range evenly between the inputs and the weight."""


def smoothed_linears(model: nn.Module) -> list[nn.Linear]:
    """The linear layers that read the residual stream, where BERT-like models carry their outlier
    channels: each encoder layer's query, key and value projections (ModernBERT's one fused
    ``qkv_proj``) and its first feed-forward layer (GeGLU's input and gate in one), each once,
    shared ALBERT layers included."""
    from ..modeling.encoder import TransformerEncoderLayer

    found: dict[int, nn.Linear] = {}
    for layer in model.modules():
        if isinstance(layer, TransformerEncoderLayer):
            attention = layer.self_attn
            if attention.qkv_proj is not None:
                projections: tuple[nn.Module, ...] = (attention.qkv_proj,)
            else:
                projections = (attention.q_proj, attention.k_proj, attention.v_proj)
            for linear in (*projections, layer.fc1):
                if type(linear) is nn.Linear:
                    found.setdefault(id(linear), linear)
    return list(found.values())


def input_maxima(model: nn.Module, linears: list[nn.Linear], batches: Iterable[torch.Tensor]) -> list[torch.Tensor]:
    """The largest magnitude each input channel of each of ``linears`` takes while ``model`` (in
    eval mode, without autograd) reads each token batch of ``batches`` (``model(tokens,
    features_only=True)``), padding included: one ``(in,)`` tensor per layer, zeros where a
    layer never ran.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import RobertaModel
    >>> model = RobertaModel(preset("tiny")).eval()
    >>> fc1 = model.transformer.layers[0].fc1
    >>> input_maxima(model, [fc1], [torch.tensor([[0, 5, 6, 2]])])[0].shape
    torch.Size([32])
    """
    maxima = [torch.zeros(linear.in_features) for linear in linears]

    def record(index: int, _module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
        seen = args[0].detach().reshape(-1, maxima[index].numel()).abs().amax(dim=0).float().cpu()
        torch.maximum(maxima[index], seen, out=maxima[index])

    hooks = [linear.register_forward_pre_hook(functools.partial(record, i)) for i, linear in enumerate(linears)]
    try:
        with torch.no_grad():
            for tokens in batches:
                model(tokens, features_only=True)
    finally:
        for hook in hooks:
            hook.remove()
    return maxima


def ordinary_indices(dictionary: Dictionary) -> torch.Tensor:
    """The indices of ``dictionary``'s ordinary symbols, in order: past its specials, and none of
    the symbols that frame or pad a text (``<s>``, ``<pad>``, ``</s>``, ``<unk>``). A
    ``tokenizer.json``'s ``[CLS]``, ``[PAD]``, ... lie among its other tokens (ModernBERT's
    ``[PAD]`` is 50283 of 50368): drawn into a text, a ``[PAD]`` would be read as padding.

    >>> from roberta_ext.tokenizers.dictionary import Dictionary
    >>> symbols = ["hello", "[CLS]", "world", "[SEP]", "[PAD]", "[UNK]", "!"]
    >>> ordinary_indices(Dictionary.from_symbols(symbols, bos="[CLS]", pad="[PAD]", eos="[SEP]", unk="[UNK]")).tolist()
    [0, 2, 6]
    """
    framing = {dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()}
    return torch.tensor([i for i in range(dictionary.nspecial, len(dictionary)) if i not in framing], dtype=torch.long)


def calibration_batches(inputs: ModelInputs, *, rows: int = 8, length: int = 128, seed: int = 0) -> list[torch.Tensor]:
    """What :func:`quantize_int8` calibrates on when given no text (``from_pretrained(...,
    dtype="int8")``): one batch of ``rows`` rows framed as one text is (``<s> ... </s>``, BERT's
    ``[CLS] ... [SEP]``), of ``length`` tokens in all (at most the model's positions), the ones
    between drawn uniformly and reproducibly from the dictionary's ordinary symbols
    (:func:`ordinary_indices`). The outlier
    channels smoothing is for are the model's own, and show on any tokens: on all-MiniLM-L6-v2
    these rows lifted the 1-3-word lines' 1st-percentile cosine to fp32 from 0.9865 to 0.9962,
    mixed docstrings' from 0.9960 to 0.9984 (docs/export.md).

    >>> from roberta_ext.inference.inputs import ModelInputs
    >>> calibration_batches(hub.inputs)[0].shape  # doctest: +SKIP
    torch.Size([8, 128])
    """
    dictionary = inputs.dictionary
    length = min(length, inputs.max_positions)
    generator = torch.Generator().manual_seed(seed)
    ordinary = ordinary_indices(dictionary)
    middle = ordinary[torch.randint(len(ordinary), (rows, max(0, length - 2)), generator=generator)]
    framed = [inputs.layout.join(dictionary.bos(), dictionary.eos(), row.tolist()) for row in middle]
    return [inputs.collate(framed)[0]]


def quantize_int8(
    model: nn.Module, *, activations: str = "per_token", calibration: Iterable[torch.Tensor] | None = None
) -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by an int8 layer, in place, and return ``model``:
    :class:`Int8Linear` (``activations="per_token"``) or :class:`PerTensorInt8Linear`
    (``"per_tensor"``). A layer shared by several parents (ALBERT) stays one shared layer.

    ``calibration`` (per-token only): token batches ``(B, T)`` the fp32 model reads first
    (:func:`input_maxima`); the layers that read the residual stream (:func:`smoothed_linears`)
    are then smoothed with SmoothQuant's factors at :data:`SMOOTHING_ALPHA` from the largest
    input each channel took (:meth:`Int8Linear.from_linear`). Real text of the kind the model
    will see calibrates best; :func:`calibration_batches` is what ``from_pretrained`` uses.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import RobertaModel
    >>> model = quantize_int8(RobertaModel(preset("tiny")).eval())
    >>> model.transformer.layers[0].fc1
    Int8Linear(in_features=32, out_features=64, per-token int8 inputs)
    """
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations={activations!r}: choose one of {', '.join(ACTIVATIONS)}")
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("int8 quantization runs on the CPU: load the model without device=, or with device='cpu'")
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError("int8 quantization starts from a float32 model")
    if activations == "per_tensor":
        if calibration is not None:
            raise ValueError(
                "calibration smooths per-token int8 layers: it does not combine with activations='per_tensor'"
            )
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        with warnings.catch_warnings():
            # torch.ao.quantization's deprecation notices: still the fastest fused int8 kernel here.
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            return quantize_dynamic(
                model,
                {nn.Linear: per_channel_dynamic_qconfig},
                dtype=torch.qint8,
                mapping={nn.Linear: PerTensorInt8Linear},
                inplace=True,
            )
    smoothing: dict[int, torch.Tensor] = {}
    if calibration is not None:
        linears = smoothed_linears(model)
        for linear, seen in zip(linears, input_maxima(model, linears, calibration)):
            if bool(seen.gt(0).any()):  # a layer the calibration reached
                weight = linear.weight.detach().abs().amax(dim=0).float().clamp(min=1e-5)  # (in,)
                factor = seen.clamp(min=1e-5).pow(SMOOTHING_ALPHA) / weight.pow(1 - SMOOTHING_ALPHA)
                smoothing[id(linear)] = factor
    replaced: dict[int, Int8Linear] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                if id(child) not in replaced:
                    replaced[id(child)] = Int8Linear.from_linear(child, smoothing.get(id(child)))
                setattr(parent, name, replaced[id(child)])
    return model
