"""SpanBERT (Joshi et al., 2020): span masking and the span boundary objective (SBO).

SpanBERT is BERT's architecture trained differently: it masks contiguous spans of whole words
(geometric lengths, p = 0.2, at most 10 words; the 80/10/10 mask/random/keep fate decided per
span — :class:`~roberta_ext.data.masking.BatchMasker` with ``span_masking=True``), drops NSP,
and adds a second loss: every masked token is also predicted from the two tokens just *outside*
its span, which stay visible, plus the token's position inside the span::

    x_i = concat(h[s - 1], h[e + 1], p[i - s])            # span s..e, masked token i
    y_i = LayerNorm(GELU(W2 LayerNorm(GELU(W1 x_i))))      # the paper's 2-layer FFN
    logits_i = y_i E^T + b                                 # E: the token embeddings (tied)

The loss is ``MLM + SBO`` (both cross-entropies summed over the masked tokens).

Spans are read off the targets: a span is a maximal run of consecutive target positions, so
its boundaries are never masked. (Two spans the masker drew side by side count as one here;
SpanBERT's code would give the first one's right boundary inside the second, masked, span.)
A run that reaches the end of a row without a token after it uses its own last position as the
right boundary; rows from fairseq's blocks rarely end on a masked word.

Layout of a pretraining model: a :class:`~roberta_ext.modeling.RobertaModel` (its MLM head
trained as usual) plus ``sbo_head.*``, which serving drops (:func:`encoder_state`).

>>> from roberta_ext.families import preset
>>> model = SpanBertPretrainingModel(preset("spanbert-tiny"))
>>> tokens = torch.tensor([[0, 5, 63, 63, 8, 2]])
>>> targets = torch.tensor([[0, 0, 6, 7, 0, 0]])
>>> out = model.pretraining_forward(tokens, targets)
>>> out.mlm_logits.shape, out.sbo_logits.shape
(torch.Size([2, 64]), torch.Size([2, 64]))
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..modeling.config import EncoderConfig
from ..modeling.encoder import get_activation_fn, init_bert_params
from ..modeling.model import RobertaModel
from .base import LARGE, TINY, Family
from .bert import bert_config

SBO_HEAD = "sbo_head"
"""Attribute (and state-dict prefix) of the span boundary head."""

DEFAULT_MAX_SPAN_LENGTH = 32
"""Rows of the SBO's position table: offsets within a span are clamped to it. Spans are at most
10 words, a word a few BPE tokens."""

PRETRAINING_ONLY = (SBO_HEAD,)
"""State-dict prefixes of SpanBERT pretraining that a served encoder does not need."""


def spanbert_config(**overrides: Any) -> EncoderConfig:
    """SpanBERT-base with ``overrides``: BERT-base (:func:`~roberta_ext.families.bert.bert_config`)
    on BERT's cased vocabulary (28996), without a pooler (SpanBERT has no NSP, so nothing trains one)."""
    return bert_config(**{"family": "spanbert", "vocab_size": 28996, "pooler": False, **overrides})


def span_boundaries(masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every position of each maximal run of True in ``masked`` (B, T): the column just
    before the run, the column just after it, and the position's offset within the run.
    Returns three (B, T) long tensors, 0 where ``masked`` is False. Columns stay in ``[0, T)``.

    >>> left, right, offset = span_boundaries(torch.tensor([[False, True, True, False, True]]))
    >>> left.tolist(), right.tolist(), offset.tolist()
    ([[0, 0, 0, 0, 3]], [[0, 3, 3, 0, 4]], [[0, 0, 1, 0, 0]])
    """
    if masked.dim() != 2 or masked.dtype != torch.bool:
        raise ValueError(f"masked must be a (B, T) bool tensor, got {tuple(masked.shape)} {masked.dtype}")
    batch, length = masked.shape
    columns = torch.arange(length, device=masked.device).expand(batch, length)  # (B, T)
    before = torch.cat([torch.zeros_like(masked[:, :1]), masked[:, :-1]], dim=1)  # masked[t - 1]
    after = torch.cat([masked[:, 1:], torch.zeros_like(masked[:, :1])], dim=1)  # masked[t + 1]
    # The start of the run each position is in: running max of "column if a run starts here";
    # its end: running min, from the right, of "column if a run ends here".
    start = torch.where(masked & ~before, columns, -1).cummax(dim=1).values  # (B, T)
    end = torch.where(masked & ~after, columns, length).flip(1).cummin(dim=1).values.flip(1)  # (B, T)
    zero = torch.zeros_like(columns)
    left = torch.where(masked, (start - 1).clamp(min=0), zero)
    right = torch.where(masked, (end + 1).clamp(max=length - 1), zero)
    offset = torch.where(masked, columns - start, zero)
    return left, right, offset


class SpanBoundaryHead(nn.Module):
    """SpanBERT's pair-target prediction head: boundary encodings + a relative position
    embedding -> (Linear -> GELU -> LayerNorm) x 2 -> the (tied) vocabulary projection.

    With factorized embeddings (E < H) the second linear layer maps to E, like the MLM head.
    """

    def __init__(
        self,
        dim: int,
        embed_dim: int,
        vocab_size: int,
        *,
        weight: torch.Tensor | None = None,  # a Parameter to tie (torch types Embedding.weight as Tensor)
        max_span_length: int = DEFAULT_MAX_SPAN_LENGTH,
        position_dim: int | None = None,
        activation_fn: str = "gelu",
        layer_norm_eps: float = 1e-12,
    ) -> None:
        super().__init__()
        if max_span_length < 1:
            raise ValueError(f"max_span_length must be >= 1, got {max_span_length}")
        position_dim = position_dim or dim
        self.max_span_length = max_span_length
        self.position_embeddings = nn.Embedding(max_span_length, position_dim)
        self.activation_fn = get_activation_fn(activation_fn)
        self.dense1 = nn.Linear(2 * dim + position_dim, dim)
        self.layer_norm1 = nn.LayerNorm(dim, eps=layer_norm_eps)
        self.dense2 = nn.Linear(dim, embed_dim)
        self.layer_norm2 = nn.LayerNorm(embed_dim, eps=layer_norm_eps)
        if weight is None:  # untied: the head owns its output matrix
            weight = nn.Parameter(torch.empty(vocab_size, embed_dim))
            if not weight.is_meta:
                nn.init.normal_(weight, mean=0.0, std=0.02)
        self.weight = weight
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, features: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        """``features`` (B, T, C), ``masked`` (B, T) bool -> logits (N, V) for the masked
        positions in row-major order (the order of ``targets[masked]``)."""
        left, right, offset = span_boundaries(masked)  # (B, T) each
        rows = masked.nonzero(as_tuple=True)[0]  # (N,)
        boundary_left = features[rows, left[masked]]  # (N, C)
        boundary_right = features[rows, right[masked]]  # (N, C)
        position = self.position_embeddings(offset[masked].clamp(max=self.max_span_length - 1))  # (N, P)
        x = torch.cat([boundary_left, boundary_right, position], dim=-1)  # (N, 2C + P)
        x = self.layer_norm1(self.activation_fn(self.dense1(x)))  # (N, C)
        x = self.layer_norm2(self.activation_fn(self.dense2(x)))  # (N, E)
        return F.linear(x, self.weight) + self.bias  # (N, V)


def make_sbo_head(
    model: RobertaModel, *, max_span_length: int = DEFAULT_MAX_SPAN_LENGTH, position_dim: int | None = None
) -> SpanBoundaryHead:
    """A freshly initialised span boundary head for ``model`` whose output matrix is the token
    embedding (unless the model unties its LM head, in which case the SBO has its own)."""
    cfg = model.cfg
    tied = None if cfg.untie_weights else model.embed_tokens.weight
    head = SpanBoundaryHead(
        cfg.encoder_embed_dim,
        cfg.embed_dim,
        cfg.vocab_size,
        weight=tied,
        max_span_length=max_span_length,
        position_dim=position_dim,
        activation_fn=cfg.activation_fn,
        layer_norm_eps=cfg.layer_norm_eps,
    )
    for module in head.children():
        module.apply(init_bert_params)
    return head


class SpanBertPretrainingModel(RobertaModel):
    """An encoder with its MLM head and a span boundary head."""

    def __init__(
        self, cfg: EncoderConfig, *, max_span_length: int = DEFAULT_MAX_SPAN_LENGTH, position_dim: int | None = None
    ) -> None:
        super().__init__(cfg)
        self.sbo_head = make_sbo_head(self, max_span_length=max_span_length, position_dim=position_dim)

    def pretraining_forward(self, src_tokens: torch.Tensor, targets: torch.Tensor, **kwargs: Any) -> SpanBertOutput:
        """:func:`spanbert_forward` on this model."""
        return spanbert_forward(self, src_tokens, targets, **kwargs)


@dataclass
class SpanBertOutput:
    """Both predictions of every masked token; N is the number of masked positions."""

    mlm_logits: torch.Tensor
    """(N, V) from the token's own encoding (the MLM head)."""
    sbo_logits: torch.Tensor
    """(N, V) from its span's boundaries and its position in the span (the SBO head)."""
    targets: torch.Tensor
    """(N,) the original tokens."""


def spanbert_forward(
    model: RobertaModel,
    src_tokens: torch.Tensor,
    targets: torch.Tensor,
    *,
    segment_labels: torch.Tensor | None = None,
) -> SpanBertOutput:
    """One encoder pass, then the MLM head and the SBO head on the masked positions.
    ``targets`` (B, T): original tokens at masked positions, ``padding_idx`` elsewhere."""
    masked = targets.ne(model.cfg.padding_idx)  # (B, T)
    features = model.features(src_tokens, segment_labels=segment_labels).last_hidden_state  # (B, T, C)
    mlm_logits = model.lm_logits(features, masked)  # (N, V)
    sbo_logits = getattr(model, SBO_HEAD)(features, masked)  # (N, V)
    return SpanBertOutput(mlm_logits, sbo_logits, targets[masked])


@dataclass
class SpanBertLoss:
    loss: torch.Tensor
    """MLM + SBO cross-entropy, summed over the masked tokens (nats)."""
    mlm_loss: torch.Tensor
    sbo_loss: torch.Tensor
    masked: int
    mlm_correct: int
    sbo_correct: int


def spanbert_loss(output: SpanBertOutput) -> SpanBertLoss:
    """SpanBERT's objective: the sum of the MLM and SBO cross-entropies. A batch without any
    masked token gives zero losses that still depend on the model (ranks stay in step)."""
    num = int(output.targets.numel())
    if num == 0:
        zero = output.mlm_logits.float().sum() * 0.0 + output.sbo_logits.float().sum() * 0.0
        return SpanBertLoss(zero, zero.detach(), zero.detach(), 0, 0, 0)
    mlm = F.cross_entropy(output.mlm_logits.float(), output.targets, reduction="sum")
    sbo = F.cross_entropy(output.sbo_logits.float(), output.targets, reduction="sum")
    with torch.no_grad():
        mlm_correct = int((output.mlm_logits.argmax(-1) == output.targets).sum())
        sbo_correct = int((output.sbo_logits.argmax(-1) == output.targets).sum())
    return SpanBertLoss(mlm + sbo, mlm.detach(), sbo.detach(), num, mlm_correct, sbo_correct)


def encoder_state(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` without the span boundary head: what a hub loads from a SpanBERT
    pretraining checkpoint. Other checkpoints come back unchanged.

    >>> sorted(encoder_state({"sbo_head.bias": torch.zeros(1), "encoder.y": torch.zeros(1)}))
    ['encoder.y']
    """
    return {k: v for k, v in state_dict.items() if not k.startswith(tuple(p + "." for p in PRETRAINING_ONLY))}


FAMILY = Family(
    name="spanbert",
    presets={
        "tiny": lambda: spanbert_config(**TINY),
        "base": spanbert_config,
        "large": lambda: spanbert_config(**LARGE),
    },
    # The plugin trains SpanBERT on fairseq-preprocess data of any tokenizer (the docs: GPT-2 BPE);
    # released SpanBERT checkpoints are transformers BERT folders, which load as the bert family.
    tokenizer="gpt2",
    pretraining_modules=PRETRAINING_ONLY,
    fairseq_model="spanbert_ext",
)


__all__ = [
    "SBO_HEAD",
    "SpanBertLoss",
    "SpanBertOutput",
    "SpanBertPretrainingModel",
    "SpanBoundaryHead",
    "encoder_state",
    "make_sbo_head",
    "span_boundaries",
    "spanbert_config",
    "spanbert_forward",
    "spanbert_loss",
]
