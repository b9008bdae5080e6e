"""What the plugin's own datasets share: fairseq's size protocol over a ``sizes`` array, and
an order shuffled per (seed, epoch) then stably sorted by size, as fairseq's ``SortDataset``."""

from __future__ import annotations

from typing import Any

import numpy as np
from fairseq.data import FairseqDataset, data_utils


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
