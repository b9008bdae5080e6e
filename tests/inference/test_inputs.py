"""roberta_ext/inference/inputs.py: text -> model input, the one place every door encodes
with. Ids are checked against the layouts written out by hand (a character tokenizer makes
them readable), and ``longest_first`` against the tokenizers library's own truncation."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from roberta_ext.families import preset
from roberta_ext.inference.inputs import (
    InputError,
    InputTooLong,
    ModelInputs,
    PairLayout,
    check_length,
    extract_features,
    extract_features_long,
    pair_layout,
    truncate_longest_first,
    word_pieces,
)
from roberta_ext.modeling import RobertaModel
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


# ------------------------------------------------------------------------- features of a model

FEATURE_PRESETS = ("tiny", "bert-tiny")


@pytest.fixture(scope="module", params=FEATURE_PRESETS)
def model(request) -> RobertaModel:
    torch.manual_seed(0)
    return RobertaModel(preset(request.param)).eval()


def test_pair_layout_follows_the_family_and_the_segment_embeddings():
    assert pair_layout(preset("tiny")) == ROBERTA and pair_layout(preset("bert-tiny")) == BERT
    assert pair_layout(preset("modernbert-tiny")) == PairLayout(double_separator=False, segments=False)
    assert pair_layout(preset("electra-tiny")) == BERT
    assert pair_layout(SimpleNamespace()) == ROBERTA  # a config that names no family is RoBERTa's
    assert pair_layout(SimpleNamespace(family="bert", type_vocab_size=1)).segments is False
    assert pair_layout(SimpleNamespace(family="bert", type_vocab_size=2)).segments is True


def test_for_model_takes_the_models_layout_and_limit():
    bert = RobertaModel(preset("bert-tiny", max_positions=40))
    tokenizer = CharTokenizer()
    made = ModelInputs.for_model(bert, tokenizer)
    assert (made.tokenizer, made.layout, made.max_positions) == (tokenizer, BERT, bert.max_positions())
    assert made.max_positions == 40


def test_extract_features_are_the_models_with_the_rows_segments(model):
    made = ModelInputs.for_model(model, CharTokenizer())
    row = torch.tensor(made.encode("ab c", "de"))
    segments = torch.tensor([[0] * 6 + [1] * (len(row) - 6)]) if made.layout.segments else None
    with torch.no_grad():
        expected = model.features(row[None], segment_labels=segments, return_all_hiddens=True)
        features = extract_features(model, made, row)  # (T,) taken as one row
        every = extract_features(model, made, row[None], return_all_hiddens=True)
    torch.testing.assert_close(features, expected.last_hidden_state)
    assert isinstance(every, list) and len(every) == model.cfg.encoder_layers + 1
    for got, want in zip(every, expected.hidden_states):
        torch.testing.assert_close(got, want)
    short = ModelInputs(tokenizer=made.tokenizer, layout=made.layout, max_positions=len(row) - 1)
    with pytest.raises(ValueError) as refused:
        extract_features(model, short, row)
    assert str(refused.value) == f"tokens exceeds maximum length: {len(row)} > {len(row) - 1}"
    assert extract_features(model, ModelInputs(made.tokenizer, made.layout, len(row)), row).shape[1] == len(row)


def windows_by_hand(model, made, tokens: list[int], stride: int) -> torch.Tensor:
    """extract_features_long's rule, one window at a time: each content token from the window
    (content starts 0, stride, ..., and one ending at the end) where it sits furthest from an edge,
    the first such window on a tie; ``<s>`` from the first window, ``</s>`` from the last."""
    has_bos, has_eos = tokens[0] == 0, tokens[-1] == 2
    content = tokens[int(has_bos) : len(tokens) - int(has_eos)]
    window = made.max_positions - 2
    starts = list(range(0, len(content) - window + 1, stride))
    if starts[-1] + window < len(content):
        starts.append(len(content) - window)
    with torch.no_grad():
        alone = [extract_features(model, made, torch.tensor([0, *content[s : s + window], 2]))[0] for s in starts]
    rows = []
    for i in range(len(content)):
        distances = [min(i - s, s + window - 1 - i) if s <= i < s + window else -1 for s in starts]
        w = distances.index(max(distances))
        rows.append(alone[w][1 + i - starts[w]])
    first = [alone[0][0]] if has_bos else []
    last = [alone[-1][-1]] if has_eos else []
    return torch.stack(first + rows + last)[None]


def test_extract_features_long_takes_each_token_from_its_most_central_window(model):
    made = ModelInputs(tokenizer=CharTokenizer(), layout=pair_layout(model.cfg), max_positions=8)  # windows of 6
    text = "the quick brown fox."  # 20 content tokens: windows at 0, 3, ..., 12 and one at 14
    row = made.encode(text)
    with torch.no_grad():
        for stride in (None, 1, 4, 6):
            got = extract_features_long(model, made, torch.tensor(row), stride=stride)
            expected = windows_by_hand(model, made, row, stride or 3)
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
        # a row cut from a stream, without <s> or </s>, and one given as (1, T)
        for cut in (row[1:], row[:-1], row[1:-1]):
            got = extract_features_long(model, made, torch.tensor([cut]))
            assert got.shape == (1, len(cut), model.cfg.encoder_embed_dim)
            torch.testing.assert_close(got, windows_by_hand(model, made, cut, 3), atol=1e-5, rtol=1e-5)
        for fits in (made.encode("abc"), ids("abcdefgh")):  # 5 tokens of 8; 8 without <s> and </s>: one pass
            fits = torch.tensor(fits)
            assert torch.equal(extract_features_long(model, made, fits), extract_features(model, made, fits))
        one_more = made.encode("abcdefg")  # 7 content tokens: the window at 0 and the one at the end, 1
        got = extract_features_long(model, made, torch.tensor(one_more))
        torch.testing.assert_close(got, windows_by_hand(model, made, one_more, 3), atol=1e-5, rtol=1e-5)
    for stride in (-1, 7):
        with pytest.raises(ValueError) as refused:
            extract_features_long(model, made, torch.tensor(row), stride=stride)
        assert str(refused.value) == f"stride must be in 1..6, got {stride}"
    with pytest.raises(ValueError) as refused:
        extract_features_long(model, made, torch.tensor([row, row]))
    assert str(refused.value) == "extract_features_long takes one sequence (T,), got shape (2, 22)"


class WholeTokenizer(CharTokenizer):
    """Decodes every id, specials included: what ``ModelInputs.decode`` hands the tokenizer shows."""

    def decode(self, ids):
        return "".join(self.dictionary[i] for i in ids)


def test_decode_hands_the_tokenizer_each_sentence_with_its_own_separator():
    whole = ModelInputs(tokenizer=WholeTokenizer(), layout=ROBERTA, max_positions=16)
    assert whole.decode(whole.encode("ab")) == "ab</s>"  # <s> dropped
    assert whole.decode(ids("ab") + [2]) == "ab</s>"  # nothing to drop
    assert whole.decode(whole.encode("ab", "cd")) == ["ab</s>", "</s>cd</s>"]
    assert whole.decode([0, *ids("a"), 2, 2]) == ["a</s>", "</s>"]  # a break at the very end
    assert whole.decode([0, 0, *ids("a")]) == "<s>a"  # only the first <s>
    assert whole.decode([]) == "" and inputs().decode([]) == ""


def test_the_edges_of_cutting_and_of_the_messages():
    roberta = inputs()
    assert roberta.encode_truncated("abc", 2) == [0, 2] and roberta.encode_truncated("abc", 1) == [0, 2]
    assert roberta.encode_truncated(("ab", "cd"), 4) == [0, 2, 2, 2]  # no room left for either text
    assert roberta.encode_truncated(("ab", "cd"), 5) == [0, 2, 2, *ids("c"), 2]  # a tie: the second keeps one
    with pytest.raises(InputTooLong) as refused:
        inputs(max_positions=4).encode_within("abc", truncate=False)
    assert str(refused.value) == "input is 5 tokens long, more than the maximum of 4"
    assert (refused.value.where, refused.value.length, refused.value.limit) == ("input", 5, 4)
    with pytest.raises(InputTooLong) as refused:
        check_length([1, 2, 3], 2, hint="")
    assert str(refused.value) == "input is 3 tokens long, more than the maximum of 2"
    row, firsts = roberta.encode_words(["", "ab"])  # a first word the tokenizer gives nothing for: <unk>
    assert (row, firsts) == ([0, 3, *ids(" ab"), 2], [1, 2])
    single = torch.tensor(inputs(BERT).encode("ab", "c"))  # one row (T,) as well as rows (B, T)
    assert inputs(BERT).segments(single).tolist() == [0, 0, 0, 0, 1, 1]
