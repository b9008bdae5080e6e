"""What the plugin's own datasets share (``roberta_ext.fairseq_plugin.datasets``): fairseq's size
protocol over ``sizes``, the order shuffled per (seed, epoch) then stably sorted by size (against
fairseq's ``SortDataset`` over the same keys), and :class:`EveryExampleDataset`'s batches: fairseq's
own, with the last batch fairseq 0.12 drops put back."""

from __future__ import annotations

import numpy as np
import pytest

from tests.peers import require

require("fairseq", "the datasets are fairseq datasets")

from fairseq.data import SortDataset, data_utils

from roberta_ext.fairseq_plugin.datasets import EveryExampleDataset, SizedDataset


class Sized(SizedDataset):
    def __init__(self, sizes, seed: int | None = None, epoch: int | None = None, shuffle: bool | None = None) -> None:
        self.sizes = np.asarray(sizes, dtype=np.int64)
        if seed is not None:
            self.seed = seed
        if epoch is not None:
            self.epoch = epoch
        if shuffle is not None:
            self.shuffle = shuffle


def tied_sizes(count: int = 1000) -> np.ndarray:
    """Sizes with many ties (five values), enough of them that numpy's default sort is not stable."""
    return np.random.default_rng(0).integers(0, 5, count)


def shuffled_then_sorted(sizes: np.ndarray, seed: int) -> np.ndarray:
    """The expected order: fairseq's ``SortDataset`` sorting by size, ties by the position of each
    example in the permutation drawn under ``numpy_seed(seed)``."""
    with data_utils.numpy_seed(seed):
        permutation = np.random.permutation(len(sizes))
    position = np.argsort(permutation)  # position[i]: where example i is in the permutation
    return SortDataset(Sized(sizes), sort_order=[position, sizes]).ordered_indices()


def as_lists(batches) -> list[list[int]]:
    return [batch.tolist() for batch in batches]


def test_the_size_protocol_reads_sizes():
    dataset = Sized([3, 7, 5])
    assert len(dataset) == 3
    assert [dataset.num_tokens(i) for i in range(3)] == [3, 7, 5]
    assert [dataset.size(i) for i in range(3)] == [3, 7, 5]
    assert all(type(dataset.num_tokens(i)) is int and type(dataset.size(i)) is int for i in range(3))
    assert dataset.num_tokens_vec(np.array([2, 0])).tolist() == [5, 3]


def test_without_shuffle_the_order_is_by_size_then_by_index():
    sizes = tied_sizes()
    order = Sized(sizes, shuffle=False).ordered_indices()
    assert order.tolist() == np.lexsort((np.arange(len(sizes)), sizes)).tolist()
    assert np.argsort(sizes).tolist() != order.tolist()  # the data tell a stable sort from numpy's default


@pytest.mark.parametrize(
    ("seed", "epoch"), [(None, None), (3, 2), (7, 1)], ids=["defaults", "seed-3-epoch-2", "seed-7"]
)
def test_shuffled_the_order_is_fairseqs_sort_of_the_permutation_drawn_under_seed_plus_epoch(seed, epoch):
    sizes = tied_sizes()
    order = Sized(sizes, seed=seed, epoch=epoch).ordered_indices()
    expected = shuffled_then_sorted(sizes, (seed or 1) + (epoch or 1))
    assert order.tolist() == expected.tolist()
    assert sorted(order.tolist()) == list(range(len(sizes)))
    assert order.tolist() != Sized(sizes, shuffle=False).ordered_indices().tolist()


def test_set_epoch_keeps_the_epoch_and_draws_that_epochs_order():
    sizes = tied_sizes()
    dataset = Sized(sizes, seed=5)
    first = dataset.ordered_indices()
    dataset.set_epoch(4)
    assert dataset.epoch == 4
    assert dataset.ordered_indices().tolist() == shuffled_then_sorted(sizes, 9).tolist() != first.tolist()


def test_the_order_leaves_numpys_global_random_state_alone():
    np.random.seed(11)
    expected = np.random.rand(3)
    np.random.seed(11)
    Sized(tied_sizes(), seed=2).ordered_indices()
    assert np.random.rand(3).tolist() == expected.tolist()


@pytest.mark.parametrize(
    ("options", "sizes"),
    [
        ({"max_sentences": 3}, [5] * 10),  # fairseq's default multiple (1): nothing dropped
        ({"max_sentences": 5, "required_batch_size_multiple": 2}, [5] * 10),  # batches of 4, 4, 2
        ({"max_tokens": 12}, [3, 4, 5, 2, 6, 6, 1, 4, 3, 5]),
        ({"max_tokens": 12, "max_sentences": 2}, [3, 4, 5, 2, 6, 6, 1, 4, 3, 5]),
    ],
    ids=["sentences", "sentences-multiple-2", "tokens", "tokens-and-sentences"],
)
def test_where_fairseq_drops_nothing_the_batches_are_fairseqs(options, sizes):
    dataset = Sized(sizes)
    indices = dataset.ordered_indices()
    theirs = dataset.batch_by_size(indices, **options)  # FairseqDataset's, through data_utils
    ours = EveryExampleDataset(dataset).batch_by_size(indices, **options)
    assert sum(map(len, theirs)) == len(indices)
    assert as_lists(ours) == as_lists(theirs)
    assert len(as_lists(theirs)) > 1


def test_the_batches_are_fairseqs_for_the_options_given():
    dataset = Sized([5] * 10)
    indices = np.arange(10)
    three = EveryExampleDataset(dataset).batch_by_size(indices, max_sentences=3)
    assert [len(batch) for batch in three] == [3, 3, 3, 1]
    two = EveryExampleDataset(dataset).batch_by_size(indices, max_sentences=5, required_batch_size_multiple=2)
    assert [len(batch) for batch in two] == [4, 4, 2]
    tokens = EveryExampleDataset(Sized([3, 4, 5, 2, 6])).batch_by_size(np.arange(5), max_tokens=12)
    assert as_lists(tokens) == [[0, 1], [2, 3], [4]]  # each batch's longest example times its count <= 12


@pytest.mark.parametrize(
    ("count", "options"),
    [
        (10, {"max_sentences": 1, "required_batch_size_multiple": 8}),  # fairseq-validate --batch-size 1
        (13, {"max_sentences": 4, "required_batch_size_multiple": 4}),
        (11, {"max_tokens": 40, "required_batch_size_multiple": 8}),
    ],
    ids=["batch-size-1", "sentences-4", "tokens"],
)
def test_the_last_batch_fairseq_drops_is_put_back_in_order(count, options):
    dataset = Sized([5] * count, seed=3)
    indices = dataset.ordered_indices()
    theirs = as_lists(dataset.batch_by_size(indices, **options))
    batched = sum(map(len, theirs))
    assert batched < count  # fairseq dropped a tail
    ours = EveryExampleDataset(dataset).batch_by_size(indices, **options)
    assert as_lists(ours) == [*theirs, indices[batched:].tolist()]
    assert all(batch.dtype == np.int64 for batch in ours)


def test_indices_given_as_numpy_int32_values_give_int64_batches_as_fairseqs():
    # fairseq reads any iterable of indices into int64; the batch put back is int64 too.
    indices = [np.int32(i) for i in range(10)]
    batches = EveryExampleDataset(Sized([5] * 10)).batch_by_size(
        indices, max_sentences=1, required_batch_size_multiple=8
    )
    assert as_lists(batches) == [[i] for i in range(10)]
    assert [batch.dtype for batch in batches] == [np.dtype(np.int64)] * 10
