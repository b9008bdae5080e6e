"""fairseq tasks: ``roberta_ext_mlm`` (masked-LM pretraining) and ``roberta_ext_classification``.

``roberta_ext_mlm`` reads what ``fairseq-preprocess`` writes (``dict.txt`` + ``.bin``/``.idx``)
and cuts it into blocks exactly as fairseq's ``masked_lm`` does. The difference is where masking
happens: fairseq masks each sample in ``__getitem__`` with numpy; here the collater masks the
whole padded batch at once with :class:`~roberta_ext.data.masking.BatchMasker`, whose draws
depend only on (seed, epoch, sample index) — reproducible, fresh every epoch, and different on
every rank since ranks see different samples. SpanBERT span masking is one option away.
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np
import torch
from fairseq.data import (
    BaseWrapperDataset,
    Dictionary,
    FairseqDataset,
    PrependTokenDataset,
    SortDataset,
    TokenBlockDataset,
    data_utils,
)
from fairseq.data.shorten_dataset import maybe_shorten_dataset
from fairseq.dataclass import FairseqDataclass
from fairseq.tasks import FairseqTask, register_task
from fairseq.tasks.language_modeling import SAMPLE_BREAK_MODE_CHOICES, SHORTEN_METHOD_CHOICES
from fairseq.tasks.sentence_prediction import SentencePredictionConfig, SentencePredictionTask
from omegaconf import II, MISSING

from ..data.masking import BatchMasker, MaskingConfig
from ..data.word_starts import gpt2_word_starts
from .datasets import EveryExampleDataset
from .dictionaries import data_folders, load_dictionary

logger = logging.getLogger(__name__)

PREPROCESSED = "fairseq-preprocess output: dict.txt and the splits' .bin/.idx"
"""What the data folder of a pretraining task holds."""


@dataclass
class RobertaExtMLMConfig(FairseqDataclass):
    data: str = field(
        default=MISSING,
        metadata={
            "help": "data directory (dict.txt + train/valid .bin/.idx); "
            "colon-separated directories are used round-robin by epoch"
        },
    )
    sample_break_mode: SAMPLE_BREAK_MODE_CHOICES = field(
        default="none",
        metadata={
            "help": "none: fill blocks of --tokens-per-sample; complete: break only at sentence "
            "ends; complete_doc: also respect documents; eos: one sentence per block"
        },
    )
    tokens_per_sample: int = field(default=512, metadata={"help": "tokens per block, <s> included"})
    mask_prob: float = field(default=0.15, metadata={"help": "fraction of tokens chosen as targets"})
    leave_unmasked_prob: float = field(default=0.1, metadata={"help": "of the targets: fraction left unchanged"})
    random_token_prob: float = field(default=0.1, metadata={"help": "of the targets: fraction replaced at random"})
    freq_weighted_replacement: bool = field(default=False, metadata={"help": "random replacements follow token counts"})
    mask_whole_words: bool = field(default=False, metadata={"help": "choose whole words (GPT-2 BPE word starts)"})
    span_masking: bool = field(default=False, metadata={"help": "SpanBERT: geometric spans of whole words"})
    span_p: float = field(default=0.2, metadata={"help": "geometric parameter of span lengths"})
    span_max_words: int = field(default=10, metadata={"help": "longest span, in words"})
    bpe_encoder_json: Optional[str] = field(
        default=None, metadata={"help": "GPT-2 encoder.json, to find word starts (default: DATA/encoder.json)"}
    )
    bpe_vocab: Optional[str] = field(
        default=None, metadata={"help": "GPT-2 vocab.bpe, to find word starts (default: DATA/vocab.bpe)"}
    )
    pack_documents: bool = field(
        default=False,
        metadata={
            "help": "attend within each document: a block's lines (each ends with </s>) are packed back to back "
            "without padding and each is attended, and positioned, as a sequence of its own (ModernBERT's "
            "packing; with --sample-break-mode complete, whole documents; not with complete_doc)"
        },
    )
    shorten_method: SHORTEN_METHOD_CHOICES = field(default="none", metadata={"help": "shorten over-long sequences"})
    shorten_data_split_list: str = field(default="", metadata={"help": "splits to shorten (default: all)"})
    # fairseq reuses the data loader across epochs by default; with --num-workers > 0 its
    # persistent workers would keep their copy of epoch 1 and repeat epoch 1's masks.
    reuse_dataloader: bool = field(
        default=False,
        metadata={
            "help": "reuse the data loader (and its worker processes) across epochs; off, so workers see the epoch"
        },
    )
    seed: int = II("common.seed")


def document_starts(tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    """(B, T) True on the first token of each document after a row's first: the token after each
    ``</s>`` that is not padding (fairseq-preprocess ends every line with ``</s>``). Read from the
    tokens before masking, which may replace a ``</s>``.

    >>> document_starts(torch.tensor([[0, 5, 2, 7, 2, 8], [0, 6, 2, 1, 1, 1]]), eos=2, pad=1).int().tolist()
    [[0, 0, 0, 1, 0, 1], [0, 0, 0, 0, 0, 0]]
    """
    starts = torch.zeros_like(tokens, dtype=torch.bool)
    starts[:, 1:] = tokens[:, :-1].eq(eos) & tokens[:, 1:].ne(pad)
    return starts


class BatchMaskedLMDataset(BaseWrapperDataset):
    """Blocks of tokens in, masked-LM batches out; masking is done once per batch in the collater.
    With ``eos`` (``--pack-documents``), the batch tells the model where each document starts."""

    def __init__(self, dataset: Any, masker: BatchMasker, pad_idx: int, eos: int | None = None) -> None:
        super().__init__(dataset)
        self.masker = masker
        self.pad_idx = pad_idx
        self.eos = eos
        self.epoch = 1

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return True  # the epoch reaches the collater through set_epoch, as in fairseq's MaskTokensDataset

    def set_epoch(self, epoch: int, **unused: Any) -> None:
        super().set_epoch(epoch)
        self.epoch = epoch

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"id": index, "source": self.dataset[index]}

    # Batching looks at sizes. BaseWrapperDataset would pass batch_by_size down to the block
    # dataset, which cannot count tokens; this dataset can, so it batches itself.
    def num_tokens(self, index: int) -> int:
        return int(self.dataset.sizes[index])

    def num_tokens_vec(self, indices: np.ndarray) -> np.ndarray:
        return self.dataset.sizes[indices]

    def size(self, index: int) -> int:
        return int(self.dataset.sizes[index])

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        return FairseqDataset.batch_by_size(self, indices, max_tokens, max_sentences, required_batch_size_multiple)

    # The size filter must see the sizes the model will see, <s> included. Passed down, it would
    # reach TokenBlockDataset, whose blocks are one shorter: a block of exactly
    # --tokens-per-sample tokens (complete/eos break modes) would pass and overflow the
    # position table by one.
    def filter_indices_by_size(self, indices: np.ndarray, max_sizes: Any) -> tuple[np.ndarray, list[int]]:
        return FairseqDataset.filter_indices_by_size(self, indices, max_sizes)

    def collater(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        if not samples:
            return {}
        ids = torch.tensor([s["id"] for s in samples], dtype=torch.long)
        tokens = data_utils.collate_tokens([s["source"] for s in samples], self.pad_idx)  # (B, T), right-padded
        lengths = tokens.ne(self.pad_idx).sum(dim=1)
        net_input = {"src_lengths": lengths}
        if self.eos is not None:
            net_input["document_starts"] = document_starts(tokens, self.eos, self.pad_idx)
        src_tokens, target = self.masker(tokens, ids, self.epoch)
        return {
            "id": ids,
            "nsentences": len(samples),
            "ntokens": int(lengths.sum()),
            "net_input": {"src_tokens": src_tokens, **net_input},
            "target": target,
        }


class MaskedLMTaskBase(FairseqTask):
    """What the masked-LM tasks share: one dictionary in and out, the epoch handed to the model,
    blocks of at most ``cfg.tokens_per_sample`` tokens, one way to build the batch masker."""

    dictionary: Dictionary
    mask_idx: int

    @property
    def source_dictionary(self) -> Dictionary:
        return self.dictionary

    @property
    def target_dictionary(self) -> Dictionary:
        return self.dictionary

    def begin_epoch(self, epoch: int, model: Any) -> None:
        model.set_epoch(epoch)

    def max_positions(self) -> int:
        return self.cfg.tokens_per_sample

    def batch_masker(self, word_starts: Any, **masking: Any) -> BatchMasker:
        """The masker of this task's batches from the masking options every masked-LM task has
        (``--mask-prob``, ``--leave-unmasked-prob``, ...) and ``masking``'s own (span masking):
        specials, ``<mask>`` and fairseq's ``madeupword`` fillers are never masked or drawn."""
        cfg, d = self.cfg, self.dictionary
        specials = [
            *range(d.nspecial),
            self.mask_idx,
            *(i for i, s in enumerate(d.symbols) if s.startswith("madeupword")),
        ]
        return BatchMasker(
            MaskingConfig(
                mask_prob=cfg.mask_prob,
                leave_unmasked_prob=cfg.leave_unmasked_prob,
                random_token_prob=cfg.random_token_prob,
                freq_weighted_replacement=cfg.freq_weighted_replacement,
                mask_whole_words=cfg.mask_whole_words,
                **masking,
            ),
            vocab_size=len(d),
            mask_idx=self.mask_idx,
            pad_idx=d.pad(),
            special_ids=specials,
            word_starts=word_starts,
            replacement_weights=torch.tensor(d.count, dtype=torch.float) if cfg.freq_weighted_replacement else None,
            seed=cfg.seed,
        )


@register_task("roberta_ext_mlm", dataclass=RobertaExtMLMConfig)
class RobertaExtMLMTask(MaskedLMTaskBase):
    """Masked-LM pretraining (RoBERTa; SpanBERT spans with ``--span-masking``)."""

    cfg: RobertaExtMLMConfig

    def __init__(self, cfg: RobertaExtMLMConfig, dictionary: Dictionary) -> None:
        if getattr(cfg, "pack_documents", False) and getattr(cfg, "sample_break_mode", None) == "complete_doc":
            # complete_doc rows hold one document of several lines (documents end at an empty
            # line), and --pack-documents would attend each line of it alone.
            raise ValueError(
                "--pack-documents attends each line of a row (ending with </s>) as a document of its own, but "
                "--sample-break-mode complete_doc makes each row one document of several lines, which it would "
                "split at every line: write one document per line and use --sample-break-mode complete"
            )
        super().__init__(cfg)
        self.dictionary = dictionary
        self.mask_idx = dictionary.add_symbol("<mask>")

    @classmethod
    def setup_task(cls, cfg: RobertaExtMLMConfig, **kwargs: Any) -> "RobertaExtMLMTask":
        paths = data_folders(cfg.data)
        dictionary = load_dictionary(os.path.join(paths[0], "dict.txt"), task=cls, needs=PREPROCESSED)
        logger.info(f"dictionary: {len(dictionary)} types")
        return cls(cfg, dictionary)

    def _masker(self, data_path: str) -> BatchMasker:
        cfg = self.cfg
        word_starts = None
        if cfg.mask_whole_words or cfg.span_masking:
            encoder_json = cfg.bpe_encoder_json or os.path.join(data_path, "encoder.json")
            vocab_bpe = cfg.bpe_vocab or os.path.join(data_path, "vocab.bpe")
            for path, option in ((encoder_json, "--bpe-encoder-json"), (vocab_bpe, "--bpe-vocab")):
                if not os.path.isfile(path):
                    raise FileNotFoundError(
                        f"whole-word and span masking need the GPT-2 BPE files to find word "
                        f"starts: {path!r} does not exist (pass {option})"
                    )
            word_starts = gpt2_word_starts(self.dictionary, encoder_json, vocab_bpe)
        return self.batch_masker(
            word_starts, span_masking=cfg.span_masking, span_p=cfg.span_p, span_max_words=cfg.span_max_words
        )

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> None:
        paths = data_folders(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)]
        split_path = os.path.join(data_path, split)
        dataset = data_utils.load_indexed_dataset(split_path, self.source_dictionary, combine=combine)
        if dataset is None:
            raise FileNotFoundError(f"dataset not found: {split} ({split_path}.bin/.idx)")
        dataset = maybe_shorten_dataset(
            dataset,
            split,
            self.cfg.shorten_data_split_list,
            self.cfg.shorten_method,
            self.cfg.tokens_per_sample,
            self.cfg.seed,
        )
        dataset = TokenBlockDataset(
            dataset,
            dataset.sizes,
            self.cfg.tokens_per_sample - 1,  # one less for <s>
            pad=self.dictionary.pad(),
            eos=self.dictionary.eos(),
            break_mode=self.cfg.sample_break_mode,
        )
        logger.info(f"loaded {len(dataset)} blocks from: {split_path}")
        dataset = PrependTokenDataset(dataset, self.dictionary.bos())
        eos = self.dictionary.eos() if self.cfg.pack_documents else None
        masked = BatchMaskedLMDataset(dataset, self._masker(data_path), self.dictionary.pad(), eos)
        with data_utils.numpy_seed(self.cfg.seed + epoch):
            shuffle = np.random.permutation(len(dataset))
        self.datasets[split] = SortDataset(masked, sort_order=[shuffle, dataset.sizes])


@dataclass
class RobertaExtClassificationConfig(SentencePredictionConfig):
    """fairseq's ``sentence_prediction`` options, unchanged."""


@register_task("roberta_ext_classification", dataclass=RobertaExtClassificationConfig)
class RobertaExtClassificationTask(SentencePredictionTask):
    """Sentence and sentence-pair classification or regression on fairseq's ``sentence_prediction``
    layout (``input0/``, optional ``input1/``, ``label/`` or ``label.{split}`` for regression).

    The data pipeline is fairseq's own; what this adds is the ``<mask>`` index that hubs need
    (fairseq's task has none, so fairseq's hub cannot ``fill_mask`` a fine-tuned model), and
    batches that hold every example: fairseq 0.12 drops a last batch whose size is not a
    multiple of ``--required-batch-size-multiple`` (fairseq#5036), so its validation accuracy
    leaves out up to 7 examples (:class:`~roberta_ext.fairseq_plugin.datasets.EveryExampleDataset`)."""

    def __init__(self, cfg: Any, data_dictionary: Dictionary, label_dictionary: Dictionary) -> None:
        super().__init__(cfg, data_dictionary, label_dictionary)
        self.mask_idx = data_dictionary.index("<mask>")

    @classmethod
    def load_dictionary(cls, filename: str) -> Dictionary:
        """``input0/dict.txt`` or ``label/dict.txt`` with ``<mask>`` added, as fairseq's task
        loads them (its ``setup_task`` calls this), through the plugin's one loader."""
        folder = os.path.basename(os.path.dirname(filename))
        needs = CLASSIFICATION_FOLDERS.get(folder, f"{folder}/")
        needs += ", written by fairseq-preprocess --only-source (or roberta-ext glue-preprocess)"
        needs += "; see docs/fine-tuning.md"
        return load_dictionary(filename, task=cls, needs=needs, mask=True)

    def load_dataset(self, split: str, combine: bool = False, **kwargs: Any) -> Any:
        super().load_dataset(split, combine=combine, **kwargs)
        self.datasets[split] = EveryExampleDataset(self.datasets[split])
        return self.datasets[split]


CLASSIFICATION_FOLDERS = {
    "input0": "input0/ with the binarized (first) sentences",
    "label": "label/ with the binarized labels (for regression, pass --regression-target)",
}
"""What the folders of a ``sentence_prediction`` data folder hold whose dictionaries are read."""
