"""GPT-2 byte-level BPE exactly as fairseq runs it for RoBERTa, without fairseq or torch.

Three layers, each giving the same answers as its fairseq counterpart:

* :class:`ReferenceGPT2BPE` — a plain port of OpenAI's ``encoder.py`` (which is what fairseq's
  ``gpt2_bpe_utils.Encoder`` is). Slow and easy to check by eye: the oracle for the tests.
* :class:`GPT2BPE` — the same ids, fast: one ``regex.findall`` per text, a bounded per-word
  cache, table-driven byte mapping and a rank dict for merges.
* :class:`FairseqGPT2Tokenizer` — GPT-2 BPE followed by a fairseq :class:`Dictionary`, returning
  the *dictionary indices* a RoBERTa model consumes (GPT-2 id ``n`` -> symbol ``"n"`` in
  ``dict.txt`` -> index), in one pass.

File formats: ``encoder.json`` maps byte-level token strings to GPT-2 ids; ``vocab.bpe`` starts
with a ``#version`` line followed by one merge ``"<left> <right>"`` per line, best first.

Inputs that are not valid Unicode text: a ``str`` holding lone surrogates (for instance bytes
decoded with ``errors="surrogateescape"``) cannot be encoded to UTF-8, so every encoder here
raises ``UnicodeEncodeError`` for it, as fairseq does. Decode such bytes properly first.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Generic, TypeVar

import regex

from .dictionary import Dictionary
from .errors import TokenizerError

__all__ = [
    "GPT2_SPLIT_PATTERN",
    "FairseqGPT2Tokenizer",
    "GPT2BPE",
    "GPT2BPEFormatError",
    "ReferenceGPT2BPE",
    "WordCache",
    "bytes_to_unicode",
    "read_encoder_json",
    "read_vocab_bpe",
]

# GPT-2's pre-tokenisation, verbatim from fairseq/OpenAI. It is case-sensitive on purpose
# (upstream's own comment regrets it): "'S" is not split off like "'s" is. Changing a single
# character here changes ids, so it stays exactly as released.
GPT2_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_SPLIT = regex.compile(GPT2_SPLIT_PATTERN)
# The same pattern for ASCII-only text, with the Unicode classes spelled out for ASCII
# (\p{L} -> letters, \p{N} -> digits, \s -> the six ASCII White_Space characters) and run by
# the standard library's `re`, which is about twice as fast as `regex` on it. Equality with
# GPT2_SPLIT_PATTERN over all of ASCII is tested (tests/tokenizers/test_gpt2_bpe.py).
_ASCII_SPACE = r" \t\n\x0b\x0c\r"
_ASCII_SPLIT = re.compile(
    rf"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^{_ASCII_SPACE}A-Za-z0-9]+"""
    rf"""|[{_ASCII_SPACE}]+(?![^{_ASCII_SPACE}])|[{_ASCII_SPACE}]+"""
)


def split_words(text: str) -> list[str]:
    """GPT-2's pre-tokenisation: ``regex.findall(GPT2_SPLIT_PATTERN, text)``, with a faster
    path for ASCII-only text.

    >>> split_words("Hello world's  end!")
    ['Hello', ' world', "'s", ' ', ' end', '!']
    """
    return (_ASCII_SPLIT if text.isascii() else _SPLIT).findall(text)


# fairseq's GPT2BPE.decode passes exactly these dictionary symbols through as literal text; any
# other symbol must be a GPT-2 id written as an integer, else int() raises ValueError (a
# behaviour fairseq's whole-word masking relies on to spot "<s>", "madeupword0000", ...).
_LITERAL_SYMBOLS = frozenset({"<unk>", "<mask>"})

_NO_MERGE = float("inf")  # rank of a pair that has no merge rule

DEFAULT_CACHE_SIZE = 100_000
"""Words remembered by the fast encoders before their cache is cleared."""


class GPT2BPEFormatError(TokenizerError):
    """An ``encoder.json`` / ``vocab.bpe`` pair that cannot encode every text; names the file."""


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible map from each of the 256 byte values to a printable character.

    Printable Latin-1 bytes map to themselves; the 68 others (controls, space, NBSP, soft
    hyphen, ...) map to ``chr(256 + k)`` so that no token string contains whitespace.

    >>> table = bytes_to_unicode()
    >>> table[ord("a")], table[ord(" ")], table[ord("\\n")], len(set(table.values()))
    ('a', 'Ġ', 'Ċ', 256)
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    others = [b for b in range(256) if b not in printable]
    table = {b: chr(b) for b in printable}
    table.update({b: chr(256 + k) for k, b in enumerate(others)})
    return dict(sorted(table.items()))


# ---------------------------------------------------------------------------------------- files


def read_encoder_json(path: Path) -> dict[str, int]:
    """The token -> GPT-2 id map of an ``encoder.json`` (or transformers' ``vocab.json``), unchecked.

    Raises ``FileNotFoundError`` for a missing file and :class:`GPT2BPEFormatError`, naming the
    file, for one that is not a JSON object. :meth:`GPT2BPE.from_files` checks the ids as well.
    """
    try:
        with open(path, encoding="utf-8") as file:
            encoder = json.load(file)
    except FileNotFoundError as error:
        raise FileNotFoundError(error.errno, "GPT-2 encoder.json not found", str(path)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise GPT2BPEFormatError(f"{path}: not a valid JSON file ({error})") from None
    if not isinstance(encoder, dict):
        raise GPT2BPEFormatError(
            f"{path}: expected a JSON object mapping token strings to ids, got a {type(encoder).__name__}"
        )
    return encoder


def read_vocab_bpe(path: Path) -> list[tuple[str, str]]:
    """The merges of a ``vocab.bpe`` (or transformers' ``merges.txt``), best first, as fairseq reads them.

    The first line must be the ``#version`` header; a file that does not end with a newline loses
    its last merge, as in fairseq, with a warning. Raises ``FileNotFoundError`` for a missing file
    and :class:`GPT2BPEFormatError`, naming the file and line, for anything else amiss.
    """
    try:
        # Universal newlines, as fairseq reads it: "\r\n" and "\r" become "\n".
        with open(path, encoding="utf-8") as file:
            lines = file.read().split("\n")
    except FileNotFoundError as error:
        raise FileNotFoundError(error.errno, "GPT-2 vocab.bpe not found", str(path)) from None
    except UnicodeDecodeError as error:
        raise GPT2BPEFormatError(f"{path}: not valid UTF-8 ({error})") from None
    if not lines[0].startswith("#version"):
        # fairseq skips line 1 unconditionally; a missing header would silently lose a merge.
        raise GPT2BPEFormatError(f"{path}:1: expected the '#version: 0.2' header line, got {lines[0]!r}")
    if len(lines) > 1 and lines[-1]:
        # fairseq keeps lines[1:-1], assuming a final newline: without one the last merge is
        # dropped. We drop it too (ids must match fairseq's) but say so.
        warnings.warn(
            f"{path} does not end with a newline; its last merge {lines[-1]!r} is ignored, as fairseq ignores it",
            stacklevel=4,
        )
    merges = []
    for line_number, line in enumerate(lines[1:-1], start=2):
        fields = line.split()
        if len(fields) != 2:
            raise GPT2BPEFormatError(f"{path}:{line_number}: expected '<left> <right>', got {line!r}")
        merges.append((fields[0], fields[1]))
    return merges


def _check_vocabulary(
    encoder: Mapping[str, int],
    merges: Sequence[tuple[str, str]],
    *,
    encoder_name: str = "encoder",
    merge_location: Callable[[int], str] = "merge {}".format,
) -> None:
    """Raise GPT2BPEFormatError unless every text encodes and every id decodes.

    fairseq checks none of this and fails later, in the middle of encoding some text.
    """
    byte_symbols = set(bytes_to_unicode().values())
    owner_of_id: dict[int, str] = {}
    for token, token_id in encoder.items():
        if not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0:
            raise GPT2BPEFormatError(f"{encoder_name}: id of {token!r} must be an int >= 0, got {token_id!r}")
        if token_id in owner_of_id:
            raise GPT2BPEFormatError(
                f"{encoder_name}: id {token_id} is given to both {owner_of_id[token_id]!r} and {token!r}"
            )
        owner_of_id[token_id] = token
        if not token or not byte_symbols.issuperset(token):
            raise GPT2BPEFormatError(
                f"{encoder_name}: token {token!r} is not a non-empty string of GPT-2 byte symbols "
                "(see bytes_to_unicode), so it could not be decoded"
            )
    missing_bytes = sorted(byte_symbols.difference(encoder))
    if missing_bytes:
        raise GPT2BPEFormatError(
            f"{encoder_name}: lacks {len(missing_bytes)} of the 256 byte symbols, "
            f"e.g. {missing_bytes[:5]}; texts containing those bytes could not be encoded"
        )
    for number, (left, right) in enumerate(merges, start=1):
        for symbol in (left, right, left + right):
            if symbol not in encoder:
                raise GPT2BPEFormatError(
                    f"{merge_location(number)}: merge {left!r} {right!r} uses {symbol!r}, "
                    f"which is not in {encoder_name}"
                )


def _load_files(
    encoder_json: str | os.PathLike[str], vocab_bpe: str | os.PathLike[str]
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Read and check both files; errors name the file (and line) at fault."""
    encoder = read_encoder_json(Path(encoder_json))
    merges = read_vocab_bpe(Path(vocab_bpe))
    # Merge n is on line n + 1: the header comes first and blank lines were rejected.
    _check_vocabulary(
        encoder,
        merges,
        encoder_name=str(encoder_json),
        merge_location=lambda number: f"{vocab_bpe}:{number + 1}",
    )
    return encoder, merges


# ------------------------------------------------------------------------------------ reference


class ReferenceGPT2BPE:
    """OpenAI's GPT-2 encoder, ported plainly (no cache, no tricks): the oracle for GPT2BPE.

    >>> ref = ReferenceGPT2BPE.from_files("encoder.json", "vocab.bpe")  # doctest: +SKIP
    >>> ref.encode("Hello world"), ref.decode([15496, 995])  # doctest: +SKIP
    ([15496, 995], 'Hello world')
    """

    def __init__(self, encoder: Mapping[str, int], merges: Sequence[tuple[str, str]]) -> None:
        self.encoder = dict(encoder)
        self.decoder = {token_id: token for token, token_id in self.encoder.items()}
        self.byte_encoder = bytes_to_unicode()
        self.byte_decoder = {char: byte for byte, char in self.byte_encoder.items()}
        self.bpe_ranks = {merge: rank for rank, merge in enumerate(merges)}

    @classmethod
    def from_files(cls, encoder_json: str | os.PathLike[str], vocab_bpe: str | os.PathLike[str]) -> ReferenceGPT2BPE:
        """Load ``encoder.json`` and ``vocab.bpe``, checked as by :meth:`GPT2BPE.from_files`."""
        return cls(*_load_files(encoder_json, vocab_bpe))

    def bpe(self, token: str) -> list[str]:
        """Split one byte-encoded word into vocabulary tokens by applying merges, best first."""
        word = list(token)
        while len(word) > 1:
            pairs = set(zip(word, word[1:]))
            best = min(pairs, key=lambda pair: self.bpe_ranks.get(pair, float("inf")))
            if best not in self.bpe_ranks:
                break
            # Merge every occurrence of the best pair, scanning left to right without overlap.
            merged, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    merged.append(word[i] + word[i + 1])
                    i += 2
                else:
                    merged.append(word[i])
                    i += 1
            word = merged
        return word

    def encode(self, text: str) -> list[int]:
        """GPT-2 ids of ``text``."""
        ids: list[int] = []
        for word in regex.findall(GPT2_SPLIT_PATTERN, text):
            token = "".join(self.byte_encoder[b] for b in word.encode("utf-8"))
            ids.extend(self.encoder[piece] for piece in self.bpe(token))
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        """Text of GPT-2 ``ids``; invalid UTF-8 (a split character) becomes U+FFFD."""
        text = "".join(self.decoder[token_id] for token_id in ids)
        return bytes(self.byte_decoder[char] for char in text).decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------- fast


_Item = TypeVar("_Item")  # what a word is encoded into: GPT-2 ids, WordPiece ids, BERT's basic tokens


class WordCache(dict[str, tuple[_Item, ...]], Generic[_Item]):
    """word -> encoded tuple; computes on a miss and forgets everything when full (at ``max_size``
    words). Shared by the GPT-2 and WordPiece encoders.

    Being a dict subclass with ``__missing__`` lets ``map(cache.__getitem__, words)`` run the
    whole hit path in C.

    >>> cache = WordCache(lambda word: tuple(word.upper()), max_size=2)
    >>> cache["ab"], cache["c"], len(cache), cache["d"], len(cache)
    (('A', 'B'), ('C',), 2, ('D',), 1)
    """

    __slots__ = ("_compute", "_max_size")

    def __init__(self, compute: Callable[[str], tuple[_Item, ...]], max_size: int) -> None:
        super().__init__()
        if max_size < 1:
            raise ValueError(f"cache_size must be >= 1, got {max_size}")
        self._compute = compute
        self._max_size = max_size

    def __missing__(self, word: str) -> tuple[_Item, ...]:
        if len(self) >= self._max_size:
            self.clear()  # crude but bounded; real text has a small working set of words
        value = self[word] = self._compute(word)
        return value


class GPT2BPE:
    """GPT-2 byte-level BPE: text <-> GPT-2 ids, identical to fairseq's ``gpt2`` BPE, but fast.

    >>> bpe = GPT2BPE.from_files("encoder.json", "vocab.bpe")  # doctest: +SKIP
    >>> bpe.encode("Hello world")  # doctest: +SKIP
    [15496, 995]
    >>> bpe.decode([15496, 995])  # doctest: +SKIP
    'Hello world'
    """

    def __init__(
        self,
        encoder: Mapping[str, int],
        merges: Sequence[tuple[str, str]],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> None:
        """Build from token -> id and the ordered merges; raises :class:`GPT2BPEFormatError`."""
        _check_vocabulary(encoder, merges)  # again after from_files: cheap, and keeps __init__ safe
        self.encoder: dict[str, int] = dict(encoder)
        self.decoder: dict[int, str] = {token_id: token for token, token_id in self.encoder.items()}
        # Later duplicates win, as in fairseq's dict(zip(merges, range(...))).
        self._ranks = {merge: rank for rank, merge in enumerate(merges)}
        # Byte -> symbol via str.translate on the Latin-1 view of the UTF-8 bytes (one C call),
        # and id -> raw bytes for decoding, so neither direction loops over bytes in Python.
        self._byte_symbols = str.maketrans({chr(b): s for b, s in bytes_to_unicode().items()})
        byte_of_symbol = {s: b for b, s in bytes_to_unicode().items()}
        self._bytes_of_id = {
            token_id: bytes(map(byte_of_symbol.__getitem__, token)) for token, token_id in self.encoder.items()
        }
        self._cache = WordCache(self._word_ids, cache_size)

    @property
    def merges(self) -> list[tuple[str, str]]:
        """The merges, best first (``vocab.bpe`` without its header)."""
        return sorted(self._ranks, key=self._ranks.__getitem__)

    @classmethod
    def from_files(
        cls,
        encoder_json: str | os.PathLike[str],
        vocab_bpe: str | os.PathLike[str],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> GPT2BPE:
        """Load GPT-2's ``encoder.json`` and ``vocab.bpe``.

        Raises ``FileNotFoundError`` for a missing file and :class:`GPT2BPEFormatError`, naming the
        file, for invalid JSON, a malformed merge line, or merges/bytes missing from the encoder.
        """
        encoder, merges = _load_files(encoder_json, vocab_bpe)
        return cls(encoder, merges, cache_size=cache_size)

    # ---------------------------------------------------------------- encoding

    def _merge(self, symbols: str) -> list[str]:
        """Apply merges to one byte-encoded word; same result as ReferenceGPT2BPE.bpe."""
        parts = list(symbols)
        ranks = self._ranks
        while len(parts) > 1:
            pair_ranks = [ranks.get(pair, _NO_MERGE) for pair in zip(parts, parts[1:])]
            best = min(pair_ranks)
            if best == _NO_MERGE:
                break
            # Ranks are unique per pair, so the first position with the best rank holds the pair
            # to merge; merge it there and at every later occurrence, left to right, no overlap.
            start = pair_ranks.index(best)
            left, right = parts[start], parts[start + 1]
            merged, i, n = parts[:start], start, len(parts)
            while i < n:
                if i + 1 < n and parts[i] == left and parts[i + 1] == right:
                    merged.append(left + right)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        return parts

    def _word_ids(self, word: str) -> tuple[int, ...]:
        symbols = word.encode("utf-8").decode("latin-1").translate(self._byte_symbols)
        return tuple(map(self.encoder.__getitem__, self._merge(symbols)))

    def encode(self, text: str) -> list[int]:
        """GPT-2 ids of ``text`` (any ``str`` without lone surrogates).

        >>> bpe.encode("Hello world")  # doctest: +SKIP
        [15496, 995]
        """
        return list(chain.from_iterable(map(self._cache.__getitem__, split_words(text))))

    def encode_pieces(self, text: str) -> list[str]:
        """The byte-level token strings of ``text``, e.g. ``['Hello', 'Ġworld']``.

        >>> bpe.encode_pieces("Hello world")  # doctest: +SKIP
        ['Hello', 'Ġworld']
        """
        return [self.decoder[token_id] for token_id in self.encode(text)]

    def encode_fairseq_string(self, text: str) -> str:
        """fairseq's ``GPT2BPE.encode``: the ids as one space-separated string.

        >>> bpe.encode_fairseq_string("Hello world")  # doctest: +SKIP
        '15496 995'
        """
        return " ".join(map(str, self.encode(text)))

    # ---------------------------------------------------------------- decoding

    def decode(self, ids: Iterable[int]) -> str:
        """Text of GPT-2 ``ids``. Bytes that are not valid UTF-8 (e.g. half of an emoji) become
        U+FFFD, as in fairseq; an id outside the vocabulary raises ``KeyError``.

        >>> bpe.decode([15496, 995])  # doctest: +SKIP
        'Hello world'
        """
        try:
            data = b"".join(map(self._bytes_of_id.__getitem__, ids))
        except KeyError as error:
            raise KeyError(f"GPT-2 id {error.args[0]!r} is not in the vocabulary") from None
        return data.decode("utf-8", errors="replace")

    def decode_fairseq_string(self, x: str) -> str:
        """fairseq's ``GPT2BPE.decode``: text of a space-separated string of dictionary symbols.

        Symbols are GPT-2 ids written as integers, except ``<unk>`` and ``<mask>``, which come
        out as literal text. Any other symbol (``<s>``, ``<pad>``, ``madeupword0000``) raises
        ``ValueError`` from ``int()``, exactly as in fairseq, whose whole-word masking uses that
        error to recognise non-BPE symbols. (An integer that is not a GPT-2 id raises
        ``KeyError``; fairseq fails there with a ``TypeError``.)

        >>> bpe.decode_fairseq_string("15496 <mask> 995")  # doctest: +SKIP
        'Hello<mask> world'
        """
        data = bytearray()
        for symbol in x.split():
            if symbol in _LITERAL_SYMBOLS:
                # fairseq maps each character through the byte decoder; ASCII maps to itself.
                data += symbol.encode("ascii")
            else:
                token_id = int(symbol)
                try:
                    data += self._bytes_of_id[token_id]
                except KeyError:
                    raise KeyError(f"GPT-2 id {token_id} is not in the vocabulary") from None
        return data.decode("utf-8", errors="replace")

    def is_beginning_of_word(self, x: str) -> bool:
        """Whether dictionary symbol ``x`` starts a word (its text starts with a space), as fairseq.

        >>> bpe.is_beginning_of_word("995")  # doctest: +SKIP
        True
        """
        return self.decode_fairseq_string(x).startswith(" ")


# ------------------------------------------------------------------------ BPE + dictionary


class FairseqGPT2Tokenizer:
    """Text -> fairseq dictionary indices for GPT-2-BPE RoBERTa models, in one pass.

    ``encode(text)`` equals fairseq's
    ``dictionary.encode_line(bpe.encode(text), append_eos=False, add_if_not_exist=False)``:
    GPT-2 id ``n`` becomes the index of symbol ``"n"`` in ``dict.txt``, or ``<unk>`` when
    ``dict.txt`` lacks it. No ``<s>``/``</s>`` are added; that is the hub's job. The GPT-2 id ->
    index map is computed once, here: add symbols such as ``<mask>`` to the dictionary before or
    after, but do not redefine numeric symbols afterwards.

    >>> tok = FairseqGPT2Tokenizer.from_files("encoder.json", "vocab.bpe", "dict.txt")  # doctest: +SKIP
    >>> tok.encode("Hello world")  # doctest: +SKIP
    [31414, 232]
    >>> tok.decode([0, 31414, 232, 2])  # doctest: +SKIP
    'Hello world'
    """

    def __init__(self, bpe: GPT2BPE, dictionary: Dictionary, *, cache_size: int = DEFAULT_CACHE_SIZE) -> None:
        self.bpe = bpe
        self.dictionary = dictionary
        # Precomputed once: the hot path never formats an id as text or looks up a symbol.
        self._index_of_id = {token_id: dictionary.index(str(token_id)) for token_id in bpe.decoder}
        # Our own cache of word -> dictionary indices, so a hit skips the GPT-2 ids entirely.
        self._cache = WordCache(self._word_indices, cache_size)

    @classmethod
    def from_files(
        cls,
        encoder_json: str | os.PathLike[str],
        vocab_bpe: str | os.PathLike[str],
        dict_txt: str | os.PathLike[str],
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
    ) -> FairseqGPT2Tokenizer:
        """Load ``encoder.json``, ``vocab.bpe`` and fairseq's ``dict.txt``."""
        bpe = GPT2BPE.from_files(encoder_json, vocab_bpe, cache_size=cache_size)
        return cls(bpe, Dictionary.load(dict_txt), cache_size=cache_size)

    def _word_indices(self, word: str) -> tuple[int, ...]:
        # Uncached GPT-2 ids: caching them in self.bpe as well would only hold memory twice.
        return tuple(map(self._index_of_id.__getitem__, self.bpe._word_ids(word)))

    def encode(self, text: str) -> list[int]:
        """Dictionary indices of ``text``, without ``<s>``/``</s>``.

        >>> tok.encode("Hello world")  # doctest: +SKIP
        [31414, 232]
        """
        return list(chain.from_iterable(map(self._cache.__getitem__, split_words(text))))

    def encode_word(self, word: str, *, first: bool) -> list[int]:
        """Indices of one word of a whitespace-split sentence: a word after the first gets its
        leading space, as GPT-2 BPE sees it inside the sentence (tagging, word alignment).

        >>> tok.encode_word("world", first=False) == tok.encode(" world")  # doctest: +SKIP
        True
        """
        return self.encode(word if first else f" {word}")

    def token_text(self, index: int) -> str:
        """The text one dictionary entry adds to a sentence (``" 1977"``); a special symbol
        (``<s>``, ``madeupword0000``, ...) as itself. How ``fill_mask`` writes its predictions."""
        symbol = self.dictionary[index]
        try:
            return self.bpe.decode_fairseq_string(symbol)
        except (ValueError, KeyError):
            return symbol

    def encode_batch(self, texts: Iterable[str]) -> list[list[int]]:
        """:meth:`encode` for each text.

        >>> tok.encode_batch(["Hello world", "Hello"])  # doctest: +SKIP
        [[31414, 232], [31414]]
        """
        return [self.encode(text) for text in texts]

    def decode(self, indices: Iterable[int]) -> str:
        """Text of dictionary ``indices``, as fairseq's hub: ``bpe.decode(dictionary.string(indices))``.

        ``<s>`` and ``</s>`` are dropped, ``<unk>`` and ``<mask>`` come out as literal text, and
        ``<pad>`` or other non-BPE symbols raise ``ValueError`` (as in fairseq).

        >>> tok.decode([0, 31414, 232, 2])  # doctest: +SKIP
        'Hello world'
        """
        return self.bpe.decode_fairseq_string(self.dictionary.string(indices))
