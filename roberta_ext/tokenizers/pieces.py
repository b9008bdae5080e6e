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

import difflib
import unicodedata
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

    def spans(self, text: str) -> list[tuple[int, int]]:
        """For each token of ``encode(text)``, the characters ``text[start:end]`` it stands for
        (word alignment). Tokenizers that know their offsets (XLM-R's SentencePiece) give them;
        for the others the tokens' text is matched against ``text`` (:func:`match_spans`)."""
        exact = getattr(self.pieces, "tokens_with_spans", None)
        if exact is not None:
            return [(start, end) for _, start, end in exact(text)]
        marker = WORDPIECE_CONTINUATION if self.kind == "wordpiece" else SPM_SPACE
        unknown = {self.pieces.unk_token, self.dictionary.unk_word}
        pieces = self.pieces.tokenize(text)
        return match_spans(text, ["" if p in unknown else p.replace(marker, "") for p in pieces])


def _normalized(text: str) -> list[tuple[str, int]]:
    """``(character, index in text)`` of ``text`` compatibility-decomposed, casefolded, without
    combining marks and whitespace: the form in which a token's text is found again in the
    text it came from, whatever the tokenizer normalized."""
    out = []
    for index, char in enumerate(text):
        for folded in unicodedata.normalize("NFKD", char.casefold()):
            if not unicodedata.combining(folded) and not folded.isspace():
                out.append((folded, index))
    return out


def match_spans(text: str, token_texts: Sequence[str]) -> list[tuple[int, int]]:
    """The span ``(start, end)`` of ``text`` that each token, given by its text, came from.

    Both sides are compared without case, accents and whitespace; the longest common
    subsequence of their characters decides. A token none of whose characters is found (an
    unknown token, written ``""``) takes the unmatched characters between its neighbours, or
    an empty span where its predecessor ended.

    >>> match_spans("Ünïcode naïve!", ["unic", "ode", "", "!"])
    [(0, 4), (4, 7), (8, 13), (13, 14)]
    """
    original = _normalized(text)
    tokens = [(char, position) for position, token in enumerate(token_texts) for char, _ in _normalized(token)]
    matcher = difflib.SequenceMatcher(None, [c for c, _ in original], [c for c, _ in tokens], autojunk=False)
    found: list[list[int]] = [[] for _ in token_texts]  # characters of text each token matched
    matched = set()
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            index = original[block.a + k][1]
            found[tokens[block.b + k][1]].append(index)
            matched.add(index)
    spans: list[tuple[int, int] | None] = [(min(f), max(f) + 1) if f else None for f in found]
    position = 0
    while position < len(spans):
        if spans[position] is not None:
            position += 1
            continue
        run_end = position  # a run of tokens found nowhere shares the unmatched text around it
        while run_end < len(spans) and spans[run_end] is None:
            run_end += 1
        before = next((s[1] for s in reversed(spans[:position]) if s is not None), 0)
        after = next((s[0] for s in spans[run_end:] if s is not None), len(text))
        groups: list[list[int]] = []  # the unmatched characters between them, in whitespace-separated groups
        current: list[int] = []
        for i in range(before, max(before, after)):
            if i in matched or text[i].isspace():
                if current:
                    groups.append(current)
                current = []
            else:
                current.append(i)
        if current:
            groups.append(current)
        count = run_end - position
        for k in range(count):
            if not groups:
                spans[position + k] = (before, before)
                continue
            first, last = k * len(groups) // count, max(k * len(groups) // count, (k + 1) * len(groups) // count - 1)
            spans[position + k] = (groups[first][0], groups[last][-1] + 1)
        position = run_end
    return [s for s in spans if s is not None]


def char_spans_of_bytes(text: str, byte_spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte spans of ``text``'s UTF-8 as character spans; a span holding part of a character
    covers the whole character.

    >>> char_spans_of_bytes("a\u201cb", [(0, 1), (1, 3), (3, 4), (4, 5), (5, 5)])
    [(0, 1), (1, 2), (1, 2), (2, 3), (3, 3)]
    """
    data = text.encode("utf-8")
    if len(data) == len(text):  # ASCII: bytes are characters
        return [(start, end) for start, end in byte_spans]
    char_of = []  # the character each byte belongs to, and one past the last character
    for index, char in enumerate(text):
        char_of += [index] * len(char.encode("utf-8"))
    char_of.append(len(text))
    return [(char_of[start], char_of[end - 1] + 1 if end > start else char_of[start]) for start, end in byte_spans]


def char_spans(text: str, byte_lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Character spans of consecutive tokens that make up ``text``'s UTF-8, given by their
    lengths in bytes (byte-level BPE).

    >>> char_spans("a\u201cb", [1, 2, 1, 1])
    [(0, 1), (1, 2), (1, 2), (2, 3)]
    """
    spans, start = [], 0
    for length in byte_lengths:
        spans.append((start, start + length))
        start += length
    return char_spans_of_bytes(text, spans)
