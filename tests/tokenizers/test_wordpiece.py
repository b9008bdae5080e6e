"""WordPiece (BERT): our ids == transformers' ``BertTokenizer``, on every code point and on arbitrary text.

transformers has had two BERT tokenizers, and :class:`WordPieceTokenizer` gives the ids of either.

**By default, transformers 5's ``BertTokenizer``**: the ``tokenizers``-backed (Rust) class, which
4.x called ``BertTokenizerFast`` (``BertTokenizerFast`` is an alias of it in 5.x). It runs HF
``tokenizers``' ``BertNormalizer``, ``BertPreTokenizer`` and ``WordPiece``, and it is the peer
itself here (:func:`fast`). The Rust library classifies characters with tables of its own, not
with Python's ``unicodedata`` (14.0 on Python 3.11): Unicode 8.0 categories, 9.0 normalization and
17.0 lowercasing (``roberta_ext/tokenizers/_bert_unicode.py``). The tests check those tables against
the installed library (``bert_unicode_probe.py``), run every code point through both tokenizers,
alone and inside a word, cased and uncased, compare arbitrary text drawn from all of Unicode
(unassigned, private-use and surrogate code points included), and pin the code points where
Python's ``unicodedata`` says otherwise than the library.

**With ``legacy=True``, transformers 4.x's Python ``BertTokenizer``**. In transformers 5 the Python
implementation lives on as ``transformers.models.bert.tokenization_bert_legacy.BertTokenizerLegacy``:
its ``_tokenize``, ``BasicTokenizer`` and ``WordpieceTokenizer`` are line for line those of
transformers 4.x's ``BertTokenizer`` (compared against 4.57.6). One step was lost on the way:
transformers 4.x's ``PreTrainedTokenizer.tokenize`` lowercased the text *one character at a
time* (special tokens excepted) before ``_tokenize``, and 5.x no longer does. Python lowercases a
whole word differently in one case only: a word-final ``Σ`` becomes ``ς`` (Unicode's Final_Sigma).
So the peer there is ``BertTokenizerLegacy`` with that 4.x step put back (:func:`v4_lowercase`,
copied verbatim) — that is, transformers 4.x's slow ``BertTokenizer``, the tokenizer BERT's
released checkpoints were used with for years. While writing this module, the legacy flavour was
also run against transformers 4.57.6 itself on ~60,000 random texts, cased and uncased, with no
difference; :func:`test_golden_values_from_transformers_4` keeps a few of its outputs.

Where the two transformers tokenizers differ, each pinned by a test below: the Python one applies
NFC (``"e\\u0301"`` is ``"é"``), deletes every ``C*`` character of this Python's Unicode
(unassigned code points included, which the Rust one keeps as letters), starts CJK Extension E at
U+2B820 (the Rust one at U+2B920, a typo), classifies characters with this Python's tables (``"⹊"``,
U+2E4A, is punctuation since Unicode 11, not for the Rust one), lowercases the text around special
tokens before finding them and keeps a special token that appears only after cleaning whole
(``"[MA\\x00SK]"``), where the Rust one matches special tokens as written. A lone surrogate is
not text: transformers 5 raises ``TypeError``, ``BertTokenizerLegacy`` deletes it, and ours raises
``ValueError`` in both flavours, naming its position.

Beside these comparisons of whole vocabularies on arbitrary text, a tiny vocabulary (``TINY``) pins
what they leave loose: each option alone against transformers 5's ``BertTokenizer`` and its Python
``BertTokenizerLegacy``, the full text of every message, the greedy loop's edges, the bounded
character tables, decoding, and the trainer's merges counted by hand. Every test starts with the
module's shared character tables empty (:func:`fresh_character_tables`).
"""

from __future__ import annotations

import doctest
import errno
import os
import re
import string
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roberta_ext.tokenizers import _bert_unicode, wordpiece
from roberta_ext.tokenizers.wordpiece import (
    BERT_SPECIAL_TOKENS,
    BasicTokenizer,
    BertPreTokenizer,
    WordPiece,
    WordPieceFormatError,
    WordPieceTokenizer,
    read_vocab,
    train_wordpiece_vocab,
    write_vocab,
)
from tests.bpe_fixtures import UNICODE_SAMPLES
from tests.peers import require
from tests.tokenizers import bert_unicode_probe
from tests.tokenizers.conftest import TEXTS, is_utf8

legacy_bert = require("transformers.models.bert.tokenization_bert_legacy", "transformers' BERT tokenizer is the peer")
tokenizers = require("tokenizers", "HF tokenizers runs transformers 5's BertTokenizer")

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")

LONG_WORD = "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3 + "x" * 15  # 150 characters
BERT_SAMPLES = (
    "Ångström measured the café's naïve façade — ÉCOLE, Übermensch, İstanbul.",
    "Greek ΟΔΟΣ ΑΣ. σοφία ΣΟΦΙΑ and Cyrillic Ёжик в тумане; ПРИВЕТ!",
    "Specials in text: a[MASK]b [SEP] c[CLS]d [PAD] [UNK] [mask] [MA\x00SK] [MASK][MASK]",
    f"{LONG_WORD} short {LONG_WORD[:100]} {LONG_WORD[:101]}",
    "Tabs\tNBSP\u00a0thin\u2009ideographic\u3000 and e\u0301 a\u0300 <\u0338 K \u1fef \u03f9",
    "CJK 你好世界 Ext-B \U00020001 Ext-E \U0002b820\U0002b91f compat \uf900 Hangul 한국어 かな カナ",
    "Controls \x00\x01\x7f\x85\u200b\ufeff\ufffd and private use \ue000 and unassigned \U000e0080 gone",
    "1,000,000 9,9 3.14 ``quotes'' don't I'm we're ##hash ####",
)
SAMPLES = (*UNICODE_SAMPLES, *BERT_SAMPLES, "", " ", "\n", "[MASK]", "##", "a ##b")
# Appended to the trained vocabularies so that WordPiece meets "##"-initial words and long tokens.
EXTRA_TOKENS = ("##", "####", "##hash", "pneumonoultramicroscopicsilicovolcanoconiosis", "Pneumono")

_PIECES = [
    *BERT_SPECIAL_TOKENS,
    "[mask]",
    "[MA\x00SK]",
    "Σ",
    "ΑΣ ",
    "e\u0301",
    "<\u0338",
    "\u0345",
    "İ",
    "ß",
    "中",
    "\U0002b820",
    "\u0378",
    "\u08e2",
    "\u166d",
    "\u1734",
    "\U00011938",
    "\u0898",
    "\ua7cb",
    "\u1fef",
    "\x85",
    "\ufffd",
    "\ue000",
    "##",
    "x" * 101,
    "''",
    "``",
    "9,9",
]
BERT_TEXTS = st.lists(st.one_of(TEXTS, st.sampled_from(_PIECES)), max_size=6).map("".join)
"""Arbitrary text from all of Unicode, lone surrogates included (see conftest.TEXTS), with special
tokens and BERT's corner cases mixed in."""
_SURROGATES = re.compile("[\\ud800-\\udfff]")
BERT_UTF8_TEXTS = BERT_TEXTS.map(lambda text: _SURROGATES.sub("", text))
"""The same without lone surrogates, for the Python peer (which deletes them where ours raises)."""

PROPERTY = settings(max_examples=200, deadline=None)
CASINGS = pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])

TINY = [
    *BERT_SPECIAL_TOKENS,
    "un",
    "##aff",
    "##able",
    "aff",
    "able",
    "!",
    ",",
    ".",
    "'",
    "s",
    "t",
    "don",
    "##t",
    "a",
    "##b",
    "##",
    "x",
    "##x",
    "##xx",
    "中",
    "文",
    "cafe",
    "café",
    "Cafe",
    "Café",
    "CAFE",
    "[",
    "]",
    "mask",
    "σ",
    "ς",
    "Σ",
    "e",
    "##\u0301",
    "\u0301",
]
TINY_TEXTS = (
    "UNaffable!! don't [MASK] able",
    "Café CAFE cafe café",
    "中文x中 文",
    "ΑΣ σ Σ",
    "e\u0301 un\u0301aff",
    "xxxx xxx ##x ## a##b",
    "a\x00b\tun\u00a0aff \ufffd[SEP]",
    "[mask] [MA\x00SK] [ MASK]",
)
OPTIONS = [
    {},
    {"do_lower_case": False},
    {"strip_accents": False},
    {"strip_accents": True},
    {"do_lower_case": False, "strip_accents": True},
    {"tokenize_chinese_chars": False},
]


@pytest.fixture(autouse=True)
def fresh_character_tables():
    """The module's shared character tables start empty: mutmut forks each mutant from a process whose
    tables the unmutated code filled, and a character found there is never classified again."""
    tables = [*wordpiece._CLEAN_TABLES.values(), *wordpiece._NORMALIZE_TABLES.values()]
    for table in (*tables, wordpiece._PUNCTUATION, wordpiece._NFD_UNKNOWN):
        table.clear()


def message(text: str) -> str:
    return re.escape(text) + "$"


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "vocab.txt"
    write_vocab(TINY, path)
    return path


# -------------------------------------------------------------------------------------------- peers


def v4_lowercase(tokenizer, text: str) -> str:
    """transformers 4.57.6 ``PreTrainedTokenizer.tokenize``, lines 644-653, verbatim: lowercase
    every character of the text except inside special tokens, before ``_tokenize``."""
    if hasattr(tokenizer, "do_lower_case") and tokenizer.do_lower_case:
        # convert non-special tokens to lowercase. Might be super slow as well?
        escaped_special_toks = [re.escape(s_tok) for s_tok in (tokenizer.all_special_tokens)]
        escaped_special_toks += [
            re.escape(s_tok.content)
            for s_tok in (tokenizer._added_tokens_decoder.values())
            if not s_tok.special and s_tok.normalized
        ]
        pattern = r"(" + r"|".join(escaped_special_toks) + r")|" + r"(.+?)"
        text = re.sub(pattern, lambda m: m.groups()[0] or m.groups()[1].lower(), text)
    return text


class SlowBert:
    """transformers 4.x's slow ``BertTokenizer``: 5.x's ``BertTokenizerLegacy`` plus :func:`v4_lowercase`."""

    def __init__(self, vocab_txt: Path, *, lower: bool) -> None:
        self.legacy = legacy_bert.BertTokenizerLegacy(str(vocab_txt), do_lower_case=lower)

    def encode(self, text: str) -> list[int]:
        return self.legacy.encode(v4_lowercase(self.legacy, text), add_special_tokens=False)

    def tokenize(self, text: str) -> list[str]:
        return self.legacy.tokenize(v4_lowercase(self.legacy, text))

    def decode(self, ids: list[int]) -> str:
        return self.legacy.decode(ids)


@pytest.fixture(scope="module")
def vocab_files(tmp_path_factory) -> dict[bool, Path]:
    """``{do_lower_case: vocab.txt}``, each learned by our trainer from the samples and the corner
    cases, as both flavours pre-tokenize them (so that either finds its characters there)."""
    folder = tmp_path_factory.mktemp("wordpiece")
    corpus = [*SAMPLES, *(f"x{piece}y {piece}" for piece in _PIECES)] * 3
    files = {}
    for lower in (True, False):
        tokens = train_wordpiece_vocab(corpus, vocab_size=1500, do_lower_case=lower, min_frequency=2)
        legacy_tokens = train_wordpiece_vocab(corpus, vocab_size=1500, do_lower_case=lower, legacy=True)
        extra = dict.fromkeys([*legacy_tokens, *EXTRA_TOKENS])
        path = folder / f"vocab_{'uncased' if lower else 'cased'}.txt"
        write_vocab([*tokens, *(t for t in extra if t not in set(tokens))], path)
        files[lower] = path
    return files


@pytest.fixture(scope="module")
def ours(vocab_files) -> dict[bool, WordPieceTokenizer]:
    """The default flavour: transformers 5's ``BertTokenizer``."""
    return {lower: WordPieceTokenizer.from_file(path, do_lower_case=lower) for lower, path in vocab_files.items()}


@pytest.fixture(scope="module")
def ours_legacy(vocab_files) -> dict[bool, WordPieceTokenizer]:
    """``legacy=True``: transformers 4.x's Python ``BertTokenizer``."""
    return {
        lower: WordPieceTokenizer.from_file(path, do_lower_case=lower, legacy=True)
        for lower, path in vocab_files.items()
    }


@pytest.fixture(scope="module")
def slow(vocab_files) -> dict[bool, SlowBert]:
    return {lower: SlowBert(path, lower=lower) for lower, path in vocab_files.items()}


@pytest.fixture(scope="module")
def fast(vocab_files) -> dict:
    """transformers 5's ``BertTokenizer`` (``tokenizers``-backed), read from the same vocab.txt."""
    from transformers import BertTokenizer

    return {lower: BertTokenizer(str(path), do_lower_case=lower) for lower, path in vocab_files.items()}


# ------------------------------------------------------ the default: transformers 5's BertTokenizer


def fast_ids(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def test_unassigned_code_point_inside_a_word(tmp_path):
    """Issue 13: U+0378 is unassigned. transformers 5 keeps it, so the word is [UNK]; the Python
    tokenizer deleted it, and so did ours."""
    from transformers import BertTokenizer

    path = tmp_path / "vocab.txt"
    write_vocab([*BERT_SPECIAL_TOKENS, "x", "##y"], path)
    for lower in (True, False):
        peer = BertTokenizer(str(path), do_lower_case=lower)
        ours = WordPieceTokenizer.from_file(path, do_lower_case=lower)
        assert ours.tokenize("x\u0378y") == peer.tokenize("x\u0378y") == ["[UNK]"]
        assert ours.encode("x\u0378y") == fast_ids(peer, "x\u0378y") == [1]
        legacy = WordPieceTokenizer.from_file(path, do_lower_case=lower, legacy=True)
        assert legacy.tokenize("x\u0378y") == SlowBert(path, lower=lower).tokenize("x\u0378y") == ["x", "##y"]


@CASINGS
@pytest.mark.parametrize("text", SAMPLES)
def test_ids_equal_bert_tokenizer_on_samples(text, lower, ours, fast):
    assert ours[lower].encode(text) == fast_ids(fast[lower], text)
    assert ours[lower].tokenize(text) == fast[lower].tokenize(text)


@CASINGS
@PROPERTY
@given(text=BERT_TEXTS)
def test_ids_equal_bert_tokenizer_on_text_from_all_of_unicode(lower, ours, fast, text):
    if not is_utf8(text):
        # A lone surrogate cannot cross into Rust: transformers raises TypeError ("TextEncodeInput
        # must be ..."), ours a ValueError that says where the surrogate is.
        with pytest.raises(ValueError, match=r"lone surrogate at index \d+"):
            ours[lower].encode(text)
        with pytest.raises(TypeError):
            fast_ids(fast[lower], text)
        return
    assert ours[lower].encode(text) == fast_ids(fast[lower], text)


OPTION_SETS = [
    dict(do_lower_case=lower, strip_accents=strip, tokenize_chinese_chars=chinese)
    for lower in (True, False)
    for strip in (None, True, False)
    for chinese in (True, False)
]


@pytest.fixture(scope="module")
def option_pairs(vocab_files) -> list[tuple[WordPieceTokenizer, object]]:
    """Ours and transformers' ``BertTokenizer`` for each of :data:`OPTION_SETS`."""
    from transformers import BertTokenizer

    return [
        (
            WordPieceTokenizer.from_file(vocab_files[options["do_lower_case"]], **options),
            BertTokenizer(str(vocab_files[options["do_lower_case"]]), **options),
        )
        for options in OPTION_SETS
    ]


@settings(max_examples=100, deadline=None)
@given(text=BERT_TEXTS)
def test_every_option_set_equals_bert_tokenizer(option_pairs, text):
    """``strip_accents`` (None, on, off) and ``tokenize_chinese_chars``, cased and uncased."""
    if is_utf8(text):
        for ours, peer in option_pairs:
            assert ours.encode(text) == fast_ids(peer, text), (ours.do_lower_case, ours.basic.strip_accents)


@pytest.mark.parametrize("options", OPTION_SETS, ids=str)
@settings(max_examples=40, deadline=None)
@given(text=BERT_UTF8_TEXTS)
def test_pre_tokenizer_equals_tokenizers_normalizer_and_pre_tokenizer(options, text):
    assert_pre_tokenizer_equals_tokenizers(options, text)


def assert_pre_tokenizer_equals_tokenizers(options: dict, text: str) -> None:
    """Our BertPreTokenizer with ``options`` normalizes and splits ``text`` as the tokenizers library's
    BertNormalizer and BertPreTokenizer do."""
    ours = BertPreTokenizer(**options)
    normalizer = tokenizers.normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=options["tokenize_chinese_chars"],
        strip_accents=options["strip_accents"],
        lowercase=options["do_lower_case"],
    )
    normalized = normalizer.normalize_str(text)
    assert ours.normalize(text) == normalized
    pre_tokens = [piece for piece, _ in tokenizers.pre_tokenizers.BertPreTokenizer().pre_tokenize_str(normalized)]
    assert ours.tokenize(text) == pre_tokens


# Where this Python's unicodedata (14.0) and the library's tables (see _bert_unicode) disagree, and
# the other corners of the normalizer: the text "x{c}y", its pre-tokens uncased and cased (the
# tokens of the vocabulary below), and why.
UNICODE_CORNERS = [
    ("\u0378", ["x\u0378y"], ["x\u0378y"], "unassigned (Cn): kept, a letter"),
    ("\uffff", ["x\uffffy"], ["x\uffffy"], "a noncharacter (Cn): kept"),
    ("\ue000", ["xy"], ["xy"], "private use (Co): deleted"),
    ("\U0010fffd", ["xy"], ["xy"], "private use, plane 16: deleted"),
    ("\u200b", ["xy"], ["xy"], "format (Cf): deleted"),
    ("\u08e2", ["x\u08e2y"], ["x\u08e2y"], "Cf since Unicode 9.0: kept (deleted by legacy)"),
    ("\U000110cd", ["x\U000110cdy"], ["x\U000110cdy"], "Cf since Unicode 11.0: kept"),
    ("\x85", ["xy"], ["xy"], "NEXT LINE: a control character (Cc) before whitespace, so deleted"),
    ("\x1f", ["xy"], ["xy"], "Cc, whitespace to str.split only: deleted"),
    ("\u2028", ["x", "y"], ["x", "y"], "LINE SEPARATOR (Zl): whitespace"),
    ("\u3000", ["x", "y"], ["x", "y"], "IDEOGRAPHIC SPACE (Zs): whitespace"),
    ("\u166d", ["x", "\u166d", "y"], ["x", "\u166d", "y"], "So since Unicode 12.0, punctuation in 8.0"),
    ("\U000111c9", ["x", "\U000111c9", "y"], ["x", "\U000111c9", "y"], "Mn since 13.0, punctuation in 8.0"),
    ("\u2e4a", ["x\u2e4ay"], ["x\u2e4ay"], "punctuation since Unicode 11.0: a letter here"),
    ("\u1734", ["xy"], ["x\u1734y"], "Mc since Unicode 14.0, a nonspacing mark in 8.0: stripped"),
    ("\u0898", ["x\u0898y"], ["x\u0898y"], "a mark (Mn) since Unicode 14.0: not stripped"),
    ("\u0301", ["xy"], ["x\u0301y"], "a combining acute: stripped uncased"),
    ("\U00011938", ["x\U00011938y"], ["x\U00011938y"], "decomposes since Unicode 13.0, not in 9.0's NFD"),
    ("\u1fef", ["x", "`", "y"], ["x\u1fefy"], "GREEK VARIA: NFD makes it a backtick, punctuation"),
    ("\u212b", ["xay"], ["x\u212by"], "ANGSTROM SIGN: NFD is A + ring, no NFC"),
    ("\ua7cb", ["x\u0264y"], ["x\ua7cby"], "a capital since Unicode 16.0: lowercased by Rust"),
    ("\U00016ea0", ["x\U00016ebby"], ["x\U00016ea0y"], "Beria Erfe, Unicode 17.0: lowercased by Rust"),
    ("\u0130", ["xiy"], ["x\u0130y"], "İ: NFD then strip, then lowercase"),
    ("\u03a3", ["xσy"], ["xΣy"], "Σ: σ, one character at a time (no final ς)"),
    ("\U0002b820", ["x\U0002b820y"], ["x\U0002b820y"], "CJK Ext. E below U+2B920: not split (a typo)"),
    ("\U0002b920", ["x", "\U0002b920", "y"], ["x", "\U0002b920", "y"], "CJK Ext. E from U+2B920: split"),
    ("\U00031350", ["x\U00031350y"], ["x\U00031350y"], "CJK Ext. H: not in BERT's ranges"),
    ("\uf900", ["x", "\u8c48", "y"], ["x", "\uf900", "y"], "a CJK compatibility ideograph: NFD uncased"),
]


@pytest.mark.parametrize("char, uncased, cased, why", UNICODE_CORNERS, ids=[c[3] for c in UNICODE_CORNERS])
def test_unicode_corners(char, uncased, cased, why, tmp_path):
    from transformers import BertTokenizer

    pre_tokens = {True: uncased, False: cased}
    path = tmp_path / "vocab.txt"
    # Every pre-token above is in the vocabulary, so the ids show it.
    vocab = sorted({token for tokens in (uncased, cased) for token in tokens} - set(BERT_SPECIAL_TOKENS))
    write_vocab([*BERT_SPECIAL_TOKENS, *vocab], path)
    for lower in (True, False):
        text = f"x{char}y"
        assert BertPreTokenizer(do_lower_case=lower).tokenize(text) == pre_tokens[lower], why
        ours = WordPieceTokenizer.from_file(path, do_lower_case=lower)
        assert ours.tokenize(text) == pre_tokens[lower]
        assert ours.encode(text) == fast_ids(BertTokenizer(str(path), do_lower_case=lower), text)


def test_lone_surrogates_raise_value_error(ours, fast):
    """A ``str`` holding a lone surrogate (bytes decoded with ``errors="surrogateescape"``) is not
    text: transformers 5 cannot pass it to Rust (``TypeError``), and ours says where it is, in both
    flavours (``BertTokenizerLegacy`` deletes it, as a ``C*`` character)."""
    text = "[MASK] ok " + b"\xff bytes".decode("utf-8", errors="surrogateescape")
    with pytest.raises(TypeError):
        fast_ids(fast[True], text)
    for tok in (ours[True], ours[False], WordPieceTokenizer(ours[True].tokens, legacy=True)):
        with pytest.raises(ValueError, match=r"lone surrogate at index 10 \('\\udcff'\)"):
            tok.encode(text)
    with pytest.raises(ValueError, match="lone surrogate at index 0"):
        BertPreTokenizer().tokenize("\ud800")
    with pytest.raises(ValueError, match="lone surrogate at index 1"):
        BasicTokenizer().tokenize("a\udfff")


def test_special_tokens_are_found_as_written(tmp_path):
    """The Rust tokenizer matches special tokens in the text as written, before normalizing: a
    lowercase special does not match its uppercase spelling, and cleaning uncovers none."""
    from transformers import BertTokenizer

    path = tmp_path / "vocab.txt"
    write_vocab(["<pad>", "<unk>", "<s>", "</s>", "<mask>", "a", "##b", "<", ">", "unk", "mask"], path)
    names = dict(unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>")
    for lower in (True, False):
        ours = WordPieceTokenizer.from_file(path, do_lower_case=lower, **names)
        peer = BertTokenizer(str(path), do_lower_case=lower, **names)
        for text in ["ab<mask> <UNK> c", "<mask><MASK> <ma\x00sk>", "[MASK] <unk>"]:
            assert ours.encode(text) == fast_ids(peer, text)
    assert WordPieceTokenizer.from_file(path, **names).encode("ab<mask> <UNK>") == [5, 6, 4, 7, 9, 8]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("text", TINY_TEXTS)
def test_each_option_gives_the_tokens_of_bert_tokenizer(options, text, tiny_file):
    from transformers import BertTokenizer

    peer = BertTokenizer(str(tiny_file), **options)
    ours = WordPieceTokenizer(TINY, **options)
    assert ours.tokenize(text) == peer.tokenize(text)
    assert ours.encode(text) == peer.encode(text, add_special_tokens=False)


# --------------------------------------------------------------------------------- every code point

EVERY_CODE_POINT = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
"""All code points but the surrogates, which are not text (see test_lone_surrogates_raise_value_error)."""


def _first_difference(ours: list, theirs: list) -> str:
    """Where two long lists first differ, shortly (pytest's own diff of a million items takes minutes)."""
    for i, (a, b) in enumerate(zip(ours, theirs)):
        if a != b:
            return f"at item {i}: ours {ours[max(0, i - 2) : i + 3]!r}, theirs {theirs[max(0, i - 2) : i + 3]!r}"
    return "" if len(ours) == len(theirs) else f"lengths {len(ours)} and {len(theirs)}"


def test_tables_are_the_installed_librarys():
    """_bert_unicode's tables, read afresh off the installed tokenizers (see bert_unicode_probe.py)."""
    tables = bert_unicode_probe.probe_tables()
    assert tables["other"] == _bert_unicode.OTHER.ranges()
    assert tables["punctuation"] == _bert_unicode.PUNCTUATION.ranges()
    assert tables["nonspacing_marks"] == _bert_unicode.NONSPACING_MARKS.ranges()
    assert tables["nfd_known"] == _bert_unicode.NFD_KNOWN.ranges()
    assert {cp: ord(lower) for cp, lower in tables["lowercase"].items()} == _bert_unicode.LOWERCASE


@pytest.fixture(scope="module")
def alphanumeric_vocab(tmp_path_factory) -> Path:
    """The special tokens, ASCII letters and digits, each also as a ## token: enough for the ids
    to tell a code point deleted ("x", "##y"), whitespace ("x", "y"), split off ("x", "[UNK]",
    "y"), kept in the word ("[UNK]") or lowercased to ASCII apart."""
    path = tmp_path_factory.mktemp("alphanumeric") / "vocab.txt"
    characters = string.ascii_letters + string.digits
    write_vocab([*BERT_SPECIAL_TOKENS, *characters, *(f"##{c}" for c in characters)], path)
    return path


@CASINGS
def test_every_code_point_alone_and_inside_a_word(lower, alphanumeric_vocab):
    """Each code point c as "c" and as "xcy", through ours and transformers' BertTokenizer.

    The code points go 4,096 to a text, "c xcy c' xc'y ...", so that the Rust tokenizer takes them
    in batches (``encode_batch_fast``). No step reaches across a space (NFD does not reorder across
    a starter; no special token holds a space), so a text's ids are its code points' ids in a row;
    where a text's differ, its code points are compared one by one."""
    from transformers import BertTokenizer

    ours = WordPieceTokenizer.from_file(alphanumeric_vocab, do_lower_case=lower)
    rust = BertTokenizer(str(alphanumeric_vocab), do_lower_case=lower)._tokenizer
    blocks = [EVERY_CODE_POINT[i : i + 4096] for i in range(0, len(EVERY_CODE_POINT), 4096)]
    differences = []
    for batch in range(0, len(blocks), 32):  # 32 texts per encode_batch_fast: all cores, bounded memory
        texts = [" ".join(f"{chr(cp)} x{chr(cp)}y" for cp in block) for block in blocks[batch : batch + 32]]
        encodings = rust.encode_batch_fast(texts, add_special_tokens=False)
        differences += _code_points_that_differ(ours, rust, blocks[batch : batch + 32], texts, encodings)
    assert not differences, f"{len(differences)} code points differ: {differences[:20]}"


def _code_points_that_differ(ours, rust, blocks, texts, encodings) -> list[str]:
    differences = []
    for block, text, encoding in zip(blocks, texts, encodings):
        if ours.encode(text) != encoding.ids:
            for cp in block:
                one = f"{chr(cp)} x{chr(cp)}y"
                theirs = rust.encode(one, add_special_tokens=False).ids
                if ours.encode(one) != theirs:
                    differences.append(f"U+{cp:04X}: ours {ours.encode(one)}, transformers {theirs}")
    return differences


def test_every_code_point_normalized_and_split_as_tokenizers_does():
    """Uncased (clean, CJK, NFD, strip, lowercase, split): every code point, sixteen to a word, so
    that what NFD does to marks next to one another is compared too."""
    words = ["x" + "".join(map(chr, EVERY_CODE_POINT[i : i + 16])) + "y" for i in range(0, len(EVERY_CODE_POINT), 16)]
    ours = BertPreTokenizer()
    normalizer = tokenizers.normalizers.BertNormalizer()  # clean, CJK, lowercase, strip: BERT's defaults
    pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    for i in range(0, len(words), 2048):
        text = " ".join(words[i : i + 2048])
        pre_tokens = [piece for piece, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))]
        assert ours.tokenize(text) == pre_tokens, _first_difference(ours.tokenize(text), pre_tokens)


# --------------------------------------------- legacy=True: transformers 4.x's Python BertTokenizer


@CASINGS
@pytest.mark.parametrize("text", SAMPLES)
def test_ids_equal_slow_bert_on_samples(text, lower, ours_legacy, slow):
    assert ours_legacy[lower].encode(text) == slow[lower].encode(text)
    assert ours_legacy[lower].tokenize(text) == slow[lower].tokenize(text)


@CASINGS
@PROPERTY
@given(text=BERT_UTF8_TEXTS)
def test_ids_equal_slow_bert_on_arbitrary_text(lower, ours_legacy, slow, text):
    ids = ours_legacy[lower].encode(text)
    assert ids == slow[lower].encode(text)
    # BertTokenizer.decode cleans up tokenization spaces by default.
    assert ours_legacy[lower].decode(ids, clean_up_tokenization_spaces=True) == slow[lower].decode(ids)


@CASINGS
@pytest.mark.parametrize("text", SAMPLES)
def test_decode_equals_convert_tokens_to_string(text, lower, ours_legacy, slow):
    ids = ours_legacy[lower].encode(f"[CLS] {text} [SEP]")
    tokens = slow[lower].legacy.convert_ids_to_tokens(ids)
    assert ours_legacy[lower].decode(ids) == slow[lower].legacy.convert_tokens_to_string(tokens)
    assert ours_legacy[lower].decode(ids, clean_up_tokenization_spaces=True) == slow[lower].decode(ids)


@pytest.mark.parametrize("strip_accents", [None, True, False])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("chinese", [True, False])
@settings(max_examples=60, deadline=None)
@given(text=BERT_UTF8_TEXTS)
def test_basic_tokenizer_equals_transformers(strip_accents, lower, chinese, text):
    options = dict(do_lower_case=lower, strip_accents=strip_accents, tokenize_chinese_chars=chinese)
    never_split = ["[MASK]", "[SEP]"]
    peer = legacy_bert.BasicTokenizer(never_split=never_split, **options)
    assert BasicTokenizer(never_split=never_split, **options).tokenize(text) == peer.tokenize(text)


@pytest.mark.parametrize("text", ["[SEP]\u0301", "\u0301[SEP]", "[SE\u0301P]", "[MA\u0300SK] x"])
@pytest.mark.parametrize("lower", [True, False])
def test_a_word_that_becomes_a_never_split_token_once_its_accents_go_stays_whole(text, lower):
    """transformers checks ``never_split`` again after lowercasing and stripping accents: "[SEP]"
    with a combining accent is kept whole, not split at its brackets (a case hypothesis found)."""
    options = dict(do_lower_case=lower, strip_accents=True)
    peer = legacy_bert.BasicTokenizer(never_split=["[MASK]", "[SEP]"], **options).tokenize(text)
    assert BasicTokenizer(never_split=["[MASK]", "[SEP]"], **options).tokenize(text) == peer
    # Cased, the token is kept whole; lowercased it is "[sep]", which neither keeps.
    assert any(token in ("[SEP]", "[MASK]") for token in peer) is not lower


@PROPERTY
@given(words=st.lists(st.text(alphabet="abcdé#中", max_size=12), max_size=8))
def test_wordpiece_equals_transformers(words):
    tokens = [*BERT_SPECIAL_TOKENS, "a", "b", "ab", "abc", "##a", "##b", "##bc", "##c", "#", "##", "###", "中"]
    tokens.append("##é")
    vocab = {token: i for i, token in enumerate(tokens)}
    peer = legacy_bert.WordpieceTokenizer(vocab=vocab, unk_token="[UNK]", max_input_chars_per_word=10)
    text = " ".join(words)
    assert WordPiece(vocab, max_input_chars_per_word=10).tokenize(text) == peer.tokenize(text)


def test_uncased_options_equal_slow_bert(vocab_files):
    """``strip_accents`` and ``tokenize_chinese_chars`` reach the basic tokenizer as in BertTokenizer."""
    text = "Ångström NAÏVE café 你好 Übermensch"
    for strip_accents in (None, True, False):
        for chinese in (True, False):
            options = dict(strip_accents=strip_accents, tokenize_chinese_chars=chinese)
            for lower in (True, False):
                ours = WordPieceTokenizer.from_file(vocab_files[lower], do_lower_case=lower, legacy=True, **options)
                peer = legacy_bert.BertTokenizerLegacy(str(vocab_files[lower]), do_lower_case=lower, **options)
                assert ours.encode(text) == peer.encode(v4_lowercase(peer, text), add_special_tokens=False)


def test_golden_values_from_transformers_4(tmp_path):
    """Produced with transformers 4.57.6's ``BertTokenizer(path, do_lower_case=...)``
    (``encode(text, add_special_tokens=False)``) on this vocabulary, in a scratch environment."""
    vocab = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        "[",
        "]",
        "m",
        "##a",
        "##s",
        "##k",
        "M",
        "##A",
        "##S",
        "##K",
        "caf",
        "##e",
        "##é",
        "##\u0301",
        "ο",
        "##δ",
        "##ο",
        "##σ",
        "##ς",
        "οδος",
        "οδοσ",
        "α",
        "Α",
        "##Σ",
        "ΟΔΟΣ",
    ]
    texts = ["ΟΔΟΣ ΑΣ.", "Café cafe\u0301", "[MA\x00SK] [mask]", "x[MASK]ΑΣ"]
    write_vocab(vocab, tmp_path / "vocab.txt")
    uncased = WordPieceTokenizer.from_file(tmp_path / "vocab.txt", legacy=True)
    cased = WordPieceTokenizer.from_file(tmp_path / "vocab.txt", do_lower_case=False, legacy=True)
    assert [uncased.encode(t) for t in texts] == [
        [25, 26, 22, 1],
        [15, 16, 15, 16],
        [5, 7, 8, 9, 10, 6, 5, 7, 8, 9, 10, 6],
        [1, 4, 26, 22],
    ]
    assert [cased.encode(t) for t in texts] == [[29, 27, 28, 1], [1, 15, 17], [4, 5, 7, 8, 9, 10, 6], [1, 4, 27, 28]]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("text", TINY_TEXTS)
def test_each_option_gives_the_tokens_of_the_python_bert_tokenizer(options, text, tiny_file):
    peer = legacy_bert.BertTokenizerLegacy(str(tiny_file), **options)
    ours = WordPieceTokenizer(TINY, legacy=True, **options)
    assert ours.tokenize(text) == peer.tokenize(v4_lowercase(peer, text))
    assert ours.encode(text) == peer.encode(v4_lowercase(peer, text), add_special_tokens=False)


# --------------------------------------------------------------------------------- the two flavours


def test_transformers_5_legacy_differs_only_by_character_lowercasing(ours_legacy, slow):
    legacy = slow[True].legacy
    assert legacy.tokenize("ΟΔΟΣ") != ours_legacy[True].tokenize("ΟΔΟΣ")  # 'οδος' (Final_Sigma) vs 'οδοσ'
    assert legacy.tokenize("[MA\x00SK]") == ["[MASK]"]
    assert ours_legacy[True].tokenize("[MA\x00SK]") == slow[True].tokenize("[MA\x00SK]") != ["[MASK]"]
    # Without a capital sigma or a special token to uncover, the two are the same.
    for text in SAMPLES:
        if "Σ" not in text and "\x00" not in text:
            assert ours_legacy[True].encode(text) == legacy.encode(text, add_special_tokens=False)


@pytest.mark.parametrize(
    "text",
    [
        "cafe\u0301",  # NFC in Python only
        "x\U000e0080y",  # unassigned: deleted by Python, kept by Rust
        "x\u08e2y",  # a format character since Unicode 9.0: deleted by Python, kept by Rust
        "a\U0002b820b",  # CJK Extension E, which tokenizers starts at U+2B920
        "x\u2e4ay",  # punctuation since Unicode 11
        "[MA\x00SK]",  # a special token once NUL is deleted
    ],
)
def test_the_flavours_differ_on(text, ours, ours_legacy, slow, fast):
    assert ours[False].encode(text) == fast_ids(fast[False], text)
    assert ours_legacy[False].encode(text) == slow[False].encode(text)
    assert ours[False].encode(text) != ours_legacy[False].encode(text)


def _outside_known_divergences(text: str) -> bool:
    """No control/format/unassigned/private-use character (but \\t \\n \\r), and already NFC."""
    categories_ok = all(c in "\t\n\r" or not unicodedata.category(c).startswith("C") for c in text)
    return categories_ok and unicodedata.is_normalized("NFC", text)


_ORDINARY_CHARACTERS = sorted(
    {c for c in "".join(SAMPLES) if _outside_known_divergences(c) and not 0x2B820 <= ord(c) < 0x2B920}
)
ORDINARY_TEXTS = st.lists(st.sampled_from([*_ORDINARY_CHARACTERS, *BERT_SPECIAL_TOKENS, " ", "\t", "\n"]), max_size=50)
ORDINARY_TEXTS = ORDINARY_TEXTS.map("".join)


@CASINGS
@PROPERTY
@given(text=ORDINARY_TEXTS)
def test_the_flavours_agree_on_text_of_the_corpus(lower, ours, ours_legacy, text):
    # Characters of the samples combine into non-NFC sequences now and then; that is a known divergence.
    if unicodedata.is_normalized("NFC", text):
        assert ours[lower].encode(text) == ours_legacy[lower].encode(text)


# ----------------------------------------------------------------------------------- pre-tokenizers

BASIC_OPTIONS = [
    {"do_lower_case": False, "never_split": ["[X]"], "tokenize_chinese_chars": False, "strip_accents": True},
    {"do_lower_case": True, "never_split": (), "tokenize_chinese_chars": True, "strip_accents": None},
    {"do_lower_case": True, "never_split": ["[X]", "y"], "tokenize_chinese_chars": True, "strip_accents": False},
]


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_basic_tokenizer_keeps_its_options_as_transformers_does(options):
    ours = BasicTokenizer(**options)
    theirs = legacy_bert.BasicTokenizer(**options)
    for name in ("do_lower_case", "never_split", "tokenize_chinese_chars", "strip_accents"):
        assert getattr(ours, name) == getattr(theirs, name)
    pre = BertPreTokenizer(**{k: v for k, v in options.items() if k != "never_split"})
    assert (pre.do_lower_case, pre.tokenize_chinese_chars, pre.strip_accents) == (
        options["do_lower_case"],
        options["tokenize_chinese_chars"],
        options["strip_accents"],
    )


ASCII = "".join(f"a{chr(cp)}b " for cp in range(128))
_CJK_EDGES = [0x4E00, 0x9FFF, 0x3400, 0x4DBF, 0x20000, 0x2A6DF, 0x2A700, 0x2B73F, 0x2B740, 0x2B81F, 0x2B820, 0x2B920]
_CJK_EDGES += [0x2CEAF, 0xF900, 0xFAFF, 0x2F800, 0x2FA1F]
CORNERS = [
    *map(chr, range(0x100)),
    *(chr(cp + step) for cp in _CJK_EDGES for step in (-1, 0, 1)),
    *"\u1680\u2000\u2005\u200a\u200b\u200c\u200d\u2028\u2029\u202f\u205f\u3000\ufeff\ufffd\ue000\u0378",
    *"\U000e0001\u0300\u0301\u0345\u2e4a\u055a\uff01\u3001\u0898\u08e2\u166d\u1734\U00011938\ua7cb\u1fef\u0130\u03a3\u212b\uf900",
    "\u0898\u0899",
]
CORNER_TEXT = "".join(f"x{c}y É{c}{c}Ë " for c in CORNERS)


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_basic_tokenizer_splits_ascii_as_transformers_does(options):
    assert BasicTokenizer(**options).tokenize(ASCII) == legacy_bert.BasicTokenizer(**options).tokenize(ASCII)
    words = ASCII.split()
    theirs = legacy_bert.BasicTokenizer(**options)
    assert [BasicTokenizer(**options).split_word(word) for word in words] == [
        tuple(theirs._run_split_on_punc(word.lower() if options["do_lower_case"] else word)) for word in words
    ]


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_basic_tokenizer_on_corner_characters_equals_transformers(options):
    assert BasicTokenizer(**options).tokenize(CORNER_TEXT) == legacy_bert.BasicTokenizer(**options).tokenize(
        CORNER_TEXT
    )


@pytest.mark.parametrize("options", BASIC_OPTIONS, ids=str)
def test_pre_tokenizer_on_corner_characters_equals_tokenizers(options):
    options = {name: value for name, value in options.items() if name != "never_split"}
    assert_pre_tokenizer_equals_tokenizers(options, CORNER_TEXT)


def _surrogate_message(snippet: str, index: int) -> str:
    return (
        f"text {snippet!r} has a lone surrogate at index {index} ('\\udcff'): not valid Unicode, which BERT's "
        "tokenizers (transformers 5's BertTokenizer raises TypeError) cannot tokenize; decode the bytes properly first"
    )


@pytest.mark.parametrize("legacy", [False, True])
def test_a_lone_surrogate_is_named_in_the_whole_text(legacy):
    tok = WordPieceTokenizer(TINY, legacy=legacy)
    with pytest.raises(ValueError, match=message(_surrogate_message("[MASK] ok \udcff bytes", 10))):
        tok.encode("[MASK] ok \udcff bytes")


@pytest.mark.parametrize("pre_tokenizer", [BasicTokenizer(), BertPreTokenizer()], ids=["legacy", "rust"])
def test_a_lone_surrogate_stops_the_pre_tokenizers(pre_tokenizer):
    with pytest.raises(ValueError, match=message(_surrogate_message("ab\udcff", 2))):
        pre_tokenizer.tokenize("ab\udcff")
    with pytest.raises(ValueError, match=message(_surrogate_message("ab\udcff", 2))):
        pre_tokenizer.words("ab\udcff")


# ---------------------------------------------------------------------------------------- wordpiece


@pytest.mark.parametrize(
    "word, pieces",
    [
        ("xxxx", ["x", "##xx", "##x"]),
        ("unaffable", ["un", "##aff", "##able"]),
        ("##xx", ["##xx"]),
        ("##", ["##"]),
        ("abc", ["abc"]),
        ("abcx", ["abc", "##x"]),
        ("ab", None),
        ("", []),
        ("x" * 12, ["x", *["##xx"] * 5, "##x"]),
        ("x" * 13, None),
    ],
)
def test_word_pieces_take_the_longest_token_first(word, pieces):
    vocab = dict.fromkeys(["x", "##x", "##xx", "un", "##aff", "##able", "##", "abc"], 0)
    wordpiece = WordPiece(vocab, max_input_chars_per_word=12)
    assert wordpiece.word_pieces(word) == pieces
    assert wordpiece.tokenize(f" {word}\t{word} ") == (["[UNK]"] if pieces is None else pieces) * 2
    other_unknown = WordPiece(vocab, unk_token="<?>", max_input_chars_per_word=12)
    assert other_unknown.tokenize(word) == (["<?>"] if pieces is None else pieces)


def test_word_pieces_defaults_are_berts():
    wordpiece = WordPiece({"[UNK]": 0, "x": 1, "##x": 2})
    assert (wordpiece.unk_token, wordpiece.max_input_chars_per_word) == ("[UNK]", 100)
    assert wordpiece.word_pieces("x" * 100) == ["x", *["##x"] * 99]
    assert wordpiece.tokenize("x" * 101) == ["[UNK]"]


def test_word_pieces_of_vocabularies_without_continuations():
    assert WordPiece({"ab": 0, "a": 1}).word_pieces("ab") == ["ab"]
    assert WordPiece({"ab": 0, "a": 1}).word_pieces("aba") is None
    assert WordPiece({}).word_pieces("a") is None
    assert WordPiece({"##b": 0, "a": 1, "##bbbbbbbb": 2}).word_pieces("abbbbbbbbb") == ["a", "##bbbbbbbb", "##b"]


@pytest.mark.parametrize("legacy", [False, True])
def test_whole_tokens_at_the_length_limit(legacy):
    tokens = [*BERT_SPECIAL_TOKENS, "abc", "##d", "ab", "##cd"]
    tok = WordPieceTokenizer(tokens, max_input_chars_per_word=3, legacy=legacy)
    assert tok.tokenize("abc abcd ab a") == ["abc", "[UNK]", "ab", "[UNK]"]
    assert WordPieceTokenizer(tokens, max_input_chars_per_word=4, legacy=legacy).tokenize("abcd") == ["abc", "##d"]


# ------------------------------------------------------------------------- bounded character tables


def _distinct_characters(count: int) -> str:
    return "".join(map(chr, range(0x10000, 0x10000 + count)))


@pytest.mark.parametrize("extra, kept", [(0, wordpiece._TABLE_LIMIT), (1, 1)])
def test_character_tables_start_afresh_past_their_limit(extra, kept):
    text = _distinct_characters(wordpiece._TABLE_LIMIT + extra)
    assert wordpiece._TABLE_LIMIT == 1 << 16
    clean = wordpiece._CleanTable(legacy=False, split_cjk=True)
    one_at_a_time = [c.translate(wordpiece._CleanTable(legacy=False, split_cjk=True)) for c in text]
    assert text.translate(clean) == "".join(one_at_a_time)
    assert len(clean) == kept
    normalize = wordpiece._NormalizeTable(strip=False, lower=False, split_punctuation=False)
    assert text.translate(normalize) == text and len(normalize) == kept
    classes = wordpiece._CharacterTable(str.isidentifier)
    assert [classes[c] for c in text] == [c.isidentifier() for c in text] and len(classes) == kept


# ----------------------------------------------------------------------------------------- decoding


def test_decode_joins_continuations_and_strips_the_ends():
    tok = WordPieceTokenizer([*BERT_SPECIAL_TOKENS, " edge ", "un", "##aff", "##able", "##", "."])
    assert tok.decode([5, 6, 7, 8, 10, 9, 5]) == "edge  unaffable .  edge"
    assert tok.decode(iter([8, 6, 2])) == "##able un [CLS]"
    assert tok.decode([]) == ""


CLEAN_UP = ["do", "n't", "I", "'m", "we", "'re", "they", "'ve", "it", "'s", "'", "q", "'", "a", ",", "b", ".", "c"]
CLEAN_UP += ["?", "d", "!", "e", "##s", "."]


def test_decode_cleans_up_as_transformers_does():
    from transformers import PreTrainedTokenizerBase

    tokens = [*BERT_SPECIAL_TOKENS, *dict.fromkeys(CLEAN_UP)]
    tok = WordPieceTokenizer(tokens)
    ids = [tokens.index(token) for token in CLEAN_UP]
    plain = "do n't I 'm we 're they 've it 's ' q ' a , b . c ? d ! es ."
    assert tok.decode(ids) == plain
    assert tok.decode(ids, clean_up_tokenization_spaces=True) == "don't I'm we're they've it's'q'a, b. c? d! es."
    assert tok.decode(ids, clean_up_tokenization_spaces=True) == PreTrainedTokenizerBase.clean_up_tokenization(
        None, plain
    )


# ------------------------------------------------------------------------------------------ the API


def test_special_ids_and_lookups(ours, vocab_files):
    tok = ours[True]
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)
    assert tok.vocab_size == len(read_vocab(vocab_files[True]))
    assert tok.id_to_token(4) == "[MASK]" and tok.token_to_id("[MASK]") == 4
    with pytest.raises(IndexError, match=r"token id -1 is out of range for .*vocab_uncased\.txt"):
        tok.id_to_token(-1)
    with pytest.raises(KeyError, match="'nope' is not in"):
        tok.token_to_id("nope")
    with pytest.raises(IndexError, match=f"token id {tok.vocab_size} is out of range"):
        tok.decode([5, tok.vocab_size])


def test_special_tokens_in_text_are_kept_whole(ours):
    tok = ours[True]
    assert tok.encode("a[MASK]b [SEP]") == [*tok.encode("a"), tok.mask_id, *tok.encode("b"), tok.sep_id]
    assert tok.mask_id not in tok.encode("[mask] [MASK ] [ MASK]")  # spelled exactly, or not at all


def test_long_words_are_unknown(ours):
    tok = ours[False]
    assert tok.tokenize("x" * 101) == ["[UNK]"]
    assert tok.tokenize("x" * 100) != ["[UNK]"]
    assert tok.tokenize(LONG_WORD) == ["[UNK]"]


def test_a_tiny_cache_gives_the_same_ids(vocab_files, ours):
    tiny = WordPieceTokenizer.from_file(vocab_files[True], cache_size=1)
    for text in SAMPLES:
        assert tiny.encode(text) == ours[True].encode(text) == ours[True].encode(text)


def test_doctests():
    assert doctest.testmod(wordpiece).failed == 0


# ------------------------------------------------------------------------------ errors and messages


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="vocab.txt"):
        WordPieceTokenizer.from_file(tmp_path / "vocab.txt")


def test_duplicate_token(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\nworld\nhello\n", encoding="utf-8")
    with pytest.raises(WordPieceFormatError, match=r"vocab\.txt: token 'hello' appears twice, on lines 6 and 8"):
        WordPieceTokenizer.from_file(path)


@pytest.mark.parametrize("missing", BERT_SPECIAL_TOKENS)
def test_missing_special_token(tmp_path, missing):
    path = tmp_path / "vocab.txt"
    path.write_text("".join(f"{t}\n" for t in BERT_SPECIAL_TOKENS if t != missing) + "a\n", encoding="utf-8")
    with pytest.raises(WordPieceFormatError, match=re.escape("vocab.txt: lacks the") + f".*{re.escape(missing)}"):
        WordPieceTokenizer.from_file(path)


_NAMES = ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token")


def test_custom_special_token_names(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(["<pad>", "<unk>", "<s>", "</s>", "<mask>", "a", "##b"], path)
    tok = WordPieceTokenizer.from_file(
        path, unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>"
    )
    assert (tok.cls_id, tok.sep_id, tok.pad_id, tok.unk_id) == (2, 3, 0, 1)
    assert tok.encode("ab<mask>") == [5, 6, 4]
    # With legacy=True, lowercase specials match their uppercase spelling too, as with transformers
    # 4.x; transformers 5 matches them as written (test_special_tokens_are_found_as_written).
    legacy = WordPieceTokenizer(read_vocab(path), legacy=True, **{k: getattr(tok, k) for k in _NAMES})
    assert legacy.encode("ab<mask> <UNK> c") == [5, 6, 4, 1, 1]


def test_empty_and_undecodable_files(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(WordPieceFormatError, match=r"empty\.txt: the vocabulary is empty"):
        WordPieceTokenizer.from_file(empty)
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes("[UNK]\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(WordPieceFormatError, match=r"latin1\.txt: not valid UTF-8"):
        WordPieceTokenizer.from_file(latin1)


def test_vocab_lines_are_read_as_transformers_reads_them(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"[PAD]\r\n[UNK]\r[CLS]\n[SEP]\n[MASK]\n with space\n")
    assert read_vocab(path) == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", " with space"]
    assert legacy_bert.load_vocab(str(path)) == {t: i for i, t in enumerate(read_vocab(path))}


def test_write_vocab_refuses_what_would_not_read_back(tmp_path):
    with pytest.raises(ValueError, match="appears twice"):
        write_vocab(["a", "b", "a"], tmp_path / "v.txt")
    with pytest.raises(ValueError, match="line break"):
        write_vocab(["a", "b\nc"], tmp_path / "v.txt")
    with pytest.raises(ValueError, match="empty"):
        write_vocab([], tmp_path / "v.txt")
    assert os.listdir(tmp_path) == []  # nothing half-written


def test_a_missing_vocab_file_is_named_with_its_errno(tmp_path):
    path = tmp_path / "vocab.txt"
    with pytest.raises(FileNotFoundError) as caught:
        WordPieceTokenizer.from_file(path)
    assert (caught.value.errno, caught.value.filename) == (errno.ENOENT, str(path))
    assert str(caught.value) == f"[Errno 2] WordPiece vocabulary (vocab.txt) not found: '{path}'"
    assert caught.value.__suppress_context__


def test_a_vocab_file_that_is_not_utf8(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("[UNK]\ncaf\xe9\n".encode("latin-1"))
    reason = "'utf-8' codec can't decode byte 0xe9 in position 9: invalid continuation byte"
    with pytest.raises(WordPieceFormatError, match=message(f"{path}: not valid UTF-8 ({reason})")) as caught:
        read_vocab(path)
    assert caught.value.__suppress_context__


def test_an_empty_vocab_file(tmp_path):
    path = tmp_path / "empty.txt"
    path.write_bytes(b"")
    with pytest.raises(
        WordPieceFormatError, match=message(f"{path}: the vocabulary is empty (expected one token per line)")
    ):
        WordPieceTokenizer.from_file(path)


def test_an_empty_token_list():
    with pytest.raises(WordPieceFormatError, match=message("WordPiece vocabulary: the vocabulary is empty")):
        WordPieceTokenizer([])


def test_a_duplicate_token_names_both_lines_and_ids(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab([*BERT_SPECIAL_TOKENS, "hello", "world"], path)
    path.write_text(path.read_text("utf-8") + "hello\n", "utf-8")
    expected = f"{path}: token 'hello' appears twice, on lines 6 and 8 (ids 5 and 7); each token must appear once"
    with pytest.raises(WordPieceFormatError, match=message(expected)):
        WordPieceTokenizer.from_file(path)


def test_a_token_that_is_not_a_string():
    with pytest.raises(TypeError, match=message("WordPiece vocabulary: tokens are str, got int 5 at id 1")):
        WordPieceTokenizer(["[PAD]", 5])


def test_a_vocabulary_without_special_tokens_names_each_role():
    expected = (
        "WordPiece vocabulary: lacks the unk token '[UNK]', cls token '[CLS]', sep token '[SEP]', pad token "
        "'[PAD]', mask token '[MASK]'; BERT vocabularies start with [PAD], [UNK], [CLS], [SEP], [MASK] "
        "(or pass the names this one uses)"
    )
    with pytest.raises(WordPieceFormatError, match=message(expected)):
        WordPieceTokenizer(["a"])


def test_every_missing_special_token_is_named_in_one_message():
    expected = (
        "mine: lacks the unk token '[UNK]', mask token '<mask>'; BERT vocabularies start with "
        "[PAD], [UNK], [CLS], [SEP], [MASK] (or pass the names this one uses)"
    )
    with pytest.raises(WordPieceFormatError, match=message(expected)):
        WordPieceTokenizer(["[PAD]", "[CLS]", "[SEP]", "[MASK]"], mask_token="<mask>", source="mine")


@pytest.mark.parametrize(
    "tokens, expected",
    [
        ([], "tokens to write: the vocabulary is empty"),
        (
            ["a", "b", "a"],
            "tokens to write: token 'a' appears twice, on lines 1 and 3 (ids 0 and 2); each token must appear once",
        ),
        (["a", "b\nc"], "cannot write token 'b\\nc' to {path}: it contains a line break"),
        (["a", "b\rc"], "cannot write token 'b\\rc' to {path}: it contains a line break"),
    ],
)
def test_write_vocab_refuses_with_a_message(tokens, expected, tmp_path):
    path = tmp_path / "vocab.txt"
    with pytest.raises(ValueError, match=message(expected.format(path=path))) as caught:
        write_vocab(tokens, path)
    assert type(caught.value) is ValueError
    assert list(tmp_path.iterdir()) == []


def test_write_vocab_writes_utf8_lines_ending_in_newline(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(iter(["[PAD]", "café", " x ", "##b", "XX"]), path)
    assert path.read_bytes() == "[PAD]\ncafé\n x \n##b\nXX\n".encode()
    assert read_vocab(path) == ["[PAD]", "café", " x ", "##b", "XX"]


@pytest.mark.parametrize("token_id", [-1, len(TINY), len(TINY) + 5])
def test_id_to_token_out_of_range(token_id):
    tok = WordPieceTokenizer(TINY, source="tiny")
    with pytest.raises(IndexError, match=message(f"token id {token_id} is out of range for tiny ({len(TINY)} tokens)")):
        tok.id_to_token(token_id)


def test_lookups_at_both_ends_of_the_vocabulary():
    tok = WordPieceTokenizer(TINY)
    assert (tok.id_to_token(0), tok.id_to_token(len(TINY) - 1)) == (TINY[0], TINY[-1])
    assert tok.token_to_id(TINY[-1]) == len(TINY) - 1
    with pytest.raises(KeyError) as caught:
        tok.token_to_id("nope")
    assert caught.value.args == ("token 'nope' is not in WordPiece vocabulary",)
    assert caught.value.__suppress_context__


def test_special_ids_follow_the_names_passed():
    tokens = ["a", "<mask>", "<pad>", "</s>", "<s>", "<unk>"]
    tok = WordPieceTokenizer(
        tokens, unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>"
    )
    assert (tok.unk_id, tok.cls_id, tok.sep_id, tok.pad_id, tok.mask_id, tok.vocab_size) == (5, 4, 3, 2, 1, 6)
    assert (tok.unk_token, tok.cls_token, tok.sep_token, tok.pad_token, tok.mask_token) == (
        "<unk>",
        "<s>",
        "</s>",
        "<pad>",
        "<mask>",
    )
    assert tok.tokenize("a b <s>") == ["a", "<unk>", "<s>"]
    assert tok.wordpiece.tokenize("a b") == ["a", "<unk>"]
    assert (tok.wordpiece.unk_token, tok.wordpiece.max_input_chars_per_word) == ("<unk>", 100)


def test_from_file_passes_every_option_on(tiny_file):
    options = {
        "do_lower_case": False,
        "strip_accents": True,
        "tokenize_chinese_chars": False,
        "max_input_chars_per_word": 3,
        "cache_size": 2,
        "legacy": True,
    }
    loaded = WordPieceTokenizer.from_file(tiny_file, **options)
    built = WordPieceTokenizer(TINY, **options)
    for text in (*TINY_TEXTS, "xxxx xxx Café 中文"):
        assert loaded.tokenize(text) == built.tokenize(text)
    assert loaded.tokenize("xxx xxxx é 中文") == ["x", "##xx", "[UNK]", "e", "[UNK]"]
    assert (
        repr(loaded) == f"WordPieceTokenizer({str(tiny_file)!r}, {len(TINY)} tokens, do_lower_case=False, legacy=True)"
    )
    assert (
        repr(WordPieceTokenizer(TINY))
        == f"WordPieceTokenizer('WordPiece vocabulary', {len(TINY)} tokens, do_lower_case=True)"
    )


def test_from_file_with_other_special_names(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocab(["<pad>", "<unk>", "<s>", "</s>", "<mask>", "a"], path)
    tok = WordPieceTokenizer.from_file(
        path, unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>", mask_token="<mask>"
    )
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 1, 2, 3, 4)


# ----------------------------------------------------------------------------------------- training


def test_trainer_layout():
    texts = ["Hello world, hello WordPiece!", "héllo wörld"] * 5
    vocab = train_wordpiece_vocab(texts, vocab_size=80)
    assert vocab[:5] == list(BERT_SPECIAL_TOKENS)
    alphabet = sorted(set("helloworldwordpiece,!"))  # uncased and accents stripped
    n = len(alphabet)
    assert sorted(vocab[5 : 5 + n]) == alphabet
    assert vocab[5 + n : 5 + 2 * n] == ["##" + c for c in vocab[5 : 5 + n]]
    assert {"hello", "world"} <= set(vocab) and len(vocab) <= 80 and len(set(vocab)) == len(vocab)
    assert train_wordpiece_vocab(texts, vocab_size=80) == vocab  # reproducible
    tok = WordPieceTokenizer(vocab)
    assert tok.tokenize("HELLO, Wörld") == ["hello", ",", "world"]


def test_trainer_limits():
    texts = ["abc abd abe"] * 3
    with pytest.raises(ValueError, match="vocab_size=10 is too small"):
        train_wordpiece_vocab(texts, vocab_size=10)
    base = 5 + 2 * 5  # specials + a b c d e and their ## forms
    assert len(train_wordpiece_vocab(texts, vocab_size=base + 1)) == base + 1
    # Only "a"+"##b" occurs 9 times; with min_frequency=10 nothing is merged.
    assert len(train_wordpiece_vocab(texts, vocab_size=100, min_frequency=10)) == base
    cased = train_wordpiece_vocab(["ABC abc"], vocab_size=100, do_lower_case=False, min_frequency=1)
    assert {"A", "a", "ABC", "abc"} <= set(cased)


def test_trained_vocab_round_trips_through_bert(tmp_path):
    """A trained vocabulary encodes its own corpus without [UNK] (every character is in it)."""
    corpus = [t for t in SAMPLES if t.strip()]
    path = tmp_path / "vocab.txt"
    write_vocab(train_wordpiece_vocab(corpus, vocab_size=2000, do_lower_case=False), path)
    tok = WordPieceTokenizer.from_file(path, do_lower_case=False)
    for text in corpus:
        words = [w for w in tok.basic.tokenize(text) if len(w) <= 100 and w not in BERT_SPECIAL_TOKENS]
        pieces = tok.wordpiece.tokenize(" ".join(words))
        assert "[UNK]" not in pieces
        assert tok.decode(tok.encode(" ".join(words))) == " ".join(words)


def naive_merges(word_counts: dict[str, int], budget: int, known: set[str], min_frequency: int) -> list[str]:
    """The trainer's merge loop as its documentation says it, recounting every pair at each step."""
    words = {word: [word[0], *("##" + c for c in word[1:])] for word in word_counts}
    new_tokens: list[str] = []
    while len(new_tokens) < budget:
        counts: Counter[tuple[str, str]] = Counter()
        for word, pieces in words.items():
            for pair in zip(pieces, pieces[1:]):
                counts[pair] += word_counts[word]
        if not counts:
            break
        left, right = min(counts, key=lambda pair: (-counts[pair], pair))
        if counts[left, right] < min_frequency:
            break
        merged = left + right[2:]
        if merged not in known:
            known.add(merged)
            new_tokens.append(merged)
        for word, pieces in words.items():
            out, j = [], 0
            while j < len(pieces):
                if j + 1 < len(pieces) and (pieces[j], pieces[j + 1]) == (left, right):
                    out.append(merged)
                    j += 2
                else:
                    out.append(pieces[j])
                    j += 1
            words[word] = out
    return new_tokens


def _corpus(seed: int) -> dict[str, int]:
    state, words = seed, {}
    for _ in range(40):
        state = (state * 1103515245 + 12345) % 2**31
        length = 1 + state % 7
        word = "".join("abc"[(state >> (3 + 2 * k)) % 3] for k in range(length))
        words[word] = words.get(word, 0) + 1 + (state >> 20) % 5
    return words


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("min_frequency", [0, 1, 2, 5])
def test_learned_merges_equal_a_naive_recount(seed, min_frequency):
    words = _corpus(seed)
    alphabet = {c for word in words for c in word}
    known = {*alphabet, *("##" + c for c in alphabet)}
    expected = naive_merges(words, 200, set(known), min_frequency)
    assert wordpiece._learn_merges(words, 200, set(known), min_frequency=min_frequency, progress=False) == expected
    short = wordpiece._learn_merges(words, 3, set(known), min_frequency=min_frequency, progress=False)
    assert short == expected[:3]


def test_a_token_two_pairs_spell_is_learned_once():
    known = {"x", "a", "b", "#", "##x", "##a", "##b", "###"}
    learned = wordpiece._learn_merges({"xab": 3, "##ab": 3}, 100, known, min_frequency=1, progress=False)
    assert learned == ["##ab", "##", "xab"]
    assert naive_merges({"xab": 3, "##ab": 3}, 100, {"x", "a", "b", "#", "##x", "##a", "##b", "###"}, 1) == learned
    assert known == {"x", "a", "b", "#", "##x", "##a", "##b", "###", "##ab", "##", "xab"}


def test_merges_stop_below_min_frequency_and_break_ties_by_the_pair():
    texts = ["ab ab ab ac dc dc dc"]
    base = [*BERT_SPECIAL_TOKENS, "a", "c", "b", "d", "##a", "##c", "##b", "##d"]
    assert train_wordpiece_vocab(texts, vocab_size=100, min_frequency=3) == [*base, "ab", "dc"]
    assert train_wordpiece_vocab(texts, vocab_size=100, min_frequency=4) == base
    assert train_wordpiece_vocab(texts, vocab_size=100, min_frequency=1) == [*base, "ab", "dc", "ac"]
    assert train_wordpiece_vocab(texts, vocab_size=len(base) + 1, min_frequency=1) == [*base, "ab"]
    assert train_wordpiece_vocab(texts, vocab_size=len(base)) == base


def test_the_default_min_frequency_is_two():
    base = [*BERT_SPECIAL_TOKENS, "b", "a", "c", "##b", "##a", "##c"]
    assert train_wordpiece_vocab(["ab ab bc"], vocab_size=100) == [*base, "ab"]


TRAINING_TEXTS = ["Café CAFÉ [MASK] x[SEP]x xxxxx 中文 中文", "[mask]", "\u0378"]


@pytest.mark.parametrize(
    "legacy, characters",
    [
        (False, ["a", "c", "e", "f", "x", "中", "文", "[", "]", "k", "m", "s", "\u0378"]),
        (True, ["a", "c", "e", "f", "x", "中", "文", "[", "]", "k", "m", "s"]),
    ],
)
def test_training_counts_words_as_the_tokenizer_splits_them(legacy, characters, capsys):
    vocab = train_wordpiece_vocab(TRAINING_TEXTS, vocab_size=100, max_input_chars_per_word=4, legacy=legacy)
    continuations = ["##" + c for c in characters]
    assert vocab == [*BERT_SPECIAL_TOKENS, *characters, *continuations, "##af", "##afe", "cafe"]
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize(
    "legacy, characters",
    [(False, ["E", "A", "a", "中", "文", "K", "M", "S", "[", "]"]), (True, ["E", "a", "中", "文", "A"])],
)
def test_training_with_options(legacy, characters):
    vocab = train_wordpiece_vocab(
        ["Éa Éa ÉA 中文 中文 [MA\x00SK]"],
        vocab_size=100,
        do_lower_case=False,
        strip_accents=True,
        tokenize_chinese_chars=False,
        special_tokens=["<unk>", "[MASK]"],
        legacy=legacy,
    )
    assert vocab == ["<unk>", "[MASK]", *characters, *("##" + c for c in characters), "Ea", "中文"]
    kept = train_wordpiece_vocab(
        ["Éa Éa"], vocab_size=100, special_tokens=["<unk>"], strip_accents=False, legacy=legacy
    )
    assert kept == ["<unk>", "a", "é", "##a", "##é", "éa"]


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("lower", [False, True])
def test_training_finds_lowercase_specials_in_uppercase_text_only_as_transformers_4_did(legacy, lower):
    vocab = train_wordpiece_vocab(
        ["<UNK> <unk> ΑΣ"],
        vocab_size=100,
        do_lower_case=lower,
        special_tokens=["<unk>"],
        legacy=legacy,
        min_frequency=1,
    )
    if legacy and lower:
        assert vocab == ["<unk>", "α", "σ", "##α", "##σ", "ασ"]
    else:
        word = "unk" if lower else "UNK"
        characters = ["<", ">", *sorted(word), *("ασ" if lower else "ΑΣ")]
        assert vocab == [
            "<unk>",
            *characters,
            *("##" + c for c in characters),
            "##" + word[1:],
            word,
            characters[-2] + characters[-1],
        ]


def test_training_progress_bars(capsys):
    assert train_wordpiece_vocab(["ab ab", "ab"], vocab_size=12, progress=True)[-1] == "ab"
    err = capsys.readouterr().err
    assert re.search(r"counting words: 100%\|[^|]*\| 2/2 \[[^]]*[0-9?]text/s\]", err)
    assert re.search(r"learning WordPiece tokens:  33%\|[^|]*\| 1/3 \[[^]]*[0-9?]token/s\]", err)


@pytest.mark.parametrize(
    "texts, options, expected",
    [
        (
            ["ab"],
            {"vocab_size": 8},
            "vocab_size=8 is too small: the 5 special tokens and the 2 characters of the text "
            "(each also as a ## continuation) need 9",
        ),
        (
            [],
            {"vocab_size": 1, "special_tokens": ["a", "a"]},
            "special_tokens: token 'a' appears twice, on lines 1 and 2 (ids 0 and 1); each token must appear once",
        ),
        ([], {"vocab_size": 1, "special_tokens": []}, "special_tokens: the vocabulary is empty"),
    ],
)
def test_training_refuses_with_a_message(texts, options, expected):
    with pytest.raises(ValueError, match=message(expected)) as caught:
        train_wordpiece_vocab(texts, **options)
    assert type(caught.value) is ValueError


CLEAN_TEXT = "a\x00b\ufffd\x85\u00a0中\U0002b820\u0378\ue000\t\u200b"


@pytest.mark.parametrize(
    "legacy, split_cjk, cleaned",
    [
        (False, False, "ab 中\U0002b820\u0378 "),
        (False, True, "ab  中 \U0002b820\u0378 "),
        (True, False, "ab 中\U0002b820 "),
        (True, True, "ab  中  \U0002b820  "),
    ],
)
def test_a_new_clean_table_cleans_as_its_flavour(legacy, split_cjk, cleaned):
    assert CLEAN_TEXT.translate(wordpiece._CleanTable(legacy=legacy, split_cjk=split_cjk)) == cleaned


@pytest.mark.parametrize(
    "strip, lower, split, normalized",
    [
        (False, False, False, "Ÿ-\u0301\ua7cbÉ"),
        (False, False, True, "Ÿ - \u0301\ua7cbÉ"),
        (False, True, False, "ÿ-\u0301ɤé"),
        (False, True, True, "ÿ - \u0301ɤé"),
        (True, False, False, "Ÿ-\ua7cbÉ"),
        (True, False, True, "Ÿ - \ua7cbÉ"),
        (True, True, False, "ÿ-ɤé"),
        (True, True, True, "ÿ - ɤé"),
    ],
)
def test_a_new_normalize_table_does_what_it_is_asked(strip, lower, split, normalized):
    table = wordpiece._NormalizeTable(strip=strip, lower=lower, split_punctuation=split)
    assert "Ÿ-\u0301\ua7cbÉ".translate(table) == normalized
