"""The plugin's models are the package's: ``forward`` is the encoder's (written once, in
``modeling``) with fairseq's time-first hidden states, and ELECTRA's and SpanBERT's pretraining
models are the families' classes, built from fairseq's options under their pretraining task."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from tests.peers import require

require("fairseq")

from fairseq.data import Dictionary  # (after the peer check)

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the models and tasks)
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
from roberta_ext.families import electra, get_family, preset, spanbert
from roberta_ext.modeling import RobertaModel
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
