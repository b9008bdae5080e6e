"""GPT-2 BPE (roberta_ext/tokenizers/gpt2_bpe.py): fast == reference == fairseq, on hand-picked
Unicode and on arbitrary text; ids equal to transformers' GPT-2 tokenizer on the same files; decoding of
bytes that are not UTF-8, the dictionary path, the word caches, and the full text of every format
error."""

from __future__ import annotations

import ast
import errno
import json
import re
import sys
import warnings
from pathlib import Path

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import GPT2Tokenizer
from transformers.convert_slow_tokenizer import bytes_to_unicode as transformers_bytes_to_unicode

from roberta_ext.tokenizers import (
    GPT2_SPLIT_PATTERN,
    GPT2BPE,
    Dictionary,
    FairseqGPT2Tokenizer,
    GPT2BPEFormatError,
    ReferenceGPT2BPE,
    bytes_to_unicode,
)
from roberta_ext.tokenizers import dictionary as dictionary_module
from roberta_ext.tokenizers import gpt2_bpe as gpt2_bpe_module
from roberta_ext.tokenizers.gpt2_bpe import WordCache, read_encoder_json, read_vocab_bpe, split_words
from tests.bpe_fixtures import UNICODE_SAMPLES, BpeFiles, build_bpe_files
from tests.tokenizers.conftest import CORPUS_LIKE_TEXTS, TEXTS, is_utf8

EDGE_CASES = [
    "",
    " ",
    "  ",
    "\n",
    "\r\n",
    " \n ",
    "\t \t",
    "a",
    " a",
    "a ",
    "a  b",
    "'s",
    "'S",
    "x's",
    "\x00",
    "\U0010ffff",
    "<|endoftext|>",
    "<unk> <mask> <s>",
    "Hello world!",
]
SAMPLES = [*UNICODE_SAMPLES, *EDGE_CASES, "\n".join(UNICODE_SAMPLES)]
PROPERTY = settings(max_examples=200, deadline=None)

BYTE_SYMBOLS = list(bytes_to_unicode().values())
TINY_MERGES = [("Ġ", "w"), ("Ġw", "o"), ("o", "w")]


def tiny_encoder(*tokens: str) -> dict[str, int]:
    """The 256 byte symbols with ids in byte order, then ``tokens``."""
    return {symbol: i for i, symbol in enumerate(BYTE_SYMBOLS)} | {token: 256 + k for k, token in enumerate(tokens)}


TINY_ENCODER = tiny_encoder("Ġw", "Ġwo", "ow")


def write_files(folder: Path, encoder: object, vocab_bpe: str) -> tuple[Path, Path]:
    encoder_json, merges = folder / "encoder.json", folder / "vocab.bpe"
    encoder_json.write_text(json.dumps(encoder), encoding="utf-8")
    merges.write_text(vocab_bpe, encoding="utf-8")
    return encoder_json, merges


def tiny_vocab_bpe(merges: list[tuple[str, str]] = TINY_MERGES) -> str:
    return "#version: 0.2\n" + "".join(f"{left} {right}\n" for left, right in merges)


def raw_bytes(symbols: str) -> bytes:
    byte_of_symbol = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    return bytes(byte_of_symbol[symbol] for symbol in symbols)


# -------------------------------------------------------------------------------------------- peers


def test_byte_table_and_pattern_are_fairseqs(fairseq_peer):
    from fairseq.data.encoders.gpt2_bpe_utils import bytes_to_unicode as fairseq_bytes_to_unicode

    assert bytes_to_unicode() == fairseq_bytes_to_unicode()
    assert GPT2_SPLIT_PATTERN == fairseq_peer.encoder.pat.pattern


@pytest.mark.parametrize("text", SAMPLES)
def test_ids_equal_fairseq_on_unicode_samples(text, fast_bpe, reference_bpe, tokenizer, fairseq_peer):
    expected_ids = fairseq_peer.encoder.encode(text)
    assert fast_bpe.encode(text) == expected_ids
    assert reference_bpe.encode(text) == expected_ids
    assert tokenizer.encode(text) == fairseq_peer.indices(text)
    assert fast_bpe.encode_fairseq_string(text) == fairseq_peer.bpe.encode(text)


@pytest.mark.parametrize("text", SAMPLES)
def test_decode_round_trips_and_equals_fairseq(text, fast_bpe, reference_bpe, tokenizer, fairseq_peer):
    ids = fast_bpe.encode(text)
    assert fast_bpe.decode(ids) == reference_bpe.decode(ids) == fairseq_peer.encoder.decode(ids) == text
    indices = tokenizer.encode(text)
    assert tokenizer.decode(indices) == fairseq_peer.bpe.decode(fairseq_peer.dictionary.string(indices))


@PROPERTY
@given(TEXTS)
def test_arbitrary_text_equals_fairseq(fast_bpe, reference_bpe, tokenizer, fairseq_peer, text):
    if not is_utf8(text):  # a lone surrogate: no bytes to encode, here as in fairseq
        for encode in (fast_bpe.encode, reference_bpe.encode, tokenizer.encode, fairseq_peer.encoder.encode):
            with pytest.raises(UnicodeEncodeError):
                encode(text)
        return
    expected_ids = fairseq_peer.encoder.encode(text)
    assert fast_bpe.encode(text) == expected_ids
    assert reference_bpe.encode(text) == expected_ids
    indices = tokenizer.encode(text)
    assert indices == fairseq_peer.indices(text)
    assert tokenizer.decode(indices) == fairseq_peer.bpe.decode(fairseq_peer.dictionary.string(indices))


@PROPERTY
@given(TEXTS)
def test_fast_equals_reference_and_round_trips(fast_bpe, reference_bpe, text):
    """Any ``str`` that encodes to UTF-8 (unassigned and private-use code points included) comes
    back from its ids; one holding a lone surrogate raises ``UnicodeEncodeError``."""
    if not is_utf8(text):
        with pytest.raises(UnicodeEncodeError):
            fast_bpe.encode(text)
        return
    ids = fast_bpe.encode(text)
    assert ids == reference_bpe.encode(text)
    assert fast_bpe.decode(ids) == text
    assert "".join(fast_bpe.encode_pieces(text)) == "".join(reference_bpe.decoder[i] for i in ids)


@PROPERTY
@given(CORPUS_LIKE_TEXTS)
def test_dictionary_path_round_trips_when_nothing_is_unknown(tokenizer, dictionary, text):
    indices = tokenizer.encode(text)
    if dictionary.unk() in indices:
        assert "<unk>" in tokenizer.decode(indices)  # the unknown pieces are lost, visibly
    else:
        assert tokenizer.decode(indices) == text
        assert tokenizer.decode([dictionary.bos(), *indices, dictionary.eos()]) == text


def test_round_trip_without_unknowns_on_samples(tokenizer, dictionary):
    """The property above must not hold vacuously: most samples encode without <unk>."""
    known = [text for text in SAMPLES if dictionary.unk() not in tokenizer.encode(text)]
    assert len(known) > len(SAMPLES) // 2
    for text in known:
        assert tokenizer.decode(tokenizer.encode(text)) == text


@pytest.fixture(scope="module")
def transformers_gpt2(bpe_files: BpeFiles):
    encoder = json.loads(bpe_files.encoder_json.read_text(encoding="utf-8"))
    merges = [tuple(line.split()) for line in bpe_files.vocab_bpe.read_text(encoding="utf-8").split("\n")[1:-1]]
    return GPT2Tokenizer(vocab=encoder, merges=merges)


PEER_TEXTS = [*UNICODE_SAMPLES, "", " ", "a  b", "x's 'S", "\U0010ffff", "\n".join(UNICODE_SAMPLES)]


@pytest.mark.parametrize("text", PEER_TEXTS)
def test_ids_and_pieces_equal_transformers_gpt2_tokenizer(text, transformers_gpt2, fast_bpe, reference_bpe):
    expected = transformers_gpt2.encode(text, add_special_tokens=False)
    assert fast_bpe.encode(text) == reference_bpe.encode(text) == expected
    assert fast_bpe.encode_pieces(text) == transformers_gpt2.convert_ids_to_tokens(expected)
    assert fast_bpe.encode_fairseq_string(text) == " ".join(map(str, expected))


def test_bytes_to_unicode_equals_transformers_in_byte_order():
    table = bytes_to_unicode()
    assert table == transformers_bytes_to_unicode()
    assert list(table) == list(range(256))
    assert [table[b] for b in (0, 32, 127, 160, 173)] == ["Ā", "Ġ", "ġ", "ł", "Ń"]


# --------------------------------------------------------------------------------- pre-tokenisation


@pytest.mark.parametrize(
    "text", ["naïve  world's end", "日本語のテキスト 123 ½", "Ünïcödé\u00a0\u2009 spaces \n\n", "e\u0301 ''s 'S"]
)
def test_split_words_of_non_ascii_text_is_the_gpt2_pattern(text):
    assert split_words(text) == regex.findall(GPT2_SPLIT_PATTERN, text)


def test_split_words_of_ascii_text():
    assert split_words("Hello world's  end!") == ["Hello", " world", "'s", " ", " end", "!"]
    assert split_words("a \t\n\x0b\x0c\rb") == ["a", " \t\n\x0b\x0c", "\r", "b"]


ASCII_TEXTS = st.lists(
    st.sampled_from([chr(i) for i in range(128)] + ["'s", "'ll", "'d", "'re", "  ", " \n "]), max_size=40
).map("".join)


@settings(max_examples=1000, deadline=None)
@given(ASCII_TEXTS)
def test_ascii_fast_path_splits_exactly_as_the_gpt2_pattern(text):
    import regex

    assert text.isascii()
    assert gpt2_bpe_module.split_words(text) == regex.findall(GPT2_SPLIT_PATTERN, text)


def test_ascii_fast_path_on_every_pair_of_ascii_characters():
    import regex

    for a in range(128):
        text = "".join(chr(a) + chr(b) + " " + chr(b) for b in range(128))
        assert gpt2_bpe_module.split_words(text) == regex.findall(GPT2_SPLIT_PATTERN, text)


# ----------------------------------------------------------------------------------------- decoding


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_decode_of_a_split_character_replaces_it_like_bytes_decode(cut, fast_bpe, reference_bpe, transformers_gpt2):
    emoji = "👍".encode()
    ids = fast_bpe.encode("a") + [fast_bpe.encoder[bytes_to_unicode()[b]] for b in emoji[:cut]] + fast_bpe.encode("b")
    expected = (b"a" + emoji[:cut] + b"b").decode("utf-8", errors="replace")
    assert expected == "a\ufffdb"
    assert fast_bpe.decode(ids) == reference_bpe.decode(ids) == transformers_gpt2.decode(ids) == expected
    assert fast_bpe.decode_fairseq_string(" ".join(map(str, ids))) == expected


def test_decode_of_bytes_in_the_wrong_order(fast_bpe, transformers_gpt2):
    ids = fast_bpe.encode("👍é")[::-1]
    expected = b"".join(raw_bytes(fast_bpe.decoder[i]) for i in ids).decode("utf-8", errors="replace")
    assert fast_bpe.decode(ids) == transformers_gpt2.decode(ids) == expected
    assert "\ufffd" in expected


def test_decode_of_nothing_is_empty(fast_bpe, reference_bpe):
    assert fast_bpe.decode([]) == reference_bpe.decode([]) == fast_bpe.decode_fairseq_string("") == ""


@pytest.mark.parametrize(
    ("decode", "ids", "message"),
    [
        (GPT2BPE.decode, [0, 999999], "GPT-2 id 999999 is not in the vocabulary"),
        (GPT2BPE.decode, ["0"], "GPT-2 id '0' is not in the vocabulary"),
        (GPT2BPE.decode_fairseq_string, "0 999999", "GPT-2 id 999999 is not in the vocabulary"),
        (GPT2BPE.decode_fairseq_string, "0 -1", "GPT-2 id -1 is not in the vocabulary"),
    ],
)
def test_decode_of_an_id_outside_the_vocabulary_says_which(fast_bpe, decode, ids, message):
    with pytest.raises(KeyError) as error:
        decode(fast_bpe, ids)
    assert error.value.args == (message,)


def test_decode_fairseq_string_passes_unk_and_mask_through_and_rejects_other_symbols(fast_bpe):
    hello, world = fast_bpe.encode("Hello world")
    assert fast_bpe.decode_fairseq_string(f"<unk> {hello} <mask> {world} <unk>") == "<unk>Hello<mask> world<unk>"
    for symbol in ["<s>", "</s>", "<pad>", "madeupword0000", "<UNK>"]:
        with pytest.raises(ValueError, match=re.escape(f"invalid literal for int() with base 10: '{symbol}'") + "$"):
            fast_bpe.decode_fairseq_string(f"{hello} {symbol}")


def test_is_beginning_of_word(fast_bpe):
    hello, world = fast_bpe.encode("Hello world")
    assert fast_bpe.is_beginning_of_word(str(world)) is True
    assert fast_bpe.is_beginning_of_word(str(hello)) is False
    assert fast_bpe.is_beginning_of_word("<unk>") is False
    assert fast_bpe.is_beginning_of_word("<mask>") is False


def test_in_memory_vocabulary_encodes_and_decodes_like_the_reference():
    bpe, reference = GPT2BPE(TINY_ENCODER, TINY_MERGES), ReferenceGPT2BPE(TINY_ENCODER, TINY_MERGES)
    for text in ["wow wow", " wow", "ow ow owow", "", "Ġ"]:
        assert bpe.encode(text) == reference.encode(text)
        assert bpe.decode(bpe.encode(text)) == reference.decode(reference.encode(text)) == text
    assert bpe.encode_pieces(" wowow") == ["Ġwo", "w", "ow"]
    assert bpe.encode(" wow") == [257, ord("w")]
    assert bpe.merges == TINY_MERGES


def test_a_repeated_merge_takes_its_last_rank_like_fairseq():
    merges = [("o", "w"), ("Ġ", "w"), ("Ġw", "o"), ("o", "w")]
    bpe, reference = GPT2BPE(TINY_ENCODER, merges), ReferenceGPT2BPE(TINY_ENCODER, merges)
    assert bpe.merges == [("Ġ", "w"), ("Ġw", "o"), ("o", "w")]
    assert bpe.encode_pieces(" wow") == ["Ġwo", "w"]
    assert bpe.encode(" wow ow") == reference.encode(" wow ow")


# --------------------------------------------------------------------- dictionary mapping and <unk>


def test_ids_missing_from_dict_txt_become_unk(bpe_files, fast_bpe, tokenizer, dictionary, fairseq_peer):
    standalone = [i for i in bpe_files.omitted_ids if fast_bpe.encode(fast_bpe.decode([i])) == [i]]
    assert len(standalone) >= 2  # (other omitted pieces only ever occur inside longer words)
    for token_id in standalone:
        text = fast_bpe.decode([token_id])
        assert tokenizer.encode(text) == [dictionary.unk()] == fairseq_peer.indices(text)
        assert str(token_id) not in dictionary
    # Byte symbols the corpus never used are absent from dict.txt as well.
    assert tokenizer.encode("\x03") == [dictionary.unk()]


def test_unknown_symbols_decode_as_literal_text(tokenizer, dictionary, fairseq_peer):
    indices = [dictionary.bos(), *tokenizer.encode("Hello"), dictionary.unk(), dictionary.eos()]
    decoded = tokenizer.decode(indices)
    assert decoded == "Hello<unk>"
    assert decoded == fairseq_peer.bpe.decode(fairseq_peer.dictionary.string(indices))


def test_mask_symbol_decodes_as_literal_text(bpe_files, fast_bpe):
    """fairseq's RoBERTa tasks append <mask> to the dictionary after loading dict.txt."""
    dictionary = Dictionary.load(bpe_files.dict_txt)
    mask = dictionary.add_symbol("<mask>")
    tokenizer = FairseqGPT2Tokenizer(fast_bpe, dictionary)
    assert tokenizer.decode([*tokenizer.encode("a"), mask, *tokenizer.encode(" b")]) == "a<mask> b"
    assert tokenizer.encode("<mask>") != [mask]  # text is never turned into special symbols


def test_decode_fairseq_string_and_beginning_of_word_equal_fairseq(fast_bpe, dictionary, fairseq_peer):
    line = " ".join(dictionary.symbols[dictionary.nspecial : dictionary.nspecial + 300])
    assert fast_bpe.decode_fairseq_string(line) == fairseq_peer.bpe.decode(line)
    assert fast_bpe.decode_fairseq_string("<unk> 3 <mask>") == fairseq_peer.bpe.decode("<unk> 3 <mask>")
    for symbol in dictionary.symbols:
        try:
            expected = fairseq_peer.bpe.is_beginning_of_word(symbol)
        except ValueError:  # "<s>", "<pad>", "madeupword0000": fairseq's masking relies on this
            with pytest.raises(ValueError):
                fast_bpe.is_beginning_of_word(symbol)
        else:
            assert fast_bpe.is_beginning_of_word(symbol) == expected


def test_decode_rejects_ids_outside_the_vocabulary(fast_bpe):
    with pytest.raises(KeyError, match="999999"):
        fast_bpe.decode([0, 999999])
    with pytest.raises(KeyError, match="999999"):
        fast_bpe.decode_fairseq_string("0 999999")


def test_decode_replaces_invalid_utf8_like_fairseq(fast_bpe, fairseq_peer):
    ids = fast_bpe.encode("👍")
    first_byte = [fast_bpe.encoder[bytes_to_unicode()[0xF0]]]
    assert fast_bpe.decode(first_byte) == fairseq_peer.encoder.decode(first_byte) == "\ufffd"
    assert fast_bpe.decode(ids[::-1]) == fairseq_peer.encoder.decode(ids[::-1])


def test_encode_word_adds_the_space_a_later_word_has(tokenizer):
    assert tokenizer.encode_word("world", first=True) == tokenizer.encode("world")
    assert tokenizer.encode_word("world", first=False) == tokenizer.encode(" world")
    assert tokenizer.encode("world") != tokenizer.encode(" world")


def test_token_text_of_bpe_and_special_symbols(bpe_files, fast_bpe):
    dictionary = Dictionary.load(bpe_files.dict_txt)
    not_an_id = dictionary.add_symbol("999999")
    mask = dictionary.add_symbol("<mask>")
    tokenizer = FairseqGPT2Tokenizer(fast_bpe, dictionary)
    (world,) = tokenizer.encode(" world")
    assert tokenizer.token_text(world) == " world"
    assert [tokenizer.token_text(index) for index in (0, 1, 2, 3, mask, not_an_id)] == [
        "<s>",
        "<pad>",
        "</s>",
        "<unk>",
        "<mask>",
        "999999",
    ]
    assert tokenizer.token_text(dictionary.index("madeupword0000")) == "madeupword0000"


def test_decode_drops_bos_and_eos_and_refuses_pad(tokenizer, dictionary):
    indices = tokenizer.encode("Hello world")
    assert tokenizer.decode([dictionary.bos(), *indices, dictionary.eos()]) == "Hello world"
    with pytest.raises(ValueError, match=re.escape("invalid literal for int() with base 10: '<pad>'") + "$"):
        tokenizer.decode([*indices, dictionary.pad()])


# ------------------------------------------------------------------------------------------- caches


def test_bounded_cache_gives_same_results(bpe_files, reference_bpe):
    small = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe, cache_size=3)
    text = "\n".join(UNICODE_SAMPLES)
    assert small.encode(text) == reference_bpe.encode(text)
    assert len(small._cache) <= 3
    with pytest.raises(ValueError, match="cache_size"):
        GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe, cache_size=0)


def test_word_cache_computes_on_a_miss_and_forgets_everything_when_full():
    computed = []

    def compute(word: str) -> tuple[str, ...]:
        computed.append(word)
        return tuple(word.upper())

    cache = WordCache(compute, max_size=2)
    assert (cache["ab"], cache["c"], cache["ab"]) == (("A", "B"), ("C",), ("A", "B"))
    assert (len(cache), computed) == (2, ["ab", "c"])
    assert cache["d"] == ("D",)
    assert (dict(cache), computed) == ({"d": ("D",)}, ["ab", "c", "d"])
    assert cache["ab"] == ("A", "B")
    assert (dict(cache), computed) == ({"d": ("D",), "ab": ("A", "B")}, ["ab", "c", "d", "ab"])


def test_word_cache_of_one_word():
    cache = WordCache(lambda word: (word,), max_size=1)
    assert [cache[word] for word in "aab"] == [("a",), ("a",), ("b",)]
    assert dict(cache) == {"b": ("b",)}


@pytest.mark.parametrize("size", [0, -3])
def test_cache_size_below_one_is_refused(bpe_files, size):
    message = re.escape(f"cache_size must be >= 1, got {size}") + "$"
    with pytest.raises(ValueError, match=message):
        WordCache(tuple, size)
    with pytest.raises(ValueError, match=message):
        GPT2BPE(TINY_ENCODER, TINY_MERGES, cache_size=size)
    with pytest.raises(ValueError, match=message):
        GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe, cache_size=size)
    with pytest.raises(ValueError, match=message):
        FairseqGPT2Tokenizer.from_files(*bpe_files, cache_size=size)


def test_cached_encoders_give_the_same_ids_on_every_call(bpe_files, reference_bpe, tokenizer):
    bpe = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe, cache_size=2)
    small = FairseqGPT2Tokenizer.from_files(*bpe_files, cache_size=2)
    text = "the cat and the dog and the cat"
    for _ in range(3):
        assert bpe.encode(text) == reference_bpe.encode(text)
        assert small.encode(text) == tokenizer.encode(text)
    assert small.dictionary.symbols == tokenizer.dictionary.symbols


def test_caches_forget_everything_when_full(bpe_files, tokenizer):
    small = FairseqGPT2Tokenizer.from_files(*bpe_files, cache_size=2)
    text = "one two three four five"
    assert small.encode(text) == small.encode(text) == tokenizer.encode(text)
    assert small.bpe.encode(text) == small.bpe.encode(text) == tokenizer.bpe.encode(text)
    last_two = [" four", " five"]
    assert dict(small._cache) == {word: tuple(tokenizer.encode(word)) for word in last_two}
    assert dict(small.bpe._cache) == {word: tuple(tokenizer.bpe.encode(word)) for word in last_two}


# -------------------------------------------------------------------------------- behaviour details


def test_lone_surrogates_raise_unicode_encode_error_like_fairseq(fast_bpe, reference_bpe, tokenizer, fairseq_peer):
    text = b"ok \xff bytes".decode("utf-8", errors="surrogateescape")
    for encode in (fast_bpe.encode, reference_bpe.encode, tokenizer.encode, fairseq_peer.encoder.encode):
        with pytest.raises(UnicodeEncodeError):
            encode(text)


def test_encode_batch_and_pieces(tokenizer, fast_bpe):
    assert tokenizer.encode_batch(SAMPLES) == [tokenizer.encode(text) for text in SAMPLES]
    assert tokenizer.encode_batch([]) == []
    assert fast_bpe.encode_pieces("a b") == ["a", "Ġb"]


def test_endoftext_is_plain_text(fast_bpe):
    assert fast_bpe.encoder["<|endoftext|>"] not in fast_bpe.encode("<|endoftext|>")


def test_in_memory_vocabulary():
    byte_symbols = list(bytes_to_unicode().values())
    encoder = {symbol: i for i, symbol in enumerate(byte_symbols)} | {"Ġw": 256, "Ġwo": 257}
    merges = [("Ġ", "w"), ("Ġw", "o")]
    bpe, reference = GPT2BPE(encoder, merges), ReferenceGPT2BPE(encoder, merges)
    assert bpe.encode(" wow") == reference.encode(" wow") == [257, ord("w")]  # byte symbols got ids in byte order
    assert bpe.encode_pieces("wo wo") == ["w", "o", "Ġwo"]
    with pytest.raises(GPT2BPEFormatError, match=r"merge 2: merge 'Ġw' 'o' uses 'Ġwo'"):
        GPT2BPE({k: v for k, v in encoder.items() if k != "Ġwo"}, merges)


@pytest.mark.parametrize("module", [gpt2_bpe_module, dictionary_module])
def test_module_needs_no_torch_or_fairseq(module):
    """Only the standard library, `regex` and sibling modules may be imported."""
    allowed = set(sys.stdlib_module_names) | {"regex"}
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            roots = {node.module.split(".")[0]}
        else:
            continue
        assert roots <= allowed, f"{module.__name__} imports {roots - allowed}"


# --------------------------------------------------------------------------- files and their errors


@pytest.fixture
def files(tmp_path) -> BpeFiles:
    return build_bpe_files(tmp_path)


def _encoder(files: BpeFiles) -> dict[str, int]:
    return json.loads(files.encoder_json.read_text(encoding="utf-8"))


def _write_encoder(files: BpeFiles, encoder: object) -> None:
    files.encoder_json.write_text(json.dumps(encoder), encoding="utf-8")


def _load(files: BpeFiles) -> GPT2BPE:
    return GPT2BPE.from_files(files.encoder_json, files.vocab_bpe)


@pytest.mark.parametrize("which", ["encoder_json", "vocab_bpe"])
def test_missing_file_is_named(files, which):
    getattr(files, which).unlink()
    with pytest.raises(FileNotFoundError, match=getattr(files, which).name) as error:
        _load(files)
    assert error.value.filename == str(getattr(files, which))


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda f: f.encoder_json.write_text('{"a": 1,', encoding="utf-8"), r"encoder\.json: not a valid JSON"),
        (lambda f: _write_encoder(f, [1, 2]), r"encoder\.json: expected a JSON object"),
        (lambda f: _write_encoder(f, _encoder(f) | {"Ġzz": "7"}), r"encoder\.json: id of 'Ġzz' must be an int"),
        (lambda f: _write_encoder(f, _encoder(f) | {"Ġzz": 0}), r"encoder\.json: id 0 is given to both"),
        (lambda f: _write_encoder(f, _encoder(f) | {"a b": 99999}), r"encoder\.json: token 'a b' is not"),
        (
            lambda f: _write_encoder(f, {k: v for k, v in _encoder(f).items() if k != "Ā"}),
            r"encoder\.json: lacks 1 of the 256 byte symbols, e\.g\. \['Ā'\]",
        ),
    ],
    ids=["invalid-json", "not-object", "non-int-id", "duplicate-id", "undecodable-token", "missing-byte"],
)
def test_bad_encoder_json_is_named(files, damage, message):
    damage(files)
    with pytest.raises(GPT2BPEFormatError, match=message):
        _load(files)


def test_bad_merge_lines_are_named_with_line_number(files):
    lines = files.vocab_bpe.read_text(encoding="utf-8").split("\n")
    for bad in ["a b c", "lonely", ""]:
        files.vocab_bpe.write_text("\n".join([*lines[:5], bad, *lines[5:]]), encoding="utf-8")
        with pytest.raises(GPT2BPEFormatError, match=rf"vocab\.bpe:6: expected '<left> <right>', got '{bad}'"):
            _load(files)
    files.vocab_bpe.write_text("\n".join(lines[1:]), encoding="utf-8")
    with pytest.raises(GPT2BPEFormatError, match=r"vocab\.bpe:1: expected the '#version: 0.2' header"):
        _load(files)


def test_merge_using_a_symbol_missing_from_the_encoder_is_named(files):
    encoder = _encoder(files)
    left, right = files.vocab_bpe.read_text(encoding="utf-8").split("\n")[7].split()
    del encoder[left + right]
    _write_encoder(files, encoder)
    with pytest.raises(GPT2BPEFormatError, match=rf"vocab\.bpe:8: merge '{left}' '{right}' uses '{left + right}'"):
        _load(files)


def test_missing_final_newline_drops_last_merge_like_fairseq_with_a_warning(files, fairseq_peer):
    from fairseq.data.encoders.gpt2_bpe_utils import get_encoder

    text = files.vocab_bpe.read_text(encoding="utf-8")
    last = text.rstrip("\n").rsplit("\n", 1)[1].split()
    files.vocab_bpe.write_text(text.rstrip("\n"), encoding="utf-8")
    with pytest.warns(UserWarning, match=r"vocab\.bpe does not end with a newline"):
        bpe = _load(files)
    word = bpe.decode([bpe.encoder["".join(last)]])  # the text the dropped merge would have joined
    assert bpe.encode(word) == get_encoder(files.encoder_json, files.vocab_bpe).encode(word)
    assert tuple(last) not in bpe._ranks


def test_read_files_returns_their_contents(tmp_path):
    encoder_json, vocab_bpe = write_files(tmp_path, TINY_ENCODER, tiny_vocab_bpe())
    assert read_encoder_json(encoder_json) == TINY_ENCODER
    assert read_vocab_bpe(vocab_bpe) == TINY_MERGES
    bpe, reference = GPT2BPE.from_files(encoder_json, vocab_bpe), ReferenceGPT2BPE.from_files(encoder_json, vocab_bpe)
    assert bpe.merges == TINY_MERGES
    assert bpe.encode(" wow") == reference.encode(" wow") == [257, ord("w")]


@pytest.mark.parametrize(
    ("text", "merges"),
    [
        ("#version: 0.2\n", []),
        ("#version: 0.2", []),
        ("#version: 0.2\r\nĠ w\r\nĠw o\r\n", [("Ġ", "w"), ("Ġw", "o")]),
        ("#version: 0.2\rĠ w\r", [("Ġ", "w")]),
        ("#version: 0.2\n  Ġ \t w  \n", [("Ġ", "w")]),
    ],
    ids=["header-only", "header-without-newline", "crlf", "cr", "tabs-and-spaces"],
)
def test_read_vocab_bpe_line_endings_and_spacing_as_fairseq(tmp_path, text, merges):
    path = tmp_path / "vocab.bpe"
    path.write_bytes(text.encode("utf-8"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_vocab_bpe(path) == merges


@pytest.mark.parametrize("count", [1, 3])
def test_missing_final_newline_warns_naming_the_dropped_merge_at_the_callers_line(tmp_path, count):
    merges = TINY_MERGES[:count]
    encoder_json, vocab_bpe = write_files(tmp_path, TINY_ENCODER, tiny_vocab_bpe(merges).rstrip("\n"))
    with pytest.warns(UserWarning) as record:
        bpe = GPT2BPE.from_files(encoder_json, vocab_bpe)
    last = " ".join(merges[-1])
    assert [str(warning.message) for warning in record] == [
        f"{vocab_bpe} does not end with a newline; its last merge {last!r} is ignored, as fairseq ignores it"
    ]
    assert bpe.merges == merges[:-1]


def test_missing_final_newline_warning_names_the_callers_file(tmp_path):
    encoder_json, vocab_bpe = write_files(tmp_path, TINY_ENCODER, tiny_vocab_bpe().rstrip("\n"))
    with pytest.warns(UserWarning) as record:
        GPT2BPE.from_files(encoder_json, vocab_bpe)
    assert [warning.filename for warning in record] == [__file__]


@pytest.mark.parametrize("which", ["encoder.json", "vocab.bpe"])
def test_missing_file_error(tmp_path, which):
    encoder_json, vocab_bpe = write_files(tmp_path, TINY_ENCODER, tiny_vocab_bpe())
    missing = tmp_path / which
    missing.unlink()
    for load in (GPT2BPE.from_files, ReferenceGPT2BPE.from_files):
        with pytest.raises(FileNotFoundError) as error:
            load(encoder_json, vocab_bpe)
        assert (error.value.errno, error.value.strerror, error.value.filename) == (
            errno.ENOENT,
            f"GPT-2 {which} not found",
            str(missing),
        )
        assert str(error.value) == f"[Errno {errno.ENOENT}] GPT-2 {which} not found: '{missing}'"


def _utf8_error(data: bytes) -> str:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        return str(error)
    raise AssertionError("valid UTF-8")


def _json_error(text: str) -> str:
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        return str(error)
    raise AssertionError("valid JSON")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'{"a": 1,', "not a valid JSON file ({})".format(_json_error('{"a": 1,'))),
        (b"", "not a valid JSON file ({})".format(_json_error(""))),
        (b'{"\xff": 1}', "not a valid JSON file ({})".format(_utf8_error(b'{"\xff": 1}'))),
        (b"[1, 2]", "expected a JSON object mapping token strings to ids, got a list"),
        (b"null", "expected a JSON object mapping token strings to ids, got a NoneType"),
        (b'"text"', "expected a JSON object mapping token strings to ids, got a str"),
    ],
    ids=["truncated", "empty", "not-utf8", "list", "null", "string"],
)
def test_bad_encoder_json_message(tmp_path, content, message):
    encoder_json, vocab_bpe = write_files(tmp_path, {}, tiny_vocab_bpe())
    encoder_json.write_bytes(content)
    for load in (GPT2BPE.from_files, ReferenceGPT2BPE.from_files):
        with pytest.raises(GPT2BPEFormatError, match=re.escape(f"{encoder_json}: {message}") + "$"):
            load(encoder_json, vocab_bpe)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"#version: 0.2\n\xc3\n", "not valid UTF-8 ({})".format(_utf8_error(b"#version: 0.2\n\xc3\n"))),
        (b"", ":1: expected the '#version: 0.2' header line, got ''"),
        (b"\xc4\xa0 w\n", ":1: expected the '#version: 0.2' header line, got 'Ġ w'"),
        (b" #version: 0.2\n", ":1: expected the '#version: 0.2' header line, got ' #version: 0.2'"),
        (b"#version: 0.2\n\xc4\xa0 w\nlonely\n", ":3: expected '<left> <right>', got 'lonely'"),
        (b"#version: 0.2\na b c\n", ":2: expected '<left> <right>', got 'a b c'"),
        (b"#version: 0.2\n\xc4\xa0 w\n\n\xc4\xa0w o\n", ":3: expected '<left> <right>', got ''"),
        (b"#version: 0.2\n \n", ":2: expected '<left> <right>', got ' '"),
    ],
    ids=["not-utf8", "empty", "no-header", "indented-header", "one-field", "three-fields", "blank-line", "space"],
)
def test_bad_vocab_bpe_message(tmp_path, content, message):
    encoder_json, vocab_bpe = write_files(tmp_path, TINY_ENCODER, "")
    vocab_bpe.write_bytes(content)
    separator = "" if message.startswith(":") else ": "
    for load in (GPT2BPE.from_files, ReferenceGPT2BPE.from_files):
        with pytest.raises(GPT2BPEFormatError, match=re.escape(f"{vocab_bpe}{separator}{message}") + "$"):
            load(encoder_json, vocab_bpe)


UNDECODABLE = "is not a non-empty string of GPT-2 byte symbols (see bytes_to_unicode), so it could not be decoded"
BAD_ENCODERS = [
    (TINY_ENCODER | {"Ġzz": "7"}, "id of 'Ġzz' must be an int >= 0, got '7'"),
    (TINY_ENCODER | {"Ġzz": True}, "id of 'Ġzz' must be an int >= 0, got True"),
    (TINY_ENCODER | {"Ġzz": -1}, "id of 'Ġzz' must be an int >= 0, got -1"),
    (TINY_ENCODER | {"Ġzz": 7.0}, "id of 'Ġzz' must be an int >= 0, got 7.0"),
    (TINY_ENCODER | {"Ġzz": None}, "id of 'Ġzz' must be an int >= 0, got None"),
    (TINY_ENCODER | {"Ġzz": 33}, "id 33 is given to both '!' and 'Ġzz'"),
    (TINY_ENCODER | {"": 999}, f"token '' {UNDECODABLE}"),
    (TINY_ENCODER | {"a b": 999}, f"token 'a b' {UNDECODABLE}"),
    (
        {token: i for token, i in TINY_ENCODER.items() if token not in {"z", "y", "!", "Ā"}},
        "lacks 4 of the 256 byte symbols, e.g. ['!', 'y', 'z', 'Ā']; texts containing those bytes could not be encoded",
    ),
    (
        {token: i for token, i in TINY_ENCODER.items() if token not in {*"abcdefĠ"}},
        "lacks 7 of the 256 byte symbols, e.g. ['a', 'b', 'c', 'd', 'e']; "
        "texts containing those bytes could not be encoded",
    ),
]


@pytest.mark.parametrize(("encoder", "message"), BAD_ENCODERS)
def test_bad_encoder_message(tmp_path, encoder, message):
    with pytest.raises(GPT2BPEFormatError, match=re.escape(f"encoder: {message}") + "$"):
        GPT2BPE(encoder, TINY_MERGES)
    encoder_json, vocab_bpe = write_files(tmp_path, encoder, tiny_vocab_bpe())
    for load in (GPT2BPE.from_files, ReferenceGPT2BPE.from_files):
        with pytest.raises(GPT2BPEFormatError, match=re.escape(f"{encoder_json}: {message}") + "$"):
            load(encoder_json, vocab_bpe)


@pytest.mark.parametrize(
    ("merge", "missing"),
    [(("ab", "cd"), "ab"), (("a", "cd"), "cd"), (("a", "b"), "ab")],
    ids=["left", "right", "merged"],
)
def test_merge_outside_the_encoder_message(tmp_path, merge, missing):
    merges = [*TINY_MERGES, merge]
    encoder = tiny_encoder("Ġw", "Ġwo", "ow", *sorted({"ab", "cd"} - {missing}))
    message = f"merge {merge[0]!r} {merge[1]!r} uses {missing!r}, which is not in"
    with pytest.raises(GPT2BPEFormatError, match=re.escape(f"merge 4: {message} encoder") + "$"):
        GPT2BPE(encoder, merges)
    encoder_json, vocab_bpe = write_files(tmp_path, encoder, tiny_vocab_bpe(merges))
    for load in (GPT2BPE.from_files, ReferenceGPT2BPE.from_files):
        with pytest.raises(GPT2BPEFormatError, match=re.escape(f"{vocab_bpe}:5: {message} {encoder_json}") + "$"):
            load(encoder_json, vocab_bpe)
