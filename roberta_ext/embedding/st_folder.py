"""Reading a sentence-transformers model folder: where its transformers model is, and how it pools.

A folder that ``SentenceTransformer.save()`` writes holds ``modules.json``, listing its modules
in order: a ``Transformer`` (a transformers model folder: at the folder's root, ``"path": ""``,
or in a subfolder such as ``0_Transformer``), a ``Pooling`` (``1_Pooling/config.json``) and
optionally a ``Normalize``. Around them:

* ``sentence_bert_config.json`` (in the transformer's folder): ``max_seq_length`` and
  ``do_lower_case`` (sentence-transformers 2-5). Version 6 writes the length into
  ``tokenizer_config.json``'s ``model_max_length`` instead (without either, the length is the
  tokenizer's, capped at ``max_position_embeddings``, as sentence-transformers caps it). It
  writes ``do_lower_case`` only as a ``Lowercase`` step of ``tokenizer.json``'s normalizer, which
  transformers 5 does not read back (its ``BertTokenizer`` rebuilds the normalizer from
  ``tokenizer_config.json``): a reloaded ``SentenceTransformer`` does not lowercase, and neither
  does the hub;
* ``1_Pooling/config.json``: ``pooling_mode`` (a mode or a list of modes) and ``include_prompt``,
  or the older ``pooling_mode_cls_token``/``pooling_mode_mean_tokens``/... flags;
* ``config_sentence_transformers.json``: ``prompts``, ``default_prompt_name``,
  ``similarity_fn_name`` and ``truncate_dim`` (a Matryoshka model's shorter embeddings:
  the first ``truncate_dim`` values, cut after the ``Normalize``).

Only sentence-transformers' own modules are read, by the ``type`` that names their class
(:data:`MODULE_TYPES`): sentence-transformers imports and runs the class a ``type`` names, so
``evilpkg.Normalize`` is *that package's* code, whatever its last name says. Other modules
(``Dense``, ``LayerNorm``, routers, another package's ``Pooling``, ...) are refused with an error
naming ``modules.json``, the module and its type: an embedding without them, or with our
``Pooling`` in place of theirs, would be silently different.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..checkpoints import CheckpointError
from .pooling import SIMILARITIES, SentenceEmbedding, check_modes, check_truncate_dim

__all__ = ["MODULE_TYPES", "is_sentence_transformers_dir", "read_sentence_transformers"]

MODULES = "modules.json"
KINDS = ("Transformer", "Pooling", "Normalize")
"""The modules roberta_ext reproduces."""

OLD_TRANSFORMER_TYPES = {
    f"sentence_transformers.models.{name}": "Transformer" for name in ("BERT", "RoBERTa", "XLMRoBERTa", "ALBERT")
}
"""sentence-transformers 0.x's model-specific modules (``models/BERT.py``, ...): a transformers model, as
``Transformer`` holds it. sentence-transformers 6 no longer has them (nor loads such folders)."""

MODULE_TYPES: dict[str, str] = {
    # Before 6, sentence-transformers wrote the module's path (models/Transformer.py, ...); 6 still loads it.
    **{f"sentence_transformers.models.{kind}": kind for kind in KINDS},
    **OLD_TRANSFORMER_TYPES,
    # 6 writes the class's module and name.
    "sentence_transformers.base.modules.transformer.Transformer": "Transformer",
    "sentence_transformers.sentence_transformer.modules.pooling.Pooling": "Pooling",
    "sentence_transformers.base.modules.normalize.Normalize": "Normalize",
    # Normalize's module before 6 (6 maps it to the new one).
    "sentence_transformers.sentence_transformer.modules.normalize.Normalize": "Normalize",
    # The other spellings sentence-transformers 6 resolves to these classes: the packages that
    # export them, and the old module paths followed by the class name.
    **{f"sentence_transformers.models.{kind}.{kind}": kind for kind in KINDS},
    **{f"sentence_transformers.sentence_transformer.modules.{kind}": kind for kind in KINDS},
    "sentence_transformers.base.modules.Transformer": "Transformer",
    "sentence_transformers.base.modules.Normalize": "Normalize",
}
"""``modules.json`` types that are sentence-transformers' own Transformer, Pooling or Normalize, and
which. Every other type is refused: sentence-transformers would import and run the class it names.
The tests check that sentence-transformers resolves each (0.x's aside) to its own class of that kind."""

# Older Pooling configs name their modes with one flag each, concatenated in this order.
LEGACY_POOLING_FLAGS = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def is_sentence_transformers_dir(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a sentence-transformers model folder (it has ``modules.json``).

    >>> is_sentence_transformers_dir("/nonexistent")
    False
    """
    return (Path(path) / MODULES).is_file()


def _read_json(path: Path, *, required: bool = True) -> Any:
    if not path.is_file():
        if required:
            raise CheckpointError(f"{str(path)!r} is missing")
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{str(path)!r} is not valid JSON ({exc})") from None


def _module_kind(modules_path: Path, entry: dict[str, Any]) -> str:
    """``Transformer``, ``Pooling`` or ``Normalize``: which of sentence-transformers' own modules
    the entry's ``type`` names; :class:`CheckpointError` naming the entry and its type for any other."""
    type_name = entry.get("type")
    kind = MODULE_TYPES.get(type_name) if isinstance(type_name, str) else None
    if kind is not None:
        return kind
    problem = f"{str(modules_path)!r}: module {entry.get('name', entry.get('idx'))!r} has type {type_name!r}"
    class_name = str(type_name).rsplit(".", 1)[-1]
    if class_name in KINDS:
        problem += (
            f", not sentence-transformers' own {class_name} ('sentence_transformers.models.{class_name}'): "
            "sentence-transformers would import and run the class it names"
        )
    raise CheckpointError(
        f"{problem}; roberta_ext reproduces sentence-transformers' own Transformer, Pooling and Normalize modules only"
    )


def read_sentence_transformers(folder: str | os.PathLike[str]) -> tuple[Path, SentenceEmbedding]:
    """The transformers model folder inside a sentence-transformers folder, and how that folder
    turns token features into a sentence embedding. Raises :class:`CheckpointError` naming the
    file for a folder it cannot reproduce (an unsupported module, an unknown pooling mode).

    >>> transformer_dir, settings = read_sentence_transformers("all-MiniLM-L6-v2")  # doctest: +SKIP
    >>> settings.pooling, settings.normalize, settings.max_length                    # doctest: +SKIP
    (('mean',), True, 256)
    """
    root = Path(folder)
    modules_path = root / MODULES
    modules = _read_json(modules_path)
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise CheckpointError(f"{str(modules_path)!r}: expected a list of modules")
    modules = sorted(modules, key=lambda m: int(m.get("idx", 0)))
    kinds = [_module_kind(modules_path, m) for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
        raise CheckpointError(
            f"{str(modules_path)!r}: the modules are {kinds}; roberta_ext reproduces a Transformer followed by a "
            "Pooling (and optionally a Normalize)"
        )
    transformer_dir = root / str(modules[0].get("path", ""))
    pooling_dir = root / str(modules[1].get("path", ""))
    if kinds[-1] == "Normalize":
        normalize_config = _read_json(root / str(modules[2].get("path", "")) / "config.json", required=False)
        if normalize_config.get("module_input_name", "sentence_embedding") != "sentence_embedding":
            raise CheckpointError(
                f"{str(root / str(modules[2].get('path', '')))!r}: a Normalize of "
                f"{normalize_config['module_input_name']!r} is not supported (only of the sentence embedding)"
            )

    pooling_path = pooling_dir / "config.json"
    pooling_config = _read_json(pooling_path)
    modes: Any = pooling_config.get("pooling_mode")
    if modes is None:
        modes = [mode for flag, mode in LEGACY_POOLING_FLAGS.items() if pooling_config.get(flag)] or ["mean"]
    try:
        pooling = check_modes(modes, str(pooling_path))
    except ValueError as error:
        raise CheckpointError(str(error)) from None

    bert_config = _read_json(transformer_dir / "sentence_bert_config.json", required=False)
    max_length = bert_config.get("max_seq_length")
    if max_length is None:
        # sentence-transformers 6 keeps it in the tokenizer's config; it caps the tokenizer's
        # length at the model's position table (transformers' 514 for RoBERTa: the hub caps at
        # its own max_positions() as well).
        tokenizer_length = _read_json(transformer_dir / "tokenizer_config.json", required=False).get("model_max_length")
        positions = _read_json(transformer_dir / "config.json", required=False).get("max_position_embeddings")
        known = [int(n) for n in (tokenizer_length, positions) if isinstance(n, (int, float)) and 0 < n < 1 << 40]
        max_length = min(known) if known else None

    settings = SentenceEmbedding(
        pooling=pooling,
        normalize=kinds[-1] == "Normalize",
        include_prompt=bool(pooling_config.get("include_prompt", True)),
        max_length=None if max_length is None else int(max_length),
        do_lower_case=bool(bert_config.get("do_lower_case", False)),
        **_model_settings(root / "config_sentence_transformers.json"),
    )
    dimension = pooling_config.get("embedding_dimension", pooling_config.get("word_embedding_dimension"))
    _check_dimension(dimension, transformer_dir, pooling_path)
    return transformer_dir, settings


def _model_settings(path: Path) -> dict[str, Any]:
    """What ``config_sentence_transformers.json`` (at ``path``, optional) says of the whole model:
    ``prompts``, ``default_prompt_name``, ``similarity`` and ``truncate_dim``, as
    :class:`SentenceEmbedding` fields; :class:`CheckpointError` naming the file for a value it cannot take."""
    config = _read_json(path, required=False)
    similarity = config.get("similarity_fn_name") or "cosine"
    if similarity not in SIMILARITIES:
        raise CheckpointError(
            f"{str(path)!r}: similarity_fn_name {similarity!r} is not supported; supported: {', '.join(SIMILARITIES)}"
        )
    try:
        truncate_dim = check_truncate_dim(config.get("truncate_dim"), f"{str(path)!r}: truncate_dim")
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    prompts = config.get("prompts") or {}
    default_prompt_name = config.get("default_prompt_name")
    if default_prompt_name is not None and default_prompt_name not in prompts:
        raise CheckpointError(
            f"{str(path)!r}: default_prompt_name {default_prompt_name!r} is not one of its prompts {sorted(prompts)}"
        )
    return dict(
        prompts={str(k): str(v) for k, v in prompts.items()},
        default_prompt_name=default_prompt_name,
        similarity=similarity,
        truncate_dim=truncate_dim,
    )


def _check_dimension(dimension: Any, transformer_dir: Path, pooling_path: Path) -> None:
    """The Pooling's input width must be the model's hidden size."""
    config = _read_json(transformer_dir / "config.json", required=False)
    hidden = config.get("hidden_size")
    if dimension is not None and hidden is not None and int(dimension) != int(hidden):
        raise CheckpointError(
            f"{str(pooling_path)!r}: the pooling takes {dimension}-wide token embeddings, but the model in "
            f"{str(transformer_dir)!r} is {hidden} wide"
        )
