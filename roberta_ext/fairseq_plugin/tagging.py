"""Token classification (NER, POS tagging) fine-tuning: the ``roberta_ext_token_classification``
task and criterion.

``--task roberta_ext_token_classification --criterion roberta_ext_token_classification
[--token-head-name tagger]``, with any ``roberta_ext`` architecture (``roberta_ext_*``,
``bert_ext_*``, ``albert_ext_*``).

**Data layout** — what ``roberta-ext prepare-tagging`` writes (see :mod:`roberta_ext.corpus.tagging`)::

    DATA/input0/dict.txt               the pretrained model's dictionary
    DATA/input0/{train,valid}.bin/.idx fairseq-preprocess of the sub-word tokens, one sentence per line
    DATA/label/dict.txt                the labels, one per line (output k of the head is line k)
    DATA/label/{train,valid}.bin/.idx  fairseq-preprocess of one label per sub-word token

How labels align with sub-words, and how examples and targets are made, is
:mod:`roberta_ext.data.tagging` (no fairseq); :class:`TokenLabelDataset` gives it fairseq's
dataset protocol. Sentences longer than ``--max-positions`` tokens (``<s>`` and ``</s>``
included) are refused by fairseq's size check (or skipped with
``--skip-invalid-size-inputs-valid-test``); nothing is truncated silently.

The criterion is the cross-entropy over labelled tokens (first sub-words); it logs ``loss``
(bits per word) and ``accuracy`` (% of words tagged right).
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from ..data.tagging import IGNORE_INDEX, TokenLabels, num_label_classes
from .datasets import SizedDataset
from .dictionaries import load_dictionary

logger = logging.getLogger(__name__)

DEFAULT_HEAD = "tagger"


class TokenLabelDataset(TokenLabels, SizedDataset):
    """:class:`~roberta_ext.data.tagging.TokenLabels` as a fairseq dataset, in
    :class:`SizedDataset`'s order: shuffled per ``seed`` and epoch (unless ``shuffle`` is off),
    then sorted by size."""

    def __init__(
        self,
        tokens: Any,
        labels: Any,
        *,
        label_dictionary: Dictionary,
        num_labels: int,
        bos: int,
        pad: int,
        name: str = "",
        shuffle: bool = True,
        seed: int = 1,
    ) -> None:
        super().__init__(
            tokens, labels, label_dictionary=label_dictionary, num_labels=num_labels, bos=bos, pad=pad, name=name
        )
        self.shuffle, self.seed, self.epoch = shuffle, seed, 1


@dataclass
class TokenClassificationConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "folder with input0/ and label/ (see the module docstring)"})
    token_head_name: str = field(default=DEFAULT_HEAD, metadata={"help": "name of the token head to train"})
    max_positions: int = field(default=512, metadata={"help": "longest example in tokens, <s> and </s> included"})
    no_shuffle: bool = field(default=False, metadata={"help": "keep the data's order (sorted by length)"})
    seed: int = II("common.seed")


@register_task("roberta_ext_token_classification", dataclass=TokenClassificationConfig)
class TokenClassificationTask(FairseqTask):
    """Tag every word of a sentence; the label goes on its first sub-word token."""

    cfg: TokenClassificationConfig

    def __init__(self, cfg: TokenClassificationConfig, dictionary: Dictionary, label_dictionary: Dictionary) -> None:
        super().__init__(cfg)
        self.dictionary = dictionary
        self.label_dictionary = label_dictionary
        self.num_labels = num_label_classes(label_dictionary)
        # Pretraining appended <mask>: the same vocabulary size lets --restore-file load the weights.
        self.mask_idx = dictionary.add_symbol("<mask>")

    @classmethod
    def setup_task(cls, cfg: TokenClassificationConfig, **kwargs: Any) -> "TokenClassificationTask":
        needs = "input0/ and label/, as roberta-ext prepare-tagging writes them"
        dictionary, labels = (
            load_dictionary(os.path.join(cfg.data, name, "dict.txt"), task=cls, needs=needs)
            for name in ("input0", "label")
        )
        task = cls(cfg, dictionary, labels)
        logger.info(
            f"dictionary: {len(dictionary)} types; {task.num_labels} labels: "
            f"{labels.symbols[labels.nspecial : labels.nspecial + task.num_labels][:20]}"
        )
        return task

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> None:
        loaded = []
        for name, dictionary in (("input0", self.dictionary), ("label", self.label_dictionary)):
            path = os.path.join(self.cfg.data, name, split)
            dataset = data_utils.load_indexed_dataset(path, dictionary, combine=combine)
            if dataset is None:
                raise FileNotFoundError(f"dataset not found: {split} ({path}.bin/.idx)")
            loaded.append(dataset)
        self.datasets[split] = TokenLabelDataset(
            *loaded,
            label_dictionary=self.label_dictionary,
            num_labels=self.num_labels,
            bos=self.dictionary.bos(),
            pad=self.dictionary.pad(),
            name=os.path.join(self.cfg.data, "{input0,label}", split),
            shuffle=not self.cfg.no_shuffle,
            seed=self.cfg.seed,
        )
        logger.info(f"loaded {len(loaded[0])} sentences of {split}")

    def build_model(self, cfg: Any, from_checkpoint: bool = False) -> Any:
        model = super().build_model(cfg, from_checkpoint)
        model.register_token_head(self.cfg.token_head_name, self.num_labels)
        return model

    @property
    def source_dictionary(self) -> Dictionary:
        return self.dictionary

    @property
    def target_dictionary(self) -> Dictionary:
        return self.label_dictionary

    def max_positions(self) -> int:
        return self.cfg.max_positions


@dataclass
class TokenClassificationLossConfig(FairseqDataclass):
    """No options: the head is the task's ``--token-head-name``."""


@register_criterion("roberta_ext_token_classification", dataclass=TokenClassificationLossConfig)
class TokenClassificationLoss(FairseqCriterion):
    """Cross-entropy of the token head over first sub-words; logs loss (bits per word) and accuracy (%)."""

    def __init__(self, cfg: TokenClassificationLossConfig, task: Any) -> None:
        super().__init__(task)
        self.head = getattr(task.cfg, "token_head_name", DEFAULT_HEAD)

    def forward(self, model: Any, sample: dict[str, Any], reduce: bool = True):
        if self.head not in model.token_heads:
            raise KeyError(
                f"the model has no token head {self.head!r} (token heads: {sorted(model.token_heads)}); "
                "check --token-head-name"
            )
        logits, _ = model(**sample["net_input"], token_head_name=self.head)  # (B, T, L)
        target = sample["target"]  # (B, T), IGNORE_INDEX where there is no label
        labelled = target.ne(IGNORE_INDEX)
        sample_size = int(labelled.sum())
        loss = F.cross_entropy(
            logits.flatten(0, 1).float(), target.flatten(), ignore_index=IGNORE_INDEX, reduction="sum"
        )
        correct = (logits.argmax(dim=-1) == target) & labelled
        log = {
            "loss": loss.detach(),
            "ntokens": sample["ntokens"],
            "nsentences": sample["nsentences"],
            "sample_size": sample_size,
            "nwords": sample_size,
            "ncorrect": int(correct.sum()),
        }
        return loss, sample_size, log

    @staticmethod
    def reduce_metrics(logging_outputs: list[dict[str, Any]]) -> None:
        def total(key: str) -> float:
            return sum(log.get(key, 0) for log in logging_outputs)

        words = total("nwords")
        metrics.log_scalar("loss", total("loss") / max(words, 1) / math.log(2), words, round=3)
        if words:
            metrics.log_scalar("accuracy", 100.0 * total("ncorrect") / words, words, round=1)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
