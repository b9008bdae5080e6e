"""roberta_ext/inference/head_outputs.py: what a model's heads say about encoded text (classify,
classify_rows, score_choices, tag, fill_mask and its one input check), on a tiny random RoBERTa
over a character tokenizer. Each output is checked against the model's own fairseq-style
``forward`` (the path fairseq's hub calls), a different route through the same weights."""

from __future__ import annotations

import pytest
import torch

from roberta_ext.families import preset
from roberta_ext.families.electra import ElectraPretrainingModel
from roberta_ext.inference.head_outputs import (
    HeadError,
    check_lm_head,
    choice_rows,
    classify,
    classify_rows,
    encode_masked,
    fill_encoded_mask,
    fill_mask,
    replaced_token_probs,
    score_choices,
    tag,
)
from roberta_ext.inference.inputs import InputError, InputTooLong, ModelInputs, PairLayout, pair_layout
from roberta_ext.modeling import RobertaModel
from tests.inference.chars import CharTokenizer


@pytest.fixture(scope="module")
def model() -> RobertaModel:
    torch.manual_seed(0)
    model = RobertaModel(preset("tiny"))
    model.register_classification_head("three", num_classes=3)
    model.register_classification_head("one", num_classes=1)
    model.register_token_head("tagger", 4)
    return model.eval()


@pytest.fixture(scope="module")
def inputs(model) -> ModelInputs:
    return ModelInputs(
        tokenizer=CharTokenizer(), layout=PairLayout(double_separator=True, segments=False), max_positions=48
    )


def test_classify_rows_gives_each_row_what_it_gives_alone_in_the_rows_order(model, inputs):
    rows = [inputs.encode(text) for text in ("a long text here", "hi", "a", "medium text")]
    batched = classify_rows(model, inputs, "three", rows, max_tokens=40, batch_size=2)
    for row, logits in zip(rows, batched):
        alone = classify(model, inputs, "three", torch.tensor(row), return_logits=True)[0]
        forward = model(torch.tensor([row]), features_only=True, classification_head_name="three")[0][0]
        torch.testing.assert_close(logits, alone, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(logits, forward, atol=1e-5, rtol=1e-5)
    log_probs = classify(model, inputs, "three", torch.tensor(rows[1]))
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(1))
    with pytest.raises(KeyError, match=r"no classification head named 'nope'; registered heads: \['one', 'three'\]"):
        classify(model, inputs, "nope", torch.tensor(rows[1]))


def test_score_choices_scores_each_choice_as_its_own_row(model, inputs):
    scores = score_choices(model, inputs, "the sun is hot.", ["yes", "no it is not"], head="one")
    for choice, score in zip(["yes", "no it is not"], scores):
        row = [0, *inputs.tokenizer.encode(choice), 2, 2, *inputs.tokenizer.encode("the sun is hot."), 2]
        torch.testing.assert_close(score, classify(model, inputs, "one", torch.tensor(row), return_logits=True)[0, 0])
    with pytest.raises(ValueError, match="needs a head with one output .* 'three' has 3"):
        score_choices(model, inputs, "x", ["a"], head="three")
    with pytest.raises(ValueError, match="at least one choice"):
        score_choices(model, inputs, "x", [], head="one")


def test_tag_labels_each_word_by_its_first_piece(model, inputs):
    labels = ["O", "B", "I", "X"]
    tagged = tag(model, inputs, labels, "ab  cde f", head="tagger")
    assert [word for word, _, _ in tagged] == ["ab", "cde", "f"]
    ids, firsts = inputs.encode_words(["ab", "cde", "f"])
    with torch.no_grad():
        probs = model.tag("tagger", model.features(torch.tensor([ids])).last_hidden_state)[0].softmax(-1)
    for (_, label, p), position in zip(tagged, firsts):
        assert label == labels[int(probs[position].argmax())]
        assert p == pytest.approx(float(probs[position].max()), abs=1e-6)
    assert tag(model, inputs, labels, "   ", head="tagger") == []
    with pytest.raises(ValueError, match="no label names"):
        tag(model, inputs, None, "ab", head="tagger")


def test_fill_mask_equals_the_forward_at_the_mask(model, inputs):
    filled = fill_mask(model, inputs, "the cat [MASK] here.", mask="<mask>", spellings=["[MASK]"], topk=4)
    row = torch.tensor(
        [
            [0, *inputs.tokenizer.encode("the cat"), inputs.dictionary.index("<mask>")]
            + [*inputs.tokenizer.encode(" here."), 2]
        ]
    )
    with torch.no_grad():
        logits = model(row)[0][0, row[0].tolist().index(inputs.dictionary.index("<mask>"))]
    probs, indices = logits.softmax(-1).topk(4)
    assert [token for _, _, token in filled] == [inputs.tokenizer.token_text(i) for i in indices.tolist()]
    assert [p for _, p, _ in filled] == pytest.approx(probs.tolist(), abs=1e-6)
    assert filled[0][0] == f"the cat{filled[0][2]} here."  # the space before the mask went with it


def test_one_check_of_a_fill_mask_input_names_it(model, inputs):
    assert encode_masked(inputs, "a [MASK] b", mask="<mask>", spellings=["[MASK]"]).text == "a <mask> b"
    for text, count in (("no mask", 0), ("<mask> and [MASK]", 2)):
        with pytest.raises(InputError) as refused:
            encode_masked(inputs, text, mask="<mask>", spellings=["[MASK]"], where="inputs[1]")
        assert str(refused.value) == f"inputs[1] must hold exactly one <mask> or [MASK], got {count}"
    with pytest.raises(InputTooLong, match=r"^masked_input is 53 tokens long, more than the maximum of 48$"):
        encode_masked(inputs, "a" * 50 + "<mask>", mask="<mask>")
    without = RobertaModel(preset("tiny"), has_lm_head=False)
    with pytest.raises(HeadError, match="no masked-LM head"):
        fill_mask(without, inputs, "a <mask>", mask="<mask>")


def test_classify_masks_the_padding_a_mean_pooling_head_averages_over():
    """ModernBERT's sentence head averages the features of the row's own tokens: a short row padded
    in a batch gets what it gets alone only when classify passes the padding mask."""
    torch.manual_seed(0)
    model = RobertaModel(preset("modernbert-tiny"))
    model.register_classification_head("mean", num_classes=2)
    model.eval()
    inputs = ModelInputs(tokenizer=CharTokenizer(), layout=pair_layout(model.cfg), max_positions=48)
    rows = [inputs.encode("a longer sentence here"), inputs.encode("hi")]
    tokens, _ = inputs.collate(rows)
    assert tokens[1].eq(inputs.dictionary.pad()).any()
    batched = classify(model, inputs, "mean", tokens, return_logits=True)
    for row, logits in zip(rows, batched):
        torch.testing.assert_close(logits, classify(model, inputs, "mean", torch.tensor(row), return_logits=True)[0])


def test_classify_rows_reports_each_batch_and_keeps_to_batch_size(model, inputs):
    rows = [inputs.encode(text) for text in ("a long text here", "hi", "a", "medium text")]
    one_at_a_time: list[int] = []
    classify_rows(model, inputs, "three", rows, max_tokens=40, batch_size=1, progress=one_at_a_time.append)
    assert one_at_a_time == [1, 1, 1, 1]
    by_tokens: list[int] = []  # without batch_size, rows share a batch as 40 padded tokens allow
    classify_rows(model, inputs, "three", rows, max_tokens=40, progress=by_tokens.append)
    assert sum(by_tokens) == 4 and len(by_tokens) < 4


def test_choice_rows_lay_out_each_task_as_it_trains(inputs):
    encode = inputs.tokenizer.encode
    # sentence_ranking: <s> choice </s>, the separator's second </s>, the context, </s>; the default layout
    assert choice_rows(inputs, "the sun", ["yes", "no"]) == [
        [0, *encode("yes"), 2, 2, *encode("the sun"), 2],
        [0, *encode("no"), 2, 2, *encode("the sun"), 2],
    ]
    # --max-option-length counts the choice's <s> and </s>
    assert choice_rows(inputs, "ctx", ["abcdef"], max_choice_length=4) == [[0, *encode("abc"), 2, *encode("ctx"), 2]]
    # commonsense_qa: the question first, one </s> between (no_separator), whatever the family's separator
    assert choice_rows(inputs, "q what", ["a this", "a that"], layout="commonsense_qa") == [
        [0, *encode("q what"), 2, *encode("a this"), 2],
        [0, *encode("q what"), 2, *encode("a that"), 2],
    ]
    long = "x" * 60
    assert [len(row) for row in choice_rows(inputs, long, ["a", "bb"])] == [65, 66]
    assert [len(row) for row in choice_rows(inputs, long, ["a", "bb"], truncate=True)] == [48, 48]
    with pytest.raises(ValueError, match=r"^layout must be 'multiple_choice' or 'commonsense_qa', got 'race'$"):
        choice_rows(inputs, "ctx", ["a"], layout="race")  # type: ignore[arg-type]


def test_tag_defaults_to_the_tagger_and_names_what_it_refuses(model, inputs):
    labels = ["O", "B", "I", "X"]
    assert tag(model, inputs, labels, "ab cd") == tag(model, inputs, labels, "ab cd", head="tagger")
    with pytest.raises(KeyError, match=r"no token head named 'nope'; registered token heads: \['tagger'\]"):
        tag(model, inputs, labels, "ab", head="nope")
    with pytest.raises(
        ValueError, match=r"^no label names: load with data_name_or_path pointing at a folder with label/dict\.txt$"
    ):
        tag(model, inputs, None, "ab")
    assert len(tag(model, inputs, labels, "a" * 46)) == 1  # <s>, 46 letters, </s>: the 48 the inputs allow
    with pytest.raises(ValueError, match=r"^sentence is 49 tokens long, more than the model's 48$"):
        tag(model, inputs, labels, "a" * 47)


def test_fill_mask_defaults_and_a_mask_at_the_start(model, inputs):
    assert len(fill_mask(model, inputs, "a <mask>", mask="<mask>")) == 5
    assert len(fill_encoded_mask(model, inputs, encode_masked(inputs, "a <mask>", mask="<mask>"))) == 5
    # no space before the mask: the token replaces the mask alone
    filled = fill_mask(model, inputs, "<mask> cat", mask="<mask>", topk=3)
    assert [sentence for sentence, _, _ in filled] == [f"{token} cat" for _, _, token in filled]
    with pytest.raises(InputError) as refused:
        encode_masked(inputs, "none", mask="<mask>", where="inputs[2]")
    assert refused.value.where == "inputs[2]"
    without = RobertaModel(preset("tiny"), has_lm_head=False)
    with pytest.raises(
        HeadError,
        match=r"^this checkpoint has no masked-LM head \(it was saved without one\), so it cannot fill masks$",
    ):
        check_lm_head(without)


def test_replaced_token_probs_are_the_discriminators_per_token_without_specials():
    torch.manual_seed(0)
    electra = ElectraPretrainingModel(preset("electra-tiny")).eval()
    inputs = ModelInputs(tokenizer=CharTokenizer(), layout=pair_layout(electra.cfg), max_positions=48)
    tokens = torch.tensor(inputs.encode("the cat", "a dog"))  # a pair: segments 0 then 1
    got = replaced_token_probs(electra, inputs, tokens)
    segments = torch.tensor([[0] * 9 + [1] * 6])
    with torch.no_grad():
        features = electra.features(tokens[None], segment_labels=segments).last_hidden_state
        expected = torch.sigmoid(electra.discriminator_head(features).float())[0]
    kept = [i for i, index in enumerate(tokens.tolist()) if index not in (0, 1, 2)]
    assert [text for text, _ in got] == list("the cata dog")
    assert [p for _, p in got] == pytest.approx(expected[kept].tolist(), abs=1e-6)
    with pytest.raises(ValueError, match=r"^replaced_token_probs takes one sentence, got tokens of shape \(1, 15\)$"):
        replaced_token_probs(electra, inputs, tokens[None])
