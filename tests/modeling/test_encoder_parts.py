"""The encoder's parts one at a time, each against its formula or fairseq's convention: the
activation table, the two position tables, rotary positions and their rotation, the attention
block's projections and the layer's in-place inference path (written for the survivors of a
mutation run of roberta_ext/modeling/encoder.py; the parts are tested whole, against fairseq's
and transformers' layers, in tests/modeling/test_roberta.py and the families' tests)."""

from __future__ import annotations

import math

import pytest
import torch

from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.modeling.encoder import (
    AbsolutePositionalEmbedding,
    LearnedPositionalEmbedding,
    MultiheadSelfAttention,
    TransformerEncoderLayer,
    apply_rotary,
    get_activation_fn,
    rotary,
)
from tests.modeling import tiny_config


def test_an_unknown_activation_is_named():
    with pytest.raises(ValueError) as refused:
        get_activation_fn("swish")
    assert str(refused.value) == "unknown activation function 'swish'"


def test_position_tables_know_their_longest_input_and_fairseqs_padding_row():
    learned = LearnedPositionalEmbedding(514, 4, padding_idx=1)  # roberta.base: 512 tokens
    assert learned.max_positions == 512
    assert LearnedPositionalEmbedding(10, 4, padding_idx=3).max_positions == 6
    assert AbsolutePositionalEmbedding(512, 4).max_positions == 512
    tokens = torch.tensor([[0, 5, 2, 1]])  # the last is padding (index 1)
    learned(tokens).sum().backward()
    assert learned.weight.grad is not None
    assert learned.weight.grad[1].abs().sum() == 0  # the padding row learns nothing, as in fairseq
    assert learned.weight.grad[2:5].abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_cosines_and_sines_follow_the_formula(dtype):
    """Frequency i of a head of size D is theta ** (-2i / D); the D / 2 angles repeat once (the
    rotate-half layout)."""
    positions, head_dim, theta = torch.tensor([0, 1, 5, 37]), 6, 500.0
    cos, sin = rotary(positions, head_dim, theta, dtype)
    assert cos.dtype == sin.dtype == dtype and cos.shape == (4, 6)
    for t, position in enumerate(positions.tolist()):
        angles = [position * theta ** (-2 * i / head_dim) for i in range(head_dim // 2)] * 2
        expected_cos = torch.tensor([math.cos(a) for a in angles]).to(dtype)
        expected_sin = torch.tensor([math.sin(a) for a in angles]).to(dtype)
        torch.testing.assert_close(cos[t], expected_cos, atol=1e-6, rtol=0)
        torch.testing.assert_close(sin[t], expected_sin, atol=1e-6, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_apply_rotary_rotates_each_pair_of_halves(dtype):
    """x (T, H, D): element j of the first half and element j of the second are a pair rotated
    by angle j, the same for every head: (a, b) -> (a cos - b sin, b cos + a sin)."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(3, 2, 8, generator=generator).to(dtype)  # T=3, H=2, D=8: H is not D / 2
    cos, sin = rotary(torch.tensor([0, 2, 9]), 8, 10000.0, torch.float32)
    got = apply_rotary(x, (cos, sin))
    assert got.dtype == dtype
    x32, half = x.float(), 4
    a, b = x32[..., :half], x32[..., half:]
    c, s = cos[:, None, :half], sin[:, None, :half]
    expected = torch.cat((a * c - b * s, b * c + a * s), dim=-1).to(dtype)
    torch.testing.assert_close(got, expected)
    assert torch.equal(got[0], x[0])  # position 0 is not rotated


def test_attention_has_biases_and_separate_projections_unless_told():
    plain = MultiheadSelfAttention(8, 2, 0.0)
    assert plain.qkv_proj is None
    assert all(proj.bias is not None for proj in (plain.q_proj, plain.k_proj, plain.v_proj, plain.out_proj))
    assert [name for name, _ in plain.named_parameters()][:2] == ["k_proj.weight", "k_proj.bias"]  # fairseq's order
    bare = MultiheadSelfAttention(8, 2, 0.0, bias=False)
    assert all(proj.bias is None for proj in (bare.q_proj, bare.k_proj, bare.v_proj, bare.out_proj))
    fused = MultiheadSelfAttention(8, 2, 0.0, fused=True)
    assert fused.qkv_proj is not None and fused.qkv_proj.bias is not None and fused.qkv_proj.weight.shape == (24, 8)
    fused_bare = MultiheadSelfAttention(8, 2, 0.0, bias=False, fused=True)
    assert fused_bare.qkv_proj is not None and fused_bare.qkv_proj.bias is None and fused_bare.out_proj.bias is None


@pytest.mark.parametrize("name", ["tiny", "modernbert-tiny"])
def test_layers_take_the_configs_biases_norms_and_epsilon(name):
    cfg = preset(name)
    layer = TransformerEncoderLayer(cfg)  # index 0 by default: the first layer
    assert layer.normalize_before is cfg.encoder_normalize_before
    assert (layer.fc1.bias is not None) is cfg.ffn_bias and (layer.fc2.bias is not None) is cfg.ffn_bias
    assert (layer.self_attn.out_proj.bias is not None) is cfg.attention_bias
    assert (layer.self_attn.qkv_proj is not None) is cfg.fused_qkv
    norm = layer.final_layer_norm
    assert norm.eps == cfg.layer_norm_eps and (norm.bias is not None) is cfg.norm_bias
    # ModernBERT's first layer has no attention norm (the embeddings' norm comes right before it)
    first_without = cfg.encoder_normalize_before and not cfg.first_layer_attention_norm
    assert isinstance(layer.self_attn_layer_norm, torch.nn.Identity) is first_without
    assert not isinstance(TransformerEncoderLayer(cfg, 1).self_attn_layer_norm, torch.nn.Identity)


def test_inference_in_place_equals_training_and_training_still_differentiates():
    """Without gradients the layer adds and activates in place; with them it must not (autograd
    needs the activation's input): both give the same features."""
    torch.manual_seed(0)
    model = RobertaModel(tiny_config(dropout=0.0, attention_dropout=0.0)).eval()
    tokens = torch.tensor([[0, 5, 6, 7, 2], [0, 8, 2, 1, 1]])
    with torch.no_grad():
        inferred = model(tokens, features_only=True)[0]
    trained = model(tokens, features_only=True)[0]
    torch.testing.assert_close(inferred, trained)
    trained.sum().backward()
    assert all(p.grad is not None for p in model.encoder.sentence_encoder.layers.parameters())


def test_the_encoder_keeps_fairseqs_format_version():
    encoder = RobertaModel(tiny_config()).encoder.sentence_encoder
    assert torch.equal(encoder.state_dict()["version"], torch.tensor([3.0]))


# ------------------------------------------------------------------ the embeddings of each family


def encoder_of(name: str, **overrides):
    torch.manual_seed(0)
    return RobertaModel(preset(name, **overrides)).eval().encoder.sentence_encoder


TOKENS = torch.tensor([[0, 5, 6, 7, 2], [0, 8, 9, 2, 1]])  # the second row padded (index 1)


def test_bert_embeddings_are_token_plus_position_plus_segment_normalised():
    encoder = encoder_of("bert-tiny")
    segments = torch.tensor([[0, 0, 0, 1, 1], [0, 0, 1, 1, 0]])
    expected = encoder.layernorm_embedding(
        encoder.embed_tokens.weight[TOKENS]
        + encoder.embed_positions.weight[:5]  # BERT's positions: the column, padding or not
        + encoder.segment_embeddings.weight[segments]
    )
    torch.testing.assert_close(encoder.embed(TOKENS, segments), expected)
    without = encoder.embed(TOKENS)  # no segment labels: every token in segment 0
    torch.testing.assert_close(without, encoder.embed(TOKENS, torch.zeros_like(segments)))
    assert encoder.embed_positions.max_positions == preset("bert-tiny").num_position_embeddings
    assert encoder.embed_tokens.padding_idx == preset("bert-tiny").padding_idx
    assert encoder.embed_proj is None


def test_albert_factorises_its_embeddings_and_shares_every_layer():
    cfg = preset("albert-tiny", encoder_layers=3)
    encoder = encoder_of("albert-tiny", encoder_layers=3)
    assert encoder.embed_proj is not None
    assert (encoder.embed_proj.in_features, encoder.embed_proj.out_features) == (cfg.embedding_size, 32)
    x = encoder.embed(TOKENS)
    assert x.shape == (2, 5, 32)
    small = encoder.layernorm_embedding(
        encoder.embed_tokens.weight[TOKENS] + encoder.embed_positions.weight[:5] + encoder.segment_embeddings.weight[0]
    )
    torch.testing.assert_close(x, encoder.embed_proj(small))
    first = dict(encoder.layers[0].named_parameters())
    for layer in encoder.layers[1:]:
        assert all(parameter is first[name] for name, parameter in layer.named_parameters())


def test_segment_labels_and_all_hiddens_reach_every_forward_path(monkeypatch):
    """BERT's segment labels change its features on every path (padded batches with and without
    packing, rows of documents, a compiled path in inference); ``return_all_hiddens`` gives the
    embeddings and each layer's output on each, and nothing by default."""
    encoder = encoder_of("bert-tiny")
    ones = torch.ones_like(TOKENS)
    starts = torch.zeros_like(TOKENS, dtype=torch.bool)
    starts[0, 3] = True
    paths = {
        "packed": lambda **kw: encoder(TOKENS, **kw),
        "masked": lambda **kw: encoder.forward_masked(TOKENS, **kw),
        "eager": lambda **kw: encoder.forward_eager(TOKENS, **kw),
        "documents": lambda **kw: encoder(TOKENS, document_starts=starts, **kw),
    }
    with torch.no_grad():
        for name, run in paths.items():
            plain, none = run()
            assert none == [], name
            labelled, every = run(segment_labels=ones, return_all_hiddens=True)
            assert not torch.allclose(plain, labelled), name
            assert len(every) == encoder.cfg.encoder_layers + 1, name
            torch.testing.assert_close(every[-1], labelled, msg=name)
        calls = []
        monkeypatch.setattr(encoder, "inference_forward", lambda *args: calls.append(args) or ("out", []))
        assert encoder(TOKENS, True, ones) == ("out", [])  # in inference the compiled path takes the call
        assert calls[0][0] is TOKENS and calls[0][1:] == (True, ones)
        encoder.train()
        encoder(TOKENS)  # in training it does not
        assert len(calls) == 1


def test_rotary_models_know_their_longest_input_and_table_models_their_tables():
    assert encoder_of("modernbert-tiny").max_positions() == preset("modernbert-tiny").max_positions
    assert encoder_of("tiny").max_positions() == encoder_of("tiny").embed_positions.max_positions


def test_bert_initialisation_is_fairseqs():
    from roberta_ext.modeling.encoder import init_bert_params

    torch.manual_seed(0)
    linear, embedding = torch.nn.Linear(64, 256), torch.nn.Embedding(300, 64, padding_idx=1)
    for module in (linear, embedding):
        init_bert_params(module)
        weight = module.weight.detach()
        kept = weight if module is linear else torch.cat([weight[:1], weight[2:]])
        assert abs(float(kept.mean())) < 0.002 and 0.019 < float(kept.std()) < 0.021
    assert linear.bias is not None and torch.equal(linear.bias, torch.zeros(256))
    assert torch.equal(embedding.weight[1], torch.zeros(64))  # the padding row


@pytest.mark.parametrize(
    ("mode", "shared", "own"),
    [
        ("attention", ("self_attn", "self_attn_layer_norm"), ("fc1", "fc2", "final_layer_norm")),
        ("ffn", ("fc1", "fc2", "final_layer_norm"), ("self_attn", "self_attn_layer_norm")),
    ],
)
def test_partial_sharing_shares_exactly_its_parts_in_every_later_layer(mode, shared, own):
    from roberta_ext.modeling.encoder import build_layers

    layers = build_layers(preset("albert-tiny", encoder_layers=4, share_layers=mode))
    assert len({id(layer) for layer in layers}) == 4
    for layer in layers[1:]:
        for part in shared:
            assert getattr(layer, part) is getattr(layers[0], part), (mode, part)
        for part in own:
            assert getattr(layer, part) is not getattr(layers[0], part), (mode, part)
            assert isinstance(getattr(layer, part), torch.nn.Module)
