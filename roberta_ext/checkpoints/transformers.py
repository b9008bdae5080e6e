"""transformers checkpoints <-> our models, for RoBERTa, BERT and ALBERT (ELECTRA: see
:data:`FAMILY_TABLES`), without importing transformers.

A transformers directory holds ``config.json``, the weights (``model.safetensors``, sharded
``model-0000N-of-0000M.safetensors`` with an index, or ``pytorch_model.bin``) and tokenizer files
(``vocab.txt``, ``spiece.model`` or ``vocab.json`` + ``merges.txt``). The translation between
its key names and ours is data — one table per family — and it is strict both ways: every
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
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import torch

from ..modeling import EncoderConfig, LMHead, RobertaModel
from ..modeling.encoder import init_bert_params
from ..modeling.albert import SENTENCE_ORDER_HEAD
from ..modeling.bert import NEXT_SENTENCE_HEAD
from .safe_load import CheckpointError, load_torch_file

SEQUENCE_HEAD = "classifier"
"""Our name for the head of a ``*ForSequenceClassification`` checkpoint."""
TOKEN_HEAD = "tagger"
"""Our name for the head of a ``*ForTokenClassification`` checkpoint."""
QA_HEAD = "qa"
"""Our name for the start/end head of a ``*ForQuestionAnswering`` checkpoint (a 2-label token head)."""

_ENC = "encoder.sentence_encoder."
_EMBEDDINGS = [  # transformers (under the base prefix) -> ours
    ("embeddings.word_embeddings", _ENC + "embed_tokens"),
    ("embeddings.position_embeddings", _ENC + "embed_positions"),
    ("embeddings.token_type_embeddings", _ENC + "segment_embeddings"),
    ("embeddings.LayerNorm", _ENC + "layernorm_embedding"),
]
_BERT_LAYER = [  # transformers "encoder.layer.{i}." + name -> ours "layers.{i}." + name
    ("attention.self.query", "self_attn.q_proj"),
    ("attention.self.key", "self_attn.k_proj"),
    ("attention.self.value", "self_attn.v_proj"),
    ("attention.output.dense", "self_attn.out_proj"),
    ("attention.output.LayerNorm", "self_attn_layer_norm"),
    ("intermediate.dense", "fc1"),
    ("output.dense", "fc2"),
    ("output.LayerNorm", "final_layer_norm"),
]
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


@dataclass(frozen=True)
class FamilyTable:
    """How one family's transformers checkpoints name things. Module names (``weight`` and
    ``bias`` are appended); ``{p}`` is the base model's prefix (``bert.``, or nothing for a bare
    ``BertModel``)."""

    model_type: str
    base_prefix: str
    layer_prefix: str  # with {i}
    layer: list[tuple[str, str]]
    modules: list[tuple[str, str]]  # outside the layers, in the base model or heads
    lm_head: list[tuple[str, str]]
    lm_decoder: str  # the tied output matrix (weight) and its duplicate bias
    sentence_heads: dict[str, list[tuple[str, str]]]  # architecture suffix -> modules
    shared_layers: bool = False


FAMILY_TABLES: dict[str, FamilyTable] = {
    "bert": FamilyTable(
        model_type="bert",
        base_prefix="bert.",
        layer_prefix="{p}encoder.layer.{i}.",
        layer=_BERT_LAYER,
        modules=[("{p}" + hf, ours) for hf, ours in _EMBEDDINGS] + [("{p}pooler.dense", "pooler.dense")],
        lm_head=[("cls.predictions.transform.dense", "encoder.lm_head.dense"),
                 ("cls.predictions.transform.LayerNorm", "encoder.lm_head.layer_norm")],
        lm_decoder="cls.predictions",
        sentence_heads={"ForPreTraining": [("cls.seq_relationship", f"classification_heads.{NEXT_SENTENCE_HEAD}.out_proj")],
                        "ForNextSentencePrediction": [("cls.seq_relationship",
                                                       f"classification_heads.{NEXT_SENTENCE_HEAD}.out_proj")],
                        "ForSequenceClassification": [("classifier", f"classification_heads.{SEQUENCE_HEAD}.out_proj")]},
    ),
    "roberta": FamilyTable(
        model_type="roberta",
        base_prefix="roberta.",
        layer_prefix="{p}encoder.layer.{i}.",
        layer=_BERT_LAYER,
        modules=[("{p}" + hf, ours) for hf, ours in _EMBEDDINGS],
        lm_head=[("lm_head.dense", "encoder.lm_head.dense"), ("lm_head.layer_norm", "encoder.lm_head.layer_norm")],
        lm_decoder="lm_head",
        sentence_heads={"ForSequenceClassification": [
            ("classifier.dense", f"classification_heads.{SEQUENCE_HEAD}.dense"),
            ("classifier.out_proj", f"classification_heads.{SEQUENCE_HEAD}.out_proj")]},
    ),
    "albert": FamilyTable(
        model_type="albert",
        base_prefix="albert.",
        layer_prefix="{p}encoder.albert_layer_groups.0.albert_layers.0.",
        layer=_ALBERT_LAYER,
        modules=[("{p}" + hf, ours) for hf, ours in _EMBEDDINGS]
        + [("{p}encoder.embedding_hidden_mapping_in", _ENC + "embed_proj"), ("{p}pooler", "pooler.dense")],
        lm_head=[("predictions.dense", "encoder.lm_head.dense"), ("predictions.LayerNorm", "encoder.lm_head.layer_norm")],
        lm_decoder="predictions",
        sentence_heads={"ForPreTraining": [("sop_classifier.classifier",
                                            f"classification_heads.{SENTENCE_ORDER_HEAD}.out_proj")],
                        "ForSequenceClassification": [("classifier", f"classification_heads.{SEQUENCE_HEAD}.out_proj")]},
        shared_layers=True,
    ),
    # ELECTRA's discriminator: BERT's layers without a pooler, embeddings projected when narrower
    # (ELECTRA-small); its replaced-token-detection head is our discriminator_head.
    "electra": FamilyTable(
        model_type="electra",
        base_prefix="electra.",
        layer_prefix="{p}encoder.layer.{i}.",
        layer=_BERT_LAYER,
        modules=[("{p}" + hf, ours) for hf, ours in _EMBEDDINGS] + [("{p}embeddings_project", _ENC + "embed_proj")],
        lm_head=[],
        lm_decoder="generator_lm_head",
        sentence_heads={"ForPreTraining": [("discriminator_predictions.dense", "discriminator_head.dense"),
                                           ("discriminator_predictions.dense_prediction",
                                            "discriminator_head.dense_prediction")],
                        "ForSequenceClassification": [
                            ("classifier.dense", f"classification_heads.{SEQUENCE_HEAD}.dense"),
                            ("classifier.out_proj", f"classification_heads.{SEQUENCE_HEAD}.out_proj")]},
    ),
}
_TOKEN_HEADS = {"ForTokenClassification": ("classifier", f"token_heads.{TOKEN_HEAD}.out_proj"),
                "ForQuestionAnswering": ("qa_outputs", f"token_heads.{QA_HEAD}.out_proj")}
# Buffers transformers keeps in some files; they hold no learned values.
_IGNORED = re.compile(r"(^|\.)(embeddings\.position_ids|embeddings\.token_type_ids)$")
_ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_accurate", "gelu_pytorch_tanh": "gelu_accurate",
                "gelu_fast": "gelu_accurate", "relu": "relu", "tanh": "tanh", "linear": "linear"}


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
        (p / name).is_file() for name in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin"))


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
        state = load_torch_file(d / "pytorch_model.bin")
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


def config_from_transformers(config: Mapping[str, Any], *, path: str = "config.json") -> EncoderConfig:
    """Our :class:`EncoderConfig` from a transformers ``config.json`` (BERT, RoBERTa, ALBERT, ELECTRA).

    >>> config_from_transformers({"model_type": "bert", "vocab_size": 100, "hidden_size": 32,
    ...     "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64}).family
    'bert'
    """
    model_type = config.get("model_type")
    if model_type not in FAMILY_TABLES:
        raise CheckpointError(f"{path!r}: model_type {model_type!r} is not supported; known: {sorted(FAMILY_TABLES)}")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise CheckpointError(f"{path!r}: position_embedding_type {config['position_embedding_type']!r} "
                              "is not supported (only 'absolute')")
    act = config.get("hidden_act", "gelu")
    if act not in _ACTIVATIONS:
        raise CheckpointError(f"{path!r}: hidden_act {act!r} is not supported; known: {sorted(_ACTIVATIONS)}")
    pad = config.get("pad_token_id", 1 if model_type == "roberta" else 0)
    positions = config.get("max_position_embeddings", 512)
    values: dict[str, Any] = dict(
        family=model_type,
        vocab_size=config["vocab_size"],
        padding_idx=pad,
        encoder_layers=config["num_hidden_layers"],
        encoder_embed_dim=config["hidden_size"],
        encoder_ffn_embed_dim=config["intermediate_size"],
        encoder_attention_heads=config["num_attention_heads"],
        activation_fn=_ACTIVATIONS[act],
        layer_norm_eps=config.get("layer_norm_eps", 1e-12),
        type_vocab_size=config.get("type_vocab_size", 2),
        dropout=config.get("hidden_dropout_prob", 0.1),
        attention_dropout=config.get("attention_probs_dropout_prob", 0.1),
        pooler_dropout=config.get("classifier_dropout") or config.get("classifier_dropout_prob")
        or config.get("hidden_dropout_prob", 0.1),
    )
    if model_type == "roberta":  # fairseq's positions: real tokens count from pad + 1
        values.update(position_style="fairseq", max_positions=positions - pad - 1)
    else:
        values.update(position_style="absolute", max_positions=positions)
    if model_type == "electra":  # embeddings narrower than the layers are projected (ELECTRA-small)
        size = config.get("embedding_size", config["hidden_size"])
        values.update(embedding_size=size if size != config["hidden_size"] else None, pooler_activation_fn="gelu",
                      activation_fn=_ACTIVATIONS[act])
    if model_type == "albert":
        if config.get("num_hidden_groups", 1) != 1 or config.get("inner_group_num", 1) != 1:
            raise CheckpointError(f"{path!r}: ALBERT with num_hidden_groups/inner_group_num other than 1 "
                                  "is not supported")
        values.update(embedding_size=config.get("embedding_size", 128), share_layers="all")
    return EncoderConfig(**values)


def key_map(cfg: EncoderConfig, architecture: str, *, base_prefix: str | None = None) -> dict[str, str]:
    """``{our key: transformers key}`` for every parameter of a model with ``cfg`` exported as
    ``architecture`` (e.g. ``BertForPreTraining``); heads included as the architecture says."""
    table = FAMILY_TABLES[cfg.family]
    prefix = table.base_prefix if base_prefix is None else base_prefix
    modules: list[tuple[str, str]] = [(hf.format(p=prefix), ours) for hf, ours in table.modules]
    for i in range(cfg.encoder_layers):
        hf_layer = table.layer_prefix.format(p=prefix, i=0 if table.shared_layers else i)
        modules += [(hf_layer + hf, f"{_ENC}layers.{i}.{ours}") for hf, ours in table.layer]
    suffix = _suffix(architecture)
    with_lm_head = suffix in ("ForMaskedLM", "ForPreTraining") and bool(table.lm_head)
    if with_lm_head:
        modules += table.lm_head
    modules += table.sentence_heads.get(suffix, [])
    if suffix in _TOKEN_HEADS:
        modules.append(_TOKEN_HEADS[suffix])
    mapping = {f"{ours}.{kind}": f"{hf}.{kind}" for hf, ours in modules for kind in ("weight", "bias")}
    if with_lm_head:
        mapping["encoder.lm_head.bias"] = f"{table.lm_decoder}.bias"
    # Modules that take no bias, or that this config does not have, are dropped against the model.
    return mapping


def _suffix(architecture: str) -> str:
    match = re.search(r"(For[A-Za-z]+)$", architecture)
    return match.group(1) if match else "Model"


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
    tensors = {k: v for k, v in read_weights(d).items() if not _IGNORED.search(k)}
    table = FAMILY_TABLES[cfg.family]
    base_prefix = table.base_prefix if any(k.startswith(table.base_prefix) for k in tensors) else ""

    embed_key = table.modules[0][0].format(p=base_prefix) + ".weight"
    if cfg.family == "roberta" and (segments := tensors.get(base_prefix + "embeddings.token_type_embeddings.weight")) \
            is not None and segments.shape[0] == 1 and not segments.any():
        # RoBERTa has no segments; transformers keeps one all-zero row: fairseq's layout has none.
        cfg = cfg.replace(type_vocab_size=0)
        del tensors[base_prefix + "embeddings.token_type_embeddings.weight"]
    cfg = cfg.replace(pooler=any(k.startswith(base_prefix + "pooler") for k in tensors) and cfg.family != "roberta")
    suffix = _suffix(architecture)
    with torch.device("meta"):
        model = RobertaModel(cfg)
        if suffix in table.sentence_heads or suffix in _TOKEN_HEADS:
            num = int(config.get("num_labels") or len(config.get("id2label") or {}) or 2)
            if cfg.family == "electra" and suffix == "ForPreTraining":
                from ..modeling.electra import add_discriminator_head

                add_discriminator_head(model)
            elif suffix == "ForPreTraining" or suffix == "ForNextSentencePrediction":
                model.register_classification_head(NEXT_SENTENCE_HEAD if cfg.family == "bert" else SENTENCE_ORDER_HEAD, 2)
            elif suffix == "ForSequenceClassification":
                model.register_classification_head(SEQUENCE_HEAD, num)
            elif suffix == "ForTokenClassification":
                model.register_token_head(TOKEN_HEAD, num)
            else:
                model.register_token_head(QA_HEAD, 2)

    expected = model.state_dict()
    mapping = {ours: hf for ours, hf in key_map(cfg, architecture, base_prefix=base_prefix).items() if ours in expected}
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    missing = []
    for ours in expected:
        if ours == "encoder.lm_head.weight" and not cfg.untie_weights:
            continue  # tied to the embeddings; checked below
        if ours == _ENC + "version":  # fairseq's format marker, not a weight
            state[ours] = torch.Tensor([3])
            continue
        hf = mapping.get(ours)
        if hf is None or hf not in tensors:
            missing.append(f"{ours} <- {hf}")
            continue
        state[ours] = tensors[hf].float() if tensors[hf].is_floating_point() else tensors[hf]
        used.add(hf)
    lm_keys = [k for k in expected if k.startswith("encoder.lm_head.")]
    has_lm_head = all(k in state for k in lm_keys if k != "encoder.lm_head.weight")
    if not has_lm_head and all(k not in state for k in lm_keys):
        missing = [m for m in missing if not m.startswith("encoder.lm_head.")]
    decoder_w, decoder_b = f"{table.lm_decoder}.decoder.weight", f"{table.lm_decoder}.decoder.bias"
    for duplicate, original in ((decoder_w, embed_key), (decoder_b, f"{table.lm_decoder}.bias")):
        if duplicate in tensors and original in tensors:
            if not torch.equal(tensors[duplicate], tensors[original]):
                raise CheckpointError(f"{str(d)!r}: {duplicate} differs from {original}; untied output "
                                      "projections are not supported")
            used.add(duplicate)
    unused = sorted(set(tensors) - used)
    if missing or unused:
        raise CheckpointError(
            f"{str(d)!r} ({architecture}) does not match our {cfg.family} model: "
            f"parameters not in the file {missing[:6]}{' ...' if len(missing) > 6 else ''}, "
            f"tensors of the file nothing takes {unused[:6]}{' ...' if len(unused) > 6 else ''}")
    for key, tensor in state.items():
        if tensor.shape != expected[key].shape:
            raise CheckpointError(f"{str(d)!r}: {mapping[key]} has shape {tuple(tensor.shape)}, "
                                  f"our {key} expects {tuple(expected[key].shape)}")
    if not has_lm_head:  # no MLM head in the file: a freshly initialised one, flagged
        fresh = LMHead(cfg.embed_dim, cfg.vocab_size, cfg.activation_fn, weight=torch.nn.Parameter(torch.empty(0)),
                       input_dim=cfg.encoder_embed_dim, layer_norm_eps=cfg.layer_norm_eps)
        fresh.apply(init_bert_params)
        state.update({f"encoder.lm_head.{k}": v for k, v in fresh.state_dict().items() if k != "weight"})
    state["encoder.lm_head.weight"] = state[_ENC + "embed_tokens.weight"]
    model.load_state_dict(state, strict=True, assign=True)
    model.encoder.lm_head.weight = model.encoder.sentence_encoder.embed_tokens.weight
    if cfg.share_layers == "all":  # one module, assigned once per layer name: make sure it is one
        layers = model.encoder.sentence_encoder.layers
        assert all(layer is layers[0] for layer in layers)
    labels = None
    if config.get("id2label") and suffix in ("ForSequenceClassification", "ForTokenClassification"):
        id2label = {int(k): v for k, v in config["id2label"].items()}
        labels = [id2label[i] for i in range(len(id2label))]
    return LoadedTransformers(model=model.eval(), path=str(d), architecture=architecture, config=dict(config),
                              labels=labels, has_lm_head=has_lm_head)


# ------------------------------------------------------------------------------ writing

_ARCH_PREFIX = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert", "electra": "Electra"}
_ACTIVATION_NAMES = {"gelu": "gelu", "gelu_accurate": "gelu_new", "relu": "relu", "tanh": "tanh", "linear": "linear"}


def default_architecture(model: RobertaModel) -> str:
    """The transformers class that carries what ``model`` has: ``*ForSequenceClassification``,
    ``*ForTokenClassification`` or ``*ForQuestionAnswering`` for a model with a head named
    :data:`SEQUENCE_HEAD`, :data:`TOKEN_HEAD` or :data:`QA_HEAD`; ``BertForPreTraining`` when a
    BERT has its NSP head (ALBERT: SOP); else ``*ForMaskedLM``."""
    family = _ARCH_PREFIX[model.cfg.family]
    if model.cfg.family == "electra" and hasattr(model, "discriminator_head"):
        return "ElectraForPreTraining"
    if SEQUENCE_HEAD in model.classification_heads:
        return f"{family}ForSequenceClassification"
    for name, suffix in ((TOKEN_HEAD, "ForTokenClassification"), (QA_HEAD, "ForQuestionAnswering")):
        if name in model.token_heads:
            return family + suffix
    sentence_head = {"bert": NEXT_SENTENCE_HEAD, "albert": SENTENCE_ORDER_HEAD}.get(model.cfg.family)
    if sentence_head in model.classification_heads and model.pooler is not None:
        return f"{family}ForPreTraining"
    return f"{family}ForMaskedLM"


def transformers_config(model: RobertaModel, architecture: str, labels: list[str] | None = None) -> dict[str, Any]:
    """The ``config.json`` transformers needs to rebuild ``model`` as ``architecture``."""
    cfg = model.cfg
    if cfg.family not in FAMILY_TABLES:
        raise ValueError(f"exporting family {cfg.family!r} to transformers is not supported; "
                         f"supported: {sorted(FAMILY_TABLES)}")
    if cfg.encoder_normalize_before or not cfg.layernorm_embedding or cfg.untie_weights:
        raise ValueError("transformers' BERT/RoBERTa/ALBERT are post-LN with an embedding LayerNorm and a tied "
                         "LM head; this model differs (pre-LN, no embedding LayerNorm or untied head)")
    if cfg.family == "albert" and cfg.share_layers != "all":
        raise ValueError(f"transformers' ALBERT shares all layers; this model has share_layers={cfg.share_layers!r}")
    if cfg.family not in ("albert", "electra") and (
            cfg.share_layers != "none" or cfg.embedding_size not in (None, cfg.encoder_embed_dim)):
        raise ValueError(f"transformers' {cfg.family} has neither shared layers nor factorized embeddings")
    fairseq_positions = cfg.position_style == "fairseq"
    if fairseq_positions != (cfg.family == "roberta"):
        raise ValueError(f"transformers' {cfg.family} uses {'fairseq' if cfg.family == 'roberta' else 'absolute'} "
                         f"positions; this model has position_style={cfg.position_style!r}")
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": cfg.family,
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
    if cfg.family == "roberta":
        config.update(bos_token_id=0, eos_token_id=2)
    if cfg.family == "albert":
        config.update(embedding_size=cfg.embed_dim, num_hidden_groups=1, inner_group_num=1,
                      classifier_dropout_prob=cfg.pooler_dropout)
    if cfg.family == "electra":
        config.update(embedding_size=cfg.embed_dim)
    suffix = _suffix(architecture)
    if suffix in ("ForSequenceClassification", "ForTokenClassification"):
        heads, name = ((model.classification_heads, SEQUENCE_HEAD) if suffix == "ForSequenceClassification"
                       else (model.token_heads, TOKEN_HEAD))
        if name not in heads:
            raise ValueError(f"{architecture} needs the head {name!r}, which this model does not have "
                             f"(its heads: {sorted(model.classification_heads) + sorted(model.token_heads)})")
        head = heads[name]
        names = labels or [f"LABEL_{i}" for i in range(head.num_classes)]
        config.update(num_labels=head.num_classes, id2label={str(i): n for i, n in enumerate(names)},
                      label2id={n: i for i, n in enumerate(names)})
    return config


def transformers_state_dict(model: RobertaModel, architecture: str) -> dict[str, torch.Tensor]:
    """``model``'s weights under transformers' names for ``architecture`` (contiguous copies,
    one per transformers key: shared ALBERT layers appear once)."""
    ours = model.state_dict()
    mapping = key_map(model.cfg, architecture)
    heads = [k for k in mapping if k.startswith(("classification_heads.", "token_heads.")) and k not in ours]
    if heads:
        raise ValueError(f"{architecture} needs the head {heads[0].rsplit('.', 2)[0]!r}, which this model does not have")
    # Shared ALBERT layers map several of our names onto one transformers name: one copy each.
    out = {hf: ours[key].detach().to("cpu").clone().contiguous() for key, hf in mapping.items() if key in ours}
    table = FAMILY_TABLES[model.cfg.family]
    if _suffix(architecture) in ("ForMaskedLM", "ForPreTraining") and table.lm_head:
        out[f"{table.lm_decoder}.decoder.bias"] = out[f"{table.lm_decoder}.bias"].clone()
    if model.cfg.family == "roberta" and model.cfg.type_vocab_size == 0:
        out[f"{table.base_prefix}embeddings.token_type_embeddings.weight"] = torch.zeros(1, model.cfg.encoder_embed_dim)
    return out


def save_transformers(
    model: RobertaModel, directory: str | os.PathLike[str], *, architecture: str | None = None,
    labels: list[str] | None = None,
) -> Path:
    """Write ``model`` as a transformers directory (``config.json`` + ``model.safetensors``).

    The directory appears whole or not at all: files are written into a temporary sibling that
    is renamed into place (an existing non-empty ``directory`` is refused). Tokenizer files are
    the caller's (the hub's ``save_transformers`` adds them).

    >>> save_transformers(RobertaModel(EncoderConfig.preset("bert-tiny")), "bert-tiny-hf")  # doctest: +SKIP
    """
    from safetensors.torch import save_file

    architecture = architecture or default_architecture(model)
    config = transformers_config(model, architecture, labels)
    tensors = transformers_state_dict(model, architecture)
    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise FileExistsError(f"{str(target)!r} exists and is not an empty directory; refusing to overwrite it")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        (staging / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
        if target.exists():
            target.rmdir()
        os.replace(staging, target)
    except BaseException:
        for child in staging.iterdir():
            child.unlink()
        staging.rmdir()
        raise
    return target


__all__ = [
    "FAMILY_TABLES",
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
