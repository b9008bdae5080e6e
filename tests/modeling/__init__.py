"""Tests of the encoder core, which stands alone: they build their configs here rather than from
the families' presets (``tests/modeling/test_imports.py`` keeps the package itself that way)."""

from __future__ import annotations

from typing import Any

from roberta_ext.modeling import EncoderConfig

TINY: dict[str, Any] = dict(
    vocab_size=64,
    encoder_layers=2,
    encoder_embed_dim=32,
    encoder_ffn_embed_dim=64,
    encoder_attention_heads=4,
    max_positions=64,
)
"""The CPU-sized shape of the families' ``tiny`` presets (``roberta_ext/families/base.py``), written out."""


def tiny_config(**overrides: Any) -> EncoderConfig:
    """RoBERTa's layout at the :data:`TINY` shape, with ``overrides``."""
    return EncoderConfig(**{**TINY, **overrides})
