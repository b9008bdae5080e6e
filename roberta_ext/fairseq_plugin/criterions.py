"""fairseq criteria: ``roberta_ext_mlm`` and ``roberta_ext_classification``."""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.criterions.sentence_prediction import (
    SentencePredictionConfig,
    SentencePredictionCriterion,
    acc_and_f1,
    matthews_corrcoef,
    pearson_and_spearman,
)
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from fairseq.logging.meters import MetersDict, safe_round


@dataclass
class RobertaExtMLMLossConfig(FairseqDataclass):
    """No options: the targets say which positions count."""


@register_criterion("roberta_ext_mlm", dataclass=RobertaExtMLMLossConfig)
class RobertaExtMLMLoss(FairseqCriterion):
    """Cross-entropy over the masked positions only; the LM head runs on those positions alone.
    The loss is logged in bits per masked token (and ``ppl`` as 2**loss), like fairseq's ``masked_lm``."""

    def __init__(self, cfg: RobertaExtMLMLossConfig, task: Any) -> None:
        super().__init__(task)

    def forward(self, model: Any, sample: dict[str, Any], reduce: bool = True):
        targets = sample["target"]
        masked = targets.ne(self.padding_idx)  # (B, T)
        sample_size = int(masked.sum())
        logits = model(**sample["net_input"], masked_tokens=masked)[0]  # (N, V)
        # A batch may draw no target at all (very short rows): it still takes part in the step,
        # with a zero loss, so that distributed ranks stay in step.
        loss = F.cross_entropy(logits.float(), targets[masked], reduction="sum") if sample_size else logits.sum() * 0.0
        logging_output = {
            "loss": loss.detach(),
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
        }
        return loss, sample_size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs: list[dict[str, Any]]) -> None:
        loss_sum = sum(log.get("loss", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        metrics.log_scalar("loss", loss_sum / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True


@dataclass
class RobertaExtClassificationLossConfig(SentencePredictionConfig):
    """fairseq's ``sentence_prediction`` criterion options; the metrics that apply are on by default."""


@register_criterion("roberta_ext_classification", dataclass=RobertaExtClassificationLossConfig)
class RobertaExtClassificationLoss(SentencePredictionCriterion):
    """Cross-entropy (or MSE with ``--regression-target``) on a classification head, logging
    accuracy and, where they apply, F1 and MCC (two classes), MCC (more classes), or
    Pearson/Spearman (regression)."""

    def __init__(self, cfg: RobertaExtClassificationLossConfig, task: Any) -> None:
        num_classes = getattr(task.cfg, "num_classes", 2)
        if cfg.regression_target:
            cfg.report_pearson_and_spearman = True
        else:
            cfg.report_mcc = True
            cfg.report_acc_and_f1 = cfg.report_acc_and_f1 or num_classes == 2
        super().__init__(cfg, task)

    def forward(self, model: Any, sample: dict[str, Any], reduce: bool = True):
        if self.classification_head_name not in model.classification_heads:
            raise KeyError(
                f"the model has no classification head {self.classification_head_name!r} "
                f"(heads: {sorted(model.classification_heads)}); check --classification-head-name"
            )
        logits, _ = model(
            **sample["net_input"], features_only=True, classification_head_name=self.classification_head_name
        )  # (B, C)
        targets = model.get_targets(sample, [logits]).view(-1)
        sample_size = targets.numel()
        if self.regression_target:
            predictions = logits.view(-1).float()
            loss = F.mse_loss(predictions, targets.float(), reduction="sum")
        else:
            loss = F.nll_loss(F.log_softmax(logits, dim=-1, dtype=torch.float32), targets, reduction="sum")
            predictions = logits.argmax(dim=1)
        log: dict[str, Any] = {
            "loss": loss.data,
            "ntokens": sample["ntokens"],
            "nsentences": sample_size,
            "sample_size": sample_size,
        }
        if not self.regression_target:
            log["ncorrect"] = (predictions == targets).sum()
        if self.keep_pred_and_targ and not model.training:
            # Class indices, not label names: fairseq converts names with int(), which fails on
            # labels such as "entailment". The metrics need only consistent class ids.
            log["pred"] = predictions.detach().cpu().tolist()
            log["targ"] = targets.detach().cpu().tolist()
            for flag in ("report_mcc", "report_acc_and_f1", "report_pearson_and_spearman"):
                if getattr(self, flag):
                    log[flag] = True
        return loss, sample_size, log

    @staticmethod
    def reduce_metrics(logging_outputs: list[dict[str, Any]]) -> None:
        """fairseq's ``sentence_prediction`` metrics, with the same values, minus its ``pred []``
        and ``targ []`` on every validation line.

        fairseq keeps the validation predictions and targets in meters named ``pred`` and
        ``targ`` for MCC, F1 and the correlations; such a meter's printed value is a dummy ``[]``.
        Here they are kept under ``_pred`` and ``_targ``: fairseq leaves meters whose name starts
        with ``_`` out of what it logs, and the metrics derived from them are computed, with
        fairseq's own functions, exactly as fairseq computes them."""
        SentencePredictionCriterion.reduce_metrics(
            [{k: v for k, v in log.items() if k not in ("pred", "targ")} for log in logging_outputs]
        )  # loss, nll_loss, accuracy
        # np.array, as fairseq does: int64 classes, float64 regression values.
        predictions = np.array([p for log in logging_outputs for p in log.get("pred", [])])
        if not len(predictions):
            return
        targets = np.array([t for log in logging_outputs for t in log.get("targ", [])])
        metrics.log_concat_tensor(_PREDICTIONS, torch.from_numpy(predictions), dim=0)
        metrics.log_concat_tensor(_TARGETS, torch.from_numpy(targets), dim=0)

        def derived(name: str, fn: Callable[[np.ndarray, np.ndarray], float]) -> None:
            def value(meters: MetersDict) -> float:
                return safe_round(fn(meters[_PREDICTIONS].tensor.numpy(), meters[_TARGETS].tensor.numpy()) * 100, 1)

            metrics.log_derived(name, value)

        if any("report_mcc" in log for log in logging_outputs):
            derived("mcc", matthews_corrcoef)
        if any("report_acc_and_f1" in log for log in logging_outputs):
            derived("acc_and_f1", lambda p, t: acc_and_f1(p, t)["acc_and_f1"])
            derived("f1", lambda p, t: acc_and_f1(p, t)["f1"])
        if any("report_pearson_and_spearman" in log for log in logging_outputs):
            derived("pearson_and_spearman", lambda p, t: pearson_and_spearman(p, t)["corr"])
            derived("pearson", lambda p, t: pearson_and_spearman(p, t)["pearson"])
            derived("spearman", lambda p, t: pearson_and_spearman(p, t)["spearmanr"])

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        """No: a validation log holds lists of predictions and targets, which fairseq's trainer would
        sum key by key across workers (``0 + list``, a TypeError in distributed validation); gathered
        instead, the metrics are those of every worker's predictions."""
        return False


_PREDICTIONS, _TARGETS = "_pred", "_targ"
"""Meters of the validation predictions and targets; fairseq does not log names starting with ``_``."""
