"""What the plugin's own datasets share: fairseq's size protocol over a ``sizes`` array, and
an order shuffled per (seed, epoch) then stably sorted by size, as fairseq's ``SortDataset``;
and :class:`EveryExampleDataset`, which puts back the last batch fairseq 0.12 drops."""

from __future__ import annotations

from typing import Any

import numpy as np
from fairseq.data import BaseWrapperDataset, FairseqDataset, data_utils


class SizedDataset(FairseqDataset):
    """A dataset whose examples have the sizes in ``self.sizes`` (set by the subclass).

    ``shuffle`` off gives the examples sorted by size alone (validation); ``seed`` and
    ``epoch`` pick the shuffle, and ``set_epoch`` keeps the epoch for subclasses whose
    examples or masks depend on it.
    """

    sizes: np.ndarray
    seed: int = 1
    epoch: int = 1
    shuffle: bool = True

    def __len__(self) -> int:
        return len(self.sizes)

    def num_tokens(self, index: int) -> int:
        return int(self.sizes[index])

    def num_tokens_vec(self, indices: np.ndarray) -> np.ndarray:
        return self.sizes[indices]

    def size(self, index: int) -> int:
        return int(self.sizes[index])

    def set_epoch(self, epoch: int, **unused: Any) -> None:
        self.epoch = epoch

    def ordered_indices(self) -> np.ndarray:
        """Shuffled per seed and epoch (unless ``shuffle`` is off), then stably sorted by size."""
        if not self.shuffle:
            return np.argsort(self.sizes, kind="mergesort")
        with data_utils.numpy_seed(self.seed + self.epoch):
            order = np.random.permutation(len(self))
        return order[np.argsort(self.sizes[order], kind="mergesort")]


class EveryExampleDataset(BaseWrapperDataset):
    """A dataset whose batches hold every example. fairseq 0.12's ``batch_by_size`` drops a last
    batch whose size is not a multiple of ``--required-batch-size-multiple`` (8 by default;
    fairseq#5036): ``fairseq-validate --batch-size 1``, as in the RACE tutorial, leaves out the
    last example, and validation during training up to 7, so the reported accuracy is not the
    split's. Here that batch is put back.

    >>> class Ten(SizedDataset):
    ...     sizes = np.full(10, 5)
    >>> def examples(dataset):  # in the batches of fairseq-validate --batch-size 1
    ...     return sum(map(len, dataset.batch_by_size(np.arange(10), max_sentences=1, required_batch_size_multiple=8)))
    >>> examples(Ten()), examples(EveryExampleDataset(Ten()))
    (9, 10)
    """

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        batches = list(self.dataset.batch_by_size(indices, max_tokens, max_sentences, required_batch_size_multiple))
        batched = sum(len(batch) for batch in batches)
        if batched < len(indices):  # the batches are consecutive runs of indices: the tail was dropped
            batches.append(np.asarray(indices[batched:], dtype=np.int64))
        return batches
