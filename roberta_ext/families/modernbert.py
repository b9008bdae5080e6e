"""ModernBERT (Warner et al., 2024): the first family whose layers are not fairseq's.

The same core (:mod:`roberta_ext.modeling`) with modern options: no position table but rotary
positions (a theta of 160,000 in the global layers and 10,000 in the local ones); pre-LN layers
whose first attention norm is the identity (the embeddings are normalised already) and a final
norm; query, key and value in one fused projection (transformers' ``Wqkv``); a GeGLU feed-forward
block (``Wi`` gives the input and the gate, ``gelu(input) * gate``); no biases in the attention,
the feed-forward block, the norms or the heads' dense layers; every third layer global, the others
attending to the tokens at most ``local_attention // 2`` (64) positions away; 8192 positions. Its
heads transform the features as its masked-LM head does (dense, GELU, LayerNorm) before their
output layer, and sentence heads read the first token (``cls``) or the mean of the real tokens
(``mean``). The tokenizer is a byte-level BPE in ``tokenizer.json`` (``[CLS] a [SEP] b [SEP]``).

transformers stores it as ``ModernBertModel`` and ``ModernBertFor{MaskedLM,SequenceClassification,
TokenClassification}``; its ``config.json`` comes in two forms, both read here: transformers 5's
``layer_types`` + ``rope_parameters``, and the released files' ``global_attn_every_n_layers``,
``local_attention``, ``global_rope_theta`` and ``local_rope_theta`` — whose ``layer_norm_eps`` is
stale: ``norm_eps`` is the model's epsilon.

>>> from roberta_ext.families import preset
>>> from roberta_ext.modeling import RobertaModel
>>> cfg = preset("modernbert-base")
>>> cfg.position_style, cfg.local_attention, cfg.global_attn_every_n_layers, cfg.gated_ffn
('rotary', 128, 3, True)
>>> round(sum(p.numel() for p in RobertaModel(cfg).parameters()) / 1e6, 1)   # millions, with MLM head
149.7
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..modeling.config import EncoderConfig
from ..modeling.model import ENCODER_PREFIX
from .base import SEQUENCE_HEAD, TOKEN_HEAD, TRANSFORMERS_ACTIVATIONS, Family, TransformersLayout

GLOBAL, LOCAL = "full_attention", "sliding_attention"
"""transformers' names for the two kinds of layer (``layer_types``, ``rope_parameters``)."""


STRUCTURE: dict[str, Any] = dict(
    position_style="rotary",
    type_vocab_size=0,
    encoder_normalize_before=True,
    layernorm_embedding=True,
    first_layer_attention_norm=False,
    gated_ffn=True,
    fused_qkv=True,
    normed_heads=True,
    untie_weights=False,
    share_layers="none",
    embedding_size=None,
    pooler=False,
)
"""What every ModernBERT is (the rest — sizes, biases, windows, thetas — its config.json says)."""


def modernbert_config(**overrides: Any) -> EncoderConfig:
    """ModernBERT-base's config (answerdotai/ModernBERT-base's ``config.json``) with ``overrides``:
    22 x 768, 12 heads, GeGLU 1152, vocabulary 50368 (``[PAD]`` is 50283), 8192 positions."""
    values: dict[str, Any] = dict(
        STRUCTURE,
        family="modernbert",
        vocab_size=50368,
        padding_idx=50283,
        encoder_layers=22,
        encoder_embed_dim=768,
        encoder_ffn_embed_dim=1152,
        encoder_attention_heads=12,
        max_positions=8192,
        activation_fn="gelu",
        pooler_activation_fn="gelu",
        layer_norm_eps=1e-5,
        rotary_theta=160000.0,
        local_rotary_theta=10000.0,
        local_attention=128,
        global_attn_every_n_layers=3,
        attention_bias=False,
        ffn_bias=False,
        norm_bias=False,
        head_bias=False,
        lm_output_bias=True,
        classifier_pooling="mean",
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pooler_dropout=0.0,
    )
    values.update(overrides)
    return EncoderConfig(**values)


def _checkpoint_error(message: str) -> Exception:
    from ..checkpoints.safe_load import CheckpointError

    return CheckpointError(message)


def _activation(config: Mapping[str, Any], key: str) -> str:
    name = config.get(key, "gelu")
    if name not in TRANSFORMERS_ACTIVATIONS:
        raise _checkpoint_error(f"{key} {name!r} is not supported; known: {sorted(TRANSFORMERS_ACTIVATIONS)}")
    return TRANSFORMERS_ACTIVATIONS[name]


def _global_every(config: Mapping[str, Any], layers: int) -> int:
    """The ``n`` of "layer i is global when i % n == 0", from ``layer_types`` (transformers 5)
    or ``global_attn_every_n_layers`` (the released files; transformers' default 3)."""
    types = config.get("layer_types")
    if types is None:
        return int(config.get("global_attn_every_n_layers", 3))
    if len(types) != layers or any(kind not in (GLOBAL, LOCAL) for kind in types):
        raise _checkpoint_error(f"layer_types {types!r} is not {layers} of {GLOBAL!r} / {LOCAL!r}")
    every = next((i for i, kind in enumerate(types) if i and kind == GLOBAL), layers)
    if any((kind == GLOBAL) != (i % every == 0) for i, kind in enumerate(types)):
        raise _checkpoint_error(
            f"layer_types {types!r} is not supported: a layer must be global exactly when its index is a multiple "
            "of one number (global_attn_every_n_layers)"
        )
    return every


def _rope_thetas(config: Mapping[str, Any]) -> tuple[float, float]:
    """(global theta, local theta) from ``rope_parameters`` (transformers 5) or the released
    files' ``global_rope_theta`` / ``local_rope_theta`` (a local theta of null: the global one)."""
    if config.get("rope_scaling"):
        raise _checkpoint_error(f"rope_scaling {config['rope_scaling']!r} is not supported")
    parameters = config.get("rope_parameters")
    if parameters is None:
        global_theta = float(config.get("global_rope_theta", 160000.0))
        local_theta = config.get("local_rope_theta", 10000.0)
        return global_theta, global_theta if local_theta is None else float(local_theta)
    thetas = []
    for kind, default in ((GLOBAL, 160000.0), (LOCAL, 10000.0)):
        entry = parameters.get(kind) or {}
        if entry.get("rope_type", "default") != "default":
            raise _checkpoint_error(f"rope_parameters[{kind!r}] of type {entry['rope_type']!r} is not supported")
        thetas.append(float(entry.get("rope_theta", default)))
    return thetas[0], thetas[1]


def _read_config(config: Mapping[str, Any], values: dict[str, Any]) -> None:
    every = _global_every(config, values["encoder_layers"])
    global_theta, local_theta = _rope_thetas(config)
    all_global = every == 1 or values["encoder_layers"] == 1
    pooling = config.get("classifier_pooling", "cls")
    if pooling not in ("cls", "mean"):
        raise _checkpoint_error(f"classifier_pooling {pooling!r} is not 'cls' or 'mean'")
    values.update(
        STRUCTURE,
        activation_fn=_activation(config, "hidden_activation"),
        pooler_activation_fn=_activation(config, "classifier_activation"),
        layer_norm_eps=float(config.get("norm_eps", 1e-5)),  # not the released files' stale layer_norm_eps
        rotary_theta=global_theta,
        local_rotary_theta=local_theta,
        local_attention=None if all_global else int(config.get("local_attention", 128)),
        global_attn_every_n_layers=1 if all_global else every,
        attention_bias=bool(config.get("attention_bias", False)),
        ffn_bias=bool(config.get("mlp_bias", False)),
        norm_bias=bool(config.get("norm_bias", False)),
        head_bias=bool(config.get("classifier_bias", False)),
        lm_output_bias=bool(config.get("decoder_bias", True)),
        classifier_pooling=pooling,
        dropout=float(config.get("embedding_dropout", 0.0)),
        attention_dropout=float(config.get("attention_dropout", 0.0)),
        activation_dropout=float(config.get("mlp_dropout", 0.0)),
        pooler_dropout=float(config.get("classifier_dropout", 0.0)),
    )


def _write_config(cfg: EncoderConfig, config: dict[str, Any]) -> None:
    """ModernBERT's ``config.json`` entries in both forms (transformers 5 reads ``layer_types`` and
    ``rope_parameters``, earlier versions the released files' keys), in place of BERT's."""
    differing = [name for name, value in STRUCTURE.items() if getattr(cfg, name) != value]
    if differing:
        raise ValueError(f"transformers' ModernBERT cannot hold this model: it differs from ModernBERT in {differing}")
    activations = {ours: theirs for theirs, ours in reversed(TRANSFORMERS_ACTIVATIONS.items())}
    for bert_key in (
        "hidden_act",
        "type_vocab_size",
        "layer_norm_eps",
        "hidden_dropout_prob",
        "attention_probs_dropout_prob",
        "position_embedding_type",
    ):
        config.pop(bert_key, None)
    every = cfg.global_attn_every_n_layers if cfg.local_attention is not None else 1
    window = cfg.local_attention if cfg.local_attention is not None else 2 * cfg.max_positions
    config.update(
        max_position_embeddings=cfg.max_positions,
        hidden_activation=activations[cfg.activation_fn],
        classifier_activation=activations[cfg.pooler_activation_fn],
        norm_eps=cfg.layer_norm_eps,
        norm_bias=cfg.norm_bias,
        attention_bias=cfg.attention_bias,
        mlp_bias=cfg.ffn_bias,
        classifier_bias=cfg.head_bias,
        decoder_bias=cfg.lm_output_bias,
        classifier_pooling=cfg.classifier_pooling,
        embedding_dropout=cfg.dropout,
        attention_dropout=cfg.attention_dropout,
        mlp_dropout=cfg.activation_dropout,
        classifier_dropout=cfg.pooler_dropout,
        local_attention=window,
        global_attn_every_n_layers=every,
        global_rope_theta=cfg.rotary_theta,
        local_rope_theta=cfg.local_rotary_theta,
        layer_types=[GLOBAL if i % every == 0 else LOCAL for i in range(cfg.encoder_layers)],
        rope_parameters={
            GLOBAL: {"rope_type": "default", "rope_theta": cfg.rotary_theta},
            LOCAL: {"rope_type": "default", "rope_theta": cfg.local_rotary_theta},
        },
    )


_LAYER = [  # transformers "{p}layers.{i}." + name -> ours "layers.{i}." + name
    ("attn_norm", "self_attn_layer_norm"),  # the identity in layer 0: no tensor there
    ("attn.Wqkv", "self_attn.qkv_proj"),
    ("attn.Wo", "self_attn.out_proj"),
    ("mlp_norm", "final_layer_norm"),
    ("mlp.Wi", "fc1"),
    ("mlp.Wo", "fc2"),
]

FAMILY = Family(
    name="modernbert",
    # Warner et al., 2024: 30% masking, StableAdamW (decoupled weight decay, none on biases and
    # norms, no gradient clipping), a warmup-stable-decay schedule (config/pretraining/modernbert_base.yaml).
    pretraining_recipe=(
        *("--optimizer", "roberta_ext_stable_adamw", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-6"),
        *("--weight-decay", "1e-5", "--decouple-lr", "--no-decay-bias-and-norm", "--clip-norm", "0"),
        *("--lr-scheduler", "roberta_ext_warmup_stable_decay", "--mask-prob", "0.3"),
    ),
    presets={
        "tiny": lambda: modernbert_config(
            vocab_size=64,
            padding_idx=1,
            encoder_layers=3,
            encoder_embed_dim=32,
            encoder_ffn_embed_dim=48,
            encoder_attention_heads=4,
            max_positions=512,
            local_attention=8,
        ),
        "base": modernbert_config,
        "large": lambda: modernbert_config(
            encoder_layers=28, encoder_embed_dim=1024, encoder_ffn_embed_dim=2624, encoder_attention_heads=16
        ),
    },
    # A byte-level BPE in tokenizer.json that GPT-2's does not reproduce (an NFC normalizer, added
    # tokens for runs of spaces, a [MASK] that absorbs the space before it): transformers always
    # reads it with the tokenizers library, and so do we.
    tokenizer="hf_tokenizer",
    transformers=TransformersLayout(
        model_type="modernbert",
        class_prefix="ModernBert",
        base_prefix="model.",
        layer_prefix="{p}layers.{i}.",
        layer=_LAYER,
        modules=[
            ("{p}embeddings.tok_embeddings", ENCODER_PREFIX + "embed_tokens"),
            ("{p}embeddings.norm", ENCODER_PREFIX + "layernorm_embedding"),
            ("{p}final_norm", ENCODER_PREFIX + "layer_norm"),
        ],
        lm_head=[("head.dense", "encoder.lm_head.dense"), ("head.norm", "encoder.lm_head.layer_norm")],
        lm_decoder="decoder",
        lm_output_layer=True,
        task_heads={
            "ForSequenceClassification": [
                ("head.dense", f"classification_heads.{SEQUENCE_HEAD}.dense"),
                ("head.norm", f"classification_heads.{SEQUENCE_HEAD}.layer_norm"),
                ("classifier", f"classification_heads.{SEQUENCE_HEAD}.out_proj"),
            ],
            # Its ``classifier`` is every family's token-head output layer (checkpoints/transformers.py).
            "ForTokenClassification": [
                ("head.dense", f"token_heads.{TOKEN_HEAD}.dense"),
                ("head.norm", f"token_heads.{TOKEN_HEAD}.layer_norm"),
            ],
        },
        read_config=_read_config,
        write_config=_write_config,
    ),
    # modernbert_ext_base / _large: the plugin builds the same model from these options; no
    # ModernBERT pretraining recipe (hydra YAMLs, its tokenizer's data) comes with them yet.
    architecture_sizes=("base", "large"),
)


__all__ = ["FAMILY", "GLOBAL", "LOCAL", "STRUCTURE", "modernbert_config"]
