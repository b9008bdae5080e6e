"""Dropout with a faster mask on the CPU, and attention that uses it.

``torch.nn.functional.dropout`` on the CPU draws its mask with ``bernoulli_``: one Mersenne
Twister call (and a float conversion) per element, about 11 ms per million elements on the
2-core machine of docs/benchmarks.md, and 8% of a RoBERTa training step there. This mask takes
two 32-bit words from each 64-bit draw of the same generator (``torch.randint`` over the whole
int64 range) and keeps an element when its word is at least ``p`` of the way up the 32-bit
range: half the generator calls, no floats, about 40% of the time. An element is kept with
probability ``1 - p`` to within 2^-32 (float masks are exact to 2^-24), independently of every
other element, and the draws come from torch's seeded CPU generator, so runs repeat under
``torch.manual_seed``. The masks are not the ones ``F.dropout`` would draw: training is
equivalent in distribution, not bit for bit. On other devices ``F.dropout`` is used as is
(CUDA's is fused and draws from Philox in parallel).

>>> import torch
>>> from roberta_ext.modeling.dropout import Dropout
>>> _ = torch.manual_seed(0)
>>> layer = Dropout(0.1).train()
>>> kept = layer(torch.ones(1000, 1000)).ne(0).float().mean().item()
>>> round(kept, 2)
0.9
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def keep_mask(shape: torch.Size | tuple[int, ...], p: float, generator: torch.Generator | None = None) -> torch.Tensor:
    """A CPU bool tensor of ``shape``, each element True with probability ``1 - p`` (``0 <= p < 1``).

    >>> keep_mask((2, 3), 0.0).all().item()
    True
    """
    n = math.prod(shape)
    words = torch.randint(-(2**63), 2**63 - 1, ((n + 1) // 2,), dtype=torch.int64, generator=generator)
    halves = words.view(torch.int32)[:n]
    threshold = round(p * 2**32) - 2**31  # P(word >= threshold) = 1 - round(p * 2^32) / 2^32
    return halves.ge(threshold).view(shape)


def dropout(x: torch.Tensor, p: float, training: bool = True) -> torch.Tensor:
    """``F.dropout(x, p, training)``, with :func:`keep_mask` on the CPU.

    >>> x = torch.ones(4)
    >>> torch.equal(dropout(x, 0.5, training=False), x)
    True
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training=True)
    scale = keep_mask(x.shape, p).to(x.dtype).mul_(1.0 / (1.0 - p))
    return x * scale


class Dropout(nn.Module):
    """``nn.Dropout`` through :func:`dropout`; no parameters or buffers, so state dicts are unchanged."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` (no causal mask, default scale), except that with
    dropout on the CPU — where SDPA falls back to its unfused path anyway — the probabilities
    are dropped with :func:`dropout`. ``attn_mask``: bool, True where a key may be attended."""
    if dropout_p == 0.0 or q.device.type != "cpu":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p)
    scores = (q * q.shape[-1] ** -0.5) @ k.transpose(-2, -1)  # (..., T, S)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    return dropout(scores.softmax(dim=-1), dropout_p) @ v
