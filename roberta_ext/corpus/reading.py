"""Reading text corpora as fairseq reads them: lines of one or several parallel files, in chunks.

What "as fairseq reads them" means, line by line (the quirks are kept on purpose; our outputs are
fed to ``fairseq-preprocess`` next to files produced by fairseq's own scripts):

* A file is read as ``open(path, "r", encoding="utf-8")`` reads it: universal newlines, so
  ``"\\n"``, ``"\\r\\n"`` and a lone ``"\\r"`` each end a line (``"\\x85"``, ``"\\u2028"`` and other
  Unicode line breaks do not). Standard input is read as CPython's ``sys.stdin`` on POSIX reads
  it: lines end at ``"\\n"`` only, so a ``"\\r"`` inside a line stays there.
* Each line is ``str.strip()``-ed (:func:`decode_row`).

Files are read as bytes and cut into :class:`Chunk` s of rows, the unit of work a
:class:`~roberta_ext.corpus.pool.OrderedRunner` sends to a worker; decoding happens in the
workers, and a line that is not UTF-8 is reported with its file and line number.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from collections.abc import Iterator, Sequence
from itertools import zip_longest
from typing import IO, NamedTuple

from .._text import counted, undecodable
from ..errors import RobertaExtError

__all__ = [
    "CHUNK_BYTES",
    "CHUNK_ROWS",
    "STDIO",
    "Chunk",
    "CorpusError",
    "InputFile",
    "UndecodableLine",
    "decode_row",
    "read_chunks",
    "total_size",
]

STDIO = "-"
"""The path that means standard input (for inputs) or standard output (for outputs)."""

# A chunk is the unit of work sent to a worker: big enough that pickling and IPC are a small
# fraction of its encoding time, small enough that a few in flight per worker stay a few MB.
CHUNK_ROWS = 4096
CHUNK_BYTES = 1 << 18


class CorpusError(RobertaExtError, ValueError):
    """An input the corpus tools cannot process; the message names the file (and line). The
    corpus layer's error; a ``ValueError`` too, as it always was."""


class InputFile:
    """One input, read as bytes and split into lines exactly where fairseq's reader splits them.

    Reading bytes (not text) lets us count progress in bytes, report invalid UTF-8 with a line
    number, and leave the decoding to the workers. Opening fails at once, with an error that
    names the file, when it is missing or a folder.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.bytes_read = 0
        self.size: int | None = None
        if self.path == STDIO:
            self.name = "<stdin>"
            stdin = getattr(sys.stdin, "buffer", None)
            if stdin is None:
                raise CorpusError("standard input is not a byte stream; give a file path instead of '-'")
            self._file: IO[bytes] = stdin
            self._owned = False
            # CPython opens sys.stdin with newline="\n" on POSIX: only "\n" ends a line there.
            self.universal_newlines = False
            return
        self.name = self.path
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 (closed by close())
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "input file not found", self.path) from None
        except IsADirectoryError:
            raise IsADirectoryError(errno.EISDIR, "input is a directory, not a file", self.path) from None
        except OSError as error:
            raise OSError(error.errno, f"cannot read input file ({error.strerror})", self.path) from None
        self._owned = True
        self.universal_newlines = True
        info = os.fstat(self._file.fileno())
        if stat.S_ISREG(info.st_mode):
            self.size = info.st_size

    def lines(self) -> Iterator[bytes]:
        """The raw lines, terminators included or not (callers strip them)."""
        for raw in self._file:
            self.bytes_read += len(raw)
            if self.universal_newlines and b"\r" in raw:
                # Universal newlines: "\r\n" and a lone "\r" also end a line. A binary line ends
                # at "\n", so a "\r\n" pair never straddles two of them; and "\r"/"\n" bytes never
                # occur inside a multi-byte UTF-8 character, so splitting bytes is safe.
                pieces = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
                if not pieces[-1]:
                    pieces.pop()
                yield from pieces
            else:
                yield raw

    def close(self) -> None:
        if self._owned:
            self._file.close()


def total_size(sources: Sequence[InputFile]) -> int | None:
    """Bytes of all ``sources`` together (a progress bar's total), or ``None`` when one's size
    is unknown (standard input, a pipe)."""
    sizes = [source.size for source in sources]
    known = [size for size in sizes if size is not None]
    return sum(known) if len(known) == len(sizes) else None


class Chunk(NamedTuple):
    """Consecutive rows of the zipped inputs: ``columns[i]`` holds input ``i``'s raw lines."""

    first_line: int  # 1-based line number of the first row, for error messages
    columns: tuple[list[bytes], ...]
    nbytes: int  # bytes of input these rows came from, for the progress bar


def read_chunks(
    inputs: Sequence[InputFile], *, chunk_rows: int | None = None, chunk_bytes: int | None = None
) -> Iterator[Chunk]:
    """Rows of the inputs read in lockstep, cut into chunks; raise if the inputs differ in length."""
    # Defaults looked up at call time, so that tests can shrink chunks to exercise their seams.
    chunk_rows = chunk_rows or CHUNK_ROWS
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    rows = zip_longest(*(source.lines() for source in inputs))
    first_line = 1
    while True:
        start = sum(source.bytes_read for source in inputs)
        columns: tuple[list[bytes], ...] = tuple([] for _ in inputs)
        size = 0
        for row in rows:
            if None in row:
                _raise_length_mismatch(inputs, row, lines_before=first_line - 1 + len(columns[0]))
            for column, line in zip(columns, row):
                column.append(line)
            size += sum(map(len, row))
            if len(columns[0]) >= chunk_rows or size >= chunk_bytes:
                break
        if not columns[0]:
            return
        yield Chunk(first_line, columns, sum(source.bytes_read for source in inputs) - start)
        first_line += len(columns[0])


def _raise_length_mismatch(inputs: Sequence[InputFile], row: tuple[bytes | None, ...], *, lines_before: int) -> None:
    ended = [source.name for source, line in zip(inputs, row) if line is None]
    longer = [source.name for source, line in zip(inputs, row) if line is not None]
    # fairseq's zip() would silently drop the extra lines, misaligning nothing but losing data.
    # Unequal lengths usually mean separate files were meant (as `roberta-ext tokenize
    # --inputs a b` takes them): say how to encode those.
    raise CorpusError(
        f"parallel inputs have different numbers of lines: {', '.join(ended)} ended after "
        f"{counted(lines_before, 'line')}, but {', '.join(longer)} has more. bpe-encode --inputs A B reads A and B as "
        f"parallel columns (fairseq's meaning: line i of each is one row, and an empty line drops the row "
        f"from every output). To encode separate files, run bpe-encode once per file."
    )


class UndecodableLine(Exception):
    """Raised in a worker for a line that is not UTF-8; picklable, so it crosses the pool.

    It knows the column and line number but not the file: the parent turns it into a
    :class:`CorpusError` naming the file with :meth:`corpus_error`.
    """

    def __init__(self, column: int, line_number: int, detail: str) -> None:
        super().__init__(column, line_number, detail)
        self.column, self.line_number, self.detail = column, line_number, detail

    def corpus_error(self, inputs: Sequence[InputFile]) -> CorpusError:
        """The error to show: ``FILE:LINE: not valid UTF-8 (...)``, ``inputs`` being the chunk's columns."""
        return CorpusError(f"{inputs[self.column].name}:{self.line_number}: not valid UTF-8 ({self.detail})")


def decode_row(row: Sequence[bytes], line_number: int) -> list[str]:
    """Decoded, stripped lines of one row (``str.strip`` as fairseq: Unicode whitespace too).

    Raises :class:`UndecodableLine` for a line that is not UTF-8.

    >>> decode_row([b"  caf\\xc3\\xa9 \\r\\n", b"\\xe3\\x80\\x80x"], 1)
    ['café', 'x']
    """
    try:
        return [raw.decode("utf-8").strip() for raw in row]
    except UnicodeDecodeError:
        for column, raw in enumerate(row):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise UndecodableLine(column, line_number, undecodable(error, " of the line")) from None
        raise  # unreachable: one of the lines failed above
