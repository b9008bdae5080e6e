"""Token classification examples (NER, POS tagging): sub-word tokens with a label on the first
sub-word of each word. No fairseq: the plugin's ``roberta_ext_token_classification`` task wraps
:class:`TokenLabels` in a fairseq dataset.

The data is what ``roberta-ext prepare-tagging`` writes and ``fairseq-preprocess`` binarizes:
line ``i`` of the labels has exactly as many labels as line ``i`` of the tokens has tokens. The
first sub-word of each word carries the word's label and every other sub-word the label
:data:`IGNORE_LABEL` (``<pad>``), which fairseq's dictionaries already know (index 1): such
tokens are ignored by the loss and the metrics. Alignment is thus decided once, when the data is
prepared, by the tokenizer that made the sub-words — not guessed later from ``##`` or ``▁``
(WordPiece splits ``U.S.`` into four "words" without any ``##``).

An example is ``<s> tokens </s>`` (the dictionary's ``<s>``/``</s>`` play ``[CLS]``/``[SEP]``
for BERT and ALBERT). Label class ``k`` is the label on line ``k + 1`` of the label dictionary
— index ``k + nspecial`` — the convention of fairseq's ``sentence_prediction`` and of the hub's
``label_name``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .batching import pad_right

IGNORE_LABEL = "<pad>"
"""The label of sub-words that continue a word: fairseq's padding symbol, so it needs no entry in
``label/dict.txt`` and binarizes to the padding index."""

IGNORE_INDEX = -100
"""Target value of unlabelled positions (``<s>``, ``</s>``, continuations, padding): PyTorch's default."""


def without_fillers(names: Sequence[str]) -> list[str]:
    """``names`` without the ``madeupwordNNNN`` fillers ``fairseq-preprocess`` pads a dictionary
    with, at its end (a label dictionary's classes are its symbols before them).

    >>> without_fillers(["O", "B-PER", "madeupword0000", "madeupword0001"])
    ['O', 'B-PER']
    """
    count = len(names)
    while count and names[count - 1].startswith("madeupword"):
        count -= 1
    return list(names[:count])


def num_label_classes(labels: Any) -> int:
    """How many labels the dictionary ``labels`` holds: its symbols after the specials, without
    the ``madeupwordNNNN`` fillers ``fairseq-preprocess`` appends (those must all come last).

    >>> from roberta_ext.tokenizers import Dictionary
    >>> d = Dictionary()
    >>> for symbol in ("O", "B-PER", "madeupword0000"):
    ...     _ = d.add_symbol(symbol)
    >>> num_label_classes(d)
    2
    """
    kept = without_fillers(labels.symbols[labels.nspecial :])
    count = len(kept)
    misplaced = [name for name in kept if name.startswith("madeupword")]
    if misplaced:
        raise ValueError(f"label dictionary has filler symbols among its labels: {misplaced[:3]}")
    if count == 0:
        raise ValueError("label dictionary holds no label")
    return count


class TokenLabels:
    """``<s> tokens </s>`` with a target per position: the label class of first sub-words,
    :data:`IGNORE_INDEX` elsewhere.

    ``tokens`` and ``labels`` are indexable by line (fairseq indexed datasets, or anything with
    ``sizes`` and 1-d tensor items) of ``</s>``-terminated lines of equal lengths; label indices
    are those of ``label_dictionary``. Misaligned lines and labels outside the dictionary's
    ``num_labels`` labels are refused, naming ``name`` and the (1-based) line.
    """

    def __init__(
        self, tokens: Any, labels: Any, *, label_dictionary: Any, num_labels: int, bos: int, pad: int, name: str = ""
    ) -> None:
        super().__init__()  # the next class of a subclass's bases (the plugin's fairseq dataset)
        self.tokens, self.labels = tokens, labels
        self.bos, self.pad = bos, pad
        self.label_offset = label_dictionary.nspecial
        self.label_pad = label_dictionary.pad()
        self.sizes = np.asarray(tokens.sizes, dtype=np.int64) + 1  # <s> prepended
        self._check(label_dictionary, num_labels, name)

    def _check(self, label_dictionary: Any, num_labels: int, name: str) -> None:
        """Fail on misaligned or unknown labels, naming the (1-based) line."""
        if len(self.tokens) != len(self.labels):
            raise ValueError(f"{name}: {len(self.tokens)} token lines but {len(self.labels)} label lines")
        token_sizes, label_sizes = np.asarray(self.tokens.sizes), np.asarray(self.labels.sizes)
        different = np.flatnonzero(token_sizes != label_sizes)
        if len(different):
            line = int(different[0])
            raise ValueError(
                f"{name}: line {line + 1} has {token_sizes[line] - 1} tokens but "
                f"{label_sizes[line] - 1} labels ({len(different)} lines differ); every sub-word "
                f"token needs a label ({IGNORE_LABEL} for continuations)"
            )
        first, last = self.label_offset, self.label_offset + num_labels
        for line in range(len(self.labels)):
            labels = self.labels[line][:-1]  # without </s>
            real = labels.ne(self.label_pad)
            bad = real & ((labels < first) | (labels >= last))
            if bool(bad.any()):
                symbol = label_dictionary[int(labels[bad][0])]
                raise ValueError(
                    f"{name}: line {line + 1} has the label {symbol!r}, which is not a label of the label dictionary"
                )
            if len(labels) and not bool(real[0]):
                raise ValueError(
                    f"{name}: line {line + 1} starts with {IGNORE_LABEL}: the first token of a "
                    "sentence starts a word and needs its label"
                )

    def __len__(self) -> int:
        return len(self.sizes)

    def __getitem__(self, index: int) -> dict[str, Any]:
        tokens = self.tokens[index]  # (n + 1,): tokens and </s>
        labels = self.labels[index][:-1]  # (n,)
        source = torch.cat([tokens.new_tensor([self.bos]), tokens])  # <s> tokens </s>
        classes = torch.where(labels.ne(self.label_pad), labels - self.label_offset, IGNORE_INDEX)
        target = torch.cat([classes.new_tensor([IGNORE_INDEX]), classes, classes.new_tensor([IGNORE_INDEX])])
        return {"id": int(index), "source": source, "target": target}

    def collater(self, samples: list[dict[str, Any]]) -> dict[str, Any]:
        """A batch in fairseq's layout: ``net_input`` (``src_tokens``, ``src_lengths``), ``target``
        (B, T) with :data:`IGNORE_INDEX` where there is no label, ``nwords`` (labelled
        positions), ``id``, ``nsentences``, ``ntokens``; ``{}`` for no samples."""
        if not samples:
            return {}
        tokens = pad_right([s["source"] for s in samples], self.pad)  # (B, T)
        target = pad_right([s["target"] for s in samples], IGNORE_INDEX)  # (B, T)
        lengths = tokens.ne(self.pad).sum(dim=1)
        return {
            "id": torch.tensor([s["id"] for s in samples], dtype=torch.long),
            "nsentences": len(samples),
            "ntokens": int(lengths.sum()),
            "nwords": int(target.ne(IGNORE_INDEX).sum()),
            "net_input": {"src_tokens": tokens, "src_lengths": lengths},
            "target": target,
        }
