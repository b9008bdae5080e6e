"""The model's typed interface (``EncoderModel.features``, ``lm_logits``, ``classify``, ``tag``,
``num_classes``, ``device``, ``dtype``, ``eval_mode``, ``inference``): the one way features use a
model, checked against fairseq's call convention (``model(tokens, ...)``) on the same weights."""

from __future__ import annotations

import re

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


def test_fairseqs_forward_defaults_give_logits_and_no_hidden_states(model):
    """``model(tokens)`` and ``model.encoder(tokens)``: vocabulary logits, ``inner_states`` None, as in
    fairseq's ``RobertaModel``; a model is built with its masked-LM head."""
    with torch.no_grad():
        for logits, extra in (model(TOKENS), model.encoder(TOKENS)):
            assert logits.shape == (*TOKENS.shape, model.cfg.vocab_size) and extra == {"inner_states": None}
    assert model.has_lm_head


def test_the_forward_passes_document_starts_on(model):
    """A row of two packed documents: the second's features are those of it alone, through
    fairseq's call convention as through ``features``."""
    row = torch.tensor([[3, 5, 6, 4, 3, 7, 8, 9, 4]])  # no padding id of any family (BERT pads with 0)
    starts = torch.zeros_like(row, dtype=torch.bool)
    starts[0, 4] = True
    with torch.no_grad():
        alone = model.features(row[:, 4:]).last_hidden_state
        packed, _ = model(row, features_only=True, document_starts=starts)
        logits, _ = model.encoder(row, document_starts=starts)
        alone_logits, _ = model.encoder(row[:, 4:])
    torch.testing.assert_close(packed[:, 4:], alone, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits[:, 4:], alone_logits, atol=1e-5, rtol=1e-5)


def test_the_pooler_takes_the_configs_activation():
    cfg = preset("bert-tiny").replace(pooler_activation_fn="relu")
    model = EncoderModel(cfg).eval()
    features = torch.randn(2, 3, cfg.encoder_embed_dim)
    torch.testing.assert_close(model.pooler(features), torch.relu(model.pooler.dense(features[:, 0])))


@pytest.mark.parametrize("register", ["register_classification_head", "register_token_head"])
def test_one_output_is_a_head_and_none_or_a_dotted_name_is_refused_in_full(model, register):
    """One output is a regression head (STS-B) or a one-label tagger; 0, None and names fairseq's state dict
    keys could not hold are refused, naming the head."""
    kind = "head" if register == "register_classification_head" else "token head"
    count = "num_classes" if register == "register_classification_head" else "num_labels"
    assert getattr(model, register)("one", 1).num_classes == 1
    for bad in (0, None):
        message = f"{count} for {kind} 'none' must be a positive integer, got {bad!r}"
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            getattr(model, register)("none", bad)
    name = "classification head" if register == "register_classification_head" else "token head"
    for bad_name in ("a.b", ""):
        message = f"{name} name {bad_name!r} must be non-empty and contain no '.'"
        with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
            getattr(model, register)(bad_name, 2)


def test_a_token_head_takes_the_dropout_given_else_the_models():
    model = EncoderModel(preset("tiny").replace(dropout=0.2))
    assert model.register_token_head("given", 3, dropout=0.3).dropout.p == 0.3
    assert model.register_token_head("default", 3).dropout.p == 0.2


def test_a_head_added_later_takes_the_models_dtype(model):
    model.to(torch.bfloat16)
    head = model.register_classification_head("late", num_classes=2)
    token_head = model.register_token_head("late_tags", num_labels=2)
    assert {p.dtype for p in [*head.parameters(), *token_head.parameters()]} == {torch.bfloat16}


def test_a_head_added_later_goes_to_the_models_device():
    """(The meta device stands in for an accelerator: a head left on the CPU would be on another device.)"""
    model = EncoderModel(preset("tiny")).to("meta")
    head = model.register_classification_head("late", num_classes=2)
    assert {p.device.type for p in head.parameters()} == {"meta"}
