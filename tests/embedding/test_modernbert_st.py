"""sentence-transformers folders around a ModernBERT: ``from_pretrained(folder).embed(texts)`` equals
``SentenceTransformer(folder).encode(texts)`` within 1e-5.

Golden values come from sentence-transformers itself, in the test: a tiny random transformers
``ModernBertModel`` (local layers of a window far shorter than the texts) and its byte-level BPE
``tokenizer.json`` are wrapped in sentence-transformers' own ``Transformer`` + ``Pooling``
(+ ``Normalize``) modules, saved with ``SentenceTransformer.save`` and loaded back by both sides
(:mod:`tests.embedding.modernbert_folders`). Compared: CLS and mean pooling, ``Normalize``, the
transformer at the folder's root and in ``0_Transformer/``, short, mixed and long text sets,
modernbert-embed's prompts (``prompt_name``, the default prompt, ``include_prompt``, the
``roberta-ext embed --prompt-name`` command) and Matryoshka truncation (``truncate_dim`` in the
folder's config and as an argument).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import roberta_ext
from roberta_ext.checkpoints import CheckpointError
from roberta_ext.cli.embed import main as embed_main
from roberta_ext.embedding import Embedder, embed
from tests.embedding.modernbert_folders import (
    LONG,
    MIXED,
    SHORT,
    TEXT_SETS,
    WINDOW,
    encode,
    quiet,
    save_modernbert,
    save_sentence_transformer,
    st,
)

ATOL = 1e-5
MAX_SEQ_LENGTH = 300
PROMPTS = {"query": "search_query: ", "document": "search_document: "}
"""nomic-ai/modernbert-embed-base's prompts."""


@pytest.fixture(scope="module")
def modernbert_dir(tmp_path_factory) -> Path:
    return save_modernbert(tmp_path_factory.mktemp("modernbert"))


def close(ours: torch.Tensor, theirs: torch.Tensor) -> None:
    torch.testing.assert_close(ours, theirs, atol=ATOL, rtol=ATOL)


def test_the_texts_are_longer_than_the_window_and_than_max_seq_length(modernbert_dir):
    """What the comparisons below rest on: long texts many windows long, some cut at
    ``max_seq_length``, beside texts shorter than a window."""
    hub = roberta_ext.from_pretrained(str(modernbert_dir))
    assert hub.model.cfg.local_attention == WINDOW and hub.model.cfg.family == "modernbert"
    lengths = {name: [len(hub.encode(text)) for text in texts] for name, texts in TEXT_SETS.items()}
    assert max(lengths["short"]) < 3 * WINDOW and min(lengths["short"]) == 2
    assert min(lengths["mixed"]) < WINDOW < 8 * WINDOW < max(lengths["mixed"])
    assert sum(n > 512 for n in lengths["long"]) >= 2 and sum(n < 2 * WINDOW for n in lengths["long"]) == 2


@pytest.mark.parametrize(
    "pooling,normalize,subfolder,max_seq_length",
    [
        ("cls", False, False, MAX_SEQ_LENGTH),
        ("mean", True, True, MAX_SEQ_LENGTH),
        ("mean", False, False, None),  # the model's 512 positions
    ],
)
def test_pooling_and_normalize_equal_sentence_transformers(
    tmp_path, modernbert_dir, pooling, normalize, subfolder, max_seq_length
):
    model = save_sentence_transformer(
        tmp_path / "st",
        modernbert_dir,
        pooling,
        normalize=normalize,
        subfolder=subfolder,
        max_seq_length=max_seq_length,
    )
    assert (tmp_path / "st" / "0_Transformer" / "config.json").is_file() == subfolder
    hub = roberta_ext.from_pretrained(str(tmp_path / "st"))
    assert hub.sentence_embedding.pooling == (pooling,) and hub.sentence_embedding.normalize == normalize
    assert hub.sentence_embedding.max_length == (max_seq_length or 512)
    for texts in TEXT_SETS.values():
        expected = encode(model, texts)
        close(hub.embed(texts), expected)
        # Order, batch size and token budget change nothing: no padding reaches the model.
        close(hub.embed(texts[::-1], batch_size=3, max_tokens=200), expected.flip(0))


@pytest.mark.parametrize("include_prompt", [True, False])
def test_modernbert_embed_prompts(tmp_path, modernbert_dir, include_prompt):
    """modernbert-embed's ``search_query: `` / ``search_document: ``: by ``prompt_name``, as the
    folder's default, or written out; with ``include_prompt=False`` the prompt's tokens are left
    out of the mean."""
    model = save_sentence_transformer(
        tmp_path / "st",
        modernbert_dir,
        "mean",
        normalize=True,
        include_prompt=include_prompt,
        max_seq_length=MAX_SEQ_LENGTH,
        prompts=PROMPTS,
        default_prompt_name="document",
    )
    hub = roberta_ext.from_pretrained(str(tmp_path / "st"))
    assert dict(hub.sentence_embedding.prompts) == PROMPTS and hub.sentence_embedding.include_prompt == include_prompt
    for texts in (MIXED, LONG):
        close(hub.embed(texts), encode(model, texts))  # the default prompt, search_document
        close(hub.embed(texts, prompt_name="query"), encode(model, texts, prompt_name="query"))
        close(hub.embed(texts, prompt="search_query: "), encode(model, texts, prompt="search_query: "))
    assert not torch.allclose(hub.embed(SHORT, prompt_name="query"), hub.embed(SHORT), atol=1e-3)
    with pytest.raises(KeyError, match="'passage' is not one of the model's prompts \\(document, query\\)"):
        hub.embed(SHORT, prompt_name="passage")


def test_the_embed_command_takes_a_prompt_name(tmp_path, modernbert_dir):
    model = save_sentence_transformer(
        tmp_path / "st", modernbert_dir, "mean", normalize=True, max_seq_length=MAX_SEQ_LENGTH, prompts=PROMPTS
    )
    texts = [text for text in MIXED if text.strip()]  # the command strips each line; no empty line
    source = tmp_path / "texts.txt"
    source.write_text("".join(f"{text.strip()}\n" for text in texts), encoding="utf-8")
    out = tmp_path / "queries.npy"
    argv = [str(tmp_path / "st"), "--input", str(source), "--output", str(out), "--prompt-name", "query"]
    assert embed_main([*argv, "--no-progress"]) == 0
    expected = encode(model, [text.strip() for text in texts], prompt_name="query")
    np.testing.assert_allclose(np.load(out), expected.numpy(), atol=ATOL, rtol=ATOL)


def test_truncate_dim_from_the_folder_and_as_an_argument(tmp_path, modernbert_dir):
    """Matryoshka truncation as sentence-transformers does it: the first ``truncate_dim`` values,
    cut after the ``Normalize`` (so not unit-length again); the folder's ``truncate_dim``, or the
    argument in its place."""
    model = save_sentence_transformer(
        tmp_path / "st", modernbert_dir, "mean", normalize=True, max_seq_length=MAX_SEQ_LENGTH, truncate_dim=12
    )
    assert json.loads((tmp_path / "st" / "config_sentence_transformers.json").read_text())["truncate_dim"] == 12
    hub = roberta_ext.from_pretrained(str(tmp_path / "st"))
    assert hub.sentence_embedding.truncate_dim == 12
    ours = hub.embed(MIXED)
    assert ours.shape == (len(MIXED), 12) and float(ours.norm(dim=-1).max()) < 0.99
    close(ours, encode(model, MIXED))
    close(hub.similarity(SHORT, LONG), model.similarity(encode(model, SHORT), encode(model, LONG)))
    for dim in (5, 32, 100):  # the argument wins; past the model's width, the whole embedding
        theirs = encode(model, LONG, truncate_dim=dim)
        close(embed(hub.model, hub.inputs, hub.sentence_embedding, LONG, truncate_dim=dim), theirs)
        assert Embedder.for_hub(hub, truncate_dim=dim).dimension == theirs.shape[1] == min(dim, 32)

    plain = save_sentence_transformer(tmp_path / "plain", modernbert_dir, "cls", max_seq_length=MAX_SEQ_LENGTH)
    hub = roberta_ext.from_pretrained(str(tmp_path / "plain"))
    assert hub.sentence_embedding.truncate_dim is None and hub.embed(SHORT).shape == (len(SHORT), 32)
    reloaded = quiet(st.SentenceTransformer, str(tmp_path / "plain"), device="cpu", truncate_dim=7)
    close(embed(hub.model, hub.inputs, hub.sentence_embedding, MIXED, truncate_dim=7), encode(reloaded, MIXED))
    close(Embedder.for_hub(hub, truncate_dim=7).embed(MIXED), encode(plain, MIXED)[:, :7])
    close(hub.embed(MIXED, truncate_dim=7), encode(reloaded, MIXED))  # the hub's door
    source, out = tmp_path / "texts.txt", tmp_path / "cut.npy"  # the command's door
    source.write_text("".join(f"{text.strip()}\n" for text in SHORT if text.strip()), encoding="utf-8")
    argv = [str(tmp_path / "plain"), "--input", str(source), "--output", str(out), "--truncate-dim", "7"]
    assert embed_main([*argv, "--no-progress"]) == 0
    expected = encode(reloaded, [text.strip() for text in SHORT if text.strip()])
    np.testing.assert_allclose(np.load(out), expected.numpy(), atol=ATOL, rtol=ATOL)
    with pytest.raises(ValueError, match="^truncate_dim must be a positive number of dimensions, got 0$"):
        embed(hub.model, hub.inputs, hub.sentence_embedding, SHORT, truncate_dim=0)


@pytest.mark.parametrize("value", [0, -3, 2.5, "16", True])
def test_a_truncate_dim_that_is_no_number_of_dimensions_is_refused_by_name(tmp_path, modernbert_dir, value):
    save_sentence_transformer(tmp_path / "st", modernbert_dir, "mean")
    path = tmp_path / "st" / "config_sentence_transformers.json"
    config = json.loads(path.read_text())
    path.write_text(json.dumps({**config, "truncate_dim": value}))
    with pytest.raises(CheckpointError) as refused:
        roberta_ext.from_pretrained(str(tmp_path / "st"))
    assert str(refused.value) == (f"{str(path)!r}: truncate_dim must be a positive number of dimensions, got {value!r}")
