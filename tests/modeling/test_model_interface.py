"""The model's typed interface (``EncoderModel.features``, ``lm_logits``, ``classify``, ``tag``,
``num_classes``, ``device``, ``dtype``, ``eval_mode``, ``inference``): the one way features use a
model, checked against fairseq's call convention (``model(tokens, ...)``) on the same weights."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from roberta_ext.families import preset
from roberta_ext.modeling import ENCODER_PREFIX, EncoderModel, EncoderOutput, RobertaModel
from roberta_ext.modeling.model import eval_mode

TOKENS = torch.tensor([[0, 5, 6, 7, 2], [0, 8, 2, 1, 1]])


@pytest.fixture(params=["tiny", "bert-tiny", "modernbert-tiny"])
def model(request) -> EncoderModel:
    torch.manual_seed(0)
    model = EncoderModel(preset(request.param)).eval()
    model.register_classification_head("cls", num_classes=3)
    model.register_token_head("ner", num_labels=4)
    return model


def test_fairseqs_name_is_the_same_class():
    assert RobertaModel is EncoderModel


def test_features_equal_fairseqs_call_convention(model):
    with torch.no_grad():
        out = model.features(TOKENS, return_all_hiddens=True)
        features, extra = model(TOKENS, features_only=True, return_all_hiddens=True)
    assert isinstance(out, EncoderOutput)
    torch.testing.assert_close(out.last_hidden_state, features, rtol=0, atol=0)
    assert out.hidden_states is not None and len(out.hidden_states) == model.cfg.encoder_layers + 1
    for ours, theirs in zip(out.hidden_states, extra["inner_states"]):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert model.features(TOKENS).hidden_states is None


def test_heads_equal_fairseqs_call_convention(model):
    masked = TOKENS.eq(6)
    with torch.no_grad():
        features = model.features(TOKENS).last_hidden_state
        torch.testing.assert_close(model.lm_logits(features, masked), model(TOKENS, masked_tokens=masked)[0])
        padding = TOKENS.eq(model.cfg.padding_idx)
        torch.testing.assert_close(
            model.classify("cls", features, padding_mask=padding), model(TOKENS, classification_head_name="cls")[0]
        )
        torch.testing.assert_close(model.tag("ner", features), model(TOKENS, token_head_name="ner")[0])
    assert (model.num_classes("cls"), model.num_classes("ner")) == (3, 4)
    with pytest.raises(KeyError, match=r"no head named 'mnli'; registered heads: \['cls', 'ner'\]"):
        model.num_classes("mnli")


def test_device_dtype_and_the_core_are_the_models(model):
    assert model.device == torch.device("cpu") and model.dtype == torch.float32
    assert model.to(torch.bfloat16).dtype == torch.bfloat16
    assert model.embed_tokens is model.transformer.embed_tokens
    assert model.state_dict()[ENCODER_PREFIX + "embed_tokens.weight"] is not None


def test_inference_runs_in_eval_mode_without_autograd_and_gives_each_mode_back(model):
    model.train()
    model.classification_heads["cls"].eval()
    modes = [module.training for module in model.modules()]
    with model.inference():
        assert not any(module.training for module in model.modules())
        assert not model.features(TOKENS).last_hidden_state.requires_grad
    assert [module.training for module in model.modules()] == modes
    with pytest.raises(RuntimeError, match="^inside$"), model.inference():
        raise RuntimeError("inside")
    assert [module.training for module in model.modules()] == modes


def test_eval_mode_gives_every_module_of_any_tree_its_mode_back():
    module = nn.Sequential(nn.Linear(2, 2), nn.Sequential(nn.Dropout(), nn.Linear(2, 2)))
    module.train()
    module[1][0].eval()
    modes = [sub.training for sub in module.modules()]
    with eval_mode(module):
        assert not any(sub.training for sub in module.modules())
    assert [sub.training for sub in module.modules()] == modes
    with pytest.raises(RuntimeError, match="^inside$"), eval_mode(module):
        raise RuntimeError("inside")
    assert [sub.training for sub in module.modules()] == modes
