"""Rows of different lengths into batches: which rows go together (:func:`length_batches`, the
one length-sorted token-budget batcher of embed, predict and the server) and how they are padded
(:func:`collate`, :func:`pad_right`)."""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from itertools import chain

import torch

__all__ = ["collate", "length_batches", "pad_right"]


def length_batches(lengths: Sequence[int], *, max_tokens: int, batch_size: int | None = None) -> list[list[int]]:
    """Row indices sorted longest first and cut into batches whose padded size (rows x longest
    row) stays within ``max_tokens`` (a longer row makes a batch alone), each of at most
    ``batch_size`` rows. Longest first, so a batch too big for memory fails at once.

    >>> length_batches([3, 10, 4, 9, 2], max_tokens=20)
    [[1, 3], [2, 0, 4]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        rows = max(1, max_tokens // max(1, lengths[order[start]]))  # a batch is as wide as its first row
        if batch_size is not None:
            rows = min(rows, batch_size)
        batches.append(order[start : start + rows])
        start += rows
    return batches


def collate(rows: Sequence[Sequence[int] | torch.Tensor], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad rows of indices (lists or 1-D tensors) with ``pad`` into ``(tokens (B, T), lengths (B,))``.

    >>> tokens, lengths = collate([[0, 5, 2], [0, 2]], pad=1)
    >>> tokens.tolist(), lengths.tolist()
    ([[0, 5, 2], [0, 2, 1]], [3, 2])
    """
    if not rows:
        raise ValueError("cannot build a batch from no sentences")
    lengths = torch.tensor([len(r) for r in rows], dtype=torch.long)
    tokens = torch.full((len(rows), int(lengths.max())), pad, dtype=torch.long)
    # One masked assignment of all rows back to back (row-major order) instead of one per row.
    flat = array("q", chain.from_iterable(r.tolist() if isinstance(r, torch.Tensor) else r for r in rows))
    if flat:
        tokens[torch.arange(tokens.size(1)) < lengths[:, None]] = torch.frombuffer(flat, dtype=torch.long)
    return tokens, lengths


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
