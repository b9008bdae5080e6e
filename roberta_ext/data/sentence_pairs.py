"""BERT/ALBERT pretraining examples: sentence pairs ``<s> A </s> B </s>`` cut from documents, with
a next-sentence (NSP) or sentence-order (SOP) label. No fairseq: the plugin's
``roberta_ext_sentence_pair_mlm`` task wraps :class:`SentencePairs` in a fairseq dataset.

**Input.** Sentences of one sentence per line, documents separated by empty lines, as
``fairseq-preprocess`` binarizes them: each item ends in ``</s>``, and an empty line is a lone
``</s>``, an item of size 1. Any non-empty line has size >= 2, its tokens plus ``</s>``, so size 1
is the document break.

**Examples** (BERT's ``create_pretraining_data.py``, ALBERT's for SOP). Each document is cut
once, at load time, into *chunks* of consecutive sentences: sentences are added until the
chunk holds at least ``tokens_per_sample - 3`` tokens or the document ends; with probability
``short_seq_prob`` a chunk aims at a shorter, uniformly drawn length instead (so the model
also sees short inputs, as BERT does). Each chunk is one example. Every epoch, an example is
split anew into segment A (the first 1..n-1 sentences of the chunk, drawn uniformly) and
segment B (the rest); a chunk of one long sentence is split inside it, at a uniform token.
Then, with probability 0.5:

* ``nsp``: B is replaced by text of a *different*, uniformly drawn document: consecutive
  sentences from a uniformly drawn one of its sentences that are followed by enough text to
  replace B (label 1; 0 = B follows A). Only a document shorter than B gives a shorter B;
* ``sop``: A and B are swapped (label 1; 0 = in order). A and B always come from one document;
* ``none``: nothing (label 0, no sentence head): MLM with segments only.

The pair is then cut to the chunk's length (at most ``tokens_per_sample - 3``) by trimming
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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .batching import pad_right
from .masking import BatchMasker, reference_random_bits

OBJECTIVES = ("nsp", "sop", "none")
"""Sentence-level objectives: next-sentence prediction (BERT), sentence-order prediction
(ALBERT), none (masked LM on pairs with segments)."""

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

    def as_array(values: Sequence[int]) -> np.ndarray:
        return np.asarray(values, dtype=np.int64)

    return PairChunks(
        as_array(first),
        as_array(count),
        as_array(tokens),
        as_array(document),
        doc_first.astype(np.int64),
        doc_count.astype(np.int64),
        skipped,
    )


class SentencePairs:
    """Sentence pairs ``<s> A </s> B </s>`` with segment ids and a sentence label, masked per batch.

    ``sentences`` is indexable by sentence (a fairseq indexed dataset, or any sequence of 1-d
    tensors), each ending in ``</s>``, with documents separated by items of size 1; ``sizes`` are
    their lengths. See the module docstring for how pairs are made. ``__getitem__`` gives the
    uncorrupted pair of the current epoch (:meth:`set_epoch`); :meth:`collater` pads a list of
    them into a batch and masks it with ``masker`` (or leaves it as is when ``masker`` is None).
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
        masker: BatchMasker | None,
        short_seq_prob: float = 0.1,
        seed: int = 1,
    ) -> None:
        super().__init__()  # the next class of a subclass's bases (the plugin's fairseq dataset)
        if objective not in OBJECTIVES:
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
        self.chunks = build_pair_chunks(
            sizes, max_tokens=tokens_per_sample - 3, short_seq_prob=short_seq_prob, seed=seed
        )
        if objective == "nsp" and len(self.chunks.doc_first_sentence) < 2:
            raise ValueError(
                "next-sentence prediction needs at least two documents (separated by an empty line); "
                f"found {len(self.chunks.doc_first_sentence)}"
            )
        self._lengths = np.asarray(sizes, dtype=np.int64) - 1  # tokens of each sentence, </s> excluded
        self.sizes = np.minimum(self.chunks.num_tokens, tokens_per_sample - 3) + 3

    def __len__(self) -> int:
        return len(self.sizes)

    def set_epoch(self, epoch: int, **unused: Any) -> None:
        self.epoch = epoch

    def _tokens(self, first: int, count: int) -> torch.Tensor:
        """Sentences ``first .. first + count - 1`` concatenated, without their ``</s>``."""
        return torch.cat([self.sentences[i][:-1] for i in range(first, first + count)])

    def pair(self, index: int, epoch: int | None = None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Segments A and B (token ids, no specials) and the label of example ``index``."""
        epoch = self.epoch if epoch is None else epoch
        c = self.chunks
        first, count, doc = int(c.first_sentence[index]), int(c.num_sentences[index]), int(c.document[index])

        def draw(stream: int) -> float:
            return _uniform(self.seed, epoch, index, stream)

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
        a = a[len(a) - len_a :] if draw(_STREAM_TRIM_A) < 0.5 else a[:len_a]
        b = b[len(b) - len_b :] if draw(_STREAM_TRIM_B) < 0.5 else b[:len_b]
        return a, b, label

    def __getitem__(self, index: int) -> dict[str, Any]:
        a, b, label = self.pair(index)
        bos, eos = a.new_tensor([self.bos]), a.new_tensor([self.eos])
        source = torch.cat([bos, a, eos, b, eos])  # (T,) = <s> A </s> B </s>
        segments = torch.cat([torch.zeros(len(a) + 2, dtype=torch.long), torch.ones(len(b) + 1, dtype=torch.long)])
        return {"id": int(index), "source": source, "segments": segments, "label": label}

    def collater(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        """A batch in fairseq's layout: ``net_input`` (``src_tokens``, ``segment_labels``,
        ``src_lengths``), ``target`` (the original token at masked positions, pad elsewhere),
        ``sentence_target``, ``id``, ``nsentences``, ``ntokens``; ``{}`` for no samples."""
        if not samples:
            return {}
        ids = torch.tensor([s["id"] for s in samples], dtype=torch.long)
        tokens = pad_right([s["source"] for s in samples], self.pad)  # (B, T), right-padded
        segments = pad_right([s["segments"] for s in samples], 0)  # (B, T)
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
