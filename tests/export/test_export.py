"""Export (ONNX run by onnxruntime, torch.export) and int8 inference, against our own hub.

Each function of ``roberta_ext.export`` on a 1-layer model of width 32 (``small_roberta``, and a BERT
without heads for segment ids), checked against references computed another way: each row's
features alone (no batch-mates, no padding) from the hub's own ``extract_features``, pooled by hand,
its ``predict`` logits; the written files run by onnxruntime and ``torch.export.load``. These exports
are few and small (about a second for torch.export, five for ONNX).

Then whole graphs of 2-layer models (``roberta``, ``bert``), also through the command: each is
traced on a 2 x 8 batch and run here on batches of other sizes and lengths (dynamic axes), padded;
its outputs must equal the hub's (``extract_features``, ``predict(..., return_logits=True)``, a token
head, pooled features) on real tokens within 1e-4.

Every model has weights spread wider than BERT's initialisation (N(0, 1/fan_in) linear layers,
LayerNorms away from 1 and 0), so that every layer moves the features: with N(0, 0.02) weights the
features are nearly the embeddings, and any error in a layer hides.
"""

from __future__ import annotations

import copy
import logging
import math
import os
import re
import sys
import threading
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import roberta_ext
from roberta_ext import export
from roberta_ext.checkpoints import save_roberta_checkpoint
from roberta_ext.cli.export import main as export_main
from roberta_ext.embedding.pooling import SentenceEmbedding, pool
from roberta_ext.export import ExportCheckError, ServingModule
from roberta_ext.export.int8 import (
    Int8Linear,
    PerTensorInt8Linear,
    calibration_batches,
    full_range_activations,
    input_maxima,
    quantize_int8,
    smoothed_linears,
)
from roberta_ext.tokenizers.wordpiece import WordPieceTokenizer, train_wordpiece_vocab, write_vocab
from tests.peers import require
from tests.test_hub import make_model_dir
from tests.test_hub_families import CORPUS, fairseq_dir

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")

TOLERANCE = 1e-4
# (batch, length) of the batches run; the graph was traced on 2 x 8.
SHAPES = [(1, 5), (3, 13), (6, 40)]

MAX_POSITIONS = 24
ROW_TOLERANCE = 1e-5  # the 1-layer models' rows against each row alone
LENGTHS = (9, 4, 12, 3)  # not sorted: the batch is 12 long, its rows right-padded


def spread_weights(model: nn.Module, seed: int = 0) -> None:
    """Weights under which every layer changes the features (see the module's docstring)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(
                    torch.randn(module.weight.shape, generator=generator) / math.sqrt(module.in_features)
                )
                module.bias.copy_(0.1 * torch.randn(module.bias.shape, generator=generator))
            elif isinstance(module, nn.LayerNorm):
                module.weight.copy_(1 + 0.2 * torch.randn(module.weight.shape, generator=generator))
                module.bias.copy_(0.2 * torch.randn(module.bias.shape, generator=generator))


def respread(directory: Path) -> Path:
    """Rewrite ``directory/model.pt`` with :func:`spread_weights`, heads included."""
    hub = roberta_ext.from_pretrained(str(directory))
    spread_weights(hub.model)
    save_roberta_checkpoint(hub.model, directory / "model.pt")
    return directory


@pytest.fixture(scope="module")
def roberta_dir(tmp_path_factory, bpe_files) -> Path:
    """A 2-layer RoBERTa folder with a two-class sentence head (``label/dict.txt``) and a token head."""
    directory = make_model_dir(tmp_path_factory.mktemp("roberta"), bpe_files, max_positions=64, labels=["neg", "pos"])
    hub = roberta_ext.from_pretrained(str(directory))
    hub.model.register_token_head("tagger", num_labels=3)
    save_roberta_checkpoint(hub.model, directory / "model.pt")
    return respread(directory)


@pytest.fixture(scope="module")
def roberta(roberta_dir):
    return roberta_ext.from_pretrained(str(roberta_dir))


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    """A BERT folder (absolute positions, segment ids, pooler) with a token head and a pooled sentence head."""
    directory = tmp_path_factory.mktemp("bert")
    write_vocab(train_wordpiece_vocab(CORPUS, vocab_size=120), directory / "vocab.txt")
    wordpiece = WordPieceTokenizer.from_file(directory / "vocab.txt")
    fairseq_dir(directory, [wordpiece.tokenize(line) for line in CORPUS], "bert-tiny", labels=["O", "PER", "LOC"])
    hub = roberta_ext.from_pretrained(str(directory))
    hub.model.register_classification_head("sentiment", num_classes=2)
    save_roberta_checkpoint(hub.model, directory / "model.pt")
    return roberta_ext.from_pretrained(str(respread(directory)))


@pytest.fixture(scope="module")
def small_roberta(tmp_path_factory, bpe_files):
    """1 layer, width 32, a two-class sentence head and a three-label token head ``tagger``."""
    directory = make_model_dir(
        tmp_path_factory.mktemp("roberta"), bpe_files, layers=1, max_positions=MAX_POSITIONS, labels=["neg", "pos"]
    )
    hub = roberta_ext.from_pretrained(str(directory))
    hub.model.register_token_head("tagger", num_labels=3)
    spread_weights(hub.model)
    hub.model.eval()
    return hub


@pytest.fixture(scope="module")
def bert_without_heads(tmp_path_factory):
    """BERT's layout: segment ids derived from the ids (0 up to the first [SEP], 1 after)."""
    directory = tmp_path_factory.mktemp("bert")
    write_vocab(train_wordpiece_vocab(CORPUS, vocab_size=120), directory / "vocab.txt")
    wordpiece = WordPieceTokenizer.from_file(directory / "vocab.txt")
    fairseq_dir(directory, [wordpiece.tokenize(line) for line in CORPUS], "bert-tiny")
    hub = roberta_ext.from_pretrained(str(directory))
    spread_weights(hub.model)
    hub.model.eval()
    return hub


def padded_batches(hub) -> list[torch.Tensor]:
    """Batches of :data:`SHAPES`: rows ``<s> ... </s>`` of decreasing length (the longest is the
    batch's length), padded with ``<pad>`` by the hub's own ``collate``; BERT's hold pairs."""
    generator = torch.Generator().manual_seed(1)
    nspecial, size = hub.dictionary.nspecial, len(hub.dictionary) - 1  # no <mask>
    bos, eos = hub.dictionary.bos(), hub.dictionary.eos()
    batches = []
    for batch, length in SHAPES:
        rows = []
        for row in range(batch):
            n = max(3, length - 3 * row)
            ids = torch.randint(nspecial, size, (n,), generator=generator)
            ids[0], ids[-1], ids[n // 2] = bos, eos, eos  # a pair: segment 1 after the middle </s> or [SEP]
            rows.append(ids)
        batches.append(hub.collate(rows)[0])
    return batches


def rows_of(hub, lengths=LENGTHS, seed: int = 1) -> list[torch.Tensor]:
    """Rows ``<s> ... </s> ... </s>`` (a pair: segment 1 after the middle separator) of ``lengths``."""
    generator = torch.Generator().manual_seed(seed)
    dictionary = hub.dictionary
    rows = []
    for n in lengths:
        ids = torch.randint(dictionary.nspecial, len(dictionary) - 1, (n,), generator=generator)  # no <mask>
        ids[0], ids[-1], ids[n // 2] = dictionary.bos(), dictionary.eos(), dictionary.eos()
        rows.append(ids)
    return rows


def alone(hub, rows: list[torch.Tensor]) -> list[torch.Tensor]:
    """Each row's features (T, C), computed with the row alone."""
    with torch.no_grad():
        return [hub.extract_features(row)[0] for row in rows]


def by_hand(features: torch.Tensor, mode: str) -> torch.Tensor:
    """sentence-transformers' pooling of one row's features (T, C), written out."""
    length = len(features)
    if mode == "mean":
        return features.mean(dim=0)
    if mode == "cls":
        return features[0]
    if mode == "max":
        return features.max(dim=0).values
    if mode == "mean_sqrt_len_tokens":
        return features.sum(dim=0) / math.sqrt(length)
    if mode == "weightedmean":
        weights = torch.arange(1, length + 1, dtype=features.dtype)
        return (weights[:, None] * features).sum(dim=0) / weights.sum()
    assert mode == "lasttoken"
    return features[-1]


def pooled_by_hand(hub, rows, modes, normalize: bool) -> torch.Tensor:
    vectors = [torch.cat([by_hand(features, mode) for mode in modes]) for features in alone(hub, rows)]
    embeddings = torch.stack(vectors)
    return F.normalize(embeddings, dim=-1) if normalize else embeddings


def serve(serving: ServingModule, *inputs: torch.Tensor | None) -> torch.Tensor:
    with torch.no_grad():
        return serving.eval()(*inputs)


def assert_close(ours, reference: torch.Tensor, where: torch.Tensor) -> None:
    ours = torch.as_tensor(ours)
    assert ours.shape == reference.shape
    difference = float((ours - reference)[where].abs().max())
    assert difference <= TOLERANCE, difference


def assert_rows_equal(ours: torch.Tensor, references: list[torch.Tensor]) -> None:
    """Row ``i`` of ``ours`` equals ``references[i]`` on its real tokens and is exactly 0 after them."""
    assert ours.shape[0] == len(references)
    for row, reference in zip(ours, references):
        n = len(reference)
        assert float((row[:n] - reference).abs().max()) <= ROW_TOLERANCE
        assert not row[n:].any()


class EveryStepDrawn(tqdm):
    """The export's bar, drawing each step (tqdm's own draws at most every 0.1 s)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, mininterval=0, miniters=1, **kwargs)


def steps_drawn(monkeypatch) -> None:
    monkeypatch.setattr(export, "tqdm", EveryStepDrawn)


def bar_of(err: str) -> tuple[set[str], list[str]]:
    """The labels and the steps (``k/n``) of a bar drawn on ``err``; its rates are in steps."""
    drawn = re.findall(r"\r(.*?): +\d+%\|[^|]*\| (\d+/\d+) \[[^,\]]*(?:<[^,]*)?, ([^\]]*)\]", err)
    assert drawn and {re.sub(r"[\d.?]+", "", rate).strip() for _, _, rate in drawn} <= {"step/s", "s/step"}
    return {label for label, _, _ in drawn}, [step for _, step, _ in drawn]


# ------------------------------------------------------------------------------------ ServingModule


def test_features_of_a_padded_batch_are_each_rows_own_with_zeros_at_padding(small_roberta):
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    mask = ids.ne(small_roberta.dictionary.pad()).long()
    references = alone(small_roberta, rows)
    assert_rows_equal(serve(ServingModule(small_roberta), ids, mask), references)
    assert_rows_equal(serve(ServingModule(small_roberta), ids), references)
    assert_rows_equal(serve(ServingModule(small_roberta), ids, torch.ones_like(ids)), references)  # <pad> is padding


def test_attention_mask_zeros_make_padding_of_any_id(small_roberta):
    """Padded with ``</s>`` instead of ``<pad>``: only the mask says where the rows end."""
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    real = ids.ne(small_roberta.dictionary.pad())
    other = ids.masked_fill(~real, small_roberta.dictionary.eos())
    assert_rows_equal(serve(ServingModule(small_roberta), other, real.long()), alone(small_roberta, rows))
    mask = real.long() * 3  # any number but 0 is a real token
    assert_rows_equal(serve(ServingModule(small_roberta), other, mask), alone(small_roberta, rows))


def test_bert_segment_ids_are_derived_in_the_graph(bert_without_heads):
    rows = rows_of(bert_without_heads)
    ids, _ = bert_without_heads.collate(rows)
    references = alone(bert_without_heads, rows)
    assert_rows_equal(serve(ServingModule(bert_without_heads), ids), references)
    serving = ServingModule(bert_without_heads)
    serving.segments = None  # without them, the second segment reads segment 0's embedding
    with torch.no_grad():
        assert float((serving.eval()(ids)[0, 6:9] - references[0][6:9]).abs().max()) > 1e-3


def test_a_sentence_head_gives_predicts_logits(small_roberta):
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    serving = ServingModule(small_roberta, head="sentence_classification_head")
    with torch.no_grad():
        reference = torch.cat(
            [small_roberta.predict("sentence_classification_head", row, return_logits=True) for row in rows]
        )
    ours = serve(serving, ids, ids.ne(small_roberta.dictionary.pad()).long())
    assert ours.shape == (4, 2)
    assert float((ours - reference).abs().max()) <= ROW_TOLERANCE
    assert float((serve(serving, ids) - reference).abs().max()) <= ROW_TOLERANCE


def test_a_token_head_gives_each_tokens_logits(small_roberta):
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    tagger = small_roberta.model.token_heads["tagger"]
    with torch.no_grad():
        references = [tagger(features) for features in alone(small_roberta, rows)]
    ours = serve(ServingModule(small_roberta, head="tagger"), ids)
    assert ours.shape == (4, 12, 3)
    for row, reference in zip(ours, references):
        assert float((row[: len(reference)] - reference).abs().max()) <= ROW_TOLERANCE


@pytest.mark.parametrize(
    "pooling, normalize",
    [
        ("mean", None),
        ("cls", False),
        ("max", True),
        ("mean_sqrt_len_tokens", None),
        ("weightedmean", True),
        ("lasttoken", None),
        (["cls", "max", "mean"], True),
        (("lasttoken", "weightedmean"), False),
    ],
)
def test_pooling_pools_each_rows_real_tokens(small_roberta, pooling, normalize):
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    modes = [pooling] if isinstance(pooling, str) else list(pooling)
    serving = ServingModule(small_roberta, pooling=pooling, normalize=normalize)
    assert serving.modes == tuple(modes) and serving.normalize is bool(normalize)
    reference = pooled_by_hand(small_roberta, rows, modes, bool(normalize))
    for ours in (serve(serving, ids), serve(serving, ids, ids.ne(small_roberta.dictionary.pad()).long())):
        assert ours.shape == (4, 32 * len(modes))
        assert float((ours - reference).abs().max()) <= ROW_TOLERANCE


def test_pool_alone_pools_features_with_lengths(small_roberta):
    features = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([5, 3])
    expected = torch.stack([by_hand(features[0], "max"), by_hand(features[1, :3], "max")])
    assert torch.allclose(ServingModule(small_roberta, pooling="max").pool(features, lengths), expected)
    normalized = ServingModule(small_roberta, pooling="max", normalize=True).pool(features, lengths)
    assert torch.allclose(normalized, F.normalize(expected, dim=-1))


def test_encode_alone_gives_zeros_where_not_real(small_roberta):
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    real = ids.ne(small_roberta.dictionary.pad())
    with torch.no_grad():
        features = ServingModule(small_roberta).encode(ids, real)
    assert_rows_equal(features, alone(small_roberta, rows))


def with_settings(hub, settings: SentenceEmbedding) -> SimpleNamespace:
    """A served model (``model``, ``inputs``, ``sentence_embedding``) with other sentence-embedding settings."""
    return SimpleNamespace(model=hub.model, inputs=hub.inputs, sentence_embedding=settings)


@pytest.mark.parametrize(
    "settings, normalize, expected",
    [
        (SentenceEmbedding(), None, (("mean",), False)),
        (SentenceEmbedding(pooling=("cls", "max"), normalize=True), None, (("cls", "max"), True)),
        (SentenceEmbedding(pooling=("cls", "max"), normalize=True), False, (("cls", "max"), False)),
        (SentenceEmbedding(pooling=("lasttoken",)), True, (("lasttoken",), True)),
    ],
)
def test_model_pooling_is_the_hubs_own_setting(small_roberta, settings, normalize, expected):
    hub = with_settings(small_roberta, settings)
    serving = ServingModule(hub, pooling=export.MODEL_POOLING, normalize=normalize)
    assert (serving.modes, serving.normalize) == expected
    assert export.MODEL_POOLING == "model"
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    reference = pooled_by_hand(small_roberta, rows, expected[0], expected[1])
    assert float((serve(serving, ids) - reference).abs().max()) <= ROW_TOLERANCE


def test_model_pooling_equals_hub_embed(small_roberta):
    texts = ["Hello world!", "Hi", "A second sentence follows, longer."]
    ids, _ = small_roberta.encode_batch(texts)
    ours = serve(ServingModule(small_roberta, pooling="model"), ids, ids.ne(small_roberta.dictionary.pad()).long())
    assert float((ours - small_roberta.embed(texts)).abs().max()) <= ROW_TOLERANCE


@pytest.mark.parametrize(
    "options, output_name, input_names",
    [
        ({}, "features", ["input_ids", "attention_mask"]),
        ({"head": "tagger"}, "logits", ["input_ids", "attention_mask"]),
        ({"head": "sentence_classification_head", "attention_mask": False}, "logits", ["input_ids"]),
        ({"pooling": "mean"}, "embeddings", ["input_ids", "attention_mask"]),
        ({"pooling": "model", "attention_mask": False}, "embeddings", ["input_ids"]),
    ],
)
def test_names_of_inputs_and_output(small_roberta, options, output_name, input_names):
    serving = ServingModule(small_roberta, **options)
    assert (serving.output_name, serving.input_names) == (output_name, input_names)
    assert serving.takes_attention_mask is options.get("attention_mask", True)


def test_defaults_are_features_without_normalisation(small_roberta):
    serving = ServingModule(small_roberta)
    assert (serving.model, serving.head, serving.modes, serving.normalize) == (small_roberta.model, None, None, False)
    assert serving.normalize is False and serving.padding_idx == small_roberta.dictionary.pad() == 1
    assert serving.segments is None
    assert ServingModule(small_roberta, pooling="mean", normalize=None).normalize is False


def test_refusals_name_the_problem_in_full(small_roberta):
    with pytest.raises(ValueError) as error:
        ServingModule(small_roberta, head="tagger", pooling="mean")
    assert str(error.value) == "export either a head (head=...) or a pooling (pooling=...), not both"
    with pytest.raises(KeyError) as error:
        ServingModule(small_roberta, head="sentiment")
    assert error.value.args == (
        "no head named 'sentiment'; the model's classification heads: ['sentence_classification_head'], "
        "token heads: ['tagger']",
    )
    with pytest.raises(ValueError) as error:
        ServingModule(small_roberta, normalize=True)
    assert str(error.value) == "normalize=True normalises pooled embeddings: give a pooling too"
    with pytest.raises(ValueError) as error:
        ServingModule(small_roberta, pooling="sum")
    assert str(error.value) == (
        "pooling: unknown pooling mode 'sum'; supported: mean, cls, max, mean_sqrt_len_tokens, weightedmean, lasttoken"
    )


def test_head_and_pooling_none_with_normalize_false_is_accepted(small_roberta):
    assert ServingModule(small_roberta, head=None, pooling=None, normalize=False).output_name == "features"


def test_int8_models_are_refused_naming_the_first_layer_and_the_count(small_roberta):
    model = nn.Module()
    model.classification_heads, model.token_heads = {}, {}
    model.encoder = quantize_int8(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)))
    hub = SimpleNamespace(model=model, inputs=small_roberta.inputs, sentence_embedding=SentenceEmbedding())
    with pytest.raises(ValueError) as error:
        ServingModule(hub)
    assert str(error.value) == (
        "this model is quantized to int8 (encoder.0 and 2 more): export the float32 model (from_pretrained without "
        "dtype) and quantize the exported ONNX file with onnxruntime.quantization.quantize_dynamic"
    )
    model.encoder = quantize_int8(nn.Sequential(nn.Linear(4, 4)), activations="per_tensor")
    with pytest.raises(ValueError, match=re.escape("this model is quantized to int8 (encoder.0 and 0 more)")):
        ServingModule(hub)


def test_serving_module_equals_the_hub_on_padded_batches(roberta, bert):
    """The exported graph's eager self: the masked path equals the hub's (which packs padded batches)."""
    for hub, head in ((roberta, "sentence_classification_head"), (roberta, "tagger"), (bert, "sentiment")):
        for output in ({}, {"head": head}, {"pooling": "mean"}):
            serving = ServingModule(hub, **output).eval()
            for ids in padded_batches(hub):
                reference, where = export.hub_outputs(hub, serving, ids)
                with torch.no_grad():
                    assert_close(serving(ids, ids.ne(hub.dictionary.pad()).long()), reference, where)
                    assert_close(serving(ids), reference, where)


TEXTS = ["Hello world!", "Return the sum of a list of numbers, or zero.", "Hi", "A second sentence follows."]


@pytest.mark.parametrize(
    "pooling, normalize", [("mean", None), (["cls", "max"], True), ("model", None), ("weightedmean", False)]
)
def test_serving_module_pools_as_hub_embed(roberta, pooling, normalize):
    serving = ServingModule(roberta, pooling=pooling, normalize=normalize).eval()
    ids, _ = roberta.encode_batch(TEXTS)
    with torch.no_grad():
        ours = serving(ids, ids.ne(roberta.dictionary.pad()).long())
    reference = roberta.embed(TEXTS, pooling=None if pooling == "model" else pooling, normalize=normalize)
    assert ours.shape == reference.shape
    assert float((ours - reference).abs().max()) <= TOLERANCE


def test_bad_heads_and_poolings_are_named(roberta):
    with pytest.raises(KeyError, match=r"no head named 'sentiment'.*\['sentence_classification_head'\].*\['tagger'\]"):
        ServingModule(roberta, head="sentiment")
    with pytest.raises(ValueError, match="either a head"):
        ServingModule(roberta, head="tagger", pooling="mean")
    with pytest.raises(ValueError, match="unknown pooling mode 'sum'"):
        ServingModule(roberta, pooling="sum")
    with pytest.raises(ValueError, match="give a pooling too"):
        ServingModule(roberta, normalize=True)


# ------------------------------------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    "batch, length, lengths",
    [(4, 6, [6, 5, 4, 3]), (5, 4, [4, 3, 3, 3, 3]), (1, 1, [3]), (2, 100, [MAX_POSITIONS, MAX_POSITIONS - 1])],
)
def test_example_inputs_are_right_padded_rows_each_shorter(small_roberta, batch, length, lengths):
    ids, mask = export.example_inputs(small_roberta, batch=batch, length=length)
    dictionary = small_roberta.dictionary
    width = max(lengths)
    drawn = torch.randint(
        dictionary.nspecial, len(dictionary), (batch, width), generator=torch.Generator().manual_seed(0)
    )
    assert ids.shape == mask.shape == (batch, width) and ids.dtype == mask.dtype == torch.int64
    for row, n in enumerate(lengths):
        assert ids[row, 0] == dictionary.bos() and ids[row, n - 1] == dictionary.eos()
        assert torch.equal(ids[row, 1 : n - 1], drawn[row, 1 : n - 1])
        assert ids[row, n:].eq(dictionary.pad()).all()
        assert mask[row].tolist() == [1] * n + [0] * (width - n)


def test_example_inputs_default_to_two_rows_of_8_and_7_tokens(small_roberta):
    ids, mask = export.example_inputs(small_roberta)
    assert ids.shape == (2, 8) and mask.sum(dim=1).tolist() == [8, 7]
    assert torch.equal(ids, export.example_inputs(small_roberta, batch=2, length=8)[0])


def test_the_check_batch_is_3_rows_of_at_most_11_tokens(small_roberta):
    ids, mask = export._check_batch(small_roberta)
    assert torch.equal(ids, export.example_inputs(small_roberta, batch=3, length=11)[0])
    assert mask.sum(dim=1).tolist() == [11, 10, 9]
    short = SimpleNamespace(
        model=small_roberta.model, inputs=SimpleNamespace(max_positions=5, dictionary=small_roberta.dictionary)
    )
    assert export._check_batch(short)[1].sum(dim=1).tolist() == [5, 4, 3]


def test_hub_outputs_of_features_and_a_token_head_are_defined_on_real_tokens(small_roberta):
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    real = ids.ne(small_roberta.dictionary.pad())
    features, where = export.hub_outputs(small_roberta, ServingModule(small_roberta), ids)
    assert torch.equal(where, real) and not features.requires_grad
    references = alone(small_roberta, rows)
    for row, reference in zip(features, references):
        assert float((row[: len(reference)] - reference).abs().max()) <= ROW_TOLERANCE
    logits, where = export.hub_outputs(small_roberta, ServingModule(small_roberta, head="tagger"), ids)
    assert torch.equal(where, real) and logits.shape == (4, 12, 3)
    tagger = small_roberta.model.token_heads["tagger"]
    for row, reference in zip(logits, references):
        with torch.no_grad():
            assert float((row[: len(reference)] - tagger(reference)).abs().max()) <= ROW_TOLERANCE


def test_hub_outputs_of_a_sentence_head_and_a_pooling_are_defined_on_every_row(small_roberta):
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    every_row = torch.ones(4, dtype=torch.bool)
    logits, where = export.hub_outputs(
        small_roberta, ServingModule(small_roberta, head="sentence_classification_head"), ids
    )
    assert where.dtype == torch.bool
    with torch.no_grad():
        reference = torch.cat(
            [small_roberta.predict("sentence_classification_head", row, return_logits=True) for row in rows]
        )
    assert torch.equal(where, every_row) and not logits.requires_grad
    assert float((logits - reference).abs().max()) <= ROW_TOLERANCE
    serving = ServingModule(small_roberta, pooling=["cls", "weightedmean"], normalize=True)
    embeddings, where = export.hub_outputs(small_roberta, serving, ids)
    assert torch.equal(where, every_row) and not embeddings.requires_grad
    reference = pooled_by_hand(small_roberta, rows, ["cls", "weightedmean"], True)
    assert float((embeddings - reference).abs().max()) <= ROW_TOLERANCE


# ------------------------------------------------------------------------------------------ helpers


def test_quiet_exporter_silences_warnings_and_the_onnx_loggers_then_restores_them():
    """torch.onnx's logger, and onnxscript's ('fallback is enabled' when it converts an opset)."""
    loggers = [logging.getLogger("torch.onnx"), logging.getLogger("onnxscript")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.INFO)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with export._quiet_exporter():
                assert [logger.level for logger in loggers] == [logging.ERROR, logging.ERROR]
                warnings.warn("a note of the exporter", UserWarning, stacklevel=1)
            assert [logger.level for logger in loggers] == [logging.INFO, logging.INFO] and caught == []
            warnings.warn("ours", UserWarning, stacklevel=1)
            assert [str(w.message) for w in caught] == ["ours"]
            with pytest.raises(RuntimeError, match="^inside$"), export._quiet_exporter():
                raise RuntimeError("inside")
            assert [logger.level for logger in loggers] == [logging.INFO, logging.INFO]
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


@pytest.mark.parametrize("attention_mask, names", [(True, ["input_ids", "attention_mask"]), (False, ["input_ids"])])
def test_dynamic_shapes_are_batch_and_sequence_up_to_max_positions(small_roberta, attention_mask, names):
    shapes = export._dynamic_shapes(ServingModule(small_roberta, attention_mask=attention_mask))
    assert list(shapes) == names
    for name in names:
        assert list(shapes[name]) == [0, 1]
        batch, sequence = shapes[name][0], shapes[name][1]
        assert (batch.__name__, batch.min, sequence.__name__, sequence.min, sequence.max) == (
            "batch",
            1,
            "sequence",
            1,
            MAX_POSITIONS,
        )
        assert batch.max > 2**40


def test_the_trace_inputs_are_the_example_inputs(small_roberta):
    ids, mask = export.example_inputs(small_roberta)
    with_mask = export._trace_inputs(ServingModule(small_roberta), small_roberta)
    assert len(with_mask) == 2 and torch.equal(with_mask[0], ids) and torch.equal(with_mask[1], mask)
    (alone_ids,) = export._trace_inputs(ServingModule(small_roberta, attention_mask=False), small_roberta)
    assert torch.equal(alone_ids, ids)


# ------------------------------------------------------------------------------------------ staging


def test_staged_files_appear_together_on_commit(tmp_path):
    path = tmp_path / "new" / "folder" / "model.onnx"
    with export._staged(path) as (staged, commit):
        assert staged.name == "model.onnx" and staged.parent.parent == path.parent
        assert staged.parent.name.startswith(".model.onnx.") and staged.parent.name.endswith(".tmp")
        staged.write_bytes(b"graph")
        (staged.parent / "model.onnx.data").write_bytes(b"weights")
        assert sorted(os.listdir(path.parent)) == [staged.parent.name]
        commit()
        assert path.read_bytes() == b"graph" and (path.parent / "model.onnx.data").read_bytes() == b"weights"
    assert sorted(os.listdir(path.parent)) == ["model.onnx", "model.onnx.data"]


def test_staged_files_replace_an_existing_file_only_on_commit(tmp_path):
    path = tmp_path / "model.pt2"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="^failed$"), export._staged(path) as (staged, _):
        staged.write_bytes(b"new")
        raise RuntimeError("failed")
    with export._staged(path) as (staged, _):
        staged.write_bytes(b"never committed")
    assert os.listdir(tmp_path) == ["model.pt2"] and path.read_bytes() == b"old"
    with export._staged(path) as (staged, commit):
        staged.write_bytes(b"new")
        commit()
    assert os.listdir(tmp_path) == ["model.pt2"] and path.read_bytes() == b"new"


# -------------------------------------------------------------------------------------------- check


def test_check_returns_the_largest_difference_where_defined():
    reference = torch.tensor([[0.5, -0.25, 7.0], [0.0, 0.125, 9.0]])
    where = torch.tensor([[True, True, False], [True, True, False]])
    ours = reference + torch.tensor([[0.0, 0.00005, 100.0], [-0.00006, 0.0, -100.0]])
    difference = export._check(Path("m.onnx"), ours.double(), reference, where)
    assert difference == pytest.approx(0.00006, rel=1e-3)
    assert export._check(Path("m.onnx"), reference, reference, where) == 0.0
    assert export._check(Path("m.onnx"), reference.double() * (1 + 1e-12), reference, where) == 0.0  # in float32
    assert export.CHECK_TOLERANCE == 1e-4


def test_check_allows_a_difference_relative_to_outputs_above_1():
    reference = torch.tensor([100.0, -512.0, 3.0])
    where = torch.tensor([True, True, False])
    assert export._check(Path("m"), reference + torch.tensor([0.0, 0.03125, 0.0]), reference, where) == 0.03125
    assert export._check(Path("m"), reference + 8, reference, where, dtype=torch.float16) == 8  # 512 * 2**-6
    with pytest.raises(ExportCheckError) as error:
        export._check(Path("out/m.onnx"), reference + torch.tensor([0.0, 0.0625, 0.0]), reference, where)
    assert str(error.value) == (
        "out/m.onnx: the exported graph's outputs differ from the model's by up to 0.0625 on a padded batch "
        "(allowed in float32: 0.0512); out/m.onnx was not written (check=False, --no-check, writes it unchecked)"
    )
    assert isinstance(error.value, RuntimeError)


@pytest.mark.parametrize(
    "reference, ours, message",
    [
        ([0.5, 1.0], [0.5, 1.00025], "up to 0.00025 on a padded batch (allowed in float32: 0.0001)"),
        ([0.5, 0.25], [0.5, 0.2505], "up to 0.0005 on a padded batch (allowed in float32: 0.0001)"),
        ([0.5, 2.0], [0.5, math.nan], "up to nan on a padded batch (allowed in float32: 0.0002)"),
    ],
)
def test_check_refuses_differences_above_the_tolerance_and_nan(reference, ours, message):
    with pytest.raises(ExportCheckError) as error:
        export._check(Path("m.pt2"), torch.tensor(ours), torch.tensor(reference), torch.tensor([True, True]))
    assert (
        str(error.value)
        == f"m.pt2: the exported graph's outputs differ from the model's by {message}; m.pt2 was not written "
        "(check=False, --no-check, writes it unchecked)"
    )


def test_check_tolerance_is_inclusive():
    reference, where = torch.tensor([0.0, 2.0]), torch.tensor([True, True])
    assert export._check(Path("m"), torch.tensor([0.0, 2.25]), reference, where, dtype=torch.bfloat16) == 0.25


def test_the_check_allows_what_a_half_precision_dtype_can_meet():
    """float16 was checked at float32's 1e-4 and always failed (0.0049 against 0.00035 allowed):
    half precision gets 16 of its eps (float16 ONNX files measured 1.9-5.5 eps from the float16
    model), compared in float32, and the message says the dtype and how to skip the check."""
    assert export.check_tolerance(torch.float32) == export.CHECK_TOLERANCE == 1e-4
    assert export.check_tolerance(torch.float16) == 16 * torch.finfo(torch.float16).eps == 2**-6
    assert export.check_tolerance(torch.bfloat16) == 16 * torch.finfo(torch.bfloat16).eps == 2**-3
    reference = torch.tensor([3.5, -1.0], dtype=torch.float16)
    ours = reference.float() + torch.tensor([0.0049, 0.0])  # the issue's difference, in float16's ulps
    where = torch.tensor([True, True])
    assert export._check(Path("m.onnx"), ours, reference, where, dtype=torch.float16) == pytest.approx(0.0049, rel=1e-3)
    with pytest.raises(ExportCheckError) as error:
        export._check(Path("m.onnx"), ours, reference.float(), where)  # the same files in float32
    assert "(allowed in float32: 0.00035); m.onnx was not written (check=False, --no-check" in str(error.value)
    with pytest.raises(ExportCheckError, match=r"by up to 0\.1 .*\(allowed in float16: 0\.0547\)"):
        export._check(Path("m.onnx"), reference.float() + 0.1, reference, where, dtype=torch.float16)


# ------------------------------------------------------------------------------------- torch.export


def run_program(path: Path, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    module = torch.export.load(path).module()
    with torch.no_grad():
        return module(ids) if mask is None else module(ids, mask)


def test_export_program_traces_every_option_in_eval_mode_with_dynamic_axes(small_roberta):
    small_roberta.model.train()
    try:
        program = export.export_program(small_roberta, pooling=["cls", "max"], normalize=True, attention_mask=False)
        assert small_roberta.model.training and all(sub.training for sub in small_roberta.model.modules())
    finally:
        small_roberta.model.eval()
    rows = rows_of(small_roberta, lengths=(MAX_POSITIONS,))
    ids, _ = small_roberta.collate(rows)
    with torch.no_grad():
        ours = program.module()(ids)
    assert float((ours - pooled_by_hand(small_roberta, rows, ["cls", "max"], True)).abs().max()) <= ROW_TOLERANCE
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    program = export.export_program(small_roberta, head="tagger")
    with torch.no_grad():
        ours = program.module()(ids, ids.ne(small_roberta.dictionary.pad()).long())
    assert torch.allclose(ours, serve(ServingModule(small_roberta, head="tagger"), ids), atol=ROW_TOLERANCE)


def test_to_torch_export_writes_a_checked_program(small_roberta, tmp_path, capsys, monkeypatch):
    path = tmp_path / "new" / "model.pt2"
    steps_drawn(monkeypatch)
    assert (
        export.to_torch_export(small_roberta, str(path), pooling="model", attention_mask=False, progress=True) == path
    )
    assert os.listdir(path.parent) == ["model.pt2"]
    err = capsys.readouterr().err
    assert bar_of(err) == ({"export model.pt2"}, ["0/3", "1/3", "2/3", "3/3"])
    assert err.endswith("\r") and "\n" not in err  # not left on the screen
    rows = rows_of(small_roberta, lengths=(1 + MAX_POSITIONS // 2, 5, 3))
    ids, _ = small_roberta.collate(rows)
    assert torch.allclose(
        run_program(path, ids, None), pooled_by_hand(small_roberta, rows, ["mean"], False), atol=ROW_TOLERANCE
    )


def test_to_torch_export_unchecked_with_a_head_and_the_mask(small_roberta, tmp_path, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("checked")

    monkeypatch.setattr(export, "_check", never)
    steps_drawn(monkeypatch)
    path = export.to_torch_export(
        small_roberta, tmp_path / "head.pt2", head="sentence_classification_head", check=False, progress=True
    )
    assert bar_of(capsys.readouterr().err) == ({"export head.pt2"}, ["0/2", "1/2", "2/2"])
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    ours = run_program(path, ids, ids.ne(small_roberta.dictionary.pad()).long())
    with torch.no_grad():
        reference = torch.cat(
            [small_roberta.predict("sentence_classification_head", row, return_logits=True) for row in rows]
        )
    assert float((ours - reference).abs().max()) <= ROW_TOLERANCE


def test_to_torch_export_normalises_pooled_embeddings(small_roberta, tmp_path):
    path = export.to_torch_export(small_roberta, tmp_path / "cls.pt2", pooling="cls", normalize=True, check=False)
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    ours = run_program(path, ids, ids.ne(small_roberta.dictionary.pad()).long())
    assert float((ours - pooled_by_hand(small_roberta, rows, ["cls"], True)).abs().max()) <= ROW_TOLERANCE


def off_by_one(monkeypatch):
    """Make every check fail: the hub's outputs plus 1; returns what the message then says is allowed."""
    hub_outputs = export.hub_outputs
    allowed = []

    def shifted(*args, **kwargs):
        reference, where = hub_outputs(*args, **kwargs)
        allowed.append(export.CHECK_TOLERANCE * max(1.0, float((reference + 1)[where].abs().max())))
        return reference + 1, where

    monkeypatch.setattr(export, "hub_outputs", shifted)
    return allowed


def test_a_failed_torch_export_check_writes_nothing_and_keeps_the_old_file(
    small_roberta, tmp_path, monkeypatch, capsys
):
    path = tmp_path / "model.pt2"
    path.write_bytes(b"old")
    allowed = off_by_one(monkeypatch)
    with pytest.raises(ExportCheckError) as error:
        export.to_torch_export(small_roberta, path, head="tagger")
    assert str(error.value) == (
        f"{path}: the exported graph's outputs differ from the model's by up to 1 on a padded batch "
        f"(allowed in float32: {allowed[0]:.3g}); {path} was not written (check=False, --no-check, writes it unchecked)"
    )
    assert os.listdir(tmp_path) == ["model.pt2"] and path.read_bytes() == b"old"
    assert capsys.readouterr().err == ""  # no bar unless asked


@pytest.mark.parametrize(
    "hub_name, output, attention_mask",
    [
        ("roberta", {}, False),
        ("roberta", {"pooling": "cls"}, True),
        ("bert", {"head": "sentiment"}, True),
    ],
)
def test_torch_export_round_trip(request, tmp_path, hub_name, output, attention_mask):
    hub = request.getfixturevalue(hub_name)
    path = export.to_torch_export(hub, tmp_path / "model.pt2", attention_mask=attention_mask, **output)
    module = torch.export.load(path).module()
    serving = ServingModule(hub, **output)
    for ids in padded_batches(hub):
        reference, where = export.hub_outputs(hub, serving, ids)
        with torch.no_grad():
            ours = module(ids, ids.ne(hub.dictionary.pad()).long()) if attention_mask else module(ids)
        assert_close(ours, reference, where)


# --------------------------------------------------------------------------------------------- ONNX


def onnx_inputs_outputs(path: Path) -> tuple[dict[str, list], int]:
    onnx = require("onnx", "reading the exported files")
    model = onnx.load(str(path))
    dims = {
        value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        for value in [*model.graph.input, *model.graph.output]
    }
    (opset,) = [entry.version for entry in model.opset_import if entry.domain == ""]
    return dims, opset


def run_onnx(path: Path, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> np.ndarray:
    onnxruntime = require("onnxruntime", "the exported files are run by it")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": input_ids.numpy()}
    if attention_mask is not None:
        feeds["attention_mask"] = attention_mask.numpy()
    assert [i.name for i in session.get_inputs()] == list(feeds)
    (out,) = session.run(None, feeds)
    return out


def run_onnx_tensor(path: Path, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """The graph's output as a tensor (:func:`run_onnx` gives an array and checks the input names)."""
    onnxruntime = require("onnxruntime", "the exported files are run by it")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": ids.numpy()} if mask is None else {"input_ids": ids.numpy(), "attention_mask": mask.numpy()}
    (out,) = session.run(None, feeds)
    return torch.from_numpy(out)


@pytest.fixture
def onnx_exporter():
    for module in ("onnx", "onnxscript", "onnxruntime"):
        require(module, "exporting to ONNX and running the files")


def test_to_onnx_writes_a_checked_graph_with_its_names_axes_and_opset(
    small_roberta, tmp_path, capsys, onnx_exporter, monkeypatch
):
    path = tmp_path / "new" / "tagger.onnx"
    steps_drawn(monkeypatch)
    assert (
        export.to_onnx(small_roberta, str(path), head="tagger", attention_mask=False, opset=17, progress=True) == path
    )
    assert os.listdir(path.parent) == ["tagger.onnx"]
    captured = capsys.readouterr()
    assert bar_of(captured.err) == ({"export tagger.onnx"}, ["0/3", "1/3", "2/3", "3/3"])
    assert captured.err.endswith("\r") and "\n" not in captured.err
    assert captured.out == ""
    dims, opset = onnx_inputs_outputs(path)
    # 17 is converted from the exporter's 18: the file carries the opset asked for.
    assert dims == {"input_ids": ["batch", "sequence"], "logits": ["batch", "sequence", 3]} and opset == 17
    rows = rows_of(small_roberta, lengths=(5, MAX_POSITIONS, 3))
    ids, _ = small_roberta.collate(rows)
    ours = run_onnx_tensor(path, ids)
    tagger = small_roberta.model.token_heads["tagger"]
    with torch.no_grad():
        for row, features in zip(ours, alone(small_roberta, rows)):
            assert float((row[: len(features)] - tagger(features)).abs().max()) <= ROW_TOLERANCE


def test_to_onnx_unchecked_pooling_with_the_mask_at_the_default_opset(
    small_roberta, tmp_path, onnx_exporter, monkeypatch
):
    def never(*args, **kwargs):
        raise AssertionError("checked")

    monkeypatch.setattr(export, "_check_onnx", never)
    path = export.to_onnx(small_roberta, tmp_path / "pooled.onnx", pooling=["cls", "max"], normalize=True, check=False)
    dims, opset = onnx_inputs_outputs(path)
    assert dims == {
        "input_ids": ["batch", "sequence"],
        "attention_mask": ["batch", "sequence"],
        "embeddings": ["batch", 64],
    }
    assert opset == export.DEFAULT_OPSET == 20
    rows = rows_of(small_roberta, lengths=(7,))
    ids, _ = small_roberta.collate(rows)
    ours = run_onnx_tensor(path, ids, torch.ones_like(ids))
    assert float((ours - pooled_by_hand(small_roberta, rows, ["cls", "max"], True)).abs().max()) <= ROW_TOLERANCE


def test_a_failed_onnx_check_writes_nothing_and_keeps_the_old_file(small_roberta, tmp_path, onnx_exporter, monkeypatch):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"old")
    allowed = off_by_one(monkeypatch)
    with pytest.raises(ExportCheckError) as error:
        export.to_onnx(small_roberta, path, pooling="mean")
    assert str(error.value) == (
        f"{path}: the exported graph's outputs differ from the model's by up to 1 on a padded batch "
        f"(allowed in float32: {allowed[0]:.3g}); {path} was not written (check=False, --no-check, writes it unchecked)"
    )
    assert os.listdir(tmp_path) == ["model.onnx"] and path.read_bytes() == b"old"


def test_without_onnxruntime_the_file_is_written_unchecked_with_a_warning(
    small_roberta, tmp_path, onnx_exporter, monkeypatch, capsys
):
    path = tmp_path / "features.onnx"
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.warns(UserWarning) as record:
        export.to_onnx(small_roberta, path)
    assert [str(warning.message) for warning in record] == [
        f"onnxruntime is not installed: {path} was written unchecked"
    ]
    # It names the caller's line (here this file; under mutmut, whose trampolines add frames, one of them).
    assert record[0].filename != export.__file__
    assert capsys.readouterr().err == ""  # no bar unless asked
    monkeypatch.undo()
    rows = rows_of(small_roberta)
    ids, _ = small_roberta.collate(rows)
    assert_rows_equal(
        run_onnx_tensor(path, ids, ids.ne(small_roberta.dictionary.pad()).long()), alone(small_roberta, rows)
    )


def test_opsets_and_dtypes_onnx_cannot_carry_are_refused_before_any_work(small_roberta, tmp_path, monkeypatch):
    """``--opset 9`` once printed onnxscript's error and wrote an opset-18 file; a bfloat16 file
    ended in onnxruntime's NOT_IMPLEMENTED traceback: both are refused before the export starts."""

    def never(*args, **kwargs):
        raise AssertionError("exported")

    monkeypatch.setattr(torch.onnx, "export", never)
    assert list(export.ONNX_OPSETS) == [17, 18, 19, 20, 21, 22]
    for opset in (9, 16, 23, 25):
        with pytest.raises(ValueError) as error:
            export.to_onnx(small_roberta, tmp_path / "m.onnx", opset=opset)
        assert str(error.value) == (
            f"opset {opset}: ONNX files are written at opsets 17 to 22 (default 20): torch's exporter cannot "
            "convert its graph to older ones, and onnxruntime cannot run the attention it writes at newer ones"
        )
    in_bfloat16 = SimpleNamespace(model=SimpleNamespace(dtype=torch.bfloat16))  # nothing else is read
    with pytest.raises(ValueError, match=r"^ONNX files in bfloat16 cannot be run by onnxruntime's CPU provider"):
        export.to_onnx(in_bfloat16, tmp_path / "m.onnx")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"or as a torch.export \.pt2 file \(--format torch-export\)"):
        export.check_onnx_options(dtype="bfloat16")
    export.check_onnx_options(dtype="float16", opset=17)
    export.check_onnx_options(dtype=torch.float32, opset=22)
    assert os.listdir(tmp_path) == []


def test_a_file_without_the_opset_asked_for_is_not_written(small_roberta, tmp_path, onnx_exporter, monkeypatch):
    """The exporter keeps its own opset 18 where it cannot convert (opset 9 here, let past the
    refusal): the file is not written under a name that says otherwise."""
    monkeypatch.setattr(export, "check_onnx_options", lambda **options: None)
    path = tmp_path / "m.onnx"
    with pytest.raises(ExportCheckError) as error:
        export.to_onnx(small_roberta, path, opset=9, check=False)
    assert str(error.value) == f"{path}: torch's exporter wrote opset 18, not the 9 asked for; {path} was not written"
    assert os.listdir(tmp_path) == []


def test_a_file_onnxruntime_cannot_run_is_one_line_and_not_written(small_roberta, tmp_path, onnx_exporter, monkeypatch):
    """onnxruntime's own errors (not Python's) once ended the command in a traceback."""
    onnxruntime = require("onnxruntime", "the exported files are run by it")
    from onnxruntime.capi.onnxruntime_pybind11_state import NotImplemented as OrtNotImplemented

    def refuse(*args, **kwargs):
        raise OrtNotImplemented(
            "[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not find an implementation for Add(14) node\nmore"
        )

    monkeypatch.setattr(onnxruntime, "InferenceSession", refuse)
    path = tmp_path / "model.onnx"
    with pytest.raises(ExportCheckError) as error:
        export.to_onnx(small_roberta, path)
    assert str(error.value) == (
        f"{path}: onnxruntime cannot run the exported graph ([ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not "
        f"find an implementation for Add(14) node); {path} was not written (check=False, --no-check, writes it "
        "unchecked)"
    )
    assert os.listdir(tmp_path) == []


@pytest.fixture(scope="module")
def onnx_files(roberta_dir, roberta, bert, tmp_path_factory) -> dict[str, Path]:
    """Each graph exported once: RoBERTa's features, sentence head and max pooling through the
    API, its mean pooling through the command; BERT's token head taking input_ids alone."""
    for module in ("onnx", "onnxscript", "onnxruntime"):
        require(module, "exporting to ONNX and running the files")
    folder = tmp_path_factory.mktemp("onnx")
    files = {
        "features": roberta.export_onnx(folder / "features.onnx"),
        "sentence_head": roberta.export_onnx(folder / "head.onnx", head="sentence_classification_head"),
        "max": export.to_onnx(roberta, folder / "max.onnx", pooling="max"),
        "bert_tagger": bert.export_onnx(folder / "bert.onnx", head="tagger", attention_mask=False),
    }
    assert export_main([str(roberta_dir), "--pooling", "mean", "--output", str(folder / "mean.onnx")]) == 0
    files["mean"] = folder / "mean.onnx"
    return files


@pytest.mark.parametrize(
    "name, output",
    [
        ("features", {}),
        ("sentence_head", {"head": "sentence_classification_head"}),
        ("mean", {"pooling": "mean"}),
        ("max", {"pooling": "max"}),
    ],
)
def test_onnx_equals_the_hub_on_other_shapes_and_padding(onnx_files, roberta, name, output):
    serving = ServingModule(roberta, **output)
    for ids in padded_batches(roberta):
        reference, where = export.hub_outputs(roberta, serving, ids)
        assert_close(run_onnx(onnx_files[name], ids, ids.ne(roberta.dictionary.pad()).long()), reference, where)
    if "pooling" in output:  # and equal to hub.embed on text
        ids, _ = roberta.encode_batch(TEXTS)
        embeddings = run_onnx(onnx_files[name], ids, ids.ne(roberta.dictionary.pad()).long())
        assert_close(embeddings, roberta.embed(TEXTS, **output), torch.ones(len(TEXTS), dtype=torch.bool))


def test_onnx_attention_mask_contract(onnx_files, roberta):
    """Padding is where attention_mask is 0 or the id is <pad>: a mask of ones over <pad>
    padding, and a mask of zeros over padding by any other id, give the hub's features."""
    pad = roberta.dictionary.pad()
    serving = ServingModule(roberta)
    for ids in padded_batches(roberta):
        reference, real = export.hub_outputs(roberta, serving, ids)
        ones = run_onnx(onnx_files["features"], ids, torch.ones_like(ids))
        assert_close(ones, reference, real)
        other = ids.masked_fill(~real, roberta.dictionary.eos())  # no <pad> left: only the mask says
        masked = run_onnx(onnx_files["features"], other, real.long())
        assert_close(masked, reference, real)
        assert not masked[(~real).numpy()].any()  # zeros at padding
        assert bool(ids.eq(pad).any()) != bool(real.all())


def test_onnx_bert_token_head_with_input_ids_alone(onnx_files, bert):
    """Segment ids derived in the graph, absolute positions, a token head; no attention_mask input."""
    serving = ServingModule(bert, head="tagger")
    for ids in padded_batches(bert):
        reference, where = export.hub_outputs(bert, serving, ids)
        assert_close(run_onnx(onnx_files["bert_tagger"], ids), reference, where)


def test_onnx_inputs_outputs_and_axes(onnx_files):
    onnx = require("onnx", "reading the exported files")
    model = onnx.load(str(onnx_files["mean"]))
    dims = {
        value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        for value in [*model.graph.input, *model.graph.output]
    }
    assert list(dims) == ["input_ids", "attention_mask", "embeddings"]
    assert dims["input_ids"] == dims["attention_mask"] == ["batch", "sequence"]
    assert dims["embeddings"] == ["batch", 32]
    assert model.graph.input[0].type.tensor_type.elem_type == onnx.TensorProto.INT64


# -------------------------------------------------------------------------------------- the command


def test_the_command_splits_a_list_of_poolings_on_commas(roberta_dir, roberta, tmp_path):
    """``--pooling mean,cls`` is two modes concatenated, as ``hub.embed(pooling=["mean", "cls"])``
    (issue 37: an unsplit "mean,cls" would be one unknown mode)."""
    path = tmp_path / "two.pt2"
    assert export_main([str(roberta_dir), "--pooling", "mean,cls", "--output", str(path)]) == 0
    module = torch.export.load(path).module()
    ids = padded_batches(roberta)[0]
    with torch.no_grad():
        ours = module(ids, ids.ne(roberta.dictionary.pad()).long())
    assert ours.shape == (len(ids), 2 * roberta.model.cfg.encoder_embed_dim)
    reference = ServingModule(roberta, pooling=["mean", "cls"])
    expected, where = export.hub_outputs(roberta, reference, ids)
    assert_close(ours, expected, where)


def test_help_describes_the_contract(capsys):
    with pytest.raises(SystemExit) as exit_:
        export_main(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for words in ("--format {onnx,torch-export}", "--head NAME", "--pooling MODE[,MODE]", "attention_mask"):
        assert words in text


def test_command_bad_head_names_the_heads_and_writes_nothing(roberta_dir, tmp_path, capsys):
    output = tmp_path / "model.onnx"
    assert export_main([str(roberta_dir), "--head", "nli", "--output", str(output)]) == 1
    error = capsys.readouterr().err
    assert "roberta-ext export: error: no head named 'nli'" in error
    assert "['sentence_classification_head']" in error and "['tagger']" in error
    assert list(tmp_path.iterdir()) == []


def test_command_refuses_to_overwrite_without_force(roberta_dir, tmp_path, capsys):
    output = tmp_path / "model.pt2"
    output.write_text("mine")
    assert export_main([str(roberta_dir), "--format", "torch-export", "--output", str(output)]) == 1
    assert "refusing to overwrite" in capsys.readouterr().err and output.read_text() == "mine"
    assert export_main([str(roberta_dir), "--format", "torch-export", "--output", str(output), "--force"]) == 0
    assert torch.export.load(output).module()(torch.tensor([[0, 5, 2], [0, 2, 1]]), torch.ones(2, 3)).shape == (
        2,
        3,
        32,
    )


def test_the_format_follows_the_suffix_and_an_explicit_format_wins(roberta_dir, roberta, tmp_path, capsys):
    """``--output y.pt2`` once wrote an ONNX file under that name: the suffix now says
    torch.export; ``--format`` wins over it, and the command says so. No progress bar off a
    terminal (stderr here is not one), none in Python unless asked."""
    ids, mask = torch.tensor([[0, 5, 2], [0, 2, 1]]), torch.ones(2, 3, dtype=torch.long)
    output = tmp_path / "y.pt2"
    assert export_main([str(roberta_dir), "--output", str(output), "--pooling", "mean", "--no-check"]) == 0
    assert torch.export.load(output).module()(ids, mask).shape == (2, 32)  # a torch.export program
    err = capsys.readouterr().err
    assert "export y.pt2" not in err and "note:" not in err  # no progress bar, no contradiction
    export.to_torch_export(roberta, tmp_path / "quiet.pt2", check=False)
    assert capsys.readouterr().err == ""  # the library shows no bar unless progress=True
    for module in ("onnx", "onnxscript"):
        require(module, "exporting to ONNX")
    onnx_named_pt2 = tmp_path / "z.pt2"
    assert export_main([str(roberta_dir), "--format", "onnx", "--output", str(onnx_named_pt2), "--no-check"]) == 0
    assert "note: writing onnx to" in capsys.readouterr().err
    import onnx

    assert onnx.load(str(onnx_named_pt2)).graph.output[0].name == "features"
    assert export_main([str(roberta_dir), "--output", str(tmp_path / "m.onnx"), "--opset", "22", "--no-check"]) == 0
    written = onnx.load(str(tmp_path / "m.onnx"))
    assert written.graph.output[0].name == "features"
    assert [(entry.domain, entry.version) for entry in written.opset_import if entry.domain == ""] == [("", 22)]
    assert export_main([str(roberta_dir), "--output", str(tmp_path / "m2.pt2"), "--opset", "18"]) == 1
    assert "--opset is for ONNX files" in capsys.readouterr().err


def test_what_onnx_cannot_carry_is_refused_in_one_line_before_the_model_loads(tmp_path, capsys):
    """bfloat16 ended in onnxruntime's traceback, --opset 9 in onnxscript's 15 lines and an
    opset-18 file: each is now one line, before any work (MODEL does not even exist here)."""
    missing = str(tmp_path / "no-such-model")
    refusals = {
        ("--dtype", "bfloat16"): "ONNX files in bfloat16 cannot be run by onnxruntime's CPU provider",
        ("--opset", "9"): "opset 9: ONNX files are written at opsets 17 to 22 (default 20)",
        ("--opset", "23"): "opset 23: ONNX files are written at opsets 17 to 22 (default 20)",
        ("--dtype", "int8"): "int8 models are not exported: export the float32 model, then quantize",
    }
    for option, message in refusals.items():
        assert export_main([missing, *option, "--output", str(tmp_path / "m.onnx")]) == 1
        err = capsys.readouterr().err
        assert err.startswith("roberta-ext export: error: ") and message in err, err
        assert err.count("\n") == 1, err
    assert os.listdir(tmp_path) == []


def test_float16_onnx_is_written_and_checked_at_what_float16_can_meet(roberta_dir, tmp_path, capsys):
    """``--dtype float16`` always failed the check (0.0049 against float32's 0.00035)."""
    for module in ("onnx", "onnxscript", "onnxruntime"):
        require(module, "exporting to ONNX and running the files")
    import onnx

    output = tmp_path / "m16.onnx"
    assert export_main([str(roberta_dir), "--dtype", "float16", "--output", str(output)]) == 0, capsys.readouterr()
    assert onnx.load(str(output)).graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT16
    hub = roberta_ext.from_pretrained(str(roberta_dir), dtype="float16")
    ids = padded_batches(hub)[1]
    features = torch.from_numpy(run_onnx(output, ids, ids.ne(hub.dictionary.pad()).long())).float()
    with torch.no_grad():
        reference = hub.extract_features(ids).float()
    real = ids.ne(hub.dictionary.pad())
    scale = max(1.0, float(reference[real].abs().max()))
    difference = float((features - reference)[real].abs().max())
    assert 0 < difference <= export.check_tolerance(torch.float16) * scale
    # The way the bfloat16 refusal names: a .pt2 file keeps bfloat16 (and equals the model exactly).
    assert export_main([str(roberta_dir), "--dtype", "bfloat16", "--output", str(tmp_path / "m.pt2")]) == 0


def test_a_file_is_written_whole_or_not_at_all(roberta, tmp_path, monkeypatch):
    """A failed check, or an interrupt while saving, leaves no file and no temporary, and an
    existing file as it was."""
    output = tmp_path / "model.pt2"
    output.write_text("old")
    hub_outputs = export.hub_outputs

    def off_by_one(*args, **kwargs):
        reference, where = hub_outputs(*args, **kwargs)
        return reference + 1, where

    monkeypatch.setattr(export, "hub_outputs", off_by_one)
    with pytest.raises(ExportCheckError, match=f"{output}: the exported graph's outputs differ .* up to 1 "):
        export.to_torch_export(roberta, output, pooling="mean")
    monkeypatch.undo()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch.export, "save", interrupted)
    with pytest.raises(KeyboardInterrupt):
        export.to_torch_export(roberta, output)
    assert os.listdir(tmp_path) == ["model.pt2"] and output.read_text() == "old"


def test_int8_models_are_not_exported(roberta_dir):
    hub = roberta_ext.from_pretrained(str(roberta_dir), dtype="int8")
    with pytest.raises(ValueError, match="quantized to int8.*export the float32 model"):
        ServingModule(hub)
    hub = roberta_ext.from_pretrained(str(roberta_dir))
    quantize_int8(hub.model, activations="per_tensor")
    with pytest.raises(ValueError, match="quantized to int8"):
        ServingModule(hub)


# --------------------------------------------------------------------------------------------- int8


@pytest.fixture(scope="module")
def int8(roberta_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecation notice or other warning on the way
        return roberta_ext.from_pretrained(str(roberta_dir), dtype="int8")


def test_int8_quantizes_every_linear_layer(int8):
    linear = [name for name, module in int8.model.named_modules() if type(module) is nn.Linear]
    quantized = [name for name, module in int8.model.named_modules() if isinstance(module, Int8Linear)]
    assert linear == []
    # 2 layers x (q, k, v, out, fc1, fc2) + the LM head's dense + the sentence head's 2 + the token head's 1
    assert len(quantized) == 2 * 6 + 1 + 2 + 1
    fc1 = int8.model.encoder.sentence_encoder.layers[0].fc1
    assert fc1.weight.dtype == torch.int8 and fc1.weight.shape == (32, 64) and fc1.weight_scale.shape == (64,)


def test_int8_linear_is_exact_on_its_own_grid():
    """Against a plain fp32 reading of the same arithmetic: int8 weights times their row scales,
    inputs rounded to 127 levels per token. The int32 sums are exact, so only float rounding differs."""
    linear = nn.Linear(48, 24)
    quantized = Int8Linear.from_linear(linear)
    x = torch.randn(2, 7, 48, generator=torch.Generator().manual_seed(0))
    x[..., 5] = 30.0  # an outlier dimension, as trained BERTs have
    weight = quantized.weight.float().T * quantized.weight_scale[:, None]  # (out, in), dequantized
    scale = x.abs().amax(dim=-1, keepdim=True) / 127
    expected = F.linear(torch.round(x / scale) * scale, weight, linear.bias)
    assert torch.allclose(quantized(x), expected, atol=1e-5)
    assert float((weight - linear.weight.detach()).abs().max()) <= float(quantized.weight_scale.max()) / 2 + 1e-7
    with torch.no_grad():
        assert float(F.cosine_similarity(quantized(x), linear(x), dim=-1).min()) > 0.999


def test_int8_linear_work_buffers_never_leak_between_calls():
    """The layers share per-thread work buffers: a call's answer does not depend on the calls
    before it (larger, smaller, in or out of inference mode, on other threads), and the output is
    the caller's own tensor, not a view of a buffer the next call overwrites."""
    generator = torch.Generator().manual_seed(0)
    wide, narrow = Int8Linear.from_linear(nn.Linear(96, 40)), Int8Linear.from_linear(nn.Linear(40, 96))
    inputs = [torch.randn(rows, 96, generator=generator) for rows in (3, 50, 1, 17)]
    alone = [narrow(wide(x)) for x in inputs]
    first = alone[0].clone()
    for x, expected in zip(reversed(inputs), reversed(alone)):
        with torch.inference_mode():
            assert torch.equal(narrow(wide(x)), expected)
        assert torch.equal(narrow(wide(x)), expected)
    assert torch.equal(alone[0], first)  # not overwritten by the later calls
    assert wide(inputs[0].requires_grad_()).requires_grad is False  # inference only, and no error

    answers: dict[int, bool] = {}

    def worker(index: int) -> None:
        answers[index] = all(torch.equal(narrow(wide(x)), y) for x, y in zip(inputs * 20, alone * 20))

    threads = [threading.Thread(target=worker, args=(index,)) for index in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == {0: True, 1: True, 2: True, 3: True}


def test_int8_per_tensor_uses_all_8_bits_where_the_cpu_allows():
    """fbgemm's fused kernel, one scale per input tensor; 8-bit inputs where the CPU has VNNI (torch's
    own layer always asks for 7), and the choice changes the kernel's answer."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    assert full_range_activations() == any(f" {flag}" in flags for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))
    linear = nn.Linear(64, 32)
    model = quantize_int8(nn.Sequential(linear), activations="per_tensor")
    assert isinstance(model[0], PerTensorInt8Linear) and model[0].reduce_range is not full_range_activations()
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))
    x[:, 0] = 30.0
    exact = torch.ops.quantized.linear_dynamic(x, model[0]._packed_params._packed_params, reduce_range=False)
    model[0].reduce_range = False
    assert torch.equal(model(x), exact)
    model[0].reduce_range = True
    assert not torch.equal(model(x), exact)
    with torch.no_grad():
        assert float(F.cosine_similarity(model(x), linear(x), dim=-1).min()) > 0.99
    with pytest.raises(ValueError, match="activations='per_row': choose one of per_token, per_tensor"):
        quantize_int8(nn.Sequential(nn.Linear(4, 4)), activations="per_row")


def test_int8_keeps_shared_layers_shared(tmp_path):
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    model = quantize_int8(RobertaModel(preset("albert-tiny")).eval())
    layers = model.encoder.sentence_encoder.layers
    assert layers[0] is layers[1] and isinstance(layers[1].fc1, Int8Linear)
    calibration = [torch.randint(4, 30, (2, 9))]
    model = quantize_int8(RobertaModel(preset("albert-tiny")).eval(), calibration=calibration)
    layers = model.encoder.sentence_encoder.layers
    assert layers[0] is layers[1] and layers[1].fc1.input_scale is not None


def test_int8_smooths_the_layers_that_read_the_residual_stream(int8):
    """``from_pretrained(dtype="int8")`` calibrates: each layer's q/k/v and fc1 are smoothed, the
    layers that read the attention's or the feed-forward's inner outputs and the heads are not."""
    smoothed = {name for name, module in int8.model.named_modules() if getattr(module, "input_scale", None) is not None}
    assert smoothed == {
        f"encoder.sentence_encoder.layers.{i}.{part}"
        for i in range(2)
        for part in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "fc1")
    }


def test_int8_calibration_reads_each_layers_input(roberta):
    """The maxima calibration records for layer i's q/k/v are those of the hidden state it reads
    (the embeddings for layer 0); the calibration rows are framed texts of the model's symbols."""
    (batch,) = calibration_batches(roberta.inputs, rows=3, length=20)
    dictionary = roberta.dictionary
    assert batch.shape == (3, 20) and bool((batch[:, 0] == dictionary.bos()).all())
    assert bool((batch[:, -1] == dictionary.eos()).all())
    assert int(batch[:, 1:-1].min()) >= dictionary.nspecial and int(batch.max()) < len(dictionary)
    assert torch.equal(batch, calibration_batches(roberta.inputs, rows=3, length=20)[0])  # reproducible
    assert calibration_batches(roberta.inputs, length=1000)[0].shape == (8, roberta.inputs.max_positions)
    layers = roberta.model.encoder.sentence_encoder.layers
    queries = [layer.self_attn.q_proj for layer in layers]
    maxima = input_maxima(roberta.model, queries, [batch])
    with torch.no_grad():
        states = roberta.extract_features(batch, return_all_hiddens=True)
    for seen, state in zip(maxima, states):
        assert torch.allclose(seen, state.abs().reshape(-1, state.shape[-1]).amax(dim=0))
    assert len(smoothed_linears(roberta.model)) == 4 * len(layers)
    assert not any(hook for linear in queries for hook in linear._forward_pre_hooks.values())  # removed


def test_int8_smoothing_keeps_outlier_channels_from_costing_accuracy(roberta_dir):
    """Trained BERT-like models carry a few hidden channels 20-30x the others (LayerNorm weights
    that large): planted here, they cost per-token int8 accuracy, which calibration gives back."""
    reference = roberta_ext.from_pretrained(str(roberta_dir))
    with torch.no_grad():
        for norm in reference.model.modules():
            if isinstance(norm, nn.LayerNorm):
                norm.weight[[3, 17]] = torch.tensor([25.0, -20.0])
    batches = [*padded_batches(reference), *calibration_batches(reference.inputs, rows=16, seed=1)]
    plain = quantize_int8(copy.deepcopy(reference.model))
    smoothed = quantize_int8(copy.deepcopy(reference.model), calibration=calibration_batches(reference.inputs))
    errors = torch.zeros(2)
    with torch.no_grad():
        for ids in batches:  # other texts than calibration's
            real = ids.ne(reference.dictionary.pad())
            exact = reference.model(ids, features_only=True)[0][real]
            errors += torch.stack(
                [(model(ids, features_only=True)[0][real] - exact).square().sum() for model in (plain, smoothed)]
            )
    assert errors[1].sqrt() < errors[0].sqrt() / 1.5  # 2.0x smaller here
    with pytest.raises(ValueError, match="calibration smooths per-token int8 layers"):
        quantize_int8(copy.deepcopy(reference.model), activations="per_tensor", calibration=batches)


def test_int8_features_and_embeddings_are_close_to_float32(roberta, int8):
    for ids in padded_batches(roberta):
        real = ids.ne(roberta.dictionary.pad())
        with torch.no_grad():
            reference, ours = roberta.extract_features(ids), int8.extract_features(ids)
        assert not torch.equal(reference, ours)  # quantized, not a copy
        assert float(F.cosine_similarity(ours, reference, dim=-1)[real].min()) >= 0.99
        lengths = real.sum(dim=1)
        for pooling in ("mean", "cls", "max"):
            cosine = F.cosine_similarity(pool(ours, lengths, [pooling]), pool(reference, lengths, [pooling]), dim=-1)
            assert float(cosine.min()) >= 0.99, pooling
    # The features are not degenerate: the tokens' own features point in different directions.
    features = reference[real]
    assert float(F.cosine_similarity(features[:, None], features[None], dim=-1).mean()) < 0.5
    tokens = roberta.encode("Hello world!", "Hi")
    assert (
        int8.predict("sentence_classification_head", tokens).argmax()
        == roberta.predict("sentence_classification_head", tokens).argmax()
    )


def test_int8_refuses_other_devices_and_unknown_dtypes(roberta_dir):
    with pytest.raises(ValueError, match="dtype='int8' runs on the CPU only, not on device='cuda'"):
        roberta_ext.from_pretrained(str(roberta_dir), dtype="int8", device="cuda")
    with pytest.raises(ValueError, match="dtype='int4' is not a floating-point torch dtype nor 'int8'"):
        roberta_ext.from_pretrained(str(roberta_dir), dtype="int4")
    assert roberta_ext.from_pretrained(str(roberta_dir), dtype="bfloat16").model.encoder.lm_head.bias.dtype == (
        torch.bfloat16
    )
    with pytest.raises(ValueError, match="starts from a float32 model"):
        quantize_int8(roberta_ext.from_pretrained(str(roberta_dir), dtype=torch.bfloat16).model)
