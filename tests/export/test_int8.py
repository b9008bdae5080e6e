"""Int8Linear's two kernels (oneDNN's prepacked int8 matmul and ``torch._int_mm``) against an
explicit dequantized computation and against each other."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from roberta_ext.export.int8 import Int8Linear, onednn_int8

needs_onednn = pytest.mark.skipif(not onednn_int8(), reason="oneDNN int8 needs a CPU with VNNI or AMX")


def dequantized(quantized: Int8Linear, x: torch.Tensor) -> torch.Tensor:
    """The oneDNN kernel's arithmetic in plain fp32: inputs rounded (half up) to 127 levels per
    token, int8 weights times their row scales."""
    weight = quantized.weight.float().T * quantized.weight_scale[:, None]  # (out, in)
    scale = x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-12) / 127
    return F.linear(torch.floor(x / scale + 0.5) * scale, weight, quantized.bias)


def outlier_inputs(*shape: int) -> torch.Tensor:
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    x[..., 5] = 30.0  # an outlier dimension, as trained BERTs have
    x[..., 9] = -25.0
    return x


@needs_onednn
def test_onednn_kernel_is_the_default_where_the_cpu_has_it():
    assert Int8Linear.from_linear(nn.Linear(8, 4)).kernel == "onednn"


@needs_onednn
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_kernel_is_exact_on_its_own_grid(bias):
    """The int32 sums are exact and the scales the same: only float rounding differs."""
    linear = nn.Linear(48, 24, bias=bias)
    quantized = Int8Linear.from_linear(linear)
    x = outlier_inputs(2, 7, 48)
    assert torch.allclose(quantized(x), dequantized(quantized, x), atol=1e-5)
    x[0, 0] = 0.0  # an all-zero token: zero in, bias out
    assert torch.allclose(quantized(x)[0, 0], linear.bias if bias else torch.zeros(24), atol=1e-6)


@needs_onednn
def test_onednn_and_int_mm_kernels_agree():
    """The same levels and sums, rounded half up against half to even: a rare level apart."""
    quantized = Int8Linear.from_linear(nn.Linear(96, 40))
    x = outlier_inputs(3, 50, 96)
    fast = quantized(x)
    quantized.kernel = "int_mm"
    plain = quantized(x)
    assert float(F.cosine_similarity(fast, plain, dim=-1).min()) > 0.9999
    assert float((fast - plain).abs().max()) <= 0.01 * float(plain.abs().max())
    assert quantized(x[:, :0]).shape == (3, 0, 40)


@needs_onednn
def test_onednn_packed_weight_follows_the_weight_and_stays_out_of_the_state():
    """The packed copy is made again when the weight changes, is not in the state dict, and does
    not stop copying or pickling the layer."""
    quantized = Int8Linear.from_linear(nn.Linear(16, 8))
    x = outlier_inputs(4, 16)
    before = quantized(x)
    assert set(quantized.state_dict()) == {"weight", "weight_scale", "bias"}
    other = Int8Linear.from_linear(nn.Linear(16, 8))
    quantized.load_state_dict(other.state_dict())
    assert torch.equal(quantized(x), other(x)) and not torch.equal(quantized(x), before)
    with torch.no_grad():
        quantized.weight.neg_()  # in place: the version counter moves
    assert torch.allclose(quantized(x), dequantized(quantized, x), atol=1e-5)
    for twin in (copy.deepcopy(quantized), pickle.loads(pickle.dumps(quantized))):
        assert torch.equal(twin(x), quantized(x))
    assert quantized(torch.zeros(0, 16)).shape == (0, 8)
