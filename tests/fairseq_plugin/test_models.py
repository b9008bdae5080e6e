"""The plugin's models are the package's: ``forward`` is the encoder's (written once, in
``modeling``) with fairseq's time-first hidden states, and ELECTRA's and SpanBERT's pretraining
models are the families' classes, built from fairseq's options under their pretraining task."""

from __future__ import annotations

import dataclasses
import logging
import sys
from types import SimpleNamespace

import pytest
import torch

from tests.peers import require

require("fairseq")

from fairseq.data import Dictionary  # (after the peer check)

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the models and tasks)
from roberta_ext.fairseq_plugin import models
from roberta_ext.fairseq_plugin.electra import (
    ElectraExtModel,
    ElectraExtPretrainingModel,
    ElectraTask,
    ElectraTaskConfig,
)
from roberta_ext.fairseq_plugin.models import RobertaExtModel
from roberta_ext.fairseq_plugin.spanbert import (
    SpanBertExtModel,
    SpanBertExtPretrainingModel,
    SpanBertTask,
    SpanBertTaskConfig,
)
from roberta_ext.fairseq_plugin.tasks import RobertaExtMLMConfig, RobertaExtMLMTask
from roberta_ext.families import electra, families, get_family, preset, spanbert
from roberta_ext.modeling import EncoderConfig, RobertaModel
from roberta_ext.modeling.config import FAIRSEQ_NAMES

PAD = 1


def dictionary(size: int = 60) -> Dictionary:
    d = Dictionary()
    for i in range(size - d.nspecial):
        d.add_symbol(f"w{i}")
    return d


def args_of(family: str, **extra: object) -> SimpleNamespace:
    """fairseq's parsed options for ``family``'s tiny preset (as an architecture would set them)."""
    cfg = preset(f"{family}-tiny")
    options = {FAIRSEQ_NAMES[name]: getattr(cfg, name) for name in FAIRSEQ_NAMES if name not in ("max_positions",)}
    return SimpleNamespace(**options, max_positions=64, **extra)


def mlm_task(task_class=RobertaExtMLMTask, config_class=RobertaExtMLMConfig):
    return task_class(config_class(data="unused", tokens_per_sample=64), dictionary())


def batch() -> torch.Tensor:
    tokens = torch.randint(4, 59, (3, 9), generator=torch.Generator().manual_seed(0))
    tokens[:, 0], tokens[:, -1] = 0, 2
    tokens[2, 6:] = PAD
    return tokens


CASES = [
    (
        ElectraExtModel,
        ElectraExtPretrainingModel,
        (ElectraTask, ElectraTaskConfig),
        "electra",
        {"generator_fraction": 0.5},
        lambda cfg: electra.ElectraPretrainingModel(cfg, 0.5),
    ),
    (
        SpanBertExtModel,
        SpanBertExtPretrainingModel,
        (SpanBertTask, SpanBertTaskConfig),
        "spanbert",
        {"sbo_max_span_length": 7, "sbo_position_dim": 16},
        lambda cfg: spanbert.SpanBertPretrainingModel(cfg, max_span_length=7, position_dim=16),
    ),
]


@pytest.mark.parametrize(("model_class", "pretraining_class", "task", "family", "extra", "family_model"), CASES)
def test_the_pretraining_model_is_the_familys(model_class, pretraining_class, task, family, extra, family_model):
    """Built under its pretraining task, the fairseq model is the family's pretraining model: its
    class, its modules, the same weights from the same seed; under any other task, the encoder."""
    args = args_of(family, **extra)
    torch.manual_seed(0)
    built = model_class.build_model(args, mlm_task(*task))
    assert type(built) is pretraining_class
    assert isinstance(built, type(family_model(built.cfg)))
    torch.manual_seed(0)
    reference = family_model(built.cfg)
    ours, theirs = built.state_dict(), reference.state_dict()
    assert list(ours) == list(theirs)
    assert all(torch.equal(ours[key], theirs[key]) for key in theirs)
    assert [p.requires_grad for p in built.parameters()] == [p.requires_grad for p in reference.parameters()]

    encoder = model_class.build_model(args, mlm_task())
    assert type(encoder) is model_class
    assert not set(get_family(family).pretraining_modules) & {name for name, _ in encoder.named_children()}


@pytest.mark.parametrize(("model_class", "pretraining_class", "task", "family", "extra", "family_model"), CASES)
def test_the_pretraining_step_runs_through_forward(model_class, pretraining_class, task, family, extra, family_model):
    args = args_of(family, **extra)
    tokens = batch()
    targets = torch.full_like(tokens, PAD)
    targets[:, 2:4] = tokens[:, 2:4]
    torch.manual_seed(0)
    model = model_class.build_model(args, mlm_task(*task)).eval()
    torch.manual_seed(1)
    ours = model(tokens, src_lengths=None, pretraining_targets=targets)
    torch.manual_seed(1)
    theirs = model.pretraining_forward(tokens, targets)
    assert type(ours) is type(theirs)
    for name in theirs.__dataclass_fields__:
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name

    encoder = model_class.build_model(args, mlm_task())
    with pytest.raises(ValueError, match=f"built for pretraining, under --task {model_class.PRETRAINING_TASK}"):
        encoder(tokens, pretraining_targets=targets)


def test_forward_is_the_encoders_with_fairseqs_hidden_states():
    """Every argument of the encoder's forward passes through, positional or by name; fairseq's
    other ``net_input`` keys are ignored; hidden states come back (T, B, C)."""
    torch.manual_seed(0)
    model = RobertaExtModel(args_of("roberta"), preset("tiny", vocab_size=60)).eval()
    model.register_classification_head("head", num_classes=3)
    model.register_token_head("tags", 5)
    tokens = batch()
    masked = tokens.gt(30)
    calls = [
        ((), {}),
        ((True, True), {}),
        ((), {"features_only": True, "return_all_hiddens": True}),
        ((), {"masked_tokens": masked}),
        ((), {"classification_head_name": "head"}),
        ((), {"token_head_name": "tags", "return_all_hiddens": True}),
    ]
    for args, kwargs in calls:
        ours, ours_extra = model(tokens, *args, src_lengths=tokens.ne(PAD).sum(1), src_id=None, **kwargs)
        theirs, theirs_extra = RobertaModel.forward(model, tokens, *args, **kwargs)
        assert torch.equal(ours, theirs), (args, kwargs)
        if theirs_extra["inner_states"] is None:
            assert ours_extra["inner_states"] is None
        else:
            for time_first, batch_first in zip(ours_extra["inner_states"], theirs_extra["inner_states"], strict=True):
                assert torch.equal(time_first, batch_first.transpose(0, 1))


# -- What fairseq sees of the model: its options, architectures, probabilities, heads and loading ---------------


def plugin_fields() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(EncoderConfig) if f.metadata["plugin"]]


@pytest.mark.parametrize("config_field", plugin_fields(), ids=lambda f: f.name)
def test_each_option_is_its_encoder_config_field_under_fairseqs_name(config_field):
    """The option fairseq's dataclass gets for each EncoderConfig field (built when the plugin is
    imported; built again here): fairseq's name, the field's type (its choices as fairseq's
    ChoiceEnum; the families by name), default and help; ``--max-positions`` alone defaults to
    ``None``, "from the task"."""
    name, kind, option = models._option_field(config_field)
    assert name == FAIRSEQ_NAMES[config_field.name]
    help, default = config_field.metadata["help"], config_field.default
    if config_field.name == "max_positions":
        assert (kind, option.default) == (int | None, None)
        assert option.metadata == {"help": help + "; default: --tokens-per-sample, else the task's maximum"}
        return
    assert option.default == default and option.metadata == {"help": help}
    choices = config_field.metadata["choices"]
    if config_field.name == "family":
        choices = tuple(family.name for family in families())
    if choices:
        assert [member.value for member in kind] == list(choices)
    else:
        types = {"int": int, "float": float, "bool": bool, "str": str, "int | None": int | None}
        assert kind == types[str(config_field.type)]


ARCHITECTURES = [(family, name, size) for family in families() for name, size in family.architectures().items()]


@pytest.mark.parametrize(("family", "arch", "size"), ARCHITECTURES, ids=[name for _, name, _ in ARCHITECTURES])
def test_an_architecture_sets_what_the_command_line_left_unset_to_its_preset(family, arch, size):
    """``architecture(family, size)`` (registered for each name when the plugin is imported; made
    again here): every unset option takes the preset's value or the family's plugin default for
    that size, a given one stays, ``max_positions`` is left to the task; it refuses
    ``--bf16-autocast`` with fairseq's precision options; its docstring sums it up."""
    preset_cfg = family.preset(size)
    function = models.architecture(family, size)
    args = SimpleNamespace(encoder_layers=17)
    function(args)
    expected = {
        FAIRSEQ_NAMES[f.name]: getattr(preset_cfg, f.name) for f in plugin_fields() if f.name != "max_positions"
    }
    expected.update(family.architecture_defaults.get(size, {}), encoder_layers=17)
    assert vars(args) == expected
    assert function.__doc__ == (
        f"{family.name} {size}: {preset_cfg.encoder_layers} layers, {preset_cfg.encoder_embed_dim} wide."
    )
    with pytest.raises(ValueError, match="--bf16-autocast does not combine with --fp16"):
        function(SimpleNamespace(bf16_autocast=True, fp16=True))


def test_every_familys_architectures_are_registered_with_fairseq(monkeypatch):
    """``register_architectures()`` (run when the plugin is imported; run again here on fairseq's
    registries without the plugin's names) registers each family's sizes under its model."""
    import fairseq.models as fairseq_models

    names = {name for _, name, _ in ARCHITECTURES}
    for registry in ("ARCH_MODEL_REGISTRY", "ARCH_MODEL_NAME_REGISTRY", "ARCH_CONFIG_REGISTRY"):
        kept = {k: v for k, v in getattr(fairseq_models, registry).items() if k not in names}
        monkeypatch.setattr(fairseq_models, registry, kept)
    inverse = {k: [a for a in v if a not in names] for k, v in fairseq_models.ARCH_MODEL_INV_REGISTRY.items()}
    monkeypatch.setattr(fairseq_models, "ARCH_MODEL_INV_REGISTRY", inverse)
    registered = models.register_architectures()
    assert sorted(registered) == sorted(names)
    for family, name, size in ARCHITECTURES:
        model, function = registered[name]
        assert model == family.fairseq_model == fairseq_models.ARCH_MODEL_NAME_REGISTRY[name]
        assert fairseq_models.ARCH_MODEL_REGISTRY[name] is fairseq_models.MODEL_REGISTRY[model]
        assert fairseq_models.ARCH_CONFIG_REGISTRY[name] is function
        assert name in fairseq_models.ARCH_MODEL_INV_REGISTRY[model]
        args = SimpleNamespace()
        function(args)
        assert args.encoder_layers == family.preset(size).encoder_layers


class Vocabulary:
    """A task's dictionary as the model reads it: its size and padding index (0 here, as BERT's)."""

    def __len__(self) -> int:
        return 60

    def pad(self) -> int:
        return 0


class Task:
    """A task as config_from_args reads it: its dictionary and, if any, its ``max_positions()``."""

    def __init__(self, positions: object = "none", **options: object) -> None:
        self.source_dictionary = Vocabulary()
        if positions != "none":
            self.max_positions = lambda: positions
        for key, value in options.items():
            setattr(self, key, value)


@pytest.mark.parametrize(
    ("args", "task", "expected"),
    [
        ({"tokens_per_sample": 96}, Task(128), 96),  # pretraining: the blocks' size
        ({}, Task(128), 128),  # fine-tuning: the task's maximum
        ({"tokens_per_sample": None}, Task(), EncoderConfig.max_positions),  # no task maximum
        ({}, Task((128, 64)), EncoderConfig.max_positions),  # a (source, target) maximum is no int
        ({"max_positions": 40, "tokens_per_sample": 96}, Task(128), 40),  # given: as given
    ],
)
def test_max_positions_from_the_options_or_the_task(args, task, expected):
    cfg = models.config_from_args(SimpleNamespace(**args), task)
    assert cfg.max_positions == expected
    assert (cfg.vocab_size, cfg.padding_idx) == (60, 0)


def test_options_missing_from_the_args_take_encoder_configs_defaults_and_strings_are_plain():
    """fairseq's args of an older checkpoint lack newer options: those take EncoderConfig's
    defaults; a string value comes through as a plain ``str`` (omegaconf and fairseq's ChoiceEnum
    give subclasses)."""

    class Choice(str):
        pass

    args = SimpleNamespace(encoder_layers=3, position_style=Choice("rotary"))
    cfg = models.config_from_args(args, Task(64))
    defaults = EncoderConfig(vocab_size=60, padding_idx=0, max_positions=64)
    assert cfg == dataclasses.replace(defaults, encoder_layers=3, position_style="rotary")
    assert type(cfg.position_style) is str


@pytest.mark.parametrize(
    ("task", "key"),
    [
        (Task(128, cfg=SimpleNamespace(max_positions=128)), "task.max_positions"),
        (Task(128, args=SimpleNamespace(max_positions=128)), "task.max_positions"),  # a legacy task
        (Task(128, cfg=SimpleNamespace(max_positions=None, tokens_per_sample=128)), "task.tokens_per_sample"),
        (Task(128), "task.tokens_per_sample"),
    ],
)
def test_under_hydra_the_refusal_names_the_tasks_own_key(task, key, monkeypatch):
    monkeypatch.setattr(models, "under_hydra", lambda: True)
    with pytest.raises(ValueError) as error:
        RobertaExtModel.checked_config(SimpleNamespace(max_positions=64), task)
    assert str(error.value) == (
        "the task allows 128 tokens per sample but the model has model.max_positions=64; "
        f"raise model.max_positions or lower {key}"
    )
    monkeypatch.setattr(models, "under_hydra", lambda: False)
    with pytest.raises(ValueError) as error:
        RobertaExtModel.checked_config(SimpleNamespace(max_positions=64), task)
    assert str(error.value) == (
        "the task allows 128 tokens per sample but the model has --max-positions 64; raise --max-positions or "
        "lower --tokens-per-sample/--max-positions of the task"
    )
    assert RobertaExtModel.checked_config(SimpleNamespace(max_positions=128), task).max_positions == 128


def test_under_hydra_is_a_running_hydra_app_or_fairseq_hydra_train(monkeypatch):
    from hydra.core.hydra_config import HydraConfig

    assert models.under_hydra() is False
    monkeypatch.setitem(sys.modules, "fairseq_cli.hydra_train", sys)
    assert models.under_hydra() is True
    monkeypatch.delitem(sys.modules, "fairseq_cli.hydra_train")
    monkeypatch.setattr(HydraConfig, "initialized", staticmethod(lambda: True))
    assert models.under_hydra() is True


@pytest.mark.parametrize(
    ("flags", "named", "pronoun"),
    [
        (["fp16"], "--fp16", "it"),
        (["memory_efficient_bf16"], "--memory-efficient-bf16", "it"),
        (["bf16", "amp"], "--bf16 / --amp", "them"),
        (["fp16", "memory_efficient_fp16", "bf16", "memory_efficient_bf16", "amp"], None, "them"),
    ],
)
def test_fairseqs_precision_options_with_bf16_autocast_are_refused_in_full(flags, named, pronoun):
    named = named or "--fp16 / --memory-efficient-fp16 / --bf16 / --memory-efficient-bf16 / --amp"
    with pytest.raises(ValueError) as error:
        models.refuse_mixed_precision(SimpleNamespace(bf16_autocast=True, **dict.fromkeys(flags, True)))
    assert str(error.value) == (
        f"--bf16-autocast does not combine with {named}: it runs the float32 model under bf16 autocast with "
        f"fairseq's float32 trainer (no loss scaling needed); drop {pronoun} (fairseq 0.12's --bf16 means a TPU)"
    )
    models.refuse_mixed_precision(SimpleNamespace(**dict.fromkeys(flags, True)))  # without --bf16-autocast
    models.refuse_mixed_precision(SimpleNamespace(bf16_autocast=True, **dict.fromkeys(flags, False)))


def test_normalized_probabilities_are_float32_softmaxes_of_the_logits():
    """What fairseq's generators and scorers ask the model for: (log-)probabilities over the last
    dimension, in float32 whatever the logits' dtype."""
    model = RobertaExtModel(args_of("roberta"), preset("tiny", vocab_size=60))
    logits = torch.randn(2, 3, 60, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    log_probs = model.get_normalized_probs((logits, {}), log_probs=True)
    probs = model.get_normalized_probs((logits, {}), log_probs=False)
    assert log_probs.dtype == probs.dtype == torch.float32
    torch.testing.assert_close(log_probs, torch.log_softmax(logits.float(), dim=-1), rtol=0, atol=0)
    torch.testing.assert_close(probs, torch.softmax(logits.float(), dim=-1), rtol=0, atol=0)


def test_re_registering_a_head_of_other_dimensions_warns(caplog):
    model = RobertaExtModel(args_of("roberta"), preset("tiny", vocab_size=60))
    model.register_classification_head("head", num_classes=3)
    model.register_token_head("tags", 5)
    with caplog.at_level(logging.WARNING, logger="roberta_ext.fairseq_plugin.models"):
        model.register_classification_head("head", num_classes=3)  # the same: no warning
        model.register_token_head("tags", 5)
        assert caplog.messages == []
        model.register_classification_head("head", num_classes=4)
        model.register_classification_head("head", num_classes=4, inner_dim=7)
        model.register_token_head("tags", 2, dropout=0.25)
        assert caplog.messages == [
            "re-registering head 'head' with num_classes 4 (was 3)",
            "re-registering head 'head' with num_classes 4 (was 4)",
            "re-registering token head 'tags' with 2 labels (was 5)",
        ]
        caplog.clear()
        model.register_classification_head("head", num_classes=4, inner_dim=7)  # the same again: no warning
        assert caplog.messages == []
    assert model.classification_heads["head"].dense.out_features == 7
    assert model.token_heads["tags"].num_classes == 2 and model.token_heads["tags"].dropout.p == 0.25


def tiny_model(**heads: int) -> RobertaExtModel:
    model = RobertaExtModel(args_of("roberta"), preset("tiny", vocab_size=60))
    for name, classes in heads.items():
        model.register_classification_head(name, num_classes=classes)
    return model


def test_a_checkpoint_of_other_sizes_is_refused_naming_the_tensors_and_both_shapes():
    model = tiny_model()
    other = RobertaExtModel(args_of("roberta"), preset("tiny", vocab_size=50, encoder_layers=1, max_positions=32))
    with pytest.raises(ValueError) as error:
        model.load_state_dict(other.state_dict())
    layers, width = model.cfg.encoder_layers, model.cfg.encoder_embed_dim
    message = str(error.value)
    assert message.startswith(
        "the checkpoint does not fit the model these options build (encoder.sentence_encoder.embed_tokens.weight: "
        f"(50, {width}) in the checkpoint, (60, {width}) in the model; "
    )
    assert (
        f"; the model has {layers} layers, width {width}, 60 tokens, 66 position rows, the checkpoint 1 layers, "
        in message
    )
    assert f"width {width}, 50 tokens, 34 position rows: check --arch and the size options" in message
    assert message.endswith("the checkpoint's position table is that of max_positions 32: pass --max-positions 32")
    assert "not in the checkpoint: encoder.sentence_encoder.layers.1." in message
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models, "under_hydra", lambda: True)
        with pytest.raises(ValueError) as error:
            model.load_state_dict(other.state_dict())
    assert str(error.value).endswith(
        "pass task.max_positions=32 to fine-tune (the classification and multiple-choice tasks set the model's "
        "from it, over ++model.max_positions), model.max_positions=32 to continue pretraining"
    )


def test_loading_is_strict_unless_asked_otherwise():
    """fairseq's ``strict``: by default a tensor the model lacks is refused (named); with
    ``strict=False`` it is left out."""
    model = tiny_model()
    state = {**tiny_model().state_dict(), "extra.weight": torch.zeros(2)}
    with pytest.raises(ValueError, match=r"\(not in the model: extra.weight\)"):
        model.load_state_dict(dict(state))
    model.load_state_dict(dict(state), strict=False)
    with pytest.raises(ValueError, match="not in the model: extra.weight"):
        model.load_state_dict(dict(state), strict=True)


def test_the_plain_model_has_no_pretraining_class():
    with pytest.raises(NotImplementedError) as error:
        RobertaExtModel.pretraining_class()
    assert str(error.value) == "RobertaExtModel has no pretraining model"


def test_a_state_without_the_encoders_tensors_is_summed_up_with_question_marks():
    assert models._shape_summary({}) == "0 layers, width ?, ? tokens, ? position rows"


def test_describe_mismatch_lists_at_most_limit_of_each_kind():
    expected = {f"s{i}": torch.zeros(1) for i in range(6)} | {f"m{i}": torch.zeros(1) for i in range(6)}
    found = {f"s{i}": torch.zeros(2) for i in range(6)} | {f"x{i}": torch.zeros(1) for i in range(5)}
    shapes = "; ".join(f"s{i}: (2,) in the checkpoint, (1,) in the model" for i in range(4))
    assert models.describe_mismatch(expected, found) == (
        f"{shapes}; 2 more of other shapes; not in the checkpoint: m0, m1, m2, m3 and 2 more; "
        "not in the model: x0, x1, x2, x3 and 1 more"
    )
    shapes = "; ".join(f"s{i}: (2,) in the checkpoint, (1,) in the model" for i in range(6))
    assert models.describe_mismatch(expected, found, limit=6) == (
        f"{shapes}; not in the checkpoint: m0, m1, m2, m3, m4, m5; not in the model: x0, x1, x2, x3, x4"
    )
    assert models.describe_mismatch(expected, found, limit=5).endswith("not in the model: x0, x1, x2, x3, x4")


def test_the_same_checkpoint_loads_as_fairseq_loads_it_heads_and_all(caplog):
    """fairseq's ``load_state_dict`` (upgrade, then a strict load): a model's own state loads back
    exactly; its head continues from the file when the model has one of that name and shape."""
    torch.manual_seed(0)
    saved = tiny_model(head=3)
    torch.manual_seed(1)
    model = tiny_model(head=3)
    with caplog.at_level(logging.INFO, logger="roberta_ext.fairseq_plugin.models"):
        model.load_state_dict(saved.state_dict())
    assert caplog.messages == ["loading head 'head' of the checkpoint into the model's head of that name"]
    ours, theirs = model.state_dict(), saved.state_dict()
    assert list(ours) == list(theirs) and all(torch.equal(ours[k], theirs[k]) for k in theirs)


def test_checkpoint_heads_are_registered_dropped_or_kept_as_fairseqs_roberta_does(caplog):
    """Heads in the file but not in the model: registered with ``--load-checkpoint-heads`` (their
    sizes from the file), else dropped with a warning, as are heads of other dimensions; the
    model's heads that the file lacks keep their fresh weights."""
    torch.manual_seed(0)
    saved = tiny_model(a=3, b=2)
    saved.register_token_head("tags", 5)
    saved.register_classification_head("wide", num_classes=2, inner_dim=16)
    state = saved.state_dict()

    model = RobertaExtModel(args_of("roberta", load_checkpoint_heads=True), preset("tiny", vocab_size=60))
    model.load_state_dict(state)
    assert sorted(model.classification_heads) == ["a", "b", "wide"] and list(model.token_heads) == ["tags"]
    assert model.classification_heads["wide"].dense.out_features == 16
    assert model.token_heads["tags"].num_classes == 5
    assert all(torch.equal(model.state_dict()[k], v) for k, v in state.items())

    torch.manual_seed(1)
    model = tiny_model(b=4, c=2)
    model.register_classification_head("wide", num_classes=2, inner_dim=8)
    fresh = {k: v.clone() for k, v in model.state_dict().items()}
    with caplog.at_level(logging.INFO, logger="roberta_ext.fairseq_plugin.models"):
        model.load_state_dict(state)
    dropped = "of the checkpoint: not in the current model or of different dimensions"
    assert caplog.messages == [
        f"dropping head 'a' {dropped}",
        f"dropping head 'b' {dropped}",
        f"dropping head 'wide' {dropped}",
        "head 'c' is new: not in the checkpoint, it starts from random weights",
        f"dropping head 'tags' {dropped}",
    ]
    assert sorted(model.classification_heads) == ["b", "c", "wide"] and not model.token_heads
    heads = {k: v for k, v in model.state_dict().items() if "heads." in k}
    assert heads and all(torch.equal(v, fresh[k]) for k, v in heads.items())
    body = [k for k in state if "heads." not in k]
    assert all(torch.equal(model.state_dict()[k], state[k]) for k in body)


def test_a_state_under_a_name_is_upgraded_in_place_and_the_rest_kept(caplog):
    """``upgrade_state_dict_named`` as fairseq calls it for a submodule: only the keys under the
    name are upgraded (fairseq's old layouts, pretraining-only modules dropped with a note), the
    others are left as they are."""
    model = tiny_model()
    own = model.state_dict()
    state = {f"inner.{k.replace('encoder.', 'decoder.', 1)}": v for k, v in own.items()}
    state["inner.generator.w"] = torch.zeros(1)
    state["other.x"] = torch.ones(1)
    with caplog.at_level(logging.INFO, logger="roberta_ext.fairseq_plugin.models"):
        model.upgrade_state_dict_named(state, "inner")
    assert sorted(state) == sorted([f"inner.{k}" for k in own] + ["other.x"])
    assert all(torch.equal(state[f"inner.{k}"], v) for k, v in own.items())
    assert caplog.messages == ["not loading 1 tensors of 'generator': it is only used in pretraining"]


def test_a_model_without_pretraining_modules_says_under_which_task_it_has_them():
    tokens = batch()
    for model, where in (
        (tiny_model(), "in no task"),
        (ElectraExtModel.build_model(args_of("electra", generator_fraction=0.5), mlm_task()), None),
    ):
        where = where or f"only when built for pretraining, under --task {ElectraExtModel.PRETRAINING_TASK}"
        with pytest.raises(ValueError) as error:
            model(tokens, pretraining_targets=tokens)
        assert str(error.value) == f"this {type(model).__name__} has no pretraining modules: it has them {where}"


def test_the_pretraining_step_through_forward_gets_the_segments_and_the_options():
    """fairseq's batch keys reach the family's step: ``segment_labels`` and the criterion's
    ``pretraining_options`` (here the generator's random stream)."""
    model = ElectraExtModel.build_model(
        args_of("electra", generator_fraction=0.5), mlm_task(ElectraTask, ElectraTaskConfig)
    )
    tokens = batch()
    targets = torch.full_like(tokens, PAD)
    targets[:, 2:5] = tokens[:, 2:5]
    segments = torch.zeros_like(tokens)
    segments[:, 4:] = 1
    options = {"generator": torch.Generator().manual_seed(3)}
    torch.manual_seed(1)
    ours = model(
        tokens, src_lengths=None, segment_labels=segments, pretraining_targets=targets, pretraining_options=options
    )
    torch.manual_seed(1)
    theirs = model.pretraining_forward(
        tokens, targets, segment_labels=segments, generator=torch.Generator().manual_seed(3)
    )
    torch.manual_seed(1)
    no_segments = model.pretraining_forward(tokens, targets, generator=torch.Generator().manual_seed(3))
    torch.manual_seed(1)
    other_stream = model.pretraining_forward(tokens, targets, segment_labels=segments)
    for name in theirs.__dataclass_fields__:
        assert torch.equal(getattr(ours, name), getattr(theirs, name)), name
    assert not torch.equal(ours.discriminator_logits, no_segments.discriminator_logits)
    assert not torch.equal(ours.corrupted, other_stream.corrupted)


def test_the_hydra_hint_names_the_size_keys_and_a_missing_position_table_is_no_clash():
    """A model without a position table (rotary positions) and a checkpoint with one: only the size hint."""
    cfg = EncoderConfig(max_positions=64)
    hydra = models.size_options_hint(cfg, {}, {models.POSITIONS_KEY: torch.zeros(66, 8)}, hydra=True)
    assert hydra == (
        "check model._name and the size overrides (++model.encoder_layers=N, ++model.encoder_embed_dim=N, "
        "++model.encoder_ffn_embed_dim=N, ++model.encoder_attention_heads=N, ...)"
    )
    plain = models.size_options_hint(cfg, {models.POSITIONS_KEY: torch.zeros(66, 8)}, {}, hydra=False)
    assert plain == "check --arch and the size options (--encoder-layers, --encoder-embed-dim, --max-positions, ...)"


def test_bf16_autocast_refuses_other_weights_and_amp_in_full_and_runs_in_bf16_whatever_the_default():
    """The refusals as the user reads them; and the products in bf16 even where CPU autocast's
    default dtype was set to float16 (outside autocast, which is no ``--amp``)."""
    cfg = preset("tiny", vocab_size=60, bf16_autocast=True)
    model = RobertaExtModel(args_of("roberta"), cfg)
    tokens = batch()
    with pytest.raises(ValueError) as error:
        RobertaExtModel(args_of("roberta"), cfg).to(torch.bfloat16)(tokens)
    assert str(error.value) == (
        "--bf16-autocast runs a float32 model under bf16 autocast, but the model's weights are torch.bfloat16: "
        "do not combine it with --fp16, --memory-efficient-fp16, --bf16 or --memory-efficient-bf16"
    )
    with torch.autocast("cpu", dtype=torch.float16), pytest.raises(ValueError) as error:
        model(tokens)
    assert str(error.value) == "--bf16-autocast does not combine with --amp (fairseq's float16 autocast)"
    default = torch.get_autocast_dtype("cpu")
    torch.set_autocast_dtype("cpu", torch.float16)
    try:
        seen = []
        handle = model.encoder.sentence_encoder.layers[0].fc1.register_forward_hook(
            lambda _m, _i, out: seen.append(out.dtype)
        )
        features, _ = model(tokens, features_only=True)
        handle.remove()
    finally:
        torch.set_autocast_dtype("cpu", default)
    assert seen == [torch.bfloat16] and features.dtype == torch.float32


def test_to_float32_keeps_integers_named_tuples_and_dataclass_fields():
    """Only floating-point tensors are cast (token ids and masks stay as they are); named tuples
    and dataclasses come back as their own type with every field."""
    import collections

    Pair = collections.namedtuple("Pair", ["ids", "scores"])

    @dataclasses.dataclass
    class Output:
        logits: torch.Tensor
        mask: torch.Tensor
        count: int = 3

    ids, same = torch.arange(3), torch.ones(2)
    pair = models.to_float32(Pair(ids, torch.ones(2, dtype=torch.half)))
    assert type(pair) is Pair and pair.ids is ids and pair.scores.dtype == torch.float32
    assert models.to_float32(same) is same
    output = models.to_float32(Output(torch.ones(2, dtype=torch.bfloat16), torch.ones(2, dtype=torch.bool), 5))
    assert type(output) is Output and output.logits.dtype == torch.float32
    assert output.mask.dtype == torch.bool and output.count == 5
