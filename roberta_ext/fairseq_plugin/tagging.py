"""Token classification (NER, POS tagging) fine-tuning: the ``token_classification`` task and criterion.

``--task token_classification --criterion token_classification [--token-head-name tagger]``,
with any ``roberta_ext`` architecture (``roberta_ext_*``, ``bert_ext_*``, ``albert_ext_*``).

**Data layout** — what ``roberta-ext prepare-tagging`` writes (see :mod:`roberta_ext.tokenize_corpus`)::

    DATA/input0/dict.txt               the pretrained model's dictionary
    DATA/input0/{train,valid}.bin/.idx fairseq-preprocess of the sub-word tokens, one sentence per line
    DATA/label/dict.txt                the labels, one per line (output k of the head is line k)
    DATA/label/{train,valid}.bin/.idx  fairseq-preprocess of one label per sub-word token

Line ``i`` of ``label`` has exactly as many labels as line ``i`` of ``input0`` has tokens. The
first sub-word of each word carries the word's label and every other sub-word the label
``<pad>``, which fairseq's dictionaries already know (index 1): such tokens are ignored by
the loss and the metrics. Alignment is thus decided once, when the data is prepared, by the
tokenizer that made the sub-words — not guessed later from ``##`` or ``▁`` (WordPiece splits
``U.S.`` into four "words" without any ``##``).

An example is ``<s> tokens </s>`` (the dictionary's ``<s>``/``</s>`` play ``[CLS]``/``[SEP]``
for BERT and ALBERT; segment ids are all 0). Head output ``k`` is the label on line ``k + 1`` of
``label/dict.txt`` — index ``k + nspecial`` of the label dictionary, the convention of fairseq's
``sentence_prediction`` and of the hub's ``label_name``. Sentences longer than
``--max-positions`` tokens (``<s>`` and ``</s>`` included) are refused by fairseq's size check
(or skipped with ``--skip-invalid-size-inputs-valid-test``); nothing is truncated silently.

The criterion is the cross-entropy over labelled tokens (first sub-words); it logs ``loss``
(bits per word) and ``accuracy`` (% of words tagged right).
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from .datasets import SizedDataset

logger = logging.getLogger(__name__)

IGNORE_LABEL = "<pad>"
"""The label of sub-words that continue a word: fairseq's padding symbol, so it needs no entry in
``label/dict.txt`` and binarizes to the padding index."""

IGNORE_INDEX = -100
"""Target value of unlabelled positions (``<s>``, ``</s>``, continuations, padding): PyTorch's default."""

DEFAULT_HEAD = "tagger"


def num_label_classes(labels: Dictionary) -> int:
    """How many labels ``labels`` holds: its symbols after the specials, without the
    ``madeupwordNNNN`` fillers ``fairseq-preprocess`` appends (those must all come last)."""
    names = labels.symbols[labels.nspecial:]
    count = len(names)
    while count and names[count - 1].startswith("madeupword"):
        count -= 1
    misplaced = [name for name in names[:count] if name.startswith("madeupword")]
    if misplaced:
        raise ValueError(f"label dictionary has filler symbols among its labels: {misplaced[:3]}")
    if count == 0:
        raise ValueError("label dictionary holds no label")
    return count


class TokenLabelDataset(SizedDataset):
    """``<s> tokens </s>`` with a target per position: the label class of first sub-words,
    :data:`IGNORE_INDEX` elsewhere.

    ``tokens`` and ``labels`` are fairseq indexed datasets (``</s>``-terminated lines) of equal
    line lengths; label indices are those of ``label_dictionary``.
    """

    def __init__(self, tokens: Any, labels: Any, *, label_dictionary: Dictionary, num_labels: int, bos: int,
                 pad: int, name: str = "", shuffle: bool = True, seed: int = 1) -> None:
        super().__init__()
        self.tokens, self.labels = tokens, labels
        self.bos, self.pad = bos, pad
        self.shuffle, self.seed, self.epoch = shuffle, seed, 1
        self.label_offset = label_dictionary.nspecial
        self.label_pad = label_dictionary.pad()
        self.sizes = np.asarray(tokens.sizes, dtype=np.int64) + 1  # <s> prepended
        self._check(label_dictionary, num_labels, name)

    def _check(self, label_dictionary: Dictionary, num_labels: int, name: str) -> None:
        """Fail on misaligned or unknown labels, naming the (1-based) line."""
        if len(self.tokens) != len(self.labels):
            raise ValueError(f"{name}: {len(self.tokens)} token lines but {len(self.labels)} label lines")
        token_sizes, label_sizes = np.asarray(self.tokens.sizes), np.asarray(self.labels.sizes)
        different = np.flatnonzero(token_sizes != label_sizes)
        if len(different):
            line = int(different[0])
            raise ValueError(f"{name}: line {line + 1} has {token_sizes[line] - 1} tokens but "
                             f"{label_sizes[line] - 1} labels ({len(different)} lines differ); every sub-word "
                             f"token needs a label ({IGNORE_LABEL} for continuations)")
        first, last = self.label_offset, self.label_offset + num_labels
        for line in range(len(self.labels)):
            labels = self.labels[line][:-1]  # without </s>
            real = labels.ne(self.label_pad)
            bad = real & ((labels < first) | (labels >= last))
            if bool(bad.any()):
                symbol = label_dictionary[int(labels[bad][0])]
                raise ValueError(f"{name}: line {line + 1} has the label {symbol!r}, which is not a label of the "
                                 f"label dictionary")
            if len(labels) and not bool(real[0]):
                raise ValueError(f"{name}: line {line + 1} starts with {IGNORE_LABEL}: the first token of a "
                                 "sentence starts a word and needs its label")

    def __getitem__(self, index: int) -> dict[str, Any]:
        tokens = self.tokens[index]  # (n + 1,): tokens and </s>
        labels = self.labels[index][:-1]  # (n,)
        source = torch.cat([tokens.new_tensor([self.bos]), tokens])  # <s> tokens </s>
        classes = torch.where(labels.ne(self.label_pad), labels - self.label_offset, IGNORE_INDEX)
        target = torch.cat([classes.new_tensor([IGNORE_INDEX]), classes, classes.new_tensor([IGNORE_INDEX])])
        return {"id": int(index), "source": source, "target": target}

    def collater(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        if not samples:
            return {}
        tokens = data_utils.collate_tokens([s["source"] for s in samples], self.pad)  # (B, T)
        target = data_utils.collate_tokens([s["target"] for s in samples], IGNORE_INDEX)  # (B, T)
        lengths = tokens.ne(self.pad).sum(dim=1)
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": len(samples),
            "ntokens": int(lengths.sum()),
            "nwords": int(target.ne(IGNORE_INDEX).sum()),
            "net_input": {"src_tokens": tokens, "src_lengths": lengths},
            "target": target,
        }


@dataclass
class TokenClassificationConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={"help": "folder with input0/ and label/ (see the module docstring)"})
    token_head_name: str = field(default=DEFAULT_HEAD, metadata={"help": "name of the token head to train"})
    max_positions: int = field(default=512, metadata={"help": "longest example in tokens, <s> and </s> included"})
    no_shuffle: bool = field(default=False, metadata={"help": "keep the data's order (sorted by length)"})
    seed: int = II("common.seed")


@register_task("token_classification", dataclass=TokenClassificationConfig)
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
        paths = {name: os.path.join(cfg.data, name, "dict.txt") for name in ("input0", "label")}
        for name, path in paths.items():
            if not os.path.isfile(path):
                raise FileNotFoundError(f"no dictionary at {path!r}: DATA needs input0/ and label/, as written by "
                                        "roberta-ext prepare-tagging")
        dictionary = Dictionary.load(paths["input0"])
        labels = Dictionary.load(paths["label"])
        task = cls(cfg, dictionary, labels)
        logger.info(f"dictionary: {len(dictionary)} types; {task.num_labels} labels: "
                    f"{labels.symbols[labels.nspecial:labels.nspecial + task.num_labels][:20]}")
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
            *loaded, label_dictionary=self.label_dictionary, num_labels=self.num_labels, bos=self.dictionary.bos(),
            pad=self.dictionary.pad(), name=os.path.join(self.cfg.data, "{input0,label}", split),
            shuffle=not self.cfg.no_shuffle, seed=self.cfg.seed,
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


@register_criterion("token_classification", dataclass=TokenClassificationLossConfig)
class TokenClassificationLoss(FairseqCriterion):
    """Cross-entropy of the token head over first sub-words; logs loss (bits per word) and accuracy (%)."""

    def __init__(self, cfg: TokenClassificationLossConfig, task: Any) -> None:
        super().__init__(task)
        self.head = getattr(task.cfg, "token_head_name", DEFAULT_HEAD)

    def forward(self, model: Any, sample: dict[str, Any], reduce: bool = True):
        if self.head not in model.token_heads:
            raise KeyError(f"the model has no token head {self.head!r} (token heads: {sorted(model.token_heads)}); "
                           "check --token-head-name")
        logits, _ = model(**sample["net_input"], token_head_name=self.head)  # (B, T, L)
        target = sample["target"]  # (B, T), IGNORE_INDEX where there is no label
        labelled = target.ne(IGNORE_INDEX)
        sample_size = int(labelled.sum())
        loss = F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(), ignore_index=IGNORE_INDEX,
                               reduction="sum")
        correct = (logits.argmax(dim=-1) == target) & labelled
        log = {"loss": loss.detach(), "ntokens": sample["ntokens"], "nsentences": sample["nsentences"],
               "sample_size": sample_size, "nwords": sample_size, "ncorrect": int(correct.sum())}
        return loss, sample_size, log

    @staticmethod
    def reduce_metrics(logging_outputs: list[dict[str, Any]]) -> None:
        total = lambda key: sum(log.get(key, 0) for log in logging_outputs)  # noqa: E731
        words = total("nwords")
        metrics.log_scalar("loss", total("loss") / max(words, 1) / math.log(2), words, round=3)
        if words:
            metrics.log_scalar("accuracy", 100.0 * total("ncorrect") / words, words, round=1)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
