"""Every fairseq architecture the plugin registers builds exactly its family's preset, through
fairseq's own command-line parsing (``parse_args_and_arch``): the plugin's options and
architectures are derived from :class:`~roberta_ext.modeling.EncoderConfig` and the families,
and this is the check that the derivation holds."""

from __future__ import annotations

import dataclasses
import re
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import REPO
from tests.peers import require

require("fairseq")

from fairseq import options  # (after the peer check)

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the architectures)
from roberta_ext.fairseq_plugin import models
from roberta_ext.fairseq_plugin.models import POSITIONS_KEY, RobertaExtConfig, RobertaExtModel, config_from_args
from roberta_ext.families import families, get_family
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
    # max_positions comes from --tokens-per-sample, as in fairseq's roberta (FROM_THE_TASK)
    expected = preset.replace(vocab_size=1000, padding_idx=1, max_positions=args.tokens_per_sample)
    assert config_from_args(args, task) == expected
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


def test_an_option_with_choices_is_refused_by_fairseqs_parser_outside_them(capsys):
    """EncoderConfig's ``choices`` become the flag's choices: fairseq's parser names them."""
    with pytest.raises(SystemExit):
        parse("--arch", "roberta_ext_base", "--position-style", "learned")
    expected = "argument --position-style: invalid choice: 'learned' (choose from 'fairseq', 'absolute', 'rotary')"
    assert expected in capsys.readouterr().err
    assert parse("--arch", "roberta_ext_base", "--position-style", "rotary").position_style == "rotary"


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


@pytest.mark.parametrize(
    ("hydra", "task_options", "expected"),
    [
        (
            False,
            {"tokens_per_sample": 128},
            "has --max-positions 64; raise --max-positions or lower --tokens-per-sample",
        ),
        (
            True,
            {"tokens_per_sample": 128},
            "has model.max_positions=64; raise model.max_positions or lower task.tokens_per_sample",
        ),
        (True, {"max_positions": 128}, "raise model.max_positions or lower task.max_positions"),
    ],
)
def test_a_task_longer_than_the_positions_is_refused_in_the_commands_spelling(
    hydra, task_options, expected, monkeypatch
):
    """fairseq-train's options, or under fairseq-hydra-train the keys to set: a pretraining task's
    task.tokens_per_sample, a fine-tuning task's task.max_positions."""
    monkeypatch.setattr(models, "under_hydra", lambda: hydra)
    task = SimpleNamespace(
        source_dictionary=FakeDictionary(100, 1), max_positions=lambda: 128, cfg=SimpleNamespace(**task_options)
    )
    args = parse_for("roberta_ext_mlm", "--arch", "roberta_ext_base", "--max-positions", "64")
    with pytest.raises(ValueError, match=re.escape(expected)):
        RobertaExtModel.checked_config(args, task)


@pytest.mark.parametrize(
    ("cfg", "rows", "expected"),
    [
        # RoBERTa's learned positions start at padding_idx + 1: 64 positions are 66 rows.
        (
            EncoderConfig(max_positions=512),
            (514, 66),
            "that of max_positions 64: pass task.max_positions=64 to fine-tune",
        ),
        # BERT's absolute positions: one row per position.
        (
            get_family("bert").preset("base"),
            (512, 128),
            "that of max_positions 128: pass task.max_positions=128 to fine-tune",
        ),
    ],
)
def test_a_position_table_of_another_size_names_the_max_positions_that_fits(cfg, rows, expected):
    model, checkpoint = ({POSITIONS_KEY: torch.zeros(n, 8)} for n in rows)
    hint = models.size_options_hint(cfg, model, checkpoint, hydra=True)
    assert hint.startswith("check model._name and the size overrides (++model.encoder_layers=N")
    assert expected in hint and "--max-positions" not in hint
    same = models.size_options_hint(cfg, model, model, hydra=False)
    assert same == "check --arch and the size options (--encoder-layers, --encoder-embed-dim, --max-positions, ...)"
