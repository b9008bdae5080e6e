"""fairseq RoBERTa checkpoints -> :class:`~roberta_ext.modeling.RobertaModel`.

Three layouts exist in the wild, and all load here:

* modern (fairseq >= 0.10): options under ``cfg["model"]``, keys ``encoder.sentence_encoder.*``;
* older: options in an ``args`` Namespace, same keys;
* the 2019 release files (``roberta.base``, ``roberta.large``, ``roberta.large.mnli``): keys under
  ``decoder.``, ``emb_layer_norm`` for the embedding LayerNorm, and each attention's q, k and v
  projections stacked into one ``in_proj_weight``/``in_proj_bias`` (in that order).

The upgrade from old keys to ours is data — :data:`KEY_RENAMES` and :data:`FUSED_QKV` — and
loading is strict: every key of the file must be used and every shape must match.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..atomic import atomic_path
from ..families import get_family, preset
from ..modeling import ENCODER_PREFIX, EncoderConfig, RobertaModel
from ..modeling.config import CHECKPOINT_OPTIONS, FAIRSEQ_NAMES
from .errors import CheckpointError
from .safe_load import load_checkpoint_file
from .state import drop_pretraining_modules, load_state_strict

# (pattern, replacement) applied in order to every key of an old state dict.
KEY_RENAMES: list[tuple[str, str]] = [
    (r"^decoder\.", "encoder."),  # 2019 files called the encoder "decoder"
    (r"\.emb_layer_norm\.", ".layernorm_embedding."),
    (r"\.layer_norms\.0\.", ".self_attn_layer_norm."),  # fairseq < 0.6 layer norm names
    (r"\.layer_norms\.1\.", ".final_layer_norm."),
]
# A fused projection is split into these, in the order they are stacked along dim 0.
FUSED_QKV: tuple[str, str, str] = ("q_proj", "k_proj", "v_proj")
# Keys of the file that carry no weights we need.
IGNORED_KEYS: tuple[str, ...] = (ENCODER_PREFIX + "embed_positions._float_tensor",)
_HEAD_KEY = re.compile(r"^(classification_heads|token_heads)\.([^.]+)\.(dense|out_proj)\.weight$")


@dataclass
class LoadedCheckpoint:
    """A model rebuilt from a checkpoint, with what the file said about it."""

    model: RobertaModel
    path: str
    options: dict[str, Any] = field(default_factory=dict)
    """The model options of the file (``cfg["model"]`` or ``vars(args)``)."""
    task: dict[str, Any] = field(default_factory=dict)
    """The task options of the file (e.g. ``{"_name": "sentence_prediction", ...}``)."""
    bpe: dict[str, Any] = field(default_factory=dict)
    """The tokenizer options the model was trained with (``cfg["bpe"]``: ``{"_name": "gpt2",
    "gpt2_encoder_json": ..., ...}``), empty when the file names none."""


def upgrade_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rewrite any known older layout into today's key names.

    >>> sd = {"decoder.sentence_encoder.layers.0.self_attn.in_proj_weight": torch.arange(6.0)[:, None]}
    >>> for key, tensor in sorted(upgrade_state_dict(sd).items()):
    ...     print(key, tensor.flatten().tolist())
    encoder.sentence_encoder.layers.0.self_attn.k_proj.weight [2.0, 3.0]
    encoder.sentence_encoder.layers.0.self_attn.q_proj.weight [0.0, 1.0]
    encoder.sentence_encoder.layers.0.self_attn.v_proj.weight [4.0, 5.0]
    encoder.sentence_encoder.version [3.0]
    """
    upgraded: dict[str, torch.Tensor] = {}
    for key, tensor in state_dict.items():
        for pattern, replacement in KEY_RENAMES:
            key = re.sub(pattern, replacement, key)
        fused = re.match(r"^(.*\.self_attn\.)in_proj_(weight|bias)$", key)
        if fused:
            prefix, kind = fused.groups()
            for name, part in zip(FUSED_QKV, tensor.chunk(3, dim=0)):
                upgraded[f"{prefix}{name}.{kind}"] = part
        elif key not in IGNORED_KEYS:
            upgraded[key] = tensor
    upgraded.setdefault(ENCODER_PREFIX + "version", torch.Tensor([3]))
    return upgraded


def model_options(state: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(model options, task options) from a loaded checkpoint's ``cfg`` or ``args``."""
    cfg = state.get("cfg")
    if isinstance(cfg, dict) and cfg.get("model") is not None:
        return dict(cfg["model"]), dict(cfg.get("task") or {})
    args = state.get("args")
    if isinstance(args, dict):
        return dict(args), {"_name": args.get("task")}
    return {}, {}


BPE_OPTIONS = ("gpt2_encoder_json", "gpt2_vocab_bpe", "bpe_vocab_file", "bpe_cased", "sentencepiece_model")
"""The tokenizer options of fairseq's ``--bpe gpt2|bert|sentencepiece`` that a hub can use."""


def bpe_options(state: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--bpe`` options a checkpoint was trained with: ``cfg["bpe"]`` (fairseq >= 0.10), or
    the ``bpe`` name and its options in an ``args`` Namespace; ``{}`` when it names none.

    >>> bpe_options({"cfg": {"model": {}, "bpe": {"_name": "gpt2", "gpt2_encoder_json": "bpe/encoder.json"}}})
    {'_name': 'gpt2', 'gpt2_encoder_json': 'bpe/encoder.json'}
    >>> bpe_options({"args": {"bpe": None, "gpt2_encoder_json": "x"}})
    {}
    """
    cfg = state.get("cfg")
    if isinstance(cfg, dict) and "model" in cfg:
        found = cfg.get("bpe")
        return {str(k): v for k, v in dict(found).items()} if isinstance(found, Mapping) and found.get("_name") else {}
    args = state.get("args")
    if isinstance(args, dict) and args.get("bpe"):
        return {"_name": args["bpe"], **{k: args[k] for k in BPE_OPTIONS if args.get(k) is not None}}
    return {}


def config_from_fairseq(options: Mapping[str, Any], **overrides: Any) -> EncoderConfig:
    """Our config from fairseq's model options (``args`` as a dict or ``cfg["model"]``), on top
    of the RoBERTa preset the architecture names (``large`` in its name, else ``base``).

    Unknown options are ignored; fairseq's names that differ from ours are mapped. Only options
    a checkpoint records are read: the attention strategy is the reader's choice, not the file's.

    >>> config_from_fairseq({"arch": "roberta_large", "encoder_layers": 24}).encoder_embed_dim
    1024
    """
    arch = options.get("arch") or options.get("_name") or ""
    renames = {fairseq: ours for ours, fairseq in FAIRSEQ_NAMES.items() if fairseq != ours}
    renames["encoder_layernorm_embedding"] = "layernorm_embedding"  # fairseq's transformer encoder's name
    names = {*CHECKPOINT_OPTIONS, "vocab_size"}
    values: dict[str, Any] = {}
    for key, value in options.items():
        key = renames.get(key, key)
        if key in names and value is not None:
            values[key] = value
    values.update(overrides)
    return preset("large" if "large" in str(arch) else "base", **values)


def config_from_checkpoint(
    state_dict: Mapping[str, torch.Tensor], options: Mapping[str, Any], path: str
) -> EncoderConfig:
    """An :class:`EncoderConfig` with the options of the file and the shapes of its tensors.

    Shapes come from the tensors (they cannot lie); what tensors cannot tell — the number of
    heads, activations, dropout — comes from the options.
    """
    prefix = ENCODER_PREFIX
    rotary = options.get("position_style") == "rotary"  # no position table: the options say how far it reaches
    try:
        vocab_size, embedding_size = state_dict[prefix + "embed_tokens.weight"].shape
        if rotary:
            num_positions = int(options["max_positions"])
        else:
            num_positions = state_dict[prefix + "embed_positions.weight"].shape[0]
        # fc2 is (C, F) in every family; fc1 is (2F, C) where the FFN is gated (ModernBERT's GeGLU).
        embed_dim, ffn_dim = state_dict[prefix + "layers.0.fc2.weight"].shape
    except KeyError as exc:
        raise CheckpointError(f"{path!r} is not a RoBERTa checkpoint: it has no {exc.args[0]!r}") from None
    layer_ids = {int(m.group(1)) for k in state_dict if (m := re.match(re.escape(prefix) + r"layers\.(\d+)\.", k))}
    padding_idx = int(options.get("padding_idx", 1) if options.get("padding_idx") is not None else 1)
    absolute = rotary or options.get("position_style") == "absolute"
    segments = state_dict.get(prefix + "segment_embeddings.weight")
    try:
        return config_from_fairseq(
            options,
            vocab_size=vocab_size,
            encoder_embed_dim=embed_dim,
            embedding_size=embedding_size if embedding_size != embed_dim else None,
            encoder_ffn_embed_dim=ffn_dim,
            encoder_layers=len(layer_ids),
            max_positions=num_positions if absolute else num_positions - padding_idx - 1,
            padding_idx=padding_idx,
            type_vocab_size=0 if segments is None else segments.shape[0],
            pooler="pooler.dense.weight" in state_dict,
            # Structure is read from the keys rather than trusted from the options: 2019 files
            # say nothing about these, and a pre-LN stack is the one with a final LayerNorm.
            encoder_normalize_before=prefix + "layer_norm.weight" in state_dict,
            layernorm_embedding=prefix + "layernorm_embedding.weight" in state_dict,
        )
    except (ValueError, TypeError) as exc:
        raise CheckpointError(f"{path!r} has model options we cannot use: {exc}") from None


def load_roberta_checkpoint(path: str | os.PathLike[str]) -> LoadedCheckpoint:
    """Rebuild a :class:`RobertaModel` (in eval mode, on the CPU) from a fairseq checkpoint,
    classification heads included.

    >>> loaded = load_roberta_checkpoint("roberta.large.mnli/model.pt")  # doctest: +SKIP
    >>> list(loaded.model.classification_heads)                           # doctest: +SKIP
    ['mnli']
    """
    path = os.fspath(path)
    state = load_checkpoint_file(path)
    options, task = model_options(state)
    # fairseq's hub copies weights into a float32 model; do the same for files saved in fp16.
    state_dict = {k: v.float() if v.is_floating_point() else v for k, v in upgrade_state_dict(state["model"]).items()}
    cfg = config_from_checkpoint(state_dict, options, path)
    with torch.device("meta"):
        # The family decides the model that serves this file (ELECTRA: with its discriminator
        # head when the file has one); pretraining-only modules the model lacks are dropped.
        model = get_family(cfg.family).build_serving_model(cfg, state_dict.keys())
        drop_pretraining_modules(model, state_dict)
        heads = _heads(state_dict)
        for name, (num_classes, inner_dim) in heads["classification_heads"].items():
            model.register_classification_head(name, num_classes=num_classes, inner_dim=inner_dim)
        for name, (num_labels, _) in heads["token_heads"].items():
            model.register_token_head(name, num_labels=num_labels)
    load_state_strict(model, state_dict, source=path)
    return LoadedCheckpoint(model=model.eval(), path=path, options=options, task=task, bpe=bpe_options(state))


def _heads(state_dict: Mapping[str, torch.Tensor]) -> dict[str, dict[str, tuple[int, int | None]]]:
    """``{"classification_heads": {name: (num_classes, inner_dim)}, "token_heads": {...}}`` as
    the file's tensors say; ``inner_dim`` is None for heads without a dense layer."""
    found: dict[str, dict[str, dict[str, int]]] = {"classification_heads": {}, "token_heads": {}}
    for key, tensor in state_dict.items():
        match = _HEAD_KEY.match(key)
        if match:
            kind, name, part = match.groups()
            found[kind].setdefault(name, {})[part] = tensor.shape[0]
    return {
        kind: {name: (dims["out_proj"], dims.get("dense")) for name, dims in heads.items() if "out_proj" in dims}
        for kind, heads in found.items()
    }


def save_roberta_checkpoint(
    model: RobertaModel, path: str | os.PathLike[str], *, task: Mapping[str, Any] | None = None
) -> None:
    """Write ``model`` as a fairseq-layout checkpoint (``cfg`` + ``model``), atomically: the
    file appears whole under its name or not at all.

    >>> save_roberta_checkpoint(RobertaModel(preset("tiny")), "/tmp/tiny.pt")  # doctest: +SKIP
    """
    cfg = model.cfg
    options = {
        "_name": "roberta_ext",
        "arch": "roberta_ext",
        **{FAIRSEQ_NAMES[name]: getattr(cfg, name) for name in CHECKPOINT_OPTIONS},
    }
    state = {
        "args": None,
        "cfg": {"model": options, "task": dict(task or {"_name": "masked_lm"})},
        "model": model.state_dict(),
        # fairseq's loader reads the last entry of this history, so an empty one breaks it.
        "optimizer_history": [
            {
                "criterion_name": "MaskedLmLoss",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": None},
                "num_updates": 0,
            }
        ],
        "extra_state": {},
    }
    with atomic_path(path) as temporary:
        torch.save(state, temporary)
