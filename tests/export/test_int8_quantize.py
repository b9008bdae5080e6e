"""``quantize_int8`` on small models: which layers it replaces and how (shared ones once, fbgemm's
per-channel weights for ``per_tensor``), SmoothQuant's factors against the formula from the
recorded input maxima, the calibration batches' defaults, and the full text of every refusal."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch
from torch import nn

import roberta_ext
from roberta_ext.export.int8 import (
    SMOOTHING_ALPHA,
    Int8Linear,
    PerTensorInt8Linear,
    calibration_batches,
    full_range_activations,
    input_maxima,
    quantize_int8,
    smoothed_linears,
)
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from tests.test_hub import make_model_dir


@pytest.fixture(scope="module")
def hub(tmp_path_factory, bpe_files):
    return roberta_ext.from_pretrained(str(make_model_dir(tmp_path_factory.mktemp("model"), bpe_files)))


def small_activation_model() -> RobertaModel:
    """A tiny model whose LayerNorms scale by 0.1: every input of the smoothed layers is below 1."""
    torch.manual_seed(0)
    model = RobertaModel(preset("tiny")).eval()
    with torch.no_grad():
        for norm in model.modules():
            if isinstance(norm, nn.LayerNorm):
                norm.weight.mul_(0.1)
                norm.bias.zero_()
    return model


def test_smoothing_factors_follow_smoothquants_formula():
    """``s_c = max|x_c| ** 0.5 / max|W[:, c]| ** 0.5`` from what each layer read, for inputs and
    weights far below 1 (no clamping there), and a layer whose inputs all stay below 1 is smoothed too."""
    model = small_activation_model()
    calibration = [torch.randint(4, 30, (3, 11), generator=torch.Generator().manual_seed(0))]
    linears = smoothed_linears(model)
    seen = input_maxima(model, linears, calibration)
    weights = [linear.weight.detach().abs().amax(dim=0) for linear in linears]
    assert all(float(s.max()) < 1 for s in seen) and all(float(w.max()) < 1 for w in weights)
    assert all(float(s.min()) > 1e-5 for s in seen) and all(float(w.min()) > 1e-5 for w in weights)
    quantize_int8(model, calibration=calibration)
    layers = model.encoder.sentence_encoder.layers
    quantized = [
        linear
        for layer in layers
        for linear in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.fc1)
    ]
    assert SMOOTHING_ALPHA == 0.5 and len(quantized) == len(seen)
    for layer, inputs, weight in zip(quantized, seen, weights):
        expected = inputs.pow(SMOOTHING_ALPHA) / weight.pow(1 - SMOOTHING_ALPHA)
        torch.testing.assert_close(layer.input_scale, expected.reciprocal(), rtol=1e-6, atol=0)


def test_a_layer_the_calibration_never_reached_is_not_smoothed():
    model = small_activation_model()
    quantize_int8(model, calibration=[])
    assert all(getattr(module, "input_scale", None) is None for module in model.modules())


def test_a_linear_shared_by_two_parents_stays_one_layer():
    shared = nn.Linear(8, 4)
    model = nn.Sequential(nn.Sequential(shared), nn.Sequential(shared, nn.Linear(4, 2)))
    quantize_int8(model)
    assert isinstance(model[0][0], Int8Linear) and model[0][0] is model[1][0]
    assert isinstance(model[1][1], Int8Linear) and model[1][1] is not model[0][0]


def test_per_tensor_layers_have_per_channel_weights_and_say_how_many_bits():
    model = quantize_int8(nn.Sequential(nn.Linear(64, 32)), activations="per_tensor")
    layer = model[0]
    assert isinstance(layer, PerTensorInt8Linear)
    assert layer.weight().qscheme() == torch.per_channel_affine and layer.weight().dtype == torch.qint8
    assert layer.reduce_range is (not full_range_activations())
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    expected = torch.ops.quantized.linear_dynamic(
        x, layer._packed_params._packed_params, reduce_range=layer.reduce_range
    )
    assert torch.equal(layer(x), expected)
    described = "PerTensorInt8Linear(in_features=64, out_features=32, dtype=torch.qint8, "
    described += "qscheme=torch.per_channel_affine"
    layer.reduce_range = False
    assert repr(layer) == f"{described}, 8-bit inputs)"
    layer.reduce_range = True
    assert repr(layer) == f"{described}, 7-bit inputs)"


def test_every_refusal_in_full():
    with pytest.raises(
        ValueError,
        match="^"
        + re.escape("int8 quantization runs on the CPU: load the model without device=, or with device='cpu'")
        + "$",
    ):
        quantize_int8(nn.Sequential(nn.Linear(4, 4, device="meta")))
    with pytest.raises(ValueError, match="^int8 quantization starts from a float32 model$"):
        quantize_int8(nn.Sequential(nn.Linear(4, 4)).half())
    message = "calibration smooths per-token int8 layers: it does not combine with activations='per_tensor'"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        quantize_int8(nn.Sequential(nn.Linear(4, 4)), activations="per_tensor", calibration=[])
    with pytest.raises(ValueError, match="^activations='per_row': choose one of per_token, per_tensor$"):
        quantize_int8(nn.Sequential(nn.Linear(4, 4)), activations="per_row")


def test_calibration_batches_defaults(hub):
    inputs = dataclasses.replace(hub.inputs, max_positions=512)
    (batch,) = calibration_batches(inputs)
    assert batch.shape == (8, 128)
    assert torch.equal(batch, calibration_batches(inputs, seed=0)[0])
    assert not torch.equal(batch, calibration_batches(inputs, seed=1)[0])
    dictionary = hub.dictionary
    (two,) = calibration_batches(hub.inputs, rows=3, length=2)  # <s> </s> and nothing between
    assert two.tolist() == [[dictionary.bos(), dictionary.eos()]] * 3


def test_calibration_batches_draw_no_special_symbol(hub):
    (batch,) = calibration_batches(hub.inputs, rows=512, length=32)
    middle = batch[:, 1:-1]
    assert int(middle.min()) >= hub.dictionary.nspecial and int(batch.max()) < len(hub.dictionary)
    assert len(middle.unique()) > len(hub.dictionary) // 2  # drawn over the whole dictionary
