"""The one strict state loader (roberta_ext/checkpoints/state.py): every tensor used, every
parameter filled, every shape checked, the tied LM matrix checked (an untied one loaded as its own),
the tensors adopted, not copied; its messages in full, and which pretraining-only tensors are dropped."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from roberta_ext.checkpoints import CheckpointError
from roberta_ext.checkpoints.state import (
    EMBEDDINGS,
    LM_OUTPUT,
    _listed,
    drop_pretraining_modules,
    load_state_strict,
    pretraining_modules,
)
from roberta_ext.families import families, preset
from roberta_ext.modeling import RobertaModel


def tiny_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return dict(RobertaModel(preset("tiny", encoder_layers=1)).state_dict())


def fresh_model() -> RobertaModel:
    return RobertaModel(preset("tiny", encoder_layers=1))


def model_and_state(name: str = "tiny", **options) -> tuple[RobertaModel, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    state = {
        key: tensor.clone()
        for key, tensor in RobertaModel(preset(name, encoder_layers=1, **options)).state_dict().items()
    }
    return RobertaModel(preset(name, encoder_layers=1, **options)), state


def refused(message: str):
    return pytest.raises(CheckpointError, match=re.escape(message) + "$")


# ------------------------------------------------------------------- missing and unexpected tensors


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, "[]"),
        (1, "['n0']"),
        (6, "['n0', 'n1', 'n2', 'n3', 'n4', 'n5']"),
        (7, "['n0', 'n1', 'n2', 'n3', 'n4', 'n5'] ..."),
        (20, "['n0', 'n1', 'n2', 'n3', 'n4', 'n5'] ..."),
    ],
)
def test_lists_are_cut_after_six_names(count, expected):
    assert _listed([f"n{index}" for index in range(count)]) == expected


def test_a_shorter_limit_cuts_sooner():
    assert _listed(["a", "b", "c"], limit=2) == "['a', 'b'] ..."
    assert _listed(["a", "b"], limit=2) == "['a', 'b']"


def test_missing_unexpected_and_unused_tensors_are_named_with_the_files_own_names():
    state = tiny_state()
    del state["encoder.lm_head.bias"]
    state["encoder.extra.weight"] = torch.zeros(1)
    said = r"'f.pt' does not match a roberta model: parameters not in the file \['encoder.lm_head.bias <- cls.bias'\]"
    with pytest.raises(CheckpointError, match=said) as raised:
        load_state_strict(
            fresh_model(), state, source="f.pt", file_names={"encoder.lm_head.bias": "cls.bias"}, unused=["pooler.x"]
        )
    assert "['encoder.extra.weight', 'pooler.x']" in str(raised.value)


def test_the_message_names_at_most_six_missing_and_six_unexpected_tensors():
    model, state = model_and_state()
    missing = [key for key in state if ".layers.0." in key][:7]
    for key in missing:
        del state[key]
    for index in range(8):
        state[f"extra.{index}"] = torch.zeros(1)
    expected = (
        f"'f.pt' does not match a roberta model: parameters not in the file {missing[:6]} ..., "
        "tensors of the file nothing takes ['extra.0', 'extra.1', 'extra.2', 'extra.3', 'extra.4', 'extra.5'] ..."
    )
    with refused(expected):
        load_state_strict(model, state, source="f.pt")


def test_unexpected_names_are_the_files_own_sorted_once_with_the_unused_ones():
    model, state = model_and_state()
    state["z.weight"] = torch.zeros(1)
    state["b.weight"] = torch.zeros(1)
    names = {"z.weight": "cls.z", "b.weight": "cls.z", EMBEDDINGS: "word_embeddings"}
    expected = (
        "'hf' does not match a roberta model: parameters not in the file [], "
        "tensors of the file nothing takes ['a.unused', 'cls.z']"
    )
    with refused(expected):
        load_state_strict(model, state, source="hf", file_names=names, unused=("cls.z", "a.unused"))


def test_only_unused_tensors_are_refused_too():
    model, state = model_and_state()
    expected = (
        "'f.pt' does not match a roberta model: parameters not in the file [], "
        "tensors of the file nothing takes ['pooler.x']"
    )
    with refused(expected):
        load_state_strict(model, state, source="f.pt", unused=["pooler.x"])


def test_the_message_names_the_models_family():
    model, state = model_and_state("bert-tiny")
    del state["encoder.lm_head.bias"]
    expected = (
        "'b.bin' does not match a bert model: parameters not in the file ['encoder.lm_head.bias'], "
        "tensors of the file nothing takes []"
    )
    with refused(expected):
        load_state_strict(model, state, source="b.bin")


def test_without_embeddings_the_tied_lm_matrix_is_missing_too():
    model, state = model_and_state()
    del state[EMBEDDINGS], state[LM_OUTPUT]
    expected = (
        f"'f.pt' does not match a roberta model: parameters not in the file ['{EMBEDDINGS} <- emb', '{LM_OUTPUT}'], "
        "tensors of the file nothing takes []"
    )
    with refused(expected):
        load_state_strict(model, state, source="f.pt", file_names={EMBEDDINGS: "emb"})


# ------------------------------------------------------------------------------------------- shapes


def test_a_wrong_shape_names_the_tensor_and_both_shapes():
    state = tiny_state()
    key = "encoder.sentence_encoder.layers.0.fc1.weight"
    state[key] = state[key][:-1]
    with pytest.raises(CheckpointError, match=rf"'f.pt': {key} has shape \(\d+, \d+\), our {key} expects"):
        load_state_strict(fresh_model(), state, source="f.pt")


def test_a_wrong_shape_names_the_files_tensor_and_both_shapes_first_in_the_models_order():
    model, state = model_and_state()
    fc1 = "encoder.sentence_encoder.layers.0.fc1.weight"
    state[fc1] = state[fc1][:-1]
    state["encoder.lm_head.bias"] = state["encoder.lm_head.bias"][:3]
    with refused(f"'f.pt': intermediate.dense.weight has shape (63, 32), our {fc1} expects (64, 32)"):
        load_state_strict(model, state, source="f.pt", file_names={fc1: "intermediate.dense.weight"})
    model, state = model_and_state()
    state["encoder.lm_head.bias"] = state["encoder.lm_head.bias"][:3]
    with refused("'f.pt': encoder.lm_head.bias has shape (3,), our encoder.lm_head.bias expects (64,)"):
        load_state_strict(model, state, source="f.pt")


# ------------------------------------------------------------------- the LM matrix, tied and untied


def test_a_tied_lm_matrix_that_differs_from_the_embeddings_is_refused():
    state = tiny_state()
    state[LM_OUTPUT] = state[EMBEDDINGS] + 1
    with pytest.raises(CheckpointError, match="tied to the embeddings but its weights differ"):
        load_state_strict(fresh_model(), state, source="f.pt")


def test_a_tied_lm_matrix_that_differs_from_the_embeddings_is_refused_with_the_source():
    model, state = model_and_state()
    state[LM_OUTPUT] = state[LM_OUTPUT].clone()
    state[LM_OUTPUT][0, 0] += 1
    with refused("'f.pt': the LM head is tied to the embeddings but its weights differ"):
        load_state_strict(model, state, source="f.pt")


def test_an_equal_tied_lm_matrix_is_taken_and_tied():
    model, state = model_and_state()
    state[LM_OUTPUT] = state[EMBEDDINGS].clone()
    load_state_strict(model, state, source="f.pt")
    assert model.encoder.lm_head.weight is model.encoder.sentence_encoder.embed_tokens.weight
    assert torch.equal(model.encoder.lm_head.weight, state[EMBEDDINGS])


def test_an_untied_lm_matrix_is_its_own_and_must_be_in_the_file():
    model, state = model_and_state(untie_weights=True)
    lm_output = state[LM_OUTPUT]
    assert not torch.equal(lm_output, state[EMBEDDINGS])
    load_state_strict(model, state, source="f.pt")
    assert model.encoder.lm_head.weight.data_ptr() == lm_output.data_ptr()
    assert model.encoder.sentence_encoder.embed_tokens.weight.data_ptr() == state[EMBEDDINGS].data_ptr()
    model, state = model_and_state(untie_weights=True)
    del state[LM_OUTPUT]
    expected = (
        f"'f.pt' does not match a roberta model: parameters not in the file ['{LM_OUTPUT}'], "
        "tensors of the file nothing takes []"
    )
    with refused(expected):
        load_state_strict(model, state, source="f.pt")


# ----------------------------------------------------------------------------------------- adoption


def test_a_complete_state_is_adopted_without_a_copy_and_stays_tied():
    state = tiny_state()
    del state[LM_OUTPUT]  # tied: a file may leave it out (fairseq's do not)
    model = fresh_model()
    load_state_strict(model, state, source="ok.pt")
    embeddings = model.encoder.sentence_encoder.embed_tokens.weight
    assert embeddings.data_ptr() == state[EMBEDDINGS].data_ptr()  # adopted (assign=True)
    assert model.encoder.lm_head.weight is embeddings  # tied again after assign


def test_every_tensor_is_adopted():
    model, state = model_and_state()
    load_state_strict(model, state, source="f.pt")
    loaded = model.state_dict()
    assert sorted(loaded) == sorted(state)
    assert all(loaded[key].data_ptr() == tensor.data_ptr() for key, tensor in state.items())


# ------------------------------------------------------------------------- pretraining-only modules


def test_pretraining_only_modules_are_dropped_and_counted():
    state = tiny_state()
    state["generator.layer.weight"] = torch.zeros(1)
    state["generator.layer.bias"] = torch.zeros(1)
    state["sbo_head.dense.weight"] = torch.zeros(1)
    assert drop_pretraining_modules(fresh_model(), state) == {"generator": 2, "sbo_head": 1}
    load_state_strict(fresh_model(), state, source="pretraining.pt")  # what is left fits exactly


def test_pretraining_modules_are_the_families_in_their_order_once_each():
    declared = [module for family in families() for module in family.pretraining_modules]
    expected = tuple(module for index, module in enumerate(declared) if module not in declared[:index])
    assert pretraining_modules() == expected
    assert set(pretraining_modules()) >= {"generator", "discriminator_head", "sbo_head"}


def pretraining_state() -> dict[str, torch.Tensor]:
    return {
        "generator.a": torch.zeros(1),
        "generator.b.c": torch.zeros(1),
        "generatorx.a": torch.zeros(1),
        "x.generator.a": torch.zeros(1),
        "sbo_head.w": torch.zeros(1),
        "discriminator_head.w": torch.zeros(1),
        "encoder.w": torch.zeros(1),
    }


@pytest.mark.parametrize(
    ("child", "dropped", "kept"),
    [
        ("sbo_head", {"generator": 2, "discriminator_head": 1}, ["sbo_head.w"]),
        ("generator", {"discriminator_head": 1, "sbo_head": 1}, ["generator.a", "generator.b.c"]),
    ],
)
def test_only_modules_the_model_lacks_are_dropped_and_each_counted(child, dropped, kept):
    state = pretraining_state()
    model = nn.ModuleDict({child: nn.Linear(1, 1)})
    assert drop_pretraining_modules(model, state) == dropped
    assert sorted(state) == sorted(["encoder.w", "generatorx.a", "x.generator.a", *kept])
    assert drop_pretraining_modules(model, state) == {}


def test_a_prefix_drops_only_the_tensors_under_it():
    state = {"model.generator.a": torch.zeros(1), "generator.b": torch.zeros(1), "model.sbo_head.c": torch.zeros(1)}
    assert drop_pretraining_modules(nn.Module(), state, prefix="model.") == {"generator": 1, "sbo_head": 1}
    assert list(state) == ["generator.b"]
