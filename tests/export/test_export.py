"""Export (ONNX run by onnxruntime, torch.export) and int8 inference, against our own hub.

Every exported graph is traced on a 2 x 8 batch and run here on batches of other sizes and
lengths (dynamic axes), padded: its outputs must equal the hub's (``extract_features``,
``predict(..., return_logits=True)``, a token head, pooled features) on real tokens within 1e-4.
The models are tiny, with weights spread wider than BERT's initialisation (N(0, 1/fan_in)
linear layers, LayerNorms away from 1 and 0), so that every layer moves the features: with
N(0, 0.02) weights the features are nearly the embeddings, and any error in a layer hides.
"""

from __future__ import annotations

import copy
import math
import os
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

import roberta_ext
from roberta_ext import export
from roberta_ext.checkpoints import save_roberta_checkpoint
from roberta_ext.cli.export import main as export_main
from roberta_ext.embedding.pooling import pool
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

TOLERANCE = 1e-4
# (batch, length) of the batches run; the graph was traced on 2 x 8.
SHAPES = [(1, 5), (3, 13), (6, 40)]


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


def assert_close(ours, reference: torch.Tensor, where: torch.Tensor) -> None:
    ours = torch.as_tensor(ours)
    assert ours.shape == reference.shape
    difference = float((ours - reference)[where].abs().max())
    assert difference <= TOLERANCE, difference


def run_onnx(path: Path, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None) -> np.ndarray:
    onnxruntime = require("onnxruntime", "the exported files are run by it")
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": input_ids.numpy()}
    if attention_mask is not None:
        feeds["attention_mask"] = attention_mask.numpy()
    assert [i.name for i in session.get_inputs()] == list(feeds)
    (out,) = session.run(None, feeds)
    return out


# ------------------------------------------------------------------------------- the graph


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


# -------------------------------------------------------------------------------- ONNX


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


# ------------------------------------------------------------------------- torch.export


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


# ---------------------------------------------------------------------------- the command


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


# -------------------------------------------------------------------------------- int8


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
