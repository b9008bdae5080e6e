"""Every fairseq architecture the plugin registers builds exactly its family's preset, through
fairseq's own command-line parsing (``parse_args_and_arch``): the plugin's options and
architectures are derived from :class:`~roberta_ext.modeling.EncoderConfig` and the families,
and this is the check that the derivation holds."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tests.conftest import REPO
from tests.peers import require

require("fairseq")

from fairseq import options  # (after the peer check)

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the architectures)
from roberta_ext.fairseq_plugin.models import RobertaExtConfig, config_from_args
from roberta_ext.families import families
from roberta_ext.modeling import EncoderConfig
from roberta_ext.modeling.config import FAIRSEQ_NAMES

ARCHITECTURES = [(family, name, size) for family in families() for name, size in family.architectures().items()]


class FakeDictionary:
    def __init__(self, size: int, pad: int) -> None:
        self.size, self._pad = size, pad

    def __len__(self) -> int:
        return self.size

    def pad(self) -> int:
        return self._pad


def parse(*argv: str) -> object:
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, ["data-bin", "--user-dir", str(REPO / "roberta_ext"), "--task", "roberta_ext_mlm", *argv]
    )


@pytest.mark.parametrize(("family", "arch", "size"), ARCHITECTURES, ids=[name for _, name, _ in ARCHITECTURES])
def test_architecture_builds_its_preset(family, arch, size):
    args = parse("--arch", arch)
    task = SimpleNamespace(source_dictionary=FakeDictionary(1000, 1))
    preset = family.preset(size)
    assert config_from_args(args, task) == preset.replace(vocab_size=1000, padding_idx=1)
    for option, value in family.architecture_defaults.get(size, {}).items():
        assert getattr(args, option) == value


def test_command_line_options_override_the_architecture():
    args = parse("--arch", "albert_ext_base", "--encoder-layers", "3", "--dropout", "0.2", "--family", "albert")
    cfg = config_from_args(args, SimpleNamespace(source_dictionary=FakeDictionary(100, 0)))
    assert (cfg.encoder_layers, cfg.dropout, cfg.embedding_size, cfg.share_layers) == (3, 0.2, 128, "all")


def test_plugin_options_are_encoder_config_fields():
    """One declaration: the plugin's dataclass has exactly EncoderConfig's command-line fields
    (under fairseq's names, with their defaults) plus --load-checkpoint-heads."""
    plugin = {f.name: f.default for f in dataclasses.fields(RobertaExtConfig) if f.name != "_name"}
    ours = {FAIRSEQ_NAMES[f.name]: f.default for f in dataclasses.fields(EncoderConfig) if f.metadata["plugin"]}
    # max_positions alone defaults to "from the task", as in fairseq's roberta.
    assert plugin == {**ours, "max_positions": None, "load_checkpoint_heads": False}
    assert "untie_weights_roberta" in plugin and "vocab_size" not in plugin


def test_every_family_has_architectures_and_each_size_a_preset():
    for family in families():
        assert family.architectures(), family.name
        for size in family.architecture_sizes:
            assert size in family.presets


def parse_for(task: str, *argv: str) -> object:
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, ["data-bin", "--user-dir", str(REPO / "roberta_ext"), "--task", task, *argv]
    )


@pytest.mark.parametrize("arch", ["roberta_ext_base", "bert_ext_base", "electra_ext_small"])
def test_max_positions_defaults_to_tokens_per_sample_as_in_fairseq(arch):
    """fairseq's roberta: without --max-positions the model takes --tokens-per-sample, so a model
    pretrained with --tokens-per-sample 128 has 128 positions (the plugin used to build 512)..."""
    task = SimpleNamespace(source_dictionary=FakeDictionary(100, 1), max_positions=lambda: 128)
    args = parse_for("roberta_ext_mlm", "--arch", arch, "--tokens-per-sample", "128")
    assert config_from_args(args, task).max_positions == 128
    args = parse_for("roberta_ext_mlm", "--arch", arch, "--tokens-per-sample", "128", "--max-positions", "256")
    assert config_from_args(args, task).max_positions == 256  # given: as given


def test_fine_tuning_takes_the_tasks_max_positions():
    """...and fine-tuning it with --max-positions 128 builds the same 128 positions, so
    --restore-file of that checkpoint loads."""
    task = SimpleNamespace(source_dictionary=FakeDictionary(100, 1), max_positions=lambda: 128)
    args = parse_for(
        "roberta_ext_classification", "--arch", "roberta_ext_base", "--max-positions", "128", "--num-classes", "2"
    )
    assert config_from_args(args, task).max_positions == 128
