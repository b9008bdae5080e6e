"""A character tokenizer over a fairseq ``Dictionary``: the smallest tokenizer a ``ModelInputs``
takes, so that the inference tests can say exactly which ids a text gives."""

from __future__ import annotations

from collections.abc import Sequence

from roberta_ext.tokenizers.dictionary import Dictionary

ALPHABET = "abcdefghijklmnopqrstuvwxyz .!?"


class CharTokenizer:
    """One id per character of :data:`ALPHABET` (others: ``<unk>``); ``<mask>`` is the last id."""

    def __init__(self) -> None:
        symbols = ["<s>", "<pad>", "</s>", "<unk>", *ALPHABET, "<mask>"]
        self.dictionary = Dictionary.from_symbols(symbols, bos="<s>", pad="<pad>", eos="</s>", unk="<unk>")

    def encode(self, text: str) -> list[int]:
        return [self.dictionary.index(c) for c in text]

    def encode_word(self, word: str, *, first: bool = False) -> list[int]:
        return self.encode(word if first else " " + word)

    def decode(self, ids: Sequence[int]) -> str:
        """The text of ``ids``, specials left out (as fairseq's ``Dictionary.string`` leaves ``</s>`` out)."""
        d = self.dictionary
        return "".join(d[i] for i in ids if i not in (d.bos(), d.pad(), d.eos()))

    def token_text(self, index: int) -> str:
        return self.dictionary[index]
