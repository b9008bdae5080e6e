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


# ------------------------------------------------------------------- rounding, scales, buffers


def identity_layer(kernel: str, width: int = 8, bias: bool = False) -> Int8Linear:
    """An int8 identity (its weight 127 levels on the diagonal, exact): the output is the input's
    own quantized levels times its scale."""
    linear = nn.Linear(width, width, bias=bias)
    with torch.no_grad():
        linear.weight.copy_(torch.eye(width))
        if bias:
            linear.bias.copy_(torch.arange(width, dtype=torch.float32))
    quantized = Int8Linear.from_linear(linear)
    quantized.kernel = kernel
    return quantized


@needs_onednn
def test_each_kernel_rounds_halves_its_own_way():
    """Inputs exactly between two levels (scale 1: the row's largest magnitude is 127): oneDNN's
    path rounds half up (``x + 128.5`` truncated), ``torch._int_mm``'s half to even."""
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0]])
    up = torch.tensor([[127.0, 1.0, 2.0, 3.0, 0.0, -1.0, -2.0, 3.0]])
    even = torch.tensor([[127.0, 0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 3.0]])
    assert torch.equal(identity_layer("onednn")(x), up)
    assert torch.equal(identity_layer("int_mm")(x), even)
    assert torch.equal(identity_layer("int_mm", bias=True)(x), even + torch.arange(8.0))
    assert torch.equal(identity_layer("onednn", bias=True)(x), up + torch.arange(8.0))


@pytest.mark.parametrize("kernel", ["onednn", "int_mm"])
@pytest.mark.parametrize("bias", [True, False])
def test_each_row_has_its_own_scale_whatever_its_magnitude(kernel, bias):
    """Rows from 1e-4 to 1e3, their largest magnitude positive in some and negative in others:
    each row is quantized against its own largest magnitude, also when it is far below 1."""
    if kernel == "onednn" and not onednn_int8():
        pytest.skip("oneDNN int8 needs a CPU with VNNI or AMX")
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(6, 48, generator=generator) * torch.tensor([1e-4, 3e-3, 0.2, 1.0, 40.0, 1e3])[:, None]
    x[1, 7], x[4, 3] = -1.0, -400.0  # rows whose largest magnitude is a negative value
    quantized = Int8Linear.from_linear(nn.Linear(48, 24, bias=bias))
    quantized.kernel = kernel
    weight = quantized.weight.float().T * quantized.weight_scale[:, None]
    scale = x.abs().amax(dim=-1, keepdim=True) / 127
    levels = torch.floor(x / scale + 0.5) if kernel == "onednn" else torch.round(x / scale)
    expected = F.linear(levels * scale, weight, quantized.bias)
    magnitude = x.abs().amax(dim=-1, keepdim=True)  # float rounding grows with the row's size
    torch.testing.assert_close(quantized(x) / magnitude, expected / magnitude, atol=1e-6, rtol=1e-5)


def test_without_vnni_the_kernel_is_int_mm(monkeypatch):
    """Where the CPU has no VNNI or AMX (:func:`onednn_int8` False) a layer multiplies with
    ``torch._int_mm``: inputs rounded half to even."""
    import roberta_ext.export.int8 as int8

    monkeypatch.setattr(int8, "onednn_int8", lambda: False)
    quantized = Int8Linear.from_linear(nn.Linear(8, 8, bias=False))
    assert quantized.kernel == "int_mm" and Int8Linear(4, 2).kernel == "int_mm"
    with torch.no_grad():
        quantized.weight.copy_(torch.eye(8, dtype=torch.int8) * 127)
        quantized.weight_scale.fill_(1 / 127)
    x = torch.tensor([[127.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.0]])
    assert torch.equal(quantized(x), torch.tensor([[127.0, 0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 3.0]]))


def test_weights_get_one_scale_per_output_row():
    """``weight_scale`` is each row's largest magnitude / 127 (weights far below 1 included); an
    all-zero row gets a tiny scale and zero levels, not a division by zero."""
    linear = nn.Linear(16, 4)
    with torch.no_grad():
        linear.weight.mul_(torch.tensor([1e-3, 0.1, 1.0, 0.0])[:, None])
    quantized = Int8Linear.from_linear(linear)
    expected = linear.weight.detach().abs().amax(dim=1).clamp(min=1e-12) / 127
    assert torch.equal(quantized.weight_scale, expected)
    assert bool((quantized.weight[:, 3] == 0).all()) and int(quantized.weight[:, :3].abs().amax(dim=0).min()) == 127


def test_a_layer_without_bias_has_none_and_state_without_it():
    linear = nn.Linear(16, 8, bias=False)
    x = outlier_inputs(3, 16)
    for kernel in ("onednn", "int_mm") if onednn_int8() else ("int_mm",):
        quantized = Int8Linear.from_linear(linear)
        quantized.kernel = kernel
        assert quantized.bias is None and set(quantized.state_dict()) == {"weight", "weight_scale"}
        assert torch.allclose(quantized(x), dequantized(quantized, x), atol=1e-4), kernel
    plain = Int8Linear(16, 8, bias=False)
    assert plain.bias is None and plain.input_scale is None
    assert set(Int8Linear(16, 8).state_dict()) == {"weight", "weight_scale", "bias"}


def test_a_zero_smoothing_factor_is_refused():
    factors = torch.ones(16)
    factors[3] = 0.0
    with pytest.raises(ValueError, match="^smoothing must be 16 positive factors, got \\(16,\\)$"):
        Int8Linear.from_linear(nn.Linear(16, 8), factors)


def test_the_output_has_the_inputs_dtype():
    quantized = Int8Linear.from_linear(nn.Linear(16, 8))
    x = outlier_inputs(3, 16)
    out = quantized(x.bfloat16())
    assert out.dtype == torch.bfloat16 and torch.equal(out, quantized(x.bfloat16().float()).bfloat16())


def test_the_plain_kernel_warns_of_nothing():
    """One row or many: ``torch._int_mm``'s path writes into outputs of the right shape (torch
    warns when it has to resize one)."""
    quantized = Int8Linear.from_linear(nn.Linear(16, 8))
    quantized.kernel = "int_mm"
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for rows in (1, 5):
            assert quantized(outlier_inputs(rows, 16)).shape == (rows, 8)


def test_repr_says_smoothed_only_when_smoothed():
    assert repr(Int8Linear(16, 8)) == "Int8Linear(in_features=16, out_features=8, per-token int8 inputs)"
    assert repr(Int8Linear(16, 8, smoothed=True)) == (
        "Int8Linear(in_features=16, out_features=8, per-token int8 inputs, smoothed)"
    )


@needs_onednn
def test_the_weight_is_packed_once():
    quantized = Int8Linear.from_linear(nn.Linear(16, 8))
    first = quantized._packed()
    assert quantized._packed()[0] is first[0] and quantized._packed()[1] is first[1]
    assert first[1].dtype == torch.int32 and torch.equal(first[1], torch.zeros(8, dtype=torch.int32))


def test_work_buffers_are_reused_grown_and_kept_apart_by_dtype():
    from roberta_ext.export.int8 import _Scratch

    scratch = _Scratch()
    first = scratch.take("a", torch.float32, (4, 5))
    assert first.shape == (4, 5) and first.dtype == torch.float32
    assert scratch.take("a", torch.float32, (4, 5)).data_ptr() == first.data_ptr()  # the same size: reused
    assert scratch.take("a", torch.float32, (2, 3)).data_ptr() == first.data_ptr()  # smaller: reused
    assert scratch.take("b", torch.float32, (2, 3)).data_ptr() != first.data_ptr()  # another name
    other = scratch.take("a", torch.int8, (4, 5))  # another dtype: a buffer of that dtype
    assert other.dtype == torch.int8 and other.shape == (4, 5)
    grown = scratch.take("a", torch.int8, (8, 5))
    assert grown.shape == (8, 5) and grown.data_ptr() != other.data_ptr()
