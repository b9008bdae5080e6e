"""Extractive QA in fairseq: the ``roberta_ext_extractive_qa`` task and criterion, for any ``--arch``
of the plugin (``roberta_ext_*``, ``bert_ext_*``, ``electra_ext_*``, ``spanbert_ext_*``, ...).

Data: a directory with ``dict.txt`` (the pretrained model's), the GPT-2 BPE files
``encoder.json`` and ``vocab.bpe``, and one SQuAD-like JSON file per split (``train.json``,
``valid.json``): a list of ``{"question", "context", "answers": [{"text", "answer_start"}]}``,
empty ``answers`` for unanswerable questions. No binarization step: the task tokenizes the JSON
when it loads a split (:mod:`roberta_ext.inference.qa` does the work, the same code the hub's
``answer`` uses). The model gets a 2-label token head (``--qa-head-name``, default ``qa``);
inputs follow the model's pair layout, as the hub's ``encode`` does, decided once the model is
built: RoBERTa's doubled separator, BERT's single one with segment ids for the other families.
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.data import Dictionary
from fairseq.dataclass import FairseqDataclass
from fairseq.logging import metrics
from fairseq.tasks import FairseqTask, register_task
from omegaconf import II, MISSING

from ..inference import qa
from .datasets import SizedDataset
from .dictionaries import data_folders, load_dictionary

logger = logging.getLogger(__name__)


@dataclass
class ExtractiveQAConfig(FairseqDataclass):
    data: str = field(
        default=MISSING, metadata={"help": "directory with dict.txt, encoder.json, vocab.bpe and SPLIT.json files"}
    )
    max_positions: int = field(default=512, metadata={"help": "tokens per window, specials included"})
    doc_stride: Optional[int] = field(
        default=None,
        metadata={"help": "context tokens between the starts of consecutive windows (default: half a window)"},
    )
    max_question_tokens: int = field(
        default=qa.DEFAULT_MAX_QUESTION_TOKENS, metadata={"help": "questions are cut to this many tokens"}
    )
    qa_head_name: str = field(default=qa.DEFAULT_HEAD, metadata={"help": "name of the start/end token head"})
    bpe_encoder_json: Optional[str] = field(
        default=None, metadata={"help": "GPT-2 encoder.json (default: DATA/encoder.json)"}
    )
    bpe_vocab: Optional[str] = field(default=None, metadata={"help": "GPT-2 vocab.bpe (default: DATA/vocab.bpe)"})
    seed: int = II("common.seed")


class QAWindowDataset(SizedDataset):
    """Windows of (question, context) in, padded batches with start/end labels out. Batches are
    built in the pair layout the task learns from its model."""

    def __init__(self, windows: list, task: "ExtractiveQATask", shuffle: bool) -> None:
        super().__init__()
        self.windows = windows
        self.task = task
        self.shuffle = shuffle
        self.seed = task.cfg.seed
        self.sizes = np.array([len(w) for w in windows], dtype=np.int64)
        self.epoch = 1

    def __getitem__(self, index: int) -> dict:
        return {"id": index, "window": self.windows[index]}

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return False  # the order is reshuffled every epoch

    def collater(self, samples: list) -> dict:
        if not samples:
            return {}
        d = self.task.dictionary
        batch = qa.collate_windows(
            [s["window"] for s in samples], bos=d.bos(), eos=d.eos(), pad=d.pad(), layout=self.task.layout
        )
        net_input = {"src_tokens": batch.tokens, "src_lengths": batch.tokens.ne(d.pad()).sum(1)}
        if batch.segment_labels is not None:
            net_input["segment_labels"] = batch.segment_labels
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": len(samples),
            "ntokens": int(batch.tokens.ne(d.pad()).sum()),
            "net_input": net_input,
            "target": torch.stack([batch.starts, batch.ends], dim=1),  # (B, 2)
            "candidates": batch.candidates,  # (B, T)
        }


@register_task("roberta_ext_extractive_qa", dataclass=ExtractiveQAConfig)
class ExtractiveQATask(FairseqTask):
    """Fine-tune any plugin encoder to answer questions by pointing at a span of the context."""

    cfg: ExtractiveQAConfig

    def __init__(self, cfg: ExtractiveQAConfig, dictionary: Dictionary, tokenizer: Any) -> None:
        super().__init__(cfg)
        self.dictionary = dictionary
        self.mask_idx = dictionary.add_symbol("<mask>")  # as in pretraining: the embedding has its row
        self.tokenizer = tokenizer
        self._layout: Optional[qa.PairLayout] = None

    @classmethod
    def setup_task(cls, cfg: ExtractiveQAConfig, **kwargs: Any) -> "ExtractiveQATask":
        data = data_folders(cfg.data)[0]
        dict_path = os.path.join(data, "dict.txt")
        dictionary = load_dictionary(dict_path, task=cls, needs="the pretrained model's dict.txt and SPLIT.json files")
        tokenizer = qa.load_tokenizer(data, encoder_json=cfg.bpe_encoder_json, vocab_bpe=cfg.bpe_vocab)
        if len(tokenizer.dictionary) != len(dictionary) + 1:
            raise ValueError(f"{dict_path!r} reads differently for fairseq and for the tokenizer")
        return cls(cfg, dictionary, tokenizer)

    @property
    def layout(self) -> qa.PairLayout:
        if self._layout is None:
            raise RuntimeError("the pair layout is known once the model is built (task.build_model)")
        return self._layout

    def build_model(self, cfg: Any, from_checkpoint: bool = False) -> Any:
        model = super().build_model(cfg, from_checkpoint)
        if not hasattr(model, "register_token_head"):
            raise TypeError(
                f"--task roberta_ext_extractive_qa needs a model of this plugin (token heads); "
                f"got {type(model).__name__}"
            )
        model.register_token_head(self.cfg.qa_head_name, 2)
        self._layout = qa.pair_layout(model.cfg)
        logger.info(f"QA head {self.cfg.qa_head_name!r}; pair layout: {self._layout}")
        return model

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> None:
        data = data_folders(self.cfg.data)[0]
        path = os.path.join(data, f"{split}.json")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"dataset not found: {split} ({path})")
        examples = qa.load_examples(path)
        windows = qa.prepare_windows(
            examples,
            self.tokenizer.encode,
            max_positions=self.cfg.max_positions,
            stride=self.cfg.doc_stride,
            max_question_tokens=self.cfg.max_question_tokens,
        )
        answered = sum(w.start >= 0 for w in windows)
        logger.info(f"{split}: {len(examples)} questions -> {len(windows)} windows ({answered} holding the answer)")
        self.datasets[split] = QAWindowDataset(windows, self, shuffle=split == "train")

    @property
    def source_dictionary(self) -> Dictionary:
        return self.dictionary

    @property
    def target_dictionary(self) -> Dictionary:
        return self.dictionary

    def max_positions(self) -> int:
        return self.cfg.max_positions


@dataclass
class ExtractiveQALossConfig(FairseqDataclass):
    qa_head_name: str = II("task.qa_head_name")


@register_criterion("roberta_ext_extractive_qa", dataclass=ExtractiveQALossConfig)
class ExtractiveQACriterion(FairseqCriterion):
    """Mean of the start and end cross-entropies per window, logged in bits like fairseq's
    classification criteria, with ``start_acc``, ``end_acc`` and ``span_acc`` (both right), in
    percent of windows."""

    def __init__(self, cfg: ExtractiveQALossConfig, task: Any) -> None:
        super().__init__(task)
        self.head = cfg.qa_head_name

    def forward(self, model: Any, sample: dict, reduce: bool = True):
        if self.head not in model.token_heads:
            raise KeyError(f"the model has no token head {self.head!r} (token heads: {sorted(model.token_heads)})")
        logits, _ = model(**sample["net_input"], features_only=True, token_head_name=self.head)  # (B, T, 2)
        target = sample["target"]
        batch = qa.QABatch(
            sample["net_input"]["src_tokens"], None, sample["candidates"], target[:, 0], target[:, 1], []
        )
        parts = qa.qa_loss(logits, batch)
        size = target.size(0)
        logging_output = {
            "loss": parts.loss.detach(),
            "start_correct": parts.start_correct,
            "end_correct": parts.end_correct,
            "span_correct": parts.span_correct,
            "ntokens": sample["ntokens"],
            "nsentences": size,
            "sample_size": size,
        }
        return parts.loss, size, logging_output

    @staticmethod
    def reduce_metrics(logging_outputs: list) -> None:
        def total(key: str) -> float:
            return float(sum(log.get(key, 0) for log in logging_outputs))

        windows = total("sample_size")
        metrics.log_scalar("loss", total("loss") / max(windows, 1) / math.log(2), windows, round=3)
        for key in ("start", "end", "span"):
            metrics.log_scalar(f"{key}_acc", 100 * total(f"{key}_correct") / max(windows, 1), windows, round=2)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
