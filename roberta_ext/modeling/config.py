"""What a RoBERTa-family encoder is: one dataclass, the only declaration of the model options.

Field names follow fairseq's model options (``--encoder-layers`` becomes ``encoder_layers``) so
that a fairseq ``args``/``cfg`` maps onto this config by name. Each field is declared with
:func:`option`: its default, its help text and, where it differs, its fairseq name. Every other
view of the options is derived from these fields — the fairseq plugin's model dataclass and
architectures (``fairseq_plugin/models.py``), the options a checkpoint records
(:data:`CHECKPOINT_OPTIONS`) — so nothing can drift.

The config is a plain record: it knows no family. The named shapes live with their families
(``roberta_ext.families.preset("bert-base")``), and reading a fairseq checkpoint's options is
:mod:`roberta_ext.checkpoints`' job.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .attention import ATTENTION_STRATEGIES, checked_strategy

ACTIVATIONS = ("gelu", "gelu_accurate", "relu", "tanh", "linear")
POSITION_STYLES = ("fairseq", "absolute", "rotary")
CLASSIFIER_POOLING = ("cls", "mean")
LAYER_SHARING = ("none", "all", "ffn", "attention")


def option(
    default: Any,
    help: str,
    *,
    choices: Sequence[str] | None = None,
    fairseq_name: str | None = None,
    plugin: bool = True,
    recorded: bool = True,
) -> Any:
    """One model option: a dataclass field whose metadata the other views read.

    ``help`` is the text of ``fairseq-train --help``; ``choices`` the allowed values;
    ``fairseq_name`` the option's name in fairseq when ours differs; ``plugin=False`` for
    options that are not command-line flags (the vocabulary comes from ``dict.txt``);
    ``recorded=False`` for a choice of the process running the model rather than of the model
    itself (the attention strategy), which checkpoints do not record.

    >>> [f.metadata["fairseq_name"] for f in dataclasses.fields(EncoderConfig) if f.name == "untie_weights"]
    ['untie_weights_roberta']
    """
    return dataclasses.field(
        default=default,
        metadata={
            "help": help,
            "choices": tuple(choices) if choices else None,
            "fairseq_name": fairseq_name,
            "plugin": plugin,
            "recorded": recorded,
        },
    )


@dataclass(kw_only=True)
class EncoderConfig:
    """Shape and behaviour of a bidirectional transformer encoder with an LM head. The defaults
    are RoBERTa-base's; the named shapes are the families' presets
    (``roberta_ext.families.preset("large")``).

    >>> cfg = EncoderConfig(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64, encoder_attention_heads=4)
    >>> cfg.encoder_layers, cfg.encoder_embed_dim, cfg.max_positions, cfg.family
    (2, 32, 512, 'roberta')
    """

    vocab_size: int = option(
        50265, "Rows of the token embedding (= len(dict.txt) + 4 specials + <mask>).", plugin=False
    )
    padding_idx: int = option(
        1, "Index of <pad>. Learned positions start at padding_idx + 1 (fairseq's convention).", plugin=False
    )
    encoder_layers: int = option(12, "number of encoder layers")
    encoder_embed_dim: int = option(768, "encoder embedding dimension: the width of the residual stream")
    encoder_ffn_embed_dim: int = option(
        3072, "encoder embedding dimension for FFN: the feed-forward block's inner width"
    )
    encoder_attention_heads: int = option(12, "number of attention heads; must divide encoder_embed_dim")
    max_positions: int = option(
        512,
        "number of positional embeddings to learn: the longest input in tokens (fairseq's position table "
        "has max_positions + padding_idx + 1 rows)",
    )
    activation_fn: str = option(
        "gelu", "activation function of the feed-forward block and the LM head", choices=ACTIVATIONS
    )
    pooler_activation_fn: str = option("tanh", "activation function inside classification heads", choices=ACTIVATIONS)
    encoder_normalize_before: bool = option(False, "pre-LN layers and a final LayerNorm (RoBERTa is post-LN)")
    layernorm_embedding: bool = option(True, "LayerNorm over the summed embeddings (every family has one)")
    untie_weights: bool = option(
        False, "untie the LM head's output matrix from the token embeddings", fairseq_name="untie_weights_roberta"
    )
    dropout: float = option(0.1, "dropout probability on embeddings and residual branches")
    attention_dropout: float = option(0.1, "dropout probability on attention weights")
    activation_dropout: float = option(0.0, "dropout probability after the feed-forward activation")
    pooler_dropout: float = option(0.0, "dropout probability inside classification heads")

    # ---- what distinguishes the families (RoBERTa's values are the defaults) ----

    family: str = option("roberta", "family conventions: tokenizer, pair layout, objectives (roberta_ext/families/)")
    embedding_size: int | None = option(
        None,
        "width E of the token, position and segment embeddings; None: the hidden size; smaller: ALBERT's "
        "factorized embeddings (V x E, then an E -> H projection)",
    )
    type_vocab_size: int = option(0, "rows of the segment (token-type) embedding: 2 for BERT and ALBERT, 0 for RoBERTa")
    position_style: str = option(
        "fairseq",
        "fairseq: positions count real tokens from padding_idx + 1 (RoBERTa); absolute: position t is "
        "row t (BERT, ALBERT, ELECTRA); rotary: no position table, queries and keys are rotated by "
        "their position among the real tokens, counted from 0 (ModernBERT)",
        choices=POSITION_STYLES,
    )
    layer_norm_eps: float = option(1e-5, "epsilon of every LayerNorm (BERT's family: 1e-12; ModernBERT's norm_eps)")
    share_layers: str = option(
        "none",
        "ALBERT's cross-layer sharing: all layers one set of weights, only the ffn blocks, only the "
        "attention blocks, or none",
        choices=LAYER_SHARING,
    )
    pooler: bool = option(
        False,
        "BERT's pooler (dense + tanh on the first token) under sentence-level heads; without it each "
        "classification head has its own dense layer",
    )

    # ---- the modern encoders' options (ModernBERT); the defaults are RoBERTa's layers ----

    rotary_theta: float = option(
        160000.0,
        "position_style rotary: base (theta) of the rotary position frequencies of the global layers "
        "(ModernBERT's global_rope_theta)",
    )
    local_rotary_theta: float = option(
        10000.0,
        "position_style rotary: base (theta) of the rotary position frequencies of the local "
        "(sliding-window) layers (ModernBERT's local_rope_theta)",
    )
    local_attention: int | None = option(
        None,
        "width of the local layers' attention window: a token attends to the tokens at most "
        "local_attention // 2 positions away (ModernBERT: 128); None: every layer attends globally",
    )
    global_attn_every_n_layers: int = option(
        1,
        "with local_attention: layer i attends globally when i is a multiple of this, locally "
        "otherwise (ModernBERT: 3); 1: every layer is global",
    )
    gated_ffn: bool = option(
        False,
        "gated feed-forward (GLU; with gelu, ModernBERT's GeGLU): fc1 is twice encoder_ffn_embed_dim "
        "wide, and fc2 takes activation(first half) * second half",
    )
    fused_qkv: bool = option(
        False,
        "one qkv_proj (query | key | value stacked, ModernBERT's Wqkv) instead of q_proj, k_proj and "
        "v_proj: one matrix product instead of three, and the checkpoint's tensor loaded as it is",
    )
    attention_bias: bool = option(True, "biases in the attention's projections (ModernBERT: none)")
    ffn_bias: bool = option(True, "biases in the feed-forward block's fc1 and fc2 (ModernBERT's mlp_bias)")
    norm_bias: bool = option(True, "biases (beta) in every LayerNorm, heads' included (ModernBERT: none)")
    first_layer_attention_norm: bool = option(
        True,
        "pre-LN stacks: whether layer 0 normalises its attention input; ModernBERT's does not (its "
        "embeddings are already normalised: the norm is the identity there)",
    )
    head_bias: bool = option(
        True,
        "a bias in the dense layer of the masked-LM head and of normed classification heads "
        "(ModernBERT's classifier_bias)",
    )
    lm_output_bias: bool = option(True, "a bias on the masked-LM head's vocabulary logits (ModernBERT's decoder_bias)")
    normed_heads: bool = option(
        False,
        "ModernBERT's classification and token heads: dense, activation (pooler_activation_fn), "
        "LayerNorm, dropout, out_proj, with no pooler; False: fairseq's (dropout, dense, activation, "
        "dropout, out_proj) for sentences and a bare dropout + out_proj for tokens",
    )
    classifier_pooling: str = option(
        "cls",
        "what a classification head reads: the first token's features (cls) or the mean over the real tokens (mean)",
        choices=CLASSIFIER_POOLING,
    )

    # ---- how fairseq-train runs the model (the hub ignores these) ----

    bf16_autocast: bool = option(
        False,
        "fairseq-train only: run the model's forward under torch.autocast in bfloat16 while the trainer, "
        "the weights, the optimizer and the losses stay float32 (no loss scaling); for GPUs and CPUs with "
        "bf16 matmuls, instead of --fp16 (fairseq's --bf16 means a TPU); not with --fp16, --bf16 or --amp",
    )

    # ---- how this process runs the model (checkpoints do not record these) ----

    attention: str | None = option(
        None,
        "how the encoder attends over a batch with padding: one of ATTENTION_STRATEGIES "
        "(roberta_ext/modeling/attention.py); None: $ROBERTA_EXT_ATTENTION if set, else auto. A built "
        "model changes it with model.set_attention(name) or use_attention(model, name)",
        choices=ATTENTION_STRATEGIES,
        plugin=False,
        recorded=False,
    )

    def __post_init__(self) -> None:
        if self.encoder_embed_dim % self.encoder_attention_heads:
            raise ValueError(
                f"encoder_embed_dim={self.encoder_embed_dim} is not divisible by "
                f"encoder_attention_heads={self.encoder_attention_heads}"
            )
        for field in ("activation_fn", "pooler_activation_fn"):
            if getattr(self, field) not in ACTIVATIONS:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {ACTIVATIONS}")
        for field in ("encoder_layers", "encoder_embed_dim", "encoder_ffn_embed_dim", "max_positions", "vocab_size"):
            if getattr(self, field) <= 0:
                raise ValueError(f"{field} must be positive, got {getattr(self, field)}")
        if self.attention is not None:
            checked_strategy(self.attention, "attention")
        for field, allowed in (
            ("position_style", POSITION_STYLES),
            ("share_layers", LAYER_SHARING),
            ("classifier_pooling", CLASSIFIER_POOLING),
        ):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {allowed}")
        if self.embedding_size is not None and self.embedding_size <= 0:
            raise ValueError(f"embedding_size must be positive or None, got {self.embedding_size}")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0, got {self.type_vocab_size}")
        if self.local_attention is not None and self.local_attention < 2:
            raise ValueError(f"local_attention must be at least 2 tokens wide or None, got {self.local_attention}")
        if self.global_attn_every_n_layers <= 0:
            raise ValueError(f"global_attn_every_n_layers must be positive, got {self.global_attn_every_n_layers}")
        if self.classifier_pooling != "cls" and not self.normed_heads:
            raise ValueError(f"classifier_pooling={self.classifier_pooling!r} needs normed_heads (ModernBERT's heads)")
        if not self.first_layer_attention_norm and not self.encoder_normalize_before:
            raise ValueError("first_layer_attention_norm=False needs pre-LN layers (encoder_normalize_before)")
        if self.position_style == "rotary" and self.head_dim % 2:
            raise ValueError(f"rotary positions need an even head size, got {self.head_dim}")

    @property
    def head_dim(self) -> int:
        """Width of one attention head."""
        return self.encoder_embed_dim // self.encoder_attention_heads

    def is_local_layer(self, index: int) -> bool:
        """Whether layer ``index`` attends within its window (``local_attention``) rather than globally.

        >>> cfg = EncoderConfig(local_attention=128, global_attn_every_n_layers=3)
        >>> [cfg.is_local_layer(i) for i in range(4)]
        [False, True, True, False]
        """
        return self.local_attention is not None and index % self.global_attn_every_n_layers != 0

    @property
    def embed_dim(self) -> int:
        """Width of the embeddings (ALBERT's E): ``embedding_size`` or the hidden size."""
        return self.embedding_size or self.encoder_embed_dim

    @property
    def num_position_embeddings(self) -> int:
        """Rows of the learned position table: 514 for 512 tokens in fairseq's style, 512 in
        the absolute style."""
        if self.position_style != "fairseq":
            return self.max_positions
        return self.max_positions + self.padding_idx + 1

    def replace(self, **changes: Any) -> EncoderConfig:
        """A copy with some fields changed.

        >>> EncoderConfig().replace(encoder_layers=4).encoder_layers
        4
        """
        return dataclasses.replace(self, **changes)


FAIRSEQ_NAMES: dict[str, str] = {
    f.name: f.metadata["fairseq_name"] or f.name for f in dataclasses.fields(EncoderConfig)
}
"""Our field name -> the name of the same option in fairseq (``untie_weights_roberta``)."""

CHECKPOINT_OPTIONS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(EncoderConfig) if f.metadata["recorded"] and f.name != "vocab_size"
)
"""The fields a checkpoint written here records under ``cfg["model"]`` (by their fairseq names,
:data:`FAIRSEQ_NAMES`); the vocabulary size is the embedding's row count, and the attention
strategy is the running process's choice."""
