"""What a model family is: the :class:`Family` record each family module fills in, and the
registry that maps a family's name (``EncoderConfig.family``) to it.

A family is everything that makes RoBERTa, BERT, ALBERT, ELECTRA or SpanBERT itself on top of the
one encoder core: its presets, its tokenizer, how it joins a pair of texts, how transformers
names its weights, which modules only its pretraining has, which model class serves a
checkpoint, and the extra defaults of its fairseq architectures. Code outside
``roberta_ext/families/`` asks the family (``get_family(cfg.family).double_separator``) instead
of testing its name.

>>> from roberta_ext.families import get_family
>>> bert = get_family("bert")
>>> bert.tokenizer, bert.double_separator, bert.sentence_head, sorted(bert.presets)
('wordpiece', False, 'next_sentence', ['base', 'large', 'tiny'])
>>> bert.architectures()
{'bert_ext_base': 'base', 'bert_ext_large': 'large'}
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..modeling.model import ENCODER_PREFIX

if TYPE_CHECKING:
    from ..modeling import EncoderConfig, RobertaModel

KeyPairs = list[tuple[str, str]]
"""``(transformers module name, our module name)`` pairs; ``weight``/``bias`` are appended."""


def _no_change(transformers_config: Mapping[str, Any], values: dict[str, Any]) -> None:
    return None


def _nothing_to_add(cfg: EncoderConfig, transformers_config: dict[str, Any]) -> None:
    return None


@dataclass(frozen=True, kw_only=True)
class TransformersLayout:
    """How transformers names one family's weights and options. Module names get ``weight``
    and ``bias`` appended; ``{p}`` is the base model's prefix (``bert.``, or nothing for a bare
    ``BertModel``) and ``{i}`` a layer number."""

    model_type: str
    """``config.json``'s ``model_type`` (``bert``, ``roberta``, ...)."""
    class_prefix: str
    """Prefix of transformers' classes: ``Bert`` in ``BertForMaskedLM``."""
    base_prefix: str
    """Prefix of the base model's tensors inside a task model: ``bert.``."""
    layer_prefix: str
    """Prefix of layer ``{i}``'s tensors, e.g. ``{p}encoder.layer.{i}.``."""
    layer: KeyPairs
    """Names inside one layer -> ours inside ``layers.N``."""
    modules: KeyPairs
    """Names outside the layers (embeddings, pooler) -> ours."""
    lm_head: KeyPairs
    """The masked-LM head's transform -> ours (``[]``: the family exports none)."""
    lm_decoder: str
    """The module whose ``bias`` (and tied ``decoder.weight``) is the LM output layer's."""
    lm_output_layer: bool = False
    """``lm_decoder`` is the output layer itself (ModernBERT's ``decoder``: its ``weight`` the tied
    embeddings, its ``bias`` the output bias), not a module holding a ``bias`` and a ``decoder``
    (BERT's ``cls.predictions``)."""
    task_heads: Mapping[str, KeyPairs]
    """Architecture suffix (``ForPreTraining``, ``ForSequenceClassification``, ...) -> the
    sentence-level head modules that architecture adds."""
    shared_layers: bool = False
    """One set of layer weights for every layer (ALBERT): transformers stores layer 0 only."""
    factorized_embeddings: bool = False
    """Whether transformers' class can hold embeddings narrower than the layers."""
    optional_segments: bool = False
    """transformers keeps a one-row all-zero segment table that our layout leaves out (RoBERTa)."""
    read_config: Callable[[Mapping[str, Any], dict[str, Any]], None] = _no_change
    """Adjusts the :class:`EncoderConfig` values read from a ``config.json`` in place."""
    write_config: Callable[[EncoderConfig, dict[str, Any]], None] = _nothing_to_add
    """Adds the family's own entries to a ``config.json`` being written."""


@dataclass(frozen=True, kw_only=True)
class Family:
    """One model family. Every field is data or a small hook; the core never tests a name."""

    name: str
    """``EncoderConfig.family``; also the first word of its fairseq architectures."""
    presets: Mapping[str, Callable[[], EncoderConfig]]
    """Size -> config. ``preset("bert-base")`` is ``presets["base"]()`` of ``bert``; RoBERTa's
    are also reachable without the prefix (``"base"``)."""
    tokenizer: str
    """The tokenizer kind the family's released models use (``gpt2``, ``wordpiece``,
    ``sentencepiece``), for a checkpoint that comes without tokenizer files."""
    double_separator: bool = False
    """Pairs joined as ``<s> a </s> </s> b </s>`` (RoBERTa) instead of ``[CLS] a [SEP] b [SEP]``."""
    sentence_head: str | None = None
    """The sentence-level pretraining head (BERT's next-sentence, ALBERT's sentence-order), a
    two-class classification head; ``None`` for families without one."""
    pretraining_modules: tuple[str, ...] = ()
    """Top-level modules only the family's pretraining model has (ELECTRA's ``generator``); a
    model without them drops their tensors when it loads a pretraining checkpoint."""
    serving_model: Callable[[EncoderConfig, Collection[str], bool], RobertaModel] | None = None
    """Builds the model that serves a checkpoint with these state-dict keys (ELECTRA: with its
    discriminator head when the file has one), given ``has_lm_head``; ``None``: a plain
    ``RobertaModel``."""
    transformers: TransformersLayout | None = None
    """How transformers stores the family; ``None``: not exchangeable with transformers."""
    fairseq_model: str = "roberta_ext"
    """The fairseq model its architectures belong to (ELECTRA and SpanBERT have their own)."""
    architecture_sizes: tuple[str, ...] = ("base", "large")
    """Presets registered as fairseq architectures ``<name>_ext_<size>``."""
    architecture_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Size -> plugin-only defaults of that architecture (ELECTRA's ``generator_fraction``)."""
    pretraining_recipe: tuple[str, ...] | None = None
    """``fairseq-train`` flags of the family's own pretraining recipe (optimizer, schedule,
    masking), where it is not fairseq's RoBERTa recipe (the quickstart's ``--family``)."""

    def preset(self, size: str) -> EncoderConfig:
        """The config of one size: ``get_family("albert").preset("base")``."""
        try:
            return self.presets[size]()
        except KeyError:
            raise ValueError(
                f"family {self.name!r} has no preset {size!r}; its presets: {sorted(self.presets)}"
            ) from None

    def architectures(self) -> dict[str, str]:
        """fairseq architecture name -> preset size, e.g. ``{"bert_ext_base": "base", ...}``."""
        return {f"{self.name}_ext_{size}": size for size in self.architecture_sizes}

    def build_serving_model(self, cfg: EncoderConfig, keys: Collection[str]) -> RobertaModel:
        """The model (randomly initialised) that serves a checkpoint whose state dict has
        ``keys``. A file without a trained masked-LM head (transformers' ``BertModel``) gives a
        model whose ``has_lm_head`` is False."""
        has_lm_head = any(key.startswith("encoder.lm_head.") and key != "encoder.lm_head.weight" for key in keys)
        if self.serving_model is not None:
            return self.serving_model(cfg, keys, has_lm_head)
        from ..modeling import RobertaModel

        return RobertaModel(cfg, has_lm_head=has_lm_head)


_FAMILIES: dict[str, Family] = {}


def register_family(family: Family) -> Family:
    """Make ``family`` known by its name; one line per family in ``families/__init__.py``."""
    if family.name in _FAMILIES and _FAMILIES[family.name] is not family:
        raise ValueError(f"a family named {family.name!r} is already registered")
    _FAMILIES[family.name] = family
    return family


def get_family(name: str) -> Family:
    """The family called ``name``; ``ValueError`` naming the known ones otherwise."""
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown model family {name!r}; known families: {sorted(_FAMILIES)}") from None


def families() -> list[Family]:
    """Every registered family, in registration order."""
    return list(_FAMILIES.values())


def family_of_transformers(model_type: str) -> Family | None:
    """The family whose transformers ``model_type`` is ``model_type``, if any."""
    for family in _FAMILIES.values():
        if family.transformers is not None and family.transformers.model_type == model_type:
            return family
    return None


def preset(name: str, **overrides: Any) -> EncoderConfig:
    """A named config: ``FAMILY-SIZE`` (``bert-base``, ``albert-tiny``) or a RoBERTa size alone
    (``base``, ``large``, ``tiny``), with the fields in ``overrides`` replaced. The one way to
    a config by name: :class:`~roberta_ext.modeling.EncoderConfig` itself knows no family.

    >>> preset("large").encoder_layers
    24
    >>> preset("albert-base").embedding_size
    128
    >>> preset("tiny", encoder_layers=4).encoder_layers
    4
    """
    family_name, _, size = name.rpartition("-")
    family = _FAMILIES.get(family_name or "roberta")
    if family is None or size not in family.presets:
        known = sorted(f"{f.name}-{s}" if f.name != "roberta" else s for f in _FAMILIES.values() for s in f.presets)
        raise ValueError(f"unknown preset {name!r}; known presets: {known}")
    cfg = family.presets[size]()
    if not overrides:
        return cfg
    cfg = cfg.replace(**overrides)
    get_family(cfg.family)  # an overridden family must be a known one: a ValueError naming them
    return cfg


# transformers' BERT, RoBERTa and ELECTRA share these names; ALBERT has its own layer names.
BERT_STYLE_EMBEDDINGS: KeyPairs = [
    ("embeddings.word_embeddings", ENCODER_PREFIX + "embed_tokens"),
    ("embeddings.position_embeddings", ENCODER_PREFIX + "embed_positions"),
    ("embeddings.token_type_embeddings", ENCODER_PREFIX + "segment_embeddings"),
    ("embeddings.LayerNorm", ENCODER_PREFIX + "layernorm_embedding"),
]
BERT_STYLE_LAYER: KeyPairs = [  # transformers "encoder.layer.{i}." + name -> ours "layers.{i}." + name
    ("attention.self.query", "self_attn.q_proj"),
    ("attention.self.key", "self_attn.k_proj"),
    ("attention.self.value", "self_attn.v_proj"),
    ("attention.output.dense", "self_attn.out_proj"),
    ("attention.output.LayerNorm", "self_attn_layer_norm"),
    ("intermediate.dense", "fc1"),
    ("output.dense", "fc2"),
    ("output.LayerNorm", "final_layer_norm"),
]
TINY: dict[str, Any] = dict(
    vocab_size=64,
    encoder_layers=2,
    encoder_embed_dim=32,
    encoder_ffn_embed_dim=64,
    encoder_attention_heads=4,
    max_positions=64,
)
"""The CPU-sized shape of every family's ``tiny`` preset (tests, doc examples)."""
LARGE: dict[str, Any] = dict(
    encoder_layers=24, encoder_embed_dim=1024, encoder_ffn_embed_dim=4096, encoder_attention_heads=16
)
"""The shape of every family's ``large`` preset (BERT-large's, RoBERTa-large's)."""
SEQUENCE_HEAD = "classifier"
"""Our name for the head of a ``*ForSequenceClassification`` checkpoint."""
TOKEN_HEAD = "tagger"
"""Our name for the head of a ``*ForTokenClassification`` checkpoint."""
TRANSFORMERS_ACTIVATIONS: dict[str, str] = {
    "gelu": "gelu",
    "gelu_new": "gelu_accurate",
    "gelu_pytorch_tanh": "gelu_accurate",
    "gelu_fast": "gelu_accurate",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}
"""transformers' activation names (``hidden_act``, ModernBERT's ``hidden_activation``) -> ours."""
