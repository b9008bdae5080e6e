"""ALBERT: BERT with fewer parameters, by two changes to the same layers.

* **Factorized embeddings.** Token, position and segment embeddings are ``E`` wide (128) and a
  linear map (``embed_proj``) lifts them to the hidden size ``H`` (768): ``V x E + E x H``
  parameters instead of ``V x H``. The masked-LM head maps ``H`` back down to ``E`` before the
  tied output projection.
* **Cross-layer parameter sharing.** ``share_layers="all"`` runs one layer's weights
  ``encoder_layers`` times; ``"ffn"`` shares only the feed-forward blocks, ``"attention"`` only
  the attention blocks (each with its LayerNorm), ``"none"`` nothing — the paper's ablations.

ALBERT also replaces NSP with sentence-order prediction (SOP: are two consecutive segments in
their order, or swapped?), uses a SentencePiece vocabulary with ``<pad>`` at 0, the tanh
approximation of GELU, and no dropout in its v2 models. Both changes live in the encoder core
as options (``embedding_size``, ``share_layers``); this file only names the presets.

>>> from roberta_ext.modeling import EncoderConfig, RobertaModel
>>> model = RobertaModel(EncoderConfig.preset("albert-base"))
>>> round(sum(p.numel() for p in model.parameters()) / 1e6, 1)      # BERT-base: 110M
11.8
"""

from __future__ import annotations

from .config import EncoderConfig

SENTENCE_ORDER_HEAD = "sentence_order"
"""Name of the classification head of sentence-order prediction (class 0: in order,
1: swapped — transformers' ``AlbertForPreTraining`` convention)."""


def albert_config(**overrides) -> EncoderConfig:
    """ALBERT-base (v2)'s config with ``overrides``: vocabulary 30000, E=128, 12 x 768, all shared."""
    values = dict(
        family="albert",
        vocab_size=30000,
        padding_idx=0,
        encoder_layers=12,
        encoder_embed_dim=768,
        encoder_ffn_embed_dim=3072,
        encoder_attention_heads=12,
        embedding_size=128,
        max_positions=512,
        activation_fn="gelu_accurate",  # transformers' "gelu_new"
        type_vocab_size=2,
        position_style="absolute",
        layer_norm_eps=1e-12,
        share_layers="all",
        pooler=True,
        dropout=0.0,
        attention_dropout=0.0,
    )
    values.update(overrides)
    return EncoderConfig(**values)


PRESETS = {
    "albert-tiny": lambda: albert_config(vocab_size=64, encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
                                         encoder_attention_heads=4, embedding_size=16, max_positions=64),
    "albert-base": albert_config,
    "albert-large": lambda: albert_config(encoder_layers=24, encoder_embed_dim=1024, encoder_ffn_embed_dim=4096,
                                          encoder_attention_heads=16),
}
