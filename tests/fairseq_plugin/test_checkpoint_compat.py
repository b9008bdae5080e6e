"""fairseq's own checkpoint loader under torch 2.13: refused without the plugin, read with it,
and still refusing code-running pickles."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch

from tests.peers import require

require("fairseq", "fairseq's own checkpoint loader is tested")

from fairseq import checkpoint_utils

import roberta_ext.fairseq_plugin  # noqa: F401  (installs the compatibility wrapper)
from tests.conftest import RunsCode


def original_loader():
    return checkpoint_utils.load_checkpoint_to_cpu.__wrapped__


@pytest.mark.parametrize("layout", ["modern", "legacy_args", "release2019", "dictconfig"])
def test_fairseq_checkpoints_are_refused_by_plain_torch_and_read_with_the_plugin(fairseq_reference, layout):
    path = str(Path(fairseq_reference[layout]) / "model.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        original_loader()(path)
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    assert "encoder.sentence_encoder.embed_tokens.weight" in state["model"] or any(
        k.startswith("decoder.") for k in state["model"]
    )
    assert state["cfg"] is not None


def test_installing_twice_wraps_once():
    before = checkpoint_utils.load_checkpoint_to_cpu
    roberta_ext.fairseq_plugin.checkpoint_compat.install()
    assert checkpoint_utils.load_checkpoint_to_cpu is before


def test_a_code_running_checkpoint_is_still_refused(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "args": RunsCode(str(marker))}, path)
    with pytest.raises(pickle.UnpicklingError):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()


def test_fairseq_reads_checkpoints_written_by_our_saver(tmp_path):
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    save_roberta_checkpoint(RobertaModel(preset("tiny")), tmp_path / "model.pt")
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "model.pt"))
    assert "encoder.sentence_encoder.embed_tokens.weight" in state["model"]
