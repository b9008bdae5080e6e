"""roberta_ext/inference/head_outputs.py: what a model's heads say about encoded text (classify,
classify_rows, score_choices, tag, fill_mask and its one input check), on a tiny random RoBERTa
over a character tokenizer. Each output is checked against the model's own fairseq-style
``forward`` (the path fairseq's hub calls), a different route through the same weights."""

from __future__ import annotations

import pytest
import torch

from roberta_ext.families import preset
from roberta_ext.inference.head_outputs import (
    HeadError,
    classify,
    classify_rows,
    encode_masked,
    fill_mask,
    score_choices,
    tag,
)
from roberta_ext.inference.inputs import InputError, InputTooLong, ModelInputs, PairLayout
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
