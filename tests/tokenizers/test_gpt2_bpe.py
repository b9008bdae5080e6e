"""GPT-2 BPE: fast == reference == fairseq, on hand-picked Unicode and on arbitrary text."""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


# ---------------------------------------------------------------------------------------- peers


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


# ----------------------------------------------------------------- dictionary mapping and <unk>


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


# ---------------------------------------------------------------------------- behaviour details


def test_lone_surrogates_raise_unicode_encode_error_like_fairseq(fast_bpe, reference_bpe, tokenizer, fairseq_peer):
    text = b"ok \xff bytes".decode("utf-8", errors="surrogateescape")
    for encode in (fast_bpe.encode, reference_bpe.encode, tokenizer.encode, fairseq_peer.encoder.encode):
        with pytest.raises(UnicodeEncodeError):
            encode(text)


def test_bounded_cache_gives_same_results(bpe_files, reference_bpe):
    small = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe, cache_size=3)
    text = "\n".join(UNICODE_SAMPLES)
    assert small.encode(text) == reference_bpe.encode(text)
    assert len(small._cache) <= 3
    with pytest.raises(ValueError, match="cache_size"):
        GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe, cache_size=0)


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


# ---------------------------------------------------------------------------------- bad files


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


# ------------------------------------------------------------------- ASCII pre-tokenisation

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
