"""XLM-R (Conneau et al., 2019; Goyal et al., 2021): RoBERTa trained on 100 languages.

The model is RoBERTa's — fairseq's ``XLMRModel`` is its ``RobertaModel`` with other download
names — and only three things differ: the tokenizer (a SentencePiece model,
``sentencepiece.bpe.model``, whose pieces fairseq maps through ``dict.txt``: kind
``xlmr_sentencepiece``), the vocabulary (250,002 indices: ``<s> <pad> </s> <unk>``, the pieces
from SentencePiece's id 3 on, ``<mask>``), and for the XL (3.5B) and XXL (10.7B) models the
layer order: pre-LN, with a final LayerNorm and no LayerNorm on the embeddings (fairseq's
``roberta_prenorm``). transformers calls base and large ``XLMRoberta*`` (``model_type``
``xlm-roberta``) with RoBERTa's weight names; its XL classes (``xlm-roberta-xl``) are another
layout, not read here.

>>> from roberta_ext.families import preset
>>> base, xl = preset("xlmr-base"), preset("xlmr-xl")
>>> base.vocab_size, base.encoder_layers, base.num_position_embeddings
(250002, 12, 514)
>>> xl.encoder_layers, xl.encoder_embed_dim, xl.encoder_normalize_before, xl.layernorm_embedding
(36, 2560, True, False)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..modeling.config import EncoderConfig
from . import roberta
from .base import LARGE, TINY, Family

_ROBERTA_LAYOUT = roberta.FAMILY.transformers
assert _ROBERTA_LAYOUT is not None

XLMR_VOCAB = 250_002
"""Indices of XLM-R base and large: 4 specials, 249,997 pieces, ``<mask>``."""
XLMR_XL_VOCAB = 250_880
"""Indices of XLM-R XL and XXL: the same, with ``dict.txt`` padded (``madeupword`` rows) to a
multiple of 128."""
PRE_LN: dict[str, Any] = dict(encoder_normalize_before=True, layernorm_embedding=False)
"""fairseq's ``roberta_prenorm``, the layer order of XL and XXL."""


def xlmr_config(**overrides: Any) -> EncoderConfig:
    """XLM-R base's config with ``overrides``: RoBERTa-base's shape over a 250,002-index vocabulary."""
    return EncoderConfig(**{"family": "xlmr", "vocab_size": XLMR_VOCAB, **overrides})


FAMILY = Family(
    name="xlmr",
    presets={
        "tiny": lambda: xlmr_config(**TINY),
        "base": xlmr_config,
        "large": lambda: xlmr_config(**LARGE),
        "xl": lambda: xlmr_config(
            vocab_size=XLMR_XL_VOCAB,
            encoder_layers=36,
            encoder_embed_dim=2560,
            encoder_ffn_embed_dim=10240,
            encoder_attention_heads=32,
            **PRE_LN,
        ),
        "xxl": lambda: xlmr_config(
            vocab_size=XLMR_XL_VOCAB,
            encoder_layers=48,
            encoder_embed_dim=4096,
            encoder_ffn_embed_dim=16384,
            encoder_attention_heads=32,
            **PRE_LN,
        ),
    },
    tokenizer="xlmr_sentencepiece",
    double_separator=True,
    # transformers' XLM-R classes are its RoBERTa classes renamed: RoBERTa's weight names and config.
    transformers=dataclasses.replace(_ROBERTA_LAYOUT, model_type="xlm-roberta", class_prefix="XLMRoberta"),
    architecture_sizes=("base", "large", "xl", "xxl"),
)
