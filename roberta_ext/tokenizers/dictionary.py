"""A fairseq-compatible symbol dictionary (``dict.txt``) without fairseq or torch.

fairseq models do not see GPT-2 ids, WordPiece ids or SentencePiece ids: they see *dictionary
indices*. A ``dict.txt`` lists one ``<symbol> <count>`` per line; the index of a symbol is its
line number plus the number of special symbols that come first (``<s>``=0, ``<pad>``=1,
``</s>``=2, ``<unk>``=3 by default). This module ports the parts of ``fairseq.data.Dictionary``
that loading and running a model need, with the same results, and with errors that name the file
and line instead of fairseq's bare messages.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from ..atomic import atomic_write
from .errors import TokenizerError

__all__ = ["Dictionary", "DictionaryFormatError"]

# fairseq.tokenizer.tokenize_line: any run of whitespace (stdlib `re`, Unicode-aware) is one space.
_SPACE_NORMALIZER = re.compile(r"\s+")

# A dict.txt row may end with this flag to redefine a symbol that appeared earlier.
_OVERWRITE_FLAG = "#fairseq:overwrite"


class DictionaryFormatError(TokenizerError):
    """A ``dict.txt`` that fairseq would also reject (or misread); the message names file and line."""


class Dictionary:
    """A mapping between symbols and consecutive indices, as ``fairseq.data.Dictionary``.

    >>> d = Dictionary()
    >>> d.add_symbol("hello")
    4
    >>> d.index("hello"), d.index("absent") == d.unk()
    (4, True)
    >>> d.string([0, 4, 3, 2])
    'hello <unk>'
    """

    def __init__(
        self,
        *,
        bos: str = "<s>",
        pad: str = "<pad>",
        eos: str = "</s>",
        unk: str = "<unk>",
        extra_special_symbols: Iterable[str] | None = None,
    ) -> None:
        self.bos_word, self.pad_word, self.eos_word, self.unk_word = bos, pad, eos, unk
        self.source = "dictionary"
        """Where the symbols came from (the ``dict.txt`` read), for messages."""
        # `symbols` may hold a symbol twice (a row flagged #fairseq:overwrite); `indices` then
        # points at the later copy, exactly as in fairseq.
        self.symbols: list[str] = []
        self.count: list[int] = []
        self.indices: dict[str, int] = {}
        self.bos_index = self.add_symbol(bos)
        self.pad_index = self.add_symbol(pad)
        self.eos_index = self.add_symbol(eos)
        self.unk_index = self.add_symbol(unk)
        for symbol in extra_special_symbols or ():
            self.add_symbol(symbol)
        self.nspecial = len(self.symbols)

    # ------------------------------------------------------------------ lookups

    def __len__(self) -> int:
        return len(self.symbols)

    def __contains__(self, symbol: object) -> bool:
        return symbol in self.indices

    def __getitem__(self, index: int) -> str:
        """The symbol at ``index``; ``<unk>`` past the end (fairseq's behaviour, not IndexError)."""
        if index < len(self.symbols):
            return self.symbols[index]
        return self.unk_word

    def __eq__(self, other: object) -> bool:
        # fairseq compares the symbol -> index maps only, not counts or special-symbol names.
        if not isinstance(other, Dictionary):
            return NotImplemented
        return self.indices == other.indices

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self)} symbols, {self.nspecial} special)"

    def index(self, symbol: str) -> int:
        """The index of ``symbol``, or :meth:`unk` when it is absent.

        >>> Dictionary().index("</s>")
        2
        """
        if not isinstance(symbol, str):
            raise TypeError(f"dictionary symbols are str, got {type(symbol).__name__}: {symbol!r}")
        return self.indices.get(symbol, self.unk_index)

    def bos(self) -> int:
        """Index of the beginning-of-sentence symbol (``<s>``)."""
        return self.bos_index

    def pad(self) -> int:
        """Index of the padding symbol (``<pad>``)."""
        return self.pad_index

    def eos(self) -> int:
        """Index of the end-of-sentence symbol (``</s>``)."""
        return self.eos_index

    def unk(self) -> int:
        """Index of the unknown symbol (``<unk>``)."""
        return self.unk_index

    # ------------------------------------------------------------------ building

    def add_symbol(self, word: str, n: int = 1, overwrite: bool = False) -> int:
        """Add ``word`` (or add ``n`` to its count) and return its index.

        With ``overwrite=True`` the word gets a *new* index even if present, as fairseq does for
        rows flagged ``#fairseq:overwrite``.

        >>> d = Dictionary()
        >>> d.add_symbol("a"), d.add_symbol("a"), d.add_symbol("a", overwrite=True)
        (4, 4, 5)
        """
        if word in self.indices and not overwrite:
            index = self.indices[word]
            self.count[index] += n
            return index
        index = len(self.symbols)
        self.indices[word] = index
        self.symbols.append(word)
        self.count.append(n)
        return index

    # ------------------------------------------------------------------ text <-> indices

    def string(
        self,
        indices: Iterable[int],
        *,
        include_eos: bool = False,
        escape_unk: bool = False,
        unk_string: str | None = None,
        extra_symbols_to_ignore: Iterable[int] | None = None,
        separator: str = " ",
    ) -> str:
        """Join the symbols of a 1-D sequence of indices, as fairseq's ``Dictionary.string``.

        ``<s>`` is always skipped, ``</s>`` unless ``include_eos``; the unknown index becomes
        ``unk_string`` if given, else ``<unk>`` (``<<unk>>`` with ``escape_unk``).

        >>> d = Dictionary()
        >>> d.add_symbol("x")
        4
        >>> d.string([0, 4, 3, 2]), d.string([4, 2], include_eos=True), d.string([3], escape_unk=True)
        ('x <unk>', 'x </s>', '<<unk>>')
        """
        ignored = set(extra_symbols_to_ignore or ())
        if not include_eos:
            ignored.add(self.eos_index)
        ignored.add(self.bos_index)
        if unk_string is None:
            unk_string = f"<{self.unk_word}>" if escape_unk else self.unk_word
        return separator.join(
            unk_string if index == self.unk_index else self[index]
            for index in map(int, indices)
            if index not in ignored
        )

    def encode_line(self, line: str, *, append_eos: bool = True) -> list[int]:
        """Indices of the whitespace-separated symbols of ``line``; absent symbols map to ``<unk>``.

        Same as fairseq's ``encode_line(line, add_if_not_exist=False)``: every run of Unicode
        whitespace separates symbols, leading and trailing whitespace is ignored.

        >>> d = Dictionary()
        >>> d.add_symbol("a")
        4
        >>> d.encode_line("  a\\tb\\n")
        [4, 3, 2]
        """
        words = _SPACE_NORMALIZER.sub(" ", line).strip().split()
        indices = [self.indices.get(word, self.unk_index) for word in words]
        if append_eos:
            indices.append(self.eos_index)
        return indices

    # ------------------------------------------------------------------ files

    @classmethod
    def from_symbols(
        cls, symbols: Iterable[str], *, bos: str, pad: str, eos: str, unk: str, source: str = "vocabulary"
    ) -> Dictionary:
        """A dictionary whose index ``i`` is ``symbols[i]``, specials included where they stand:
        the index space of a transformers checkpoint (``vocab.txt``, ``vocab.json``, a
        SentencePiece model), where ``[CLS]``/``[SEP]`` play fairseq's ``<s>``/``</s>``.

        >>> d = Dictionary.from_symbols(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello"],
        ...                             bos="[CLS]", pad="[PAD]", eos="[SEP]", unk="[UNK]")
        >>> d.bos(), d.pad(), d.eos(), d.index("hello"), d.index("absent")
        (2, 0, 3, 4, 1)
        """
        d = cls.__new__(cls)
        d.bos_word, d.pad_word, d.eos_word, d.unk_word = bos, pad, eos, unk
        d.source = source
        d.symbols, d.count, d.indices = [], [], {}
        for index, symbol in enumerate(symbols):
            if symbol in d.indices:
                raise DictionaryFormatError(
                    f"{source}: {symbol!r} appears twice (indices {d.indices[symbol]} and {index})"
                )
            d.indices[symbol] = index
            d.symbols.append(symbol)
            d.count.append(1)
        for role, symbol in (("bos", bos), ("pad", pad), ("eos", eos), ("unk", unk)):
            if symbol not in d.indices:
                raise DictionaryFormatError(f"{source}: has no {role} symbol {symbol!r}")
        d.bos_index, d.pad_index, d.eos_index, d.unk_index = (d.indices[s] for s in (bos, pad, eos, unk))
        d.nspecial = 0
        return d

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Dictionary:
        """Read a fairseq ``dict.txt``: rows ``<symbol> <count> [#fairseq:overwrite]``.

        The default special symbols come first, as in fairseq. Raises ``FileNotFoundError`` for a
        missing file and :class:`DictionaryFormatError` (naming file and line) for a row that
        fairseq would reject.

        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "dict.txt")
        >>> with open(path, "w", encoding="utf-8") as f:
        ...     _ = f.write("hello 7\\nworld 3\\n")
        >>> Dictionary.load(path).index("world")
        5
        """
        dictionary = cls()
        path = Path(path)
        dictionary.source = str(path)
        try:
            # Text mode with universal newlines, like fairseq: "\n", "\r\n" and "\r" end a row.
            with open(path, encoding="utf-8") as file:
                lines = file.readlines()
        except FileNotFoundError as error:
            raise FileNotFoundError(error.errno, "dictionary file not found", str(path)) from None
        except UnicodeDecodeError as error:
            raise DictionaryFormatError(f"{path}: not valid UTF-8 ({error})") from None
        for line_number, line in enumerate(lines, start=1):
            dictionary._add_row(line, where=f"{path}:{line_number}")
        return dictionary

    def _add_row(self, line: str, *, where: str) -> None:
        # fairseq splits on the *last* space, so symbols may themselves contain spaces.
        row = line.rstrip()
        expected = f"expected '<symbol> <count> [{_OVERWRITE_FLAG}]'"
        fields = row.rsplit(" ", 1)
        if len(fields) != 2:
            raise DictionaryFormatError(f"{where}: {expected}, got {line!r}")
        word, count_field = fields
        overwrite = count_field == _OVERWRITE_FLAG
        if overwrite:
            fields = word.rsplit(" ", 1)
            if len(fields) != 2:
                raise DictionaryFormatError(f"{where}: {expected}, got {line!r}")
            word, count_field = fields
        try:
            count = int(count_field)  # int() as in fairseq, so "+5" and "1_000" are accepted too
        except ValueError:
            raise DictionaryFormatError(
                f"{where}: count {count_field!r} of symbol {word!r} is not an integer"
            ) from None
        if word in self.indices and not overwrite:
            raise DictionaryFormatError(
                f"{where}: duplicate symbol {word!r} (already index {self.indices[word]}); "
                f"end the row with {_OVERWRITE_FLAG} to redefine it on purpose"
            )
        self.add_symbol(word, n=count, overwrite=overwrite)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the non-special symbols in ``dict.txt`` format, atomically.

        The file is written to a temporary name and moved into place, so an interrupted save never
        leaves half a dictionary behind. A symbol defined twice (via ``overwrite``) is written with
        the ``#fairseq:overwrite`` flag so that :meth:`load` rebuilds the same indices.

        >>> import tempfile, os
        >>> d = Dictionary()
        >>> d.add_symbol("hi", n=5)
        4
        >>> path = os.path.join(tempfile.mkdtemp(), "dict.txt")
        >>> d.save(path)
        >>> open(path, encoding="utf-8").read()
        'hi 5\\n'
        >>> Dictionary.load(path) == d
        True
        """
        rows = self._rows()
        with atomic_write(path, "w", encoding="utf-8", newline="\n") as file:
            file.writelines(rows)

    def _rows(self) -> list[str]:
        seen = set(self.symbols[: self.nspecial])
        rows = []
        for word, count in zip(self.symbols[self.nspecial :], self.count[self.nspecial :]):
            # A line break would split the row; "\r" alone ends a row in text mode too.
            if "\n" in word or "\r" in word:
                raise ValueError(f"cannot save symbol {word!r}: it contains a line break")
            flag = f" {_OVERWRITE_FLAG}" if word in seen else ""
            rows.append(f"{word} {count}{flag}\n")
            seen.add(word)
        return rows
