"""ModernBERT from transformers folders, exact against transformers' own classes.

Golden values come from transformers itself, in the test: tiny ``ModernBertConfig`` models with
random weights (every parameter drawn, biases and norms included, so a bias flag or a norm read
wrongly shows) are saved with ``save_pretrained``, loaded by ``load_transformers`` and compared on
the same ids: features of every layer, masked-LM logits, classification logits (``cls`` and
``mean`` pooling) and token logits within 1e-4 (fp32) on real tokens, for texts of 3 to 300 tokens
with local windows far smaller than the texts, both ``config.json`` forms and keys with and
without ``model.``. The other way, ``save_transformers`` writes folders that transformers loads
with equal outputs.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.peers import require

transformers = require("transformers", "the tests compare with transformers' ModernBERT")

from roberta_ext.checkpoints import CheckpointError
from roberta_ext.checkpoints.transformers import load_transformers, save_transformers
from roberta_ext.families import SEQUENCE_HEAD, TOKEN_HEAD
from roberta_ext.modeling import EncoderModel, use_attention

PAD = 1
VOCAB = 120
TOL = dict(atol=1e-4, rtol=0)


def tiny_config(**overrides: Any) -> Any:
    """A ModernBERT of 4 layers (global, local, local, global), 32 wide, a window of 8 tokens."""
    values: dict[str, Any] = dict(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=40,
        num_hidden_layers=4,
        num_attention_heads=4,
        max_position_embeddings=512,
        local_attention=8,
        global_attn_every_n_layers=3,
        pad_token_id=PAD,
        bos_token_id=2,
        eos_token_id=3,
        cls_token_id=2,
        sep_token_id=3,
        norm_eps=1e-6,
    )
    values.update(overrides)
    return transformers.ModernBertConfig(**values)


def randomized(model: Any, seed: int = 0) -> Any:
    """``model`` in eval mode with every parameter random (transformers initialises norms to 1
    and biases to 0, which would hide a norm or bias read wrongly)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            centre = 1.0 if "norm" in name and name.endswith("weight") else 0.0
            parameter.copy_(centre + 0.2 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


def save(model: Any, folder: Path, *, config_edit: Any = None) -> Path:
    model.save_pretrained(folder)
    if config_edit is not None:
        path = folder / "config.json"
        config = json.loads(path.read_text())
        config_edit(config)
        path.write_text(json.dumps(config))
    return folder


def batch(lengths: list[int], seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded ids of texts of ``lengths`` tokens ([CLS] ... [SEP]) and their attention mask."""
    generator = torch.Generator().manual_seed(seed)
    tokens = torch.full((len(lengths), max(lengths)), PAD)
    for row, length in enumerate(lengths):
        tokens[row, :length] = torch.randint(4, VOCAB, (length,), generator=generator)
        tokens[row, 0], tokens[row, length - 1] = 2, 3
    return tokens, tokens.ne(PAD).long()


def peer_outputs(peer: Any, tokens: torch.Tensor, mask: torch.Tensor) -> Any:
    with torch.no_grad():
        return peer(input_ids=tokens, attention_mask=mask, output_hidden_states=True)


def assert_real_close(ours: torch.Tensor, theirs: torch.Tensor, mask: torch.Tensor) -> None:
    real = mask.bool()
    torch.testing.assert_close(ours[real], theirs[real], **TOL)


def features(model: EncoderModel, tokens: torch.Tensor, strategy: str = "auto") -> Any:
    with use_attention(model, strategy), model.inference():
        return model.features(tokens, return_all_hiddens=True)


LENGTHS = [3, 17, 300, 40]


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("strategy", ["masked", "per_sequence", "padded", "nested"])
def test_features_equal_transformers_in_every_layer(tmp_path, implementation, strategy):
    peer = randomized(transformers.ModernBertModel(tiny_config(attn_implementation=implementation)))
    loaded = load_transformers(save(peer, tmp_path / "m"))
    assert loaded.architecture == "ModernBertModel" and not loaded.has_lm_head
    tokens, mask = batch(LENGTHS)
    theirs = peer_outputs(peer, tokens, mask)
    ours = features(loaded.model, tokens, strategy)
    assert_real_close(ours.last_hidden_state, theirs.last_hidden_state, mask)
    # transformers' hidden states: the embeddings and every layer but the last, then the final norm's output
    for i, (mine, peer_hidden) in enumerate(zip(ours.hidden_states[:-1], theirs.hidden_states[:-1])):
        assert_real_close(mine, peer_hidden, mask), i


BIAS_FLAGS = ["attention_bias", "mlp_bias", "norm_bias", "classifier_bias", "decoder_bias"]


@pytest.mark.parametrize("flag", BIAS_FLAGS)
def test_every_bias_flag_is_read(tmp_path, flag):
    """Each flag flipped from ModernBERT's default, alone: the model has the biases the file has."""
    default = transformers.ModernBertConfig()
    config = tiny_config(**{flag: not getattr(default, flag)})
    peer = randomized(transformers.ModernBertForMaskedLM(config), seed=3)
    loaded = load_transformers(save(peer, tmp_path / "m"))
    tokens, mask = batch([25, 9])
    with torch.no_grad():
        theirs = peer(input_ids=tokens, attention_mask=mask).logits
    with loaded.model.inference():
        ours = loaded.model.lm_logits(loaded.model.features(tokens).last_hidden_state)
    assert_real_close(ours, theirs, mask)


def test_masked_lm_logits_equal_with_and_without_the_model_prefix(tmp_path):
    peer = randomized(transformers.ModernBertForMaskedLM(tiny_config()), seed=4)
    folder = save(peer, tmp_path / "mlm")
    loaded = load_transformers(folder)
    assert loaded.has_lm_head
    tokens, mask = batch(LENGTHS)
    with torch.no_grad():
        theirs = peer(input_ids=tokens, attention_mask=mask).logits
    with loaded.model.inference():
        ours = loaded.model.lm_logits(loaded.model.features(tokens).last_hidden_state)
    assert_real_close(ours, theirs, mask)

    # A bare ModernBertModel's weights carry no "model." prefix.
    bare = randomized(transformers.ModernBertModel(tiny_config()), seed=4)
    from safetensors.torch import load_file

    keys = load_file(str(save(bare, tmp_path / "bare") / "model.safetensors"))
    assert not any(key.startswith("model.") for key in keys)
    assert load_transformers(tmp_path / "bare").model.cfg.encoder_layers == 4


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_sequence_classification_logits_equal(tmp_path, pooling):
    config = tiny_config(classifier_pooling=pooling, num_labels=3, classifier_bias=True)
    peer = randomized(transformers.ModernBertForSequenceClassification(config), seed=5)
    loaded = load_transformers(save(peer, tmp_path / "cls"))
    model = loaded.model
    assert model.cfg.classifier_pooling == pooling and loaded.labels == ["LABEL_0", "LABEL_1", "LABEL_2"]
    tokens, mask = batch(LENGTHS)
    with torch.no_grad():
        theirs = peer(input_ids=tokens, attention_mask=mask).logits
    with model.inference():
        hidden = model.features(tokens).last_hidden_state
        ours = model.classify(SEQUENCE_HEAD, hidden, padding_mask=tokens.eq(PAD))
    torch.testing.assert_close(ours, theirs, **TOL)


def test_token_classification_logits_equal(tmp_path):
    peer = randomized(transformers.ModernBertForTokenClassification(tiny_config(num_labels=5)), seed=6)
    loaded = load_transformers(save(peer, tmp_path / "tok"))
    tokens, mask = batch(LENGTHS)
    with torch.no_grad():
        theirs = peer(input_ids=tokens, attention_mask=mask).logits
    with loaded.model.inference():
        ours = loaded.model.tag(TOKEN_HEAD, loaded.model.features(tokens).last_hidden_state)
    assert_real_close(ours, theirs, mask)


def released_form(config: dict[str, Any]) -> None:
    """Rewrite a transformers 5 config.json as the released files have it: no ``layer_types`` or
    ``rope_parameters``, and a stale ``layer_norm_eps`` that is not the model's epsilon."""
    every = next(i for i, kind in enumerate(config.pop("layer_types")) if i and kind == "full_attention")
    rope = config.pop("rope_parameters")
    config.update(
        global_attn_every_n_layers=every,
        global_rope_theta=rope["full_attention"]["rope_theta"],
        local_rope_theta=rope["sliding_attention"]["rope_theta"],
        layer_norm_eps=0.5,
    )


@pytest.mark.parametrize("form", ["transformers5", "released"])
def test_both_config_forms_give_the_same_model(tmp_path, form):
    config = tiny_config(
        num_hidden_layers=5,
        global_attn_every_n_layers=2,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 5000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 300.0},
        },
    )
    peer = randomized(transformers.ModernBertModel(config), seed=7)
    edit = released_form if form == "released" else None
    folder = save(peer, tmp_path / form, config_edit=edit)
    written = json.loads((folder / "config.json").read_text())
    assert ("layer_types" in written) == (form == "transformers5")
    cfg = load_transformers(folder).model.cfg
    assert (cfg.rotary_theta, cfg.local_rotary_theta, cfg.global_attn_every_n_layers) == (5000.0, 300.0, 2)
    assert cfg.layer_norm_eps == 1e-6  # norm_eps, never the stale layer_norm_eps
    tokens, mask = batch([60, 7])
    theirs = peer_outputs(peer, tokens, mask)
    assert_real_close(
        features(load_transformers(folder).model, tokens).last_hidden_state, theirs.last_hidden_state, mask
    )


def test_layer_types_without_a_period_are_refused(tmp_path):
    peer = transformers.ModernBertModel(tiny_config())

    def irregular(config: dict[str, Any]) -> None:
        config["layer_types"] = ["full_attention", "sliding_attention", "full_attention", "full_attention"]

    with pytest.raises(CheckpointError, match="layer_types"):
        load_transformers(save(peer, tmp_path / "odd", config_edit=irregular))


def test_padded_batch_equals_single_texts_on_real_tokens(tmp_path):
    peer = randomized(transformers.ModernBertModel(tiny_config()), seed=8)
    model = load_transformers(save(peer, tmp_path / "m")).model
    tokens, mask = batch([3, 33, 120, 9])
    padded = features(model, tokens).last_hidden_state
    for row, length in enumerate(mask.sum(dim=1).tolist()):
        alone = features(model, tokens[row : row + 1, :length]).last_hidden_state
        torch.testing.assert_close(padded[row, :length], alone[0], atol=1e-5, rtol=0)
        assert not padded[row, length:].any()  # zeros on padding


@pytest.mark.parametrize("architecture", ["ModernBertForMaskedLM", "ModernBertForSequenceClassification"])
def test_save_transformers_writes_what_transformers_loads(tmp_path, architecture):
    config = tiny_config(classifier_pooling="mean", num_labels=2, norm_bias=True)
    peer = randomized(getattr(transformers, architecture)(config), seed=9)
    loaded = load_transformers(save(peer, tmp_path / "in"))
    save_transformers(loaded.model, tmp_path / "out", architecture=architecture)
    again = getattr(transformers, architecture).from_pretrained(tmp_path / "out").eval()
    tokens, mask = batch([50, 12])
    with torch.no_grad():
        expected = peer(input_ids=tokens, attention_mask=mask).logits
        actual = again(input_ids=tokens, attention_mask=mask).logits
    torch.testing.assert_close(actual, expected, atol=1e-6, rtol=0)
    reloaded = load_transformers(tmp_path / "out").model.state_dict()
    for key, tensor in loaded.model.state_dict().items():
        if loaded.has_lm_head or not key.startswith("encoder.lm_head."):  # a classifier's LM head is fresh
            assert torch.equal(reloaded[key], tensor), key
