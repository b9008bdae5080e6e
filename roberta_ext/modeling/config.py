"""What a RoBERTa-family encoder is: one dataclass, and named presets.

Field names follow fairseq's model options (``--encoder-layers`` becomes
``encoder_layers``) so that a fairseq ``args``/``cfg`` maps onto this config by name.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Mapping

ACTIVATIONS = ("gelu", "gelu_accurate", "relu", "tanh", "linear")
FAMILIES = ("roberta", "bert", "albert", "electra", "spanbert")
POSITION_STYLES = ("fairseq", "absolute")
LAYER_SHARING = ("none", "all", "ffn", "attention")


@dataclass(kw_only=True)
class EncoderConfig:
    """Shape and behaviour of a bidirectional transformer encoder with an LM head.

    >>> cfg = EncoderConfig.preset("base")
    >>> cfg.encoder_layers, cfg.encoder_embed_dim, cfg.max_positions
    (12, 768, 512)
    """

    vocab_size: int = 50265
    """Rows of the token embedding (= len(dict.txt) + 4 specials + ``<mask>``)."""

    padding_idx: int = 1
    """Index of ``<pad>``. Learned positions start at ``padding_idx + 1`` (fairseq's convention)."""

    encoder_layers: int = 12
    """Number of transformer layers."""

    encoder_embed_dim: int = 768
    """Width of the residual stream."""

    encoder_ffn_embed_dim: int = 3072
    """Inner width of the feed-forward block."""

    encoder_attention_heads: int = 12
    """Number of attention heads; must divide ``encoder_embed_dim``."""

    max_positions: int = 512
    """Longest input in tokens; the position table has ``max_positions + padding_idx + 1`` rows."""

    activation_fn: str = "gelu"
    """Activation of the feed-forward block and of the LM head."""

    pooler_activation_fn: str = "tanh"
    """Activation inside classification heads."""

    encoder_normalize_before: bool = False
    """Pre-LN layers (and a final LayerNorm) when True; RoBERTa is post-LN."""

    layernorm_embedding: bool = True
    """LayerNorm over the summed embeddings (RoBERTa has one)."""

    untie_weights: bool = False
    """When True the LM head owns its output matrix instead of reusing ``embed_tokens``."""

    dropout: float = 0.1
    """Dropout on embeddings and residual branches."""

    attention_dropout: float = 0.1
    """Dropout on attention probabilities."""

    activation_dropout: float = 0.0
    """Dropout after the feed-forward activation."""

    pooler_dropout: float = 0.0
    """Dropout inside classification heads."""

    # ---- what distinguishes the families (RoBERTa's values are the defaults) ----

    family: str = "roberta"
    """Which family's conventions the model follows (tokenizer, pair layout, objectives):
    one of :data:`FAMILIES`. The layers are the same for all of them."""

    embedding_size: int | None = None
    """Width of the token, position and segment embeddings. ``None`` means ``encoder_embed_dim``;
    smaller values give ALBERT's factorized embeddings (V x E, then an E -> H projection)."""

    type_vocab_size: int = 0
    """Rows of the segment (token-type) embedding; BERT and ALBERT have 2, RoBERTa none."""

    position_style: str = "fairseq"
    """``fairseq``: positions count real tokens from ``padding_idx + 1`` (RoBERTa);
    ``absolute``: position ``t`` is row ``t`` (BERT, ALBERT, ELECTRA)."""

    layer_norm_eps: float = 1e-5
    """Epsilon of every LayerNorm (BERT's family uses 1e-12)."""

    share_layers: str = "none"
    """ALBERT's cross-layer parameter sharing: ``all`` layers one set of weights, only the
    ``ffn`` blocks, only the ``attention`` blocks, or ``none``."""

    pooler: bool = False
    """BERT's pooler (dense + tanh on the first token) under sentence-level heads (NSP, SOP,
    sequence classification); without it each classification head has its own dense layer."""

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
        for field, allowed in (("family", FAMILIES), ("position_style", POSITION_STYLES),
                               ("share_layers", LAYER_SHARING)):
            if getattr(self, field) not in allowed:
                raise ValueError(f"{field}={getattr(self, field)!r} is not one of {allowed}")
        if self.embedding_size is not None and self.embedding_size <= 0:
            raise ValueError(f"embedding_size must be positive or None, got {self.embedding_size}")
        if self.type_vocab_size < 0:
            raise ValueError(f"type_vocab_size must be >= 0, got {self.type_vocab_size}")

    @property
    def embed_dim(self) -> int:
        """Width of the embeddings (ALBERT's E): ``embedding_size`` or the hidden size."""
        return self.embedding_size or self.encoder_embed_dim

    @property
    def num_position_embeddings(self) -> int:
        """Rows of the learned position table: 514 for 512 tokens in fairseq's style, 512 in
        the absolute style."""
        if self.position_style == "absolute":
            return self.max_positions
        return self.max_positions + self.padding_idx + 1

    def replace(self, **changes: Any) -> "EncoderConfig":
        """A copy with some fields changed.

        >>> EncoderConfig.preset("tiny").replace(encoder_layers=4).encoder_layers
        4
        """
        return dataclasses.replace(self, **changes)

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "EncoderConfig":
        """A named shape: ``tiny`` (tests), ``base`` (12x768) or ``large`` (24x1024) for
        RoBERTa, and ``FAMILY-SIZE`` for the others (``bert-base``, ``albert-tiny``, ...).

        >>> EncoderConfig.preset("large").encoder_layers
        24
        >>> EncoderConfig.preset("albert-base").embedding_size
        128
        """
        try:
            make = PRESETS[name]
        except KeyError:
            raise ValueError(f"unknown preset {name!r}; known presets: {sorted(PRESETS)}") from None
        return make().replace(**overrides)

    @classmethod
    def from_fairseq(cls, options: Mapping[str, Any], **overrides: Any) -> "EncoderConfig":
        """Read fairseq's model options (``args`` as a dict or ``cfg["model"]``).

        Unknown options are ignored; fairseq's names that differ from ours are mapped.

        >>> EncoderConfig.from_fairseq({"arch": "roberta_large", "encoder_layers": 24}).encoder_embed_dim
        1024
        """
        arch = options.get("arch") or options.get("_name") or ""
        base = cls.preset("large") if "large" in str(arch) else cls.preset("base")
        renames = {"untie_weights_roberta": "untie_weights", "encoder_layernorm_embedding": "layernorm_embedding"}
        names = {f.name for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in options.items():
            key = renames.get(key, key)
            if key in names and value is not None:
                values[key] = value
        values.update(overrides)
        return base.replace(**values)


def _tiny() -> EncoderConfig:
    return EncoderConfig(
        vocab_size=64,
        encoder_layers=2,
        encoder_embed_dim=32,
        encoder_ffn_embed_dim=64,
        encoder_attention_heads=4,
        max_positions=64,
    )


def _base() -> EncoderConfig:
    return EncoderConfig()


def _large() -> EncoderConfig:
    return EncoderConfig(
        encoder_layers=24, encoder_embed_dim=1024, encoder_ffn_embed_dim=4096, encoder_attention_heads=16
    )


PRESETS: dict[str, Callable[[], EncoderConfig]] = {"tiny": _tiny, "base": _base, "large": _large}
"""Named configs. RoBERTa's are here; each family's file adds its own (``bert-base``, ...)."""
