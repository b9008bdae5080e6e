"""Extractive QA without fairseq: SQuAD-like data checks, word offsets, windows with a stride,
the two pair layouts, the loss, and ``answer``'s decisions (best span across windows, exact
character offsets, no-answer) on models whose scores the test controls.

``make_qa_records`` generates the small QA set that the fairseq test fine-tunes on
(tests/fairseq_plugin/test_electra_spanbert_training.py)."""

from __future__ import annotations

import contextlib
import json
import random
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from roberta_ext import qa
from roberta_ext.families import preset
from roberta_ext.hub import RobertaHubInterface
from roberta_ext.modeling import EncoderOutput, RobertaModel
from roberta_ext.tokenizers.dictionary import Dictionary
from roberta_ext.tokenizers.gpt2_bpe import GPT2BPE, FairseqGPT2Tokenizer
from tests.bpe_fixtures import UNICODE_SAMPLES

SYLLABLES = (
    "zor",
    "bia",
    "quel",
    "vas",
    "tlon",
    "mir",
    "dak",
    "sen",
    "plo",
    "rug",
    "fen",
    "kai",
    "lor",
    "bex",
    "nim",
    "ost",
    "ya",
    "ter",
    "gu",
    "wi",
)
# relation -> (fact, questions). The relation word comes right before the answer in the fact.
RELATIONS = {
    "capital": ("{c} has the capital {a}.", ("What is the capital of {c}?",)),
    "river": ("{c} has the river {a}.", ("What is the river of {c}?",)),
    "leader": ("{c} has the leader {a}.", ("Who is the leader of {c}?",)),
    "language": ("{c} speaks the language {a}.", ("What is the language of {c}?",)),
    "currency": ("{c} uses the currency {a}.", ("What is the currency of {c}?",)),
}


def made_up_name(rng: random.Random, parts: int) -> str:
    """Syllables joined by hyphens ("Quel-dak"): a tokenizer learned from this text keeps the
    syllables as tokens instead of merging frequent names into tokens of their own, so that
    held-out names are spelled with the same pieces as training names."""
    return "-".join(rng.choice(SYLLABLES) for _ in range(parts)).capitalize()


def make_qa_records(rng: random.Random, n: int, unanswerable: float = 0.15) -> list[dict]:
    """``n`` SQuAD-like records: 2-3 facts about a made-up country ("Zorbia has the capital
    Quelm. ..."), a question about one of them — or, with probability ``unanswerable``, about a
    relation the context does not state (empty ``answers``). Names are random syllable strings,
    so held-out records (another seed) ask about names never seen in training."""
    records = []
    for _ in range(n):
        country = made_up_name(rng, rng.choice([2, 3]))
        relations = rng.sample(sorted(RELATIONS), rng.choice([2, 3]))
        facts = {r: made_up_name(rng, rng.choice([1, 2, 3])) for r in relations}
        sentences = [RELATIONS[r][0].format(c=country, a=facts[r]) for r in relations]
        context = " ".join(sentences)
        if rng.random() < unanswerable:
            asked = rng.choice([r for r in RELATIONS if r not in relations])
            answers = []
        else:
            asked = rng.choice(relations)
            sentence = sentences[relations.index(asked)]
            start = context.index(sentence) + sentence.rindex(facts[asked])
            answers = [{"text": facts[asked], "answer_start": start}]
        question = rng.choice(RELATIONS[asked][1]).format(c=country)
        records.append({"question": question, "context": context, "answers": answers})
    return records


def gpt2_tokenizer_with_mask(bpe_files) -> FairseqGPT2Tokenizer:
    """The tests' GPT-2 BPE over their ``dict.txt`` with ``<mask>`` appended: what a pretrained
    RoBERTa's folder gives (and what ``qa.load_tokenizer`` must read from one)."""
    dictionary = Dictionary.load(bpe_files.dict_txt)
    dictionary.add_symbol("<mask>")
    return FairseqGPT2Tokenizer(GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe), dictionary)


@pytest.fixture(scope="module")
def tokenizer(bpe_files) -> FairseqGPT2Tokenizer:
    return gpt2_tokenizer_with_mask(bpe_files)


# ---------------------------------------------------------------------------------- data


def test_generated_records_parse_and_point_at_their_answers():
    records = make_qa_records(random.Random(0), 200)
    examples = qa.parse_examples(records)
    assert any(not e.answers for e in examples) and any(e.answers for e in examples)
    for example in examples:
        for text, start in example.answers:
            assert example.context[start : start + len(text)] == text


@pytest.mark.parametrize(
    "records,message",
    [
        ({"question": "q"}, "JSON list"),
        ([{"question": "", "context": "c", "answers": []}], "example 0: 'question'"),
        (
            [{"question": "q", "context": "Ann ran.", "answers": [{"text": "Ann", "answer_start": 1}]}],
            "not at character 1",
        ),
        ([{"question": "q", "context": "Ann ran.", "answers": [{"text": "Ann"}]}], "answer_start"),
        ([{"question": "q", "context": "Ann ran.", "answers": "Ann"}], "'answers' must be a list"),
    ],
)
def test_bad_records_name_the_example_and_the_problem(records, message):
    with pytest.raises(ValueError, match=message):
        qa.parse_examples(records)


def test_load_examples_reads_json(tmp_path):
    path = tmp_path / "train.json"
    path.write_text(json.dumps(make_qa_records(random.Random(1), 3)))
    assert len(qa.load_examples(path)) == 3
    path.write_text("[{")
    with pytest.raises(ValueError, match="not valid JSON"):
        qa.load_examples(path)


# ------------------------------------------------------------------------------ offsets


@pytest.mark.parametrize("text", [*UNICODE_SAMPLES[:12], "Zorbia's capital,  Quelm (est. 1901)!", "  lead"])
def test_every_token_maps_back_to_the_characters_of_its_word(tokenizer, text):
    ids, spans = qa.tokenize_with_offsets(tokenizer.encode, text)
    assert len(ids) == len(spans)
    # Word by word, the tokens decode to the word with its leading whitespace...
    words = sorted(set(spans))
    previous = 0
    for start, end in words:
        word_ids = [i for i, s in zip(ids, spans) if s == (start, end)]
        if tokenizer.dictionary.unk() not in word_ids:
            assert tokenizer.decode(word_ids) == text[previous:end]
        assert text[start:end].strip() == text[start:end] and text[start:end]
        previous = end
    # ... and the words cover every non-space character exactly once.
    covered = "".join(text[s:e] for s, e in words)
    assert covered == "".join(text.split())


def test_answer_tokens_are_the_answer(tokenizer):
    for example in qa.parse_examples(make_qa_records(random.Random(2), 50, unanswerable=0.0)):
        ids, spans = qa.tokenize_with_offsets(tokenizer.encode, example.context)
        text, start = example.answers[0]
        first, last = qa.answer_token_span(spans, start, start + len(text))
        assert tokenizer.decode(ids[first : last + 1]).strip() == text
        assert example.context[spans[first][0] : spans[last][1]] == text


# ------------------------------------------------------------------------------ windows


def test_windows_cover_the_context_with_the_stride_and_label_only_whole_answers():
    context = list(range(100, 160))  # 60 context tokens
    windows = qa.make_windows([7, 8, 9], context, max_positions=27, stride=7, answer=(30, 33))
    capacity = 27 - 3 - qa.RESERVED_SPECIALS  # 20
    starts = [w.context_start for w in windows]
    assert starts == [0, 7, 14, 21, 28, 35, 40]  # the last one ends at the context's end
    assert all(len(w) <= 27 and len(w.context) == capacity for w in windows)
    assert {t for w in windows for t in w.context} == set(context)
    for w in windows:
        holds = w.context_start <= 30 and 33 < w.context_start + capacity
        assert (w.start >= 0) == holds
        if holds:
            assert w.context[w.start : w.end + 1] == context[30:34]
    short = qa.make_windows([7], [1, 2, 3], max_positions=64)
    assert len(short) == 1 and short[0].context == [1, 2, 3] and short[0].start == -1
    with pytest.raises(ValueError, match="stride"):
        qa.make_windows([7], context, max_positions=27, stride=30)
    with pytest.raises(ValueError, match="no room"):
        qa.make_windows(list(range(30)), context, max_positions=20, max_question_tokens=30)


def test_questions_are_cut_to_max_question_tokens():
    windows = qa.make_windows(list(range(100)), [1, 2], max_positions=64, max_question_tokens=10)
    assert windows[0].question == list(range(10))


@pytest.mark.parametrize(
    "name,expected,segments",
    [
        ("tiny", [0, 7, 8, 2, 2, 20, 21, 22, 2], None),  # <s> q </s> </s> c </s>
        ("bert-tiny", [0, 7, 8, 2, 20, 21, 22, 2], [0, 0, 0, 0, 1, 1, 1, 1]),  # [CLS] q [SEP] c [SEP]
    ],
)
def test_collate_follows_the_models_pair_layout(name, expected, segments):
    layout = qa.pair_layout(preset(name))
    windows = [qa.QAWindow([7, 8], [20, 21, 22], 0, start=1, end=2), qa.QAWindow([7], [20], 0)]
    batch = qa.collate_windows(windows, bos=0, eos=2, pad=1, layout=layout)
    assert batch.tokens[0].tolist() == expected
    offset = batch.context_offsets[0]
    assert batch.starts.tolist() == [offset + 1, 0] and batch.ends.tolist() == [offset + 2, 0]
    assert batch.candidates[0].nonzero().view(-1).tolist() == [0, offset, offset + 1, offset + 2]
    assert batch.tokens[1, len(expected) - 2 :].eq(1).all()  # the shorter row is padded
    if segments is None:
        assert batch.segment_labels is None
    else:
        assert batch.segment_labels[0].tolist() == segments and batch.segment_labels[1, -2:].eq(0).all()


def test_loss_is_cross_entropy_over_candidates():
    windows = [qa.QAWindow([7, 8], [20, 21, 22], 0, start=1, end=2), qa.QAWindow([7], [20], 0)]
    batch = qa.collate_windows(windows, bos=0, eos=2, pad=1, layout=qa.pair_layout(preset("tiny")))
    logits = torch.randn(*batch.tokens.shape, 2, requires_grad=True)
    parts = qa.qa_loss(logits, batch)
    expected = 0.0
    for row in range(2):
        keep = batch.candidates[row]
        for k, label in ((0, batch.starts[row]), (1, batch.ends[row])):
            scores = logits[row, keep, k]
            expected = expected + F.cross_entropy(scores[None], keep[:label].sum()[None]) / 2
    torch.testing.assert_close(parts.loss, expected)
    parts.loss.backward()
    assert logits.grad[~batch.candidates].abs().sum() == 0  # question and separators never compete


# ------------------------------------------------------------------------------- answer


class ScoringModel(torch.nn.Module):
    """A stand-in QA model on the model's typed interface: start logit ``+5`` on
    ``start_token``, end logit ``+5`` on ``end_token``, ``null`` for both at position 0, zero
    elsewhere (its "features" are the token ids themselves)."""

    device = torch.device("cpu")

    def __init__(self, start_token: int, end_token: int, null: float, family: str = "roberta") -> None:
        super().__init__()
        self.cfg = SimpleNamespace(family=family, type_vocab_size=2 if family != "roberta" else 0)
        self.token_heads = {"qa": SimpleNamespace(num_classes=2)}
        self.start_token, self.end_token, self.null = start_token, end_token, null
        self.calls: list[torch.Tensor] = []

    def inference(self):
        return contextlib.nullcontext(self)

    def features(self, tokens, *, segment_labels=None, return_all_hiddens=False):
        assert (segment_labels is None) == (self.cfg.type_vocab_size == 0)
        self.calls.append(tokens)
        return EncoderOutput(tokens[..., None].float())  # (B, T, 1)

    def tag(self, name, features):
        assert name == "qa"
        tokens = features[..., 0].long()
        logits = torch.zeros(*tokens.shape, 2)
        logits[..., 0] += 5.0 * tokens.eq(self.start_token)
        logits[..., 1] += 5.0 * tokens.eq(self.end_token)
        logits[:, 0] = self.null
        return logits


def scoring_hub(tokenizer, model, max_positions=512):
    return SimpleNamespace(
        model=model, tokenizer=tokenizer, dictionary=tokenizer.dictionary, max_positions=lambda: max_positions
    )


@pytest.mark.parametrize("family", ["roberta", "bert"])
def test_answer_gives_the_exact_substring_of_the_best_span(tokenizer, family):
    context = "Zorbia has the capital Quelmdaktlon. It uses the currency Vask."
    ids, spans = qa.tokenize_with_offsets(tokenizer.encode, context)
    word = [i for i, s in zip(ids, spans) if context[s[0] : s[1]] == "Quelmdaktlon"]
    assert len(word) >= 2, "the test wants a multi-token answer"
    hub = scoring_hub(tokenizer, ScoringModel(word[0], word[-1], null=-1.0, family=family))
    got = qa.answer(hub, "What is the capital of Zorbia?", context)
    assert got and (got.text, got.start, got.end) == ("Quelmdaktlon", 23, 35)
    assert context[got.start : got.end] == got.text
    assert got.score == pytest.approx(10.0) and got.null_score == pytest.approx(-2.0)
    # The no-answer score wins when it is higher.
    unanswerable = qa.answer(
        scoring_hub(tokenizer, ScoringModel(word[0], word[-1], null=6.0, family=family)), "Who leads Zorbia?", context
    )
    assert not unanswerable and unanswerable.text == "" and unanswerable.start is None
    # A span longer than max_answer_tokens is out of reach: the best one left has one end only.
    # (Its text is still the whole word: offsets are per word.)
    assert qa.answer(hub, "q", context, max_answer_tokens=len(word) - 1).score == pytest.approx(5.0)


def test_answer_searches_every_window_of_a_long_context(tokenizer):
    filler = " ".join(["The weather is mild."] * 40)
    context = f"{filler} Zorbia has the capital Quelm. {filler}"
    ids, spans = qa.tokenize_with_offsets(tokenizer.encode, context)
    word = [i for i, s in zip(ids, spans) if context[s[0] : s[1]] == "Quelm"]
    model = ScoringModel(word[0], word[-1], null=-1.0)
    got = qa.answer(
        scoring_hub(tokenizer, model, max_positions=64),
        "What is the capital of Zorbia?",
        context,
        stride=20,
        batch_size=4,
    )
    assert got.text == "Quelm" and context[got.start : got.end] == "Quelm"
    assert len(model.calls) > 2 and all(t.size(1) <= 64 for t in model.calls)  # several batches of windows


def test_answer_with_a_real_model_and_hub(tokenizer):
    cfg = preset("tiny", vocab_size=len(tokenizer.dictionary))
    model = RobertaModel(cfg)
    hub = RobertaHubInterface(model, tokenizer)
    with pytest.raises(KeyError, match="no token head 'qa'"):
        qa.answer(hub, "Who?", "Ann ran.")
    model.register_token_head("qa", 2)
    model.train()
    context = "Ann ran home. Bob stayed."
    got = qa.answer(hub, "Who ran?", context)
    assert model.training, "answer leaves the model's mode as it found it"
    assert got.text == "" or context[got.start : got.end] == got.text
    model.register_token_head("tags", 3)
    with pytest.raises(ValueError, match="3 labels"):
        qa.answer(hub, "Who?", context, head="tags")


def test_doctests():
    import doctest

    result = doctest.testmod(qa)
    assert result.failed == 0 and result.attempted > 0
