"""BERT: what differs from RoBERTa is all configuration.

BERT (Devlin et al., 2019) is the same post-LN transformer. It differs in its inputs and its
objectives, not its layers: a WordPiece vocabulary with ``[PAD]`` at index 0, absolute
positions (row ``t`` for position ``t``), segment embeddings telling sentence A from sentence B
in ``[CLS] A [SEP] B [SEP]``, LayerNorm epsilon 1e-12, and a pooler (dense + tanh on
``[CLS]``) under its next-sentence-prediction head. RoBERTa's paper dropped NSP and the
segments; BERT keeps both, so this file is data: presets and transformers' names.

>>> from roberta_ext.families import preset
>>> from roberta_ext.modeling import RobertaModel
>>> cfg = preset("bert-base")
>>> cfg.type_vocab_size, cfg.position_style, cfg.pooler
(2, 'absolute', True)
>>> round(sum(p.numel() for p in RobertaModel(cfg).parameters()) / 1e6, 1)   # millions, with MLM head
110.1
"""

from __future__ import annotations

from typing import Any

from ..modeling.config import EncoderConfig
from .base import BERT_STYLE_EMBEDDINGS, BERT_STYLE_LAYER, LARGE, SEQUENCE_HEAD, TINY, Family, TransformersLayout

NEXT_SENTENCE_HEAD = "next_sentence"
"""Name of the classification head that predicts whether sentence B follows sentence A
(class 0: B is the real continuation, 1: B is random — transformers' convention)."""


def bert_config(**overrides: Any) -> EncoderConfig:
    """BERT-base's config with ``overrides``: vocabulary 30522 (uncased English), 12 x 768."""
    values: dict[str, Any] = dict(
        family="bert",
        vocab_size=30522,
        padding_idx=0,
        encoder_layers=12,
        encoder_embed_dim=768,
        encoder_ffn_embed_dim=3072,
        encoder_attention_heads=12,
        max_positions=512,
        activation_fn="gelu",
        type_vocab_size=2,
        position_style="absolute",
        layer_norm_eps=1e-12,
        pooler=True,
    )
    values.update(overrides)
    return EncoderConfig(**values)


FAMILY = Family(
    name="bert",
    presets={
        "tiny": lambda: bert_config(**TINY),
        "base": bert_config,
        "large": lambda: bert_config(**LARGE),
    },
    tokenizer="wordpiece",
    sentence_head=NEXT_SENTENCE_HEAD,
    transformers=TransformersLayout(
        model_type="bert",
        class_prefix="Bert",
        base_prefix="bert.",
        layer_prefix="{p}encoder.layer.{i}.",
        layer=BERT_STYLE_LAYER,
        modules=[("{p}" + theirs, ours) for theirs, ours in BERT_STYLE_EMBEDDINGS]
        + [("{p}pooler.dense", "pooler.dense")],
        lm_head=[
            ("cls.predictions.transform.dense", "encoder.lm_head.dense"),
            ("cls.predictions.transform.LayerNorm", "encoder.lm_head.layer_norm"),
        ],
        lm_decoder="cls.predictions",
        task_heads={
            "ForPreTraining": [("cls.seq_relationship", f"classification_heads.{NEXT_SENTENCE_HEAD}.out_proj")],
            "ForNextSentencePrediction": [
                ("cls.seq_relationship", f"classification_heads.{NEXT_SENTENCE_HEAD}.out_proj")
            ],
            "ForSequenceClassification": [("classifier", f"classification_heads.{SEQUENCE_HEAD}.out_proj")],
        },
    ),
)
