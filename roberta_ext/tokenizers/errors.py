"""The tokenizers layer's error: the base of each tokenizer's file-format error
(``DictionaryFormatError``, ``GPT2BPEFormatError``, ``WordPieceFormatError``,
``SentencePieceFormatError``), so that a caller can catch "a vocabulary file we cannot read"
whatever the tokenizer."""

from __future__ import annotations

from ..errors import RobertaExtError

__all__ = ["TokenizerError"]


class TokenizerError(RobertaExtError, ValueError):
    """A tokenizer's files (vocabulary, merges, dictionary, model) cannot be read or do not fit
    together; the message names the file. A ``ValueError`` too, as every tokenizer's format error
    always was."""
