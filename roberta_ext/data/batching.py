"""Rows of different lengths into one padded batch."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def pad_right(rows: Sequence[torch.Tensor], pad: int) -> torch.Tensor:
    """(B, T): the 1-d ``rows`` one under the other, right-padded with ``pad`` to the longest; the
    dtype is the first row's. The same batch as fairseq's ``data_utils.collate_tokens(rows, pad)``.

    >>> pad_right([torch.tensor([0, 5, 2]), torch.tensor([0, 2])], pad=1).tolist()
    [[0, 5, 2], [0, 2, 1]]
    """
    if not rows:
        raise ValueError("no rows to pad into a batch")
    width = max(len(row) for row in rows)
    batch = rows[0].new_full((len(rows), width), pad)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch
