"""BERT/ALBERT pretraining: masked LM plus a sentence-level objective, as a fairseq task and criterion.

``--task roberta_ext_sentence_pair_mlm --criterion roberta_ext_sentence_pair_mlm
--sentence-objective {nsp,sop,none}``.

**Data.** ``fairseq-preprocess --only-source`` output of a corpus with one sentence per line and
documents separated by empty lines. How pairs, labels, truncation and masking are made is
:mod:`roberta_ext.data.sentence_pairs` (no fairseq); :class:`SentencePairDataset` gives it
fairseq's dataset protocol.

**Criterion.** Masked-LM cross-entropy on the masked positions (the LM head projects only
those) plus the cross-entropy of the sentence head (``next_sentence`` or ``sentence_order``,
registered by the task's ``build_model``), from one encoder pass. ``sample_size`` is the number
of masked tokens (fairseq's ``masked_lm`` convention), so the summed sentence loss is scaled by
``masked tokens / sentences``: the gradient is that of ``mean MLM loss + weight * mean sentence
loss``, BERT's objective. Logged in bits: ``mlm_loss``, ``sentence_loss``, ``loss`` (their
weighted sum), ``sentence_accuracy`` (%), ``ppl``.
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from fairseq.tasks import register_task
from omegaconf import II, MISSING

from ..data.masking import BatchMasker
from ..data.sentence_pairs import OBJECTIVES, SentencePairs
from ..data.word_starts import WORD_BOUNDARY_STYLES, gpt2_word_starts, piece_word_starts
from ..families.albert import SENTENCE_ORDER_HEAD
from ..families.bert import NEXT_SENTENCE_HEAD
from .datasets import SizedDataset
from .dictionaries import data_folders, load_dictionary
from .tasks import PREPROCESSED, MaskedLMTaskBase

logger = logging.getLogger(__name__)

OBJECTIVE_CHOICES = ChoiceEnum(list(OBJECTIVES))
WORD_BOUNDARY_CHOICES = ChoiceEnum(list(WORD_BOUNDARY_STYLES))
SENTENCE_HEADS = {"nsp": NEXT_SENTENCE_HEAD, "sop": SENTENCE_ORDER_HEAD}
"""The classification head each objective trains (none for ``none``)."""


class SentencePairDataset(SentencePairs, SizedDataset):
    """:class:`~roberta_ext.data.sentence_pairs.SentencePairs` as a fairseq dataset: its sizes,
    examples and collater, with :class:`SizedDataset`'s seeded shuffle-then-sort order."""

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return True  # sizes never change; the epoch reaches __getitem__ and the collater through set_epoch


@dataclass
class SentencePairMLMConfig(FairseqDataclass):
    data: str = field(
        default=MISSING,
        metadata={
            "help": "fairseq-preprocess output of one sentence per line, documents separated by empty lines; "
            "colon-separated directories are used round-robin by epoch"
        },
    )
    sentence_objective: OBJECTIVE_CHOICES = field(  # type: ignore[valid-type]  # fairseq's ChoiceEnum is a runtime Enum factory
        default="nsp",
        metadata={
            "help": "nsp: next-sentence prediction (BERT); sop: sentence-order prediction (ALBERT); none: MLM only"
        },
    )
    tokens_per_sample: int = field(default=512, metadata={"help": "longest example, <s> and both </s> included"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "fraction of examples aiming at a shorter length"})
    mask_prob: float = field(default=0.15, metadata={"help": "fraction of tokens (or words) chosen as targets"})
    leave_unmasked_prob: float = field(default=0.1, metadata={"help": "of the targets: fraction left unchanged"})
    random_token_prob: float = field(default=0.1, metadata={"help": "of the targets: fraction replaced at random"})
    freq_weighted_replacement: bool = field(default=False, metadata={"help": "random replacements follow token counts"})
    mask_whole_words: bool = field(default=False, metadata={"help": "choose whole words (needs --word-boundaries)"})
    word_boundaries: Optional[WORD_BOUNDARY_CHOICES] = field(  # type: ignore[valid-type]  # fairseq's ChoiceEnum is a runtime Enum factory
        default=None,
        metadata={
            "help": "how tokens mark words, for --mask-whole-words: wordpiece ('##' continues a word), sentencepiece "
            "('▁' starts one), gpt2 (needs DATA/encoder.json and DATA/vocab.bpe)"
        },
    )
    # fairseq reuses the data loader across epochs by default; with --num-workers > 0 its
    # persistent workers would keep their copy of epoch 1 and repeat epoch 1's pairs and masks.
    reuse_dataloader: bool = field(
        default=False,
        metadata={
            "help": "reuse the data loader (and its worker processes) across epochs; off, so workers see the epoch"
        },
    )
    seed: int = II("common.seed")


@register_task("roberta_ext_sentence_pair_mlm", dataclass=SentencePairMLMConfig)
class SentencePairMLMTask(MaskedLMTaskBase):
    """Masked-LM pretraining on sentence pairs with next-sentence (BERT) or sentence-order
    (ALBERT) prediction; see the module docstring."""

    cfg: SentencePairMLMConfig

    def __init__(self, cfg: SentencePairMLMConfig, dictionary: Dictionary) -> None:
        super().__init__(cfg)
        self.dictionary = dictionary
        self.mask_idx = dictionary.add_symbol("<mask>")

    @classmethod
    def setup_task(cls, cfg: SentencePairMLMConfig, **kwargs: Any) -> "SentencePairMLMTask":
        paths = data_folders(cfg.data)
        if cfg.tokens_per_sample < 5:
            raise ValueError(f"--tokens-per-sample must be at least 5 (<s> A </s> B </s>), got {cfg.tokens_per_sample}")
        if cfg.mask_whole_words and cfg.word_boundaries is None:
            raise ValueError(
                "--mask-whole-words needs --word-boundaries {wordpiece,sentencepiece,gpt2}: "
                "how the tokens of DATA mark the start of a word"
            )
        dictionary = load_dictionary(os.path.join(paths[0], "dict.txt"), task=cls, needs=PREPROCESSED)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary)

    def _masker(self, data_path: str) -> BatchMasker:
        cfg, d = self.cfg, self.dictionary
        word_starts = None
        if cfg.mask_whole_words:
            style = str(cfg.word_boundaries)
            if style == "gpt2":
                files = [os.path.join(data_path, name) for name in ("encoder.json", "vocab.bpe")]
                missing = [path for path in files if not os.path.isfile(path)]
                if missing:
                    raise FileNotFoundError(
                        f"--word-boundaries gpt2 reads GPT-2's BPE files from DATA: {', '.join(missing)} missing"
                    )
                word_starts = gpt2_word_starts(d, *files)
            else:
                word_starts = piece_word_starts(d, style)
        return self.batch_masker(word_starts)

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> None:
        paths = data_folders(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)]
        split_path = os.path.join(data_path, split)
        sentences = data_utils.load_indexed_dataset(split_path, self.source_dictionary, combine=combine)
        if sentences is None:
            raise FileNotFoundError(f"dataset not found: {split} ({split_path}.bin/.idx)")
        d = self.dictionary
        dataset = SentencePairDataset(
            sentences,
            sentences.sizes,
            objective=str(self.cfg.sentence_objective),
            tokens_per_sample=self.cfg.tokens_per_sample,
            bos=d.bos(),
            eos=d.eos(),
            pad=d.pad(),
            masker=self._masker(data_path),
            short_seq_prob=self.cfg.short_seq_prob,
            seed=self.cfg.seed,
        )
        chunks = dataset.chunks
        if len(dataset) == 0:
            raise ValueError(f"{split_path}: no sentence pairs could be made (no document has two tokens)")
        logger.info(
            f"{split_path}: {len(dataset)} examples from {len(chunks.doc_first_sentence)} documents, "
            f"mean length {float(dataset.sizes.mean()):.1f} tokens"
        )
        if chunks.skipped_sentences:
            logger.warning(
                f"{split_path}: {chunks.skipped_sentences} one-token sentences alone at the end of a "
                "document are in no example"
            )
        self.datasets[split] = dataset

    def build_model(self, cfg: Any, from_checkpoint: bool = False) -> Any:
        model = super().build_model(cfg, from_checkpoint)
        if not getattr(getattr(model, "cfg", None), "type_vocab_size", 0):
            logger.warning(
                "the model has no segment embeddings (type_vocab_size=0): segment_labels are ignored; "
                "use a bert_ext_* or albert_ext_* architecture, or --type-vocab-size 2"
            )
        head = SENTENCE_HEADS.get(str(self.cfg.sentence_objective))
        if head is not None:
            model.register_classification_head(head, num_classes=2)
        return model


@dataclass
class SentencePairMLMLossConfig(FairseqDataclass):
    sentence_loss_weight: float = field(
        default=1.0, metadata={"help": "weight of the mean sentence loss next to the mean masked-LM loss"}
    )


@register_criterion("roberta_ext_sentence_pair_mlm", dataclass=SentencePairMLMLossConfig)
class SentencePairMLMLoss(FairseqCriterion):
    """Masked-LM + next-sentence or sentence-order cross-entropy; see the module docstring."""

    def __init__(self, cfg: SentencePairMLMLossConfig, task: Any) -> None:
        super().__init__(task)
        self.sentence_loss_weight = cfg.sentence_loss_weight
        self.head = SENTENCE_HEADS.get(str(getattr(task.cfg, "sentence_objective", "none")))

    def forward(self, model: Any, sample: dict[str, Any], reduce: bool = True):
        targets = sample["target"]
        masked = targets.ne(self.padding_idx)  # (B, T)
        masked_count = int(masked.sum())
        # One encoder pass feeds both heads: the LM head on masked positions, the sentence head
        # on the pooled first token.
        features, _ = model(**sample["net_input"], features_only=True)  # (B, T, C)
        lm_logits = model.encoder.lm_head(features, masked)  # (N, V)
        # A batch may draw no target (very short rows): it still takes part, with zero MLM loss.
        mlm_loss = (
            F.cross_entropy(lm_logits.float(), targets[masked], reduction="sum")
            if masked_count
            else lm_logits.sum() * 0.0
        )
        nsentences = sample["nsentences"]
        log: dict[str, Any] = {
            "ntokens": sample["ntokens"],
            "nsentences": nsentences,
            "sample_size": masked_count,
            "mlm_loss": mlm_loss.detach(),
        }
        loss = mlm_loss
        if self.head is not None:
            if self.head not in model.classification_heads:
                raise KeyError(
                    f"the model has no {self.head!r} head (heads: {sorted(model.classification_heads)}); "
                    "it is registered by --task roberta_ext_sentence_pair_mlm"
                )
            sentence_logits = model.classify(self.head, features)  # (B, 2)
            sentence_targets = sample["sentence_target"]
            sentence_loss = F.cross_entropy(sentence_logits.float(), sentence_targets, reduction="sum")
            # sample_size counts masked tokens; this scale makes the gradient that of the mean
            # sentence loss next to the mean MLM loss.
            loss = loss + self.sentence_loss_weight * sentence_loss * (max(masked_count, 1) / nsentences)
            log["sentence_loss"] = sentence_loss.detach()
            log["sentence_ncorrect"] = int((sentence_logits.argmax(dim=-1) == sentence_targets).sum())
            log["sentence_count"] = nsentences
        log["loss"] = loss.detach()
        return loss, masked_count, log

    @staticmethod
    def reduce_metrics(logging_outputs: list[dict[str, Any]]) -> None:
        def total(key: str) -> float:
            return sum(log.get(key, 0) for log in logging_outputs)

        sample_size = total("sample_size")
        metrics.log_scalar("loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_scalar("mlm_loss", total("mlm_loss") / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))
        sentences = total("sentence_count")
        if sentences:
            metrics.log_scalar("sentence_loss", total("sentence_loss") / sentences / math.log(2), sentences, round=3)
            metrics.log_scalar("sentence_accuracy", 100.0 * total("sentence_ncorrect") / sentences, sentences, round=1)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
