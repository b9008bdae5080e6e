"""``--criterion roberta_ext_classification`` as ``fairseq-train`` validates with it: the metrics of
fairseq's ``sentence_prediction`` (with every report flag that applies), value for value, and a
validation line of numbers only — fairseq's own criterion adds ``pred [] | targ []`` to every one.
``--criterion roberta_ext_mlm``: the loss and logged metrics of fairseq's ``masked_lm``, value for value,
and a zero loss where a batch draws no target. Both as fairseq's trainer syncs their logs across workers."""

from __future__ import annotations

import math
import random
import warnings
from functools import partial
from types import SimpleNamespace
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from tests.peers import require

require("fairseq", "the criterion is a fairseq criterion")

from fairseq import trainer as fairseq_trainer
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from fairseq.criterions.sentence_prediction import SentencePredictionConfig, SentencePredictionCriterion
from fairseq.data import Dictionary
from fairseq.logging import metrics
from fairseq.logging.progress_bar import format_stat
from fairseq.tasks import FairseqTask
from fairseq.trainer import Trainer

from roberta_ext.fairseq_plugin.criterions import (
    RobertaExtClassificationLoss,
    RobertaExtClassificationLossConfig,
    RobertaExtMLMLoss,
    RobertaExtMLMLossConfig,
)
from roberta_ext.fairseq_plugin.models import RobertaExtModel
from roberta_ext.families import preset
from tests.fairseq_plugin.test_models import dictionary as fairseq_dictionary

HEAD = "sentence_classification_head"


def label_task(outputs: int) -> SimpleNamespace:
    """What the criteria read of a task: ``--num-classes`` and label/dict.txt, whose class k is
    named "k" (fairseq's criterion turns label names into numbers with int())."""
    labels = Dictionary()
    for k in range(outputs):
        labels.add_symbol(str(k))
    return SimpleNamespace(cfg=SimpleNamespace(num_classes=outputs), label_dictionary=labels, target_dictionary=labels)


def validation_batches(model: RobertaExtModel, regression: bool, count: int = 3) -> list[dict[str, Any]]:
    """Batches of random tokens whose targets agree with the model's predictions about 70% of the
    time (so that MCC, F1 and the correlations are neither 0 nor 1)."""
    rng = random.Random(0)
    generator = torch.Generator().manual_seed(0)
    batches = []
    for size in (8, 5, 7)[:count]:
        tokens = torch.randint(4, 60, (size, 10), generator=generator)
        tokens[:, 0], tokens[:, -1] = 0, 2
        with torch.no_grad():
            logits = model(tokens, features_only=True, classification_head_name=HEAD)[0]  # (B, C)
        if regression:
            target = logits.view(-1) + torch.randn(size, generator=generator) * logits.std()
        else:
            predicted = logits.argmax(-1).tolist()
            target = torch.tensor([p if rng.random() < 0.7 else rng.randrange(logits.size(1)) for p in predicted])
        batches.append(
            {"net_input": {"src_tokens": tokens}, "target": target, "ntokens": tokens.numel(), "nsentences": size}
        )
    return batches


def validate(criterion: Any, model: RobertaExtModel, batches: list[dict[str, Any]]) -> tuple[dict[str, Any], str]:
    """What fairseq-train's ``validate`` prints: the stats of one aggregation over the batches,
    each reduced on its own as the trainer's ``valid_step`` reduces it, and the line fairseq's
    simple progress bar makes of them (``key value | ...``)."""
    with metrics.aggregate(new_root=True) as validation:
        for sample in batches:
            with torch.no_grad():
                _, _, log = criterion(model, sample)
            with metrics.aggregate():
                type(criterion).reduce_metrics([log])
    stats = validation.get_smoothed_values()
    return stats, " | ".join(f"{key} {format_stat(value)}" for key, value in stats.items())


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [(2, ["mcc", "acc_and_f1", "f1"]), (3, ["mcc"]), (1, ["pearson_and_spearman", "pearson", "spearman"])],
    ids=["two-classes", "three-classes", "regression"],
)
def test_validation_logs_fairseqs_metrics_as_numbers_only(outputs, expected):
    regression = outputs == 1
    torch.manual_seed(0)
    model = RobertaExtModel(SimpleNamespace(), preset("tiny"))
    model.register_classification_head(HEAD, num_classes=outputs)
    # At initialisation <s> barely depends on the input and one class wins everywhere (MCC and F1
    # then are 0); larger value, output and head projections make every class win somewhere.
    with torch.no_grad():
        for layer in model.encoder.sentence_encoder.layers:
            layer.self_attn.v_proj.weight.mul_(30.0)
            layer.self_attn.out_proj.weight.mul_(30.0)
        model.classification_heads[HEAD].out_proj.weight.mul_(20.0)
    model.eval()
    batches = validation_batches(model, regression)
    task = label_task(outputs)

    ours, line = validate(
        RobertaExtClassificationLoss(RobertaExtClassificationLossConfig(regression_target=regression), task),
        model,
        batches,
    )
    theirs, their_line = validate(
        SentencePredictionCriterion(
            SentencePredictionConfig(
                regression_target=regression,
                report_mcc=not regression,
                report_acc_and_f1=outputs == 2,
                report_pearson_and_spearman=regression,
            ),
            task,
        ),
        model,
        batches,
    )
    assert "pred [] | targ []" in their_line  # fairseq's buffers of predictions, printed as dummies
    assert "pred" not in ours and "targ" not in ours and "[]" not in line, line
    assert ours == {k: v for k, v in theirs.items() if k not in ("pred", "targ")}
    assert all(isinstance(value, int | float) for value in ours.values()), line
    assert [key for key in ours if key in expected] == expected
    assert all(0 < abs(ours[key]) < 100 for key in expected), line  # the data really tests them


# ---- roberta_ext_mlm ----

PAD = 1


def mlm_task() -> SimpleNamespace:
    dictionary = fairseq_dictionary(64)  # the tiny model's vocabulary
    return SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary)


def mlm_sample(seed: int, targets_per_row: tuple[int, ...]) -> dict[str, Any]:
    """Random rows of 10 tokens; row i has ``targets_per_row[i]`` targets at random positions, PAD elsewhere."""
    generator = torch.Generator().manual_seed(seed)
    rows = len(targets_per_row)
    tokens = torch.randint(4, 60, (rows, 10), generator=generator)
    tokens[:, 0], tokens[:, -1] = 0, 2
    target = torch.full_like(tokens, PAD)
    for i, count in enumerate(targets_per_row):
        where = 1 + torch.randperm(8, generator=generator)[:count]
        target[i, where] = torch.randint(4, 64, (count,), generator=generator)
    return {
        "net_input": {"src_tokens": tokens},
        "target": target,
        "ntokens": int(target.ne(PAD).sum()),
        "nsentences": rows,
    }


@pytest.fixture(scope="module")
def mlm_model() -> RobertaExtModel:
    torch.manual_seed(0)
    return RobertaExtModel(SimpleNamespace(), preset("tiny")).eval()


def test_the_mlm_loss_is_the_cross_entropy_of_the_masked_positions_as_fairseqs_masked_lm(mlm_model):
    task = mlm_task()
    ours, theirs = RobertaExtMLMLoss(RobertaExtMLMLossConfig(), task), MaskedLmLoss(MaskedLmConfig(), task)
    batches = [mlm_sample(0, (3, 0, 2, 4)), mlm_sample(1, (1, 0)), mlm_sample(2, (8, 5, 6))]
    for sample in batches:
        masked = sample["target"].ne(PAD)
        with torch.no_grad():
            loss, sample_size, log = ours(mlm_model, sample)
            their_loss, their_size, their_log = theirs(mlm_model, sample)
            every_logit = mlm_model(**sample["net_input"])[0]  # (B, T, V): the LM head at every position
        expected = F.cross_entropy(every_logit[masked], sample["target"][masked], reduction="sum")
        torch.testing.assert_close(loss, expected)
        torch.testing.assert_close(loss, their_loss)
        assert sample_size == int(their_size) == int(masked.sum()) and type(sample_size) is int
        assert log == {
            "loss": loss,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
        }
        assert log.keys() == their_log.keys()
    # Logged as fairseq-train logs it: each batch reduced on its own, averaged over the batches by sample size.
    stats, _ = validate(ours, mlm_model, batches)
    their_stats, _ = validate(theirs, mlm_model, batches)
    assert stats == their_stats and list(stats) == ["loss", "ppl"]
    alone, _ = validate(ours, mlm_model, batches[1:2])  # one target: the loss of that token, in bits
    with torch.no_grad():
        one = ours(mlm_model, batches[1])[0].item()
    assert alone["loss"] == round(one / math.log(2), 3) != round(one / math.log(2), 4)
    assert alone["ppl"] == round(2 ** (one / math.log(2)), 2)  # of the unrounded loss


def test_a_batch_without_targets_has_a_zero_loss_that_still_backpropagates(mlm_model):
    criterion = RobertaExtMLMLoss(RobertaExtMLMLossConfig(), mlm_task())
    sample = mlm_sample(3, (0, 0, 0))
    mlm_model.zero_grad()
    loss, sample_size, log = criterion(mlm_model, sample)
    assert loss.item() == 0.0 and sample_size == 0 and log["sample_size"] == 0
    loss.backward()  # the rank takes part in the step (distributed training stays in step)
    assert all(p.grad is not None and not p.grad.any() for p in mlm_model.encoder.lm_head.parameters())
    mlm_model.zero_grad()
    stats, _ = validate(criterion, mlm_model, [sample])
    assert stats["loss"] == 0.0 and stats["ppl"] == 1.0  # fairseq's masked_lm divides by the zero sample size


def test_mlm_logs_without_a_key_count_it_as_zero_and_can_be_summed_across_workers(mlm_model, monkeypatch):
    criterion = RobertaExtMLMLoss(RobertaExtMLMLossConfig(), mlm_task())
    with torch.no_grad():
        logs = [criterion(mlm_model, mlm_sample(seed, counts))[2] for seed, counts in ((4, (2, 3)), (5, (1, 1, 4)))]

    def reduced(logging_outputs: list[dict[str, Any]]) -> dict[str, Any]:
        with metrics.aggregate(new_root=True) as aggregate:
            RobertaExtMLMLoss.reduce_metrics(logging_outputs)
        return aggregate.get_smoothed_values()

    expected = reduced(logs)
    assert reduced([logs[0], {}, logs[1]]) == expected
    # fairseq's trainer sums the logs key by key across workers when the task says they can be summed.
    assert FairseqTask.logging_outputs_can_be_summed(criterion) is True
    summed, _ = Trainer._aggregate_logging_outputs(distributed_trainer(criterion, monkeypatch, []), logs)
    assert len(summed) == 1 and reduced(summed) == expected


# ---- roberta_ext_classification: its options, refusals, training steps and workers ----


def distributed_trainer(criterion: Any, monkeypatch, other_workers_logs: list[dict[str, Any]]) -> SimpleNamespace:
    """What ``Trainer._aggregate_logging_outputs`` reads of a trainer on one of several workers, with
    fairseq's collectives answering for the others: the sums of the logs of a worker alone, and the
    gathered lists of this worker's logs and ``other_workers_logs``."""
    monkeypatch.setattr(fairseq_trainer.distributed_utils, "all_reduce_dict", lambda data, device, group: data)
    monkeypatch.setattr(
        fairseq_trainer.distributed_utils,
        "all_gather_list",
        lambda data, max_size, group: [data, [other_workers_logs]],
    )
    worker = SimpleNamespace(
        task=FairseqTask(SimpleNamespace()),
        get_criterion=lambda: criterion,
        tpu=False,
        cfg=SimpleNamespace(common=SimpleNamespace(all_gather_list_size=16384)),
        device=torch.device("cpu"),
        data_parallel_process_group=None,
    )
    worker._fast_stat_sync_sum = partial(Trainer._fast_stat_sync_sum, worker)
    worker._all_gather_list_sync = partial(Trainer._all_gather_list_sync, worker)
    return worker


@pytest.fixture(scope="module")
def three_classes() -> RobertaExtModel:
    torch.manual_seed(0)
    model = RobertaExtModel(SimpleNamespace(), preset("tiny"))
    model.register_classification_head(HEAD, num_classes=3)
    with torch.no_grad():  # every class wins somewhere (as in the test above)
        for layer in model.encoder.sentence_encoder.layers:
            layer.self_attn.v_proj.weight.mul_(30.0)
            layer.self_attn.out_proj.weight.mul_(30.0)
        model.classification_heads[HEAD].out_proj.weight.mul_(20.0)
    return model.eval()


@pytest.mark.parametrize(
    ("task_cfg", "options", "flags"),
    [
        ({}, {}, (True, True, False)),  # no --num-classes: two classes
        ({"num_classes": 2}, {}, (True, True, False)),
        ({"num_classes": 3}, {}, (True, False, False)),
        ({"num_classes": 3}, {"report_acc_and_f1": True}, (True, True, False)),
        ({"num_classes": 1}, {"regression_target": True}, (False, False, True)),
    ],
    ids=["no-num-classes", "two", "three", "three-with-f1", "regression"],
)
def test_the_metrics_that_apply_are_on(task_cfg, options, flags):
    task = label_task(3)
    task.cfg = SimpleNamespace(**task_cfg)
    criterion = RobertaExtClassificationLoss(RobertaExtClassificationLossConfig(**options), task)
    assert (criterion.report_mcc, criterion.report_acc_and_f1, criterion.report_pearson_and_spearman) == flags
    assert criterion.keep_pred_and_targ and criterion.regression_target == options.get("regression_target", False)


def test_a_model_without_the_head_is_refused_naming_the_heads_it_has():
    criterion = RobertaExtClassificationLoss(RobertaExtClassificationLossConfig(), label_task(2))
    model = SimpleNamespace(classification_heads={"mnli": None, "cola": None})
    with pytest.raises(KeyError) as refused:
        criterion(model, {})
    assert refused.value.args[0] == (
        "the model has no classification head 'sentence_classification_head' (heads: ['cola', 'mnli']); "
        "check --classification-head-name"
    )


def test_training_steps_log_no_predictions_and_reduce_as_fairseqs(three_classes):
    task = label_task(3)
    ours = RobertaExtClassificationLoss(RobertaExtClassificationLossConfig(), task)
    theirs = SentencePredictionCriterion(SentencePredictionConfig(report_mcc=True), task)
    batches = validation_batches(three_classes, regression=False)
    three_classes.train()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no deprecation of an implicit softmax dimension, nothing else
            torch.manual_seed(1)  # the same dropout in both
            stats, _ = validate(ours, three_classes, batches)
        torch.manual_seed(1)
        their_stats, _ = validate(theirs, three_classes, batches)
        with torch.no_grad():
            log = ours(three_classes, batches[0])[2]
    finally:
        three_classes.eval()
    assert stats == their_stats and "mcc" not in stats and stats["accuracy"] > 0
    assert sorted(log) == ["loss", "ncorrect", "nsentences", "ntokens", "sample_size"]


def test_logs_without_predictions_among_validation_logs_reduce_as_fairseqs(three_classes):
    task = label_task(3)
    ours = RobertaExtClassificationLoss(RobertaExtClassificationLossConfig(), task)
    theirs = SentencePredictionCriterion(SentencePredictionConfig(report_mcc=True), task)
    batches = validation_batches(three_classes, regression=False)
    with torch.no_grad():
        logs = [ours(three_classes, sample)[2] for sample in batches]
    mixed = [logs[0], {}, logs[1], {"loss": torch.tensor(0.0)}, logs[2]]
    results = []
    for criterion in (ours, theirs):
        with metrics.aggregate(new_root=True) as aggregate:
            type(criterion).reduce_metrics(mixed)
        results.append(aggregate.get_smoothed_values())
    assert results[0] == {k: v for k, v in results[1].items() if k not in ("pred", "targ")}
    assert 0 < abs(results[0]["mcc"]) < 100


def test_a_bf16_model_is_judged_in_float32_as_fairseqs(three_classes):
    # --bf16 (fairseq's own): the logits are bf16, the softmax and the loss float32.
    task = label_task(3)
    model = RobertaExtModel(SimpleNamespace(), preset("tiny"))
    model.register_classification_head(HEAD, num_classes=3)
    model.load_state_dict(three_classes.state_dict())
    model = model.to(torch.bfloat16).eval()
    sample = validation_batches(three_classes, regression=False)[0]
    with torch.no_grad():
        assert (
            model(**sample["net_input"], features_only=True, classification_head_name=HEAD)[0].dtype == torch.bfloat16
        )
        loss, _, _ = RobertaExtClassificationLoss(RobertaExtClassificationLossConfig(), task)(model, sample)
        their_loss, _, _ = SentencePredictionCriterion(SentencePredictionConfig(), task)(model, sample)
    assert loss.dtype == torch.float32
    torch.testing.assert_close(loss, their_loss, rtol=0, atol=0)


def test_distributed_validation_gathers_the_logs_of_every_worker(three_classes, monkeypatch):
    # A validation log holds lists of predictions and targets: fairseq's trainer, when the task says
    # logs can be summed, sums each key across workers (0 + a list: a TypeError). Gathered instead,
    # the metrics are those of every worker's predictions.
    task = label_task(3)
    criterion = RobertaExtClassificationLoss(RobertaExtClassificationLossConfig(), task)
    with torch.no_grad():
        logs = [criterion(three_classes, sample)[2] for sample in validation_batches(three_classes, regression=False)]
    assert FairseqTask.logging_outputs_can_be_summed(criterion) is False
    gathered, _ = Trainer._aggregate_logging_outputs(distributed_trainer(criterion, monkeypatch, logs[1:]), logs[:1])
    assert gathered == logs
    with metrics.aggregate(new_root=True) as aggregate:
        RobertaExtClassificationLoss.reduce_metrics(gathered)
    stats = aggregate.get_smoothed_values()
    assert "mcc" in stats and 0 < abs(stats["mcc"]) < 100
