"""transformers checkpoints <-> our models, for every family with a
:class:`~roberta_ext.families.TransformersLayout` (RoBERTa, BERT, ALBERT, ELECTRA, ModernBERT), without
importing transformers.

A transformers directory holds ``config.json``, the weights (``model.safetensors``, sharded
``model-0000N-of-0000M.safetensors`` with an index, or ``pytorch_model.bin``) and tokenizer files
(``vocab.txt``, ``spiece.model`` or ``vocab.json`` + ``merges.txt``). The translation between
its key names and ours is data — one table per family, in the family's module — and it is
strict both ways (:func:`~roberta_ext.checkpoints.state.load_state_strict`): every
tensor of the file must be consumed by exactly one of our parameters (or be a known, checked
duplicate such as a tied decoder), every parameter of ours must be filled, every shape must
match. ``.bin`` files are read with the same safe unpickler as fairseq checkpoints.

>>> loaded = load_transformers("path/to/bert-base-uncased")        # doctest: +SKIP
>>> loaded.model.cfg.family, loaded.architecture                    # doctest: +SKIP
('bert', 'BertForPreTraining')
>>> save_transformers(loaded.model, "exported/")                    # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..atomic import atomic_directory
from ..families import (
    SEQUENCE_HEAD,
    TOKEN_HEAD,
    Family,
    TransformersLayout,
    families,
    family_of_transformers,
    get_family,
)
from ..families.base import TRANSFORMERS_ACTIVATIONS
from ..modeling import ENCODER_PREFIX, EncoderConfig, LMHead, RobertaModel
from ..modeling.encoder import init_bert_params
from .errors import CheckpointError
from .safe_load import load_torch_file
from .state import load_state_strict

QA_HEAD = "qa"
"""Our name for the start/end head of a ``*ForQuestionAnswering`` checkpoint (a 2-label token head)."""

_ENC = ENCODER_PREFIX
_TOKEN_HEADS = {
    "ForTokenClassification": ("classifier", f"token_heads.{TOKEN_HEAD}.out_proj"),
    "ForQuestionAnswering": ("qa_outputs", f"token_heads.{QA_HEAD}.out_proj"),
}
# Buffers transformers keeps in some files; they hold no learned values.
_IGNORED = re.compile(r"(^|\.)(embeddings\.position_ids|embeddings\.token_type_ids)$")
_ACTIVATIONS = TRANSFORMERS_ACTIVATIONS


@dataclass
class LoadedTransformers:
    """A model rebuilt from a transformers directory, and what its files said."""

    model: RobertaModel
    path: str
    architecture: str
    config: dict[str, Any]
    labels: list[str] | None = None
    """Class names of the sequence/token classification head (``id2label``), in class order."""
    has_lm_head: bool = True
    unused: list[str] = field(default_factory=list)


# ------------------------------------------------------------------------------ reading


def is_transformers_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` looks like a transformers model directory (``config.json`` + weights)."""
    p = Path(path)
    return (p / "config.json").is_file() and any(
        (p / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
    )


def read_weights(directory: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """All tensors of a transformers directory: safetensors (single or sharded) or, failing
    that, ``pytorch_model.bin`` through the safe unpickler."""
    d = Path(directory)
    if (d / "model.safetensors").is_file():
        return _read_safetensors(d / "model.safetensors")
    if (d / "model.safetensors.index.json").is_file():
        index = _read_json(d / "model.safetensors.index.json")
        tensors: dict[str, torch.Tensor] = {}
        for shard in sorted(set(index.get("weight_map", {}).values())):
            tensors.update(_read_safetensors(d / shard))
        return tensors
    if (d / "pytorch_model.bin").is_file():
        state = load_torch_file(d / "pytorch_model.bin", kind="transformers weights file")
        if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
            raise CheckpointError(f"{str(d / 'pytorch_model.bin')!r} is not a state dict of tensors")
        return dict(state)
    raise FileNotFoundError(f"{str(d)!r} has no model.safetensors, model.safetensors.index.json or pytorch_model.bin")


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} does not exist")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is not a readable safetensors file ({exc})") from None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is not valid JSON ({exc})") from None


def _layout(family_name: str) -> TransformersLayout:
    layout = get_family(family_name).transformers
    if layout is None:
        supported = sorted(f.name for f in families() if f.transformers is not None)
        raise ValueError(f"family {family_name!r} has no transformers counterpart; supported: {supported}")
    return layout


def _classifier_dropout(config: Mapping[str, Any]) -> float:
    """The head's dropout as transformers' classes read it: ``classifier_dropout`` (BERT, RoBERTa,
    ELECTRA) or ``classifier_dropout_prob`` (ALBERT) where set, 0.0 included, else the hidden dropout."""
    for key in ("classifier_dropout", "classifier_dropout_prob"):
        if config.get(key) is not None:
            return config[key]
    return config.get("hidden_dropout_prob", 0.1)


def config_from_transformers(config: Mapping[str, Any], *, path: str = "config.json") -> EncoderConfig:
    """Our :class:`EncoderConfig` from a transformers ``config.json`` of any family with a
    transformers layout (BERT, RoBERTa, ALBERT, ELECTRA).

    >>> config_from_transformers({"model_type": "bert", "vocab_size": 100, "hidden_size": 32,
    ...     "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}).family
    'bert'
    """
    model_type = config.get("model_type")
    family = family_of_transformers(str(model_type))
    if family is None:
        known = sorted(f.transformers.model_type for f in families() if f.transformers is not None)
        raise CheckpointError(f"{path!r}: model_type {model_type!r} is not supported; known: {known}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(
            f"{path!r}: position_embedding_type {config['position_embedding_type']!r} "
            "is not supported (only 'absolute')"
        )
    act = config.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise CheckpointError(f"{path!r}: hidden_act {act!r} is not supported; known: {sorted(_ACTIVATIONS)}")
    values: dict[str, Any] = dict(
        family=family.name,
        vocab_size=config["vocab_size"],
        padding_idx=config.get("pad_token_id", family.preset("base").padding_idx),
        encoder_layers=config["num_hidden_layers"],
        encoder_embed_dim=config["hidden_size"],
        encoder_ffn_embed_dim=config["intermediate_size"],
        encoder_attention_heads=config["num_attention_heads"],
        activation_fn=_ACTIVATIONS[act],
        layer_norm_eps=config.get("layer_norm_eps", 1e-12),
        type_vocab_size=config.get("type_vocab_size", 2),
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        pooler_dropout=_classifier_dropout(config),
        position_style="absolute",
        max_positions=config.get("max_position_embeddings", 512),
    )
    layout = family.transformers
    assert layout is not None  # family_of_transformers only finds families with a transformers layout
    try:
        layout.read_config(config, values)
    except CheckpointError as exc:
        raise CheckpointError(f"{path!r}: {exc}") from None
    return EncoderConfig(**values)


def key_map(cfg: EncoderConfig, architecture: str, *, base_prefix: str | None = None) -> dict[str, str]:
    """``{our key: transformers key}`` for every parameter of a model with ``cfg`` exported as
    ``architecture`` (e.g. ``BertForPreTraining``); heads included as the architecture says."""
    table = _layout(cfg.family)
    prefix = table.base_prefix if base_prefix is None else base_prefix
    modules: list[tuple[str, str]] = [(hf.format(p=prefix), ours) for hf, ours in table.modules]
    for i in range(cfg.encoder_layers):
        hf_layer = table.layer_prefix.format(p=prefix, i=0 if table.shared_layers else i)
        modules += [(hf_layer + hf, f"{_ENC}layers.{i}.{ours}") for hf, ours in table.layer]
    suffix = _suffix(architecture)
    with_lm_head = suffix in ("ForMaskedLM", "ForPreTraining") and bool(table.lm_head)
    if with_lm_head:
        modules += table.lm_head
    modules += table.task_heads.get(suffix, [])
    if suffix in _TOKEN_HEADS:
        modules.append(_TOKEN_HEADS[suffix])
    mapping = {f"{ours}.{kind}": f"{hf}.{kind}" for hf, ours in modules for kind in ("weight", "bias")}
    if with_lm_head:
        mapping["encoder.lm_head.bias"] = _lm_output_keys(table)[1]
    # Modules that take no bias, or that this config does not have, are dropped against the model.
    return mapping


def _lm_output_keys(table: TransformersLayout) -> tuple[str, str, str | None]:
    """transformers' keys of the LM output layer: ``(tied weight, bias, duplicate of the bias)``
    — BERT's ``cls.predictions.{decoder.weight, bias, decoder.bias}``, ModernBERT's
    ``decoder.{weight, bias}`` (no duplicate)."""
    if table.lm_output_layer:
        return f"{table.lm_decoder}.weight", f"{table.lm_decoder}.bias", None
    return f"{table.lm_decoder}.decoder.weight", f"{table.lm_decoder}.bias", f"{table.lm_decoder}.decoder.bias"


def _suffix(architecture: str) -> str:
    match = re.search(r"(For[A-Za-z]+)$", architecture)
    return match.group(1) if match else "Model"


def _build_model(family: Family, cfg: EncoderConfig, suffix: str, num_labels: int, keys: list[str]) -> RobertaModel:
    """The model ``architecture`` describes: the family's serving model for the keys the file
    fills, with the head the architecture's suffix names."""
    model = family.build_serving_model(cfg, keys)
    if suffix in ("ForPreTraining", "ForNextSentencePrediction") and family.sentence_head is not None:
        model.register_classification_head(family.sentence_head, 2)
    elif suffix == "ForSequenceClassification":
        model.register_classification_head(SEQUENCE_HEAD, num_labels)
    elif suffix == "ForTokenClassification":
        model.register_token_head(TOKEN_HEAD, num_labels)
    elif suffix == "ForQuestionAnswering":
        model.register_token_head(QA_HEAD, 2)
    return model


def load_transformers(directory: str | os.PathLike[str]) -> LoadedTransformers:
    """Rebuild our model (eval mode, CPU, float32) from a transformers directory.

    Strict: a tensor of the file that no parameter takes, or a parameter the file does not
    fill, is a :class:`CheckpointError` naming them — except a missing masked-LM head
    (``BertModel``, ``*ForSequenceClassification``), which leaves ``has_lm_head`` False.
    """
    d = Path(directory)
    config = _read_json(d / "config.json")
    architecture = (config.get("architectures") or [f"{str(config.get('model_type', '')).capitalize()}Model"])[0]
    cfg = config_from_transformers(config, path=str(d / "config.json"))
    family = get_family(cfg.family)
    table = _layout(cfg.family)
    tensors = {k: v for k, v in read_weights(d).items() if not _IGNORED.search(k)}
    base_prefix = table.base_prefix if any(k.startswith(table.base_prefix) for k in tensors) else ""

    segments_key = base_prefix + "embeddings.token_type_embeddings.weight"
    if (
        table.optional_segments
        and (segments := tensors.get(segments_key)) is not None
        and segments.shape[0] == 1
        and not segments.any()
    ):
        # transformers keeps one all-zero segment row for a family without segments; ours has none.
        cfg = cfg.replace(type_vocab_size=0)
        del tensors[segments_key]
    if not any(ours.startswith("pooler.") for _, ours in table.modules):
        # transformers' RobertaModel has a pooler (dense + tanh on <s>) that fairseq's RoBERTa
        # lacks and nothing here computes; every sentence-transformers RoBERTa folder holds one,
        # untrained. A family whose table maps no pooler leaves it out.
        tensors = {k: v for k, v in tensors.items() if not k.startswith(base_prefix + "pooler.")}
    cfg = cfg.replace(pooler=any(k.startswith(base_prefix + "pooler") for k in tensors))
    suffix = _suffix(architecture)
    mapping = key_map(cfg, architecture, base_prefix=base_prefix)
    filled = [ours for ours, hf in mapping.items() if hf in tensors]
    num_labels = int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)
    with torch.device("meta"):
        model = _build_model(family, cfg, suffix, num_labels, filled)
    expected = model.state_dict()
    mapping = {ours: hf for ours, hf in mapping.items() if ours in expected}
    state = {
        ours: tensors[hf].float() if tensors[hf].is_floating_point() else tensors[hf]
        for ours, hf in mapping.items()
        if hf in tensors
    }
    state[_ENC + "version"] = torch.Tensor([3])  # fairseq's format marker, not a weight
    used = {mapping[ours] for ours in state if ours in mapping}

    if not model.has_lm_head:  # no MLM head in the file: a freshly initialised one, flagged
        fresh = LMHead.for_config(cfg, torch.nn.Parameter(torch.empty(0)))
        fresh.apply(init_bert_params)
        state.update({f"encoder.lm_head.{k}": v for k, v in fresh.state_dict().items() if k != "weight"})
    embed_key = table.modules[0][0].format(p=base_prefix) + ".weight"
    decoder_w, bias, decoder_b = _lm_output_keys(table)
    for duplicate, original in ((decoder_w, embed_key), (decoder_b, bias)):
        if duplicate is not None and duplicate in tensors and original in tensors:
            if not torch.equal(tensors[duplicate], tensors[original]):
                raise CheckpointError(
                    f"{str(d)!r}: {duplicate} differs from {original}; untied output projections are not supported"
                )
            used.add(duplicate)
    load_state_strict(
        model, state, source=f"{d} ({architecture})", file_names=mapping, unused=sorted(set(tensors) - used)
    )
    if cfg.share_layers == "all":  # one module, assigned once per layer name: make sure it is one
        layers = model.transformer.layers
        assert all(layer is layers[0] for layer in layers)
    labels = None
    if config.get("id2label") and suffix in ("ForSequenceClassification", "ForTokenClassification"):
        id2label = {int(k): v for k, v in config["id2label"].items()}
        labels = [id2label[i] for i in range(len(id2label))]
    return LoadedTransformers(
        model=model.eval(),
        path=str(d),
        architecture=architecture,
        config=dict(config),
        labels=labels,
        has_lm_head=model.has_lm_head,
    )


# ------------------------------------------------------------------------------ writing

_ACTIVATION_NAMES = {"gelu": "gelu", "gelu_accurate": "gelu_new", "relu": "relu", "tanh": "tanh", "linear": "linear"}


def _has_heads_of(model: RobertaModel, architecture: str) -> bool:
    """Whether ``model`` has the heads ``architecture`` adds (and the pooler, where the family's
    transformers layout has one)."""
    table = _layout(model.cfg.family)
    ours = model.state_dict()
    needed = [f"{module}.weight" for _, module in table.task_heads.get(_suffix(architecture), [])]
    needed += [f"{module}.weight" for _, module in table.modules if module.startswith("pooler.")]
    return bool(needed) and all(key in ours for key in needed)


def default_architecture(model: RobertaModel) -> str:
    """The transformers class that carries what ``model`` has: ``*ForSequenceClassification``,
    ``*ForTokenClassification`` or ``*ForQuestionAnswering`` for a model with a head named
    :data:`SEQUENCE_HEAD`, :data:`TOKEN_HEAD` or :data:`QA_HEAD`; ``*ForPreTraining`` when the
    model has its family's pretraining head (BERT's NSP with the pooler, ALBERT's SOP, ELECTRA's
    discriminator head, which wins over the others); else ``*ForMaskedLM``."""
    family = get_family(model.cfg.family)
    prefix = _layout(model.cfg.family).class_prefix
    pretraining = _has_heads_of(model, prefix + "ForPreTraining")
    if pretraining and family.sentence_head is None:  # a pretraining head that is a module of its own
        return prefix + "ForPreTraining"
    if SEQUENCE_HEAD in model.classification_heads:
        return f"{prefix}ForSequenceClassification"
    for name, suffix in ((TOKEN_HEAD, "ForTokenClassification"), (QA_HEAD, "ForQuestionAnswering")):
        if name in model.token_heads:
            return prefix + suffix
    return prefix + ("ForPreTraining" if pretraining else "ForMaskedLM")


def transformers_config(model: RobertaModel, architecture: str, labels: list[str] | None = None) -> dict[str, Any]:
    """The ``config.json`` transformers needs to rebuild ``model`` as ``architecture``."""
    cfg = model.cfg
    table = _layout(cfg.family)
    family_cfg = get_family(cfg.family).preset("base")
    if (
        cfg.encoder_normalize_before != family_cfg.encoder_normalize_before
        or cfg.layernorm_embedding != family_cfg.layernorm_embedding
        or cfg.untie_weights
    ):
        if family_cfg.encoder_normalize_before:
            shape, other = f"transformers' {cfg.family} is pre-LN", "post-LN"
        else:
            shape, other = "transformers' BERT/RoBERTa/ALBERT are post-LN", "pre-LN"
        raise ValueError(
            f"{shape} with an embedding LayerNorm and a tied LM head; this model differs "
            f"({other}, no embedding LayerNorm or untied head)"
        )
    if not table.shared_layers and cfg.share_layers != "none":
        raise ValueError(
            f"transformers' {cfg.family} has no shared layers; this model has share_layers={cfg.share_layers!r}"
        )
    if not table.factorized_embeddings and cfg.embedding_size not in (None, cfg.encoder_embed_dim):
        raise ValueError(
            f"transformers' {cfg.family} has no factorized embeddings; this model's are {cfg.embedding_size} wide"
        )
    family_positions = family_cfg.position_style
    if cfg.position_style != family_positions:
        raise ValueError(
            f"transformers' {cfg.family} uses {family_positions} positions; this model has "
            f"position_style={cfg.position_style!r}"
        )
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": table.model_type,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.encoder_embed_dim,
        "num_hidden_layers": cfg.encoder_layers,
        "num_attention_heads": cfg.encoder_attention_heads,
        "intermediate_size": cfg.encoder_ffn_embed_dim,
        "hidden_act": _ACTIVATION_NAMES[cfg.activation_fn],
        "max_position_embeddings": cfg.num_position_embeddings,
        "type_vocab_size": max(cfg.type_vocab_size, 1),
        "layer_norm_eps": cfg.layer_norm_eps,
        "hidden_dropout_prob": cfg.dropout,
        "attention_probs_dropout_prob": cfg.attention_dropout,
        "pad_token_id": cfg.padding_idx,
        "position_embedding_type": "absolute",
        "tie_word_embeddings": True,
    }
    table.write_config(cfg, config)
    suffix = _suffix(architecture)
    if suffix in ("ForSequenceClassification", "ForTokenClassification"):
        heads, name = (
            (model.classification_heads, SEQUENCE_HEAD)
            if suffix == "ForSequenceClassification"
            else (model.token_heads, TOKEN_HEAD)
        )
        if name not in heads:
            raise ValueError(
                f"{architecture} needs the head {name!r}, which this model does not have "
                f"(its heads: {sorted(model.classification_heads) + sorted(model.token_heads)})"
            )
        num_labels = heads[name].num_classes
        assert isinstance(num_labels, int)  # every head's num_classes is an int property
        names = labels or [f"LABEL_{i}" for i in range(num_labels)]
        config.update(
            num_labels=num_labels,
            id2label={str(i): n for i, n in enumerate(names)},
            label2id={n: i for i, n in enumerate(names)},
        )
    return config


def transformers_state_dict(model: RobertaModel, architecture: str) -> dict[str, torch.Tensor]:
    """``model``'s weights under transformers' names for ``architecture`` (contiguous copies,
    one per transformers key: shared ALBERT layers appear once)."""
    ours = model.state_dict()
    mapping = key_map(model.cfg, architecture)
    heads = [  # a head's weights (a head may have no biases: ModernBERT's)
        k
        for k in mapping
        if k.startswith(("classification_heads.", "token_heads.")) and k.endswith(".weight") and k not in ours
    ]
    if heads:
        raise ValueError(
            f"{architecture} needs the head {heads[0].rsplit('.', 2)[0]!r}, which this model does not have"
        )
    # Shared ALBERT layers map several of our names onto one transformers name: one copy each.
    out = {hf: ours[key].detach().to("cpu").clone().contiguous() for key, hf in mapping.items() if key in ours}
    table = _layout(model.cfg.family)
    _, bias, duplicate_bias = _lm_output_keys(table)
    if _suffix(architecture) in ("ForMaskedLM", "ForPreTraining") and table.lm_head and duplicate_bias:
        out[duplicate_bias] = out[bias].clone()
    if table.optional_segments and model.cfg.type_vocab_size == 0:
        out[f"{table.base_prefix}embeddings.token_type_embeddings.weight"] = torch.zeros(1, model.cfg.encoder_embed_dim)
    return out


def save_transformers(
    model: RobertaModel,
    directory: str | os.PathLike[str],
    *,
    architecture: str | None = None,
    labels: list[str] | None = None,
    extra_files: Callable[[Path], None] | None = None,
    special_ids: dict[str, int] | None = None,
) -> Path:
    """Write ``model`` as a transformers directory (``config.json`` + ``model.safetensors``,
    and whatever ``extra_files(folder)`` writes: the hub adds the tokenizer's files).
    ``special_ids`` (``cls_token_id``, ``sep_token_id``, ...) go into ``config.json``: the model
    alone does not know its vocabulary's, and transformers' defaults (ModernBERT's 50281, ...)
    would name tokens another vocabulary lacks.

    The directory appears whole or not at all: files are written into a temporary sibling that
    is renamed into place (an existing non-empty ``directory`` is refused).

    >>> save_transformers(RobertaModel(preset("bert-tiny")), "bert-tiny-hf")  # doctest: +SKIP
    """
    from safetensors.torch import save_file

    architecture = architecture or default_architecture(model)
    config = {**transformers_config(model, architecture, labels), **(special_ids or {})}
    tensors = transformers_state_dict(model, architecture)
    with atomic_directory(directory) as staging:
        (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
        if extra_files is not None:
            extra_files(staging)
    return Path(directory)


__all__ = [
    "LoadedTransformers",
    "QA_HEAD",
    "SEQUENCE_HEAD",
    "TOKEN_HEAD",
    "config_from_transformers",
    "is_transformers_dir",
    "key_map",
    "load_transformers",
    "read_weights",
    "save_transformers",
    "transformers_config",
    "transformers_state_dict",
]
