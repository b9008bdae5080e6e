"""The one strict state loader (roberta_ext/checkpoints/state.py): every tensor used, every
parameter filled, every shape checked, the tied LM matrix checked — and the tensors adopted,
not copied."""

from __future__ import annotations

import pytest
import torch

from roberta_ext.checkpoints import CheckpointError
from roberta_ext.checkpoints.state import EMBEDDINGS, LM_OUTPUT, drop_pretraining_modules, load_state_strict
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel


def tiny_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return dict(RobertaModel(preset("tiny", encoder_layers=1)).state_dict())


def fresh_model() -> RobertaModel:
    return RobertaModel(preset("tiny", encoder_layers=1))


def test_a_complete_state_is_adopted_without_a_copy_and_stays_tied():
    state = tiny_state()
    del state[LM_OUTPUT]  # tied: a file may leave it out (fairseq's do not)
    model = fresh_model()
    load_state_strict(model, state, source="ok.pt")
    embeddings = model.encoder.sentence_encoder.embed_tokens.weight
    assert embeddings.data_ptr() == state[EMBEDDINGS].data_ptr()  # adopted (assign=True)
    assert model.encoder.lm_head.weight is embeddings  # tied again after assign


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


def test_a_wrong_shape_names_the_tensor_and_both_shapes():
    state = tiny_state()
    key = "encoder.sentence_encoder.layers.0.fc1.weight"
    state[key] = state[key][:-1]
    with pytest.raises(CheckpointError, match=rf"'f.pt': {key} has shape \(\d+, \d+\), our {key} expects"):
        load_state_strict(fresh_model(), state, source="f.pt")


def test_a_tied_lm_matrix_that_differs_from_the_embeddings_is_refused():
    state = tiny_state()
    state[LM_OUTPUT] = state[EMBEDDINGS] + 1
    with pytest.raises(CheckpointError, match="tied to the embeddings but its weights differ"):
        load_state_strict(fresh_model(), state, source="f.pt")


def test_pretraining_only_modules_are_dropped_and_counted():
    state = tiny_state()
    state["generator.layer.weight"] = torch.zeros(1)
    state["generator.layer.bias"] = torch.zeros(1)
    state["sbo_head.dense.weight"] = torch.zeros(1)
    assert drop_pretraining_modules(fresh_model(), state) == {"generator": 2, "sbo_head": 1}
    load_state_strict(fresh_model(), state, source="pretraining.pt")  # what is left fits exactly
