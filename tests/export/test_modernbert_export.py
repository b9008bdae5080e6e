"""ModernBERT exported (ONNX run by onnxruntime, torch.export) and in int8, against eager and its peers.

The models are tiny random transformers ModernBERTs (:mod:`tests.embedding.modernbert_folders`:
rotary positions, fused q/k/v, GeGLU, no biases) whose local layers see 8 tokens either side,
run on padded batches of real texts from 2 to 512 tokens, so that most rows are many windows
long: the window must be in the graph, computed for every length, not the one traced. The
exported files equal the eager hub within 1e-4 (fp32) on real tokens, and a sentence-transformers
folder's exported embeddings (``pooling="model"``: mean, ``Normalize``, ``truncate_dim``) equal
``SentenceTransformer.encode``. int8 quantizes every linear layer (the fused ``qkv_proj``, GeGLU's
``Wi`` and ``Wo``, the heads) and stays within a cosine of 0.99 of fp32 on the inputs the RoBERTa
int8 test uses, and on long texts.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import roberta_ext
from roberta_ext import export
from roberta_ext.cli.export import main as export_main
from roberta_ext.embedding import Embedder
from roberta_ext.embedding.pooling import pool
from roberta_ext.export import ServingModule
from roberta_ext.export.int8 import Int8Linear, calibration_batches, ordinary_indices, smoothed_linears
from roberta_ext.families import SEQUENCE_HEAD
from tests.checkpoints.test_modernbert_transformers import randomized, tiny_config
from tests.embedding.modernbert_folders import (
    LONG,
    MIXED,
    SHORT,
    encode,
    save_modernbert,
    save_sentence_transformer,
    transformers,
)
from tests.peers import require
from tests.tokenizers.test_hf_tokenizer import rows_for, save_modernbert_tokenizer

onnxruntime = require("onnxruntime", "the exported files are run by it")

TOLERANCE = 1e-4
WINDOW = 16
"""``local_attention``: a local layer's tokens see 8 tokens either side."""


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory) -> Path:
    """A ``ModernBertForSequenceClassification`` (3 labels, mean pooling, every bias on) and its tokenizer."""
    folder = tmp_path_factory.mktemp("modernbert-classifier")
    fast = save_modernbert_tokenizer(folder)
    config = tiny_config(
        vocab_size=rows_for(len(fast)),
        pad_token_id=fast.pad_token_id,
        cls_token_id=fast.cls_token_id,
        sep_token_id=fast.sep_token_id,
        bos_token_id=fast.cls_token_id,
        eos_token_id=fast.sep_token_id,
        local_attention=WINDOW,
        num_labels=3,
        classifier_pooling="mean",
        attention_bias=True,
        mlp_bias=True,
        norm_bias=True,
        classifier_bias=True,
    )
    randomized(transformers.ModernBertForSequenceClassification(config), seed=7).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def classifier(classifier_dir):
    return roberta_ext.from_pretrained(str(classifier_dir))


@pytest.fixture(scope="module")
def st_folder(tmp_path_factory) -> tuple[Path, object]:
    """A sentence-transformers folder (mean, ``Normalize``, ``truncate_dim`` 12) and its loaded model."""
    root = tmp_path_factory.mktemp("modernbert-st")
    transformer_dir = save_modernbert(root / "hf", seed=3, local_attention=WINDOW)
    model = save_sentence_transformer(root / "st", transformer_dir, "mean", normalize=True, truncate_dim=12)
    return root / "st", model


def text_batches(hub) -> list[torch.Tensor]:
    """Right-padded batches of real texts, by the hub's own ``collate``: short lines, mixed
    lengths, and texts of up to the model's 512 positions."""
    embedder = Embedder.for_hub(hub)
    batches = []
    for texts in (SHORT[:1], MIXED, LONG):
        rows = [embedder.encode(text) for text in texts]
        batches.append(hub.collate(rows)[0])
    assert max(b.shape[1] for b in batches) == 512 and min(b.shape[1] for b in batches) <= WINDOW // 2
    return batches


def run_onnx(path: Path, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"input_ids": input_ids.numpy(), "attention_mask": attention_mask.numpy()})
    return torch.from_numpy(out)


def largest_difference(ours: torch.Tensor, reference: torch.Tensor, where: torch.Tensor) -> float:
    assert ours.shape == reference.shape
    return float((ours - reference)[where].abs().max())


# ---------------------------------------------------------------------------------- ONNX


OUTPUTS = {"features": {}, "head": {"head": SEQUENCE_HEAD}}


@pytest.fixture(scope="module")
def onnx_files(classifier, tmp_path_factory) -> tuple[dict[str, Path], list[int]]:
    """The classifier's features and head logits as ONNX files (each checked by ``to_onnx`` as it
    is written), and the lengths of the batches each export traced and checked on."""
    folder = tmp_path_factory.mktemp("onnx")
    lengths: list[int] = []
    original = export.example_inputs

    def recorded(hub, batch=2, length=8):
        lengths.append(length)
        return original(hub, batch=batch, length=length)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(export, "example_inputs", recorded)
        files = {
            name: export.to_onnx(classifier, folder / f"{name}.onnx", **output) for name, output in OUTPUTS.items()
        }
    return files, lengths


@pytest.mark.parametrize("name", OUTPUTS)
def test_onnx_equals_eager_with_the_window_in_the_graph(classifier, onnx_files, name):
    serving = ServingModule(classifier, **OUTPUTS[name])
    for ids in text_batches(classifier):
        mask = ids.ne(classifier.dictionary.pad()).long()
        expected, where = export.hub_outputs(classifier, serving, ids)
        assert largest_difference(run_onnx(onnx_files[0][name], ids, mask), expected, where) <= TOLERANCE


def test_the_written_file_is_checked_on_texts_longer_than_the_window(onnx_files):
    # Each export traced on 2 x 8, then checked on rows the window does not cover.
    assert onnx_files[1] == [8, WINDOW + 3] * len(OUTPUTS)


def test_onnx_features_equal_transformers(classifier, classifier_dir, onnx_files):
    """The exported graph against the peer itself: transformers' ModernBertModel on the same padded batches."""
    peer = transformers.ModernBertForSequenceClassification.from_pretrained(str(classifier_dir)).eval()
    for ids in text_batches(classifier):
        mask = ids.ne(classifier.dictionary.pad()).long()
        with torch.no_grad():
            theirs = peer.model(input_ids=ids, attention_mask=mask).last_hidden_state
            logits = peer(input_ids=ids, attention_mask=mask).logits
        assert largest_difference(run_onnx(onnx_files[0]["features"], ids, mask), theirs, mask.bool()) <= TOLERANCE
        assert largest_difference(run_onnx(onnx_files[0]["head"], ids, mask), logits, mask[:, 0].bool()) <= TOLERANCE


def test_onnx_embeddings_of_a_sentence_transformers_folder_equal_encode(st_folder, tmp_path):
    """``roberta-ext export FOLDER --pooling model``: the folder's mean, Normalize and truncate_dim
    in the graph, fed by the folder's own tokenizer (``attention_mask`` from it)."""
    folder, model = st_folder
    path = tmp_path / "embed.onnx"
    assert export_main([str(folder), "--pooling", "model", "--output", str(path), "--no-progress"]) == 0
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
    for texts in (SHORT, MIXED, LONG):
        batch = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
        ours = run_onnx(path, batch["input_ids"], batch["attention_mask"])
        assert ours.shape == (len(texts), 12)
        torch.testing.assert_close(ours, encode(model, texts), atol=1e-5, rtol=1e-5)


def test_example_inputs_hold_no_padding_symbol_among_the_real_tokens(classifier):
    """ModernBERT's ``[PAD]`` is one of its ordinary-looking indices (612 of 640 here, 50283 of
    50368 in ModernBERT-base): the example and check batches never draw it, nor ``[CLS]``/``[SEP]``/
    ``[UNK]``, between a row's ends."""
    dictionary = classifier.dictionary
    assert dictionary.nspecial < dictionary.pad()
    ids, mask = export.example_inputs(classifier, batch=4, length=400)
    assert torch.equal(ids.eq(dictionary.pad()), mask.eq(0))
    framing = torch.tensor([dictionary.bos(), dictionary.eos(), dictionary.unk()])
    for row, n in zip(ids, mask.sum(dim=1).tolist()):
        assert row[0] == dictionary.bos() and row[n - 1] == dictionary.eos()
        assert not bool(torch.isin(row[1 : n - 1], framing).any())
    (calibration,) = calibration_batches(classifier.inputs, rows=4, length=300)
    assert not bool(torch.isin(calibration[:, 1:-1], torch.tensor([dictionary.pad(), *framing])).any())


# ----------------------------------------------------------------------------- torch.export


def test_torch_export_equals_eager_with_the_window_in_the_graph(st_folder, tmp_path):
    folder, _ = st_folder
    hub = roberta_ext.from_pretrained(str(folder))
    path = export.to_torch_export(hub, tmp_path / "model.pt2", pooling="model")
    module = torch.export.load(path).module()
    serving = ServingModule(hub, pooling="model")
    for ids in text_batches(hub):
        mask = ids.ne(hub.dictionary.pad()).long()
        expected, where = export.hub_outputs(hub, serving, ids)
        with torch.no_grad():
            assert largest_difference(module(ids, mask), expected, where) <= TOLERANCE


# ------------------------------------------------------------------------------------- int8


@pytest.fixture(scope="module")
def int8(classifier_dir):
    return roberta_ext.from_pretrained(str(classifier_dir), dtype="int8")


def test_int8_quantizes_every_linear_layer_of_the_family(int8):
    linear = [name for name, module in int8.model.named_modules() if type(module) is nn.Linear]
    quantized = {name for name, module in int8.model.named_modules() if isinstance(module, Int8Linear)}
    assert linear == []
    layers = {f"encoder.sentence_encoder.layers.{i}.{part}" for i in range(4) for part in ("self_attn.qkv_proj",)}
    layers |= {
        f"encoder.sentence_encoder.layers.{i}.{part}" for i in range(4) for part in ("self_attn.out_proj", "fc1", "fc2")
    }
    heads = {f"classification_heads.{SEQUENCE_HEAD}.{part}" for part in ("dense", "out_proj")}
    heads.add("encoder.lm_head.dense")  # the masked-LM head every model has (untrained in this folder)
    assert quantized == layers | heads
    fc1 = int8.model.transformer.layers[0].fc1  # GeGLU's Wi: the input and the gate, 2 x 40 rows
    assert fc1.weight.dtype == torch.int8 and fc1.weight.shape == (32, 80) and fc1.weight_scale.shape == (80,)
    smoothed = {name for name, module in int8.model.named_modules() if getattr(module, "input_scale", None) is not None}
    assert smoothed == {
        f"encoder.sentence_encoder.layers.{i}.{part}" for i in range(4) for part in ("self_attn.qkv_proj", "fc1")
    }


def test_smoothed_linears_are_the_fused_projection_and_wi(classifier):
    layers = classifier.model.transformer.layers
    assert smoothed_linears(classifier.model) == [
        linear for layer in layers for linear in (layer.self_attn.qkv_proj, layer.fc1)
    ]


def padded_batches(hub) -> list[torch.Tensor]:
    """The RoBERTa int8 test's batches (tests/export/test_export.py: 1 x 5, 3 x 13, 6 x 40 of
    random ordinary tokens, each row shorter than the one before), and two of long texts."""
    generator = torch.Generator().manual_seed(1)
    dictionary = hub.dictionary
    ordinary = ordinary_indices(dictionary)
    batches = []
    for batch, length in [(1, 5), (3, 13), (6, 40)]:
        rows = []
        for row in range(batch):
            n = max(3, length - 3 * row)
            ids = ordinary[torch.randint(len(ordinary), (n,), generator=generator)]
            ids[0], ids[-1] = dictionary.bos(), dictionary.eos()
            rows.append(ids)
        batches.append(hub.collate(rows)[0])
    return batches + text_batches(hub)[1:]


def test_int8_features_embeddings_and_logits_are_close_to_float32(classifier, int8):
    worst = {"features": 1.0, "mean": 1.0, "cls": 1.0, "max": 1.0}
    for ids in padded_batches(classifier):
        real = ids.ne(classifier.dictionary.pad())
        with torch.no_grad():
            reference, ours = classifier.extract_features(ids), int8.extract_features(ids)
        assert not torch.equal(reference, ours)  # quantized, not a copy
        worst["features"] = min(worst["features"], float(F.cosine_similarity(ours, reference, dim=-1)[real].min()))
        lengths = real.sum(dim=1)
        for pooling in ("mean", "cls", "max"):
            cosine = F.cosine_similarity(pool(ours, lengths, [pooling]), pool(reference, lengths, [pooling]), dim=-1)
            worst[pooling] = min(worst[pooling], float(cosine.min()))
        with torch.no_grad():
            logits = [
                hub.model.classify(SEQUENCE_HEAD, hub.extract_features(ids), padding_mask=~real)
                for hub in (classifier, int8)
            ]
        assert float(F.cosine_similarity(logits[0], logits[1], dim=-1).min()) >= 0.99
    assert min(worst.values()) >= 0.99, worst
    # The features are not degenerate: the tokens' own features point in different directions.
    features = reference[real]
    assert float(F.cosine_similarity(features[:, None], features[None], dim=-1).mean()) < 0.5


def test_int8_sentence_embeddings_of_a_folder_are_close_to_float32(st_folder):
    folder, model = st_folder
    hub = roberta_ext.from_pretrained(str(folder), dtype="int8")
    for texts in (SHORT, MIXED, LONG):
        expected = encode(model, texts)
        ours = hub.embed(texts)
        assert ours.shape == expected.shape and not torch.allclose(ours, expected, atol=1e-5)
        assert float(F.cosine_similarity(ours, expected, dim=-1).min()) >= 0.99
    assert hub.sentence_embedding.truncate_dim == 12
