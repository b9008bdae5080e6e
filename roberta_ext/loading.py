"""Loading: fairseq checkpoints, transformers directories and known names -> a hub.

:func:`from_pretrained` takes fairseq's ``RobertaModel.from_pretrained`` arguments and returns a
:class:`~roberta_ext.hub.RobertaHubInterface`; :func:`from_transformers` reads a transformers
model directory. The weights go through :mod:`roberta_ext.checkpoints` (safe unpickling, one
strict state loader), the tokenizer through :mod:`roberta_ext.tokenizers.registry`, the family's
conventions through :mod:`roberta_ext.families`.
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from .checkpoints import CheckpointError, load_roberta_checkpoint, store
from .checkpoints.transformers import is_transformers_dir, load_transformers
from .families import get_family
from .hub import MASK, RobertaHubInterface
from .tokenizers.dictionary import Dictionary
from .tokenizers.registry import BPE_CHOICES, KINDS, TokenizerFiles, get_kind, kind_for_folder


def from_pretrained(
    model_name_or_path: str | os.PathLike[str],
    checkpoint_file: str = "model.pt",
    data_name_or_path: str = ".",
    bpe: str | None = None,
    *,
    gpt2_encoder_json: str | None = None,
    gpt2_vocab_bpe: str | None = None,
    bpe_vocab_file: str | os.PathLike[str] | None = None,
    bpe_cased: bool = False,
    sentencepiece_model: str | os.PathLike[str] | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    **overrides: Any,
) -> RobertaHubInterface:
    """Load a RoBERTa model like fairseq's ``RobertaModel.from_pretrained``, without fairseq.

    ``model_name_or_path`` is a folder holding ``checkpoint_file``, an archive of one, a URL,
    or a known name (``roberta.base``, ``roberta.large``, ``roberta.large.mnli``), which is
    downloaded once into the cache. ``data_name_or_path`` holds ``dict.txt`` — or, after
    sentence-prediction fine-tuning, ``input0/dict.txt`` and ``label/dict.txt``; a path
    starting with ``.`` is relative to the model folder. GPT-2 BPE files are taken from
    ``gpt2_encoder_json``/``gpt2_vocab_bpe``, else from the model folder, else from the cache.
    ``dtype=torch.bfloat16`` runs inference in bf16: faster on CPUs with AVX512-BF16/AMX and on
    GPUs, at the cost of about three significant digits in the features.

    Models trained with the plugin on WordPiece or SentencePiece data (BERT, ALBERT, ELECTRA)
    tokenize with ``bpe="bert"`` (fairseq's name; ``"wordpiece"`` too) and ``bpe_vocab_file``
    (default: ``vocab.txt`` in the model folder; ``bpe_cased=True`` for cased vocabularies) or
    ``bpe="sentencepiece"`` and ``sentencepiece_model`` (default: ``spiece.model``). Without
    ``bpe``, the files decide: GPT-2 BPE when its files are given or in the model folder, else
    ``vocab.txt``, else ``spiece.model``, else the family's usual tokenizer (GPT-2 for RoBERTa,
    fetched from the cache). A transformers directory (``config.json`` + weights) is read by
    :func:`from_transformers`.

    >>> import roberta_ext
    >>> roberta = roberta_ext.from_pretrained("/models/roberta.large")   # doctest: +SKIP
    >>> roberta.encode("Hello world!")                                   # doctest: +SKIP
    tensor([    0, 31414,   232,   328,     2])
    """
    if bpe is not None and bpe not in BPE_CHOICES:
        raise ValueError(f"bpe={bpe!r} is not supported; choose one of {BPE_CHOICES}")
    if overrides:
        warnings.warn(f"from_pretrained ignores fairseq overrides it has no use for: {sorted(overrides)}", stacklevel=2)
    model_dir = Path(store.resolve_model(model_name_or_path, cache_dir=cache_dir, offline=offline))
    if not (model_dir / checkpoint_file).is_file() and is_transformers_dir(model_dir):
        hub = from_transformers(model_dir)
        if device is not None or dtype is not None:
            hub.to(device=device, dtype=dtype)
        return hub
    data_dir = (
        model_dir / data_name_or_path
        if str(data_name_or_path).startswith(".")
        else Path(store.resolve_model(data_name_or_path, cache_dir=cache_dir, offline=offline))
    )
    checkpoint = model_dir / checkpoint_file
    loaded = load_roberta_checkpoint(checkpoint)

    dictionary_path = _first_existing(data_dir / "input0" / "dict.txt", data_dir / "dict.txt")
    dictionary = Dictionary.load(dictionary_path)
    # fairseq's masked_lm and sentence_prediction tasks both append <mask> after loading.
    dictionary.add_symbol(MASK)
    rows = loaded.model.cfg.vocab_size
    if len(dictionary) != rows:
        raise CheckpointError(
            f"{str(dictionary_path)!r} has {len(dictionary) - dictionary.nspecial - 1} symbols, giving "
            f"{len(dictionary)} with the 4 specials and <mask>, but the embedding matrix of {str(checkpoint)!r} "
            f"has {rows} rows: this dictionary does not belong to this model"
        )
    label_path = data_dir / "label" / "dict.txt"
    labels = Dictionary.load(label_path) if label_path.is_file() else None

    files = TokenizerFiles(
        gpt2_encoder_json=gpt2_encoder_json,
        gpt2_vocab_bpe=gpt2_vocab_bpe,
        bpe_vocab_file=bpe_vocab_file,
        bpe_cased=bpe_cased,
        sentencepiece_model=sentencepiece_model,
        cache_dir=cache_dir,
        offline=offline,
    )
    family = get_family(loaded.model.cfg.family)
    kind = get_kind(bpe) if bpe is not None else kind_for_folder(model_dir, files, family.tokenizer)
    tokenizer = kind.for_fairseq(model_dir, dictionary, files)
    cfg = {"model": loaded.options, "task": loaded.task}
    hub = RobertaHubInterface(loaded.model, tokenizer, label_dictionary=labels, cfg=cfg)
    if device is not None or dtype is not None:
        hub.to(device=device, dtype=dtype)
    return hub.eval()


def from_transformers(directory: str | os.PathLike[str]) -> RobertaHubInterface:
    """A hub for a transformers model directory (RoBERTa, BERT or ALBERT): ``config.json``, the
    weights (safetensors or ``pytorch_model.bin``) and the tokenizer files — ``vocab.json`` +
    ``merges.txt`` (RoBERTa), ``vocab.txt`` (BERT; ``do_lower_case`` from
    ``tokenizer_config.json``) or ``spiece.model`` (ALBERT). Ids equal transformers'
    tokenizer's, features equal its model's. ``from_pretrained(directory)`` calls this.

    >>> bert = from_transformers("bert-base-uncased")                     # doctest: +SKIP
    >>> bert.encode("Hello", "world").tolist(), bert.segments(bert.encode("Hello", "world")).tolist()  # doctest: +SKIP
    ([101, 7592, 102, 2088, 102], [0, 0, 0, 1, 1])
    """
    d = Path(directory)
    loaded = load_transformers(d)
    kind = KINDS[get_family(loaded.model.cfg.family).tokenizer]
    tokenizer_config = _read_optional_json(d / "tokenizer_config.json")
    fast = _read_optional_json(d / "tokenizer.json").get("model") or {}  # transformers 5 writes only this
    tokenizer = kind.from_transformers(d, tokenizer_config, fast, loaded.model.cfg.vocab_size)
    if len(tokenizer.dictionary) != loaded.model.cfg.vocab_size:
        raise CheckpointError(
            f"{str(d)!r}: the tokenizer has {len(tokenizer.dictionary)} tokens but the model's "
            f"embedding has {loaded.model.cfg.vocab_size} rows"
        )
    cfg = {"model": {"_name": loaded.architecture, **loaded.config}, "task": {}}
    return RobertaHubInterface(loaded.model, tokenizer, labels=loaded.labels, cfg=cfg).eval()


def _read_optional_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise CheckpointError(f"{str(path)!r} is not valid JSON ({exc})") from None


def _first_existing(*candidates: Path) -> Path:
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"no dictionary found: looked for {' and '.join(repr(str(p)) for p in candidates)}")


__all__ = ["BPE_CHOICES", "from_pretrained", "from_transformers"]
