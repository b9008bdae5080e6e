"""The families' structural options on the one encoder core: ALBERT's sharing and factorized
embeddings, BERT's segments, absolute positions and pooler, token heads; and that every
family round-trips through our fairseq-layout checkpoint bit for bit. Equality with
transformers' own BERT/ALBERT/RoBERTa is tested in tests/checkpoints/test_transformers_interop.py."""

from __future__ import annotations

import doctest

import pytest
import torch

from roberta_ext.checkpoints.fairseq import load_roberta_checkpoint, save_roberta_checkpoint
from roberta_ext.families import albert, bert, preset
from roberta_ext.modeling import EncoderConfig, RobertaModel
from roberta_ext.modeling import encoder as encoder_module


def count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def test_albert_base_has_a_tenth_of_bert_base_parameters():
    albert_base = count(RobertaModel(preset("albert-base")))
    bert_base = count(RobertaModel(preset("bert-base")))
    assert 11e6 < albert_base < 13e6, albert_base  # the paper: 12M
    assert 108e6 < bert_base < 112e6, bert_base  # the paper: 110M
    # Without sharing, ALBERT-base's layers would be 12 distinct copies.
    unshared = count(RobertaModel(preset("albert-base", share_layers="none")))
    one_layer = count(RobertaModel(preset("albert-base", encoder_layers=1)))
    assert unshared > 80e6 and one_layer == albert_base  # 12 shared layers cost what one costs


@pytest.mark.parametrize(
    "mode,shared,own",
    [
        ("all", ("self_attn", "fc1", "final_layer_norm"), ()),
        ("ffn", ("fc1", "fc2", "final_layer_norm"), ("self_attn", "self_attn_layer_norm")),
        ("attention", ("self_attn", "self_attn_layer_norm"), ("fc1", "fc2", "final_layer_norm")),
        ("none", (), ("self_attn", "fc1")),
    ],
)
def test_sharing_modes_share_exactly_their_blocks(mode, shared, own):
    model = RobertaModel(preset("albert-tiny", encoder_layers=3, share_layers=mode))
    layers = model.encoder.sentence_encoder.layers
    for part in shared:
        assert getattr(layers[0], part) is getattr(layers[2], part)
    for part in own:
        assert getattr(layers[0], part) is not getattr(layers[2], part)
    # A gradient step on a shared weight moves it in every layer at once.
    if "fc1" in shared:
        with torch.no_grad():
            layers[0].fc1.weight.add_(1.0)
        torch.testing.assert_close(layers[1].fc1.weight, layers[0].fc1.weight)


def test_factorized_embeddings_project_to_the_hidden_size():
    cfg = preset("albert-tiny")
    model = RobertaModel(cfg).eval()
    enc = model.encoder.sentence_encoder
    assert enc.embed_tokens.weight.shape == (cfg.vocab_size, 16)
    assert enc.embed_proj.weight.shape == (32, 16)
    assert model.encoder.lm_head.dense.weight.shape == (16, 32)  # H -> E before the tied output
    tokens = torch.tensor([[2, 7, 8, 3, 0, 0]])
    logits, _ = model(tokens)
    hiddens = model(tokens, features_only=True, return_all_hiddens=True)[1]["inner_states"]
    assert logits.shape == (1, 6, cfg.vocab_size) and all(h.shape == (1, 6, 32) for h in hiddens)
    assert model.encoder.lm_head.weight is enc.embed_tokens.weight


def test_segments_change_features_and_default_to_segment_zero():
    model = RobertaModel(preset("bert-tiny")).eval()
    tokens = torch.tensor([[2, 10, 11, 3, 12, 3]])
    with torch.no_grad():
        default = model(tokens, features_only=True)[0]
        zeros = model(tokens, features_only=True, segment_labels=torch.zeros_like(tokens))[0]
        pair = model(tokens, features_only=True, segment_labels=torch.tensor([[0, 0, 0, 0, 1, 1]]))[0]
    torch.testing.assert_close(default, zeros)
    assert not torch.allclose(default[0, 4:], pair[0, 4:])


def test_absolute_positions_ignore_padding_and_real_tokens_keep_their_features():
    model = RobertaModel(preset("bert-tiny")).eval()
    assert model.encoder.sentence_encoder.embed_positions.weight.shape[0] == 64
    row = torch.tensor([2, 10, 11, 12, 3])
    padded = torch.cat([row, torch.zeros(4, dtype=torch.long)])
    with torch.no_grad():
        alone = model(row[None], features_only=True)[0]
        batch = model(torch.stack([padded, torch.cat([row, row[1:]])]), features_only=True)[0]
    torch.testing.assert_close(batch[0, :5], alone[0], atol=1e-5, rtol=1e-5)


def test_pooled_heads_and_token_heads():
    model = RobertaModel(preset("bert-tiny")).eval()
    model.register_classification_head(bert.NEXT_SENTENCE_HEAD, num_classes=2)
    model.register_token_head("ner", num_labels=5)
    tokens = torch.tensor([[2, 10, 11, 3, 0]])
    with torch.no_grad():
        sentence = model(tokens, classification_head_name=bert.NEXT_SENTENCE_HEAD)[0]
        tags = model(tokens, token_head_name="ner")[0]
        features = model(tokens, features_only=True)[0]
    assert sentence.shape == (1, 2) and tags.shape == (1, 5, 5)
    pooled = torch.tanh(model.pooler.dense(features[:, 0]))
    torch.testing.assert_close(sentence, model.classification_heads[bert.NEXT_SENTENCE_HEAD].out_proj(pooled))
    with pytest.raises(ValueError, match="num_labels"):
        model.register_token_head("bad", num_labels=0)


@pytest.mark.parametrize("name", ["tiny", "bert-tiny", "albert-tiny"])
def test_every_family_round_trips_through_our_checkpoint(tmp_path, name):
    torch.manual_seed(0)
    model = RobertaModel(preset(name)).eval()
    model.register_classification_head("cls", num_classes=3)
    model.register_token_head("ner", num_labels=4)
    save_roberta_checkpoint(model, tmp_path / "model.pt")
    loaded = load_roberta_checkpoint(tmp_path / "model.pt").model
    assert loaded.cfg == model.cfg
    theirs, ours = loaded.state_dict(), model.state_dict()
    assert theirs.keys() == ours.keys()
    for key in ours:
        assert torch.equal(theirs[key], ours[key]), key
    if model.cfg.share_layers == "all":
        layers = loaded.encoder.sentence_encoder.layers
        assert layers[0] is layers[1]
    tokens = torch.tensor([[2, 10, 11, 3]]) if name != "tiny" else torch.tensor([[0, 10, 11, 2]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(tokens, token_head_name="ner")[0], model(tokens, token_head_name="ner")[0])


def test_config_rejects_unknown_family_options():
    with pytest.raises(ValueError, match="share_layers"):
        preset("albert-tiny", share_layers="some")
    with pytest.raises(ValueError, match="position_style"):
        EncoderConfig(position_style="sinusoidal")


@pytest.mark.parametrize("module", [albert, bert, encoder_module])
def test_family_docstring_examples_run(module):
    assert doctest.testmod(module).failed == 0
