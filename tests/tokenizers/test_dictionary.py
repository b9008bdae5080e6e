"""Dictionary: same indices, strings and line encodings as fairseq.data.Dictionary; clear errors."""

from __future__ import annotations

import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roberta_ext.tokenizers import Dictionary, DictionaryFormatError
from tests.peers import require

PROPERTY = settings(max_examples=200, deadline=None)


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------- vs fairseq


def test_loads_like_fairseq(bpe_files, dictionary, fairseq_peer):
    theirs = fairseq_peer.dictionary
    assert len(dictionary) == len(theirs)
    assert dictionary.symbols == theirs.symbols
    assert dictionary.count == theirs.count
    assert dictionary.indices == theirs.indices
    assert dictionary.nspecial == theirs.nspecial == 4
    assert (dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()) == (0, 1, 2, 3)
    assert (theirs.bos(), theirs.pad(), theirs.eos(), theirs.unk()) == (0, 1, 2, 3)
    for symbol in ["<s>", "<pad>", "</s>", "<unk>", "13", "madeupword0000", "not-there", ""]:
        assert dictionary.index(symbol) == theirs.index(symbol)
        assert (symbol in dictionary) == (symbol in theirs)
    for index in [0, 1, 2, 3, 4, len(theirs) - 1, len(theirs), 10**6, -1]:
        assert dictionary[index] == theirs[index]


@PROPERTY
@given(
    indices=st.lists(st.integers(min_value=0, max_value=2100), max_size=30),
    include_eos=st.booleans(),
    escape_unk=st.booleans(),
    unk_string=st.none() | st.sampled_from(["", "UNK", "<unk>"]),
    ignore=st.none() | st.sets(st.integers(min_value=0, max_value=8), max_size=3),
    separator=st.sampled_from([" ", "", "|"]),
)
def test_string_equals_fairseq(
    dictionary, fairseq_peer, indices, include_eos, escape_unk, unk_string, ignore, separator
):
    options = dict(
        include_eos=include_eos,
        escape_unk=escape_unk,
        unk_string=unk_string,
        extra_symbols_to_ignore=ignore,
        separator=separator,
    )
    assert dictionary.string(indices, **options) == fairseq_peer.dictionary.string(indices, **options)


def test_string_accepts_tensors_and_numpy(dictionary):
    torch = require("torch")
    indices = [0, 5, 3, 9, 2]
    expected = dictionary.string(indices)
    assert dictionary.string(torch.tensor(indices)) == expected
    assert dictionary.string(torch.tensor(indices).numpy()) == expected


_SYMBOLS = st.sampled_from(["13", "11", "madeupword0000", "<s>", "</s>", "<unk>", "zzz", "1", "x y"])
_GAPS = st.text(alphabet=" \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000", max_size=3)


@PROPERTY
@given(parts=st.lists(st.tuples(_GAPS, _SYMBOLS), max_size=12), tail=_GAPS, append_eos=st.booleans())
def test_encode_line_equals_fairseq(dictionary, fairseq_peer, parts, tail, append_eos):
    line = "".join(gap + symbol for gap, symbol in parts) + tail
    expected = fairseq_peer.dictionary.encode_line(line, add_if_not_exist=False, append_eos=append_eos)
    assert dictionary.encode_line(line, append_eos=append_eos) == expected.tolist()


@PROPERTY
@given(st.lists(st.tuples(st.text(max_size=3), st.integers(0, 5), st.booleans()), max_size=20))
def test_add_symbol_equals_fairseq(fairseq_dictionary_class, additions):
    ours, theirs = Dictionary(), fairseq_dictionary_class()
    for word, n, overwrite in additions:
        assert ours.add_symbol(word, n=n, overwrite=overwrite) == theirs.add_symbol(word, n=n, overwrite=overwrite)
    assert (ours.symbols, ours.count, ours.indices) == (theirs.symbols, theirs.count, theirs.indices)


def test_overwrite_flag_loads_like_fairseq(tmp_path, fairseq_dictionary_class):
    path = _write(tmp_path / "dict.txt", "a 5\nb 3\na 7 #fairseq:overwrite\n<unk> 1 #fairseq:overwrite\nx y 2\n")
    ours, theirs = Dictionary.load(path), fairseq_dictionary_class.load(str(path))
    assert (ours.symbols, ours.count, ours.indices) == (theirs.symbols, theirs.count, theirs.indices)
    assert ours.index("a") == 6 and ours.index("x y") == 8 and ours.unk() == 3


def test_fairseq_loads_what_we_save(tmp_path, dictionary, fairseq_dictionary_class):
    dictionary.save(tmp_path / "dict.txt")
    assert fairseq_dictionary_class.load(str(tmp_path / "dict.txt")).indices == dictionary.indices


# ---------------------------------------------------------------------------------- behaviour


def test_defaults_and_special_symbols():
    d = Dictionary(extra_special_symbols=["<mask>"])
    assert d.symbols == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] and d.nspecial == 5
    custom = Dictionary(bos="[CLS]", pad="[PAD]", eos="[SEP]", unk="[UNK]")
    assert custom.string([0, 3, 2], include_eos=True) == "[UNK] [SEP]"
    assert custom.index("nope") == 3
    with pytest.raises(TypeError, match="symbols are str"):
        d.index(5)


def test_equality_compares_indices_only():
    a, b = Dictionary(), Dictionary()
    a.add_symbol("x", n=5)
    b.add_symbol("x", n=1)
    assert a == b
    b.add_symbol("y")
    assert a != b
    assert a != {"x": 4}


def test_save_round_trips_and_is_atomic(tmp_path):
    d = Dictionary()
    for word, n in [("hello", 5), ("a b", 2), ("hello", 1), ("", 0), ("ü", 3)]:
        d.add_symbol(word, n=n)
    d.add_symbol("hello", n=9, overwrite=True)
    path = tmp_path / "sub" / "dict.txt"
    d.save(path)
    assert path.read_text(encoding="utf-8") == "hello 6\na b 2\n 0\nü 3\nhello 9 #fairseq:overwrite\n"
    loaded = Dictionary.load(path)
    assert (loaded.symbols, loaded.count, loaded.indices) == (d.symbols, d.count, d.indices)

    d.add_symbol("line\nbreak")
    with pytest.raises(ValueError, match="line break"):
        d.save(path)
    assert Dictionary.load(path) == loaded  # the old file is untouched
    assert os.listdir(path.parent) == ["dict.txt"]  # and no temporary file is left behind


# ------------------------------------------------------------------------------------ bad files


def test_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope" / "dict.txt"
    with pytest.raises(FileNotFoundError, match="dictionary file not found") as error:
        Dictionary.load(path)
    assert error.value.filename == str(path)


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("a 1\nb\n", 2, r"expected '<symbol> <count> \[#fairseq:overwrite\]', got 'b\\n'"),
        ("a 1\n\nb 2\n", 2, r"expected '<symbol> <count>.*got '\\n'"),
        ("a 1\nb\t2\n", 2, r"expected '<symbol> <count>.*got 'b\\t2\\n'"),
        ("a 1\nb #fairseq:overwrite\n", 2, r"expected '<symbol> <count>.*got 'b #fairseq:overwrite\\n'"),
        ("a 1\nb 2\nc x\n", 3, r"count 'x' of symbol 'c' is not an integer"),
        ("a 1\nb 2.5\n", 2, r"count '2.5' of symbol 'b' is not an integer"),
        ("a 1\nb 2\na 3\n", 3, r"duplicate symbol 'a' \(already index 4\); end the row with #fairseq:overwrite"),
        ("<unk> 3\n", 1, r"duplicate symbol '<unk>' \(already index 3\)"),
    ],
    ids=[
        "no-count",
        "blank-line",
        "tab-separated",
        "flag-without-count",
        "bad-count",
        "float-count",
        "duplicate",
        "duplicate-special",
    ],
)
def test_bad_rows_name_file_and_line(tmp_path, fairseq_dictionary_class, text, line, message):
    path = _write(tmp_path / "dict.txt", text)
    with pytest.raises(DictionaryFormatError, match=rf"^{re.escape(str(path))}:{line}: {message}"):
        Dictionary.load(path)
    with pytest.raises(Exception):  # noqa: B017  fairseq rejects the same files, with exceptions of its choosing
        fairseq_dictionary_class.load(str(path))


def test_invalid_utf8_names_the_file(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_bytes(b"a 1\n\xff\xfe 2\n")
    with pytest.raises(DictionaryFormatError, match=rf"^{re.escape(str(path))}: not valid UTF-8"):
        Dictionary.load(path)


def test_format_error_is_a_value_error():
    assert issubclass(DictionaryFormatError, ValueError)
