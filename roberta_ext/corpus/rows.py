"""Rows of an input file (text, TSV or JSON lines) as ``roberta-ext predict`` and ``roberta-ext
embed`` read them: one reader, one set of rules.

* **Format** (:func:`input_format`): given, or from the suffix: ``.tsv`` TSV; ``.jsonl``,
  ``.ndjson`` and ``.json`` JSON lines; anything else text, a text per line.
* **Lines** end where :class:`~roberta_ext.corpus.reading.InputFile` ends them, as fairseq reads
  files: ``\\n``, ``\\r\\n`` or a lone ``\\r`` in a file, ``\\n`` on standard input (``-``); no
  ``\\r`` of a CRLF file is left in a row.
* **Stripping**: every text, TSV cell, header name and label is ``str.strip()``-ed (Unicode
  whitespace too), as fairseq's BPE encoder and ``roberta-ext bpe-encode`` strip each line, so
  that a file reads the same to the tools that train a model and to those that use it. An empty
  line is an empty text.
* **TSV**: fields are split at tabs, without quoting (as the GLUE script's ``cut`` splits them).
  A column is a 0-based number when it is all digits, else the name of a column of the header
  line (a number never means a header name). The file has a header line when a column is given
  by name, unless ``header`` says otherwise (:func:`has_header`); it is not a row. A header line
  and no rows is an input of no rows; an empty file where a header is expected is an error. A
  row without one of the columns (or, with ``exact_fields``, with another number of fields) is
  a bad row.
* **JSON lines**: one object per line; blank lines are not rows. Text fields hold strings; the
  default fields are ``text``, plus ``text_pair`` and ``label`` when the first object has them.
* **Labels** (``Columns.label``): a TSV cell, or a JSON string or number.

Rows are counted twice: ``index``, the 0-based data row (what an output's row ``i`` is: header
lines and blank JSON lines are not data rows), and ``line``, the 1-based line in the file, for
messages. A row that cannot be read (not UTF-8, not JSON, a missing column or field) raises
:class:`BadRow`, whose message is ``FILE:LINE: what is wrong``; a caller may skip it and go on.

>>> import os, tempfile
>>> path = os.path.join(tempfile.mkdtemp(), "dev.tsv")
>>> _ = open(path, "w", newline="").write("id\\ts1\\ts2\\tgold\\r\\n0\\tA man.\\t A person. \\tyes\\r\\n")
>>> list(RowReader(path, format="tsv", columns=parse_columns("s1,s2,label=gold")))
[Row(index=0, line=2, texts=('A man.', 'A person.'), label='yes')]
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .._text import counted, undecodable
from .reading import STDIO, CorpusError, InputFile

__all__ = [
    "FORMATS",
    "BadRow",
    "Columns",
    "Line",
    "Row",
    "RowReader",
    "has_header",
    "input_format",
    "parse_columns",
]

FORMATS = ("text", "tsv", "jsonl")
SUFFIXES = {".tsv": "tsv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}
"""Input formats by suffix (lowercased); any other suffix is text."""


def input_format(path: str | os.PathLike[str], given: str | None = None) -> str:
    """``given``, or the format the suffix of ``path`` says (text for any other).

    >>> input_format("dev.tsv"), input_format("q.JSON"), input_format("notes.txt"), input_format("x.tsv", "text")
    ('tsv', 'jsonl', 'text', 'text')
    """
    if given is not None:
        if given not in FORMATS:
            raise CorpusError(f"unknown input format {given!r}; choose one of {', '.join(FORMATS)}")
        return given
    return SUFFIXES.get(Path(path).suffix.lower(), "text")


@dataclass(frozen=True)
class Columns:
    """Which TSV columns (0-based numbers or header names) or JSON fields hold the text, the
    optional second text of a pair, and the optional label."""

    texts: tuple[str, ...]
    label: str | None = None

    @property
    def all(self) -> tuple[str, ...]:
        """The texts' columns, then the label's."""
        return (*self.texts, *([self.label] if self.label is not None else []))


def parse_columns(spec: str) -> Columns:
    """``--columns``/``--fields``: one or two text columns, and the label marked ``label=``.

    >>> parse_columns("1,2,label=3")
    Columns(texts=('1', '2'), label='3')
    >>> parse_columns("premise,hypothesis,label=gold_label").label
    'gold_label'
    """
    texts: list[str] = []
    label = None
    for item in (part.strip() for part in spec.split(",")):
        if item.startswith("label="):
            if label is not None:
                raise CorpusError(f"--columns/--fields {spec!r}: more than one label= column")
            label = item[len("label=") :].strip()
            if not label:
                raise CorpusError(f"--columns/--fields {spec!r}: label= names no column")
        elif item:
            texts.append(item)
        else:
            raise CorpusError(f"--columns/--fields {spec!r}: an empty column name")
    if not 1 <= len(texts) <= 2:
        raise CorpusError(
            f"--columns/--fields {spec!r}: give one text column, or two for sentence pairs "
            f"(and the label as label=COLUMN), not {len(texts)}"
        )
    return Columns(tuple(texts), label)


def has_header(columns: Columns, header: bool | None = None) -> bool:
    """Whether a TSV read by ``columns`` has a header line: ``header`` when given, else when a
    column is given by name (a name needs a header line; numbers read a file without one).

    >>> has_header(Columns(("sentence",))), has_header(Columns(("1",), "2")), has_header(Columns(("1",)), True)
    (True, False, True)
    """
    return header if header is not None else any(not name.isdigit() for name in columns.all)


@dataclass(frozen=True)
class Line:
    """One data row as it was read, not decoded yet: cheap to count, shard or skip."""

    index: int
    """0-based data row."""
    line: int
    """1-based line in the file."""
    raw: bytes


@dataclass(frozen=True)
class Row:
    """One data row: its text(s) and its label as written (or None)."""

    index: int
    line: int
    texts: tuple[str, ...]
    label: str | None = None


class BadRow(CorpusError):
    """A row that cannot be read; the message is ``FILE:LINE: problem``."""

    def __init__(self, name: str, line: int, problem: str) -> None:
        super().__init__(f"{name}:{line}: {problem}")
        self.line = line
        self.problem = problem


def _decode(raw: bytes) -> str:
    """A line's text, its terminator (``\\n``, ``\\r\\n``) removed; ``ValueError`` naming the bad byte."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"not valid UTF-8 ({undecodable(error)})") from None
    return text.removesuffix("\n").removesuffix("\r")


class RowReader:
    """The rows of one input file under the rules of this module's docstring. Iterating reads
    the file once, a row at a time (nothing more is held); :meth:`lines` and :meth:`parse` do
    the same in two steps, for callers that count, shard or skip rows before decoding them.

    ``columns``: the TSV columns (required) or JSON fields (default: ``text``, ``text_pair``
    and ``label`` as the first object has them, said on ``log``); ``header``: see
    :func:`has_header`; ``exact_fields``: the number of fields every TSV row must have.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        format: str,
        columns: Columns | None = None,
        header: bool | None = None,
        exact_fields: int | None = None,
        log: IO[str] | None = None,
    ) -> None:
        self.path = str(path)
        self.name = "<stdin>" if self.path == STDIO else self.path
        self.format = input_format(self.path, format)
        self.columns = columns
        self.exact_fields = exact_fields
        self.log = log
        self.header = False
        self.indices: list[int] = []
        if self.format == "tsv":
            if columns is None:
                raise CorpusError(f"{self.name}: a TSV input needs its columns (--columns) to say which to read")
            self.header = has_header(columns, header)
            if not self.header:
                self.indices = self._numbered(columns)
        elif self.format == "text" and columns is not None:
            raise CorpusError(f"{self.name}: a text input has no columns or fields (a line is a text)")

    def _numbered(self, columns: Columns) -> list[int]:
        for name in columns.all:
            if not name.isdigit():
                raise CorpusError(f"{self.name}: column {name!r} is a name, but the file is read without a header")
        return [int(name) for name in columns.all]

    def _resolve_header(self, raw: bytes | None) -> list[int]:
        assert self.columns is not None
        if raw is None:  # (a header line and no rows is fine: 0 rows)
            raise CorpusError(f"{self.name} is empty: no header line")
        try:
            names = [name.strip() for name in _decode(raw).split("\t")]
        except ValueError as error:
            raise CorpusError(f"{self.name}:1: the header line is {error}") from None
        indices = []
        for name in self.columns.all:
            if name.isdigit():
                indices.append(int(name))
            elif name in names:
                indices.append(names.index(name))
            else:
                raise CorpusError(f"{self.name}:1: no column named {name!r} in the header line; it has {names}")
        return indices

    def lines(self) -> Iterator[Line]:
        """The data rows, undecoded, in one pass over the file (a TSV's header line is read and
        its column names resolved first; blank JSON lines are left out)."""
        source = InputFile(self.path)
        try:
            numbered = enumerate(source.lines(), start=1)
            if self.header:
                first = next(numbered, None)
                self.indices = self._resolve_header(None if first is None else first[1])
            index = 0
            for line, raw in numbered:
                if self.format == "jsonl" and not raw.strip():  # JSON's whitespace is ASCII
                    continue
                yield Line(index, line, raw)
                index += 1
        finally:
            source.close()

    def count(self) -> int | None:
        """Data rows in the file (a pass without decoding), or None for standard input or a pipe."""
        if self.path == STDIO or not Path(self.path).is_file():
            return None
        return sum(1 for _ in self.lines())

    def __iter__(self) -> Iterator[Row]:
        for line in self.lines():
            yield self.parse(line)

    def parse(self, line: Line) -> Row:
        """The row's text(s) and label; :class:`BadRow` when it has none."""
        try:
            text = _decode(line.raw)
            if self.format == "text":
                return Row(line.index, line.line, (text.strip(),))
            if self.format == "tsv":
                texts, label = self._tsv_row(text)
            else:
                texts, label = self._json_row(text)
        except ValueError as error:
            raise BadRow(self.name, line.line, str(error)) from None
        return Row(line.index, line.line, texts, label)

    def _split(self, values: list[str]) -> tuple[tuple[str, ...], str | None]:
        assert self.columns is not None
        n = len(self.columns.texts)
        return tuple(values[:n]), (values[n] if len(values) > n else None)

    def _tsv_row(self, text: str) -> tuple[tuple[str, ...], str | None]:
        assert self.columns is not None
        cells = text.split("\t")
        if self.exact_fields is not None and len(cells) != self.exact_fields:
            raise ValueError(
                f"the line has {len(cells)} tab-separated fields, not {self.exact_fields}; fairseq's GLUE script "
                "drops such rows (awk NF==6): remove it, or read the file with --columns"
            )
        missing = [name for name, i in zip(self.columns.all, self.indices) if i >= len(cells)]
        if missing:
            columns = f"column {missing[0]} is" if len(missing) == 1 else f"columns {', '.join(missing)} are"
            raise ValueError(f"the line has {counted(len(cells), 'tab-separated field')}, so {columns} missing")
        return self._split([cells[i].strip() for i in self.indices])

    def _json_row(self, text: str) -> tuple[tuple[str, ...], str | None]:
        try:
            record = json.loads(text)
        except ValueError as error:
            raise ValueError(f"not valid JSON ({error})") from None
        if not isinstance(record, dict):
            raise ValueError(f"expected a JSON object, got {type(record).__name__}")
        if self.columns is None:  # the first object decides the defaults
            fields = ("text", "text_pair") if "text_pair" in record else ("text",)
            self.columns = Columns(fields, "label" if "label" in record else None)
            if self.log is not None:
                said = f"; label from {self.columns.label!r}" if self.columns.label else "; no labels"
                print(f"reading fields {', '.join(map(repr, fields))}{said} (set them with --fields)", file=self.log)
        for name in self.columns.all:
            if name not in record:
                raise ValueError(f"no field {name!r}; the object has {sorted(record)}")
        values = []
        for name in self.columns.texts:
            if not isinstance(record[name], str):
                raise ValueError(f"field {name!r} is {record[name]!r}, not a string")
            values.append(record[name].strip())
        if self.columns.label is not None:
            values.append(_json_label(record[self.columns.label], self.columns.label))
        return self._split(values)


def _json_label(value: Any, name: str) -> str:
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"field {name!r} is {value!r}; a label is a string or a number")
