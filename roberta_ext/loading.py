"""Loading: fairseq checkpoints, transformers directories and known names -> a hub.

:func:`from_pretrained` takes fairseq's ``RobertaModel.from_pretrained`` arguments and returns a
:class:`~roberta_ext.hub.RobertaHubInterface`; :func:`from_transformers` reads a transformers
model directory. The weights go through :mod:`roberta_ext.checkpoints` (safe unpickling, one
strict state loader), the tokenizer through :mod:`roberta_ext.tokenizers.registry`, the family's
conventions through :mod:`roberta_ext.families`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from pathlib import Path
from typing import Any

import torch

from . import download
from .checkpoints import CheckpointError, load_roberta_checkpoint
from .checkpoints.fairseq import LoadedCheckpoint
from .checkpoints.transformers import is_transformers_dir, load_transformers
from .embedding.pooling import SentenceEmbedding
from .embedding.st_folder import is_sentence_transformers_dir, read_sentence_transformers
from .families import get_family
from .hub import MASK, RobertaHubInterface
from .inference.inputs import ModelInputs
from .tokenizers.dictionary import Dictionary
from .tokenizers.registry import (
    BPE_CHOICES,
    KINDS,
    TokenizerFiles,
    choose_kind,
    in_folder,
    kind_for_transformers,
    kinds_named,
)


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
    dtype: torch.dtype | str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    offline: bool | None = None,
    compile: bool = False,
    **overrides: Any,
) -> RobertaHubInterface:
    """Load a RoBERTa model like fairseq's ``RobertaModel.from_pretrained``, without fairseq.

    ``model_name_or_path`` is a folder holding ``checkpoint_file``, an archive of one, a URL,
    or a known name (``roberta.base``, ``roberta.large``, ``roberta.large.mnli``), which is
    downloaded once into the cache. ``data_name_or_path`` holds ``dict.txt`` — or, after
    sentence-prediction fine-tuning, ``input0/dict.txt`` and ``label/dict.txt``; a path
    starting with ``.`` is relative to the model folder. The tokenizer's files are, in this order:
    the ones passed (``gpt2_encoder_json``/``gpt2_vocab_bpe``, ...); those the checkpoint was
    trained with (its ``--bpe gpt2 --gpt2-encoder-json ...``, as fairseq's hub reads them) where
    they are not fairseq's default URLs and exist here; those in the model folder, then in the
    data folder; only then fairseq's default GPT-2 BPE, from the cache or downloaded — and only for
    a dictionary that is GPT-2's: a ``dict.txt`` of your own BPE (``roberta-ext train-bpe``) with
    fairseq's default BPE would give wrong ids, so that is refused, naming the arguments to pass.
    ``dtype=torch.bfloat16`` runs inference in bf16: faster on CPUs with AVX512-BF16/AMX and on
    GPUs, at the cost of about three significant digits in the features. ``dtype="int8"`` puts
    every linear layer in int8 for CPU inference, inputs quantized per token, q/k/v and fc1 smoothed
    (:mod:`roberta_ext.export.int8`; speed and cosines to fp32 in docs/export.md).

    Models trained with the plugin on WordPiece or SentencePiece data (BERT, ALBERT, ELECTRA)
    tokenize with ``bpe="bert"`` (fairseq's name; ``"wordpiece"`` too) and ``bpe_vocab_file``
    (default: ``vocab.txt`` in the model folder; ``bpe_cased=True`` for cased vocabularies) or
    ``bpe="sentencepiece"`` and ``sentencepiece_model`` (default: ``spiece.model``). XLM-R
    (``xlmr.base``, ..., or a folder with ``sentencepiece.bpe.model``) takes fairseq's
    ``bpe="sentencepiece"`` too: a ``sentencepiece.bpe.model`` is XLM-R's tokenizer. Without
    ``bpe``, the files decide: GPT-2 BPE when its files are given or in the model folder, else
    ``vocab.txt``, else ``spiece.model``, else ``sentencepiece.bpe.model``, else the ``--bpe``
    and files the checkpoint was trained with, else the family's usual tokenizer (GPT-2 for
    RoBERTa, fetched from the cache). A transformers directory
    (``config.json`` + weights) is read by :func:`from_transformers`, a sentence-transformers
    folder (``modules.json``) by :func:`from_sentence_transformers`.

    ``compile=True`` serves inference through ``torch.compile`` over bucketed shapes
    (:func:`roberta_ext.inference.compiled.compile_model`: CUDA graphs on a GPU, for small batches bound by
    kernel launches); each bucket compiles on its first use.

    >>> import roberta_ext
    >>> roberta = roberta_ext.from_pretrained("/models/roberta.large")   # doctest: +SKIP
    >>> roberta.encode("Hello world!")                                   # doctest: +SKIP
    tensor([    0, 31414,   232,   328,     2])
    """
    if bpe is not None and bpe not in BPE_CHOICES:
        raise ValueError(f"bpe={bpe!r} is not supported; choose one of {BPE_CHOICES}")
    if overrides:
        warnings.warn(f"from_pretrained ignores fairseq overrides it has no use for: {sorted(overrides)}", stacklevel=2)
    model_dir = Path(download.resolve_model(model_name_or_path, cache_dir=cache_dir, offline=offline))
    if not (model_dir / checkpoint_file).is_file() and is_sentence_transformers_dir(model_dir):
        return _place(from_sentence_transformers(model_dir), device, dtype, compile=compile)
    if not (model_dir / checkpoint_file).is_file() and is_transformers_dir(model_dir):
        return _place(from_transformers(model_dir), device, dtype, compile=compile)
    data_dir = (
        model_dir / data_name_or_path
        if str(data_name_or_path).startswith(".")
        else Path(download.resolve_model(data_name_or_path, cache_dir=cache_dir, offline=offline))
    )
    checkpoint = _checkpoint_path(model_dir, checkpoint_file)
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
    bpe, files, tokenizer_dir = _tokenizer_source(bpe, files, loaded, (model_dir, data_dir))
    family = get_family(loaded.model.cfg.family)
    kind = choose_kind(bpe, tokenizer_dir, files, family.tokenizer)
    if kind.family is not None and "family" not in loaded.options:
        # fairseq's own XLM-R checkpoints do not say so: they are RoBERTa checkpoints (its XLMRModel
        # is its RobertaModel) that come with XLM-R's tokenizer. The same modules, another family.
        loaded.model.cfg = loaded.model.cfg.replace(family=kind.family)
    tokenizer = kind.for_fairseq(tokenizer_dir, dictionary, files)
    cfg = {"model": loaded.options, "task": loaded.task}
    inputs = ModelInputs.for_model(loaded.model, tokenizer)
    hub = RobertaHubInterface(loaded.model, tokenizer, label_dictionary=labels, cfg=cfg, inputs=inputs)
    return _place(hub.eval(), device, dtype, compile=compile)


def from_transformers(
    directory: str | os.PathLike[str], *, sentence_embedding: SentenceEmbedding | None = None
) -> RobertaHubInterface:
    """A hub for a transformers model directory (RoBERTa, BERT, ALBERT, XLM-R or ModernBERT): ``config.json``,
    the weights (safetensors or ``pytorch_model.bin``) and the tokenizer files — ``vocab.json`` +
    ``merges.txt`` (RoBERTa), ``vocab.txt`` (BERT; ``do_lower_case`` from
    ``tokenizer_config.json``), ``spiece.model`` (ALBERT), ``sentencepiece.bpe.model``
    (XLM-R) or ``tokenizer.json`` (ModernBERT, and any folder whose ``tokenizer_config.json``
    names transformers' generic ``PreTrainedTokenizerFast``: read by the ``tokenizers`` library).
    Ids equal transformers' tokenizer's, features equal its model's. ``from_pretrained(directory)`` calls this.
    ``sentence_embedding`` says how ``embed`` pools (default: mean pooling).

    >>> bert = from_transformers("bert-base-uncased")                     # doctest: +SKIP
    >>> bert.encode("Hello", "world").tolist(), bert.segments(bert.encode("Hello", "world")).tolist()  # doctest: +SKIP
    ([101, 7592, 102, 2088, 102], [0, 0, 0, 1, 1])
    """
    d = Path(directory)
    loaded = load_transformers(d)
    family = get_family(loaded.model.cfg.family)
    tokenizer_config = _read_optional_json(d / "tokenizer_config.json")
    kind = kind_for_transformers(d, tokenizer_config, family.tokenizer)
    fast = _read_optional_json(d / "tokenizer.json").get("model") or {}  # transformers 5 writes only this
    tokenizer = kind.from_transformers(
        d, tokenizer_config, fast, loaded.model.cfg.vocab_size, double_separator=family.double_separator
    )
    if len(tokenizer.dictionary) != loaded.model.cfg.vocab_size:
        raise CheckpointError(
            f"{str(d)!r}: the tokenizer has {len(tokenizer.dictionary)} tokens but the model's "
            f"embedding has {loaded.model.cfg.vocab_size} rows"
        )
    cfg = {"model": {"_name": loaded.architecture, **loaded.config}, "task": {}}
    inputs = ModelInputs.for_model(loaded.model, tokenizer)
    return RobertaHubInterface(
        loaded.model, tokenizer, labels=loaded.labels, cfg=cfg, sentence_embedding=sentence_embedding, inputs=inputs
    ).eval()


def from_sentence_transformers(directory: str | os.PathLike[str]) -> RobertaHubInterface:
    """A hub for a sentence-transformers model folder (``modules.json``: a Transformer, a
    Pooling, optionally a Normalize): the transformers model inside it, with the folder's
    pooling, normalisation, ``max_seq_length``, ``do_lower_case``, prompts and similarity, so
    that ``hub.embed(texts)`` gives what ``SentenceTransformer(directory).encode(texts)`` gives.
    ``from_pretrained(directory)`` calls this.

    >>> minilm = from_sentence_transformers("all-MiniLM-L6-v2")           # doctest: +SKIP
    >>> minilm.embed(["Hello world!"]).shape                              # doctest: +SKIP
    torch.Size([1, 384])
    """
    transformer_dir, settings = read_sentence_transformers(directory)
    if not is_transformers_dir(transformer_dir):
        raise CheckpointError(
            f"{str(transformer_dir)!r}: the Transformer module of {str(Path(directory) / 'modules.json')!r} has no "
            "config.json and weights (model.safetensors or pytorch_model.bin)"
        )
    return from_transformers(transformer_dir, sentence_embedding=settings)


def _tokenizer_source(
    bpe: str | None, files: TokenizerFiles, loaded: LoadedCheckpoint, folders: tuple[Path, Path]
) -> tuple[str | None, TokenizerFiles, Path]:
    """Where a fairseq checkpoint's tokenizer comes from: ``(bpe, files, folder)``, ``folder``
    being where the kind's usual files are looked for. In this order: what the caller passed;
    the files the checkpoint was trained with (:func:`_trained_files`); the model folder's
    files, then the data folder's (docs/pretraining.md copies ``encoder.json``/``vocab.bpe``
    into ``data-bin/``); only then the family's usual tokenizer from the model folder (GPT-2's:
    fairseq's default URLs, which :class:`~roberta_ext.tokenizers.registry.GPT2Kind` refuses to
    pair with a dictionary that is not GPT-2's)."""
    model_dir, data_dir = folders
    caller_named_files = files != TokenizerFiles(cache_dir=files.cache_dir, offline=files.offline)
    if not caller_named_files:
        trained_bpe, trained = _trained_files(loaded, files)
        if bpe in (None, trained_bpe):
            if trained != files:
                return trained_bpe, trained, model_dir
            bpe = trained_bpe
    kinds = kinds_named(bpe) if bpe is not None else list(KINDS.values())
    for folder in dict.fromkeys(folders):  # the model folder first; once when they are the same
        if any(in_folder(kind, folder) for kind in kinds):
            return bpe, files, folder
    return bpe, files, model_dir


def _trained_files(loaded: LoadedCheckpoint, files: TokenizerFiles) -> tuple[str | None, TokenizerFiles]:
    """The tokenizer a checkpoint was trained with, for a caller who named none: its ``--bpe``
    and ``files`` plus the files it named that exist here (a path, relative to the working
    directory as in fairseq, or a URL other than fairseq's defaults, fetched into the cache).
    fairseq's default GPT-2 URLs are left out: every checkpoint trained without
    ``--gpt2-encoder-json`` names them, including those trained on a BPE of the user's own.
    A path that does not exist is said and skipped."""
    name = loaded.bpe.get("_name")
    if name not in BPE_CHOICES:
        return None, files
    defaults = {download.GPT2_BPE.encoder_json, download.GPT2_BPE.vocab_bpe}
    found: dict[str, Any] = {}
    missing = []
    for option in ("gpt2_encoder_json", "gpt2_vocab_bpe", "bpe_vocab_file", "sentencepiece_model"):
        value = loaded.bpe.get(option)
        if not isinstance(value, str) or not value or value in defaults:
            continue
        if value.startswith(("http://", "https://")) or os.path.isfile(value):
            found[option] = value
        else:
            missing.append(f"--{option.replace('_', '-')} {value!r}")
    if missing:
        warnings.warn(
            f"{loaded.path!r} was trained with {' '.join(missing)}, which does not exist here (paths are "
            f"relative to the working directory, {os.getcwd()!r}); pass the files to from_pretrained or put them "
            "in the model folder",
            stacklevel=4,
        )
    if ("gpt2_encoder_json" in found) != ("gpt2_vocab_bpe" in found):  # one of the two is no use
        del found["gpt2_encoder_json" if "gpt2_encoder_json" in found else "gpt2_vocab_bpe"]
    if not found:
        return name, files
    if "bpe_cased" in loaded.bpe:
        found["bpe_cased"] = bool(loaded.bpe["bpe_cased"])
    return name, dataclasses.replace(files, **found)


def _checkpoint_path(model_dir: Path, checkpoint_file: str) -> Path:
    """``model_dir / checkpoint_file``, or a FileNotFoundError naming the checkpoints the folder
    does hold (a fairseq-train ``--save-dir`` has ``checkpoint_best.pt``, not ``model.pt``)."""
    path = model_dir / checkpoint_file
    if path.is_file():
        return path
    found = sorted(p.name for p in model_dir.glob("*.pt") if p.is_file())
    if not found:
        raise FileNotFoundError(f"checkpoint file {str(path)!r} does not exist, and {str(model_dir)!r} holds no *.pt")
    best = "checkpoint_best.pt" if "checkpoint_best.pt" in found else found[0]
    raise FileNotFoundError(
        f"checkpoint file {str(path)!r} does not exist; {str(model_dir)!r} holds {', '.join(found)}: pass "
        f"checkpoint_file={best!r} (--checkpoint-file {best} on the roberta-ext commands)"
    )


INT8 = "int8"
"""``from_pretrained(..., dtype=INT8)``: dynamic int8 quantization of the linear layers, CPU only."""


def _place(
    hub: RobertaHubInterface,
    device: str | torch.device | None,
    dtype: torch.dtype | str | None,
    *,
    compile: bool = False,
) -> RobertaHubInterface:
    """Move ``hub`` to ``device`` and ``dtype`` (a torch dtype, its name, or :data:`INT8`), and
    compile it for inference when ``compile``."""
    if compile:
        from .inference.compiled import compile_model

        if dtype == INT8:
            raise ValueError("compile=True and dtype='int8' do not combine: load with one or the other")
        compile_model(_place(hub, device, dtype))
        return hub
    if isinstance(dtype, str):
        if dtype == INT8:
            if device is not None and torch.device(device).type != "cpu":
                raise ValueError(f"dtype='int8' runs on the CPU only, not on device={str(device)!r}")
            from .export.int8 import calibration_batches, quantize_int8  # imported when asked for

            quantize_int8(hub.model, calibration=calibration_batches(hub.inputs))
            return hub
        named = getattr(torch, dtype, None)
        if not isinstance(named, torch.dtype) or not named.is_floating_point:
            raise ValueError(f"dtype={dtype!r} is not a floating-point torch dtype nor {INT8!r}")
        dtype = named
    if device is not None or dtype is not None:
        hub.to(device=device, dtype=dtype)
    return hub


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


__all__ = [
    "BPE_CHOICES",
    "INT8",
    "from_pretrained",
    "from_sentence_transformers",
    "from_transformers",
]
