"""``--criterion roberta_ext_spanbert`` without a training run: the loss fairseq-train minimises is
the SpanBERT objective (MLM + SBO cross-entropy summed over the masked tokens, as the paper has it), its
logging output, and the metrics it logs (bits per masked token, accuracies in percent, ``mlm_ppl``)
against the formulas the criterion documents; the model's span boundary head sized from fairseq's
options or their defaults; the task's span masking on by default."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from tests.peers import require

require("fairseq", "the criterion is a fairseq criterion")

from fairseq.criterions import CRITERION_REGISTRY  # (after the peer check)
from fairseq.logging import metrics

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the models, tasks and criteria)
from roberta_ext.fairseq_plugin.spanbert import (
    SpanBertCriterion,
    SpanBertExtConfig,
    SpanBertExtModel,
    SpanBertExtPretrainingModel,
    SpanBertLossConfig,
    SpanBertTask,
    SpanBertTaskConfig,
)
from roberta_ext.fairseq_plugin.tasks import RobertaExtMLMConfig
from roberta_ext.families import spanbert
from tests.fairseq_plugin.test_models import PAD, mlm_task
from tests.fairseq_plugin.test_models import args_of as args_of_family


def task() -> SpanBertTask:
    return mlm_task(SpanBertTask, SpanBertTaskConfig)


def args_of(**extra: object) -> SimpleNamespace:
    return args_of_family("spanbert", **extra)


def pretraining_model(**extra: object) -> SpanBertExtPretrainingModel:
    torch.manual_seed(0)
    model = SpanBertExtModel.build_model(args_of(**extra), task())
    assert type(model) is SpanBertExtPretrainingModel
    return model.eval()


def sample(seed: int = 0, spans: bool = True) -> dict:
    """A batch of 3 rows (the last padded) with spans of masked tokens (targets: the original token
    there, padding elsewhere)."""
    tokens = torch.randint(4, 59, (3, 12), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0], tokens[:, -1] = 0, 2
    tokens[2, 8:] = PAD
    tokens[2, 7] = 2
    targets = torch.full_like(tokens, PAD)
    if spans:
        for row, (start, end) in enumerate([(2, 5), (6, 10), (1, 3)]):
            targets[row, start:end] = tokens[row, start:end]
    return {
        "net_input": {"src_tokens": tokens, "src_lengths": tokens.ne(PAD).sum(1)},
        "target": targets,
        "ntokens": int(tokens.ne(PAD).sum()),
        "nsentences": 3,
    }


def criterion() -> SpanBertCriterion:
    return SpanBertCriterion(SpanBertLossConfig(), task())


# ---------------------------------------------------------------------------------- the loss


def test_the_loss_is_mlm_plus_sbo_cross_entropy_summed_over_the_masked_tokens():
    model, batch = pretraining_model(), sample()
    loss, sample_size, log = criterion()(model, batch)
    out = model.pretraining_forward(batch["net_input"]["src_tokens"], batch["target"])
    targets = batch["target"][batch["target"].ne(PAD)]
    assert torch.equal(out.targets, targets) and targets.numel() == 3 + 4 + 2
    mlm = F.cross_entropy(out.mlm_logits, targets, reduction="sum")
    sbo = F.cross_entropy(out.sbo_logits, targets, reduction="sum")
    torch.testing.assert_close(loss, mlm + sbo)
    assert loss.requires_grad and sample_size == 9 and type(sample_size) is int
    assert sorted(log) == sorted(
        ["loss", "mlm_loss", "sbo_loss", "mlm_correct", "sbo_correct", "ntokens", "nsentences", "sample_size"]
    )
    torch.testing.assert_close(log["loss"], mlm + sbo)
    assert not log["loss"].requires_grad  # logged detached: nothing keeps the graph alive
    torch.testing.assert_close(log["mlm_loss"], mlm.detach())
    torch.testing.assert_close(log["sbo_loss"], sbo.detach())
    assert log["mlm_correct"] == int((out.mlm_logits.argmax(-1) == targets).sum())
    assert log["sbo_correct"] == int((out.sbo_logits.argmax(-1) == targets).sum())
    assert (log["ntokens"], log["nsentences"], log["sample_size"]) == (batch["ntokens"], 3, 9)
    # The gradient reaches both heads.
    loss.backward()
    assert model.sbo_head.dense1.weight.grad.abs().sum() > 0
    assert model.encoder.lm_head.dense.weight.grad.abs().sum() > 0


def test_a_model_that_is_not_spanberts_pretraining_model_is_refused():
    def electra_like(**kwargs):
        return SimpleNamespace(loss=torch.zeros(()))

    with pytest.raises(TypeError) as error:
        criterion()(electra_like, sample())
    assert str(error.value) == (
        "criterion 'roberta_ext_spanbert' needs --arch spanbert_ext_* with --task roberta_ext_spanbert"
    )


def test_the_criterion_is_registered_and_keeps_its_task():
    the_task = task()
    built = SpanBertCriterion(SpanBertLossConfig(), the_task)
    assert built.task is the_task and CRITERION_REGISTRY["roberta_ext_spanbert"] is SpanBertCriterion


# ------------------------------------------------------------------------------- the metrics


def reduced(logs: list[dict]) -> dict:
    with metrics.aggregate(new_root=True) as agg:
        SpanBertCriterion.reduce_metrics(logs)
    return agg.get_smoothed_values()


def test_metrics_are_bits_and_percent_per_masked_token_over_every_log():
    logs = [
        {"loss": 7.123456, "mlm_loss": 3.3333, "sbo_loss": 3.790156, "mlm_correct": 2, "sbo_correct": 1,
         "ntokens": 30, "nsentences": 3, "sample_size": 6},
        {"loss": torch.tensor(5.55555), "mlm_loss": torch.tensor(2.0), "sbo_loss": torch.tensor(3.55555),
         "mlm_correct": 1, "sbo_correct": 3, "ntokens": 20, "nsentences": 2, "sample_size": 5},
    ]  # fmt: skip
    stats = reduced(logs)
    masked = 11
    expected_mlm = (3.3333 + 2.0) / masked / math.log(2)
    assert stats["loss"] == round((7.123456 + 5.55555) / masked / math.log(2), 3)
    assert stats["mlm_loss"] == round(expected_mlm, 3)
    assert stats["sbo_loss"] == round((3.790156 + 3.55555) / masked / math.log(2), 3)
    assert stats["mlm_acc"] == round(100 * 3 / masked, 2)  # 27.27
    assert stats["sbo_acc"] == round(100 * 4 / masked, 2)  # 36.36
    assert stats["mlm_ppl"] == round(2**expected_mlm, 2)  # perplexity in bits, of the unrounded loss
    assert list(stats) == ["loss", "mlm_loss", "sbo_loss", "mlm_acc", "sbo_acc", "mlm_ppl"]


def test_metrics_weigh_each_batch_by_its_masked_tokens():
    """Two validation batches reduced one by one (as fairseq-train's valid_step does) average as one
    batch of both: each logged value is weighted by its masked-token count."""
    first = {"loss": 6.0, "mlm_loss": 2.0, "sbo_loss": 4.0, "mlm_correct": 1, "sbo_correct": 0, "sample_size": 2}
    second = {"loss": 9.0, "mlm_loss": 8.0, "sbo_loss": 1.0, "mlm_correct": 6, "sbo_correct": 3, "sample_size": 6}
    with metrics.aggregate(new_root=True) as agg:
        for log in (first, second):
            with metrics.aggregate():
                SpanBertCriterion.reduce_metrics([log])
    assert agg.get_smoothed_values() == reduced([first, second])
    assert agg.get_smoothed_values()["mlm_acc"] == round(100 * 7 / 8, 2)


def test_logs_without_masked_tokens_or_keys_count_as_zero():
    stats = reduced([{"loss": 0.0, "sample_size": 0}, {}])
    assert stats == {"loss": 0.0, "mlm_loss": 0.0, "sbo_loss": 0.0, "mlm_acc": 0.0, "sbo_acc": 0.0, "mlm_ppl": 1.0}
    # One log with a key missing: that key counts 0, the others are divided by the masked tokens.
    stats = reduced([{"loss": 2 * math.log(2), "mlm_loss": 2 * math.log(2), "mlm_correct": 1, "sample_size": 2}])
    assert (stats["loss"], stats["mlm_loss"], stats["sbo_loss"], stats["mlm_acc"], stats["sbo_acc"]) == (
        1.0,
        1.0,
        0.0,
        50.0,
        0.0,
    )
    assert stats["mlm_ppl"] == 2.0
    # A single masked token: its values, undivided.
    one = {"loss": 3 * math.log(2), "mlm_loss": math.log(2), "sbo_loss": 2 * math.log(2), "mlm_correct": 1}
    stats = reduced([{**one, "sbo_correct": 1, "sample_size": 1}])
    assert (stats["loss"], stats["mlm_loss"], stats["sbo_loss"], stats["mlm_acc"], stats["sbo_acc"]) == (
        3.0,
        1.0,
        2.0,
        100.0,
        100.0,
    )


def test_a_batch_without_masked_tokens_gives_a_zero_loss_and_logs_zeros():
    model = pretraining_model()
    loss, sample_size, log = criterion()(model, sample(spans=False))
    assert float(loss.detach()) == 0.0 and loss.requires_grad and sample_size == 0
    assert reduced([log])["loss"] == 0.0


def test_logs_can_be_summed_across_workers():
    """Every logged value is a number (or a 0-d tensor), so fairseq's trainer may sum the logs of
    several workers key by key: the reduced metrics are those of the list."""
    assert SpanBertCriterion.logging_outputs_can_be_summed() is True
    model = pretraining_model()
    logs = [criterion()(model, sample(seed))[2] for seed in (0, 1)]
    summed = {key: logs[0][key] + logs[1][key] for key in logs[0]}
    assert reduced([summed]) == reduced(logs)


# ------------------------------------------------------------------------------ model and task


def test_the_span_boundary_head_is_sized_by_the_options_or_their_defaults():
    default = pretraining_model()  # no --sbo-* options given: the family's defaults
    assert default.sbo_head.position_embeddings.weight.shape == (spanbert.DEFAULT_MAX_SPAN_LENGTH, 32)
    assert default.sbo_head.max_span_length == 32
    sized = pretraining_model(sbo_max_span_length=5, sbo_position_dim=8)
    assert sized.sbo_head.position_embeddings.weight.shape == (5, 8)
    assert sized.pretraining_model_options(args_of(sbo_max_span_length=5, sbo_position_dim=8)) == {
        "max_span_length": 5,
        "position_dim": 8,
    }
    assert default.pretraining_model_options(SimpleNamespace()) == {"max_span_length": 32, "position_dim": None}
    config = SpanBertExtConfig()
    assert (config.sbo_max_span_length, config.sbo_position_dim) == (32, None)


def test_the_task_masks_spans_by_default():
    assert SpanBertTaskConfig().span_masking is True
    assert RobertaExtMLMConfig().span_masking is False
    assert SpanBertExtModel.PRETRAINING_TASK == "roberta_ext_spanbert"
    assert SpanBertExtModel.pretraining_class() is SpanBertExtPretrainingModel
