"""The CPU dropout mask: keep rate, scaling, independence, reproducibility, gradients; and the
attention that uses it, against ``F.scaled_dot_product_attention``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from roberta_ext.modeling import dropout as dropout_module
from roberta_ext.modeling.dropout import Dropout, attention, dropout, keep_mask


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_rate_is_one_minus_p(p):
    torch.manual_seed(0)
    n = 1_000_001  # odd: the last word's second half is dropped
    kept = keep_mask((n,), p).double()
    sigma = math.sqrt(p * (1 - p) / n)
    assert abs(kept.mean().item() - (1 - p)) < 5 * sigma
    # The two halves of one 64-bit draw are independent: P(both kept) = (1 - p)^2.
    pairs = kept[: n - 1].view(-1, 2)
    both = (pairs[:, 0] * pairs[:, 1]).mean().item()
    assert abs(both - (1 - p) ** 2) < 5 * math.sqrt((1 - p) ** 2 * (1 - (1 - p) ** 2) / pairs.shape[0])
    # Neighbouring draws too.
    across = (kept[1 : n - 1 : 2] * kept[2::2]).mean().item()
    assert abs(across - (1 - p) ** 2) < 5 * math.sqrt((1 - p) ** 2 * (1 - (1 - p) ** 2) / (n // 2))


def test_kept_elements_are_scaled_and_dropped_ones_are_zero():
    torch.manual_seed(1)
    x = torch.randn(64, 33)
    out = dropout(x, 0.25)
    kept = out.ne(0)
    assert 0 < kept.sum() < x.numel()
    torch.testing.assert_close(out[kept], x[kept] * (1 / 0.75), rtol=0, atol=0)  # as F.dropout scales


def test_gradient_flows_through_the_kept_elements_only():
    torch.manual_seed(2)
    x = torch.randn(8, 16, requires_grad=True)
    out = dropout(x, 0.5)
    out.sum().backward()
    expected = out.detach().ne(0).float() * 2.0
    assert torch.equal(x.grad, expected)


def test_identity_in_eval_and_at_zero_zeros_at_one():
    x = torch.randn(5, 7)
    assert dropout(x, 0.3, training=False) is x
    assert dropout(x, 0.0) is x
    assert dropout(x, 1.0).abs().sum() == 0
    layer = Dropout(0.3).eval()
    assert layer(x) is x
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        Dropout(1.5)


def test_reproducible_under_a_seed_and_fresh_on_each_call():
    torch.manual_seed(3)
    first, second = keep_mask((1000,), 0.5), keep_mask((1000,), 0.5)
    torch.manual_seed(3)
    assert torch.equal(keep_mask((1000,), 0.5), first)
    assert not torch.equal(first, second)


def test_mask_follows_the_shape_and_dtype_is_kept():
    torch.manual_seed(4)
    x = torch.randn(2, 3, 5, dtype=torch.bfloat16)
    out = dropout(x, 0.5)
    assert out.shape == x.shape and out.dtype == torch.bfloat16


@pytest.mark.parametrize("masked", [False, True])
def test_attention_equals_sdpa_when_the_mask_keeps_everything(monkeypatch, masked):
    """The CPU path with dropout computes softmax(q k^T / sqrt(d)) v with the key mask, as SDPA:
    with dropout turned into the identity it must give SDPA's result without dropout."""
    torch.manual_seed(5)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    attn_mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    if masked:
        attn_mask[0, ..., 4:] = False
    monkeypatch.setattr(dropout_module, "dropout", lambda x, p, training=True: x)
    ours = attention(q, k, v, attn_mask if masked else None, dropout_p=0.3)
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask if masked else None)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)


def test_attention_without_dropout_is_sdpa():
    torch.manual_seed(6)
    q, k, v = (torch.randn(1, 2, 4, 8) for _ in range(3))
    assert torch.equal(attention(q, k, v), F.scaled_dot_product_attention(q, k, v))


def test_attention_dropout_is_unbiased():
    """Averaged over many draws, attention with dropout approaches attention without it."""
    torch.manual_seed(7)
    q, k, v = (torch.randn(1, 1, 4, 8) for _ in range(3))
    draws = torch.stack([attention(q, k, v, dropout_p=0.2) for _ in range(4000)]).mean(0)
    torch.testing.assert_close(draws, F.scaled_dot_product_attention(q, k, v), atol=0.08, rtol=0)


def test_a_generator_given_is_the_one_drawn_from_one_word_per_two_elements():
    """``generator``: the mask comes from it, not from the global seed, and takes one 64-bit word
    per two elements (half of what ``bernoulli_`` draws), rounded up for an odd count."""
    for n in (10, 11):
        generator = torch.Generator().manual_seed(8)
        torch.manual_seed(100)
        first = keep_mask((n,), 0.5, generator=generator)
        after = generator.get_state()
        torch.manual_seed(200)  # another global state: the same mask from the same generator state
        again = keep_mask((n,), 0.5, generator=torch.Generator().manual_seed(8))
        assert torch.equal(first, again)
        words = torch.Generator().manual_seed(8)
        torch.randint(-(2**63), 2**63 - 1, ((n + 1) // 2,), dtype=torch.int64, generator=words)
        assert torch.equal(after, words.get_state()), n


def test_on_the_cpu_dropout_keeps_what_keep_mask_draws():
    torch.manual_seed(9)
    x = torch.randn(6, 10)
    out = dropout(x, 0.4)
    torch.manual_seed(9)
    torch.randn(6, 10)
    assert torch.equal(out, x * keep_mask(x.shape, 0.4).to(x.dtype).mul_(1 / 0.6))


def test_the_layer_takes_nn_dropouts_default_and_both_ends():
    assert Dropout().p == nn.Dropout().p == 0.5
    x = torch.randn(3, 4)
    assert Dropout(0.0).train()(x) is x
    assert Dropout(1.0).train()(x).abs().sum() == 0
    with pytest.raises(ValueError, match="but got -0.1"):
        Dropout(-0.1)


def test_attention_without_dropout_passes_the_mask_to_sdpa():
    torch.manual_seed(10)
    q, k, v = (torch.randn(2, 2, 5, 8) for _ in range(3))
    attn_mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    attn_mask[1, ..., 3:] = False
    assert torch.equal(attention(q, k, v, attn_mask), F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask))


def test_attention_with_dropout_takes_any_leading_dimensions():
    """(B, T, D) inputs are attended as (B, 1, T, D): the same scores, and under the same seed the
    same mask (it is drawn over the same number of probabilities in the same order)."""
    q, k, v = (torch.randn(2, 5, 8) for _ in range(3))
    torch.manual_seed(11)
    three = attention(q, k, v, dropout_p=0.3)
    torch.manual_seed(11)
    four = attention(q[:, None], k[:, None], v[:, None], dropout_p=0.3)[:, 0]
    assert torch.equal(three, four)
    assert not torch.equal(three, F.scaled_dot_product_attention(q, k, v))  # dropout did drop
