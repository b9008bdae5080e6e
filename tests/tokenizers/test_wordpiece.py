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
"""

from __future__ import annotations

import doctest
import os
import re
import string
import unicodedata
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


# ------------------------------------------------------------------------------------------ peers


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


# ------------------------------------------------------------- the default: transformers 5's BertTokenizer


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


# ------------------------------------------------------------------------------- every code point

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


# ------------------------------------------------------- legacy=True: transformers 4.x's Python BertTokenizer


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


# ------------------------------------------------------------------------------ the two flavours


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


# ------------------------------------------------------------------------------------- the API


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


# --------------------------------------------------------------------------------------- errors


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


# -------------------------------------------------------------------------------------- training


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


def test_doctests():
    assert doctest.testmod(wordpiece).failed == 0
