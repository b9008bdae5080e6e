"""roberta_ext.data.tagging: token classification examples, without fairseq — targets on first
sub-words, the checks on misaligned lines and unknown labels, the label count of a label
dictionary. The fairseq task that trains on them is tested in tests/fairseq_plugin/test_tagging.py.
"""

from __future__ import annotations

import doctest

import numpy as np
import pytest
import torch

from roberta_ext.data import tagging
from roberta_ext.data.tagging import IGNORE_INDEX, TokenLabels, num_label_classes
from roberta_ext.tokenizers import Dictionary


class Rows:
    """A stand-in for fairseq's indexed dataset."""

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = [torch.tensor(r) for r in rows]
        self.sizes = np.array([len(r) for r in rows])

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)


def label_dictionary():
    labels = Dictionary()
    for name in ("O", "ENT", "NUM"):
        labels.add_symbol(name)
    labels.add_symbol("madeupword0000", n=0)
    return labels


def test_dataset_targets_and_checks():
    labels = label_dictionary()
    assert num_label_classes(labels) == 3
    o, ent, pad, eos = labels.index("O"), labels.index("ENT"), labels.pad(), labels.eos()
    tokens = Rows([[10, 11, 12, 2], [13, 2]])
    dataset = TokenLabels(
        tokens,
        Rows([[ent, pad, o, eos], [o, eos]]),
        label_dictionary=labels,
        num_labels=3,
        bos=0,
        pad=1,
        name="ner/train",
    )
    item = dataset[0]
    assert item["source"].tolist() == [0, 10, 11, 12, 2]
    assert item["target"].tolist() == [IGNORE_INDEX, 1, IGNORE_INDEX, 0, IGNORE_INDEX]
    batch = dataset.collater([dataset[0], dataset[1]])
    assert batch["nwords"] == 3 and batch["target"].shape == batch["net_input"]["src_tokens"].shape
    assert list(dataset.sizes) == [5, 3]

    with pytest.raises(ValueError, match="ner/train: line 2 has 1 tokens but 2 labels"):
        TokenLabels(
            tokens,
            Rows([[ent, pad, o, eos], [o, o, eos]]),
            label_dictionary=labels,
            num_labels=3,
            bos=0,
            pad=1,
            name="ner/train",
        )
    with pytest.raises(ValueError, match="line 1 has the label '<unk>'"):
        TokenLabels(
            tokens,
            Rows([[ent, labels.unk(), o, eos], [o, eos]]),
            label_dictionary=labels,
            num_labels=3,
            bos=0,
            pad=1,
            name="ner/train",
        )
    with pytest.raises(ValueError, match="line 2 starts with <pad>"):
        TokenLabels(
            tokens,
            Rows([[ent, pad, o, eos], [pad, eos]]),
            label_dictionary=labels,
            num_labels=3,
            bos=0,
            pad=1,
            name="ner/train",
        )


def test_num_label_classes_refuses_fillers_among_labels_and_no_label():
    labels = Dictionary()
    for name in ("O", "madeupword0000", "ENT"):
        labels.add_symbol(name)
    with pytest.raises(ValueError, match="filler symbols among its labels"):
        num_label_classes(labels)
    with pytest.raises(ValueError, match="holds no label"):
        num_label_classes(Dictionary())


def test_doctests():
    assert doctest.testmod(tagging).failed == 0
