"""SentencePiece tokenizers: ALBERT's over a ``spiece.model`` (the ids of transformers' slow
``AlbertTokenizer``), and XLM-R's over a ``sentencepiece.bpe.model`` (:class:`XLMRSentencePiece`:
fairseq's ``--bpe sentencepiece``, the ids of fairseq's XLM-R and of transformers' ``XLMRobertaTokenizer``).

ALBERT does not hand raw text to SentencePiece. transformers' sentencepiece-based
``AlbertTokenizer`` (transformers 4.x; transformers 5 only ships a ``tokenizers``-backed
rewrite) first:

1. cuts out the special tokens written in the text (``[CLS]``, ``[SEP]``, ``[MASK]``, ``<pad>``,
   ``<unk>``) and, with ``do_lower_case``, lowercases the rest one character at a time;
2. *preprocesses* each remaining piece of text: collapses whitespace
   (``" ".join(text.strip().split())``), turns LaTeX-style quotes (two backticks, two
   apostrophes) into ``"``, applies NFKD and drops combining characters (unless
   ``keep_accents``), and lowercases it;
3. encodes it with SentencePiece, then re-splits every piece that ends in a digit followed by
   a comma (``"▁9,"`` -> ``"▁9"``, ``","``), as Google's ALBERT does, so that ``9,9`` is never
   one ``"9,"`` plus ``"9"``.

:class:`SentencePieceTokenizer` does the same, giving the same pieces and ids, and
:func:`train_sentencepiece` learns an ALBERT-style ``spiece.model`` (ids 0-4 are ``<pad>``,
``<unk>``, ``[CLS]``, ``[SEP]``, ``[MASK]``) from text.

>>> import os, tempfile
>>> texts = ["Hello, world! 1,000 cats; 9,9 dogs.", "The quick brown fox jumps over the lazy dog."] * 20
>>> prefix = os.path.join(tempfile.mkdtemp(), "spiece")
>>> model = train_sentencepiece(texts, prefix, vocab_size=100, hard_vocab_limit=False)  # small text: fewer pieces
>>> tok = SentencePieceTokenizer.from_file(model)
>>> [tok.id_to_token(i) for i in range(5)]
['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]']
>>> tok.tokenize("Hello [MASK] 9,9!")
['▁', 'he', 'l', 'l', 'o', '[MASK]', '▁', '9', ',', '9', '!']
>>> tok.decode(tok.encode("Hello  WORLD 1,000"))
'hello world 1,000'
"""

from __future__ import annotations

import io
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sentencepiece

from ..atomic import write_bytes_atomic
from .errors import TokenizerError
from .normalization import SpecialTokenSplitter, check_unicode, lowercase_per_character
from .pieces import char_spans_of_bytes

__all__ = [
    "ALBERT_CONTROL_SYMBOLS",
    "ALBERT_USER_DEFINED_SYMBOLS",
    "XLMR_SPECIALS",
    "SentencePieceFormatError",
    "SentencePieceTokenizer",
    "XLMRSentencePiece",
    "preprocess_text",
    "train_sentencepiece",
    "train_xlmr_sentencepiece",
]

SPIECE_UNDERLINE = "▁"
"""SentencePiece's mark for a word boundary (U+2581), written where the text had a space."""

ALBERT_CONTROL_SYMBOLS = ("[CLS]", "[SEP]", "[MASK]")
"""Control symbols of ALBERT's ``spiece.model``: ids 2, 3, 4, never produced from text."""

ALBERT_USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "–", "£", "€")
"""Always kept as pieces of their own, as in ALBERT's ``spm_train`` command (its README)."""


class SentencePieceFormatError(TokenizerError):
    """A ``spiece.model`` that cannot be used (unreadable, or missing a special token); the message names it."""


def preprocess_text(text: str, *, do_lower_case: bool = True, keep_accents: bool = False) -> str:
    """ALBERT's ``preprocess_text``: collapse whitespace, LaTeX quotes to ``"``, strip accents, lowercase.

    >>> preprocess_text("  ``Ångström''\\tNAÏVE  ")
    '"angstrom" naive'
    """
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():  # ASCII: NFKD changes nothing, nothing combines
        text = unicodedata.normalize("NFKD", text).translate(_DROP_COMBINING)
    if do_lower_case:
        # The whole string at once, as ALBERT does, so Final_Sigma may apply here (to a "Σ" that
        # NFKD produced from, say, a mathematical bold capital sigma).
        text = text.lower()
    return text


class _DropCombining(dict):
    """A ``str.translate`` table, filled on demand, that deletes combining characters."""

    def __missing__(self, cp: int) -> int | None:
        value = self[cp] = None if unicodedata.combining(chr(cp)) else cp
        return value


_DROP_COMBINING = _DropCombining()


class SentencePieceTokenizer:
    """Text <-> ALBERT vocabulary ids, equal to transformers' sentencepiece-based ``AlbertTokenizer``
    (no ``[CLS]``/``[SEP]`` added).

    ``model_proto`` is the content of a ``spiece.model``; see :meth:`from_file`. ``do_lower_case``
    and ``keep_accents`` mean what they mean for ``AlbertTokenizer``. The special tokens must be
    pieces of the model. ``source`` names the model in error messages.

    >>> import os, tempfile
    >>> texts = ["9,9 and 1,000,000 are numbers, so are 19 and 99."] * 9 + ["Naïve café; «ÉCOLE»"] * 9
    >>> prefix = os.path.join(tempfile.mkdtemp(), "spiece")
    >>> tok = SentencePieceTokenizer.from_file(train_sentencepiece(texts, prefix, 100, hard_vocab_limit=False))
    >>> tok.tokenize("NAÏVE numbers: 9,9[MASK]")  # ":" was never seen: it stays as text, and encodes to <unk>
    ['▁n', 'a', 'i', 'v', 'e', '▁n', 'u', 'm', 'b', 'e', 'r', 's', ':', '▁9', ',', '9', '[MASK]']
    >>> tok.encode("NAÏVE numbers: 9,9[MASK]")
    [27, 18, 34, 38, 13, 27, 37, 36, 32, 13, 17, 24, 1, 28, 20, 16, 4]
    >>> tok.decode(tok.encode("NAÏVE numbers: 9,9[MASK]"))
    'naive numbers<unk> 9,9[MASK]'
    >>> tok.cls_id, tok.sep_id, tok.pad_id, tok.unk_id, tok.mask_id
    (2, 3, 0, 1, 4)
    """

    def __init__(
        self,
        model_proto: bytes,
        *,
        do_lower_case: bool = True,
        keep_accents: bool = False,
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        mask_token: str = "[MASK]",
        source: str = "SentencePiece model",
    ) -> None:
        self.source = source
        self.do_lower_case = do_lower_case
        self.keep_accents = keep_accents
        self.model_proto = model_proto
        """The ``spiece.model`` bytes, kept so that an export writes the very same model."""
        try:
            self.sp = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        except (RuntimeError, OSError, TypeError) as error:
            raise SentencePieceFormatError(f"{source}: not a SentencePiece model ({error})") from None
        specials = {"unk": unk_token, "pad": pad_token, "cls": cls_token, "sep": sep_token, "mask": mask_token}
        ids = {token: self.sp.piece_to_id(token) for token in specials.values()}
        # piece_to_id answers unk_id for an unknown piece, so check the piece really is there.
        absent = [role for role, token in specials.items() if self.sp.id_to_piece(ids[token]) != token]
        missing = [f"{role} token {specials[role]!r}" for role in absent]
        if missing:
            raise SentencePieceFormatError(
                f"{source}: lacks the {', '.join(missing)}; ALBERT models start with "
                "<pad>, <unk>, [CLS], [SEP], [MASK] (or pass the names this one uses)"
            )
        self.unk_token, self.pad_token, self.cls_token = unk_token, pad_token, cls_token
        self.sep_token, self.mask_token = sep_token, mask_token
        self._special_ids = ids
        # transformers' slow AlbertTokenizer lowercases the text around the specials *before* it
        # looks for them, so "<unk>" and "<pad>" are also found where the text has "<UNK>". Its
        # [MASK] strips the space before it (lstrip=True); preprocess_text strips every chunk anyway.
        self._specials = SpecialTokenSplitter(ids, lowercase=do_lower_case)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        do_lower_case: bool = True,
        keep_accents: bool = False,
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        mask_token: str = "[MASK]",
    ) -> SentencePieceTokenizer:
        """Load a ``spiece.model``.

        Raises ``FileNotFoundError`` for a missing file and :class:`SentencePieceFormatError`,
        naming the file, for one that is not a SentencePiece model or lacks a special token.
        """
        try:
            model_proto = Path(path).read_bytes()
        except FileNotFoundError as error:
            message = "SentencePiece model (spiece.model) not found"
            raise FileNotFoundError(error.errno, message, str(path)) from None
        return cls(
            model_proto,
            do_lower_case=do_lower_case,
            keep_accents=keep_accents,
            unk_token=unk_token,
            pad_token=pad_token,
            cls_token=cls_token,
            sep_token=sep_token,
            mask_token=mask_token,
            source=str(path),
        )

    # ---------------------------------------------------------------- lookups

    @property
    def vocab_size(self) -> int:
        """Number of pieces in the model."""
        return self.sp.get_piece_size()

    @property
    def unk_id(self) -> int:
        """Id of ``<unk>``."""
        return self._special_ids[self.unk_token]

    @property
    def pad_id(self) -> int:
        """Id of ``<pad>``."""
        return self._special_ids[self.pad_token]

    @property
    def cls_id(self) -> int:
        """Id of ``[CLS]``."""
        return self._special_ids[self.cls_token]

    @property
    def sep_id(self) -> int:
        """Id of ``[SEP]``."""
        return self._special_ids[self.sep_token]

    @property
    def mask_id(self) -> int:
        """Id of ``[MASK]``."""
        return self._special_ids[self.mask_token]

    def id_to_token(self, token_id: int) -> str:
        """The piece with id ``token_id``; ``IndexError`` naming it when out of range."""
        if not 0 <= token_id < self.vocab_size:
            raise IndexError(f"token id {token_id} is out of range for {self.source} ({self.vocab_size} pieces)")
        return self.sp.id_to_piece(token_id)

    def token_to_id(self, token: str) -> int:
        """The id of piece ``token``; ``KeyError`` naming it when the model has no such piece."""
        token_id = self.sp.piece_to_id(token)
        if self.sp.id_to_piece(token_id) != token:
            raise KeyError(f"piece {token!r} is not in {self.source}")
        return token_id

    # ---------------------------------------------------------------- encoding

    def _pieces(self, text: str) -> list[str]:
        """ALBERT's ``_tokenize`` of text without special tokens."""
        text = preprocess_text(text, do_lower_case=self.do_lower_case, keep_accents=self.keep_accents)
        pieces = self.sp.encode(text, out_type=str)
        if "," not in "".join(pieces):
            return pieces
        fixed: list[str] = []
        for piece in pieces:
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                # Google's ALBERT: "9,9" -> ["▁9", ",", "9"], not ["▁9,", "9"]. The digits are
                # re-encoded on their own (without preprocessing, as upstream), keeping the word
                # boundary only if the original piece had one.
                digits = self.sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
                if piece[0] != SPIECE_UNDERLINE and digits[0][0] == SPIECE_UNDERLINE:
                    if len(digits[0]) == 1:
                        digits = digits[1:]
                    else:
                        digits[0] = digits[0][1:]
                fixed.extend(digits)
                fixed.append(piece[-1])
            else:
                fixed.append(piece)
        return fixed

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text`` (``AlbertTokenizer.tokenize``); text the model cannot spell
        appears as itself (and encodes to ``<unk>``). Text that is not valid Unicode (a lone
        surrogate, such as ``"\\ud800"``, from a badly decoded file) raises ``ValueError``:
        SentencePiece reads UTF-8, which cannot hold it."""
        check_unicode(text, reader="SentencePiece")
        pieces: list[str] = []
        for chunk, special_id in self._specials.split(text):
            if special_id is not None:
                pieces.append(chunk)
            else:
                pieces.extend(self._pieces(chunk))
        return pieces

    def encode(self, text: str) -> list[int]:
        """Vocabulary ids of ``text``, without ``[CLS]``/``[SEP]`` (``AlbertTokenizer``'s
        ``encode(text, add_special_tokens=False)``). Text the model cannot spell gets ``<unk>``."""
        # piece_to_id maps a piece that is not in the model (unknown text) to unk_id, as upstream.
        return self.sp.piece_to_id(self.tokenize(text))

    # ---------------------------------------------------------------- decoding

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, as ``AlbertTokenizer.decode(ids)``: pieces decoded by SentencePiece,
        special tokens written as themselves with a space before a run of them."""
        specials = self._special_ids
        text, previous_special = "", False
        run: list[str] = []
        for token in map(self.id_to_token, ids):
            if token in specials:
                if not previous_special:
                    text += " "
                text += self.sp.decode(run) + token
                run, previous_special = [], True
            else:
                run.append(token)
                previous_special = False
        text += self.sp.decode(run)
        return text.strip()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.source!r}, {self.vocab_size} pieces, "
            f"do_lower_case={self.do_lower_case}, keep_accents={self.keep_accents})"
        )


# ---------------------------------------------------------------------------------------- XLM-R

XLMR_SPECIALS = ("<s>", "<pad>", "</s>", "<unk>")
"""fairseq's four special symbols, indices 0-3 of every XLM-R model; ``<mask>`` comes last."""

SPM_DEFAULT_SPECIALS = ("<unk>", "<s>", "</s>")
"""Ids 0-2 of a SentencePiece model trained with ``spm_train``'s defaults, as XLM-R's is."""

WHITE_SPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000" + "".join(map(chr, range(0x2000, 0x200B)))
)
"""Unicode's White_Space characters: what transformers' tokenizers (Rust) split words at."""


class XLMRSentencePiece:
    """XLM-R's tokenizer: a SentencePiece model (``sentencepiece.bpe.model``) used as fairseq's
    ``--bpe sentencepiece`` uses it, with ids in XLM-R's layout (no ``<s>``/``</s>`` added).

    Unlike ALBERT's, the text goes to SentencePiece as it is (SentencePiece normalizes it
    itself, NFKC by default). The ids are XLM-R's: ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` =
    0-3, then SentencePiece's pieces from id 3 on shifted by one (fairseq's four specials
    replace SentencePiece's ``<unk>``, ``<s>``, ``</s>``), and ``<mask>`` last — the layout of
    XLM-R's ``dict.txt`` and of transformers' ``XLMRobertaTokenizer``. A piece the model cannot
    spell (a character it never saw) is ``<unk>``.

    Two readings of the same text, for the two places XLM-R models come from:

    * fairseq's (``split_specials=False``): the pieces joined by spaces and split again at
      every whitespace character, which is what ``dictionary.encode_line`` does with
      ``bpe.encode(text)`` — a piece holding whitespace that SentencePiece's normalizer kept
      (U+0085 under NFKC) is cut there, and whitespace alone vanishes. ``<mask>`` written in
      the text is just text.
    * transformers' (``split_specials=True``): ``<s>``, ``</s>``, ``<unk>``, ``<pad>`` and
      ``<mask>`` written in the text are those tokens, and the text between them is split into
      words at Unicode whitespace before SentencePiece sees it, as transformers'
      ``XLMRobertaTokenizer`` does.

    ``source`` names the model in error messages.

    >>> import os, tempfile
    >>> texts = ["Hello world!", "Bonjour le monde", "Hallo Welt", "你好，世界"] * 20
    >>> model = train_xlmr_sentencepiece(texts, os.path.join(tempfile.mkdtemp(), "sentencepiece.bpe"), 60,
    ...                                  hard_vocab_limit=False, num_threads=1)
    >>> tok = XLMRSentencePiece.from_file(model)
    >>> [tok.id_to_token(i) for i in range(5)], tok.id_to_token(tok.vocab_size - 1)
    (['<s>', '<pad>', '</s>', '<unk>', '▁'], '<mask>')
    >>> tok.tokenize("Hello <mask>")
    ['▁H', 'el', 'l', 'o', '▁', '<', 'm', 'a', 'sk>']
    >>> XLMRSentencePiece.from_file(model, split_specials=True).tokenize("Hello <mask>")
    ['▁H', 'el', 'l', 'o', '<mask>']
    >>> tok.tokens_with_spans("你好，世界")  # NFKC turned the full-width comma into ","
    [('▁', 0, 0), ('你', 0, 1), ('好', 1, 2), (',', 2, 3), ('世界', 3, 5)]
    >>> tok.encode("Hello world!")
    [11, 12, 5, 6, 4, 26, 6, 9, 5, 8, 19]
    """

    cls_token, sep_token, pad_token, unk_token, mask_token = "<s>", "</s>", "<pad>", "<unk>", "<mask>"
    do_lower_case = False
    kind = "xlmr_sentencepiece"
    """The tokenizer kind (``roberta_ext.tokenizers.registry``) that reads and writes this tokenizer."""

    def __init__(
        self, model_proto: bytes, *, split_specials: bool = False, source: str = "SentencePiece model"
    ) -> None:
        self.source = source
        self.split_specials = split_specials
        self.model_proto = model_proto
        """The ``sentencepiece.bpe.model`` bytes, kept so that an export writes the very same model."""
        try:
            self.sp = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        except (RuntimeError, OSError, TypeError) as error:
            raise SentencePieceFormatError(f"{source}: not a SentencePiece model ({error})") from None
        first = tuple(self.sp.id_to_piece(i) for i in range(min(3, self.sp.get_piece_size())))
        if first != SPM_DEFAULT_SPECIALS:
            raise SentencePieceFormatError(
                f"{source}: its first pieces are {list(first)}, not {list(SPM_DEFAULT_SPECIALS)}: XLM-R's "
                "SentencePiece models have spm_train's default ids (<unk>=0, <s>=1, </s>=2); "
                "an ALBERT spiece.model is read with bpe='sentencepiece' from a folder holding spiece.model"
            )
        pieces = [self.sp.id_to_piece(i) for i in range(3, self.sp.get_piece_size())]
        self._tokens = [*XLMR_SPECIALS, *pieces, self.mask_token]
        self._ids = {token: index for index, token in reversed(list(enumerate(self._tokens)))}  # first wins
        self._special_ids = {token: self._ids[token] for token in (*XLMR_SPECIALS, self.mask_token)}
        # Matched as written: transformers' XLMRobertaTokenizer has no lowercasing.
        self._specials = SpecialTokenSplitter(self._special_ids)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str], *, split_specials: bool = False) -> XLMRSentencePiece:
        """Load a ``sentencepiece.bpe.model``. Raises ``FileNotFoundError`` for a missing file and
        :class:`SentencePieceFormatError`, naming the file, for one that is not a SentencePiece
        model or whose first ids are not ``<unk>``, ``<s>``, ``</s>``."""
        try:
            model_proto = Path(path).read_bytes()
        except FileNotFoundError as error:
            raise FileNotFoundError(error.errno, "SentencePiece model not found", str(path)) from None
        return cls(model_proto, split_specials=split_specials, source=str(path))

    @property
    def vocab_size(self) -> int:
        """Number of ids: the model's pieces, ``<pad>`` and ``<mask>`` (250,002 for XLM-R)."""
        return len(self._tokens)

    def id_to_token(self, token_id: int) -> str:
        """The token with id ``token_id``; ``IndexError`` naming it when out of range."""
        if not 0 <= token_id < len(self._tokens):
            raise IndexError(f"token id {token_id} is out of range for {self.source} ({len(self._tokens)} ids)")
        return self._tokens[token_id]

    def token_to_id(self, token: str) -> int:
        """The id of ``token``; ``<unk>``'s (3) for a piece the model does not have."""
        return self._ids.get(token, XLMR_SPECIALS.index(self.unk_token))

    def __contains__(self, token: object) -> bool:
        """Whether ``token`` has an id of its own (a piece that was never learned, such as an
        unseen character, comes out of :meth:`tokenize` as itself but is ``<unk>``)."""
        return token in self._ids

    # ---------------------------------------------------------------- encoding

    def _segments(self, text: str) -> Iterator[tuple[str, int, bool]]:
        """``(text, offset, is_special)``: the whole text, or the text cut at the special tokens."""
        if not self.split_specials:
            yield text, 0, False
            return
        offset = 0
        for part, special_id in self._specials.split(text):  # not lowercased: parts add up to text
            yield part, offset, special_id is not None
            offset += len(part)

    def _segment_tokens(self, text: str) -> list[str]:
        """The pieces of text without special tokens."""
        check_unicode(text, reader="SentencePiece")
        pieces = self.sp.encode(text, out_type=str)
        # Whitespace that SentencePiece's normalizer keeps (U+0085 under NFKC) ends up in pieces.
        if not self.split_specials:
            # fairseq: " ".join(pieces), then encode_line splits at every whitespace character
            # (str.split's set); a piece loses its whitespace, whitespace alone disappears.
            return " ".join(pieces).split()
        if WHITE_SPACE.isdisjoint("".join(pieces)):
            return pieces
        return self._word_by_word(text)

    def _word_by_word(self, text: str) -> list[str]:
        """transformers' reading of text whose normalized form holds whitespace other than spaces:
        normalized, split into words at White_Space, one SentencePiece call per word."""
        words = re.split(f"[{''.join(sorted(WHITE_SPACE))}{SPIECE_UNDERLINE}]+", self.sp.normalize(text))
        return [piece for word in words if word for piece in self.sp.encode(word, out_type=str)]

    def _segment_spans(self, text: str) -> list[tuple[str, int, int]]:
        """:meth:`_segment_tokens` with the characters of ``text`` each piece came from."""
        check_unicode(text, reader="SentencePiece")
        proto = self.sp.encode(text, return_type="proto").pieces  # with byte offsets into text
        spans = char_spans_of_bytes(text, [(p.begin, p.end) for p in proto])
        pieces = [(p.piece, start, end) for p, (start, end) in zip(proto, spans)]
        if not self.split_specials:  # a piece cut at whitespace: each part keeps the piece's span
            return [(part, start, end) for piece, start, end in pieces for part in piece.split()]
        if WHITE_SPACE.isdisjoint("".join(piece for piece, _, _ in pieces)):
            return pieces
        whole = (min((start for _, start, _ in pieces), default=0), max((end for _, _, end in pieces), default=0))
        return [(piece, *whole) for piece in self._word_by_word(text)]

    def tokens_with_spans(self, text: str) -> list[tuple[str, int, int]]:
        """``(piece, start, end)`` for each piece of :meth:`tokenize`: the characters
        ``text[start:end]`` it was made from (empty for a ``▁`` that SentencePiece put before the
        first word; a piece cut out of a longer one keeps the whole one's span).

        >>> tok.tokens_with_spans("Hallo  Welt")                             # doctest: +SKIP
        [('▁Hallo', 0, 5), ('▁Welt', 5, 11)]
        """
        out: list[tuple[str, int, int]] = []
        for segment, offset, is_special in self._segments(text):
            if is_special:
                out.append((segment, offset, offset + len(segment)))
            else:
                out += [(piece, offset + start, offset + end) for piece, start, end in self._segment_spans(segment)]
        return out

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text`` (see the class for the two readings). Text that is not valid
        Unicode (a lone surrogate) raises ``ValueError``."""
        out: list[str] = []
        for segment, _, is_special in self._segments(text):
            if is_special:
                out.append(segment)
            else:
                out += self._segment_tokens(segment)
        return out

    def encode(self, text: str) -> list[int]:
        """Ids of ``text`` in XLM-R's layout, without ``<s>``/``</s>``."""
        ids, unk = self._ids, XLMR_SPECIALS.index(self.unk_token)
        return [ids.get(piece, unk) for piece in self.tokenize(text)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, {self.vocab_size} ids, split_specials={self.split_specials})"


# ---------------------------------------------------------------------------------------- training


def train_sentencepiece(
    texts: Iterable[str],
    model_prefix: str | os.PathLike[str],
    vocab_size: int,
    *,
    do_lower_case: bool = True,
    keep_accents: bool = False,
    model_type: str = "unigram",
    character_coverage: float = 0.99995,
    control_symbols: Sequence[str] = ALBERT_CONTROL_SYMBOLS,
    user_defined_symbols: Sequence[str] = ALBERT_USER_DEFINED_SYMBOLS,
    num_threads: int | None = None,
    progress: bool = False,
    **trainer_options: object,
) -> Path:
    """Learn an ALBERT-style SentencePiece model from ``texts``; write ``<model_prefix>.model`` and ``.vocab``.

    The options are those of ALBERT's ``spm_train`` command: a unigram model with ``<pad>`` = 0,
    ``<unk>`` = 1, the control symbols ``[CLS]``, ``[SEP]``, ``[MASK]`` = 2, 3, 4, no ``<s>``/``</s>``,
    and ALBERT's user-defined symbols. Each text is one training sentence, preprocessed as
    :class:`SentencePieceTokenizer` will preprocess it (pass the same ``do_lower_case`` and
    ``keep_accents``). ``trainer_options`` go to ``SentencePieceTrainer.train`` as they are. Both
    files are written atomically; an interrupted training leaves none behind. Returns the
    ``.model`` path. Raises ``ValueError`` with SentencePiece's reason when training fails (for
    instance a ``vocab_size`` larger than the text allows).

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> train_sentencepiece(["ab abc"] * 9, os.path.join(folder, "sp"), vocab_size=20, hard_vocab_limit=False).name
    'sp.model'
    >>> sorted(os.listdir(folder))
    ['sp.model', 'sp.vocab']
    """

    def sentences() -> Iterator[str]:
        for text in texts:
            if do_lower_case:
                text = lowercase_per_character(text)
            yield preprocess_text(text, do_lower_case=do_lower_case, keep_accents=keep_accents)

    options: dict[str, Any] = dict(  # SentencePiece trainer flags of all kinds
        model_type=model_type,
        vocab_size=vocab_size,
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        control_symbols=list(control_symbols),
        user_defined_symbols=list(user_defined_symbols),
        character_coverage=character_coverage,
        num_threads=num_threads or os.cpu_count() or 1,
        minloglevel=0 if progress else 2,
    )
    options.update(trainer_options)
    return _train(sentences(), model_prefix, options)


def train_xlmr_sentencepiece(
    texts: Iterable[str],
    model_prefix: str | os.PathLike[str],
    vocab_size: int,
    *,
    model_type: str = "unigram",
    character_coverage: float = 0.9995,
    num_threads: int | None = None,
    progress: bool = False,
    **trainer_options: object,
) -> Path:
    """Learn an XLM-R-style SentencePiece model from ``texts``; write ``<model_prefix>.model``
    and ``.vocab`` (prefix ``sentencepiece.bpe`` gives XLM-R's file name).

    XLM-R's conventions are ``spm_train``'s defaults: a unigram model over the text as it is
    (NFKC-normalized by SentencePiece), ``<unk>`` = 0, ``<s>`` = 1, ``</s>`` = 2, no ``<pad>``
    piece (:class:`XLMRSentencePiece` adds fairseq's). Each text is one training sentence;
    ``trainer_options`` go to ``SentencePieceTrainer.train`` as they are. Both files are written
    atomically. Raises ``ValueError`` with SentencePiece's reason when training fails.

    >>> import os, tempfile
    >>> model = train_xlmr_sentencepiece(["ab abc"] * 9, os.path.join(tempfile.mkdtemp(), "sentencepiece.bpe"),
    ...                                  vocab_size=20, hard_vocab_limit=False)
    >>> model.name, XLMRSentencePiece.from_file(model).tokenize("abc ab")
    ('sentencepiece.bpe.model', ['▁abc', '▁ab'])
    """
    options: dict[str, Any] = dict(
        model_type=model_type,
        vocab_size=vocab_size,
        character_coverage=character_coverage,
        num_threads=num_threads or os.cpu_count() or 1,
        minloglevel=0 if progress else 2,
    )
    options.update(trainer_options)
    return _train(iter(texts), model_prefix, options)


def _train(sentences: Iterator[str], model_prefix: str | os.PathLike[str], options: dict[str, Any]) -> Path:
    """Train SentencePiece on ``sentences``; write ``<model_prefix>.model`` and ``.vocab`` atomically."""
    model = io.BytesIO()
    try:
        sentencepiece.SentencePieceTrainer.train(sentence_iterator=sentences, model_writer=model, **options)
    except RuntimeError as error:
        raise ValueError(f"SentencePiece training for {model_prefix} failed: {error}") from None
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    vocab_rows = "".join(
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(processor.get_piece_size())
    )
    prefix = Path(model_prefix)
    model_path = prefix.with_name(prefix.name + ".model")
    write_bytes_atomic(model_path, model.getvalue())
    write_bytes_atomic(prefix.with_name(prefix.name + ".vocab"), vocab_rows.encode("utf-8"))
    return model_path
