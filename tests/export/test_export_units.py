"""Each function of ``roberta_ext.export`` on a 1-layer model of width 32 (and a 2-layer BERT for
segment ids), checked against references computed another way: each row's features alone (no
batch-mates, no padding) from the hub's own ``extract_features``, pooled by hand, its ``predict``
logits; the written files run by onnxruntime and ``torch.export.load``. The exports are few and
small (about a second for torch.export, five for ONNX): ``test_export.py`` checks more shapes and
models through the command."""

from __future__ import annotations

import logging
import math
import os
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from tqdm import tqdm

import roberta_ext
from roberta_ext import export
from roberta_ext.embedding.pooling import SentenceEmbedding
from roberta_ext.export import ExportCheckError, ServingModule
from roberta_ext.export.int8 import quantize_int8
from roberta_ext.tokenizers.wordpiece import WordPieceTokenizer, train_wordpiece_vocab, write_vocab
from tests.export.test_export import spread_weights
from tests.peers import require
from tests.test_hub import make_model_dir
from tests.test_hub_families import CORPUS, fairseq_dir

MAX_POSITIONS = 24
TOLERANCE = 1e-5
LENGTHS = (9, 4, 12, 3)  # not sorted: the batch is 12 long, its rows right-padded


pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")


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


@pytest.fixture(scope="module")
def roberta(tmp_path_factory, bpe_files):
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
def bert(tmp_path_factory):
    """BERT's layout: segment ids derived from the ids (0 up to the first [SEP], 1 after)."""
    directory = tmp_path_factory.mktemp("bert")
    write_vocab(train_wordpiece_vocab(CORPUS, vocab_size=120), directory / "vocab.txt")
    wordpiece = WordPieceTokenizer.from_file(directory / "vocab.txt")
    fairseq_dir(directory, [wordpiece.tokenize(line) for line in CORPUS], "bert-tiny")
    hub = roberta_ext.from_pretrained(str(directory))
    spread_weights(hub.model)
    hub.model.eval()
    return hub


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


def assert_rows_equal(ours: torch.Tensor, references: list[torch.Tensor]) -> None:
    """Row ``i`` of ``ours`` equals ``references[i]`` on its real tokens and is exactly 0 after them."""
    assert ours.shape[0] == len(references)
    for row, reference in zip(ours, references):
        n = len(reference)
        assert float((row[:n] - reference).abs().max()) <= TOLERANCE
        assert not row[n:].any()


# ------------------------------------------------------------------------------ ServingModule


def test_features_of_a_padded_batch_are_each_rows_own_with_zeros_at_padding(roberta):
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    mask = ids.ne(roberta.dictionary.pad()).long()
    references = alone(roberta, rows)
    assert_rows_equal(serve(ServingModule(roberta), ids, mask), references)
    assert_rows_equal(serve(ServingModule(roberta), ids), references)
    assert_rows_equal(serve(ServingModule(roberta), ids, torch.ones_like(ids)), references)  # <pad> is padding


def test_attention_mask_zeros_make_padding_of_any_id(roberta):
    """Padded with ``</s>`` instead of ``<pad>``: only the mask says where the rows end."""
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    real = ids.ne(roberta.dictionary.pad())
    other = ids.masked_fill(~real, roberta.dictionary.eos())
    assert_rows_equal(serve(ServingModule(roberta), other, real.long()), alone(roberta, rows))
    mask = real.long() * 3  # any number but 0 is a real token
    assert_rows_equal(serve(ServingModule(roberta), other, mask), alone(roberta, rows))


def test_bert_segment_ids_are_derived_in_the_graph(bert):
    rows = rows_of(bert)
    ids, _ = bert.collate(rows)
    references = alone(bert, rows)
    assert_rows_equal(serve(ServingModule(bert), ids), references)
    serving = ServingModule(bert)
    serving.segments = None  # without them, the second segment reads segment 0's embedding
    with torch.no_grad():
        assert float((serving.eval()(ids)[0, 6:9] - references[0][6:9]).abs().max()) > 1e-3


def test_a_sentence_head_gives_predicts_logits(roberta):
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    serving = ServingModule(roberta, head="sentence_classification_head")
    with torch.no_grad():
        reference = torch.cat(
            [roberta.predict("sentence_classification_head", row, return_logits=True) for row in rows]
        )
    ours = serve(serving, ids, ids.ne(roberta.dictionary.pad()).long())
    assert ours.shape == (4, 2)
    assert float((ours - reference).abs().max()) <= TOLERANCE
    assert float((serve(serving, ids) - reference).abs().max()) <= TOLERANCE


def test_a_token_head_gives_each_tokens_logits(roberta):
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    tagger = roberta.model.token_heads["tagger"]
    with torch.no_grad():
        references = [tagger(features) for features in alone(roberta, rows)]
    ours = serve(ServingModule(roberta, head="tagger"), ids)
    assert ours.shape == (4, 12, 3)
    for row, reference in zip(ours, references):
        assert float((row[: len(reference)] - reference).abs().max()) <= TOLERANCE


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
def test_pooling_pools_each_rows_real_tokens(roberta, pooling, normalize):
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    modes = [pooling] if isinstance(pooling, str) else list(pooling)
    serving = ServingModule(roberta, pooling=pooling, normalize=normalize)
    assert serving.modes == tuple(modes) and serving.normalize is bool(normalize)
    reference = pooled_by_hand(roberta, rows, modes, bool(normalize))
    for ours in (serve(serving, ids), serve(serving, ids, ids.ne(roberta.dictionary.pad()).long())):
        assert ours.shape == (4, 32 * len(modes))
        assert float((ours - reference).abs().max()) <= TOLERANCE


def test_pool_alone_pools_features_with_lengths(roberta):
    features = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(0))
    lengths = torch.tensor([5, 3])
    expected = torch.stack([by_hand(features[0], "max"), by_hand(features[1, :3], "max")])
    assert torch.allclose(ServingModule(roberta, pooling="max").pool(features, lengths), expected)
    normalized = ServingModule(roberta, pooling="max", normalize=True).pool(features, lengths)
    assert torch.allclose(normalized, F.normalize(expected, dim=-1))


def test_encode_alone_gives_zeros_where_not_real(roberta):
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    real = ids.ne(roberta.dictionary.pad())
    with torch.no_grad():
        features = ServingModule(roberta).encode(ids, real)
    assert_rows_equal(features, alone(roberta, rows))


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
def test_model_pooling_is_the_hubs_own_setting(roberta, settings, normalize, expected):
    hub = with_settings(roberta, settings)
    serving = ServingModule(hub, pooling=export.MODEL_POOLING, normalize=normalize)
    assert (serving.modes, serving.normalize) == expected
    assert export.MODEL_POOLING == "model"
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    reference = pooled_by_hand(roberta, rows, expected[0], expected[1])
    assert float((serve(serving, ids) - reference).abs().max()) <= TOLERANCE


def test_model_pooling_equals_hub_embed(roberta):
    texts = ["Hello world!", "Hi", "A second sentence follows, longer."]
    ids, _ = roberta.encode_batch(texts)
    ours = serve(ServingModule(roberta, pooling="model"), ids, ids.ne(roberta.dictionary.pad()).long())
    assert float((ours - roberta.embed(texts)).abs().max()) <= TOLERANCE


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
def test_names_of_inputs_and_output(roberta, options, output_name, input_names):
    serving = ServingModule(roberta, **options)
    assert (serving.output_name, serving.input_names) == (output_name, input_names)
    assert serving.takes_attention_mask is options.get("attention_mask", True)


def test_defaults_are_features_without_normalisation(roberta):
    serving = ServingModule(roberta)
    assert (serving.model, serving.head, serving.modes, serving.normalize) == (roberta.model, None, None, False)
    assert serving.normalize is False and serving.padding_idx == roberta.dictionary.pad() == 1
    assert serving.segments is None
    assert ServingModule(roberta, pooling="mean", normalize=None).normalize is False


def test_refusals_name_the_problem_in_full(roberta):
    with pytest.raises(ValueError) as error:
        ServingModule(roberta, head="tagger", pooling="mean")
    assert str(error.value) == "export either a head (head=...) or a pooling (pooling=...), not both"
    with pytest.raises(KeyError) as error:
        ServingModule(roberta, head="sentiment")
    assert error.value.args == (
        "no head named 'sentiment'; the model's classification heads: ['sentence_classification_head'], "
        "token heads: ['tagger']",
    )
    with pytest.raises(ValueError) as error:
        ServingModule(roberta, normalize=True)
    assert str(error.value) == "normalize=True normalises pooled embeddings: give a pooling too"
    with pytest.raises(ValueError) as error:
        ServingModule(roberta, pooling="sum")
    assert str(error.value) == (
        "pooling: unknown pooling mode 'sum'; supported: mean, cls, max, mean_sqrt_len_tokens, weightedmean, lasttoken"
    )


def test_head_and_pooling_none_with_normalize_false_is_accepted(roberta):
    assert ServingModule(roberta, head=None, pooling=None, normalize=False).output_name == "features"


def test_int8_models_are_refused_naming_the_first_layer_and_the_count(roberta):
    model = nn.Module()
    model.classification_heads, model.token_heads = {}, {}
    model.encoder = quantize_int8(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)))
    hub = SimpleNamespace(model=model, inputs=roberta.inputs, sentence_embedding=SentenceEmbedding())
    with pytest.raises(ValueError) as error:
        ServingModule(hub)
    assert str(error.value) == (
        "this model is quantized to int8 (encoder.0 and 2 more): export the float32 model (from_pretrained without "
        "dtype) and quantize the exported ONNX file with onnxruntime.quantization.quantize_dynamic"
    )
    model.encoder = quantize_int8(nn.Sequential(nn.Linear(4, 4)), activations="per_tensor")
    with pytest.raises(ValueError, match=re.escape("this model is quantized to int8 (encoder.0 and 0 more)")):
        ServingModule(hub)


# ------------------------------------------------------------------------------------ inputs


@pytest.mark.parametrize(
    "batch, length, lengths",
    [(4, 6, [6, 5, 4, 3]), (5, 4, [4, 3, 3, 3, 3]), (1, 1, [3]), (2, 100, [MAX_POSITIONS, MAX_POSITIONS - 1])],
)
def test_example_inputs_are_right_padded_rows_each_shorter(roberta, batch, length, lengths):
    ids, mask = export.example_inputs(roberta, batch=batch, length=length)
    dictionary = roberta.dictionary
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


def test_example_inputs_default_to_two_rows_of_8_and_7_tokens(roberta):
    ids, mask = export.example_inputs(roberta)
    assert ids.shape == (2, 8) and mask.sum(dim=1).tolist() == [8, 7]
    assert torch.equal(ids, export.example_inputs(roberta, batch=2, length=8)[0])


def test_the_check_batch_is_3_rows_of_at_most_11_tokens(roberta):
    ids, mask = export._check_batch(roberta)
    assert torch.equal(ids, export.example_inputs(roberta, batch=3, length=11)[0])
    assert mask.sum(dim=1).tolist() == [11, 10, 9]
    short = SimpleNamespace(model=roberta.model, inputs=SimpleNamespace(max_positions=5, dictionary=roberta.dictionary))
    assert export._check_batch(short)[1].sum(dim=1).tolist() == [5, 4, 3]


def test_hub_outputs_of_features_and_a_token_head_are_defined_on_real_tokens(roberta):
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    real = ids.ne(roberta.dictionary.pad())
    features, where = export.hub_outputs(roberta, ServingModule(roberta), ids)
    assert torch.equal(where, real) and not features.requires_grad
    references = alone(roberta, rows)
    for row, reference in zip(features, references):
        assert float((row[: len(reference)] - reference).abs().max()) <= TOLERANCE
    logits, where = export.hub_outputs(roberta, ServingModule(roberta, head="tagger"), ids)
    assert torch.equal(where, real) and logits.shape == (4, 12, 3)
    tagger = roberta.model.token_heads["tagger"]
    for row, reference in zip(logits, references):
        with torch.no_grad():
            assert float((row[: len(reference)] - tagger(reference)).abs().max()) <= TOLERANCE


def test_hub_outputs_of_a_sentence_head_and_a_pooling_are_defined_on_every_row(roberta):
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    every_row = torch.ones(4, dtype=torch.bool)
    logits, where = export.hub_outputs(roberta, ServingModule(roberta, head="sentence_classification_head"), ids)
    assert where.dtype == torch.bool
    with torch.no_grad():
        reference = torch.cat(
            [roberta.predict("sentence_classification_head", row, return_logits=True) for row in rows]
        )
    assert torch.equal(where, every_row) and not logits.requires_grad
    assert float((logits - reference).abs().max()) <= TOLERANCE
    serving = ServingModule(roberta, pooling=["cls", "weightedmean"], normalize=True)
    embeddings, where = export.hub_outputs(roberta, serving, ids)
    assert torch.equal(where, every_row) and not embeddings.requires_grad
    reference = pooled_by_hand(roberta, rows, ["cls", "weightedmean"], True)
    assert float((embeddings - reference).abs().max()) <= TOLERANCE


# --------------------------------------------------------------------------------- helpers


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
def test_dynamic_shapes_are_batch_and_sequence_up_to_max_positions(roberta, attention_mask, names):
    shapes = export._dynamic_shapes(ServingModule(roberta, attention_mask=attention_mask))
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


def test_the_trace_inputs_are_the_example_inputs(roberta):
    ids, mask = export.example_inputs(roberta)
    with_mask = export._trace_inputs(ServingModule(roberta), roberta)
    assert len(with_mask) == 2 and torch.equal(with_mask[0], ids) and torch.equal(with_mask[1], mask)
    (alone_ids,) = export._trace_inputs(ServingModule(roberta, attention_mask=False), roberta)
    assert torch.equal(alone_ids, ids)


# -------------------------------------------------------------------------------- staging


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


# ---------------------------------------------------------------------------------- check


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


# ---------------------------------------------------------------------------- torch.export


def run_program(path: Path, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    module = torch.export.load(path).module()
    with torch.no_grad():
        return module(ids) if mask is None else module(ids, mask)


def test_export_program_traces_every_option_in_eval_mode_with_dynamic_axes(roberta):
    roberta.model.train()
    try:
        program = export.export_program(roberta, pooling=["cls", "max"], normalize=True, attention_mask=False)
        assert roberta.model.training and all(sub.training for sub in roberta.model.modules())
    finally:
        roberta.model.eval()
    rows = rows_of(roberta, lengths=(MAX_POSITIONS,))
    ids, _ = roberta.collate(rows)
    with torch.no_grad():
        ours = program.module()(ids)
    assert float((ours - pooled_by_hand(roberta, rows, ["cls", "max"], True)).abs().max()) <= TOLERANCE
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    program = export.export_program(roberta, head="tagger")
    with torch.no_grad():
        ours = program.module()(ids, ids.ne(roberta.dictionary.pad()).long())
    assert torch.allclose(ours, serve(ServingModule(roberta, head="tagger"), ids), atol=TOLERANCE)


def test_to_torch_export_writes_a_checked_program(roberta, tmp_path, capsys, monkeypatch):
    path = tmp_path / "new" / "model.pt2"
    steps_drawn(monkeypatch)
    assert export.to_torch_export(roberta, str(path), pooling="model", attention_mask=False, progress=True) == path
    assert os.listdir(path.parent) == ["model.pt2"]
    err = capsys.readouterr().err
    assert bar_of(err) == ({"export model.pt2"}, ["0/3", "1/3", "2/3", "3/3"])
    assert err.endswith("\r") and "\n" not in err  # not left on the screen
    rows = rows_of(roberta, lengths=(1 + MAX_POSITIONS // 2, 5, 3))
    ids, _ = roberta.collate(rows)
    assert torch.allclose(run_program(path, ids, None), pooled_by_hand(roberta, rows, ["mean"], False), atol=TOLERANCE)


def test_to_torch_export_unchecked_with_a_head_and_the_mask(roberta, tmp_path, capsys, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("checked")

    monkeypatch.setattr(export, "_check", never)
    steps_drawn(monkeypatch)
    path = export.to_torch_export(
        roberta, tmp_path / "head.pt2", head="sentence_classification_head", check=False, progress=True
    )
    assert bar_of(capsys.readouterr().err) == ({"export head.pt2"}, ["0/2", "1/2", "2/2"])
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    ours = run_program(path, ids, ids.ne(roberta.dictionary.pad()).long())
    with torch.no_grad():
        reference = torch.cat(
            [roberta.predict("sentence_classification_head", row, return_logits=True) for row in rows]
        )
    assert float((ours - reference).abs().max()) <= TOLERANCE


def test_to_torch_export_normalises_pooled_embeddings(roberta, tmp_path):
    path = export.to_torch_export(roberta, tmp_path / "cls.pt2", pooling="cls", normalize=True, check=False)
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    ours = run_program(path, ids, ids.ne(roberta.dictionary.pad()).long())
    assert float((ours - pooled_by_hand(roberta, rows, ["cls"], True)).abs().max()) <= TOLERANCE


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


def test_a_failed_torch_export_check_writes_nothing_and_keeps_the_old_file(roberta, tmp_path, monkeypatch, capsys):
    path = tmp_path / "model.pt2"
    path.write_bytes(b"old")
    allowed = off_by_one(monkeypatch)
    with pytest.raises(ExportCheckError) as error:
        export.to_torch_export(roberta, path, head="tagger")
    assert str(error.value) == (
        f"{path}: the exported graph's outputs differ from the model's by up to 1 on a padded batch "
        f"(allowed in float32: {allowed[0]:.3g}); {path} was not written (check=False, --no-check, writes it unchecked)"
    )
    assert os.listdir(tmp_path) == ["model.pt2"] and path.read_bytes() == b"old"
    assert capsys.readouterr().err == ""  # no bar unless asked


# ------------------------------------------------------------------------------------ ONNX


def onnx_inputs_outputs(path: Path) -> tuple[dict[str, list], int]:
    onnx = require("onnx", "reading the exported files")
    model = onnx.load(str(path))
    dims = {
        value.name: [d.dim_param or d.dim_value for d in value.type.tensor_type.shape.dim]
        for value in [*model.graph.input, *model.graph.output]
    }
    (opset,) = [entry.version for entry in model.opset_import if entry.domain == ""]
    return dims, opset


def run_onnx(path: Path, ids: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
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
    roberta, tmp_path, capsys, onnx_exporter, monkeypatch
):
    path = tmp_path / "new" / "tagger.onnx"
    steps_drawn(monkeypatch)
    assert export.to_onnx(roberta, str(path), head="tagger", attention_mask=False, opset=17, progress=True) == path
    assert os.listdir(path.parent) == ["tagger.onnx"]
    captured = capsys.readouterr()
    assert bar_of(captured.err) == ({"export tagger.onnx"}, ["0/3", "1/3", "2/3", "3/3"])
    assert captured.err.endswith("\r") and "\n" not in captured.err
    assert captured.out == ""
    dims, opset = onnx_inputs_outputs(path)
    # 17 is converted from the exporter's 18: the file carries the opset asked for.
    assert dims == {"input_ids": ["batch", "sequence"], "logits": ["batch", "sequence", 3]} and opset == 17
    rows = rows_of(roberta, lengths=(5, MAX_POSITIONS, 3))
    ids, _ = roberta.collate(rows)
    ours = run_onnx(path, ids)
    tagger = roberta.model.token_heads["tagger"]
    with torch.no_grad():
        for row, features in zip(ours, alone(roberta, rows)):
            assert float((row[: len(features)] - tagger(features)).abs().max()) <= TOLERANCE


def test_to_onnx_unchecked_pooling_with_the_mask_at_the_default_opset(roberta, tmp_path, onnx_exporter, monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("checked")

    monkeypatch.setattr(export, "_check_onnx", never)
    path = export.to_onnx(roberta, tmp_path / "pooled.onnx", pooling=["cls", "max"], normalize=True, check=False)
    dims, opset = onnx_inputs_outputs(path)
    assert dims == {
        "input_ids": ["batch", "sequence"],
        "attention_mask": ["batch", "sequence"],
        "embeddings": ["batch", 64],
    }
    assert opset == export.DEFAULT_OPSET == 20
    rows = rows_of(roberta, lengths=(7,))
    ids, _ = roberta.collate(rows)
    ours = run_onnx(path, ids, torch.ones_like(ids))
    assert float((ours - pooled_by_hand(roberta, rows, ["cls", "max"], True)).abs().max()) <= TOLERANCE


def test_a_failed_onnx_check_writes_nothing_and_keeps_the_old_file(roberta, tmp_path, onnx_exporter, monkeypatch):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"old")
    allowed = off_by_one(monkeypatch)
    with pytest.raises(ExportCheckError) as error:
        export.to_onnx(roberta, path, pooling="mean")
    assert str(error.value) == (
        f"{path}: the exported graph's outputs differ from the model's by up to 1 on a padded batch "
        f"(allowed in float32: {allowed[0]:.3g}); {path} was not written (check=False, --no-check, writes it unchecked)"
    )
    assert os.listdir(tmp_path) == ["model.onnx"] and path.read_bytes() == b"old"


def test_without_onnxruntime_the_file_is_written_unchecked_with_a_warning(
    roberta, tmp_path, onnx_exporter, monkeypatch, capsys
):
    path = tmp_path / "features.onnx"
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.warns(UserWarning) as record:
        export.to_onnx(roberta, path)
    assert [str(warning.message) for warning in record] == [
        f"onnxruntime is not installed: {path} was written unchecked"
    ]
    # It names the caller's line (here this file; under mutmut, whose trampolines add frames, one of them).
    assert record[0].filename != export.__file__
    assert capsys.readouterr().err == ""  # no bar unless asked
    monkeypatch.undo()
    rows = rows_of(roberta)
    ids, _ = roberta.collate(rows)
    assert_rows_equal(run_onnx(path, ids, ids.ne(roberta.dictionary.pad()).long()), alone(roberta, rows))


def test_opsets_and_dtypes_onnx_cannot_carry_are_refused_before_any_work(roberta, tmp_path, monkeypatch):
    """``--opset 9`` once printed onnxscript's error and wrote an opset-18 file; a bfloat16 file
    ended in onnxruntime's NOT_IMPLEMENTED traceback: both are refused before the export starts."""

    def never(*args, **kwargs):
        raise AssertionError("exported")

    monkeypatch.setattr(torch.onnx, "export", never)
    assert list(export.ONNX_OPSETS) == [17, 18, 19, 20, 21, 22]
    for opset in (9, 16, 23, 25):
        with pytest.raises(ValueError) as error:
            export.to_onnx(roberta, tmp_path / "m.onnx", opset=opset)
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


def test_a_file_without_the_opset_asked_for_is_not_written(roberta, tmp_path, onnx_exporter, monkeypatch):
    """The exporter keeps its own opset 18 where it cannot convert (opset 9 here, let past the
    refusal): the file is not written under a name that says otherwise."""
    monkeypatch.setattr(export, "check_onnx_options", lambda **options: None)
    path = tmp_path / "m.onnx"
    with pytest.raises(ExportCheckError) as error:
        export.to_onnx(roberta, path, opset=9, check=False)
    assert str(error.value) == f"{path}: torch's exporter wrote opset 18, not the 9 asked for; {path} was not written"
    assert os.listdir(tmp_path) == []


def test_a_file_onnxruntime_cannot_run_is_one_line_and_not_written(roberta, tmp_path, onnx_exporter, monkeypatch):
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
        export.to_onnx(roberta, path)
    assert str(error.value) == (
        f"{path}: onnxruntime cannot run the exported graph ([ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not "
        f"find an implementation for Add(14) node); {path} was not written (check=False, --no-check, writes it "
        "unchecked)"
    )
    assert os.listdir(tmp_path) == []
