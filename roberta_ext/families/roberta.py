"""RoBERTa (Liu et al., 2019): the family whose conventions are the core's defaults.

GPT-2 byte-level BPE mapped through fairseq's ``dict.txt``, learned positions counted from
``padding_idx + 1`` (so 512 tokens need a 514-row table), no segment embeddings, pairs joined as
``<s> a </s> </s> b </s>``, a tied masked-LM head and no pooler. transformers' ``Roberta*``
classes use BERT's weight names with a one-row, all-zero segment table that fairseq's layout
does not have.

>>> from roberta_ext.families import preset
>>> cfg = preset("base")
>>> cfg.family, cfg.encoder_layers, cfg.num_position_embeddings
('roberta', 12, 514)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..modeling.config import EncoderConfig
from .base import BERT_STYLE_EMBEDDINGS, BERT_STYLE_LAYER, LARGE, SEQUENCE_HEAD, TINY, Family, TransformersLayout


def roberta_config(**overrides: Any) -> EncoderConfig:
    """RoBERTa-base's config with ``overrides``: fairseq's GPT-2 dictionary (50,265 indices), 12 x 768."""
    return EncoderConfig(**{"family": "roberta", **overrides})


def _read_config(config: Mapping[str, Any], values: dict[str, Any]) -> None:
    # fairseq's positions: real tokens count from pad + 1, so the table has pad + 1 extra rows.
    values.update(position_style="fairseq", max_positions=values["max_positions"] - values["padding_idx"] - 1)


def _write_config(cfg: EncoderConfig, config: dict[str, Any]) -> None:
    config.update(bos_token_id=0, eos_token_id=2)


FAMILY = Family(
    name="roberta",
    presets={
        "tiny": lambda: roberta_config(**TINY),
        "base": roberta_config,
        "large": lambda: roberta_config(**LARGE),
    },
    tokenizer="gpt2",
    double_separator=True,
    transformers=TransformersLayout(
        model_type="roberta",
        class_prefix="Roberta",
        base_prefix="roberta.",
        layer_prefix="{p}encoder.layer.{i}.",
        layer=BERT_STYLE_LAYER,
        modules=[("{p}" + theirs, ours) for theirs, ours in BERT_STYLE_EMBEDDINGS],
        lm_head=[("lm_head.dense", "encoder.lm_head.dense"), ("lm_head.layer_norm", "encoder.lm_head.layer_norm")],
        lm_decoder="lm_head",
        task_heads={
            "ForSequenceClassification": [
                ("classifier.dense", f"classification_heads.{SEQUENCE_HEAD}.dense"),
                ("classifier.out_proj", f"classification_heads.{SEQUENCE_HEAD}.out_proj"),
            ]
        },
        optional_segments=True,
        read_config=_read_config,
        write_config=_write_config,
    ),
)
