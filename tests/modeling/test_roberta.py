"""The encoder core on its own: shapes, padding invariance, heads, structure and configs.
Equality with fairseq itself is tested in tests/test_hub_vs_fairseq.py."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from roberta_ext.modeling import EncoderConfig, RobertaModel, use_attention
from roberta_ext.modeling.attention import PACKING_MIN_PADDING
from roberta_ext.modeling.encoder import make_positions
from tests.modeling import tiny_config

PAD = 1


def tiny(**overrides) -> RobertaModel:
    torch.manual_seed(0)
    return RobertaModel(tiny_config(**overrides)).eval()


def random_tokens(lengths: list[int], vocab: int = 64) -> torch.Tensor:
    """Right-padded batch with <s> ... </s> rows of the given lengths."""
    tokens = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(4, vocab, (n,))
        tokens[i, 0], tokens[i, n - 1] = 0, 2
    return tokens


@pytest.mark.parametrize("pre_ln", [False, True])
def test_features_alone_equal_features_in_padded_batch(pre_ln):
    model = tiny(encoder_normalize_before=pre_ln)
    batch = random_tokens([9, 4, 7])
    with torch.no_grad():
        together = model(batch, features_only=True)[0]
        for i, n in enumerate([9, 4, 7]):
            alone = model(batch[i : i + 1, :n], features_only=True)[0]
            torch.testing.assert_close(together[i : i + 1, :n], alone, atol=1e-5, rtol=1e-5)


def test_left_padding_gives_the_same_features_as_right_padding():
    model = tiny()
    row = random_tokens([6])[0]
    right = torch.cat([row, torch.full((3,), PAD)])[None]
    left = torch.cat([torch.full((3,), PAD), row])[None]
    with torch.no_grad():
        a = model(right, features_only=True)[0][0, :6]
        b = model(left, features_only=True)[0][0, 3:]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_positions_start_after_padding_index_and_skip_padding():
    tokens = torch.tensor([[0, 7, 2, PAD], [PAD, 0, 7, 2]])
    assert make_positions(tokens, PAD).tolist() == [[2, 3, 4, 1], [1, 2, 3, 4]]
    assert EncoderConfig().num_position_embeddings == 514  # RoBERTa-base's 512 positions


def reference_layer(layer, x: torch.Tensor, pad: torch.Tensor) -> torch.Tensor:
    """A plain post-LN layer with explicit softmax attention, to check the SDPA path."""
    attn = layer.self_attn
    b, t, c = x.shape
    h, d = attn.num_heads, attn.head_dim
    q = (attn.q_proj(x) * d**-0.5).view(b, t, h, d).transpose(1, 2)
    k = attn.k_proj(x).view(b, t, h, d).transpose(1, 2)
    v = attn.v_proj(x).view(b, t, h, d).transpose(1, 2)
    scores = q @ k.transpose(-1, -2)  # (B, H, T, T)
    scores = scores.masked_fill(pad[:, None, None, :], -math.inf)
    out = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, c)
    x = layer.self_attn_layer_norm(x + attn.out_proj(out))
    return layer.final_layer_norm(x + layer.fc2(F.gelu(layer.fc1(x))))


def test_sdpa_attention_matches_a_plain_softmax_reference():
    model = tiny()
    layer = model.encoder.sentence_encoder.layers[0]
    x = torch.randn(2, 5, 32)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        ours = layer(x, (~pad)[:, None, None, :])
        ref = reference_layer(layer, x, pad)
    torch.testing.assert_close(ours[0], ref[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours[1, :3], ref[1, :3], atol=1e-5, rtol=1e-5)


def test_return_all_hiddens_gives_embeddings_then_every_layer():
    model = tiny(encoder_layers=3)
    tokens = random_tokens([5])
    with torch.no_grad():
        features, extra = model(tokens, features_only=True, return_all_hiddens=True)
    hiddens = extra["inner_states"]
    assert len(hiddens) == 4 and all(h.shape == (1, 5, 32) for h in hiddens)
    torch.testing.assert_close(hiddens[-1], features)


@pytest.mark.parametrize("lengths", [[7, 7, 7], [7, 4, 7]], ids=["full", "packed"])
@pytest.mark.parametrize("activation", ["gelu", "gelu_accurate", "relu", "tanh", "linear"])
@pytest.mark.parametrize("pre_ln", [False, True])
def test_inference_in_place_gives_the_bits_of_autograd_and_leaves_every_hidden_state_alone(activation, pre_ln, lengths):
    # Without autograd the layers add residuals and apply the activation in place (fewer buffers):
    # the same bits as with autograd, and no returned hidden state is overwritten by a later layer.
    model = tiny(encoder_layers=3, activation_fn=activation, encoder_normalize_before=pre_ln)
    tokens = random_tokens(lengths)
    features, extra = model(tokens, features_only=True, return_all_hiddens=True)
    with torch.inference_mode():
        fast, fast_extra = model(tokens, features_only=True, return_all_hiddens=True)
        again = [h.clone() for h in fast_extra["inner_states"]]
        model(tokens, features_only=True)
    assert torch.equal(fast, features.detach())
    for ours, reference, kept in zip(fast_extra["inner_states"], extra["inner_states"], again, strict=True):
        assert torch.equal(ours, reference.detach()) and torch.equal(ours, kept)


def test_lm_head_on_masked_positions_equals_full_logits_there():
    model = tiny()
    tokens = random_tokens([8, 6])
    masked = torch.zeros_like(tokens, dtype=torch.bool)
    masked[0, 3] = masked[1, 2] = True
    with torch.no_grad():
        full = model(tokens)[0]
        only = model(tokens, masked_tokens=masked)[0]
    assert only.shape == (2, 64)
    torch.testing.assert_close(only, full[masked])


def test_lm_head_is_tied_unless_untied():
    tied = tiny()
    assert tied.encoder.lm_head.weight is tied.encoder.sentence_encoder.embed_tokens.weight
    untied = tiny(untie_weights=True)
    assert untied.encoder.lm_head.weight is not untied.encoder.sentence_encoder.embed_tokens.weight


def test_state_dict_keys_follow_fairseq_names():
    keys = set(tiny(encoder_normalize_before=True).state_dict())
    for key in [
        "encoder.sentence_encoder.version",
        "encoder.sentence_encoder.embed_tokens.weight",
        "encoder.sentence_encoder.embed_positions.weight",
        "encoder.sentence_encoder.layernorm_embedding.weight",
        "encoder.sentence_encoder.layers.1.self_attn.q_proj.weight",
        "encoder.sentence_encoder.layers.1.self_attn.out_proj.bias",
        "encoder.sentence_encoder.layers.1.self_attn_layer_norm.weight",
        "encoder.sentence_encoder.layers.1.fc1.weight",
        "encoder.sentence_encoder.layers.1.final_layer_norm.bias",
        "encoder.sentence_encoder.layer_norm.weight",
        "encoder.lm_head.dense.weight",
        "encoder.lm_head.layer_norm.weight",
        "encoder.lm_head.weight",
        "encoder.lm_head.bias",
    ]:
        assert key in keys, key
    assert "encoder.sentence_encoder.layer_norm.weight" not in tiny().state_dict()


def test_classification_head_reads_the_first_token():
    model = tiny()
    head = model.register_classification_head("cls", num_classes=3)
    tokens = random_tokens([6, 6])
    tokens[1, 1:] = tokens[0, 1:]  # same tokens after <s>... and the same <s>
    with torch.no_grad():
        logits = model(tokens, classification_head_name="cls")[0]
    assert logits.shape == (2, 3) and head.num_classes == 3
    torch.testing.assert_close(logits[0], logits[1])


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(encoder_attention_heads=5), "not divisible"),
        (dict(activation_fn="swishy"), "activation_fn"),
        (dict(encoder_layers=0), "encoder_layers must be positive"),
    ],
)
def test_bad_configs_are_refused_with_the_field_named(bad, message):
    with pytest.raises(ValueError, match=message):
        tiny_config(**bad)


def test_the_config_is_a_plain_record_that_knows_no_family():
    """Families are checked where they are used (``roberta_ext.families.get_family``); the
    config only holds the name."""
    assert tiny_config(family="not-a-family").family == "not-a-family"


def test_register_head_rejects_bad_arguments():
    model = tiny()
    with pytest.raises(ValueError, match="num_classes"):
        model.register_classification_head("x")
    with pytest.raises(ValueError, match="name"):
        model.register_classification_head("a.b", num_classes=2)


@pytest.mark.parametrize("strategy", ["per_sequence", "padded", "auto"])
@pytest.mark.parametrize("pre_ln", [False, True])
def test_packed_path_equals_masked_path_on_real_tokens(pre_ln, strategy):
    """Batches with enough padding skip it (tokens packed; attention per sequence on CPU, padded
    back for one masked call on CUDA); the result on real tokens must equal the masked full-batch
    computation, hidden states included."""
    model = tiny(encoder_normalize_before=pre_ln)
    batch = random_tokens([12, 3, 7, 12, 5])
    real = batch.ne(PAD)
    assert real.float().mean() < 1 - PACKING_MIN_PADDING  # packs by default
    with torch.no_grad():
        with use_attention(model, strategy):
            packed, extra_p = model(batch, features_only=True, return_all_hiddens=True)
        with use_attention(model, "masked"):  # never pack
            masked, extra_m = model(batch, features_only=True, return_all_hiddens=True)
    torch.testing.assert_close(packed[real], masked[real], atol=1e-5, rtol=1e-5)
    for hp, hm in zip(extra_p["inner_states"], extra_m["inner_states"], strict=True):
        torch.testing.assert_close(hp[real], hm[real], atol=1e-5, rtol=1e-5)
    assert packed[~real].abs().sum() == 0  # padding positions come back as zeros


@pytest.mark.parametrize("strategy", ["per_sequence", "padded"])
def test_packed_path_trains(strategy):
    model = tiny()
    model.train()
    batch = random_tokens([10, 2, 6])
    with use_attention(model, strategy):
        logits, _ = model(batch)
    logits[batch.ne(PAD)].logsumexp(-1).sum().backward()
    grad = model.encoder.sentence_encoder.layers[0].self_attn.q_proj.weight.grad
    assert grad is not None and grad.abs().sum() > 0
