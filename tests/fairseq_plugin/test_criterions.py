"""``--criterion roberta_ext_classification`` as ``fairseq-train`` validates with it: the metrics of
fairseq's ``sentence_prediction`` (with every report flag that applies), value for value, and a
validation line of numbers only — fairseq's own criterion adds ``pred [] | targ []`` to every one."""

from __future__ import annotations

import random
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from tests.peers import require

require("fairseq", "the criterion is a fairseq criterion")

from fairseq.criterions.sentence_prediction import SentencePredictionConfig, SentencePredictionCriterion
from fairseq.data import Dictionary
from fairseq.logging import metrics
from fairseq.logging.progress_bar import format_stat

from roberta_ext.fairseq_plugin.criterions import RobertaExtClassificationLoss, RobertaExtClassificationLossConfig
from roberta_ext.fairseq_plugin.models import RobertaExtModel
from roberta_ext.families import preset

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
