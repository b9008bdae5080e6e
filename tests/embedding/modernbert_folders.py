"""Tiny ModernBERT folders for the tests, written by transformers and sentence-transformers themselves.

:func:`save_modernbert` writes a transformers folder: a ``ModernBertModel`` of 4 layers (global,
local, local, global) 32 wide, its local layers attending 4 tokens either side (``local_attention``
8), every parameter random (:func:`tests.checkpoints.test_modernbert_transformers.randomized`),
with the ModernBERT-like byte-level BPE of :mod:`tests.tokenizers.test_hf_tokenizer`.
:func:`save_sentence_transformer` wraps such a folder in sentence-transformers' ``Transformer`` +
``Pooling`` (+ ``Normalize``) with ``SentenceTransformer(modules=[...]).save(...)`` and loads it back
as sentence-transformers would. No download.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from tests.checkpoints.test_modernbert_transformers import randomized, tiny_config
from tests.peers import require
from tests.tokenizers.test_hf_tokenizer import CORPUS, rows_for, save_modernbert_tokenizer

st = require("sentence_transformers", "the tests compare with SentenceTransformer.encode")
transformers = require("transformers", "the models are built and saved with transformers")

WINDOW = 8
"""``local_attention`` of the tiny models: a local layer's tokens see 4 tokens either side."""

SHORT = [
    "Hi",
    "The capital of France is Paris.",
    "",
    "Contact |||IP_ADDRESS||| or   spaces   [MASK] here",
    "Café naïve — Ångström",
    "😀 emoji and 中文 text",
]
"""A few words each: shorter than the local window, or a window or two long."""

MIXED = [*SHORT, *(" ".join(CORPUS[i : i + 1 + i % 7]) for i in range(0, 60, 5))]
"""Short lines beside texts of 10 to 80 tokens: padded batches of very different lengths."""

LONG = [" ".join(CORPUS[i : i + 10 + 9 * i]) for i in range(8)] + ["Short one.", "Another line of text."]
"""Texts of about 100 to 740 tokens — many windows long, several cut at the folders' ``max_seq_length``
or at the model's 512 positions — and two short ones."""

TEXT_SETS = {"short": SHORT, "mixed": MIXED, "long": LONG}


def quiet(function: Any, *args: Any, **kwargs: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args, **kwargs)


def save_modernbert(folder: Path, *, seed: int = 0, **config: Any) -> Path:
    """A transformers ModernBERT folder (model, ``tokenizer.json``, ``tokenizer_config.json``)
    of :func:`tiny_config` with ``config``'s changes; its ids are the tokenizer's."""
    fast = save_modernbert_tokenizer(folder)
    ids = dict(pad_token_id=fast.pad_token_id, cls_token_id=fast.cls_token_id, sep_token_id=fast.sep_token_id)
    ids.update(bos_token_id=fast.cls_token_id, eos_token_id=fast.sep_token_id)
    values = dict(vocab_size=rows_for(len(fast)), local_attention=WINDOW, **ids)
    values.update(config)
    randomized(transformers.ModernBertModel(tiny_config(**values)), seed).save_pretrained(folder)
    return folder


def save_sentence_transformer(
    folder: Path,
    transformer_dir: Path,
    pooling: str,
    *,
    normalize: bool = False,
    include_prompt: bool = True,
    max_seq_length: int | None = None,
    subfolder: bool = False,
    **model_kwargs: Any,
) -> Any:
    """A sentence-transformers folder written by sentence-transformers around ``transformer_dir``
    (``model_kwargs``: ``prompts``, ``default_prompt_name``, ``truncate_dim``, ...), and the
    ``SentenceTransformer`` loaded back from it. ``subfolder`` moves the transformers model into
    ``0_Transformer/``, the layout of folders saved before sentence-transformers 6."""
    modules = st.sentence_transformer.modules
    transformer = quiet(modules.Transformer, str(transformer_dir), max_seq_length=max_seq_length)
    pooler = modules.Pooling(transformer.get_embedding_dimension(), pooling_mode=pooling, include_prompt=include_prompt)
    layers = [transformer, pooler] + ([modules.Normalize()] if normalize else [])
    quiet(st.SentenceTransformer, modules=layers, device="cpu", **model_kwargs).save(str(folder))
    if subfolder:
        inner = folder / "0_Transformer"
        inner.mkdir()
        own = {"modules.json", "config_sentence_transformers.json", "README.md"}
        for path in list(folder.iterdir()):
            if path.is_file() and path.name not in own:
                path.rename(inner / path.name)
        entries = json.loads((folder / "modules.json").read_text(encoding="utf-8"))
        entries[0]["path"] = "0_Transformer"
        (folder / "modules.json").write_text(json.dumps(entries), encoding="utf-8")
    return quiet(st.SentenceTransformer, str(folder), device="cpu").eval()


def encode(model: Any, texts: list[str], **kwargs: Any) -> Any:
    """``model.encode(texts)`` as a float32 tensor, in batches of 4 (padded batches of mixed lengths)."""
    return quiet(model.encode, texts, convert_to_tensor=True, batch_size=4, **kwargs).float()
