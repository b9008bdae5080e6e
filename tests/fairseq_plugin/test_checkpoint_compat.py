"""fairseq's own checkpoint loader under torch 2.13: refused without the plugin, read with it (value
for value as fairseq read it before torch 2.6), and still refusing code-running pickles."""

from __future__ import annotations

import argparse
import functools
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.peers import require

require("fairseq", "fairseq's own checkpoint loader is tested")

from fairseq import checkpoint_utils, options
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ValidationError
from omegaconf.nodes import AnyNode, BooleanNode, BytesNode, FloatNode, IntegerNode, StringNode

import roberta_ext.fairseq_plugin  # noqa: F401  (installs the compatibility wrapper)
from roberta_ext.fairseq_plugin import checkpoint_compat
from tests.conftest import RunsCode

FAIRSEQ_LOADER = checkpoint_utils.load_checkpoint_to_cpu.__wrapped__
"""fairseq's own loader, as the plugin's import found it."""


@pytest.fixture
def installed(monkeypatch):
    """fairseq's loader as it is before the plugin, then wrapped by ``install()`` in this test: the
    plugin's import ran it once, in mutmut's parent process only."""
    monkeypatch.setattr(checkpoint_utils, "load_checkpoint_to_cpu", FAIRSEQ_LOADER)
    checkpoint_compat.install()


def fairseq_under_old_torch(path: str):
    """fairseq's loader as it ran before torch 2.6: ``torch.load`` with ``weights_only=False``
    (only for the files these tests write themselves)."""
    load = torch.load
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(torch, "load", functools.partial(load, weights_only=False))
        return FAIRSEQ_LOADER(path)


def training_args() -> argparse.Namespace:
    """A tiny roberta_base's arguments as fairseq-train parses them."""
    argv = ["data", "--task", "masked_lm", "--arch", "roberta_base", "--max-positions", "16", "--tokens-per-sample"]
    argv += ["16", "--encoder-layers", "1", "--encoder-embed-dim", "8", "--encoder-ffn-embed-dim", "16"]
    argv += ["--encoder-attention-heads", "2"]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    """``{layout: path}``: the files of :func:`write_checkpoint` (read-only), written once."""
    folder = tmp_path_factory.mktemp("checkpoints")
    args = training_args()
    return {layout: write_checkpoint(folder, layout, args) for layout in ("modern", "dictconfig")}


def write_checkpoint(folder: Path, layout: str, args: argparse.Namespace) -> str:
    """A checkpoint as fairseq's trainer writes it for an argparse-configured model: ``modern``
    (fairseq 0.12: ``cfg`` a plain dict, the model's Namespace inside), ``dictconfig`` (fairseq
    0.10: ``cfg`` an omegaconf DictConfig, the model's arguments a dict, with a section of typed
    value nodes: string, integer, float, boolean, bytes, any); numpy scalars in the training state. The config holds the
    sections fairseq's loader reads, not hydra's full conversion (a second a call): the
    ``fairseq_reference`` checkpoints have that, and the ``args``-only layouts, whose loading runs it."""
    cfg = {
        "_name": None,
        "common": {"seed": 1, "fp16": False, "log_interval": 100},
        "generation": {"print_alignment": None, "beam": 5},
        "model": args,
        "task": {"_name": "masked_lm", "data": "data", "tokens_per_sample": 16, "sample_break_mode": "complete"},
        "criterion": {"_name": "masked_lm", "tpu": False},
        "optimizer": {"_name": "adam", "adam_betas": "(0.9, 0.98)", "lr": [0.0005]},
    }
    state = {
        "model": {
            "encoder.sentence_encoder.embed_tokens.weight": torch.randn(5, 8),
            "encoder.lm_head.bias": torch.randn(5),
        },
        "optimizer_history": [
            {
                "criterion_name": "MaskedLmLoss",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": np.float64(2.5)},
                "num_updates": np.int64(10),
            }
        ],
        "extra_state": {"train_iterator": {"epoch": 2, "iterations_in_epoch": 3}, "best": np.float32(1.25)},
    }
    if layout == "modern":
        state.update(args=None, cfg=cfg)
    else:
        cfg["model"] = vars(cfg["model"])
        cfg["nodes"] = {
            "name": StringNode("roberta"),
            "layers": IntegerNode(1),
            "dropout": FloatNode(0.1),
            "bias": BooleanNode(True),
            "magic": BytesNode(b"\x00\x01"),
            "unset": AnyNode(None),
            "sizes": [8, 16],
        }
        state.update(args=None, cfg=OmegaConf.create(cfg))
    path = folder / f"{layout}.pt"
    torch.save(state, path)
    return str(path)


def assert_same(ours, theirs, where="state"):
    """Value for value, and type for type: tensors, configs (as containers), numpy scalars."""
    assert type(ours) is type(theirs), where
    if isinstance(ours, torch.Tensor):
        assert torch.equal(ours, theirs), where
    elif isinstance(ours, DictConfig | ListConfig):
        assert OmegaConf.to_container(ours) == OmegaConf.to_container(theirs), where
    elif isinstance(ours, dict):
        assert ours.keys() == theirs.keys(), where
        for key in ours:
            assert_same(ours[key], theirs[key], f"{where}[{key!r}]")
    elif isinstance(ours, list):
        assert len(ours) == len(theirs), where
        for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    else:
        assert ours == theirs, where


@pytest.mark.parametrize("layout", ["modern", "legacy_args", "release2019", "dictconfig"])
def test_fairseq_checkpoints_are_refused_by_plain_torch_and_read_with_the_plugin(fairseq_reference, layout):
    path = str(Path(fairseq_reference[layout]) / "model.pt")
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        FAIRSEQ_LOADER(path)
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    assert "encoder.sentence_encoder.embed_tokens.weight" in state["model"] or any(
        k.startswith("decoder.") for k in state["model"]
    )
    assert state["cfg"] is not None


@pytest.mark.parametrize("layout", ["modern", "dictconfig"])
def test_each_layout_is_read_as_fairseq_read_it_before_torch_2_6(checkpoints, installed, layout):
    path = checkpoints[layout]
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        FAIRSEQ_LOADER(path)
    state = checkpoint_utils.load_checkpoint_to_cpu(path)
    expected = fairseq_under_old_torch(path)
    assert_same(state, expected)
    assert state["cfg"].model.encoder_layers == 1
    assert type(state["extra_state"]["best"]) is np.float32
    if layout == "dictconfig":
        assert OmegaConf.to_container(state["cfg"].nodes) == {
            "name": "roberta",
            "layers": 1,
            "dropout": 0.1,
            "bias": True,
            "magic": b"\x00\x01",
            "unset": None,
            "sizes": [8, 16],
        }


def test_the_wrapper_passes_fairseqs_arguments_through(checkpoints, installed):
    overrides = {"encoder_layers": 3, "data": "elsewhere"}
    for state in (
        checkpoint_utils.load_checkpoint_to_cpu(checkpoints["modern"], overrides),
        checkpoint_utils.load_checkpoint_to_cpu(checkpoints["modern"], arg_overrides=overrides),
    ):
        assert (state["cfg"].model.encoder_layers, state["cfg"].task.data) == (3, "elsewhere")


def test_installing_wraps_fairseqs_loader_once(installed):
    wrapped = checkpoint_utils.load_checkpoint_to_cpu
    assert wrapped is not FAIRSEQ_LOADER
    assert wrapped.__wrapped__ is FAIRSEQ_LOADER
    assert (wrapped.__name__, wrapped.__doc__) == (FAIRSEQ_LOADER.__name__, FAIRSEQ_LOADER.__doc__)
    checkpoint_compat.install()
    assert checkpoint_utils.load_checkpoint_to_cpu is wrapped


def test_a_code_running_checkpoint_is_still_refused(tmp_path, installed):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "args": RunsCode(str(marker))}, path)
    with pytest.raises(pickle.UnpicklingError, match="unsupported GLOBAL posix.system whose module posix is blocked"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    assert not marker.exists()


def test_only_omegaconfs_config_classes_are_admitted(tmp_path, installed):
    """omegaconf's nodes module also holds its errors, enums and pathlib.Path: none of them is a
    config, and a checkpoint holding one is refused, as by our own loader."""
    from roberta_ext.checkpoints import CheckpointError
    from roberta_ext.checkpoints.safe_load import load_checkpoint_file

    path = tmp_path / "odd.pt"
    torch.save({"model": {}, "args": None, "cfg": {"error": ValidationError("no")}}, path)
    with pytest.raises(pickle.UnpicklingError, match="GLOBAL omegaconf.errors.ValidationError was not an allowed"):
        checkpoint_utils.load_checkpoint_to_cpu(str(path))
    with pytest.raises(CheckpointError, match="omegaconf.errors.ValidationError"):
        load_checkpoint_file(path)


def test_fairseq_reads_checkpoints_written_by_our_saver(tmp_path, installed):
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    save_roberta_checkpoint(RobertaModel(preset("tiny")), tmp_path / "model.pt")
    state = checkpoint_utils.load_checkpoint_to_cpu(str(tmp_path / "model.pt"))
    assert "encoder.sentence_encoder.embed_tokens.weight" in state["model"]
