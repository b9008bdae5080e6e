"""What :func:`load_checkpoint_file` gives back for the parts of a fairseq checkpoint that are not
tensors: omegaconf configs (as fairseq >= 0.10 saves them), argparse Namespaces and numpy scalars
become plain Python, equal to what omegaconf's own ``to_container`` and numpy's ``item`` give."""

from __future__ import annotations

import argparse
import re

import numpy as np
import pytest
import torch

from roberta_ext.checkpoints.safe_load import load_checkpoint_file, to_plain
from tests.peers import require

CONFIG = {
    "model": {"_name": "roberta", "encoder_layers": 2, "dropout": 0.1, "tags": ["a", "b"], "flag": True},
    "task": {"_name": "masked_lm", "data": "/data", "tokens_per_sample": 512, "none": None},
    "optimization": {"lr": [0.0005], "max_epoch": 0},
}


def test_an_omegaconf_cfg_and_numpy_state_come_back_plain(tmp_path):
    omegaconf = require("omegaconf", "fairseq saves its cfg as an omegaconf DictConfig")
    cfg = omegaconf.OmegaConf.create(CONFIG)
    state = {
        "model": {"w": torch.ones(2)},
        "cfg": cfg,
        "args": None,
        "extra_state": {"best": np.float64(1.5), "steps": np.int64(7), "array": np.arange(3)},
    }
    torch.save(state, tmp_path / "model.pt")
    loaded = load_checkpoint_file(tmp_path / "model.pt")
    assert loaded["cfg"] == omegaconf.OmegaConf.to_container(cfg) == CONFIG
    assert loaded["args"] is None
    extra = loaded["extra_state"]
    assert to_plain(extra) == {"best": 1.5, "steps": 7, "array": [0, 1, 2]}
    assert type(to_plain(extra)["steps"]) is int


def test_to_plain_keeps_containers_and_leaves():
    namespace = argparse.Namespace(layers=(1, 2), inner=argparse.Namespace(x=[np.float32(0.5)]), name="n")
    assert to_plain(namespace) == {"layers": (1, 2), "inner": {"x": [0.5]}, "name": "n"}
    assert to_plain([{"a": (np.int64(3),)}]) == [{"a": (3,)}]
    assert to_plain("text") == "text" and to_plain(None) is None


@pytest.mark.parametrize("found", [[1, 2], {"cfg": {}}])
def test_a_torch_file_that_is_no_fairseq_checkpoint_is_named(tmp_path, found):
    torch.save(found, tmp_path / "weights.pt")
    expected = "list" if isinstance(found, list) else "['cfg']"
    with pytest.raises(ValueError, match=rf"^'.*weights\.pt' is not a fairseq checkpoint: expected a dict with a "
                       rf"'model' state dict, found {re.escape(expected)}$"):  # fmt: skip
        load_checkpoint_file(tmp_path / "weights.pt")
