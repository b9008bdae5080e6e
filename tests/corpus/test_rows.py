"""The one row reader of ``predict`` and ``embed`` (roberta_ext/corpus/rows.py): its format,
stripping and header rules, line ends, data-row numbering and bad rows."""

from __future__ import annotations

import io
import json
import os
import re
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
    ("a.tsv", "x\ty\nonly\n", {"columns": parse_columns("x,y")}, 2, "has 1 tab-separated field, so column y is"),
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


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("a,label=b,label=c", "more than one label= column"),
        ("a,label= ", "label= names no column"),
        ("a,,b", "an empty column name"),
        ("a,b,c", r"give one text column, or two for sentence pairs \(and the label as label=COLUMN\), not 3"),
        ("label=b", "give one text column, or two .* not 0"),
    ],
)
def test_a_bad_columns_spec_is_named_with_what_is_wrong(spec, problem):
    with pytest.raises(CorpusError, match=rf"^--columns/--fields {re.escape(repr(spec))}: {problem}"):
        parse_columns(spec)


def test_an_unknown_format_names_the_formats_there_are():
    with pytest.raises(CorpusError, match=r"^unknown input format 'csv'; choose one of text, tsv, jsonl$"):
        input_format("a.csv", "csv")


def test_text_rows_are_numbered_from_zero_by_data_row_and_from_one_by_line(tmp_path):
    path = write(tmp_path / "a.txt", "a\nb\n\nc\n")
    expected = [Row(0, 1, ("a",)), Row(1, 2, ("b",)), Row(2, 3, ("",)), Row(3, 4, ("c",))]
    assert rows(path, format="text") == expected
    assert RowReader(path, format="text").count() == 4


def test_count_is_none_for_what_is_not_a_regular_file():
    # A pipe or a device may not be read twice (its rows would be gone); /dev/null stands for them.
    assert RowReader(os.devnull, format="text").count() is None


def test_header_names_are_split_at_tabs_only(tmp_path):
    path = write(tmp_path / "a.tsv", "first name\tgold label\nAda\tyes\n")
    assert rows(path, format="tsv", columns=parse_columns("first name,label=gold label")) == [
        Row(0, 2, ("Ada",), "yes")
    ]


def test_a_header_line_that_is_not_utf8_names_the_file_and_the_bad_byte(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_bytes(b"caf\xe9\tx\n")
    problem = r"not valid UTF-8 \(invalid continuation byte at byte offset 3: b'\\xe9'\)"
    message = rf"^{re.escape(str(path))}:1: the header line is {problem}$"
    with pytest.raises(CorpusError, match=message):
        rows(path, format="tsv", columns=Columns(("x",)))


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (b"ok\ncaf\xe9\n", r"invalid continuation byte at byte offset 3: b'\\xe9'"),  # the line's first is 0
        (b"\xff\n", r"invalid start byte at byte offset 0: b'\\xff'"),
        (b"ab\xe2\x82", r"unexpected end of data at byte offset 2: b'\\xe2\\x82'"),
    ],
)
def test_a_line_that_is_not_utf8_names_the_bad_bytes_and_their_position(tmp_path, raw, problem):
    path = tmp_path / "a.txt"
    path.write_bytes(raw)
    with pytest.raises(BadRow, match=rf"^{re.escape(str(path))}:\d+: not valid UTF-8 \({problem}\)$"):
        rows(path, format="text")


def test_a_bad_tsv_row_says_which_columns_are_missing_and_why_a_glue_row_is_bad(tmp_path):
    path = write(tmp_path / "a.tsv", "a\tb\tc\nonly\n")
    with pytest.raises(BadRow, match=r"a\.tsv:2: the line has 1 tab-separated field, so columns b, c are missing$"):
        rows(path, format="tsv", columns=parse_columns("a,b,label=c"))
    glue = write(tmp_path / "glue.tsv", "1\t2\t3\n")
    message = (
        r"glue\.tsv:1: the line has 3 tab-separated fields, not 6; fairseq's GLUE script drops such rows "
        r"\(awk NF==6\): remove it, or read the file with --columns$"
    )
    with pytest.raises(BadRow, match=message):
        rows(glue, format="tsv", columns=parse_columns("0"), exact_fields=6)


def test_a_json_line_is_parsed_without_its_terminator(tmp_path):
    """JSON's message points into the line as the user sees it: no "\\n" left to be a control character."""
    path = write(tmp_path / "a.jsonl", '{"text": "abc\n')
    message = r"a\.jsonl:1: not valid JSON \(Unterminated string starting at: line 1 column 10 \(char 9\)\)$"
    with pytest.raises(BadRow, match=message):
        rows(path, format="jsonl")


def test_standard_input_is_named_and_its_crlf_lines_lose_the_carriage_return(monkeypatch):
    """Standard input ends lines at "\\n" only, so a CRLF line still has its "\\r" until the row reader removes it."""
    lines = b'{"text": " a "}\r\n{"text": "b"}\r\n{"text": "abc\r\n'
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines)))
    reader = iter(RowReader("-", format="jsonl"))
    assert [next(reader), next(reader)] == [Row(0, 1, ("a",)), Row(1, 2, ("b",))]
    message = r"^<stdin>:3: not valid JSON \(Unterminated string starting at: line 1 column 10 \(char 9\)\)$"
    with pytest.raises(BadRow, match=message):
        next(reader)


@pytest.mark.parametrize(
    ("first", "said"),
    [
        ({"text": "a"}, "reading fields 'text'; no labels (set them with --fields)"),
        (
            {"text": "a", "text_pair": "b", "label": 1},
            "reading fields 'text', 'text_pair'; label from 'label' (set them with --fields)",
        ),
    ],
)
def test_default_json_fields_are_said_on_the_log_once(tmp_path, first, said):
    path = write(tmp_path / "a.jsonl", json.dumps(first) + "\n" + json.dumps(first) + "\n")
    log = io.StringIO()
    assert len(rows(path, format="jsonl", log=log)) == 2
    assert log.getvalue() == said + "\n"
