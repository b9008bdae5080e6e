"""Extractive question answering for every family: data, windows, loss and :func:`answer`.

The model is any encoder with a 2-label token head (default name ``"qa"``): label 0 of token
``t`` is the score of an answer starting at ``t``, label 1 of one ending there. Position 0
(``<s>`` / ``[CLS]``) stands for "no answer", as in BERT's SQuAD 2.0 recipe.

Inputs follow each family's pair layout (:func:`pair_layout`, the hub's ``encode``)::

    roberta:          <s> question </s> </s> context </s>
    BERT's family:    [CLS] question [SEP] context [SEP]    segments 0 ... 0 1 ... 1

A context longer than the model's window is cut into overlapping windows: window ``k`` holds
context tokens ``k * stride`` onwards (``stride`` is BERT's ``doc_stride``: the step between
window starts). A window whose tokens do not contain the whole answer is labelled "no answer".
At inference every window votes: the best span of any window wins if it scores above the
lowest no-answer score of all windows (SQuAD 2.0's rule), else the question is unanswerable.

Answers are exact substrings of the context. The context is split into words and single
punctuation marks that keep their character offsets (:func:`tokenize_with_offsets`); each word
is tokenized on its own, with the whitespace before it (GPT-2's BPE marks word starts by a
leading space), so every token maps back to the characters of its word.

>>> answer(hub, "What is the capital of Zorbia?", "The capital of Zorbia is Quelm.")  # doctest: +SKIP
Answer(text='Quelm', start=25, end=30, score=7.93, null_score=-3.1)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from .inputs import PairLayout, pair_layout

if TYPE_CHECKING:
    from ..tokenizers.registry import Tokenizer

DEFAULT_HEAD = "qa"
"""Name of the 2-label token head that scores answer starts and ends."""

RESERVED_SPECIALS = 4
"""Special tokens a window reserves room for: RoBERTa's ``<s> </s> </s> ... </s>`` (BERT's
layout needs 3; windows are cut the same way for both, so that data prepared once suits either)."""

DEFAULT_MAX_QUESTION_TOKENS = 64
"""Questions are cut to this many tokens (BERT's ``max_query_length``)."""

_WORD = re.compile(r"\w+|[^\w\s]")


# ----------------------------------------------------------------------------------- data


@dataclass(frozen=True)
class QAExample:
    """One question about one context; ``answers`` are ``(text, character start)`` pairs, none
    for an unanswerable question."""

    question: str
    context: str
    answers: tuple[tuple[str, int], ...] = ()
    id: str = ""


def parse_examples(records: Any, *, source: str = "the data") -> list[QAExample]:
    """Check and convert SQuAD-like records: a list of ``{"question", "context", "answers":
    [{"text", "answer_start"}, ...]}`` (optional ``"id"``); an empty ``answers`` list marks an
    unanswerable question. Every answer must be the context's text at its ``answer_start``.

    >>> parse_examples([{"question": "Who?", "context": "Ann ran.", "answers": [{"text": "Ann", "answer_start": 0}]}])
    [QAExample(question='Who?', context='Ann ran.', answers=(('Ann', 0),), id='0')]
    """
    if not isinstance(records, list):
        raise ValueError(f"{source} must be a JSON list of examples, got {type(records).__name__}")
    examples = []
    for n, record in enumerate(records):
        where = f"{source}, example {n}"
        if not isinstance(record, dict):
            raise ValueError(f"{where}: expected an object, got {type(record).__name__}")
        for key in ("question", "context"):
            if not isinstance(record.get(key), str) or not record[key].strip():
                raise ValueError(f"{where}: {key!r} must be a non-empty string, got {record.get(key)!r}")
        answers = record.get("answers", [])
        if not isinstance(answers, list):
            raise ValueError(f"{where}: 'answers' must be a list, got {type(answers).__name__}")
        context, parsed = record["context"], []
        for answer_record in answers:
            text, start = (
                (answer_record.get("text"), answer_record.get("answer_start"))
                if isinstance(answer_record, dict)
                else (None, None)
            )
            if not isinstance(text, str) or not text or isinstance(start, bool) or not isinstance(start, int):
                raise ValueError(
                    f"{where}: each answer needs a non-empty 'text' and an int 'answer_start', got {answer_record!r}"
                )
            if context[start : start + len(text)] != text:
                raise ValueError(
                    f"{where}: answer {text!r} is not at character {start} of the context "
                    f"(found {context[start : start + len(text)]!r})"
                )
            parsed.append((text, start))
        examples.append(QAExample(record["question"], context, tuple(parsed), str(record.get("id", n))))
    return examples


def load_examples(path: str | os.PathLike[str]) -> list[QAExample]:
    """Read a SQuAD-like JSON file (see :func:`parse_examples`)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            records = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path!r} is not valid JSON: {exc}") from None
    return parse_examples(records, source=repr(path))


# ------------------------------------------------------------------------------ tokens


def tokenize_with_offsets(encode: Callable[[str], list[int]], text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """Token ids of ``text`` and, for each token, the ``(start, end)`` characters of the word or
    punctuation mark it belongs to. Words are ``\\w+`` runs and single other non-space
    characters; each is encoded with the whitespace that precedes it.

    >>> tokenize_with_offsets(lambda s: [len(s)], "Hi, you")
    ([2, 1, 4], [(0, 2), (2, 3), (4, 7)])
    """
    ids: list[int] = []
    spans: list[tuple[int, int]] = []
    previous = 0
    for match in _WORD.finditer(text):
        piece_ids = encode(text[previous : match.end()])
        ids.extend(piece_ids)
        spans.extend([match.span()] * len(piece_ids))
        previous = match.end()
    return ids, spans


def answer_token_span(spans: Sequence[tuple[int, int]], start: int, end: int) -> tuple[int, int] | None:
    """First and last token whose word overlaps characters ``[start, end)``; None if none does.

    >>> answer_token_span([(0, 3), (4, 9), (4, 9), (10, 12)], 4, 9)
    (1, 2)
    """
    inside = [i for i, (s, e) in enumerate(spans) if s < end and e > start]
    return (inside[0], inside[-1]) if inside else None


@dataclass
class QAWindow:
    """A question and one window of its context, with the answer's place in the window."""

    question: list[int]
    context: list[int]
    """This window's context tokens."""
    context_start: int
    """Index of ``context[0]`` among all the context's tokens."""
    start: int = -1
    """Answer start within ``context`` (-1: no answer in this window)."""
    end: int = -1
    example: int = 0
    """Index of the example the window comes from."""

    def __len__(self) -> int:
        return len(self.question) + len(self.context) + RESERVED_SPECIALS


def make_windows(
    question: Sequence[int],
    context: Sequence[int],
    *,
    max_positions: int,
    stride: int | None = None,
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
    answer: tuple[int, int] | None = None,
    example: int = 0,
) -> list[QAWindow]:
    """Cut ``context`` into windows that fit ``max_positions`` with the question (cut to
    ``max_question_tokens``) and :data:`RESERVED_SPECIALS`. Consecutive windows start ``stride``
    tokens apart (default: half a window); the last one ends at the context's end. ``answer`` is
    the answer's first and last context token; windows holding all of it get its place.

    >>> windows = make_windows([7], list(range(10)), max_positions=9, stride=2, answer=(5, 6))
    >>> [(w.context_start, w.start) for w in windows]
    [(0, -1), (2, -1), (4, 1), (6, -1)]
    """
    question = list(question)[:max_question_tokens]
    capacity = max_positions - len(question) - RESERVED_SPECIALS
    if capacity < 1:
        raise ValueError(
            f"max_positions={max_positions} leaves no room for the context after a question of "
            f"{len(question)} tokens; lower max_question_tokens"
        )
    stride = stride or max(1, capacity // 2)
    if not 0 < stride <= capacity:
        raise ValueError(f"stride must be in 1..{capacity} (the context tokens of a window), got {stride}")
    starts = list(range(0, max(len(context) - capacity, 0) + 1, stride))
    if starts[-1] + capacity < len(context):
        starts.append(len(context) - capacity)
    windows = []
    for begin in starts:
        window = QAWindow(question, list(context[begin : begin + capacity]), begin, example=example)
        if answer is not None and begin <= answer[0] and answer[1] < begin + capacity:
            window.start, window.end = answer[0] - begin, answer[1] - begin
        windows.append(window)
    return windows


def example_windows(
    example: QAExample,
    encode: Callable[[str], list[int]],
    *,
    max_positions: int,
    stride: int | None = None,
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
    index: int = 0,
) -> list[QAWindow]:
    """Training windows of one example (its first answer is the label)."""
    question = encode(example.question)
    context, spans = tokenize_with_offsets(encode, example.context)
    answer = None
    if example.answers:
        text, start = example.answers[0]
        answer = answer_token_span(spans, start, start + len(text))
    return make_windows(
        question,
        context,
        max_positions=max_positions,
        stride=stride,
        max_question_tokens=max_question_tokens,
        answer=answer,
        example=index,
    )


@dataclass
class QABatch:
    """Windows collated into model inputs and labels."""

    tokens: torch.Tensor
    """(B, T) input ids, right-padded."""
    segment_labels: torch.Tensor | None
    """(B, T) segment ids (0 question, 1 context, 0 padding) for layouts with segments, else None."""
    candidates: torch.Tensor
    """(B, T) bool: the positions an answer may start or end at (the context, and 0 = no answer)."""
    starts: torch.Tensor
    """(B,) label of the start (0: no answer in the window)."""
    ends: torch.Tensor
    """(B,) label of the end."""
    context_offsets: list[int]
    """Position of each window's first context token in its row."""


def collate_windows(windows: Sequence[QAWindow], *, bos: int, eos: int, pad: int, layout: PairLayout) -> QABatch:
    """Build the model inputs of ``windows`` in ``layout`` (see :func:`pair_layout`)."""
    if not isinstance(layout, PairLayout):
        raise ValueError(f"layout must be a PairLayout, got {layout!r}")
    if not windows:
        raise ValueError("cannot collate an empty list of windows")
    separator = layout.separator(eos)
    rows, segments, offsets = [], [], []
    for w in windows:
        head = [bos, *w.question, *separator]
        rows.append(head + w.context + [eos])
        segments.append([0] * len(head) + [1] * (len(w.context) + 1))
        offsets.append(len(head))
    length = max(map(len, rows))
    tokens = torch.full((len(rows), length), pad, dtype=torch.long)
    segment_labels = torch.zeros((len(rows), length), dtype=torch.long)
    candidates = torch.zeros((len(rows), length), dtype=torch.bool)
    starts = torch.zeros(len(rows), dtype=torch.long)
    ends = torch.zeros(len(rows), dtype=torch.long)
    for i, (w, row, segs, offset) in enumerate(zip(windows, rows, segments, offsets)):
        tokens[i, : len(row)] = torch.tensor(row)
        segment_labels[i, : len(segs)] = torch.tensor(segs)
        candidates[i, 0] = True
        candidates[i, offset : offset + len(w.context)] = True
        if w.start >= 0:
            starts[i], ends[i] = offset + w.start, offset + w.end
    return QABatch(tokens, segment_labels if layout.segments else None, candidates, starts, ends, offsets)


# ------------------------------------------------------------------------------ training


@dataclass
class QALoss:
    loss: torch.Tensor
    """Sum over windows of (start cross-entropy + end cross-entropy) / 2, in nats."""
    start_correct: int
    end_correct: int
    span_correct: int
    """Windows whose start and end are both right."""


def qa_loss(logits: torch.Tensor, batch: QABatch) -> QALoss:
    """Cross-entropy of the start and end labels over each window's candidate positions.
    ``logits``: (B, T, 2) from the QA token head."""
    scores = masked_scores(logits, batch.candidates.to(logits.device))  # (B, T, 2)
    starts, ends = batch.starts.to(logits.device), batch.ends.to(logits.device)
    loss = (
        F.cross_entropy(scores[..., 0], starts, reduction="sum")
        + F.cross_entropy(scores[..., 1], ends, reduction="sum")
    ) / 2
    with torch.no_grad():
        start_ok, end_ok = scores[..., 0].argmax(-1) == starts, scores[..., 1].argmax(-1) == ends
    return QALoss(loss, int(start_ok.sum()), int(end_ok.sum()), int((start_ok & end_ok).sum()))


def masked_scores(logits: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
    """``logits`` (B, T, 2) in float32 with non-candidate positions at the lowest float."""
    scores = logits.float()
    return scores.masked_fill(~candidates.unsqueeze(-1), torch.finfo(scores.dtype).min)


# ----------------------------------------------------------------------------- inference


@dataclass
class Answer:
    """The answer to one question: ``context[start:end] == text``. An unanswerable question
    gives ``text == ""`` and ``start == end == None`` (and the answer is falsy)."""

    text: str
    start: int | None
    end: int | None
    score: float
    """Start logit + end logit of the best span (of the no-answer choice when unanswerable)."""
    null_score: float
    """The lowest no-answer score (start + end logit at position 0) over the windows."""

    def __bool__(self) -> bool:
        return self.start is not None


def best_span(start_logits: torch.Tensor, end_logits: torch.Tensor, max_answer_tokens: int) -> tuple[float, int, int]:
    """The ``(score, i, j)`` maximising ``start_logits[i] + end_logits[j]`` with
    ``i <= j < i + max_answer_tokens``, over 1-D logits of the context tokens.

    >>> best_span(torch.tensor([0.0, 3.0, 1.0]), torch.tensor([1.0, 0.0, 4.0]), 30)
    (7.0, 1, 2)
    """
    length = start_logits.numel()
    scores = start_logits[:, None] + end_logits[None, :]  # (L, L): row i = start, column j = end
    offsets = torch.arange(length)[None, :] - torch.arange(length)[:, None]  # j - i
    scores = scores.masked_fill((offsets < 0) | (offsets >= max_answer_tokens), float("-inf"))
    flat = int(scores.argmax())
    i, j = divmod(flat, length)
    return float(scores[i, j]), i, j


def answer(
    hub: Any,
    question: str,
    context: str,
    *,
    head: str = DEFAULT_HEAD,
    max_answer_tokens: int = 30,
    stride: int | None = None,
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
    null_threshold: float = 0.0,
    batch_size: int = 16,
) -> Answer:
    """Answer ``question`` from ``context`` with a hub's model and its ``head`` token head.

    ``hub`` is anything with ``tokenizer.encode(text) -> list[int]`` (dictionary indices, no
    specials), ``dictionary`` (``bos()``, ``eos()``, ``pad()``), ``model`` (an encoder with
    token heads) and ``max_positions()``. The best span (start <= end, at most
    ``max_answer_tokens`` tokens) over all windows is returned when its score beats the lowest
    no-answer score by more than ``null_threshold``; otherwise an empty :class:`Answer`.

    >>> a = answer(hub, "Who wrote it?", "It was written by Ann Lee in 1990.")   # doctest: +SKIP
    >>> a.text, context[a.start:a.end]                                           # doctest: +SKIP
    ('Ann Lee', 'Ann Lee')
    """
    model = hub.model
    if head not in getattr(model, "token_heads", {}):
        known = sorted(getattr(model, "token_heads", {}))
        raise KeyError(
            f"the model has no token head {head!r} (token heads: {known}); fine-tune one with "
            "--task extractive_qa or register_token_head(name, 2)"
        )
    if model.token_heads[head].num_classes != 2:
        raise ValueError(f"token head {head!r} has {model.token_heads[head].num_classes} labels; a QA head has 2")
    if not isinstance(max_answer_tokens, int) or max_answer_tokens < 1:
        raise ValueError(f"max_answer_tokens must be a positive int, got {max_answer_tokens!r}")
    encode = hub.tokenizer.encode
    question_ids = encode(question)
    context_ids, spans = tokenize_with_offsets(encode, context)
    if not context_ids:
        raise ValueError(f"the context has no words to answer from: {context!r}")
    windows = make_windows(
        question_ids,
        context_ids,
        max_positions=hub.max_positions(),
        stride=stride,
        max_question_tokens=max_question_tokens,
    )
    dictionary = hub.dictionary
    layout = pair_layout(model.cfg)
    device = model.device

    best = (float("-inf"), -1, -1)  # (score, first token, last token) over the whole context
    null_score = float("inf")
    with model.inference():
        for begin in range(0, len(windows), batch_size):
            chunk = windows[begin : begin + batch_size]
            batch = collate_windows(
                chunk, bos=dictionary.bos(), eos=dictionary.eos(), pad=dictionary.pad(), layout=layout
            )
            segments = None if batch.segment_labels is None else batch.segment_labels.to(device)
            features = model.features(batch.tokens.to(device), segment_labels=segments).last_hidden_state
            logits = model.tag(head, features).float().cpu()  # (B, T, 2)
            for row, (window, offset) in enumerate(zip(chunk, batch.context_offsets)):
                null_score = min(null_score, float(logits[row, 0, 0] + logits[row, 0, 1]))
                span = logits[row, offset : offset + len(window.context)]  # (L, 2)
                score, i, j = best_span(span[:, 0], span[:, 1], max_answer_tokens)
                if score > best[0]:
                    best = (score, window.context_start + i, window.context_start + j)

    score, first, last = best
    if first < 0 or score <= null_score + null_threshold:
        return Answer("", None, None, null_score, null_score)
    start, end = spans[first][0], spans[last][1]
    return Answer(context[start:end], start, end, score, null_score)


def load_tokenizer(
    data_dir: str | os.PathLike[str], *, encoder_json: str | None = None, vocab_bpe: str | None = None
) -> Tokenizer:
    """The tokenizer a QA data directory provides, chosen by the tokenizer registry as a
    checkpoint folder's is: the files named (``encoder_json``/``vocab_bpe``: GPT-2 BPE), else
    those the directory holds (``encoder.json`` + ``vocab.bpe``, ``vocab.txt``,
    ``spiece.model``, ...), over the directory's ``dict.txt`` with ``<mask>`` appended, as the
    hub and the pretraining tasks index it.

    >>> load_tokenizer("squad-bin").encode("Who?")  # doctest: +SKIP
    [12375, 116]
    """
    from ..tokenizers.dictionary import Dictionary
    from ..tokenizers.registry import TokenizerFiles, kind_for_folder

    folder = Path(data_dir)
    if (encoder_json is None) != (vocab_bpe is None):  # one named: the other is the folder's
        encoder_json = encoder_json or str(folder / "encoder.json")
        vocab_bpe = vocab_bpe or str(folder / "vocab.bpe")
    dictionary = Dictionary.load(folder / "dict.txt")
    dictionary.add_symbol("<mask>")
    files = TokenizerFiles(gpt2_encoder_json=encoder_json, gpt2_vocab_bpe=vocab_bpe)
    return kind_for_folder(folder, files, default="gpt2").for_fairseq(folder, dictionary, files)


def prepare_windows(
    examples: Iterable[QAExample],
    encode: Callable[[str], list[int]],
    *,
    max_positions: int,
    stride: int | None = None,
    max_question_tokens: int = DEFAULT_MAX_QUESTION_TOKENS,
) -> list[QAWindow]:
    """Training windows of many examples (``QAWindow.example`` says which)."""
    return [
        window
        for n, example in enumerate(examples)
        for window in example_windows(
            example,
            encode,
            max_positions=max_positions,
            stride=stride,
            max_question_tokens=max_question_tokens,
            index=n,
        )
    ]


__all__ = [
    "Answer",
    "PairLayout",
    "DEFAULT_HEAD",
    "QABatch",
    "QAExample",
    "QALoss",
    "QAWindow",
    "answer",
    "answer_token_span",
    "best_span",
    "collate_windows",
    "example_windows",
    "load_examples",
    "load_tokenizer",
    "make_windows",
    "pair_layout",
    "parse_examples",
    "prepare_windows",
    "qa_loss",
    "tokenize_with_offsets",
]
