"""Our tokenizers and fairseq's own, built from the same trained vocabulary files.

fairseq is the peer every result is compared with; tests that need it are skipped when it is not
installed (the package itself never imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
from hypothesis import strategies as st

from roberta_ext.tokenizers import GPT2BPE, Dictionary, FairseqGPT2Tokenizer, ReferenceGPT2BPE
from tests.bpe_fixtures import UNICODE_SAMPLES, BpeFiles
from tests.peers import require

# Pieces that steer GPT-2's pre-tokenisation into its corner cases, mixed into arbitrary text.
_SPACES = [*" \t\n\r\x0b\x0c\x1c\x1f\x85\xa0\u1680\u2000\u2028\u2029\u202f\u3000", "\r\n", "  ", "\t\t", " \n "]
_CONTRACTIONS = ["'", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S", "'LL", *"stremvldSTREMVLD"]
# "\udcff" is what errors="surrogateescape" makes of a byte 0xff: not text, but a str can hold it.
_OTHERS = [*"0123456789٣\x00\x7f\ufeff\u0301\u200d\ufe0f😀👍🏽\udcff", "🏳️‍🌈"]
_CORPUS_CHARACTERS = sorted(set("".join(UNICODE_SAMPLES)))

ANY_CHARACTER = st.characters(exclude_categories=())
"""Any code point: unassigned (Cn), private use (Co) and lone surrogates (Cs) included, which
``st.characters()`` leaves out by default."""

TEXTS = st.lists(
    st.one_of(
        ANY_CHARACTER,
        st.text(alphabet=ANY_CHARACTER, max_size=4),
        st.sampled_from(_SPACES + _CONTRACTIONS + _OTHERS),
    ),
    max_size=40,
).map("".join)
"""Arbitrary Unicode text from every code point (a ``str`` holding a lone surrogate is not valid
text; the tests say what each tokenizer does with one), biased towards whitespace, contractions,
digits, combining marks and emoji sequences."""


def is_utf8(text: str) -> bool:
    """Whether ``text`` encodes to UTF-8, that is, holds no lone surrogate.

    >>> is_utf8("ok 👍"), is_utf8("ok \\udcff")
    (True, False)
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


CORPUS_LIKE_TEXTS = st.lists(st.sampled_from(_CORPUS_CHARACTERS + _SPACES + _CONTRACTIONS), max_size=60).map("".join)
"""Text made of what the vocabulary was trained on, so that dict.txt knows most of its pieces."""


@pytest.fixture(scope="session")
def fast_bpe(bpe_files: BpeFiles) -> GPT2BPE:
    return GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)


@pytest.fixture(scope="session")
def reference_bpe(bpe_files: BpeFiles) -> ReferenceGPT2BPE:
    return ReferenceGPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)


@pytest.fixture(scope="session")
def dictionary(bpe_files: BpeFiles) -> Dictionary:
    return Dictionary.load(bpe_files.dict_txt)


@pytest.fixture(scope="session")
def tokenizer(fast_bpe: GPT2BPE, dictionary: Dictionary) -> FairseqGPT2Tokenizer:
    return FairseqGPT2Tokenizer(fast_bpe, dictionary)


@pytest.fixture(scope="session")
def fairseq_peer(bpe_files: BpeFiles) -> SimpleNamespace:
    """fairseq's ``gpt2_bpe_utils.Encoder``, its ``GPT2BPE`` wrapper and its ``Dictionary``."""
    require("fairseq", "fairseq's GPT-2 BPE and Dictionary are the peers")
    from fairseq.data import Dictionary as FairseqDictionary
    from fairseq.data.encoders.gpt2_bpe import GPT2BPE as FairseqGPT2BPE
    from fairseq.data.encoders.gpt2_bpe import GPT2BPEConfig

    bpe = FairseqGPT2BPE(
        GPT2BPEConfig(gpt2_encoder_json=str(bpe_files.encoder_json), gpt2_vocab_bpe=str(bpe_files.vocab_bpe))
    )
    dictionary = FairseqDictionary.load(str(bpe_files.dict_txt))

    def indices(text: str) -> list[int]:
        """fairseq's hub path, minus <s>/</s>: GPT-2 ids as a string, then dictionary lookup."""
        line = bpe.encode(text)
        return dictionary.encode_line(line, append_eos=False, add_if_not_exist=False).tolist()

    return SimpleNamespace(encoder=bpe.bpe, bpe=bpe, dictionary=dictionary, indices=indices)


@pytest.fixture(scope="session")
def fairseq_dictionary_class() -> Callable[..., object]:
    require("fairseq", "fairseq's Dictionary is the peer")
    from fairseq.data import Dictionary as FairseqDictionary

    return FairseqDictionary
