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


# ------------------------------------------------------------------------- smoothing (SmoothQuant)


def test_smoothed_layer_is_exact_on_its_own_grid():
    """A smoothed layer quantizes ``x / s`` per token against ``W * s`` per row: the same product in
    exact arithmetic, and on its own grid only float rounding differs (both kernels)."""
    linear = nn.Linear(48, 24)
    x = outlier_inputs(2, 7, 48)
    smoothing = x.abs().amax(dim=(0, 1)).sqrt() / linear.weight.detach().abs().amax(dim=0).sqrt()
    quantized = Int8Linear.from_linear(linear, smoothing)
    assert torch.allclose(quantized.input_scale, 1 / smoothing)
    weight = quantized.weight.float().T * quantized.weight_scale[:, None]  # (out, in): W * s, dequantized
    with torch.no_grad():
        assert torch.allclose(
            weight / smoothing, linear.weight, atol=float(quantized.weight_scale.max()) / smoothing.min()
        )
    expected = dequantized(quantized, x / smoothing)
    kernels = ("onednn", "int_mm") if onednn_int8() else ("int_mm",)
    for kernel in kernels:
        quantized.kernel = kernel
        assert torch.allclose(quantized(x), expected, atol=1e-4), kernel
    assert "smoothed" in repr(quantized) and set(quantized.state_dict()) == {
        "weight",
        "weight_scale",
        "bias",
        "input_scale",
    }
    twin = Int8Linear(48, 24, smoothed=True)
    twin.load_state_dict(quantized.state_dict())
    twin.kernel = quantized.kernel
    assert torch.equal(twin(x), quantized(x))
    with pytest.raises(ValueError, match="smoothing must be 48 positive factors, got \\(47,\\)"):
        Int8Linear.from_linear(linear, smoothing[:47])
    with pytest.raises(ValueError, match="positive"):
        Int8Linear.from_linear(linear, -smoothing)


def test_smoothing_moves_the_outliers_error_into_the_weight():
    """Inputs with two outlier channels 30x the others: per-token scales leave the other channels
    few levels; smoothed, the layer's error to fp32 is less than half as large."""
    linear = nn.Linear(96, 40)
    x = outlier_inputs(4, 50, 96)
    smoothing = x.abs().amax(dim=(0, 1)).sqrt() / linear.weight.detach().abs().amax(dim=0).sqrt()
    with torch.no_grad():
        exact = linear(x)
        plain = (Int8Linear.from_linear(linear)(x) - exact).norm()
        smoothed = (Int8Linear.from_linear(linear, smoothing)(x) - exact).norm()
    assert smoothed < plain / 2
