"""A fairseq checkpoint's model options -> our config (``config_from_fairseq``), and what a
checkpoint written here records: every model option but the vocabulary (the embedding's row
count) and the attention strategy (the choice of whoever runs the model)."""

from __future__ import annotations

import torch

from roberta_ext.checkpoints import load_checkpoint_file, load_roberta_checkpoint, save_roberta_checkpoint
from roberta_ext.checkpoints.fairseq import config_from_fairseq
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.modeling.config import CHECKPOINT_OPTIONS, FAIRSEQ_NAMES


def test_fairseq_options_map_onto_the_preset_the_architecture_names():
    cfg = config_from_fairseq({"arch": "roberta_base", "untie_weights_roberta": True, "unknown": 1})
    assert cfg.untie_weights and cfg == preset("base", untie_weights=True)
    assert config_from_fairseq({"_name": "roberta_large"}) == preset("large")
    transformer_names = {"arch": "roberta_base", "encoder_layernorm_embedding": False}  # fairseq's transformer's
    assert config_from_fairseq(transformer_names).layernorm_embedding is False


def test_the_attention_strategy_is_not_recorded_nor_read():
    assert "attention" not in CHECKPOINT_OPTIONS
    assert config_from_fairseq({"arch": "roberta_base", "attention": "masked"}).attention is None


def test_a_checkpoint_records_the_same_options_whatever_the_strategy(tmp_path):
    torch.manual_seed(0)
    model = RobertaModel(preset("tiny", attention="masked"))
    save_roberta_checkpoint(model, tmp_path / "model.pt")
    options = load_checkpoint_file(str(tmp_path / "model.pt"))["cfg"]["model"]
    assert set(options) == {"_name", "arch", *(FAIRSEQ_NAMES[name] for name in CHECKPOINT_OPTIONS)}
    loaded = load_roberta_checkpoint(tmp_path / "model.pt").model
    assert loaded.cfg == model.cfg.replace(attention=None)
    assert loaded.encoder.sentence_encoder.attention is None  # the reader's choice: its environment, else auto
