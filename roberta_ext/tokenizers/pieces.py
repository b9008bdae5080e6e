"""Text -> model indices for sub-word tokenizers that yield token *strings* (WordPiece,
SentencePiece), through a :class:`~roberta_ext.tokenizers.dictionary.Dictionary`.

Two index spaces occur: a transformers checkpoint uses the tokenizer's own ids (``vocab.txt``
line numbers, SentencePiece ids), while a model trained with ``fairseq-train`` uses the
``dict.txt`` that ``fairseq-preprocess`` built from the tokenized text. :class:`PieceTokenizer`
serves both; when the dictionary *is* the tokenizer's vocabulary it passes ids straight through.

>>> from roberta_ext.tokenizers.wordpiece import WordPieceTokenizer, BERT_SPECIAL_TOKENS
>>> wp = WordPieceTokenizer([*BERT_SPECIAL_TOKENS, "hello", "world", "##s"])
>>> tok = PieceTokenizer.for_vocabulary(wp)
>>> tok.encode("Hello worlds"), tok.decode([5, 6, 7]), tok.token_text(7)
([5, 6, 7], 'hello worlds', 's')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from .dictionary import Dictionary

SPM_SPACE = "\u2581"  # SentencePiece's word-start marker "▁"
WORDPIECE_CONTINUATION = "##"


class SubwordTokenizer(Protocol):
    """What :class:`PieceTokenizer` needs from a WordPiece or SentencePiece tokenizer."""

    cls_token: str
    sep_token: str
    pad_token: str
    unk_token: str
    mask_token: str
    do_lower_case: bool
    """Whether text is lowercased first (what an export writes to ``tokenizer_config.json``)."""

    def tokenize(self, text: str) -> list[str]: ...

    def encode(self, text: str) -> list[int]: ...

    def id_to_token(self, token_id: int) -> str: ...

    @property
    def vocab_size(self) -> int: ...


def vocabulary(pieces: SubwordTokenizer) -> list[str]:
    """The tokenizer's tokens in id order."""
    return [pieces.id_to_token(i) for i in range(pieces.vocab_size)]


class PieceTokenizer:
    """Text <-> dictionary indices through a sub-word tokenizer (``tokenize(text) -> pieces``).

    ``kind`` says how pieces mark words: ``"wordpiece"`` (a continuation starts with ``##``)
    or ``"sentencepiece"`` (a word start begins with ``▁``).
    """

    def __init__(self, pieces: SubwordTokenizer, dictionary: Dictionary, kind: str) -> None:
        if kind not in ("wordpiece", "sentencepiece"):
            raise ValueError(f"kind must be 'wordpiece' or 'sentencepiece', got {kind!r}")
        self.pieces = pieces
        self.dictionary = dictionary
        self.kind = kind
        self.is_identity = list(dictionary.symbols) == vocabulary(pieces)
        """The dictionary is the tokenizer's own vocabulary: ids pass through unchanged."""

    @classmethod
    def for_vocabulary(cls, pieces: SubwordTokenizer, kind: str = "wordpiece") -> PieceTokenizer:
        """A tokenizer whose indices are the sub-word tokenizer's own ids (transformers' layout),
        with ``[CLS]``/``[SEP]`` playing fairseq's ``<s>``/``</s>``."""
        dictionary = Dictionary.from_symbols(
            vocabulary(pieces), bos=pieces.cls_token, pad=pieces.pad_token, eos=pieces.sep_token, unk=pieces.unk_token
        )
        return cls(pieces, dictionary, kind)

    @property
    def mask_token(self) -> str:
        return self.pieces.mask_token

    def encode(self, text: str) -> list[int]:
        """Indices of ``text``, without ``[CLS]``/``[SEP]`` (or ``<s>``/``</s>``)."""
        if self.is_identity:
            return self.pieces.encode(text)
        index = self.dictionary.index
        return [index(piece) for piece in self.pieces.tokenize(text)]

    def encode_word(self, word: str, *, first: bool) -> list[int]:
        """Indices of one word of a whitespace-split sentence (the same wherever it stands:
        WordPiece and SentencePiece mark word starts themselves)."""
        return self.encode(word)

    def decode(self, indices: Iterable[int]) -> str:
        """Text of ``indices``; the dictionary's ``bos``/``eos``/``pad`` are dropped."""
        skip = {self.dictionary.bos(), self.dictionary.eos(), self.dictionary.pad()}
        return self.join([self.dictionary[i] for i in indices if i not in skip])

    def join(self, pieces: Sequence[str]) -> str:
        """Pieces back to text: WordPiece joins ``##`` continuations, SentencePiece turns ``▁`` into spaces."""
        if self.kind == "wordpiece":
            return " ".join(pieces).replace(f" {WORDPIECE_CONTINUATION}", "").strip()
        return "".join(pieces).replace(SPM_SPACE, " ").strip()

    def is_word_start(self, index: int) -> bool:
        """Whether dictionary entry ``index`` begins a word."""
        piece = self.dictionary[index]
        if self.kind == "wordpiece":
            return not piece.startswith(WORDPIECE_CONTINUATION)
        return piece.startswith(SPM_SPACE) or index < self.dictionary.nspecial

    def token_text(self, index: int) -> str:
        """The text one token adds to a sentence: ``" capital"`` for a word start, ``"s"`` for
        a continuation (how ``fill_mask`` writes its predictions)."""
        piece = self.dictionary[index]
        if self.kind == "wordpiece":
            return piece[len(WORDPIECE_CONTINUATION) :] if piece.startswith(WORDPIECE_CONTINUATION) else f" {piece}"
        return piece.replace(SPM_SPACE, " ")
