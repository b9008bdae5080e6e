"""BERT's WordPiece tokenizer over a ``vocab.txt``, with the ids of transformers' ``BertTokenizer``.

A ``vocab.txt`` lists one token per line; a token's id is its line number, from 0. Words start
with a plain token (``"un"``) and go on with ``##`` tokens (``"##aff"``, ``"##able"``).
transformers has had two BERT tokenizers, which agree on ordinary text and differ on rare
characters; :class:`WordPieceTokenizer` gives the ids of either:

* by default, those of transformers 5's ``BertTokenizer`` (the ``BertTokenizerFast`` of 4.x, what
  ``AutoTokenizer`` loads): HF ``tokenizers``' ``BertNormalizer``, ``BertPreTokenizer`` and
  ``WordPiece``, in Rust. Special tokens written in the text are cut out first, exactly as
  written. :class:`BertPreTokenizer` then deletes NUL, U+FFFD and control characters and turns
  whitespace into spaces, puts spaces around CJK ideographs, strips accents (NFD, then deletes
  nonspacing marks) and lowercases (uncased vocabularies), and splits on whitespace and
  punctuation. Characters are classified with the Rust library's own tables, not with this
  Python's ``unicodedata`` (see :mod:`._bert_unicode`): a code point Unicode has not assigned is a
  letter there, so ``"x\\u0378y"`` is one word, ``[UNK]`` in most vocabularies.
* with ``legacy=True``, those of transformers' Python ``BertTokenizer`` (4.x; ``BertTokenizerLegacy``
  in 5.x, which lost 4.x's first step), a port of Google's BERT ``tokenization.py``. Special
  tokens are cut out and, uncased, the rest is lowercased *character by character* (so a
  word-final ``Σ`` becomes ``σ``, not the ``ς`` of Python's ``str.lower``). :class:`BasicTokenizer`
  then cleans the text as above but with this Python's ``unicodedata`` (every ``C*`` category is
  deleted, unassigned code points included), puts spaces around CJK ideographs, applies NFC, and
  splits on whitespace, lowercasing and stripping accents uncased, and splits off punctuation.

Both end with :class:`WordPiece`, which splits each word greedily into the longest tokens of the
vocabulary, or gives ``[UNK]`` for a word it cannot cover or one longer than 100 characters, and
both remember the ids of each word they have seen. A ``str`` holding a lone surrogate is not text
(transformers 5 refuses it with a ``TypeError``): both raise ``ValueError`` naming where it is.
:func:`train_wordpiece_vocab` learns a small vocabulary from text, and :func:`write_vocab` writes it.

>>> import os, tempfile
>>> vocab = train_wordpiece_vocab(["Hello, world!", "hello words and wordpieces"] * 3, vocab_size=60)
>>> vocab[:5]
['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]']
>>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
>>> write_vocab(vocab, path)
>>> tok = WordPieceTokenizer.from_file(path)
>>> tok.tokenize("Hello WORLDS [MASK]!")
['hello', 'world', '##s', '[MASK]', '!']
>>> tok.decode(tok.encode("Hello WORLDS [MASK]!"))
'hello worlds [MASK] !'
"""

from __future__ import annotations

import heapq
import os
import unicodedata
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from pathlib import Path

from tqdm import tqdm

from ..atomic import atomic_write
from . import _bert_unicode
from .errors import TokenizerError
from .gpt2_bpe import DEFAULT_CACHE_SIZE, WordCache
from .normalization import SpecialTokenSplitter, check_unicode

__all__ = [
    "BERT_SPECIAL_TOKENS",
    "BasicTokenizer",
    "BertPreTokenizer",
    "WordPiece",
    "WordPieceFormatError",
    "WordPieceTokenizer",
    "read_vocab",
    "train_wordpiece_vocab",
    "write_vocab",
]

BERT_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
"""BERT's special tokens, in the order of the first lines of BERT's own ``vocab.txt`` files."""

CONTINUATION_PREFIX = "##"
"""Marks a token that continues a word rather than starting one."""

MAX_INPUT_CHARS_PER_WORD = 100
"""Words longer than this (in characters) become ``[UNK]`` without being looked at, as in BERT."""


class WordPieceFormatError(TokenizerError):
    """A ``vocab.txt`` that cannot be used (empty, duplicate or missing tokens); the message names it."""


# ------------------------------------------------------------------------------ character classes
# Two sets: the Python BertTokenizer's (legacy), verbatim from transformers (tokenization_python.py /
# BERT's tokenization.py), which ask this Python's `unicodedata`, and the Rust BertTokenizer's, which
# ask the `tokenizers` library's own tables (`_bert_unicode`). Which characters are whitespace,
# control or punctuation decides where words split, so each flavour must use its own.

_TABLE_LIMIT = 1 << 16
"""The lazily filled character tables below start afresh past this many entries (text seldom
holds more distinct characters; a scan of all of Unicode would otherwise keep a million)."""


class _LoneSurrogate(ValueError):
    """Raised from inside ``str.translate``; :func:`.normalization.check_unicode` turns it into a message."""


_READER = "BERT's tokenizers (transformers 5's BertTokenizer raises TypeError)"
"""What cannot read a lone surrogate, for :func:`.normalization.check_unicode`'s message."""


def _is_whitespace(char: str) -> bool:
    # "\t", "\n" and "\r" are control characters (Cc), but count as whitespace.
    return char in " \t\n\r" or unicodedata.category(char) == "Zs"


def _is_control(char: str) -> bool:
    return char not in "\t\n\r" and unicodedata.category(char).startswith("C")


def _is_punctuation(char: str) -> bool:
    # Every ASCII character that is neither a letter, a digit nor a space counts, including
    # "^", "$" and "`", which Unicode files under symbols (S*) rather than punctuation (P*).
    cp = ord(char)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(char).startswith("P")


def _is_chinese_char(cp: int, *, tokenizers_ranges: bool = False) -> bool:
    # The CJK Unified Ideographs blocks (not Hangul, Hiragana or Katakana, which separate words
    # with spaces), as BERT lists them: later extensions are left out, so that ids stay BERT's.
    # `tokenizers` starts Extension E at U+2B920 instead of U+2B820 (a typo), so its BertNormalizer
    # does not split U+2B820..U+2B91F off.
    return (
        0x4E00 <= cp <= 0x9FFF
        or 0x3400 <= cp <= 0x4DBF
        or 0x20000 <= cp <= 0x2A6DF
        or 0x2A700 <= cp <= 0x2B73F
        or 0x2B740 <= cp <= 0x2B81F
        or (0x2B920 if tokenizers_ranges else 0x2B820) <= cp <= 0x2CEAF
        or 0xF900 <= cp <= 0xFAFF
        or 0x2F800 <= cp <= 0x2FA1F
    )


def _clean_legacy(cp: int) -> bool | None:
    """BERT's ``_clean_text`` for one code point: ``None`` deletes it, ``True`` makes it a space."""
    char = chr(cp)
    if cp == 0 or cp == 0xFFFD or _is_control(char):
        return None
    return _is_whitespace(char)


def _clean_tokenizers(cp: int) -> bool | None:
    """``BertNormalizer``'s ``do_clean_text`` for one code point, with the library's tables."""
    if cp == 0 or cp == 0xFFFD or (cp not in (0x09, 0x0A, 0x0D) and _bert_unicode.OTHER.flags()[cp]):
        return None
    return cp in _bert_unicode.WHITESPACE


class _CleanTable(dict):
    """A ``str.translate`` table, filled on demand, for cleaning and (optionally) CJK splitting:
    deleted characters map to ``None``, whitespace to a space, CJK ideographs to themselves between
    spaces, and a lone surrogate raises. One C call per text."""

    def __init__(self, *, legacy: bool, split_cjk: bool) -> None:
        super().__init__()
        self._clean = _clean_legacy if legacy else _clean_tokenizers
        self._legacy = legacy
        self._split_cjk = split_cjk

    def __missing__(self, cp: int) -> str | int | None:
        if 0xD800 <= cp <= 0xDFFF:
            raise _LoneSurrogate(cp)
        if len(self) >= _TABLE_LIMIT:
            self.clear()
        cleaned = self._clean(cp)
        value: str | int | None
        if cleaned is None:
            value = None
        elif cleaned:
            value = " "
        elif self._split_cjk and _is_chinese_char(cp, tokenizers_ranges=not self._legacy):
            value = f" {chr(cp)} "
        else:
            value = cp
        self[cp] = value
        return value


class _CharacterTable(dict):
    """char -> ``classify(char)``, filled on demand (and started afresh past ``_TABLE_LIMIT``)."""

    def __init__(self, classify: Callable[[str], object]) -> None:
        super().__init__()
        self._classify = classify

    def __missing__(self, char: str) -> object:
        if len(self) >= _TABLE_LIMIT:
            self.clear()
        value = self[char] = self._classify(char)
        return value


class _NormalizeTable(dict):
    """A ``str.translate`` table, filled on demand, for what ``BertNormalizer`` does after its NFD and
    then ``BertPreTokenizer`` does, all one character at a time: delete nonspacing marks (``strip``),
    lowercase (``lower``: Rust's ``char::to_lowercase``), and put spaces around punctuation
    (``split_punctuation``), so that ``str.split`` then gives the pre-tokens. One C call per word.

    >>> "Ÿ-\u0301\ua7cb".translate(_NormalizeTable(strip=True, lower=True, split_punctuation=True))
    'ÿ - ɤ'
    """

    def __init__(self, *, strip: bool, lower: bool, split_punctuation: bool) -> None:
        super().__init__()
        self._strip, self._lower, self._split_punctuation = strip, lower, split_punctuation

    def __missing__(self, cp: int) -> str | int:
        if len(self) >= _TABLE_LIMIT:
            self.clear()
        char = chr(cp)
        if self._strip and _bert_unicode.NONSPACING_MARKS.flags()[cp]:
            out = ""
        elif self._lower:  # one character alone: no Final_Sigma rule, Σ -> σ as in Rust
            out = char.lower().translate(_bert_unicode.LOWERCASE)
        else:
            out = char
        if self._split_punctuation:
            punctuation = _bert_unicode.PUNCTUATION.flags()
            if len(out) == 1:
                if punctuation[ord(out)]:
                    out = f" {out} "
            else:
                out = "".join([f" {c} " if punctuation[ord(c)] else c for c in out])
        value = self[cp] = cp if out == char else out
        return value


def _nfd_unknown_to_tokenizers(char: str) -> bool:
    # A character this Python decomposes or reorders but the library's (Unicode 9.0) NFD does not.
    return (unicodedata.combining(char) != 0 or unicodedata.normalize("NFD", char) != char) and (
        ord(char) not in _bert_unicode.NFD_KNOWN
    )


# Shared by all tokenizers: they only grow with the distinct characters seen.
_CLEAN_TABLES = {
    (legacy, split_cjk): _CleanTable(legacy=legacy, split_cjk=split_cjk)
    for legacy in (False, True)
    for split_cjk in (False, True)
}
_PUNCTUATION = _CharacterTable(_is_punctuation)
_NFD_UNKNOWN = _CharacterTable(_nfd_unknown_to_tokenizers)
_NORMALIZE_TABLES = {
    (strip, lower, split): _NormalizeTable(strip=strip, lower=lower, split_punctuation=split)
    for strip in (False, True)
    for lower in (False, True)
    for split in (False, True)
}


def _strip_accents(text: str) -> str:
    """NFD, then drop every nonspacing mark (Mn), as BERT's ``_run_strip_accents``.

    >>> _strip_accents("Ångström naïve")
    'Angstrom naive'
    """
    if text.isascii():
        return text  # NFD leaves ASCII alone and ASCII has no marks
    return "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")


def _nfd_tokenizers(text: str) -> str:
    """NFD as the ``tokenizers`` library computes it (Unicode 9.0 data): characters it does not
    know are starters without a decomposition, so NFD runs on the text between them.

    >>> _nfd_tokenizers("e\\u0301\\U00011938"), unicodedata.normalize("NFD", "\\U00011938")
    ('e\u0301\U00011938', '\U00011935\U00011930')
    """
    # Text that Python's NFD leaves alone, the library's leaves alone too: it decomposes no more,
    # and the marks it knows are in order wherever Python finds them in order.
    if text.isascii() or unicodedata.is_normalized("NFD", text):
        return text
    if not any(map(_NFD_UNKNOWN.__getitem__, text)):
        return unicodedata.normalize("NFD", text)
    parts: list[str] = []
    start = 0
    for i, char in enumerate(text):
        if _NFD_UNKNOWN[char]:
            parts += (unicodedata.normalize("NFD", text[start:i]), char)
            start = i + 1
    parts.append(unicodedata.normalize("NFD", text[start:]))
    return "".join(parts)


# -------------------------------------------------------------------------------- basic tokenizer


class BasicTokenizer:
    """BERT's pre-tokenisation: clean, split CJK, NFC, lowercase, strip accents, split punctuation.

    Gives the tokens of transformers' Python ``BasicTokenizer`` (``models/bert``, the ``legacy=True``
    flavour of :class:`WordPieceTokenizer`) with the same options; characters are classified with
    this Python's ``unicodedata``, and every ``C*`` category is deleted (unassigned code points too).
    ``strip_accents=None`` strips accents exactly when lowercasing, as in BERT; ``True`` or ``False``
    forces it on or off (``False`` keeps accents even while lowercasing). Tokens in ``never_split``
    are kept whole, not lowercased, when they stand alone between whitespace.

    >>> BasicTokenizer().tokenize("Héllo, WORLD!\\t中文 [MASK]")
    ['hello', ',', 'world', '!', '中', '文', '[', 'mask', ']']
    >>> BasicTokenizer(do_lower_case=False, never_split=["[MASK]"]).tokenize("Héllo [MASK]")
    ['Héllo', '[MASK]']
    """

    def __init__(
        self,
        *,
        do_lower_case: bool = True,
        never_split: Iterable[str] = (),
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self.do_lower_case = do_lower_case
        self.never_split = frozenset(never_split)
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.strip_accents = strip_accents
        self._table = _CLEAN_TABLES[True, tokenize_chinese_chars]
        self._cache = WordCache(self.split_word, cache_size)

    def words(self, text: str) -> list[str]:
        """The whitespace-separated words of ``text`` after cleaning, CJK splitting and NFC.

        >>> BasicTokenizer().words("a\\x00b\\u00a0c中d\\u0378")
        ['ab', 'c', '中', 'd']
        """
        # Same order as transformers: clean, then CJK spaces, then NFC ("prevents treating the
        # same character with different code points as different"), then whitespace split.
        try:
            cleaned = text.translate(self._table)
        except _LoneSurrogate:
            check_unicode(text, reader=_READER)
            raise
        return unicodedata.normalize("NFC", cleaned).split()

    def split_word(self, word: str) -> tuple[str, ...]:
        """The tokens of one word from :meth:`words`: lowercased, accents stripped, punctuation split.

        >>> BasicTokenizer().split_word("Don't!")
        ('don', "'", 't', '!')
        """
        if word in self.never_split:
            return (word,)
        if self.do_lower_case:
            word = word.lower()
            if self.strip_accents is not False:
                word = _strip_accents(word)
        elif self.strip_accents:
            word = _strip_accents(word)
        if word in self.never_split:  # transformers checks again before splitting at punctuation:
            return (word,)  # "[SEP]" + a combining accent, accents stripped, stays "[SEP]"
        pieces: list[str] = []
        start = 0
        for i, char in enumerate(word):
            if _PUNCTUATION[char]:
                if start < i:
                    pieces.append(word[start:i])
                pieces.append(char)
                start = i + 1
        if start < len(word):
            pieces.append(word[start:])
        # transformers re-splits the joined tokens on whitespace; this keeps any that lowercasing
        # or accent stripping might have produced (none in current Unicode) split the same way.
        return tuple(" ".join(pieces).split())

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text``, as transformers' ``BasicTokenizer.tokenize(text)``.

        >>> BasicTokenizer(strip_accents=False).tokenize("Ünïcode")
        ['ünïcode']
        """
        return list(chain.from_iterable(map(self._cache.__getitem__, self.words(text))))


class BertPreTokenizer:
    """The words that transformers 5's ``BertTokenizer`` hands to WordPiece: HF ``tokenizers``'
    ``BertNormalizer`` (clean, split CJK, strip accents, lowercase), then its ``BertPreTokenizer``
    (split on whitespace and punctuation), with the Rust library's character tables.

    ``strip_accents=None`` strips accents exactly when lowercasing; ``True`` or ``False`` forces it
    on or off. Code points Unicode has not assigned are kept, as letters; private use (Co), format
    (Cf) and control (Cc) characters are deleted, as classified in Unicode 8.0 (see
    :mod:`._bert_unicode`).

    >>> BertPreTokenizer().tokenize("Héllo, WORLD!\\t中文 [MASK] x\\u0378y")
    ['hello', ',', 'world', '!', '中', '文', '[', 'mask', ']', 'x\\u0378y']
    >>> BertPreTokenizer(do_lower_case=False).normalize("Héllo\\x00\\u00a0中\\ue000")
    'Héllo  中 '
    """

    def __init__(
        self,
        *,
        do_lower_case: bool = True,
        tokenize_chinese_chars: bool = True,
        strip_accents: bool | None = None,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        self.do_lower_case = do_lower_case
        self.tokenize_chinese_chars = tokenize_chinese_chars
        self.strip_accents = strip_accents
        self._strip = do_lower_case if strip_accents is None else strip_accents
        self._table = _CLEAN_TABLES[False, tokenize_chinese_chars]
        self._normalize_table = _NORMALIZE_TABLES[self._strip, do_lower_case, False]
        self._split_table = _NORMALIZE_TABLES[self._strip, do_lower_case, True]
        self._cache = WordCache(self.split_word, cache_size)

    def _clean(self, text: str) -> str:
        try:
            return text.translate(self._table)
        except _LoneSurrogate:
            check_unicode(text, reader=_READER)
            raise

    def normalize(self, text: str) -> str:
        """``BertNormalizer(clean_text=True, ...).normalize_str(text)``: the text before it is split.

        >>> BertPreTokenizer().normalize("Ångström\\u200b NAÏVE")
        'angstrom naive'
        """
        text = self._clean(text)
        return (_nfd_tokenizers(text) if self._strip else text).translate(self._normalize_table)

    def words(self, text: str) -> list[str]:
        """The whitespace-separated words of ``text`` after cleaning and CJK splitting.

        Accents, case and punctuation are left to :meth:`split_word`, so that its cache sees each
        word once: whitespace is a starter for NFD and the rest works character by character, so
        word by word gives what the whole text would.

        >>> BertPreTokenizer().words("a\\x00b\\u00a0c中d\\u0378")
        ['ab', 'c', '中', 'd\\u0378']
        """
        return self._clean(text).split()

    def split_word(self, word: str) -> tuple[str, ...]:
        """The pre-tokens of one word from :meth:`words`: accents stripped, lowercased, punctuation split.

        >>> BertPreTokenizer().split_word("Don't!")
        ('don', "'", 't', '!')
        """
        # Whitespace comes out of cleaning as " " only (NFD and lowercasing make none), so
        # str.split splits where BertPreTokenizer does.
        return tuple((_nfd_tokenizers(word) if self._strip else word).translate(self._split_table).split())

    def tokenize(self, text: str) -> list[str]:
        """The pre-tokens of ``text``: ``[w for w, _ in BertPreTokenizer().pre_tokenize_str(normalize(text))]``.

        >>> BertPreTokenizer(strip_accents=False).tokenize("Ünïcode")
        ['ünïcode']
        """
        return list(chain.from_iterable(map(self._cache.__getitem__, self.words(text))))


# --------------------------------------------------------------------------------------- wordpiece


class WordPiece:
    """Greedy longest-match-first WordPiece over a vocabulary, as BERT's ``WordpieceTokenizer``.

    Each word is cut, from the left, into the longest prefix that is a token, then the longest
    ``##``-token that continues it, and so on. A word that cannot be covered this way, or that
    has more than ``max_input_chars_per_word`` characters, becomes one ``unk_token``.

    >>> wp = WordPiece({"[UNK]": 0, "un": 1, "##aff": 2, "##able": 3})
    >>> wp.tokenize("unaffable unable xyz")
    ['un', '##aff', '##able', 'un', '##able', '[UNK]']
    """

    def __init__(
        self,
        vocab: Mapping[str, int],
        *,
        unk_token: str = "[UNK]",
        max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
    ) -> None:
        self.vocab = vocab
        self.unk_token = unk_token
        self.max_input_chars_per_word = max_input_chars_per_word
        # No token is longer than these, so longer candidates need not be looked up. The word's
        # first piece may itself be a "##" token (a word that starts with "##"), so it is bounded
        # by the longest token of any kind.
        self._longest_first = max(map(len, vocab), default=0)
        self._longest_continuation = max(
            (len(token) - len(CONTINUATION_PREFIX) for token in vocab if token.startswith(CONTINUATION_PREFIX)),
            default=0,
        )

    def word_pieces(self, word: str) -> list[str] | None:
        """The tokens of one word, or ``None`` where BERT gives ``[UNK]``.

        >>> WordPiece({"un": 0, "##aff": 1}).word_pieces("unaff"), WordPiece({"un": 0}).word_pieces("uno")
        (['un', '##aff'], None)
        """
        length = len(word)
        if length > self.max_input_chars_per_word:
            return None
        vocab, pieces, start = self.vocab, [], 0
        longest = self._longest_first
        while start < length:
            end = min(length, start + longest)
            while start < end:
                piece = word[start:end] if start == 0 else CONTINUATION_PREFIX + word[start:end]
                if piece in vocab:
                    break
                end -= 1
            else:
                return None
            pieces.append(piece)
            start = end
            longest = self._longest_continuation
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """The tokens of the whitespace-separated words of ``text`` (already basic-tokenized).

        >>> WordPiece({"[UNK]": 0, "a": 1, "##b": 2}).tokenize("ab ba")
        ['a', '##b', '[UNK]']
        """
        tokens: list[str] = []
        for word in text.split():
            pieces = self.word_pieces(word)
            tokens.extend([self.unk_token] if pieces is None else pieces)
        return tokens


# ---------------------------------------------------------------------------------- vocab.txt files


def read_vocab(path: str | os.PathLike[str]) -> list[str]:
    """The tokens of a ``vocab.txt``, one per line, as transformers' ``load_vocab`` reads them.

    Lines end at ``"\\n"``, ``"\\r\\n"`` or ``"\\r"`` (text mode); only the line break is removed,
    so a token may hold spaces. Raises ``FileNotFoundError`` for a missing file and
    :class:`WordPieceFormatError` for an empty file or one that is not UTF-8. Duplicates are
    checked by :class:`WordPieceTokenizer`.
    """
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.readlines()
    except FileNotFoundError as error:
        raise FileNotFoundError(error.errno, "WordPiece vocabulary (vocab.txt) not found", str(path)) from None
    except UnicodeDecodeError as error:
        raise WordPieceFormatError(f"{path}: not valid UTF-8 ({error})") from None
    if not lines:
        raise WordPieceFormatError(f"{path}: the vocabulary is empty (expected one token per line)")
    return [line.rstrip("\n") for line in lines]


def write_vocab(tokens: Sequence[str], path: str | os.PathLike[str]) -> None:
    """Write ``tokens`` to a ``vocab.txt``, one per line, atomically (temporary file, then rename).

    Raises ``ValueError`` for an empty list, a duplicate token or a token holding a line break,
    any of which would change the ids when the file is read back.

    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "vocab.txt")
    >>> write_vocab(["[PAD]", "[UNK]", "a", "##b"], path)
    >>> read_vocab(path)
    ['[PAD]', '[UNK]', 'a', '##b']
    """
    tokens = list(tokens)
    _index_tokens(tokens, source="tokens to write", error=ValueError)
    for token in tokens:
        if "\n" in token or "\r" in token:
            raise ValueError(f"cannot write token {token!r} to {path}: it contains a line break")
    with atomic_write(path, "w", encoding="utf-8", newline="\n") as file:
        file.writelines(f"{token}\n" for token in tokens)


def _index_tokens(
    tokens: Sequence[str], *, source: str, error: type[Exception] = WordPieceFormatError
) -> dict[str, int]:
    """token -> id (its position), refusing an empty list and duplicates; messages name ``source``."""
    if not tokens:
        raise error(f"{source}: the vocabulary is empty")
    index: dict[str, int] = {}
    for token_id, token in enumerate(tokens):
        if not isinstance(token, str):
            raise TypeError(f"{source}: tokens are str, got {type(token).__name__} {token!r} at id {token_id}")
        first = index.setdefault(token, token_id)
        if first != token_id:
            # transformers would silently give the token its later id and lose the earlier one.
            raise error(
                f"{source}: token {token!r} appears twice, on lines {first + 1} and {token_id + 1} "
                f"(ids {first} and {token_id}); each token must appear once"
            )
    return index


# -------------------------------------------------------------------------------------- tokenizer


class WordPieceTokenizer:
    """Text <-> BERT vocabulary ids, equal to transformers' ``BertTokenizer`` (no ``[CLS]``/``[SEP]`` added).

    ``tokens`` is the vocabulary in id order (``vocab.txt``'s lines); see :meth:`from_file`.
    ``do_lower_case``, ``strip_accents`` and ``tokenize_chinese_chars`` mean what they mean for
    ``BertTokenizer``; use ``do_lower_case=False`` for cased checkpoints. The special tokens
    must all be in the vocabulary. ``source`` names the vocabulary in error messages.

    The ids are those of transformers 5's (Rust) ``BertTokenizer``, or with ``legacy=True`` those of
    transformers 4.x's Python one; the two differ on rare characters only (see the module's
    documentation): a code point that Unicode has not assigned, for instance, is part of its word
    in the first and deleted in the second.

    >>> tok = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "!"])
    >>> tok.tokenize("UNAFFABLE!! [MASK] able")
    ['un', '##aff', '##able', '!', '!', '[MASK]', '[UNK]']
    >>> tok.encode("unaffable [MASK]"), tok.cls_id, tok.sep_id, tok.vocab_size
    ([5, 6, 7, 4], 2, 3, 9)
    >>> tok.decode([2, 5, 6, 7, 8, 3])
    '[CLS] unaffable ! [SEP]'
    >>> tok.tokenize("un\\u0378aff"), WordPieceTokenizer(tok.tokens, legacy=True).tokenize("un\\u0378aff")
    (['[UNK]'], ['un', '##aff'])
    """

    def __init__(
        self,
        tokens: Sequence[str],
        *,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        unk_token: str = "[UNK]",
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        mask_token: str = "[MASK]",
        max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
        cache_size: int = DEFAULT_CACHE_SIZE,
        legacy: bool = False,
        source: str = "WordPiece vocabulary",
    ) -> None:
        self.tokens: list[str] = list(tokens)
        self.token_ids: dict[str, int] = _index_tokens(self.tokens, source=source)
        self.source = source
        self.do_lower_case = do_lower_case
        self.legacy = legacy
        specials = {"unk": unk_token, "cls": cls_token, "sep": sep_token, "pad": pad_token, "mask": mask_token}
        missing = [f"{role} token {token!r}" for role, token in specials.items() if token not in self.token_ids]
        if missing:
            raise WordPieceFormatError(
                f"{source}: lacks the {', '.join(missing)}; BERT vocabularies start with "
                f"{', '.join(BERT_SPECIAL_TOKENS)} (or pass the names this one uses)"
            )
        self.unk_token, self.cls_token, self.sep_token = unk_token, cls_token, sep_token
        self.pad_token, self.mask_token = pad_token, mask_token
        self._special_ids = {token: self.token_ids[token] for token in specials.values()}
        # The Rust tokenizer matches special tokens in the text as written (they are added tokens
        # with normalized=False); the Python one lowercased around them first.
        self._specials = SpecialTokenSplitter(self._special_ids, lowercase=do_lower_case and legacy)
        self.basic: BasicTokenizer | BertPreTokenizer
        if legacy:
            # transformers passes the special tokens as `never_split`: a word that only becomes a
            # special token after cleaning (cased "[MA\x00SK]") is kept whole too.
            self.basic = BasicTokenizer(
                do_lower_case=do_lower_case,
                never_split=self._special_ids,
                tokenize_chinese_chars=tokenize_chinese_chars,
                strip_accents=strip_accents,
                cache_size=1,  # unused: this class caches whole words itself
            )
        else:
            self.basic = BertPreTokenizer(
                do_lower_case=do_lower_case,
                tokenize_chinese_chars=tokenize_chinese_chars,
                strip_accents=strip_accents,
                cache_size=1,
            )
        self.wordpiece = WordPiece(
            self.token_ids, unk_token=unk_token, max_input_chars_per_word=max_input_chars_per_word
        )
        self._unk_ids = (self.token_ids[unk_token],)
        self._cache = WordCache(self._word_ids, cache_size)

    @classmethod
    def from_file(
        cls,
        vocab_txt: str | os.PathLike[str],
        *,
        do_lower_case: bool = True,
        strip_accents: bool | None = None,
        tokenize_chinese_chars: bool = True,
        unk_token: str = "[UNK]",
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        pad_token: str = "[PAD]",
        mask_token: str = "[MASK]",
        max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
        cache_size: int = DEFAULT_CACHE_SIZE,
        legacy: bool = False,
    ) -> WordPieceTokenizer:
        """Load a ``vocab.txt`` (one token per line, id = line number from 0).

        Raises ``FileNotFoundError`` for a missing file and :class:`WordPieceFormatError`, naming
        the file, for an empty file, a duplicate token or a missing special token.
        """
        return cls(
            read_vocab(vocab_txt),
            do_lower_case=do_lower_case,
            strip_accents=strip_accents,
            tokenize_chinese_chars=tokenize_chinese_chars,
            unk_token=unk_token,
            cls_token=cls_token,
            sep_token=sep_token,
            pad_token=pad_token,
            mask_token=mask_token,
            max_input_chars_per_word=max_input_chars_per_word,
            cache_size=cache_size,
            legacy=legacy,
            source=str(vocab_txt),
        )

    # ---------------------------------------------------------------- lookups

    @property
    def vocab_size(self) -> int:
        """Number of tokens (lines of ``vocab.txt``)."""
        return len(self.tokens)

    @property
    def unk_id(self) -> int:
        """Id of ``[UNK]``."""
        return self._special_ids[self.unk_token]

    @property
    def cls_id(self) -> int:
        """Id of ``[CLS]``."""
        return self._special_ids[self.cls_token]

    @property
    def sep_id(self) -> int:
        """Id of ``[SEP]``."""
        return self._special_ids[self.sep_token]

    @property
    def pad_id(self) -> int:
        """Id of ``[PAD]``."""
        return self._special_ids[self.pad_token]

    @property
    def mask_id(self) -> int:
        """Id of ``[MASK]``."""
        return self._special_ids[self.mask_token]

    def id_to_token(self, token_id: int) -> str:
        """The token with id ``token_id``; ``IndexError`` naming it when out of range.

        >>> WordPieceTokenizer(list(BERT_SPECIAL_TOKENS)).id_to_token(4)
        '[MASK]'
        """
        if not 0 <= token_id < len(self.tokens):
            raise IndexError(f"token id {token_id} is out of range for {self.source} ({len(self.tokens)} tokens)")
        return self.tokens[token_id]

    def token_to_id(self, token: str) -> int:
        """The id of ``token``; ``KeyError`` naming it when it is not in the vocabulary.

        >>> WordPieceTokenizer(list(BERT_SPECIAL_TOKENS)).token_to_id("[SEP]")
        3
        """
        try:
            return self.token_ids[token]
        except KeyError:
            raise KeyError(f"token {token!r} is not in {self.source}") from None

    # ---------------------------------------------------------------- encoding

    def _word_ids(self, word: str) -> tuple[int, ...]:
        token_ids = self.token_ids
        word_pieces = self.wordpiece.word_pieces
        max_chars = self.wordpiece.max_input_chars_per_word
        ids: list[int] = []
        for token in self.basic.split_word(word):
            token_id = token_ids.get(token)
            if token_id is not None and len(token) <= max_chars:
                ids.append(token_id)  # a whole token: what the greedy match finds first
                continue
            pieces = word_pieces(token)
            ids.extend(self._unk_ids if pieces is None else map(token_ids.__getitem__, pieces))
        return tuple(ids)

    def encode(self, text: str) -> list[int]:
        """Vocabulary ids of ``text``, without ``[CLS]``/``[SEP]`` (``BertTokenizer``'s
        ``encode(text, add_special_tokens=False)``).

        Text holding a lone surrogate raises ``ValueError`` naming its position.

        >>> WordPieceTokenizer([*BERT_SPECIAL_TOKENS, "a", "##b"]).encode("AB [SEP] ba")
        [5, 6, 3, 1]
        """
        ids: list[int] = []
        words = self.basic.words
        cached = self._cache.__getitem__
        try:
            for chunk, special_id in self._specials.split(text):
                if special_id is None:
                    ids.extend(chain.from_iterable(map(cached, words(chunk))))
                else:
                    ids.append(special_id)
        except ValueError:
            check_unicode(text, reader=_READER)  # a lone surrogate: say where it is in the whole text
            raise
        return ids

    def tokenize(self, text: str) -> list[str]:
        """The tokens of ``text`` (``BertTokenizer.tokenize``).

        >>> WordPieceTokenizer([*BERT_SPECIAL_TOKENS, "a", "##b"]).tokenize("AB [SEP] ba")
        ['a', '##b', '[SEP]', '[UNK]']
        """
        return list(map(self.tokens.__getitem__, self.encode(text)))

    # ---------------------------------------------------------------- decoding

    def decode(self, ids: Iterable[int], *, clean_up_tokenization_spaces: bool = False) -> str:
        """The tokens of ``ids`` joined by spaces, with ``" ##"`` removed (``convert_tokens_to_string``).

        Special tokens stay as text. ``clean_up_tokenization_spaces=True`` also removes the space
        before ``. ? ! ,`` and English contractions, as transformers 4.x's ``BertTokenizer.decode(ids)``
        does by default (transformers 5's removes the space before ``. ? ! ,`` only).

        >>> tok = WordPieceTokenizer([*BERT_SPECIAL_TOKENS, "a", "##b", "."])
        >>> tok.decode([5, 6, 7]), tok.decode([5, 6, 7], clean_up_tokenization_spaces=True)
        ('ab .', 'ab.')
        """
        text = " ".join(map(self.id_to_token, ids)).replace(" ##", "").strip()
        if clean_up_tokenization_spaces:
            text = _clean_up_tokenization(text)
        return text

    def __repr__(self) -> str:
        name, size = type(self).__name__, self.vocab_size
        legacy = ", legacy=True" if self.legacy else ""
        return f"{name}({self.source!r}, {size} tokens, do_lower_case={self.do_lower_case}{legacy})"


def _clean_up_tokenization(text: str) -> str:
    """transformers' ``PreTrainedTokenizerBase.clean_up_tokenization``, verbatim."""
    return (
        text.replace(" .", ".")
        .replace(" ?", "?")
        .replace(" !", "!")
        .replace(" ,", ",")
        .replace(" ' ", "'")
        .replace(" n't", "n't")
        .replace(" 'm", "'m")
        .replace(" 's", "'s")
        .replace(" 've", "'ve")
        .replace(" 're", "'re")
    )


# ---------------------------------------------------------------------------------------- training


def train_wordpiece_vocab(
    texts: Iterable[str],
    vocab_size: int,
    *,
    do_lower_case: bool = True,
    strip_accents: bool | None = None,
    tokenize_chinese_chars: bool = True,
    min_frequency: int = 2,
    special_tokens: Sequence[str] = BERT_SPECIAL_TOKENS,
    max_input_chars_per_word: int = MAX_INPUT_CHARS_PER_WORD,
    legacy: bool = False,
    progress: bool = False,
) -> list[str]:
    """Learn a WordPiece vocabulary of at most ``vocab_size`` tokens from ``texts``.

    The vocabulary holds, in this order: ``special_tokens``; every character of the words
    seen (most frequent first) and then each of them as a ``##`` continuation, so that any word
    made of seen characters can be encoded; then tokens learned by merging the most frequent
    pair of adjacent pieces within words (``"l" + "##o" -> "lo"``, ``"##o" + "##w" -> "##ow"``,
    ties broken by the pair itself, so results are reproducible), as HF ``tokenizers``'
    WordPiece trainer does, until ``vocab_size`` tokens or until no pair occurs ``min_frequency``
    times. Words are counted after the same pre-tokenisation as :class:`WordPieceTokenizer`
    with these options (``legacy`` included), so pass the ``do_lower_case`` you will encode with. Special tokens
    written in the text, and words longer than ``max_input_chars_per_word``, are not counted.

    >>> vocab = train_wordpiece_vocab(["low lower lowest"] * 2, vocab_size=24)
    >>> vocab[5:12]
    ['l', 'o', 'w', 'e', 'r', 's', 't']
    >>> vocab[12:19]
    ['##l', '##o', '##w', '##e', '##r', '##s', '##t']
    >>> vocab[19:]
    ['##ow', 'low', 'lowe', '##st', 'lower']
    """
    special_tokens = list(special_tokens)
    _index_tokens(special_tokens, source="special_tokens", error=ValueError)
    specials = SpecialTokenSplitter(dict.fromkeys(special_tokens, 0), lowercase=do_lower_case and legacy)
    special_set = set(special_tokens)
    basic: BasicTokenizer | BertPreTokenizer
    if legacy:
        basic = BasicTokenizer(
            do_lower_case=do_lower_case,
            never_split=special_tokens,
            tokenize_chinese_chars=tokenize_chinese_chars,
            strip_accents=strip_accents,
        )
    else:
        basic = BertPreTokenizer(
            do_lower_case=do_lower_case, tokenize_chinese_chars=tokenize_chinese_chars, strip_accents=strip_accents
        )
    raw_words: Counter[str] = Counter()
    for text in tqdm(texts, desc="counting words", unit="text", disable=not progress):
        for chunk, special_id in specials.split(text):
            if special_id is None:
                raw_words.update(basic.words(chunk))
    word_counts: Counter[str] = Counter()
    for raw_word, count in raw_words.items():
        for word in basic.split_word(raw_word):
            if word not in special_set and len(word) <= max_input_chars_per_word:
                word_counts[word] += count

    char_counts: Counter[str] = Counter()
    for word, count in word_counts.items():
        for char in word:
            char_counts[char] += count
    alphabet = sorted(char_counts, key=lambda char: (-char_counts[char], char))
    vocab = [*special_tokens, *alphabet, *(CONTINUATION_PREFIX + char for char in alphabet)]
    if len(vocab) > vocab_size:
        raise ValueError(
            f"vocab_size={vocab_size} is too small: the {len(special_tokens)} special tokens and the "
            f"{len(alphabet)} characters of the text (each also as a ## continuation) need {len(vocab)}"
        )
    known = set(vocab)
    budget = vocab_size - len(vocab)
    vocab.extend(_learn_merges(word_counts, budget, known, min_frequency=min_frequency, progress=progress))
    return vocab


def _learn_merges(
    word_counts: Mapping[str, int], budget: int, known: set[str], *, min_frequency: int, progress: bool
) -> list[str]:
    """New tokens from merging the most frequent adjacent pieces, until ``budget`` new tokens."""
    words = [[word[0], *(CONTINUATION_PREFIX + char for char in word[1:])] for word in word_counts]
    freqs = list(word_counts.values())
    pair_counts: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for i, pieces in enumerate(words):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    # A max-heap of (-count, pair) with lazy deletion: entries whose count changed are skipped.
    heap = [(-count, pair) for pair, count in pair_counts.items()]
    heapq.heapify(heap)
    new_tokens: list[str] = []
    bar = tqdm(total=budget, desc="learning WordPiece tokens", unit="token", disable=not progress)
    while len(new_tokens) < budget and heap:
        negative_count, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -negative_count:
            continue  # stale
        if -negative_count < min_frequency:
            break
        left, right = pair
        merged = left + right[len(CONTINUATION_PREFIX) :]
        if merged not in known:  # two different pairs may spell the same token
            known.add(merged)
            new_tokens.append(merged)
            bar.update()
        changed: set[tuple[str, str]] = set()
        for i in where.pop(pair):
            pieces, freq = words[i], freqs[i]
            for old in zip(pieces, pieces[1:]):
                pair_counts[old] -= freq
                changed.add(old)
            merged_pieces, j = [], 0
            while j < len(pieces):
                if j + 1 < len(pieces) and pieces[j] == left and pieces[j + 1] == right:
                    merged_pieces.append(merged)
                    j += 2
                else:
                    merged_pieces.append(pieces[j])
                    j += 1
            words[i] = merged_pieces
            for new in zip(merged_pieces, merged_pieces[1:]):
                pair_counts[new] += freq
                where[new].add(i)
                changed.add(new)
        pair_counts.pop(pair, None)
        for changed_pair in changed:
            count = pair_counts.get(changed_pair, 0)
            if count > 0:
                heapq.heappush(heap, (-count, changed_pair))
            else:
                pair_counts.pop(changed_pair, None)
                where.pop(changed_pair, None)
    bar.close()
    return new_tokens
