"""ELECTRA in fairseq: the ``electra_ext`` model (archs ``electra_ext_small``, ``electra_ext_base``,
``electra_ext_large``), the ``roberta_ext_electra`` task and criterion.

One architecture serves pretraining and fine-tuning. Under ``--task roberta_ext_electra`` the model is built
with its generator and discriminator head (it is :class:`roberta_ext.families.electra.ElectraPretrainingModel`);
under any other task (``roberta_ext_extractive_qa``, ``roberta_ext_classification``, ...) it is the
discriminator alone, and ``--restore-file`` of a pretraining checkpoint drops the generator and
the discriminator head while loading. So fine-tuning is the pretraining command with another
task, criterion and data, and what it saves is an ordinary encoder checkpoint.

The task is ``roberta_ext_mlm`` with ELECTRA's masking defaults: 15% of the tokens, of which 85%
become ``<mask>`` and 15% stay as they are (no random tokens: the generator supplies those).
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from fairseq.models import register_model
from fairseq.tasks import register_task
from fairseq.utils import safe_getattr

from ..families import electra
from .models import RobertaExtConfig, RobertaExtModel
from .tasks import RobertaExtMLMConfig, RobertaExtMLMTask

logger = logging.getLogger(__name__)


@dataclass
class ElectraExtConfig(RobertaExtConfig):
    """The ``roberta_ext`` options plus the generator's size."""

    generator_fraction: float = field(
        default=electra.DEFAULT_GENERATOR_FRACTION,
        metadata={"help": "generator hidden/FFN size and heads as a fraction of the discriminator's"},
    )


@register_model("electra_ext", dataclass=ElectraExtConfig)
class ElectraExtModel(RobertaExtModel):
    """The discriminator; under ``--task roberta_ext_electra``, :class:`ElectraExtPretrainingModel`."""

    PRETRAINING_TASK = "roberta_ext_electra"

    @classmethod
    def pretraining_class(cls) -> type[RobertaExtModel]:
        return ElectraExtPretrainingModel


class ElectraExtPretrainingModel(ElectraExtModel, electra.ElectraPretrainingModel):
    """The discriminator with its generator and replaced-token-detection head: the family's
    :class:`~roberta_ext.families.electra.ElectraPretrainingModel` (its modules, its
    ``pretraining_forward``), built from fairseq's options."""

    def __init__(self, args: Any, cfg: Any) -> None:
        super().__init__(args, cfg)
        logger.info(
            f"ELECTRA generator: {self.generator.cfg.encoder_embed_dim} wide, "
            f"{self.generator.cfg.encoder_attention_heads} heads "
            f"(fraction {self.pretraining_model_options(args)['generator_fraction']})"
        )

    def pretraining_model_options(self, args: Any) -> dict[str, Any]:
        return {"generator_fraction": safe_getattr(args, "generator_fraction", electra.DEFAULT_GENERATOR_FRACTION)}


@dataclass
class ElectraTaskConfig(RobertaExtMLMConfig):
    """``roberta_ext_mlm``'s options with ELECTRA's masking defaults."""

    leave_unmasked_prob: float = field(default=0.15, metadata={"help": "of the targets: fraction left unchanged"})
    random_token_prob: float = field(
        default=0.0,
        metadata={"help": "of the targets: fraction replaced at random (ELECTRA: none, the generator replaces)"},
    )


@register_task("roberta_ext_electra", dataclass=ElectraTaskConfig)
class ElectraTask(RobertaExtMLMTask):
    """ELECTRA pretraining data: masked-LM batches whose targets the generator fills in."""


@dataclass
class ElectraLossConfig(FairseqDataclass):
    discriminator_weight: float = field(
        default=electra.DEFAULT_DISCRIMINATOR_WEIGHT,
        metadata={"help": "lambda: weight of the discriminator's BCE against the generator's MLM loss"},
    )


@register_criterion("roberta_ext_electra", dataclass=ElectraLossConfig)
class ElectraCriterion(FairseqCriterion):
    """``gen_loss + lambda * disc_loss``, each the mean over its batch (ELECTRA's objective).

    Logged (all in nats): ``loss`` (the objective, averaged over batches), ``gen_loss`` per masked
    token, ``disc_loss`` per token, ``disc_acc_replaced`` and ``disc_acc_original`` (percent of
    replaced / original tokens the discriminator gets right), ``replaced`` (percent of the masked
    positions whose sample differs from the original).
    """

    def __init__(self, cfg: ElectraLossConfig, task: Any) -> None:
        super().__init__(task)
        self.discriminator_weight = cfg.discriminator_weight
        mask_idx = getattr(task, "mask_idx", None)
        self.disallowed_ids = tuple(i for i in (self.padding_idx, mask_idx) if i is not None)

    def forward(self, model: Any, sample: dict, reduce: bool = True):
        output = model(
            **sample["net_input"],
            pretraining_targets=sample["target"],
            pretraining_options={"disallowed_ids": self.disallowed_ids},
        )
        if not isinstance(output, electra.ElectraOutput):
            raise TypeError(
                "criterion 'roberta_ext_electra' needs an ELECTRA model: --arch electra_ext_* with "
                "--task roberta_ext_electra"
            )
        parts = electra.electra_loss(
            output, padding_idx=self.padding_idx, discriminator_weight=self.discriminator_weight
        )
        logging_output = {
            "loss": parts.loss.detach(),
            "gen_loss": parts.generator_loss.detach(),
            "disc_loss": parts.discriminator_loss.detach(),
            "nmasked": parts.masked,
            "ndisc": parts.tokens,
            "replaced_correct": parts.replaced_correct,
            "nreplaced": parts.replaced,
            "original_correct": parts.original_correct,
            "noriginal": parts.original,
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": 1,  # each term is already a mean over its batch
        }
        return parts.loss, 1, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs: list) -> None:
        def total(key: str) -> float:
            return float(sum(log.get(key, 0) for log in logging_outputs))

        batches, masked, tokens = total("sample_size"), total("nmasked"), total("ndisc")
        replaced, original = total("nreplaced"), total("noriginal")
        metrics.log_scalar("loss", total("loss") / max(batches, 1), batches, round=3)
        metrics.log_scalar("gen_loss", total("gen_loss") / max(masked, 1), masked, round=3)
        metrics.log_scalar("disc_loss", total("disc_loss") / max(tokens, 1), tokens, round=4)
        metrics.log_scalar("disc_acc_replaced", 100 * total("replaced_correct") / max(replaced, 1), replaced, round=2)
        metrics.log_scalar("disc_acc_original", 100 * total("original_correct") / max(original, 1), original, round=2)
        metrics.log_scalar("replaced", 100 * replaced / max(masked, 1), masked, round=2)
        metrics.log_derived("gen_ppl", lambda meters: round(math.exp(min(meters["gen_loss"].avg, 50)), 2))

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
