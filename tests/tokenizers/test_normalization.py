"""The shared normalisation (:mod:`roberta_ext.tokenizers.normalization`) against its definitions.

:func:`lowercase_per_character` is checked against what it stands for, ``"".join(c.lower() for c
in text)``, on every code point and on arbitrary text. :class:`SpecialTokenSplitter` is checked
against transformers 4.57.6's own steps, copied verbatim (as in test_wordpiece.py and
test_sentencepiece_tokenizer.py): lowercase around the specials with its regular expression, then
split with the trie transformers 5 still ships. The tokenizers that use both are compared with
their transformers peers as wholes in test_wordpiece.py and test_sentencepiece_tokenizer.py.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roberta_ext.tokenizers.normalization import SpecialTokenSplitter, check_unicode, lowercase_per_character
from tests.peers import needs
from tests.tokenizers.conftest import TEXTS

ALL_CODE_POINTS = "".join(map(chr, range(0x110000)))
"""Every code point, lone surrogates included (``str.lower`` takes them as they are)."""

SPECIAL_SETS = {
    "bert": ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"),
    "albert": ("[CLS]", "[SEP]", "<unk>", "<pad>", "[MASK]"),
    "xlmr": ("<s>", "<pad>", "</s>", "<unk>", "<mask>"),
    "overlapping": ("<s>", "</s>", "<s>x", "[MASK]", "[MASK]]", "Σ", "ab", "abc"),
}
_PIECES = [*{token for tokens in SPECIAL_SETS.values() for token in tokens}, "<UNK>", "<S>", "[mask]", "ΑΣ ", "İ"]
SPLIT_TEXTS = st.lists(st.one_of(TEXTS, st.sampled_from(_PIECES)), max_size=8).map("".join)
"""Arbitrary text with special tokens, and their other spellings, mixed in."""


def test_lowercase_per_character_on_every_code_point():
    assert lowercase_per_character(ALL_CODE_POINTS) == "".join(c.lower() for c in ALL_CODE_POINTS)


@pytest.mark.parametrize("text", ["ΟΔΟΣ ΑΣ", "ΣΑΣ.", "aΣ", "Σ", "ὈΔΥΣΣΕΎΣ", "İstanbul ǅ Straße"])
def test_lowercase_per_character_has_no_final_sigma(text):
    assert lowercase_per_character(text) == "".join(c.lower() for c in text)


@settings(max_examples=300, deadline=None)
@given(text=TEXTS)
def test_lowercase_per_character_on_arbitrary_text(text):
    assert lowercase_per_character(text) == "".join(c.lower() for c in text)


def v4_split(special_tokens: tuple[str, ...], text: str, *, lowercase: bool) -> list[str]:
    """transformers 4.57.6 ``PreTrainedTokenizer.tokenize``: lowercase (lines 644-653, verbatim),
    then ``self.tokens_trie.split(text)``; empty parts dropped, as its loop skips them."""
    from transformers.tokenization_python import Trie  # unchanged since 4.x

    if lowercase:
        escaped_special_toks = [re.escape(s_tok) for s_tok in special_tokens]
        pattern = r"(" + r"|".join(escaped_special_toks) + r")|" + r"(.+?)"
        text = re.sub(pattern, lambda m: m.groups()[0] or m.groups()[1].lower(), text)
    trie = Trie()
    for token in special_tokens:
        trie.add(token)
    return [part for part in trie.split(text) if part]


@needs("transformers", "the peer: transformers' trie")
@pytest.mark.parametrize("lowercase", [True, False], ids=["lowercase", "as-written"])
@pytest.mark.parametrize("specials", ["bert", "albert", "xlmr", "overlapping"])
@settings(max_examples=300, deadline=None)
@given(text=SPLIT_TEXTS)
def test_split_equals_transformers(specials, lowercase, text):
    tokens = SPECIAL_SETS[specials]
    splitter = SpecialTokenSplitter({token: i for i, token in enumerate(tokens)}, lowercase=lowercase)
    parts = list(splitter.split(text))
    assert [part for part, _ in parts] == v4_split(tokens, text, lowercase=lowercase)
    assert all(special_id is None or tokens[special_id] == part for part, special_id in parts)


@settings(max_examples=300, deadline=None)
@given(text=SPLIT_TEXTS)
def test_split_as_written_cuts_text_without_changing_it(text):
    """Without lowercasing the parts add up to the text (XLM-R's offsets rely on it), specials are
    found where they are written, longest first, and no text part holds one."""
    tokens = SPECIAL_SETS["overlapping"]
    ids = {token: i for i, token in enumerate(tokens)}
    parts = list(SpecialTokenSplitter(ids).split(text))
    assert "".join(part for part, _ in parts) == text
    for part, special_id in parts:
        if special_id is None:
            assert part and not any(token in part for token in tokens)
        else:
            assert ids[part] == special_id


def test_split_prefers_the_longer_special_and_lowercase_finds_lowercase_specials():
    splitter = SpecialTokenSplitter({"<s>": 0, "<s>x": 1, "<unk>": 3, "[MASK]": 4}, lowercase=True)
    # "<s>X" lowercased is "<s>x", found only then, as transformers finds it.
    assert list(splitter.split("<s>x<s>X<UNK>[MASK]Σ")) == [
        ("<s>x", 1),
        ("<s>x", 1),
        ("<unk>", 3),
        ("[MASK]", 4),
        ("σ", None),
    ]
    # Uppercase specials never reappear after lowercasing: "[mask]" stays text.
    assert list(SpecialTokenSplitter({"[MASK]": 4}, lowercase=True).split("[mask][MASK]")) == [
        ("[mask]", None),
        ("[MASK]", 4),
    ]


def test_check_unicode_names_the_lone_surrogate_and_the_reader():
    check_unicode("ok 👍", reader="SentencePiece")
    text = "ok " + b"\xff bytes".decode("utf-8", errors="surrogateescape")
    with pytest.raises(ValueError, match=r"lone surrogate at index 3 \('\\udcff'\).*which SentencePiece cannot"):
        check_unicode(text, reader="SentencePiece")


def test_check_unicode_message_shows_20_characters_either_side():
    text = "a" * 30 + "\udcff" + "b" * 30
    with pytest.raises(ValueError) as caught:
        check_unicode(text, reader="HF tokenizers")
    excerpt = "a" * 20 + "\udcff" + "b" * 20
    assert str(caught.value) == (
        f"text {excerpt!r} has a lone surrogate at index 30 ('\\udcff'): not valid Unicode, which HF tokenizers "
        "cannot tokenize; decode the bytes properly first"
    )


@pytest.mark.parametrize("index", [0, 19, 20, 21])
def test_check_unicode_message_near_the_start_names_the_first_surrogate(index):
    text = "x" * index + "\ud800" + "y" * 25 + "\udfff"
    with pytest.raises(ValueError) as caught:
        check_unicode(text, reader="SentencePiece")
    assert str(caught.value).startswith(f"text {text[max(0, index - 20) : index + 21]!r} has a lone surrogate at ")
    assert f" at index {index} ('\\ud800'): " in str(caught.value)


def test_splitter_repr_names_the_class_the_specials_and_lowercase():
    assert repr(SpecialTokenSplitter({"<s>": 0, "[MASK]": 4}, lowercase=True)) == (
        "SpecialTokenSplitter({'<s>': 0, '[MASK]': 4}, lowercase=True)"
    )
    assert repr(SpecialTokenSplitter({})) == "SpecialTokenSplitter({}, lowercase=False)"


@needs("transformers", "the peer: transformers' trie")
def test_split_lowercase_finds_a_special_across_text_and_another_special():
    tokens = ("[MASK]", "a[M")
    splitter = SpecialTokenSplitter({token: i for i, token in enumerate(tokens)}, lowercase=True)
    assert [part for part, _ in splitter.split("A[MASK]")] == v4_split(tokens, "A[MASK]", lowercase=True)
