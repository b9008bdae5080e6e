"""Rotary positions and local (sliding-window) layers in the encoder core, on every attention path.

ModernBERT's options (``preset("modernbert-tiny")``: rotary positions, a window of 8 tokens, GeGLU,
a fused projection, no biases) must give the same features whichever way a padded batch is
attended — masked, or packed with any strategy — and with left or right padding: a token's
rotary position counts the real tokens of its row from 0, and restarts in every packed sequence.
The packed path masks the window per sequence, never with a mask over the padded batch.
transformers' ModernBERT is the peer of ``tests/checkpoints/test_modernbert_transformers.py``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from roberta_ext.families import preset
from roberta_ext.modeling import EncoderModel, use_attention
from roberta_ext.modeling import attention as att

PAD = 1
LENGTHS = [30, 3, 17, 30, 9]


def tiny(**overrides) -> EncoderModel:
    torch.manual_seed(0)
    model = EncoderModel(preset("modernbert-tiny", **overrides)).eval()
    with torch.no_grad():  # random norms and biases too, so that nothing is hidden by ones and zeros
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.2 * torch.randn(parameter.shape))
    return model


def batch_of(lengths: list[int], *, left: bool = False) -> torch.Tensor:
    generator = torch.Generator().manual_seed(len(lengths))
    tokens = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        row = torch.randint(4, 64, (n,), generator=generator)
        if left:
            tokens[i, tokens.size(1) - n :] = row
        else:
            tokens[i, :n] = row
    return tokens


def features(model: EncoderModel, tokens: torch.Tensor, strategy: str = "auto") -> torch.Tensor:
    with use_attention(model, strategy), model.inference():
        return model.features(tokens).last_hidden_state


def real(tokens: torch.Tensor, hidden: torch.Tensor) -> list[torch.Tensor]:
    return [hidden[row][tokens[row].ne(PAD)] for row in range(tokens.size(0))]


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
@pytest.mark.parametrize("strategy", ["per_sequence", "padded", "nested"])
def test_packed_strategies_equal_the_masked_path(strategy, left):
    model = tiny()
    tokens = batch_of(LENGTHS, left=left)
    expected = real(tokens, features(model, tokens, "masked"))
    for mine, theirs in zip(real(tokens, features(model, tokens, strategy)), expected):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_packed_positions_restart_in_every_sequence():
    """Rotary scores depend on position differences only, so an offset would pass the equality
    tests; it would still lose fp32 precision on long batches (cos and sin of large angles)."""
    padding = torch.tensor([[False, False, True], [True, False, False], [False, False, False]])
    assert att.Packing.from_padding_mask(padding).positions.tolist() == [0, 1, 0, 1, 0, 1, 2]
    assert att.real_positions(padding).tolist() == [[0, 1, 1], [0, 0, 1], [0, 1, 2]]


def test_left_padding_equals_right_padding_and_single_texts():
    """Rotary positions count the real tokens, so padding on either side changes nothing."""
    model = tiny()
    right, left = batch_of(LENGTHS), batch_of(LENGTHS, left=True)
    for strategy in ("masked", "per_sequence"):
        by_row = zip(real(right, features(model, right, strategy)), real(left, features(model, left, strategy)))
        for row, (a, b) in enumerate(by_row):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
            alone = features(model, right[row : row + 1, : LENGTHS[row]])[0]
            torch.testing.assert_close(a, alone, atol=1e-5, rtol=0)


def test_the_window_changes_only_texts_longer_than_it():
    """The same weights with every layer global: equal features on a text within the window,
    different ones on a longer text (so the window is really applied, on every path). One rotary
    theta for both kinds of layer, so that only the window differs."""
    local = tiny(local_rotary_theta=160000.0)
    everywhere = EncoderModel(preset("modernbert-tiny", local_attention=None, local_rotary_theta=160000.0)).eval()
    everywhere.load_state_dict(local.state_dict())
    window = local.cfg.local_attention // 2
    for strategy in ("masked", "per_sequence", "padded"):
        short = batch_of([window + 1, 2])
        torch.testing.assert_close(features(local, short, strategy), features(everywhere, short, strategy))
        long = batch_of([30, 2])
        assert not torch.allclose(features(local, long, strategy)[0], features(everywhere, long, strategy)[0])


def test_packed_local_layers_mask_each_sequence_not_the_padded_batch(monkeypatch):
    shapes: list[tuple[int, ...]] = []
    real_attention = att.attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0):
        shapes.append(tuple(attn_mask.shape) if attn_mask is not None else ())
        return real_attention(q, k, v, attn_mask, dropout_p)

    monkeypatch.setattr(att, "attention", spy)
    model = tiny()
    features(model, batch_of(LENGTHS), "per_sequence")
    # Runs of one length (30, 3, 17, 30, 9 -> 30, 3, 17, 30, 9), in each of the 2 local layers: blocks
    # of the window with a fixed (window, 3 * window) band for a run of 4 windows or more, a band
    # (L, L) for a shorter run longer than the window; nothing for the global layer or within the window.
    window = model.cfg.local_attention // 2
    blockwise = [n for n in LENGTHS if att.attends_blockwise(n, window)]
    banded = [n for n in LENGTHS if window + 1 < n and n not in blockwise]
    assert blockwise and banded
    assert shapes.count(()) == len(LENGTHS) + 2 * (len(LENGTHS) - len(banded) - len(blockwise))
    expected = [(n, n) for n in banded] * 2 + [(-(-n // window), 1, window, 3 * window) for n in blockwise] * 2
    assert sorted(s for s in shapes if s) == sorted(expected)


@pytest.mark.parametrize("window", [1, 3, 8])
@pytest.mark.parametrize("length", [1, 7, 32, 33, 130])
def test_blockwise_local_attention_equals_one_banded_call(length, window):
    """The blocks give what one SDPA call over the whole sequence with the (L, L) band gives, at
    every length (a partial last block, a sequence shorter than a block) and batch row."""
    torch.manual_seed(length + window)
    q, k, v = torch.randn(3, 2, 3, length, 8).unbind(0)
    whole = F.scaled_dot_product_attention(q, k, v, attn_mask=att.window_mask(torch.arange(length), window))
    torch.testing.assert_close(att.local_attention(q, k, v, window), whole, atol=1e-6, rtol=1e-5)


def test_varlen_gets_the_window_as_its_own(monkeypatch):
    calls: list[dict] = []

    def varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
        calls.append({"window_size": window_size})
        out = []
        for start, end in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist()):
            q, k, v = (t[start:end].transpose(0, 1)[None] for t in (query, key, value))
            mask = None
            if window_size != (-1, -1):
                mask = att.window_mask(torch.arange(end - start), window_size[0])
            out.append(F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)[0].transpose(0, 1))
        return torch.cat(out)

    monkeypatch.setattr(att, "varlen_kernel", lambda: varlen_attn)
    model = tiny()
    tokens = batch_of(LENGTHS)
    expected = real(tokens, features(model, tokens, "masked"))
    for mine, theirs in zip(real(tokens, features(model, tokens, "varlen")), expected):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)
    window = model.cfg.local_attention // 2
    assert [call["window_size"] for call in calls] == [(-1, -1), (window, window), (window, window)]


def test_forward_masked_equals_forward_on_real_tokens():
    """The compiled and exported path (no branch on the data) has the rotation and the window too."""
    model = tiny()
    tokens = batch_of(LENGTHS)
    with model.inference():
        masked, _ = model.transformer.forward_masked(tokens)
    for mine, theirs in zip(real(tokens, masked), real(tokens, features(model, tokens))):
        torch.testing.assert_close(mine, theirs, atol=1e-5, rtol=0)


def test_fairseq_models_keep_their_modules():
    """RoBERTa's layers are untouched by the new options: the same parameters, in fairseq's order."""
    names = [name for name, _ in EncoderModel(preset("tiny")).named_parameters()]
    assert "encoder.sentence_encoder.layers.0.self_attn.k_proj.weight" in names
    assert not any("qkv_proj" in name for name in names)
    assert names.index("encoder.sentence_encoder.layers.0.self_attn.k_proj.weight") < names.index(
        "encoder.sentence_encoder.layers.0.self_attn.q_proj.weight"
    )


@pytest.mark.parametrize("left", [False, True], ids=["right-padded", "left-padded"])
def test_blockwise_local_attention_with_a_key_mask_equals_the_band_over_the_padded_batch(left):
    """The masked path's local layers on a long padded batch attend block by block with the key
    mask: equal to one SDPA call under the (B, 1, T, T) band and the key mask, which is never built."""
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 3, 2, 37, 8).unbind(0)
    lengths = torch.tensor([37, 20, 9])
    index = torch.arange(37)
    real = index[None] >= 37 - lengths[:, None] if left else index[None] < lengths[:, None]  # (B, T)
    key_mask = real[:, None, None, :]
    whole = F.scaled_dot_product_attention(q, k, v, attn_mask=att.window_mask(index, 4) & key_mask)
    blockwise = att.local_attention(q, k, v, 4, key_mask=key_mask)
    torch.testing.assert_close(
        blockwise[real[:, None, :, None].expand_as(q)], whole[real[:, None, :, None].expand_as(q)]
    )


def test_the_eager_masked_path_keeps_no_length_by_length_mask_for_long_padded_rows():
    model = tiny()
    encoder = model.encoder.sentence_encoder
    tokens = batch_of(LENGTHS)
    padding = tokens.eq(PAD)
    x = encoder.embed(tokens)
    eager = encoder.attention_inputs(x, padding, blockwise=True)
    assert eager.local_mask is not None and eager.local_mask.shape == (len(LENGTHS), 1, 1, tokens.size(1))
    compiled = encoder.attention_inputs(x, padding)  # forward_masked's: the band, no branch on the length
    assert compiled.local_mask is not None and compiled.local_mask.shape == (
        len(LENGTHS),
        1,
        tokens.size(1),
        tokens.size(1),
    )
