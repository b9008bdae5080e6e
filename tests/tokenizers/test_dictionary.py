"""Dictionary (roberta_ext/tokenizers/dictionary.py): the same indices, strings and line encodings
as fairseq.data.Dictionary; dict.txt rows read as fairseq reads them, the full text of every error,
``from_symbols``, ``string``/``encode_line`` options, and ``save``'s exact bytes (fairseq's own where
fairseq writes the same file)."""

from __future__ import annotations

import errno
import os
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roberta_ext.tokenizers import Dictionary, DictionaryFormatError
from tests.peers import require

PROPERTY = settings(max_examples=200, deadline=None)

_EXPECTED = "expected '<symbol> <count> [#fairseq:overwrite]'"
_REDEFINE = "end the row with #fairseq:overwrite to redefine it on purpose"


def _write(path, text: str):
    path.write_bytes(text.encode("utf-8"))
    return path


def _state(dictionary) -> tuple[list[str], list[int], dict[str, int], int]:
    return dictionary.symbols, dictionary.count, dictionary.indices, dictionary.nspecial


# ------------------------------------------------------------------------------------- construction


def test_a_new_dictionary_holds_the_four_specials_once_each():
    d = Dictionary()
    assert _state(d) == (
        ["<s>", "<pad>", "</s>", "<unk>"],
        [1, 1, 1, 1],
        {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3},
        4,
    )
    assert (d.bos_word, d.pad_word, d.eos_word, d.unk_word) == ("<s>", "<pad>", "</s>", "<unk>")
    assert d.source == "dictionary"
    assert repr(d) == "Dictionary(4 symbols, 4 special)"


def test_custom_specials_and_extra_specials_take_the_first_indices():
    d = Dictionary(bos="[CLS]", pad="[PAD]", eos="[SEP]", unk="[UNK]", extra_special_symbols=("<mask>", "<x>"))
    assert d.symbols == ["[CLS]", "[PAD]", "[SEP]", "[UNK]", "<mask>", "<x>"]
    assert (d.bos(), d.pad(), d.eos(), d.unk(), d.nspecial) == (0, 1, 2, 3, 6)
    assert (d.bos_word, d.pad_word, d.eos_word, d.unk_word) == ("[CLS]", "[PAD]", "[SEP]", "[UNK]")
    assert d.add_symbol("word") == 6
    assert repr(d) == "Dictionary(7 symbols, 6 special)"


def test_add_symbol_counts_one_by_default_and_n_when_given():
    d = Dictionary()
    assert d.add_symbol("a") == 4
    assert d.add_symbol("a") == 4
    assert d.add_symbol("b", n=5) == 5
    assert d.add_symbol("b", 2) == 5
    assert d.count[4:] == [2, 7]
    assert d.add_symbol("a", n=3, overwrite=True) == 6
    assert (d.symbols[4:], d.count[4:], d.index("a")) == (["a", "b", "a"], [2, 7, 3], 6)


def test_lookups_past_the_end_and_of_absent_symbols_give_unk():
    d = Dictionary(unk="[UNK]")
    d.add_symbol("x")
    assert (d[4], d[5], d[6]) == ("x", "[UNK]", "[UNK]")
    assert (d.index("x"), d.index("y")) == (4, 3)
    assert ("x" in d, "y" in d, 4 in d) == (True, False, False)
    assert len(d) == 5


@pytest.mark.parametrize(
    ("symbol", "message"),
    [(5, "dictionary symbols are str, got int: 5"), (b"a", "dictionary symbols are str, got bytes: b'a'")],
)
def test_index_of_a_non_string_says_what_it_got(symbol, message):
    with pytest.raises(TypeError, match=re.escape(message) + "$"):
        Dictionary().index(symbol)


def test_comparing_with_a_non_dictionary_is_not_equal():
    d = Dictionary()
    assert (d == {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}) is False
    assert (d != d.indices) is True
    assert d.__eq__(d.indices) is NotImplemented
    assert (d == Dictionary()) is True


def test_defaults_and_special_symbols():
    d = Dictionary(extra_special_symbols=["<mask>"])
    assert d.symbols == ["<s>", "<pad>", "</s>", "<unk>", "<mask>"] and d.nspecial == 5
    custom = Dictionary(bos="[CLS]", pad="[PAD]", eos="[SEP]", unk="[UNK]")
    assert custom.string([0, 3, 2], include_eos=True) == "[UNK] [SEP]"
    assert custom.index("nope") == 3
    with pytest.raises(TypeError, match="symbols are str"):
        d.index(5)


@PROPERTY
@given(st.lists(st.tuples(st.text(max_size=3), st.integers(0, 5), st.booleans()), max_size=20))
def test_add_symbol_equals_fairseq(fairseq_dictionary_class, additions):
    ours, theirs = Dictionary(), fairseq_dictionary_class()
    for word, n, overwrite in additions:
        assert ours.add_symbol(word, n=n, overwrite=overwrite) == theirs.add_symbol(word, n=n, overwrite=overwrite)
    assert (ours.symbols, ours.count, ours.indices) == (theirs.symbols, theirs.count, theirs.indices)


def test_equality_compares_indices_only():
    a, b = Dictionary(), Dictionary()
    a.add_symbol("x", n=5)
    b.add_symbol("x", n=1)
    assert a == b
    b.add_symbol("y")
    assert a != b
    assert a != {"x": 4}


# ------------------------------------------------------------------------------ string, encode_line


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


def test_string_skips_bos_and_eos_and_ignores_what_it_is_told():
    d = Dictionary()
    for word in "abc":
        d.add_symbol(word)
    assert d.string([0, 4, 5, 6, 2]) == "a b c"
    assert d.string([0, 4, 5, 6, 2], include_eos=True) == "a b c </s>"
    assert d.string([4, 5, 6, 1], extra_symbols_to_ignore=[5]) == "a c <pad>"
    assert d.string([4, 5, 2], extra_symbols_to_ignore={2}, include_eos=True) == "a b"
    assert d.string([4, 5], separator="") == "ab"
    assert d.string([]) == ""


def test_string_writes_unk_as_told():
    d = Dictionary(unk="[UNK]")
    d.add_symbol("a")
    assert d.string([4, 3, 9]) == "a [UNK] [UNK]"
    assert d.string([4, 3], escape_unk=True) == "a <[UNK]>"
    assert d.string([3, 4], unk_string="?", escape_unk=True) == "? a"
    assert d.string([3], unk_string="") == ""


def test_encode_line_appends_eos_unless_told_not_to():
    d = Dictionary()
    d.add_symbol("a")
    assert d.encode_line("a b\u3000a ") == [4, 3, 4, 2]
    assert d.encode_line("a b", append_eos=False) == [4, 3]
    assert d.encode_line(" \t\n") == [2]
    assert d.encode_line("", append_eos=False) == []


# ------------------------------------------------------------------------------------- from_symbols


def test_from_symbols_keeps_every_index_where_it_stands():
    d = Dictionary.from_symbols(
        ["[PAD]", "x", "[UNK]", "[CLS]", "[SEP]"], bos="[CLS]", pad="[PAD]", eos="[SEP]", unk="[UNK]"
    )
    assert _state(d) == (
        ["[PAD]", "x", "[UNK]", "[CLS]", "[SEP]"],
        [1, 1, 1, 1, 1],
        {"[PAD]": 0, "x": 1, "[UNK]": 2, "[CLS]": 3, "[SEP]": 4},
        0,
    )
    assert (d.bos(), d.pad(), d.eos(), d.unk()) == (3, 0, 4, 2)
    assert (d.bos_word, d.pad_word, d.eos_word, d.unk_word) == ("[CLS]", "[PAD]", "[SEP]", "[UNK]")
    assert (d.source, type(d)) == ("vocabulary", Dictionary)
    assert d.string([3, 1, 2, 4]) == "x [UNK]"
    assert d.encode_line("x y") == [1, 2, 4]
    assert repr(d) == "Dictionary(5 symbols, 0 special)"


def test_from_symbols_names_its_source():
    d = Dictionary.from_symbols(iter(["a", "b", "c", "d"]), bos="a", pad="b", eos="c", unk="d", source="vocab.txt")
    assert d.source == "vocab.txt"
    assert d.indices == {"a": 0, "b": 1, "c": 2, "d": 3}


@pytest.mark.parametrize(
    ("symbols", "source", "message"),
    [
        (["a", "b", "c", "b", "d"], None, "vocabulary: 'b' appears twice (indices 1 and 3)"),
        (["a", "b", "c", "d", "a"], "vocab.json", "vocab.json: 'a' appears twice (indices 0 and 4)"),
        (["b", "c", "d"], None, "vocabulary: has no bos symbol 'a'"),
        (["a", "c", "d"], "spm.model", "spm.model: has no pad symbol 'b'"),
        (["a", "b", "d"], None, "vocabulary: has no eos symbol 'c'"),
        (["a", "b", "c"], None, "vocabulary: has no unk symbol 'd'"),
    ],
)
def test_from_symbols_rejects_duplicates_and_missing_specials(symbols, source, message):
    named = {} if source is None else {"source": source}
    with pytest.raises(DictionaryFormatError, match=re.escape(message) + "$"):
        Dictionary.from_symbols(symbols, bos="a", pad="b", eos="c", unk="d", **named)


# --------------------------------------------------------------------------------------------- load


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


def test_overwrite_flag_loads_like_fairseq(tmp_path, fairseq_dictionary_class):
    path = _write(tmp_path / "dict.txt", "a 5\nb 3\na 7 #fairseq:overwrite\n<unk> 1 #fairseq:overwrite\nx y 2\n")
    ours, theirs = Dictionary.load(path), fairseq_dictionary_class.load(str(path))
    assert (ours.symbols, ours.count, ours.indices) == (theirs.symbols, theirs.count, theirs.indices)
    assert ours.index("a") == 6 and ours.index("x y") == 8 and ours.unk() == 3


_LOADABLE = {
    "plain": "a 5\nb 3\n",
    "no-final-newline": "a 5\nb 3",
    "crlf-and-cr": "a 5\r\nb 3\rc 1\n",
    "trailing-spaces": "a 5  \t\nb 3 \n",
    "leading-space-is-part-of-the-symbol": " a 5\n  b 3\n",
    "spaces-inside-symbols": "a b 5\nc  d 3\n",
    "python-int-counts": "a +5\nb 1_000\nc -2\nd  7\n",
    "empty-symbol": " 0\na 1\n",
    "overwrite": "a 5\nb 3\na 7 #fairseq:overwrite\n",
    "overwrite-special": "<unk> 9 #fairseq:overwrite\n<s> 1 #fairseq:overwrite\n",
    "overwrite-new-symbol": "a 2 #fairseq:overwrite\n",
    "overwrite-symbol-with-spaces": "a b c 5\na b c 6 #fairseq:overwrite\n",
    "overwrite-flag-trailing-space": "a 5\na 6 #fairseq:overwrite  \n",
    "flag-as-symbol": "#fairseq:overwrite 4\n",
    "unicode": "ü 3\n😀 2\n\u3000x 1\n",
}


@pytest.mark.parametrize("text", _LOADABLE.values(), ids=_LOADABLE.keys())
def test_load_reads_rows_like_fairseq(tmp_path, fairseq_dictionary_class, text):
    path = _write(tmp_path / "dict.txt", text)
    ours, theirs = Dictionary.load(path), fairseq_dictionary_class.load(str(path))
    assert _state(ours) == _state(theirs)
    assert (ours.bos(), ours.pad(), ours.eos(), ours.unk()) == (0, 1, 2, 3)
    assert ours.source == str(path)


def test_load_of_an_empty_file_gives_the_specials_only(tmp_path):
    d = Dictionary.load(_write(tmp_path / "dict.txt", ""))
    assert _state(d) == _state(Dictionary())


def test_load_accepts_a_str_path(tmp_path):
    path = _write(tmp_path / "dict.txt", "a 5\n")
    d = Dictionary.load(str(path))
    assert (d.index("a"), d.count[4], d.source) == (4, 5, str(path))


def test_missing_file_is_file_not_found_with_errno_and_path(tmp_path):
    path = tmp_path / "dict.txt"
    with pytest.raises(FileNotFoundError) as raised:
        Dictionary.load(path)
    assert (raised.value.errno, raised.value.strerror, raised.value.filename) == (
        errno.ENOENT,
        "dictionary file not found",
        str(path),
    )
    assert str(raised.value) == f"[Errno 2] dictionary file not found: '{path}'"
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


def test_invalid_utf8_message_is_the_path_and_the_decoder_error(tmp_path):
    path = tmp_path / "dict.txt"
    path.write_bytes(b"a 1\n\xff 2\n")
    with pytest.raises(DictionaryFormatError) as raised:
        Dictionary.load(path)
    assert str(raised.value) == (
        f"{path}: not valid UTF-8 ('utf-8' codec can't decode byte 0xff in position 4: invalid start byte)"
    )
    assert raised.value.__suppress_context__


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a 1\nb\n", f"2: {_EXPECTED}, got 'b\\n'"),
        ("a\n", f"1: {_EXPECTED}, got 'a\\n'"),
        ("a 1\n\n", f"2: {_EXPECTED}, got '\\n'"),
        ("a 1\n   \n", f"2: {_EXPECTED}, got '   \\n'"),
        ("b #fairseq:overwrite\n", f"1: {_EXPECTED}, got 'b #fairseq:overwrite\\n'"),
        ("b\t5 #fairseq:overwrite\n", f"1: {_EXPECTED}, got 'b\\t5 #fairseq:overwrite\\n'"),
        ("a x\n", "1: count 'x' of symbol 'a' is not an integer"),
        ("a 1\nb c #fairseq:overwrite\n", "2: count 'c' of symbol 'b' is not an integer"),
        (
            "a 1\nb 2\na 3\n",
            f"3: duplicate symbol 'a' (already index 4); {_REDEFINE}",
        ),
        (
            "</s> 1\n",
            f"1: duplicate symbol '</s>' (already index 2); {_REDEFINE}",
        ),
    ],
)
def test_bad_rows_give_the_full_message(tmp_path, fairseq_dictionary_class, text, message):
    path = _write(tmp_path / "dict.txt", text)
    with pytest.raises(DictionaryFormatError) as raised:
        Dictionary.load(path)
    assert str(raised.value) == f"{path}:{message}"
    with pytest.raises(Exception):  # noqa: B017  fairseq rejects the same files, with exceptions of its choosing
        fairseq_dictionary_class.load(str(path))


# ---------------------------------------------------------------------------------------- bad files


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


# --------------------------------------------------------------------------------------------- save


def test_fairseq_loads_what_we_save(tmp_path, dictionary, fairseq_dictionary_class):
    dictionary.save(tmp_path / "dict.txt")
    assert fairseq_dictionary_class.load(str(tmp_path / "dict.txt")).indices == dictionary.indices


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


def test_save_writes_what_fairseq_writes(tmp_path, fairseq_dictionary_class):
    text = "a 5\nb c 3\nü 1\n 0\nd -2\n"
    source = _write(tmp_path / "source.txt", text)
    ours = Dictionary.load(source)
    ours.save(tmp_path / "ours.txt")
    fairseq_dictionary_class.load(str(source)).save(str(tmp_path / "theirs.txt"))
    assert (tmp_path / "ours.txt").read_bytes() == (tmp_path / "theirs.txt").read_bytes() == text.encode("utf-8")


def test_a_dictionary_fairseq_padded_to_a_multiple_loads_and_saves_unchanged(tmp_path, fairseq_dictionary_class):
    theirs = fairseq_dictionary_class.load(str(_write(tmp_path / "source.txt", "a 5\nb 3\nc 1\n")))
    theirs.pad_to_multiple_(8)
    theirs.save(str(tmp_path / "theirs.txt"))
    ours = Dictionary.load(tmp_path / "theirs.txt")
    assert _state(ours) == _state(theirs)
    assert ours.symbols[4:] == ["a", "b", "c", "madeupword0000"] and ours.count[4:] == [5, 3, 1, 0]
    ours.save(tmp_path / "ours.txt")
    assert (tmp_path / "ours.txt").read_bytes() == (tmp_path / "theirs.txt").read_bytes()


def test_save_flags_every_redefined_symbol_specials_included(tmp_path):
    d = Dictionary(extra_special_symbols=["<mask>"])
    d.add_symbol("a", n=2)
    d.add_symbol("<unk>", n=4, overwrite=True)
    d.add_symbol("<mask>", n=5, overwrite=True)
    d.add_symbol("a", n=6, overwrite=True)
    d.add_symbol("a", n=7, overwrite=True)
    path = tmp_path / "dict.txt"
    d.save(str(path))
    assert path.read_bytes() == (
        b"a 2\n<unk> 4 #fairseq:overwrite\n<mask> 5 #fairseq:overwrite\n"
        b"a 6 #fairseq:overwrite\na 7 #fairseq:overwrite\n"
    )


def test_save_then_load_gives_the_same_dictionary(tmp_path):
    source = _write(tmp_path / "source.txt", "a 5\nb 3\na 7 #fairseq:overwrite\n<unk> 2 #fairseq:overwrite\nx y 1\n")
    loaded = Dictionary.load(source)
    loaded.save(tmp_path / "saved.txt")
    assert (tmp_path / "saved.txt").read_bytes() == source.read_bytes()
    assert _state(Dictionary.load(tmp_path / "saved.txt")) == _state(loaded)


@pytest.mark.parametrize("word", ["a\nb", "a\rb", "\r", "x\r\n"])
def test_save_refuses_a_symbol_with_a_line_break(tmp_path, word):
    d = Dictionary()
    d.add_symbol("fine")
    d.add_symbol(word)
    with pytest.raises(ValueError, match=re.escape(f"cannot save symbol {word!r}: it contains a line break") + "$"):
        d.save(tmp_path / "dict.txt")
    assert not (tmp_path / "dict.txt").exists()


def test_save_of_the_specials_only_is_an_empty_file(tmp_path):
    path = tmp_path / "dict.txt"
    Dictionary(extra_special_symbols=["<mask>"]).save(path)
    assert path.read_bytes() == b""
