"""roberta_ext/inference/inputs.py: text -> model input, the one place every door encodes
with. Ids are checked against the layouts written out by hand (a character tokenizer makes
them readable), and ``longest_first`` against the tokenizers library's own truncation."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from roberta_ext.inference.inputs import (
    InputError,
    InputTooLong,
    ModelInputs,
    PairLayout,
    check_length,
    truncate_longest_first,
    word_pieces,
)
from tests.inference.chars import CharTokenizer
from tests.peers import require

ROBERTA = PairLayout(double_separator=True, segments=False)
BERT = PairLayout(double_separator=False, segments=True)


def inputs(layout: PairLayout = ROBERTA, max_positions: int = 16) -> ModelInputs:
    return ModelInputs(tokenizer=CharTokenizer(), layout=layout, max_positions=max_positions)


def ids(text: str) -> list[int]:
    return CharTokenizer().encode(text)


def test_a_text_and_a_pair_in_each_familys_layout():
    bos, eos = 0, 2
    assert inputs().encode("ab") == [bos, *ids("ab"), eos]
    assert inputs(ROBERTA).encode("ab", "c") == [bos, *ids("ab"), eos, eos, *ids("c"), eos]
    assert inputs(BERT).encode("ab", "c") == [bos, *ids("ab"), eos, *ids("c"), eos]
    assert inputs(ROBERTA).encode("ab", "c", no_separator=True) == inputs(BERT).encode("ab", "c")
    assert inputs(BERT).encode("ab", "c", no_separator=False) == inputs(ROBERTA).encode("ab", "c")


def test_decode_drops_bos_and_splits_at_a_document_break():
    roberta = inputs()
    assert roberta.decode(roberta.encode("hi there")) == "hi there"
    assert roberta.decode(roberta.encode("ab", "cd")) == ["ab", "cd"]  # </s> </s>: two sentences
    assert inputs(BERT).decode(inputs(BERT).encode("ab", "cd")) == "abcd"  # one [SEP]: one text


def test_segments_are_zero_through_the_first_separator_then_one_and_zero_on_padding():
    bert = inputs(BERT)
    tokens, lengths = bert.collate([bert.encode("ab", "c"), bert.encode("a")])
    assert lengths.tolist() == [6, 3]
    assert tokens[1].tolist() == [0, *ids("a"), 2, 1, 1, 1]  # padded with <pad>
    assert bert.segments(tokens).tolist() == [[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]]
    assert inputs(ROBERTA).segment_labels(tokens) is None
    assert torch.equal(bert.segment_labels(tokens), bert.segments(tokens))


def test_a_single_text_loses_its_end_and_a_pair_its_longer_side_first():
    roberta = inputs(ROBERTA)
    assert roberta.encode_truncated("abcdefgh", 6) == [0, *ids("abcd"), 2]
    # 12 ids allowed: 4 specials, 8 for the texts; the longer side (10) gives way to 8 - 3.
    assert roberta.encode_truncated(("abcdefghij", "xyz"), 12) == [0, *ids("abcde"), 2, 2, *ids("xyz"), 2]
    assert inputs(BERT).encode_truncated(("xyz", "abcdefghij"), 12) == [0, *ids("xyz"), 2, *ids("abcdef"), 2]
    with pytest.raises(ValueError, match="expected a text or a pair of texts"):
        roberta.encode_truncated(("a", "b", "c"), 12)


def test_encode_within_cuts_when_asked_and_else_names_the_input():
    roberta = inputs(max_positions=8)
    assert roberta.encode_within("abcdefghij", truncate=True) == [0, *ids("abcdef"), 2]
    with pytest.raises(InputTooLong) as refused:
        roberta.encode_within("abcdefghij", truncate=False, where="inputs[3]", hint="set truncate to cut it")
    assert str(refused.value) == "inputs[3] is 12 tokens long, more than the maximum of 8 (set truncate to cut it)"
    assert refused.value.where == "inputs[3]" and isinstance(refused.value, InputError | ValueError)
    assert roberta.encode_within("abc", 4, truncate=True) == [0, *ids("ab"), 2]
    assert check_length([1, 2], 2) == [1, 2]


def test_words_are_labelled_at_their_first_piece_and_an_empty_word_is_unknown():
    pieces, firsts = word_pieces(["ab", "", "c"], lambda word, first: list(word), "<unk>")
    assert (pieces, firsts) == (["a", "b", "<unk>", "c"], [0, 2, 3])
    row, positions = inputs().encode_words(["ab", "c"])
    assert row == [0, *ids("ab"), *ids(" c"), 2]
    assert positions == [1, 3]  # "a", then the " " that starts " c"


@settings(max_examples=150, deadline=None)
@given(first=st.integers(0, 40), second=st.integers(0, 40), budget=st.integers(0, 60))
def test_longest_first_cuts_as_the_tokenizers_library(first, second, budget):
    """Every split of a budget between two sides equals the tokenizers library's
    ``longest_first`` (tokenizers/src/utils/truncation.rs), the rule transformers and
    sentence-transformers truncate pairs by."""
    tokenizers = require("tokenizers", "the peer of longest_first")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit

    vocab = {f"w{i}": i for i in range(100)}
    peer = tokenizers.Tokenizer(WordLevel(vocab, unk_token="w0"))
    peer.pre_tokenizer = WhitespaceSplit()
    a, b = list(range(1, first + 1)), list(range(50, 50 + second))
    if budget:
        peer.enable_truncation(budget, strategy="longest_first")
    encoding = peer.encode(" ".join(f"w{i}" for i in a), " ".join(f"w{i}" for i in b))
    ours = truncate_longest_first(a, b, budget)
    if budget:  # the library refuses a budget of 0; ours keeps nothing
        assert [len(side) for side in ours] == [encoding.type_ids.count(0), encoding.type_ids.count(1)]
        assert ours[0] + ours[1] == encoding.ids
    else:
        assert ours == ([], [])
