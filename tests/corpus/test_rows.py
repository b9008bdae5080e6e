"""The one row reader of ``predict`` and ``embed`` (roberta_ext/corpus/rows.py): its format,
stripping and header rules, line ends, data-row numbering and bad rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roberta_ext.corpus import CorpusError
from roberta_ext.corpus.rows import BadRow, Columns, Row, RowReader, has_header, input_format, parse_columns


def write(path: Path, text: str) -> Path:
    path.write_bytes(text.encode("utf-8"))
    return path


def rows(path: Path, **options) -> list[Row]:
    return list(RowReader(path, **options))


@pytest.mark.parametrize(
    ("name", "expected"),
    [("a.tsv", "tsv"), ("a.TSV", "tsv"), ("a.jsonl", "jsonl"), ("a.ndjson", "jsonl"), ("a.json", "jsonl")]
    + [("a.txt", "text"), ("a", "text"), ("a.csv", "text")],
)
def test_format_from_the_suffix(name, expected):
    assert input_format(name) == expected
    assert input_format(name, "tsv") == "tsv"  # given wins


def test_every_text_label_and_header_name_is_stripped(tmp_path):
    text = write(tmp_path / "a.txt", "  one  \n\ttwo\t\n \u3000three\u00a0\n\n")
    assert [r.texts for r in rows(text, format="text")] == [("one",), ("two",), ("three",), ("",)]
    tsv = write(tmp_path / "a.tsv", " s1 \t s2\t gold \n A man. \t A person.\t yes \n")
    assert rows(tsv, format="tsv", columns=parse_columns("s1,s2,label=gold")) == [
        Row(0, 2, ("A man.", "A person."), "yes")
    ]
    jsonl = write(tmp_path / "a.jsonl", json.dumps({"text": " a \n", "text_pair": "\tb", "label": " x "}) + "\n")
    assert rows(jsonl, format="jsonl") == [Row(0, 1, ("a", "b"), "x")]


@pytest.mark.parametrize("ending", ["\r\n", "\r"])
def test_crlf_and_cr_line_ends_leave_no_carriage_return(tmp_path, ending):
    lines = ["id\tsentence\tlabel", "0\tA dog.\tyes", "1\tA cat.\tno"]
    unix = write(tmp_path / "unix.tsv", "".join(f"{line}\n" for line in lines))
    windows = write(tmp_path / "windows.tsv", "".join(f"{line}{ending}" for line in lines))
    # Column 2 is the last: a "\r" left at the end of a line would be in its cells.
    columns = parse_columns("sentence,label=2")
    assert rows(windows, format="tsv", columns=columns) == rows(unix, format="tsv", columns=columns)
    assert [r.label for r in rows(windows, format="tsv", columns=columns)] == ["yes", "no"]
    texts = write(tmp_path / "windows.txt", f"a b{ending}c{ending}")
    assert [r.texts for r in rows(texts, format="text")] == [("a b",), ("c",)]


def test_a_number_is_a_column_number_and_a_name_a_header_name(tmp_path):
    """A header line may itself hold a column called "0": a number still means a position."""
    path = write(tmp_path / "a.tsv", "1\t0\n first \t second \n")
    assert rows(path, format="tsv", columns=Columns(("0",)), header=True)[0].texts == ("first",)
    assert rows(path, format="tsv", columns=Columns(("1",)), header=True)[0].texts == ("second",)


def test_a_header_line_when_a_column_is_named_unless_told(tmp_path):
    assert has_header(Columns(("sentence",))) and not has_header(Columns(("1",), "0"))
    assert has_header(Columns(("1",)), True) and not has_header(Columns(("x",)), False)
    path = write(tmp_path / "a.tsv", "a\tb\nc\td\n")
    assert [r.texts for r in rows(path, format="tsv", columns=Columns(("1",)))] == [("b",), ("d",)]
    assert [(r.index, r.line) for r in rows(path, format="tsv", columns=Columns(("1",)), header=True)] == [(0, 2)]
    with pytest.raises(CorpusError, match=r"column 'b' is a name, but the file is read without a header"):
        RowReader(path, format="tsv", columns=Columns(("b",)), header=False)
    with pytest.raises(CorpusError, match=r"a\.tsv:1: no column named 'x' in the header line; it has \['a', 'b'\]"):
        rows(path, format="tsv", columns=Columns(("x",)))
    empty = write(tmp_path / "empty.tsv", "")
    with pytest.raises(CorpusError, match=r"empty\.tsv is empty: no header line"):
        rows(empty, format="tsv", columns=Columns(("x",)))
    assert rows(write(tmp_path / "only.tsv", "a\tb\n"), format="tsv", columns=Columns(("a",))) == []


def test_blank_json_lines_are_not_rows_and_data_rows_are_counted_apart_from_lines(tmp_path):
    path = write(tmp_path / "a.jsonl", '{"text": "a"}\n\n  \n{"text": "b"}\n')
    reader = RowReader(path, format="jsonl", columns=Columns(("text",)))
    assert [(r.index, r.line, r.texts) for r in reader] == [(0, 1, ("a",)), (1, 4, ("b",))]
    assert reader.count() == 2
    assert RowReader("-", format="text").count() is None  # standard input is not read to count it


BAD_ROWS = [
    ("a.tsv", "x\ty\nonly\n", {"columns": parse_columns("x,y")}, 2, "has 1 tab-separated fields, so column(s) y"),
    ("a.tsv", "1\t2\t3\n", {"columns": parse_columns("0"), "exact_fields": 2}, 1, "3 tab-separated fields, not 2"),
    ("a.jsonl", "{broken\n", {}, 1, "not valid JSON"),
    ("a.jsonl", "[1]\n", {}, 1, "expected a JSON object, got list"),
    ("a.jsonl", '{"other": "x"}\n', {"columns": Columns(("text",))}, 1, "no field 'text'; the object has ['other']"),
    ("a.jsonl", '{"text": 3}\n', {}, 1, "field 'text' is 3, not a string"),
    ("a.jsonl", '{"text": "a", "label": [1]}\n', {}, 1, "field 'label' is [1]; a label is a string or a number"),
    ("a.txt", "ok\ncaf\xe9\n", {}, 2, "not valid UTF-8"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "options", "line", "problem"), BAD_ROWS)
def test_a_bad_row_names_file_and_line_and_can_be_skipped(tmp_path, name, text, options, line, problem):
    path = tmp_path / name
    path.write_bytes(text.encode("latin-1") if name.endswith(".txt") else text.encode())
    reader = RowReader(path, format=input_format(path), **options)
    with pytest.raises(BadRow) as error:
        for found in reader.lines():
            reader.parse(found)
    assert error.value.line == line and problem in error.value.problem
    assert str(error.value).startswith(f"{path}:{line}: ")


def test_labels_are_strings_or_numbers_and_fields_default_from_the_first_object(tmp_path):
    path = write(tmp_path / "a.jsonl", '{"text": "a", "label": 1}\n{"text": "b", "label": 0.5}\n')
    assert [(r.texts, r.label) for r in rows(path, format="jsonl")] == [(("a",), "1"), (("b",), "0.5")]
    with pytest.raises(CorpusError, match="a text input has no columns"):
        RowReader(path, format="text", columns=Columns(("a",)))
    with pytest.raises(CorpusError, match="needs its columns"):
        RowReader(path, format="tsv")
