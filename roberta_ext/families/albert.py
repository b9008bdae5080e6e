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
as options (``embedding_size``, ``share_layers``); this file names the presets and
transformers' names for ALBERT's weights.

>>> from roberta_ext.families import preset
>>> from roberta_ext.modeling import RobertaModel
>>> model = RobertaModel(preset("albert-base"))
>>> round(sum(p.numel() for p in model.parameters()) / 1e6, 1)      # BERT-base: 110M
11.8
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..modeling.config import EncoderConfig
from ..modeling.model import ENCODER_PREFIX
from .base import BERT_STYLE_EMBEDDINGS, LARGE, SEQUENCE_HEAD, TINY, Family, TransformersLayout

SENTENCE_ORDER_HEAD = "sentence_order"
"""Name of the classification head of sentence-order prediction (class 0: in order,
1: swapped — transformers' ``AlbertForPreTraining`` convention)."""


def albert_config(**overrides: Any) -> EncoderConfig:
    """ALBERT-base (v2)'s config with ``overrides``: vocabulary 30000, E=128, 12 x 768, all shared."""
    values: dict[str, Any] = dict(
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


def _read_config(config: Mapping[str, Any], values: dict[str, Any]) -> None:
    from ..checkpoints.safe_load import CheckpointError

    if config.get("num_hidden_groups", 1) != 1 or config.get("inner_group_num", 1) != 1:
        raise CheckpointError("ALBERT with num_hidden_groups/inner_group_num other than 1 is not supported")
    values.update(embedding_size=config.get("embedding_size", 128), share_layers="all")


def _write_config(cfg: EncoderConfig, config: dict[str, Any]) -> None:
    if cfg.share_layers != "all":
        raise ValueError(f"transformers' ALBERT shares all layers; this model has share_layers={cfg.share_layers!r}")
    config.update(
        embedding_size=cfg.embed_dim, num_hidden_groups=1, inner_group_num=1, classifier_dropout_prob=cfg.pooler_dropout
    )


_ALBERT_LAYER = [
    ("attention.query", "self_attn.q_proj"),
    ("attention.key", "self_attn.k_proj"),
    ("attention.value", "self_attn.v_proj"),
    ("attention.dense", "self_attn.out_proj"),
    ("attention.LayerNorm", "self_attn_layer_norm"),
    ("ffn", "fc1"),
    ("ffn_output", "fc2"),
    ("full_layer_layer_norm", "final_layer_norm"),
]

FAMILY = Family(
    name="albert",
    presets={
        "tiny": lambda: albert_config(**TINY, embedding_size=16),
        "base": albert_config,
        "large": lambda: albert_config(**LARGE),
    },
    tokenizer="sentencepiece",
    sentence_head=SENTENCE_ORDER_HEAD,
    transformers=TransformersLayout(
        model_type="albert",
        class_prefix="Albert",
        base_prefix="albert.",
        layer_prefix="{p}encoder.albert_layer_groups.0.albert_layers.0.",
        layer=_ALBERT_LAYER,
        modules=[("{p}" + theirs, ours) for theirs, ours in BERT_STYLE_EMBEDDINGS]
        + [
            ("{p}encoder.embedding_hidden_mapping_in", ENCODER_PREFIX + "embed_proj"),
            ("{p}pooler", "pooler.dense"),
        ],
        lm_head=[
            ("predictions.dense", "encoder.lm_head.dense"),
            ("predictions.LayerNorm", "encoder.lm_head.layer_norm"),
        ],
        lm_decoder="predictions",
        task_heads={
            "ForPreTraining": [("sop_classifier.classifier", f"classification_heads.{SENTENCE_ORDER_HEAD}.out_proj")],
            "ForSequenceClassification": [("classifier", f"classification_heads.{SEQUENCE_HEAD}.out_proj")],
        },
        shared_layers=True,
        factorized_embeddings=True,
        read_config=_read_config,
        write_config=_write_config,
    ),
)
