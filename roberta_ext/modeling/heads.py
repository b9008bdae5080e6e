"""Output heads on top of the encoder, with fairseq's parameter names."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import EncoderConfig
from .encoder import get_activation_fn


class LMHead(nn.Module):
    """Masked-LM head: dense -> activation -> LayerNorm -> projection onto the vocabulary.

    The projection matrix is the token embedding (tied) unless one is passed untied. With
    ALBERT's factorized embeddings the dense layer maps the hidden size ``input_dim`` down to
    the embedding size ``embed_dim`` (RoBERTa and BERT: the two are equal).
    """

    def __init__(
        self,
        embed_dim: int,
        output_dim: int,
        activation_fn: str,
        weight: torch.Tensor | None = None,  # a Parameter to tie (torch types Embedding.weight as Tensor)
        *,
        input_dim: int | None = None,
        layer_norm_eps: float = 1e-5,
        dense_bias: bool = True,
        norm_bias: bool = True,
        output_bias: bool = True,
    ):
        super().__init__()
        self.dense = nn.Linear(input_dim or embed_dim, embed_dim, bias=dense_bias)
        self.activation_fn = get_activation_fn(activation_fn)
        self.layer_norm = nn.LayerNorm(embed_dim, eps=layer_norm_eps, bias=norm_bias)
        if weight is None:  # untied: the head owns its output matrix, initialised as BERT's
            weight = nn.Parameter(torch.empty(output_dim, embed_dim))
            if not weight.is_meta:
                nn.init.normal_(weight, mean=0.0, std=0.02)
        self.weight = weight
        self.bias = nn.Parameter(torch.zeros(output_dim)) if output_bias else None

    @classmethod
    def for_config(cls, cfg: EncoderConfig, weight: torch.Tensor | None) -> LMHead:
        """The masked-LM head of a model with ``cfg``, its output matrix ``weight`` (the token
        embeddings when tied; None: an untied one of its own)."""
        return cls(
            cfg.embed_dim,
            cfg.vocab_size,
            cfg.activation_fn,
            weight=weight,
            input_dim=cfg.encoder_embed_dim,
            layer_norm_eps=cfg.layer_norm_eps,
            dense_bias=cfg.head_bias,
            norm_bias=cfg.norm_bias,
            output_bias=cfg.lm_output_bias,
        )

    def forward(self, features: torch.Tensor, masked_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """``features``: (B, T, C) -> logits (B, T, V); with a bool ``masked_tokens`` (B, T) only
        those positions are projected, giving (N, V) — the vocabulary projection is the
        costliest matmul of pretraining, so it runs on masked positions alone."""
        if masked_tokens is not None:
            features = features[masked_tokens, :]  # (N, C)
        x = self.layer_norm(self.activation_fn(self.dense(features)))
        return F.linear(x, self.weight, self.bias)  # the bias inside the product (one pass over N x V fewer)


def pool(features: torch.Tensor, pooling: str, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T, C) features -> (B, C): the first token's (``cls``) or the mean over the real tokens
    (``mean``; ``padding_mask`` (B, T), True on padding; None: every position is real, as
    transformers' ModernBERT takes a missing attention mask).

    >>> pool(torch.tensor([[[1.0], [3.0], [9.0]]]), "mean", torch.tensor([[False, False, True]])).tolist()
    [[2.0]]
    """
    if pooling == "cls":
        return features[:, 0, :]
    if pooling != "mean":
        raise ValueError(f"pooling {pooling!r} is not one of ('cls', 'mean')")
    if padding_mask is None:
        return features.mean(dim=1)
    real = (~padding_mask).unsqueeze(-1).to(features.dtype)  # (B, T, 1)
    return (features * real).sum(dim=1) / real.sum(dim=1)


class ClassificationHead(nn.Module):
    """Sentence-level head on the first token (``<s>``): dropout -> dense -> tanh -> dropout -> out_proj."""

    def __init__(self, input_dim: int, inner_dim: int, num_classes: int, activation_fn: str, pooler_dropout: float):
        super().__init__()
        self.dense = nn.Linear(input_dim, inner_dim)
        self.activation_fn = get_activation_fn(activation_fn)
        self.dropout = nn.Dropout(pooler_dropout)
        self.out_proj = nn.Linear(inner_dim, num_classes)

    @property
    def num_classes(self) -> int:
        return self.out_proj.out_features

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, num_classes)
        x = self.dropout(features[:, 0, :])
        x = self.dropout(self.activation_fn(self.dense(x)))
        return self.out_proj(x)


class NormedClassificationHead(nn.Module):
    """ModernBERT's classification and token heads: (pooling ->) dense -> activation -> LayerNorm
    -> dropout -> out_proj. ``pooling`` ``cls`` or ``mean`` gives a sentence head (B, num_classes),
    ``none`` a token head (B, T, num_classes)."""

    def __init__(
        self,
        dim: int,
        num_classes: int,
        activation_fn: str,
        dropout: float,
        *,
        pooling: str = "cls",
        dense_bias: bool = True,
        norm_bias: bool = True,
        layer_norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        if pooling not in ("cls", "mean", "none"):
            raise ValueError(f"pooling {pooling!r} is not one of ('cls', 'mean', 'none')")
        self.pooling = pooling
        self.dense = nn.Linear(dim, dim, bias=dense_bias)
        self.activation_fn = get_activation_fn(activation_fn)
        self.layer_norm = nn.LayerNorm(dim, eps=layer_norm_eps, bias=norm_bias)
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(dim, num_classes)

    @classmethod
    def for_config(
        cls, cfg: EncoderConfig, num_classes: int, *, pooling: str, dropout: float
    ) -> NormedClassificationHead:
        """A head of a model with ``cfg``: ``pooling`` is ``cfg.classifier_pooling`` for sentences,
        ``none`` for tokens."""
        return cls(
            cfg.encoder_embed_dim,
            num_classes,
            cfg.pooler_activation_fn,
            dropout,
            pooling=pooling,
            dense_bias=cfg.head_bias,
            norm_bias=cfg.norm_bias,
            layer_norm_eps=cfg.layer_norm_eps,
        )

    @property
    def num_classes(self) -> int:
        return self.out_proj.out_features

    def forward(self, features: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T, C) -> (B, num_classes), or (B, T, num_classes) for a token head; ``padding_mask``
        (B, T), True on padding, for ``mean`` pooling."""
        x = features if self.pooling == "none" else pool(features, self.pooling, padding_mask)
        x = self.dropout(self.layer_norm(self.activation_fn(self.dense(x))))
        return self.out_proj(x)


class Pooler(nn.Module):
    """BERT's pooler: dense -> tanh on the first token (``[CLS]``), shared by sentence-level heads."""

    def __init__(self, dim: int, activation_fn: str = "tanh") -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.activation_fn = get_activation_fn(activation_fn)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, C)
        return self.activation_fn(self.dense(features[:, 0, :]))


class PooledClassificationHead(nn.Module):
    """A sentence-level head on the pooler's output (BERT, ALBERT): dropout -> out_proj.

    It takes the *pooled* vector (B, C); the model applies its shared :class:`Pooler` first.
    """

    def __init__(self, input_dim: int, num_classes: int, pooler_dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(pooler_dropout)
        self.out_proj = nn.Linear(input_dim, num_classes)

    @property
    def num_classes(self) -> int:
        return self.out_proj.out_features

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:  # (B, C) -> (B, num_classes)
        return self.out_proj(self.dropout(pooled))


class TokenClassificationHead(nn.Module):
    """A label for every token (NER tagging; with two outputs, the start/end logits of
    extractive QA): dropout -> out_proj, as transformers' ``*ForTokenClassification``."""

    def __init__(self, input_dim: int, num_labels: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.out_proj = nn.Linear(input_dim, num_labels)

    @property
    def num_classes(self) -> int:
        return self.out_proj.out_features

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, num_labels)
        return self.out_proj(self.dropout(features))
