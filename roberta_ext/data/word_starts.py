"""Which dictionary entries start a word, for whole-word and span masking
(:class:`~roberta_ext.data.masking.BatchMasker`'s ``word_starts``).

Each function takes a fairseq-style dictionary (``roberta_ext.tokenizers.Dictionary`` or
fairseq's: ``len``, ``dictionary[index]`` and ``nspecial``) and returns a bool per index.
"""

from __future__ import annotations

from typing import Any

import torch

from ..tokenizers.gpt2_bpe import GPT2BPE

WORDPIECE_CONTINUATION = "##"
SPM_WORD_START = "\u2581"  # "▁"
WORD_BOUNDARY_STYLES = ("wordpiece", "sentencepiece", "gpt2")
"""How the tokens of a vocabulary mark words: by ``##`` continuations, by ``▁`` starts, or by
GPT-2 BPE tokens whose text starts with a space."""


def gpt2_word_starts(dictionary: Any, encoder_json: str, vocab_bpe: str) -> torch.Tensor:
    """Bool per dictionary index: does it start a word? fairseq's ``get_whole_word_mask`` rule:
    specials and ``madeupword`` fillers count as word starts, a BPE token does when its text
    starts with a space."""
    bpe = GPT2BPE.from_files(encoder_json, vocab_bpe)

    def starts(index: int) -> bool:
        symbol = dictionary[index]
        if index < dictionary.nspecial or symbol.startswith("madeupword"):
            return True
        try:
            return bpe.is_beginning_of_word(symbol)
        except (ValueError, KeyError):
            return True

    return torch.tensor([starts(i) for i in range(len(dictionary))], dtype=torch.bool)


def piece_word_starts(dictionary: Any, style: str) -> torch.Tensor:
    """Bool per dictionary index: does it start a word? ``wordpiece``: unless it begins with
    ``##``; ``sentencepiece``: if it begins with ``▁``. Special symbols count as starts (the
    masker never masks them anyway, and words never cross them).

    >>> from roberta_ext.tokenizers import Dictionary
    >>> d = Dictionary()
    >>> for symbol in ("un", "##able", "▁x", "y"):
    ...     _ = d.add_symbol(symbol)
    >>> piece_word_starts(d, "wordpiece")[4:].tolist(), piece_word_starts(d, "sentencepiece")[4:].tolist()
    ([True, False, True, True], [False, False, True, False])
    """

    def starts(index: int) -> bool:
        symbol = dictionary[index]
        if index < dictionary.nspecial:
            return True
        if style == "wordpiece":
            return not symbol.startswith(WORDPIECE_CONTINUATION)
        return symbol.startswith(SPM_WORD_START)

    return torch.tensor([starts(i) for i in range(len(dictionary))], dtype=torch.bool)
