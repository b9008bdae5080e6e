"""Checkpoint loading: every layout comes back exactly, and hostile or broken files are
refused with the file named, without running anything from them."""

from __future__ import annotations

import argparse
import io
import json
import pickle
import re
import zipfile

import pytest
import torch

from roberta_ext.checkpoints import (
    CheckpointError,
    load_checkpoint_file,
    load_roberta_checkpoint,
    save_roberta_checkpoint,
    upgrade_state_dict,
)
from roberta_ext.checkpoints.transformers import load_transformers
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from tests.conftest import RunsCode


@pytest.fixture
def model() -> RobertaModel:
    torch.manual_seed(0)
    model = RobertaModel(preset("tiny")).eval()
    model.register_classification_head("mnli", num_classes=3)
    return model


def features(model: RobertaModel) -> torch.Tensor:
    tokens = torch.tensor([[0, 5, 9, 12, 2, 1], [0, 7, 2, 1, 1, 1]])
    with torch.no_grad():
        return model(tokens, features_only=True)[0]


def assert_same_model(a: RobertaModel, b: RobertaModel) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for key in sa:
        torch.testing.assert_close(sa[key], sb[key], rtol=0, atol=0, msg=key)
    torch.testing.assert_close(features(a), features(b), rtol=0, atol=0)


def test_modern_layout_round_trip(model, tmp_path):
    save_roberta_checkpoint(model, tmp_path / "model.pt")
    loaded = load_roberta_checkpoint(tmp_path / "model.pt")
    assert not loaded.model.training
    assert list(loaded.model.classification_heads) == ["mnli"]
    assert loaded.model.encoder.lm_head.weight is loaded.model.encoder.sentence_encoder.embed_tokens.weight
    assert_same_model(model, loaded.model)


def test_args_namespace_layout(model, tmp_path):
    args = argparse.Namespace(arch="roberta_base", encoder_attention_heads=4, activation_fn="gelu", task="masked_lm")
    torch.save({"args": args, "model": model.state_dict()}, tmp_path / "model.pt")
    loaded = load_roberta_checkpoint(tmp_path / "model.pt")
    assert loaded.options["arch"] == "roberta_base" and loaded.task["_name"] == "masked_lm"
    assert_same_model(model, loaded.model)


def legacy_2019_state_dict(model: RobertaModel) -> dict[str, torch.Tensor]:
    old = {}
    for key, tensor in model.state_dict().items():
        if key.endswith(".version") or ".k_proj." in key or ".v_proj." in key:
            continue
        if ".q_proj." in key:
            tensor = torch.cat([model.state_dict()[key.replace("q_proj", n)] for n in ("q_proj", "k_proj", "v_proj")])
            key = key.replace("q_proj.", "in_proj_")
        old[key.replace("encoder.", "decoder.", 1).replace("layernorm_embedding", "emb_layer_norm")] = tensor
    return old


def test_2019_release_layout_in_legacy_serialization(model, tmp_path):
    args = argparse.Namespace(arch="roberta_large", encoder_attention_heads=4)
    path = tmp_path / "model.pt"
    torch.save({"args": args, "model": legacy_2019_state_dict(model)}, path, _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(path)
    assert_same_model(model, load_roberta_checkpoint(path).model)


def test_upgrade_splits_fused_projection_in_q_k_v_order():
    fused = torch.arange(6.0).view(6, 1)
    up = upgrade_state_dict({"decoder.sentence_encoder.layers.0.self_attn.in_proj_weight": fused})
    prefix = "encoder.sentence_encoder.layers.0.self_attn."
    assert up[prefix + "q_proj.weight"].flatten().tolist() == [0, 1]
    assert up[prefix + "k_proj.weight"].flatten().tolist() == [2, 3]
    assert up[prefix + "v_proj.weight"].flatten().tolist() == [4, 5]


def test_fp16_checkpoint_loads_as_float32(model, tmp_path):
    torch.save(
        {"args": argparse.Namespace(encoder_attention_heads=4), "model": model.half().state_dict()},
        tmp_path / "model.pt",
    )
    loaded = load_roberta_checkpoint(tmp_path / "model.pt").model
    assert loaded.encoder.sentence_encoder.embed_tokens.weight.dtype == torch.float32


# ----------------------------------------------------------------------------- bad files
def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_checkpoint_file(tmp_path / "nope.pt")


def test_truncated_file_is_named_and_called_truncated(model, tmp_path):
    path = tmp_path / "model.pt"
    save_roberta_checkpoint(model, path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=r"model\.pt.*truncated"):
        load_roberta_checkpoint(path)


@pytest.mark.parametrize("content", [b"", b"this is a text file, not a checkpoint\n", b"\x00" * 100])
def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path, content):
    path = tmp_path / "notes.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="notes.pt"):
        load_checkpoint_file(path)


def test_a_torch_file_without_a_model_is_not_a_fairseq_checkpoint(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({"weight": torch.zeros(2)}, path)
    with pytest.raises(CheckpointError, match="weights.pt.*not a fairseq checkpoint"):
        load_checkpoint_file(path)


def test_a_checkpoint_of_another_model_is_refused_with_keys_named(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"model": {"encoder.sentence_encoder.embed_tokens.weight": torch.zeros(8, 4)}}, path)
    with pytest.raises(CheckpointError, match="other.pt.*embed_positions"):
        load_roberta_checkpoint(path)


def test_a_shape_mismatch_is_named(model, tmp_path):
    state = model.state_dict()
    state["encoder.lm_head.dense.weight"] = torch.zeros(3, 3)
    torch.save({"args": argparse.Namespace(encoder_attention_heads=4), "model": state}, tmp_path / "model.pt")
    with pytest.raises(CheckpointError, match=r"lm_head\.dense\.weight has shape \(3, 3\)"):
        load_roberta_checkpoint(tmp_path / "model.pt")


@pytest.mark.parametrize("zip_format", [True, False])
def test_a_pickle_that_tries_to_run_code_is_refused_and_nothing_runs(model, tmp_path, zip_format):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save(
        {"model": model.state_dict(), "args": RunsCode(str(marker))}, path, _use_new_zipfile_serialization=zip_format
    )
    with pytest.raises(
        CheckpointError,
        match=r"evil\.pt': it asks to import \w+\.system, which a fairseq checkpoint does not need; .*"
        "nothing from the file was executed",
    ):
        load_roberta_checkpoint(path)
    assert not marker.exists()


class TrainingArguments:
    """A class of the saving program, pickled by reference (its module and name): what a
    ``pytorch_model.bin`` saved with more than tensors holds."""


@pytest.mark.parametrize(
    ("extra", "culprit"),
    [
        (RunsCode, r"\w+\.system"),
        (lambda _marker: TrainingArguments(), r"tests\.checkpoints\.test_safe_load\.TrainingArguments"),
    ],
    ids=["runs-code", "a-class"],
)
def test_a_transformers_pytorch_model_bin_with_a_global_is_refused_as_a_transformers_file(tmp_path, extra, culprit):
    """The message is the transformers file's: it names ``pytorch_model.bin`` and the global, and
    says why (loading never runs code from the file), not that it is no fairseq checkpoint."""
    marker = tmp_path / "pwned"
    directory = tmp_path / "bert"
    directory.mkdir()
    config = {"model_type": "bert", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16}
    config |= {"num_hidden_layers": 1, "num_attention_heads": 2}
    (directory / "config.json").write_text(json.dumps(config))
    weights = {"bert.embeddings.word_embeddings.weight": torch.zeros(10, 8), "training_args": extra(str(marker))}
    torch.save(weights, directory / "pytorch_model.bin")
    with pytest.raises(CheckpointError) as error:
        load_transformers(directory)
    message = str(error.value)
    assert re.search(
        rf"refusing to load '.*/bert/pytorch_model\.bin': it asks to import {culprit}, which a transformers weights "
        "file does not need; loading never executes code from the file",
        message,
    ), message
    assert "fairseq" not in message and "nothing from the file was executed" in message
    assert not marker.exists()


def test_a_plain_pickle_that_runs_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps(RunsCode(str(marker)), protocol=2))
    with pytest.raises(CheckpointError, match="evil.pkl"):
        load_checkpoint_file(path)
    assert not marker.exists()


def test_failed_save_leaves_no_file(model, tmp_path, monkeypatch):
    def broken_save(obj, f, *args, **kwargs):
        with open(f, "wb") as out:
            out.write(b"half")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_roberta_checkpoint(model, tmp_path / "model.pt")
    assert list(tmp_path.iterdir()) == []


def test_checkpoint_loader_does_not_leave_safe_globals_behind(model, tmp_path):
    save_roberta_checkpoint(model, tmp_path / "model.pt")
    load_roberta_checkpoint(tmp_path / "model.pt")
    leftovers = [g for g in torch.serialization.get_safe_globals() if "Namespace" in repr(g) or "omegaconf" in repr(g)]
    assert leftovers == []
    buffer = io.BytesIO()
    torch.save({"args": argparse.Namespace()}, buffer)
    buffer.seek(0)
    with pytest.raises(pickle.UnpicklingError):  # torch's own default stays strict
        torch.load(buffer)
