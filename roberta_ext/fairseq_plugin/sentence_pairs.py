"""BERT/ALBERT pretraining: masked LM plus a sentence-level objective, as a fairseq task and criterion.

``--task sentence_pair_mlm --criterion sentence_pair_mlm --sentence-objective {nsp,sop,none}``.

**Data.** ``fairseq-preprocess --only-source`` output of a corpus with one sentence per line and
documents separated by empty lines. (fairseq binarizes an empty line as a lone ``</s>``: an
item of size 1. Any non-empty line has size >= 2, its tokens plus ``</s>``, so size 1 is the
document break.)

**Examples** (BERT's ``create_pretraining_data.py``, ALBERT's for SOP). Each document is cut
once, at load time, into *chunks* of consecutive sentences: sentences are added until the
chunk holds at least ``--tokens-per-sample - 3`` tokens or the document ends; with probability
``--short-seq-prob`` a chunk aims at a shorter, uniformly drawn length instead (so the model
also sees short inputs, as BERT does). Each chunk is one example. Every epoch, an example is
split anew into segment A (the first 1..n-1 sentences of the chunk, drawn uniformly) and
segment B (the rest); a chunk of one long sentence is split inside it, at a uniform token.
Then, with probability 0.5:

* ``nsp``: B is replaced by text of a *different*, uniformly drawn document: consecutive
  sentences from a uniformly drawn one of its sentences that are followed by enough text to
  replace B (label 1; 0 = B follows A). Only a document shorter than B gives a shorter B;
* ``sop``: A and B are swapped (label 1; 0 = in order). A and B always come from one document;
* ``none``: nothing (label 0, no sentence head): MLM with segments only.

The pair is then cut to the chunk's length (at most ``--tokens-per-sample - 3``) by trimming
the longer segment, one token at a time (B on ties), from its front or its back (one coin per
segment) — BERT's ``truncate_seq_pair`` — and laid out as ``<s> A </s> B </s>``: the fairseq
dictionary's ``<s>``/``</s>`` play BERT's ``[CLS]``/``[SEP]``. ``segment_labels`` are 0 on
``<s> A </s>`` and 1 on ``B </s>``. An example therefore has the same length every epoch,
``min(chunk tokens, tokens_per_sample - 3) + 3`` — the size batching uses — or less in the
one case above.

**Randomness** is counter based, as in :mod:`roberta_ext.data.masking`: every draw is a hash of
``(seed, epoch, example index, stream)``, so an example does not depend on batching, workers,
ranks or generator state; each epoch differs. Chunking uses epoch 0 (fixed for a run).
Masking (80/10/10, optionally whole words) is done per batch in the collater by
:class:`~roberta_ext.data.masking.BatchMasker`, never on ``<s>``/``</s>``.

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

import numpy as np
import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.criterions import FairseqCriterion, register_criterion
from fairseq.data import Dictionary, data_utils
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.logging import metrics
from fairseq.tasks import register_task
from omegaconf import II, MISSING

from ..data.masking import BatchMasker, MaskingConfig, reference_random_bits
from ..modeling.albert import SENTENCE_ORDER_HEAD
from ..modeling.bert import NEXT_SENTENCE_HEAD
from .datasets import SizedDataset
from .tasks import MaskedLMTaskBase, gpt2_word_starts

logger = logging.getLogger(__name__)

OBJECTIVE_CHOICES = ChoiceEnum(["nsp", "sop", "none"])
WORD_BOUNDARY_CHOICES = ChoiceEnum(["wordpiece", "sentencepiece", "gpt2"])
SENTENCE_HEADS = {"nsp": NEXT_SENTENCE_HEAD, "sop": SENTENCE_ORDER_HEAD}
"""The classification head each objective trains (none for ``none``)."""

WORDPIECE_CONTINUATION = "##"
SPM_WORD_START = "\u2581"  # "▁"

# Random streams of this module (BatchMasker uses 1..7 under the same keys; these never collide).
_STREAM_CHUNK_SHORT = 16  # load time (epoch 0), per document and chunk number: short chunk?
_STREAM_CHUNK_LENGTH = 17  # load time: the short chunk's target length
_STREAM_SPLIT = 18  # per example: where A ends
_STREAM_LABEL = 19  # per example: positive or negative
_STREAM_OTHER_DOC = 20  # per example (nsp): which other document
_STREAM_OTHER_START = 21  # per example (nsp): which sentence of it
_STREAM_TRIM_A = 22  # per example: trim A from the front or the back
_STREAM_TRIM_B = 23  # per example: trim B from the front or the back


def _uniform(seed: int, epoch: int, index: int, stream: int, counter: int = 0) -> float:
    """A uniform in [0, 1) from the top 53 of the counter-based random bits."""
    # Python ints: fairseq hands out numpy int64 indices, whose arithmetic would overflow.
    return (reference_random_bits(int(seed), int(epoch), int(index), stream, int(counter)) >> 11) * 2.0**-53


def _below(n: int, u: float) -> int:
    """An integer uniform in ``[0, n)`` from the uniform ``u``."""
    return min(int(u * n), n - 1)


def truncated_lengths(len_a: int, len_b: int, limit: int) -> tuple[int, int]:
    """Lengths of A and B after BERT's ``truncate_seq_pair``: while the pair is longer than
    ``limit``, drop a token of the longer segment (of B when they are equal). Closed form.

    >>> truncated_lengths(10, 3, 8), truncated_lengths(5, 5, 7), truncated_lengths(2, 9, 20)
    ((5, 3), (4, 3), (2, 9))
    """
    excess = len_a + len_b - limit
    if excess <= 0:
        return len_a, len_b
    if len_a - excess >= len_b:  # only A is trimmed, down to at least B's length
        return len_a - excess, len_b
    if len_b - excess >= len_a - 1:  # only B is trimmed (on ties B goes first, so down to A - 1)
        return len_a, len_b - excess
    # Both: trimmed to equal lengths, then alternately, B first.
    return (limit + 1) // 2, limit // 2


@dataclass(frozen=True)
class PairChunks:
    """Where each example's sentences are: numpy arrays over examples and over documents."""

    first_sentence: np.ndarray
    """(N,) int64: dataset index of the example's first sentence."""
    num_sentences: np.ndarray
    """(N,) int64: its number of consecutive sentences."""
    num_tokens: np.ndarray
    """(N,) int64: their tokens, ``</s>`` excluded."""
    document: np.ndarray
    """(N,) int64: the example's document number."""
    doc_first_sentence: np.ndarray
    """(D,) int64: dataset index of each document's first sentence."""
    doc_num_sentences: np.ndarray
    """(D,) int64: sentences of each document."""
    skipped_sentences: int
    """Sentences in no example: one-token sentences alone in their document or at its end."""


def _chunk_goal(seed: int, doc: int, chunk_number: int, max_tokens: int, short_seq_prob: float) -> int:
    """Tokens the chunk aims at: ``max_tokens``, or with ``short_seq_prob`` a uniform length in
    ``[2, max_tokens]`` (BERT's ``short_seq_prob``). Fixed per seed: epoch 0 of the streams."""
    if _uniform(seed, 0, doc, _STREAM_CHUNK_SHORT, chunk_number) < short_seq_prob:
        return 2 + _below(max_tokens - 1, _uniform(seed, 0, doc, _STREAM_CHUNK_LENGTH, chunk_number))
    return max_tokens


def build_pair_chunks(sizes: np.ndarray, *, max_tokens: int, short_seq_prob: float, seed: int) -> PairChunks:
    """Cut documents into examples; ``sizes`` are fairseq's item sizes (tokens + ``</s>``; 1 =
    empty line = document break). ``max_tokens`` is the budget of A + B (tokens per sample - 3).

    >>> c = build_pair_chunks(np.array([3, 4, 1, 5, 2, 2]), max_tokens=6, short_seq_prob=0.0, seed=1)
    >>> c.first_sentence.tolist(), c.num_sentences.tolist(), c.num_tokens.tolist(), c.document.tolist()
    ([0, 3], [2, 3], [5, 6], [0, 1])
    """
    if max_tokens < 2:
        raise ValueError(f"need room for two tokens besides <s> </s> </s>, got a budget of {max_tokens}")
    sizes = np.asarray(sizes, dtype=np.int64)
    lengths = sizes - 1  # tokens without </s>
    breaks = np.flatnonzero(sizes <= 1)
    bounds = np.concatenate([[-1], breaks, [len(sizes)]])
    doc_first = bounds[:-1] + 1
    doc_count = bounds[1:] - doc_first
    keep = doc_count > 0
    doc_first, doc_count = doc_first[keep], doc_count[keep]

    first, count, tokens, document = [], [], [], []
    skipped = 0
    for doc, (start, n) in enumerate(zip(doc_first.tolist(), doc_count.tolist())):
        chunk_number = 0
        goal = _chunk_goal(seed, doc, chunk_number, max_tokens, short_seq_prob)
        chunk_start, chunk_tokens = start, 0
        for sentence in range(start, start + n):
            chunk_tokens += int(lengths[sentence])
            if chunk_tokens < goal and sentence < start + n - 1:
                continue
            sentences = sentence - chunk_start + 1
            if sentences >= 2 or chunk_tokens >= 2:  # a pair needs two sentences or two tokens to split
                first.append(chunk_start)
                count.append(sentences)
                tokens.append(chunk_tokens)
                document.append(doc)
            else:
                skipped += sentences
            chunk_number += 1
            goal = _chunk_goal(seed, doc, chunk_number, max_tokens, short_seq_prob)
            chunk_start, chunk_tokens = sentence + 1, 0
    as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    return PairChunks(as_array(first), as_array(count), as_array(tokens), as_array(document),
                      doc_first.astype(np.int64), doc_count.astype(np.int64), skipped)


class SentencePairDataset(SizedDataset):
    """Sentence pairs ``<s> A </s> B </s>`` with segment ids and a sentence label, masked per batch.

    ``sentences`` is a fairseq indexed dataset of sentences (each ending in ``</s>``) with
    documents separated by items of size 1; see the module docstring for how pairs are made.
    ``__getitem__`` gives the uncorrupted pair; the collater masks the batch with ``masker``
    (or leaves it as is when ``masker`` is None).
    """

    def __init__(
        self,
        sentences: Any,
        sizes: np.ndarray,
        *,
        objective: str,
        tokens_per_sample: int,
        bos: int,
        eos: int,
        pad: int,
        masker: Optional[BatchMasker],
        short_seq_prob: float = 0.1,
        seed: int = 1,
    ) -> None:
        super().__init__()
        if objective not in ("nsp", "sop", "none"):
            raise ValueError(f"objective must be 'nsp', 'sop' or 'none', got {objective!r}")
        if not 0.0 <= short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob must be in [0, 1], got {short_seq_prob}")
        self.sentences = sentences
        self.objective = objective
        self.tokens_per_sample = tokens_per_sample
        self.bos, self.eos, self.pad = bos, eos, pad
        self.masker = masker
        self.seed = seed
        self.epoch = 1
        self.chunks = build_pair_chunks(sizes, max_tokens=tokens_per_sample - 3, short_seq_prob=short_seq_prob,
                                        seed=seed)
        if objective == "nsp" and len(self.chunks.doc_first_sentence) < 2:
            raise ValueError("next-sentence prediction needs at least two documents (separated by an empty line); "
                             f"found {len(self.chunks.doc_first_sentence)}")
        self._lengths = np.asarray(sizes, dtype=np.int64) - 1  # tokens of each sentence, </s> excluded
        self.sizes = np.minimum(self.chunks.num_tokens, tokens_per_sample - 3) + 3

    # -- fairseq's dataset protocol (sizes and order: SizedDataset) ---------------------------

    @property
    def can_reuse_epoch_itr_across_epochs(self) -> bool:
        return True  # sizes never change; the epoch reaches __getitem__ and the collater through set_epoch

    # -- examples ----------------------------------------------------------------------------

    def _tokens(self, first: int, count: int) -> torch.Tensor:
        """Sentences ``first .. first + count - 1`` concatenated, without their ``</s>``."""
        return torch.cat([self.sentences[i][:-1] for i in range(first, first + count)])

    def pair(self, index: int, epoch: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Segments A and B (token ids, no specials) and the label of example ``index``."""
        epoch = self.epoch if epoch is None else epoch
        c = self.chunks
        first, count, doc = int(c.first_sentence[index]), int(c.num_sentences[index]), int(c.document[index])
        draw = lambda stream: _uniform(self.seed, epoch, index, stream)  # noqa: E731
        if count >= 2:  # split between sentences: A = the first 1..count-1
            a_sentences = 1 + _below(count - 1, draw(_STREAM_SPLIT))
            a = self._tokens(first, a_sentences)
            b = self._tokens(first + a_sentences, count - a_sentences)
        else:  # one long sentence: split inside it
            tokens = self._tokens(first, 1)
            cut = 1 + _below(len(tokens) - 1, draw(_STREAM_SPLIT))
            a, b = tokens[:cut], tokens[cut:]
        limit = min(len(a) + len(b), self.tokens_per_sample - 3)

        label = 0
        if self.objective != "none" and draw(_STREAM_LABEL) < 0.5:
            label = 1
            if self.objective == "sop":
                a, b = b, a
            else:  # nsp: text from another document
                documents = len(c.doc_first_sentence)
                other = (doc + 1 + _below(documents - 1, draw(_STREAM_OTHER_DOC))) % documents
                first_other = int(c.doc_first_sentence[other])
                end = first_other + int(c.doc_num_sentences[other])
                # Start at a uniformly drawn sentence among those followed by enough text to
                # replace B (all of the document if it is shorter than B).
                remaining = np.cumsum(self._lengths[first_other:end][::-1])[::-1]  # tokens from each sentence on
                starts = max(1, int((remaining >= len(b)).sum()))
                sentence = first_other + _below(starts, draw(_STREAM_OTHER_START))
                pieces, have = [], 0
                while sentence < end and have < len(b):
                    pieces.append(self.sentences[sentence][:-1])
                    have += len(pieces[-1])
                    sentence += 1
                b = torch.cat(pieces)

        len_a, len_b = truncated_lengths(len(a), len(b), limit)
        a = a[len(a) - len_a:] if draw(_STREAM_TRIM_A) < 0.5 else a[:len_a]
        b = b[len(b) - len_b:] if draw(_STREAM_TRIM_B) < 0.5 else b[:len_b]
        return a, b, label

    def __getitem__(self, index: int) -> dict[str, Any]:
        a, b, label = self.pair(index)
        bos, eos = a.new_tensor([self.bos]), a.new_tensor([self.eos])
        source = torch.cat([bos, a, eos, b, eos])  # (T,) = <s> A </s> B </s>
        segments = torch.cat([torch.zeros(len(a) + 2, dtype=torch.long), torch.ones(len(b) + 1, dtype=torch.long)])
        return {"id": int(index), "source": source, "segments": segments, "label": label}

    def collater(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        if not samples:
            return {}
        ids = torch.tensor([s["id"] for s in samples], dtype=torch.long)
        tokens = data_utils.collate_tokens([s["source"] for s in samples], self.pad)  # (B, T), right-padded
        segments = data_utils.collate_tokens([s["segments"] for s in samples], 0)  # (B, T)
        lengths = tokens.ne(self.pad).sum(dim=1)
        if self.masker is not None:
            src_tokens, target = self.masker(tokens, ids, self.epoch)
        else:
            src_tokens, target = tokens, torch.full_like(tokens, self.pad)
        return {
            "id": ids,
            "nsentences": len(samples),
            "ntokens": int(lengths.sum()),
            "net_input": {"src_tokens": src_tokens, "segment_labels": segments, "src_lengths": lengths},
            "target": target,  # (B, T): the original token at masked positions, pad elsewhere
            "sentence_target": torch.tensor([s["label"] for s in samples], dtype=torch.long),  # (B,)
        }


def piece_word_starts(dictionary: Dictionary, style: str) -> torch.Tensor:
    """Bool per dictionary index: does it start a word? ``wordpiece``: unless it begins with
    ``##``; ``sentencepiece``: if it begins with ``▁``. Special symbols count as starts (the
    masker never masks them anyway, and words never cross them)."""
    def starts(index: int) -> bool:
        symbol = dictionary[index]
        if index < dictionary.nspecial:
            return True
        if style == "wordpiece":
            return not symbol.startswith(WORDPIECE_CONTINUATION)
        return symbol.startswith(SPM_WORD_START)

    return torch.tensor([starts(i) for i in range(len(dictionary))], dtype=torch.bool)


@dataclass
class SentencePairMLMConfig(FairseqDataclass):
    data: str = field(default=MISSING, metadata={
        "help": "fairseq-preprocess output of one sentence per line, documents separated by empty lines; "
                "colon-separated directories are used round-robin by epoch"})
    sentence_objective: OBJECTIVE_CHOICES = field(default="nsp", metadata={
        "help": "nsp: next-sentence prediction (BERT); sop: sentence-order prediction (ALBERT); none: MLM only"})
    tokens_per_sample: int = field(default=512, metadata={"help": "longest example, <s> and both </s> included"})
    short_seq_prob: float = field(default=0.1, metadata={"help": "fraction of examples aiming at a shorter length"})
    mask_prob: float = field(default=0.15, metadata={"help": "fraction of tokens (or words) chosen as targets"})
    leave_unmasked_prob: float = field(default=0.1, metadata={"help": "of the targets: fraction left unchanged"})
    random_token_prob: float = field(default=0.1, metadata={"help": "of the targets: fraction replaced at random"})
    freq_weighted_replacement: bool = field(default=False, metadata={"help": "random replacements follow token counts"})
    mask_whole_words: bool = field(default=False, metadata={"help": "choose whole words (needs --word-boundaries)"})
    word_boundaries: Optional[WORD_BOUNDARY_CHOICES] = field(default=None, metadata={
        "help": "how tokens mark words, for --mask-whole-words: wordpiece ('##' continues a word), sentencepiece "
                "('▁' starts one), gpt2 (needs DATA/encoder.json and DATA/vocab.bpe)"})
    # fairseq reuses the data loader across epochs by default; with --num-workers > 0 its
    # persistent workers would keep their copy of epoch 1 and repeat epoch 1's pairs and masks.
    reuse_dataloader: bool = field(default=False, metadata={
        "help": "reuse the data loader (and its worker processes) across epochs; off, so workers see the epoch"})
    seed: int = II("common.seed")


@register_task("sentence_pair_mlm", dataclass=SentencePairMLMConfig)
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
        paths = utils.split_paths(cfg.data)
        if not paths:
            raise ValueError("--data (the positional DATA argument) is empty")
        dict_path = os.path.join(paths[0], "dict.txt")
        if not os.path.isfile(dict_path):
            raise FileNotFoundError(f"no dictionary at {dict_path!r}: is {paths[0]!r} fairseq-preprocess output?")
        if cfg.tokens_per_sample < 5:
            raise ValueError(f"--tokens-per-sample must be at least 5 (<s> A </s> B </s>), got {cfg.tokens_per_sample}")
        if cfg.mask_whole_words and cfg.word_boundaries is None:
            raise ValueError("--mask-whole-words needs --word-boundaries {wordpiece,sentencepiece,gpt2}: "
                             "how the tokens of DATA mark the start of a word")
        dictionary = Dictionary.load(dict_path)
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
                    raise FileNotFoundError(f"--word-boundaries gpt2 reads GPT-2's BPE files from DATA: "
                                            f"{', '.join(missing)} missing")
                word_starts = gpt2_word_starts(d, *files)
            else:
                word_starts = piece_word_starts(d, style)
        specials = [*range(d.nspecial), self.mask_idx, *(i for i, s in enumerate(d.symbols) if s.startswith("madeupword"))]
        return BatchMasker(
            MaskingConfig(mask_prob=cfg.mask_prob, leave_unmasked_prob=cfg.leave_unmasked_prob,
                          random_token_prob=cfg.random_token_prob,
                          freq_weighted_replacement=cfg.freq_weighted_replacement,
                          mask_whole_words=cfg.mask_whole_words),
            vocab_size=len(d), mask_idx=self.mask_idx, pad_idx=d.pad(), special_ids=specials,
            word_starts=word_starts,
            replacement_weights=torch.tensor(d.count, dtype=torch.float) if cfg.freq_weighted_replacement else None,
            seed=cfg.seed,
        )

    def load_dataset(self, split: str, epoch: int = 1, combine: bool = False, **kwargs: Any) -> None:
        paths = utils.split_paths(self.cfg.data)
        data_path = paths[(epoch - 1) % len(paths)]
        split_path = os.path.join(data_path, split)
        sentences = data_utils.load_indexed_dataset(split_path, self.source_dictionary, combine=combine)
        if sentences is None:
            raise FileNotFoundError(f"dataset not found: {split} ({split_path}.bin/.idx)")
        d = self.dictionary
        dataset = SentencePairDataset(
            sentences, sentences.sizes, objective=str(self.cfg.sentence_objective),
            tokens_per_sample=self.cfg.tokens_per_sample, bos=d.bos(), eos=d.eos(), pad=d.pad(),
            masker=self._masker(data_path), short_seq_prob=self.cfg.short_seq_prob, seed=self.cfg.seed,
        )
        chunks = dataset.chunks
        if len(dataset) == 0:
            raise ValueError(f"{split_path}: no sentence pairs could be made (no document has two tokens)")
        logger.info(f"{split_path}: {len(dataset)} examples from {len(chunks.doc_first_sentence)} documents, "
                    f"mean length {float(dataset.sizes.mean()):.1f} tokens")
        if chunks.skipped_sentences:
            logger.warning(f"{split_path}: {chunks.skipped_sentences} one-token sentences alone at the end of a "
                           "document are in no example")
        self.datasets[split] = dataset

    def build_model(self, cfg: Any, from_checkpoint: bool = False) -> Any:
        model = super().build_model(cfg, from_checkpoint)
        if not getattr(getattr(model, "cfg", None), "type_vocab_size", 0):
            logger.warning("the model has no segment embeddings (type_vocab_size=0): segment_labels are ignored; "
                           "use a bert_ext_* or albert_ext_* architecture, or --type-vocab-size 2")
        head = SENTENCE_HEADS.get(str(self.cfg.sentence_objective))
        if head is not None:
            model.register_classification_head(head, num_classes=2)
        return model


@dataclass
class SentencePairMLMLossConfig(FairseqDataclass):
    sentence_loss_weight: float = field(default=1.0, metadata={
        "help": "weight of the mean sentence loss next to the mean masked-LM loss"})


@register_criterion("sentence_pair_mlm", dataclass=SentencePairMLMLossConfig)
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
        mlm_loss = (F.cross_entropy(lm_logits.float(), targets[masked], reduction="sum") if masked_count
                    else lm_logits.sum() * 0.0)
        nsentences = sample["nsentences"]
        log: dict[str, Any] = {"ntokens": sample["ntokens"], "nsentences": nsentences, "sample_size": masked_count,
                               "mlm_loss": mlm_loss.detach()}
        loss = mlm_loss
        if self.head is not None:
            if self.head not in model.classification_heads:
                raise KeyError(f"the model has no {self.head!r} head (heads: {sorted(model.classification_heads)}); "
                               "it is registered by --task sentence_pair_mlm")
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
        total = lambda key: sum(log.get(key, 0) for log in logging_outputs)  # noqa: E731
        sample_size = total("sample_size")
        metrics.log_scalar("loss", total("loss") / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_scalar("mlm_loss", total("mlm_loss") / max(sample_size, 1) / math.log(2), sample_size, round=3)
        metrics.log_derived("ppl", lambda meters: utils.get_perplexity(meters["mlm_loss"].avg))
        sentences = total("sentence_count")
        if sentences:
            metrics.log_scalar("sentence_loss", total("sentence_loss") / sentences / math.log(2), sentences, round=3)
            metrics.log_scalar("sentence_accuracy", 100.0 * total("sentence_ncorrect") / sentences, sentences,
                               round=1)

    @staticmethod
    def logging_outputs_can_be_summed() -> bool:
        return True
