"""roberta_ext.data.batching: rows into a right-padded batch, as fairseq's ``collate_tokens``."""

from __future__ import annotations

import doctest

import pytest
import torch

from roberta_ext.data import batching
from roberta_ext.data.batching import length_batches, pad_right
from tests.peers import require


def test_rows_are_right_padded_in_the_first_rows_dtype():
    rows = [
        torch.tensor([7, 8], dtype=torch.int32),
        torch.tensor([9, 10, 11, 12], dtype=torch.int32),
        torch.tensor([5], dtype=torch.int32),
    ]
    batch = pad_right(rows, pad=-100)
    assert batch.dtype == torch.int32
    assert batch.tolist() == [[7, 8, -100, -100], [9, 10, 11, 12], [5, -100, -100, -100]]
    with pytest.raises(ValueError, match=r"^no rows to pad into a batch$"):
        pad_right([], pad=1)


def test_collating_no_rows_says_so():
    with pytest.raises(ValueError, match=r"^cannot build a batch from no sentences$"):
        batching.collate([], pad=1)


def test_the_batch_takes_the_first_rows_dtype_when_rows_differ():
    rows = [torch.tensor([1, 2], dtype=torch.int32), torch.tensor([3], dtype=torch.int64)]
    batch = pad_right(rows, pad=0)
    assert batch.dtype == torch.int32
    assert batch.tolist() == [[1, 2], [3, 0]]


@pytest.mark.parametrize(
    ("lengths", "max_tokens", "expected"),
    [
        # Every batch full: the last one ends exactly at the last row, and nothing comes after it.
        ([4, 4, 4, 4], 8, [[0, 1], [2, 3]]),
        # One-token rows: a budget of 3 tokens holds three of them.
        ([1, 1, 1], 3, [[0, 1, 2]]),
    ],
)
def test_length_batches_at_the_edges_of_the_budget(lengths, max_tokens, expected):
    assert length_batches(lengths, max_tokens=max_tokens) == expected


def test_same_batch_as_fairseqs_collate_tokens():
    data_utils = require("fairseq.data.data_utils", "fairseq's collate_tokens is the peer")
    generator = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 30, (50,), generator=generator).tolist()
    rows = [torch.randint(4, 100, (n,), generator=generator) for n in lengths]
    assert torch.equal(pad_right(rows, 1), data_utils.collate_tokens(rows, 1))


def test_doctests():
    assert doctest.testmod(batching).failed == 0
