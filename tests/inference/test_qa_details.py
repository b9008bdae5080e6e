"""The details of extractive QA that tests/test_qa.py leaves open: exact error messages, the edges of
the windows (capacity 1, a stride of a whole window, answers on a window's first token), the loss's
counts, ties and thresholds in ``answer``, and the two functions the fairseq task calls
(``load_tokenizer``, ``prepare_windows``) on files and examples written here."""

from __future__ import annotations

import json
import re
import shutil
from types import SimpleNamespace

import pytest
import torch

from roberta_ext.inference import qa
from roberta_ext.modeling import EncoderOutput
from roberta_ext.tokenizers.dictionary import Dictionary
from roberta_ext.tokenizers.gpt2_bpe import FairseqGPT2Tokenizer
from tests.test_qa import ScoringModel, gpt2_tokenizer_with_mask, scoring_hub

# --------------------------------------------------------------------------------- helpers

START, END, OTHER = 10, 11, 5
"""Ids of the word tokenizer: ``s`` (where ScoringModel puts its start score), ``e`` (its end
score), any other word."""


def word_ids(text: str) -> list[int]:
    return [{"s": START, "e": END}.get(word, OTHER) for word in text.split()]


WORDS = SimpleNamespace(encode=word_ids, dictionary=SimpleNamespace(bos=lambda: 0, eos=lambda: 2, pad=lambda: 1))
"""One token per word, bos 0, pad 1, eos 2."""


def char_ids(text: str) -> list[int]:
    return [ord(c) for c in text if not c.isspace()]


def words_hub(model, max_positions=512):
    return scoring_hub(WORDS, model, max_positions=max_positions)


def parse_error(records) -> str:
    with pytest.raises(ValueError) as info:
        qa.parse_examples(records)
    return str(info.value)


# ------------------------------------------------------------------------------------ data


def test_parse_errors_name_the_source_the_example_and_the_type_found():
    assert parse_error({"question": "q"}) == "the data must be a JSON list of examples, got dict"
    assert parse_error(["Who?"]) == "the data, example 0: expected an object, got str"
    assert parse_error([{"question": 5, "context": "c"}]) == (
        "the data, example 0: 'question' must be a non-empty string, got 5"
    )
    assert parse_error([{"question": "q", "context": "c", "answers": "Ann"}]) == (
        "the data, example 0: 'answers' must be a list, got str"
    )
    assert parse_error([{"question": "q", "context": "Ann ran.", "answers": [{"text": "Ann", "answer_start": 1}]}]) == (
        "the data, example 0: answer 'Ann' is not at character 1 of the context (found 'nn ')"
    )


@pytest.mark.parametrize(
    "answer",
    [
        "Ann",  # not an object
        {"text": "", "answer_start": 0},  # an empty text is at every character
        {"text": "nn", "answer_start": True},  # a bool is no character index
    ],
)
def test_each_answer_needs_a_non_empty_text_and_an_int_start(answer):
    records = [{"question": "q", "context": "Ann ran.", "answers": [answer]}]
    assert parse_error(records) == (
        f"the data, example 0: each answer needs a non-empty 'text' and an int 'answer_start', got {answer!r}"
    )


def test_records_without_answers_are_unanswerable_and_keep_their_ids():
    examples = qa.parse_examples(
        [{"question": "Who?", "context": "Ann ran.", "id": "q7"}, {"question": "Why?", "context": "No idea."}]
    )
    assert examples == [qa.QAExample("Who?", "Ann ran.", (), "q7"), qa.QAExample("Why?", "No idea.", (), "1")]


def test_load_examples_names_the_file_in_its_errors(tmp_path):
    path = tmp_path / "train.json"
    path.write_text("{}")
    with pytest.raises(ValueError) as info:
        qa.load_examples(path)
    assert str(info.value) == f"{str(path)!r} must be a JSON list of examples, got dict"


def test_examples_are_read_as_utf8_whatever_the_locale(tmp_path, ascii_locale):
    path = tmp_path / "train.json"
    record = {"question": "Où?", "context": "À Zürich.", "answers": [{"text": "Zürich", "answer_start": 2}]}
    path.write_bytes(json.dumps([record], ensure_ascii=False).encode("utf-8"))
    examples = qa.load_examples(path)
    assert examples == [qa.QAExample("Où?", "À Zürich.", (("Zürich", 2),), "0")]


# ---------------------------------------------------------------------------------- tokens


def test_answer_tokens_are_the_words_overlapping_the_answer_not_those_touching_it():
    spans = [(0, 3), (3, 4), (5, 8)]  # "Ann, Bob"
    assert qa.answer_token_span(spans, 3, 4) == (1, 1)  # the comma; "Ann" ends where it starts
    assert qa.answer_token_span(spans, 9, 12) is None


# --------------------------------------------------------------------------------- windows


def test_a_windows_length_counts_question_context_and_four_specials():
    assert len(qa.QAWindow([1, 2], [3], 0)) == 7


def starts_and_labels(windows):
    return [(w.context_start, w.start, w.end) for w in windows]


def test_windows_of_one_context_token_are_allowed_and_less_is_refused():
    windows = qa.make_windows([7], [1, 2, 3], max_positions=6, answer=(1, 1))  # capacity 1
    assert [w.context for w in windows] == [[1], [2], [3]]
    assert starts_and_labels(windows) == [(0, -1, -1), (1, 0, 0), (2, -1, -1)]
    with pytest.raises(ValueError) as info:
        qa.make_windows([7, 8], [1], max_positions=6)
    assert str(info.value) == (
        "max_positions=6 leaves no room for the context after a question of 2 tokens; lower max_question_tokens"
    )


def test_the_default_stride_is_half_a_window_and_at_least_one_token():
    three = qa.make_windows([7], [1, 2, 3, 4, 5], max_positions=8)  # capacity 3: stride 1
    assert [w.context_start for w in three] == [0, 1, 2]
    four = qa.make_windows([7], list(range(8)), max_positions=9)  # capacity 4: stride 2
    assert [w.context_start for w in four] == [0, 2, 4]


def test_a_stride_from_one_token_to_a_whole_window_is_allowed():
    context = list(range(8))
    assert [w.context_start for w in qa.make_windows([7], context, max_positions=9, stride=1)] == [0, 1, 2, 3, 4]
    assert [w.context_start for w in qa.make_windows([7], context, max_positions=9, stride=4)] == [0, 4]
    assert [w.context_start for w in qa.make_windows([7], [1, 2], max_positions=9, stride=1)] == [0]
    for stride in (5, -1):
        with pytest.raises(ValueError) as info:
            qa.make_windows([7], context, max_positions=9, stride=stride)
        assert str(info.value) == f"stride must be in 1..4 (the context tokens of a window), got {stride}"


def test_windows_carry_their_examples_index():
    assert {w.example for w in qa.make_windows([7], list(range(8)), max_positions=9)} == {0}
    assert {w.example for w in qa.make_windows([7], list(range(8)), max_positions=9, example=3)} == {3}


def test_an_answer_is_labelled_in_a_window_that_starts_on_it_and_not_in_one_that_cuts_it():
    context = list(range(8))  # capacity 4, stride 2: windows at 0, 2, 4
    on_start = qa.make_windows([7], context, max_positions=9, answer=(2, 3))
    assert starts_and_labels(on_start) == [(0, 2, 3), (2, 0, 1), (4, -1, -1)]
    cut = qa.make_windows([7], context, max_positions=9, answer=(1, 2))
    assert starts_and_labels(cut) == [(0, 1, 2), (2, -1, -1), (4, -1, -1)]


# ------------------------------------------------------------------------- example windows

WHO = qa.QAExample("Who", "Ann saw Bob", (("Bob", 8), ("Ann", 0)))  # the first answer is the label
WHY = qa.QAExample("Why", "No idea")  # unanswerable


def test_example_windows_label_the_first_answer_and_default_to_example_0():
    windows = qa.example_windows(WHO, char_ids, max_positions=11, stride=3, max_question_tokens=2)
    context = char_ids("Ann saw Bob")
    assert windows == [
        qa.QAWindow(char_ids("Wh"), context[0:5], 0, -1, -1, 0),
        qa.QAWindow(char_ids("Wh"), context[3:8], 3, -1, -1, 0),
        qa.QAWindow(char_ids("Wh"), context[4:9], 4, 2, 4, 0),  # "Bob" is context tokens 6..8
    ]


def test_prepare_windows_cuts_every_example_with_the_given_options_and_numbers_them():
    windows = qa.prepare_windows(iter([WHO, WHY]), char_ids, max_positions=11, stride=3, max_question_tokens=2)
    who, why = char_ids("Ann saw Bob"), char_ids("No idea")
    assert windows == [
        qa.QAWindow(char_ids("Wh"), who[0:5], 0, -1, -1, 0),
        qa.QAWindow(char_ids("Wh"), who[3:8], 3, -1, -1, 0),
        qa.QAWindow(char_ids("Wh"), who[4:9], 4, 2, 4, 0),
        qa.QAWindow(char_ids("Wh"), why[0:5], 0, -1, -1, 1),
        qa.QAWindow(char_ids("Wh"), why[1:6], 1, -1, -1, 1),
    ]


# --------------------------------------------------------------------------------- collate


def test_collate_refuses_other_layouts_and_no_windows():
    layout = qa.pair_layout(SimpleNamespace(family="bert", type_vocab_size=2))
    with pytest.raises(ValueError) as info:
        qa.collate_windows([qa.QAWindow([7], [20], 0)], bos=0, eos=2, pad=1, layout="bert")
    assert str(info.value) == "layout must be a PairLayout, got 'bert'"
    with pytest.raises(ValueError) as info:
        qa.collate_windows([], bos=0, eos=2, pad=1, layout=layout)
    assert str(info.value) == "cannot collate an empty list of windows"


def test_collate_gives_integer_ids_and_labels_an_answer_on_the_first_context_token():
    layout = qa.pair_layout(SimpleNamespace(family="bert", type_vocab_size=2))
    windows = [qa.QAWindow([7], [20, 21], 0, start=0, end=0), qa.QAWindow([7], [20], 0)]
    batch = qa.collate_windows(windows, bos=0, eos=2, pad=1, layout=layout)
    assert batch.tokens.dtype == torch.long and batch.segment_labels.dtype == torch.long
    assert batch.tokens.tolist() == [[0, 7, 2, 20, 21, 2], [0, 7, 2, 20, 2, 1]]
    assert batch.segment_labels.tolist() == [[0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 0]]
    assert batch.starts.tolist() == [3, 0] and batch.ends.tolist() == [3, 0]


# ------------------------------------------------------------------------------------ loss


def test_loss_counts_right_starts_ends_and_spans_per_window():
    windows = [
        qa.QAWindow([7], [20, 21, 22], 0, start=0, end=1),
        qa.QAWindow([7], [20, 21, 22], 0, start=1, end=2),
        qa.QAWindow([7], [20, 21, 22], 0, start=2, end=2),
    ]
    batch = qa.collate_windows(windows, bos=0, eos=2, pad=1, layout=qa.pair_layout(SimpleNamespace()))
    assert batch.context_offsets == [4, 4, 4]
    logits = torch.zeros(*batch.tokens.shape, 2)
    logits[1:, 1, :] = 9.0  # question tokens: never candidates
    for row, (start, end) in enumerate([(4, 5), (5, 4), (4, 6)]):  # right+right, right+wrong, wrong+right
        logits[row, start, 0] = logits[row, end, 1] = 1.0
    parts = qa.qa_loss(logits, batch)
    assert (parts.start_correct, parts.end_correct, parts.span_correct) == (2, 2, 1)


def test_best_span_may_be_a_single_token():
    assert qa.best_span(torch.tensor([0.0, 5.0, 0.0]), torch.tensor([0.0, 5.0, 0.0]), 30) == (10.0, 1, 1)


# ---------------------------------------------------------------------------------- answer


class NullModel(ScoringModel):
    """ScoringModel with other no-answer logits for the start (``null``) and the end (``null_end``)."""

    def __init__(self, null: float, null_end: float) -> None:
        super().__init__(START, END, null)
        self.null_end = null_end

    def tag(self, name, features):
        logits = super().tag(name, features)
        logits[:, 0, 1] = self.null_end
        return logits


class NoSpanModel(ScoringModel):
    """Rules out every span (-inf on all context tokens); no answer scores -2."""

    def tag(self, name, features):
        logits = torch.full((*features.shape[:2], 2), float("-inf"))
        logits[:, 0] = -1.0
        return logits


class DeviceModel(ScoringModel):
    """A BERT-like model on the meta device: records where its inputs are, scores nothing."""

    device = torch.device("meta")

    def __init__(self) -> None:
        super().__init__(START, END, null=1.0, family="bert")
        self.devices: list[tuple[torch.device, torch.device]] = []

    def features(self, tokens, *, segment_labels=None, return_all_hiddens=False):
        self.devices.append((tokens.device, segment_labels.device))
        return EncoderOutput(torch.zeros(*tokens.shape, 1))


def test_an_answer_may_start_at_the_first_word():
    got = qa.answer(words_hub(ScoringModel(START, END, null=-1.0)), "q", "s e x x")
    assert got == qa.Answer("s e", 0, 3, 10.0, -2.0)


def test_answers_are_at_most_30_tokens_by_default_and_max_answer_tokens_may_be_1():
    hub = words_hub(ScoringModel(START, END, null=-1.0))
    context = "s" + " x" * 29 + " e"  # "s" and "e" 31 tokens apart
    assert qa.answer(hub, "q", context) == qa.Answer("s", 0, 1, 5.0, -2.0)
    assert qa.answer(hub, "q", context, max_answer_tokens=31) == qa.Answer(context, 0, len(context), 10.0, -2.0)
    assert qa.answer(hub, "q", "s e", max_answer_tokens=1) == qa.Answer("s", 0, 1, 5.0, -2.0)


def test_the_best_span_must_beat_the_null_score_plus_the_threshold():
    def ask(null, **options):
        return qa.answer(words_hub(ScoringModel(START, END, null=null)), "q", "s e", **options)

    assert ask(5.0) == qa.Answer("", None, None, 10.0, 10.0)  # a tie is no answer
    assert ask(4.75) == qa.Answer("s e", 0, 3, 10.0, 9.5)  # the default threshold is 0
    assert ask(4.75, null_threshold=0.5) == qa.Answer("", None, None, 9.5, 9.5)
    assert ask(4.75, null_threshold=0.4) == qa.Answer("s e", 0, 3, 10.0, 9.5)


def test_the_null_score_adds_the_start_and_end_logits_at_position_0():
    assert qa.answer(words_hub(NullModel(1.0, -3.0)), "q", "s e").null_score == -2.0


@pytest.mark.parametrize("threshold", [0.0, float("nan")])
def test_a_model_that_rules_out_every_span_gives_no_answer(threshold):
    got = qa.answer(words_hub(NoSpanModel(START, END, null=-1.0)), "q", "s e x", null_threshold=threshold)
    assert got == qa.Answer("", None, None, -2.0, -2.0)


def test_answer_runs_its_windows_with_the_stride_and_question_cut_in_batches():
    model = ScoringModel(START, END, null=-1.0)
    hub = words_hub(model, max_positions=9)
    # The question cut to 1 token leaves 4 context tokens a window: 8 tokens at stride 1 are 5 windows.
    qa.answer(hub, "q q q", "x x x x x x x x", stride=1, max_question_tokens=1, batch_size=2)
    assert [t.size(0) for t in model.calls] == [2, 2, 1]
    assert model.calls[0].tolist() == [[0, 5, 2, 2, 5, 5, 5, 5, 2]] * 2
    model.calls.clear()
    qa.answer(words_hub(model, max_positions=7), "q", " ".join(["x"] * 18))  # 17 windows
    assert [t.size(0) for t in model.calls] == [16, 1]  # 16 a batch by default


def test_the_earliest_of_equal_spans_wins_and_a_later_window_needs_a_higher_score():
    model = ScoringModel(START, END, null=-1.0)
    hub = words_hub(model, max_positions=9)  # 4 context tokens a window
    # Windows at 0, 2, 4: the first and the last hold a span of score 10.
    assert qa.answer(hub, "q", "s e x x x x s e", stride=2) == qa.Answer("s e", 0, 3, 10.0, -2.0)
    # Windows at 0, 4: the first's best span scores 10, the second's 5.
    assert qa.answer(hub, "q", "x s e x s x x x", stride=4) == qa.Answer("s e", 2, 5, 10.0, -2.0)


def test_answer_sends_tokens_and_segments_to_the_models_device():
    model = DeviceModel()
    got = qa.answer(words_hub(model), "q", "s e")
    assert model.devices == [(torch.device("meta"), torch.device("meta"))]
    assert got == qa.Answer("", None, None, 2.0, 2.0)


def test_a_missing_head_is_named_with_the_heads_there_are():
    message = (
        "the model has no token head 'qa' (token heads: {}); fine-tune one with --task extractive_qa or "
        "register_token_head(name, 2)"
    )
    bare = SimpleNamespace(model=SimpleNamespace())
    with pytest.raises(KeyError, match=re.escape(message.format([]))):
        qa.answer(bare, "Who?", "Ann ran.")
    heads = SimpleNamespace(model=SimpleNamespace(token_heads={"tags": None, "ner": None}))
    with pytest.raises(KeyError, match=re.escape(message.format(["ner", "tags"]))):
        qa.answer(heads, "Who?", "Ann ran.")


@pytest.mark.parametrize("bad", [0, 2.5])
def test_max_answer_tokens_must_be_a_positive_int(bad):
    with pytest.raises(ValueError) as info:
        qa.answer(words_hub(ScoringModel(START, END, null=-1.0)), "q", "s e", max_answer_tokens=bad)
    assert str(info.value) == f"max_answer_tokens must be a positive int, got {bad!r}"


def test_a_context_without_words_is_refused():
    with pytest.raises(ValueError) as info:
        qa.answer(words_hub(ScoringModel(START, END, null=-1.0)), "q", "  ")
    assert str(info.value) == "the context has no words to answer from: '  '"


# ------------------------------------------------------------------------------- tokenizer


def data_folder(tmp_path, bpe_files, *names):
    """A QA data folder holding dict.txt and the named BPE files."""
    folder = tmp_path / "data"
    folder.mkdir()
    for path in (bpe_files.dict_txt, *(getattr(bpe_files, name) for name in names)):
        shutil.copy(path, folder / path.name)
    return folder


TEXT = "Zorbia's capital, Quelm (est. 1901)!"


@pytest.fixture(scope="module")
def tokenizer(bpe_files) -> FairseqGPT2Tokenizer:
    return gpt2_tokenizer_with_mask(bpe_files)


def test_load_tokenizer_reads_the_folders_gpt2_bpe_over_dict_txt_with_mask_appended(tmp_path, bpe_files, tokenizer):
    folder = data_folder(tmp_path, bpe_files, "encoder_json", "vocab_bpe")
    loaded = qa.load_tokenizer(str(folder))
    assert loaded.encode(TEXT) == tokenizer.encode(TEXT)
    assert len(loaded.dictionary) == len(Dictionary.load(bpe_files.dict_txt)) + 1
    assert loaded.dictionary.index("<mask>") == len(loaded.dictionary) - 1


@pytest.mark.parametrize("named", ["encoder_json", "vocab_bpe"])
def test_load_tokenizer_takes_the_bpe_file_not_named_from_the_folder(tmp_path, bpe_files, tokenizer, named):
    in_folder = "vocab_bpe" if named == "encoder_json" else "encoder_json"
    folder = data_folder(tmp_path, bpe_files, in_folder)
    loaded = qa.load_tokenizer(folder, **{named: str(getattr(bpe_files, named))})
    assert loaded.encode(TEXT) == tokenizer.encode(TEXT)


def test_load_tokenizer_falls_back_to_gpt2s_and_refuses_it_for_a_dictionary_of_its_own(tmp_path, bpe_files):
    folder = data_folder(tmp_path, bpe_files)
    with pytest.raises(FileNotFoundError, match=r"^no GPT-2 BPE files for .*dict\.txt") as info:
        qa.load_tokenizer(folder)
    assert str(info.value).endswith(f"or put encoder.json and vocab.bpe in {str(folder)!r}")
