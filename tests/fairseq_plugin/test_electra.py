"""``--criterion roberta_ext_electra`` without a training run: the loss fairseq-train minimises is
ELECTRA's objective (the generator's mean MLM cross-entropy plus lambda times the discriminator's mean
BCE over non-padding tokens), the generator never sampling padding or ``<mask>``, its logging output and
the metrics it logs against the formulas it documents; the generator sized from fairseq's options or
their default; the task's ELECTRA masking defaults."""

from __future__ import annotations

import logging
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
from roberta_ext.fairseq_plugin.electra import (
    ElectraCriterion,
    ElectraExtConfig,
    ElectraExtModel,
    ElectraExtPretrainingModel,
    ElectraLossConfig,
    ElectraTask,
    ElectraTaskConfig,
)
from roberta_ext.families import electra
from tests.fairseq_plugin.test_models import PAD, dictionary, mlm_task
from tests.fairseq_plugin.test_models import args_of as args_of_family


def task() -> ElectraTask:
    return mlm_task(ElectraTask, ElectraTaskConfig)


def args_of(**extra: object) -> SimpleNamespace:
    return args_of_family("electra", **extra)


def pretraining_model(the_task: ElectraTask | None = None, **extra: object) -> ElectraExtPretrainingModel:
    torch.manual_seed(0)
    model = ElectraExtModel.build_model(args_of(**extra), the_task or task())
    assert type(model) is ElectraExtPretrainingModel
    return model.eval()


def sample(seed: int = 0, masked: bool = True) -> dict:
    """A batch of 3 rows (the last padded), a few positions of each masked (targets: the original
    token there, padding elsewhere)."""
    tokens = torch.randint(4, 59, (3, 12), generator=torch.Generator().manual_seed(seed))
    tokens[:, 0], tokens[:, -1] = 0, 2
    tokens[2, 8:] = PAD
    tokens[2, 7] = 2
    targets = torch.full_like(tokens, PAD)
    if masked:
        for row, columns in enumerate([[2, 3, 7], [1, 5, 6, 9], [4]]):
            targets[row, columns] = tokens[row, columns]
    return {
        "net_input": {"src_tokens": tokens, "src_lengths": tokens.ne(PAD).sum(1)},
        "target": targets,
        "ntokens": int(tokens.ne(PAD).sum()),
        "nsentences": 3,
    }


class Recording:
    """The model, with the keyword arguments of its last call kept."""

    def __init__(self, model) -> None:
        self.model, self.kwargs = model, None

    def __call__(self, **kwargs):
        self.kwargs = kwargs
        return self.model(**kwargs)


# ---------------------------------------------------------------------------------- the loss


@pytest.mark.parametrize("weight", [None, 3.0], ids=["default-weight", "weight-3"])
def test_the_loss_is_mean_mlm_plus_lambda_times_mean_bce(weight):
    the_task = task()
    model = pretraining_model(the_task)
    config = ElectraLossConfig() if weight is None else ElectraLossConfig(discriminator_weight=weight)
    criterion = ElectraCriterion(config, the_task)
    lam = 50.0 if weight is None else weight
    assert criterion.discriminator_weight == lam
    batch = sample()
    torch.manual_seed(1)
    loss, sample_size, log = criterion(model, batch)
    torch.manual_seed(1)
    out = model.pretraining_forward(batch["net_input"]["src_tokens"], batch["target"], disallowed_ids=(PAD, 60))
    real = out.original.ne(PAD)
    gen = F.cross_entropy(out.generator_logits, out.original[out.masked], reduction="sum")
    disc = F.binary_cross_entropy_with_logits(out.discriminator_logits[real], out.labels[real].float(), reduction="sum")
    assert int(out.masked.sum()) == 8 and int(real.sum()) == batch["ntokens"]
    torch.testing.assert_close(loss, gen / 8 + lam * disc / batch["ntokens"])
    assert loss.requires_grad and sample_size == 1
    assert sorted(log) == sorted(
        ["loss", "gen_loss", "disc_loss", "nmasked", "ndisc", "replaced_correct", "nreplaced", "original_correct"]
        + ["noriginal", "ntokens", "nsentences", "sample_size"]
    )
    torch.testing.assert_close(log["loss"], loss.detach())
    torch.testing.assert_close(log["gen_loss"], gen.detach())
    torch.testing.assert_close(log["disc_loss"], disc.detach())
    assert not (log["loss"].requires_grad or log["gen_loss"].requires_grad or log["disc_loss"].requires_grad)
    labels, predicted = out.labels[real], out.discriminator_logits[real] > 0
    assert (log["nmasked"], log["ndisc"], log["ntokens"], log["nsentences"], log["sample_size"]) == (
        8,
        batch["ntokens"],
        batch["ntokens"],
        3,
        1,
    )
    assert log["nreplaced"] == int(labels.sum()) and log["noriginal"] == int((~labels).sum())
    assert log["replaced_correct"] == int((predicted & labels).sum())
    assert log["original_correct"] == int((~predicted & ~labels).sum())
    assert log["nreplaced"] > 0 and log["noriginal"] > 0


def test_the_generator_never_samples_padding_or_the_mask():
    the_task = task()
    assert the_task.mask_idx == 60
    criterion = ElectraCriterion(ElectraLossConfig(), the_task)
    assert criterion.disallowed_ids == (PAD, 60)
    model = pretraining_model(the_task)
    # A generator that wants <mask> or padding most of all: the samples are still neither.
    with torch.no_grad():
        model.generator.encoder.lm_head.bias[[PAD, 60]] = 30.0
    recording = Recording(model)
    torch.manual_seed(2)
    criterion(recording, sample())
    assert recording.kwargs["pretraining_options"] == {"disallowed_ids": (PAD, 60)}
    torch.manual_seed(2)
    out = model(**recording.kwargs)
    assert out.masked.sum() == 8
    assert not bool(torch.isin(out.corrupted[out.masked], torch.tensor([PAD, 60])).any())


def test_a_task_without_a_mask_disallows_only_padding():
    """fairseq's criterion pads with -100 when the task has no target dictionary; a task without
    ``mask_idx`` adds no second id."""
    labels = dictionary()
    assert ElectraCriterion(ElectraLossConfig(), SimpleNamespace(target_dictionary=labels)).disallowed_ids == (PAD,)
    assert ElectraCriterion(ElectraLossConfig(), SimpleNamespace(target_dictionary=None)).disallowed_ids == (-100,)


def test_a_model_that_is_not_electras_pretraining_model_is_refused():
    def spanbert_like(**kwargs):
        return SimpleNamespace(loss=torch.zeros(()))

    with pytest.raises(TypeError) as error:
        ElectraCriterion(ElectraLossConfig(), task())(spanbert_like, sample())
    assert str(error.value) == (
        "criterion 'roberta_ext_electra' needs an ELECTRA model: --arch electra_ext_* with --task roberta_ext_electra"
    )


def test_the_criterion_is_registered_and_keeps_its_task():
    the_task = task()
    built = ElectraCriterion(ElectraLossConfig(), the_task)
    assert built.task is the_task and built.padding_idx == PAD
    assert CRITERION_REGISTRY["roberta_ext_electra"] is ElectraCriterion


# ------------------------------------------------------------------------------- the metrics


def reduced(logs: list[dict]) -> dict:
    with metrics.aggregate(new_root=True) as agg:
        ElectraCriterion.reduce_metrics(logs)
    return agg.get_smoothed_values()


LOGS = [
    {"loss": 7.123456, "gen_loss": 13.33339, "disc_loss": 5.123456, "nmasked": 7, "ndisc": 33, "replaced_correct": 2,
     "nreplaced": 3, "original_correct": 25, "noriginal": 30, "ntokens": 33, "nsentences": 3, "sample_size": 1},
    {"loss": torch.tensor(5.55555), "gen_loss": torch.tensor(9.0), "disc_loss": torch.tensor(3.7),
     "nmasked": 4, "ndisc": 20, "replaced_correct": 1, "nreplaced": 4, "original_correct": 13, "noriginal": 16,
     "ntokens": 20, "nsentences": 2, "sample_size": 1},
    {"loss": 3.0, "gen_loss": 4.4, "disc_loss": 1.0, "nmasked": 2, "ndisc": 9, "replaced_correct": 0,
     "nreplaced": 0, "original_correct": 9, "noriginal": 9, "ntokens": 9, "nsentences": 1, "sample_size": 1},
]  # fmt: skip


def test_metrics_follow_the_documented_formulas():
    stats = reduced(LOGS[:2])
    gen = (13.33339 + 9.0) / 11
    assert stats["loss"] == round((7.123456 + 5.55555) / 2, 3)  # the objective averaged over batches
    assert stats["gen_loss"] == round(gen, 3)  # nats per masked token
    assert stats["disc_loss"] == round((5.123456 + 3.7) / 53, 4)  # nats per token
    assert stats["disc_acc_replaced"] == round(100 * 3 / 7, 2)  # 42.86
    assert stats["disc_acc_original"] == round(100 * 38 / 46, 2)  # 82.61
    assert stats["replaced"] == round(100 * 7 / 11, 2)  # 63.64
    assert stats["gen_ppl"] == round(math.exp(gen), 2)  # of the unrounded loss
    assert list(stats) == ["loss", "gen_loss", "disc_loss", "disc_acc_replaced", "disc_acc_original", "replaced"] + [
        "gen_ppl"
    ]


def test_metrics_weigh_each_reduction_by_its_own_counts():
    """Logs reduced in two groups (as fairseq-train's valid_step reduces each batch) average as one
    reduction of all: the loss weighted by batches, the rest by masked, token, replaced and original counts."""
    with metrics.aggregate(new_root=True) as agg:
        for group in (LOGS[:2], LOGS[2:]):
            with metrics.aggregate():
                ElectraCriterion.reduce_metrics(group)
    grouped, whole = agg.get_smoothed_values(), reduced(LOGS)
    assert grouped == whole
    assert whole["loss"] == round((7.123456 + 5.55555 + 3.0) / 3, 3)
    assert whole["disc_acc_replaced"] == round(100 * 3 / 7, 2) and whole["replaced"] == round(100 * 7 / 13, 2)


def test_the_perplexity_is_capped_at_e_to_the_50():
    stats = reduced([{"gen_loss": 120.0, "nmasked": 2, "sample_size": 1}])
    assert stats["gen_loss"] == 60.0 and stats["gen_ppl"] == round(math.exp(50), 2)
    assert reduced([{"gen_loss": 99.0, "nmasked": 2}])["gen_ppl"] == round(math.exp(49.5), 2)


def test_logs_without_counts_or_keys_count_as_zero():
    stats = reduced([{}, {"loss": 0.0}])
    assert stats == {
        "loss": 0.0,
        "gen_loss": 0.0,
        "disc_loss": 0.0,
        "disc_acc_replaced": 0.0,
        "disc_acc_original": 0.0,
        "replaced": 0.0,
        "gen_ppl": 1.0,
    }
    stats = reduced([{"loss": 2.0, "gen_loss": 3.0, "nmasked": 1, "replaced_correct": 1, "nreplaced": 1}])
    assert (stats["loss"], stats["gen_loss"], stats["disc_loss"], stats["disc_acc_replaced"]) == (2.0, 3.0, 0.0, 100.0)
    assert (stats["disc_acc_original"], stats["replaced"]) == (0.0, 100.0)
    # Counts of one: the values, undivided.
    one = {"loss": 2.0, "gen_loss": 3.0, "disc_loss": 0.5, "nmasked": 1, "ndisc": 1, "replaced_correct": 1}
    stats = reduced([{**one, "nreplaced": 1, "original_correct": 1, "noriginal": 1, "sample_size": 1}])
    assert (stats["loss"], stats["gen_loss"], stats["disc_loss"]) == (2.0, 3.0, 0.5)
    assert (stats["disc_acc_replaced"], stats["disc_acc_original"], stats["replaced"]) == (100.0, 100.0, 100.0)


def test_a_batch_without_masked_tokens_still_trains_the_discriminator():
    the_task = task()
    model = pretraining_model(the_task)
    torch.manual_seed(1)
    loss, sample_size, log = ElectraCriterion(ElectraLossConfig(), the_task)(model, sample(masked=False))
    assert log["nmasked"] == 0 and log["nreplaced"] == 0 and sample_size == 1
    torch.testing.assert_close(loss, 50.0 * log["disc_loss"] / log["ndisc"])
    assert reduced([log])["gen_loss"] == 0.0 and reduced([log])["replaced"] == 0.0


def test_logs_can_be_summed_across_workers():
    """Every logged value is a number (or a 0-d tensor), so fairseq's trainer may sum the logs of
    several workers key by key: the reduced metrics are those of the list."""
    assert ElectraCriterion.logging_outputs_can_be_summed() is True
    summed = {key: LOGS[0][key] + LOGS[1][key] for key in LOGS[0]}
    assert reduced([summed]) == reduced(LOGS[:2])


# ------------------------------------------------------------------------------ model and task


def test_the_generator_is_sized_by_the_option_or_its_default(caplog):
    with caplog.at_level(logging.INFO, logger="roberta_ext.fairseq_plugin.electra"):
        default = pretraining_model()
    wide = default.generator.cfg.encoder_embed_dim
    assert wide == 32 * electra.DEFAULT_GENERATOR_FRACTION
    assert [r.getMessage() for r in caplog.records if r.name == "roberta_ext.fairseq_plugin.electra"] == [
        f"ELECTRA generator: 8 wide, {default.generator.cfg.encoder_attention_heads} heads (fraction 0.25)"
    ]
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="roberta_ext.fairseq_plugin.electra"):
        half = pretraining_model(generator_fraction=0.5)
    assert half.generator.cfg.encoder_embed_dim == 16
    assert caplog.records[-1].getMessage() == (
        f"ELECTRA generator: 16 wide, {half.generator.cfg.encoder_attention_heads} heads (fraction 0.5)"
    )
    assert default.pretraining_model_options(SimpleNamespace()) == {"generator_fraction": 0.25}
    assert half.pretraining_model_options(SimpleNamespace(generator_fraction=0.5)) == {"generator_fraction": 0.5}
    assert ElectraExtConfig().generator_fraction == 0.25


def test_the_task_has_electras_masking_defaults():
    config = ElectraTaskConfig()
    assert (config.mask_prob, config.leave_unmasked_prob, config.random_token_prob) == (0.15, 0.15, 0.0)
    assert ElectraLossConfig().discriminator_weight == electra.DEFAULT_DISCRIMINATOR_WEIGHT == 50.0
    assert ElectraExtModel.PRETRAINING_TASK == "roberta_ext_electra"
    assert ElectraExtModel.pretraining_class() is ElectraExtPretrainingModel
