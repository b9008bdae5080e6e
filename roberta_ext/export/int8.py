"""int8 inference on the CPU: every linear layer in int8 (``from_pretrained(..., dtype="int8")``).

Each ``nn.Linear`` becomes an :class:`Int8Linear`: its weight in int8 with one scale per output
row, and each call quantizes its input on the fly to int8 with **one scale per token** (row),
multiplies int8 by int8 into int32 with ``torch._int_mm`` and scales the result back to fp32.
Embeddings, LayerNorms, the attention products and the tied masked-LM projection stay fp32.

Why per token: trained BERT-like models carry a few hidden dimensions whose activations are
20-30x the others' (all-MiniLM-L6-v2: 28 against a median of 1.3 at the feed-forward inputs).
torch's dynamic quantization (``torch.ao.quantization.quantize_dynamic``) gives a whole input
tensor one scale, 7 bits wide on x86 (fbgemm's guard against 16-bit overflow): outliers anywhere
in the batch leave few levels for everything else. On all-MiniLM-L6-v2 and the standard
library's docstrings its mean-pooled embeddings reached a cosine of only 0.969 to fp32 (0.988
with all 8 bits), where one scale per token gives 0.997. ``torch._int_mm`` multiplies as fast as
fbgemm's kernel; the scaling around it is a few element-wise passes, kept cheap with per-thread
work buffers (:class:`_Scratch`). On a quiet 2-core machine the per-token layers ran the models
1.8-3.0x fp32, 0-33% behind fbgemm's fused kernel (docs/export.md); on cores shared with
other work the passes cost more, each waiting for every thread.
``quantize_int8(model, activations="per_tensor")`` takes fbgemm's kernel instead, with all 8
bits where the CPU multiplies int8 with VNNI (:class:`PerTensorInt8Linear`): faster still, but
its embeddings fell to a cosine of 0.988 on MiniLM. ``benchmarks/int8.py`` measures both.

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
from pathlib import Path

import torch
from torch import nn
from torch.ao.nn.quantized.dynamic import Linear as DynamicQuantizedLinear

__all__ = ["ACTIVATIONS", "Int8Linear", "PerTensorInt8Linear", "full_range_activations", "quantize_int8"]

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


class Int8Linear(nn.Module):
    """A linear layer in int8: ``weight`` int8 ``(in, out)`` (stored transposed, as
    ``torch._int_mm`` takes it), ``weight_scale`` ``(out,)``, ``bias`` fp32; inputs quantized per
    token (symmetric, 127 levels each side). Inference only.

    >>> linear = nn.Linear(16, 4)
    >>> x = torch.randn(3, 5, 16)
    >>> torch.cosine_similarity(Int8Linear.from_linear(linear)(x), linear(x), dim=-1).min() > 0.999
    tensor(True)
    """

    weight: torch.Tensor
    weight_scale: torch.Tensor
    bias: torch.Tensor | None

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.register_buffer("weight", torch.zeros(in_features, out_features, dtype=torch.int8))
        self.register_buffer("weight_scale", torch.ones(out_features))
        self.register_buffer("bias", torch.zeros(out_features) if bias else None)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> Int8Linear:
        """``linear``'s weight rounded to int8, one scale per output row (its largest magnitude / 127)."""
        weight = linear.weight.detach().float()  # (out, in)
        scale = weight.abs().amax(dim=1).clamp(min=1e-12) / 127  # (out,)
        quantized = cls(linear.in_features, linear.out_features, bias=linear.bias is not None)
        quantized.weight = torch.round(weight / scale[:, None]).to(torch.int8).t().contiguous()  # (in, out)
        quantized.weight_scale = scale
        if linear.bias is not None:
            quantized.bias = linear.bias.detach().float().clone()
        return quantized.to(linear.weight.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., in) -> (..., out)
        with torch.no_grad():  # inference only: int8 products have no gradient
            rows = x.reshape(-1, self.in_features).float()  # (N, in)
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
        return out.view(*x.shape[:-1], self.out_features).to(x.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, per-token int8 inputs"


@functools.cache
def full_range_activations() -> bool:
    """Whether fbgemm may quantize inputs to all 8 bits here: the CPU multiplies int8 with VNNI
    (or the engine is QNNPACK, which never narrows the range).

    >>> isinstance(full_range_activations(), bool)
    True
    """
    if torch.backends.quantized.engine == "qnnpack":
        return True
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:  # not Linux: keep torch's safe default
        return False
    found = re.search(r"^flags\s*:\s*(.*)$", cpuinfo, re.M)
    flags = found.group(1).split() if found else []
    return any(flag in flags for flag in VNNI_FLAGS)


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


def quantize_int8(model: nn.Module, *, activations: str = "per_token") -> nn.Module:
    """Replace every ``nn.Linear`` of ``model`` by an int8 layer, in place, and return ``model``:
    :class:`Int8Linear` (``activations="per_token"``) or :class:`PerTensorInt8Linear`
    (``"per_tensor"``). A layer shared by several parents (ALBERT) stays one shared layer.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import RobertaModel
    >>> model = quantize_int8(RobertaModel(preset("tiny")).eval())
    >>> model.encoder.sentence_encoder.layers[0].fc1
    Int8Linear(in_features=32, out_features=64, per-token int8 inputs)
    """
    if activations not in ACTIVATIONS:
        raise ValueError(f"activations={activations!r}: choose one of {', '.join(ACTIVATIONS)}")
    if any(p.device.type != "cpu" for p in model.parameters()):
        raise ValueError("int8 quantization runs on the CPU: load the model without device=, or with device='cpu'")
    if any(p.dtype != torch.float32 for p in model.parameters()):
        raise ValueError("int8 quantization starts from a float32 model")
    if activations == "per_tensor":
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
    replaced: dict[int, Int8Linear] = {}
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                if id(child) not in replaced:
                    replaced[id(child)] = Int8Linear.from_linear(child)
                setattr(parent, name, replaced[id(child)])
    return model
