"""``roberta_ext._text``: counts agree with their nouns ("1 bad line", never "1 bad lines"), and
every reader names a line's bad byte by the same 0-based offset (it said "at byte 1" for a
line's first byte, where Python and the server say 0)."""

from __future__ import annotations

import pytest

from roberta_ext._text import counted, undecodable
from roberta_ext.corpus.reading import UndecodableLine, decode_row
from roberta_ext.corpus.rows import BadRow, RowReader


@pytest.mark.parametrize(
    ("count", "noun", "plural", "expected"),
    [
        (0, "row", None, "0 rows"),
        (1, "row", None, "1 row"),
        (2, "bad line", None, "2 bad lines"),
        (1, "item", None, "1 item"),
        (1, "index", "indices", "1 index"),
        (3, "index", "indices", "3 indices"),
        (-1, "row", None, "-1 rows"),
    ],
)
def test_counted_agrees_with_its_count(count, noun, plural, expected):
    assert counted(count, noun, plural) == expected


def decode_error(raw: bytes) -> UnicodeDecodeError:
    with pytest.raises(UnicodeDecodeError) as caught:
        raw.decode("utf-8")
    return caught.value


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (b"\xff", "invalid start byte at byte offset 0: b'\\xff'"),
        (b"caf\xe9!", "invalid continuation byte at byte offset 3: b'\\xe9'"),
        (b"ab\xe2\x82", "unexpected end of data at byte offset 2: b'\\xe2\\x82'"),
    ],
)
def test_undecodable_counts_from_0_as_python_does(raw, expected):
    error = decode_error(raw)
    assert undecodable(error) == expected
    assert f"in position {error.start}" in str(error)  # Python's own count
    assert undecodable(error, " of the line").startswith(expected.split(":")[0] + " of the line: ")


def test_every_reader_names_a_lines_first_byte_offset_0(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"ok\n\xffbad\n")
    with pytest.raises(BadRow, match=r":2: not valid UTF-8 \(invalid start byte at byte offset 0: b'\\xff'\)$"):
        list(RowReader(path, format="text"))
    with pytest.raises(UndecodableLine) as caught:
        decode_row([b"fine", b"\xffbad"], 2)
    assert caught.value.detail == "invalid start byte at byte offset 0 of the line: b'\\xff'"
