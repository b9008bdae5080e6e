"""SpanBERT in fairseq: the ``spanbert_ext`` model (archs ``spanbert_ext_base``,
``spanbert_ext_large``), the ``roberta_ext_spanbert`` task and criterion. No NSP.

As with ELECTRA, one architecture serves pretraining and fine-tuning: under ``--task roberta_ext_spanbert``
the model carries the span boundary head; under any other task it is the encoder alone, and
restoring a pretraining checkpoint drops the head while loading.

The task is ``roberta_ext_mlm`` with span masking on by default (whole-word spans, geometric
lengths with p = 0.2, at most 10 words, 80/10/10 per span); it needs the GPT-2 BPE files to find
word starts (``DATA/encoder.json`` and ``DATA/vocab.bpe``, or ``--bpe-encoder-json``/``--bpe-vocab``).
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from fairseq.models import register_model
from fairseq.tasks import register_task
from fairseq.utils import safe_getattr

from ..families import spanbert
from .models import RobertaExtConfig, RobertaExtModel
from .tasks import RobertaExtMLMConfig, RobertaExtMLMTask

logger = logging.getLogger(__name__)


@dataclass
class SpanBertExtConfig(RobertaExtConfig):
    """The ``roberta_ext`` options plus the span boundary head's."""

    sbo_max_span_length: int = field(
        default=spanbert.DEFAULT_MAX_SPAN_LENGTH,
        metadata={"help": "rows of the SBO position table (offsets within a span are clamped to it)"},
    )
    sbo_position_dim: Optional[int] = field(
        default=None, metadata={"help": "width of the SBO position embeddings (default: the hidden size)"}
    )


@register_model("spanbert_ext", dataclass=SpanBertExtConfig)
class SpanBertExtModel(RobertaExtModel):
    """The encoder with its MLM head; under ``--task roberta_ext_spanbert``, :class:`SpanBertExtPretrainingModel`."""

    PRETRAINING_TASK = "roberta_ext_spanbert"

    @classmethod
    def pretraining_class(cls) -> type[RobertaExtModel]:
        return SpanBertExtPretrainingModel


class SpanBertExtPretrainingModel(SpanBertExtModel, spanbert.SpanBertPretrainingModel):
    """The encoder with its MLM head and span boundary head: the family's
    :class:`~roberta_ext.families.spanbert.SpanBertPretrainingModel` (its module, its
    ``pretraining_forward``), built from fairseq's options."""

    def pretraining_model_options(self, args: Any) -> dict[str, Any]:
        return {
            "max_span_length": safe_getattr(args, "sbo_max_span_length", spanbert.DEFAULT_MAX_SPAN_LENGTH),
            "position_dim": safe_getattr(args, "sbo_position_dim", None),
        }


@dataclass
class SpanBertTaskConfig(RobertaExtMLMConfig):
    """``roberta_ext_mlm``'s options with span masking on."""

    span_masking: bool = field(default=True, metadata={"help": "SpanBERT: geometric spans of whole words"})


@register_task("roberta_ext_spanbert", dataclass=SpanBertTaskConfig)
class SpanBertTask(RobertaExtMLMTask):
    """SpanBERT pretraining data: span-masked batches (no sentence pairs, no NSP)."""


@dataclass
class SpanBertLossConfig(FairseqDataclass):
    """No options: both losses count fully, as in the paper."""


@register_criterion("roberta_ext_spanbert", dataclass=SpanBertLossConfig)
class SpanBertCriterion(FairseqCriterion):
    """MLM + SBO cross-entropy summed over the masked tokens. Logged in bits per masked token,
    like ``roberta_ext_mlm``: ``loss`` (the sum of the two), ``mlm_loss``, ``sbo_loss``, and the
    accuracies ``mlm_acc`` and ``sbo_acc`` (percent)."""

    def __init__(self, cfg: SpanBertLossConfig, task: Any) -> None:
        super().__init__(task)

    def forward(self, model: Any, sample: dict, reduce: bool = True):
        output = model(**sample["net_input"], pretraining_targets=sample["target"])
        if not isinstance(output, spanbert.SpanBertOutput):
            raise TypeError(
                "criterion 'roberta_ext_spanbert' needs --arch spanbert_ext_* with --task roberta_ext_spanbert"
            )
        parts = spanbert.spanbert_loss(output)
        logging_output = {
            "loss": parts.loss.detach(),
            "mlm_loss": parts.mlm_loss,
            "sbo_loss": parts.sbo_loss,
            "mlm_correct": parts.mlm_correct,
            "sbo_correct": parts.sbo_correct,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": parts.masked,
        }
        return parts.loss, parts.masked, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs: list) -> None:
        def total(key: str) -> float:
            return float(sum(log.get(key, 0) for log in logging_outputs))

        masked = total("sample_size")
        for key in ("loss", "mlm_loss", "sbo_loss"):
            metrics.log_scalar(key, total(key) / max(masked, 1) / math.log(2), masked, round=3)
        metrics.log_scalar("mlm_acc", 100 * total("mlm_correct") / max(masked, 1), masked, round=2)
        metrics.log_scalar("sbo_acc", 100 * total("sbo_correct") / max(masked, 1), masked, round=2)
        metrics.log_derived("mlm_ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
