"""What a model's heads say about text: class scores, multiple-choice scores, word tags and
mask fillings, each over a model and its :class:`~roberta_ext.inference.inputs.ModelInputs`.

The hub's ``predict``, ``score_choices``, ``tag`` and ``fill_mask`` are these functions with the
hub's own model and inputs; the server and the command line call them the same way. Fill-mask's
input is checked in one place, :func:`encode_masked` (the mask's spellings, exactly one mask,
the length), for the hub and the server alike.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from ..data.batching import length_batches
from ..errors import RobertaExtError
from ..modeling import EncoderModel
from .inputs import InputError, ModelInputs, check_length, extract_features

__all__ = [
    "HeadError",
    "MaskedText",
    "check_lm_head",
    "classify",
    "classify_rows",
    "encode_masked",
    "fill_encoded_mask",
    "fill_mask",
    "replaced_token_probs",
    "score_choices",
    "tag",
]


class HeadError(RobertaExtError, ValueError):
    """The model lacks the head a job needs (no such head, none at all: not a fine-tuned model),
    or has several and none was named; the message names the heads it has. A ``ValueError``
    too, as the ``CorpusError`` it replaces was."""


def classify(
    model: EncoderModel, inputs: ModelInputs, head: str, tokens: torch.Tensor, *, return_logits: bool = False
) -> torch.Tensor:
    """Log-probabilities ``(B, num_classes)`` (or logits) of the classification head ``head``
    for encoded rows ``(T,)`` or ``(B, T)``.

    >>> classify(hub.model, hub.inputs, "mnli", hub.encode("A man sleeps.", "A man is awake."))  # doctest: +SKIP
    tensor([[-0.0459, -3.5810, -4.4120]])
    """
    if head not in model.classification_heads:
        raise KeyError(f"no classification head named {head!r}; registered heads: {sorted(model.classification_heads)}")
    if tokens.dim() == 1:
        tokens = tokens.unsqueeze(0)
    features = extract_features(model, inputs, tokens)
    logits = model.classify(head, features, padding_mask=tokens.eq(inputs.dictionary.pad()).to(features.device))
    return logits if return_logits else F.log_softmax(logits, dim=-1)


def classify_rows(
    model: EncoderModel,
    inputs: ModelInputs,
    head: str,
    rows: Sequence[Sequence[int]],
    *,
    max_tokens: int,
    batch_size: int | None = None,
    progress: Callable[[int], object] | None = None,
) -> torch.Tensor:
    """Logits ``(N, num_classes)`` float32 on the CPU of N encoded rows, in their order: sorted by
    length into batches of at most ``max_tokens`` padded tokens (and ``batch_size`` rows) with
    :func:`~roberta_ext.data.batching.length_batches`, so a row's logits never depend on its
    batch-mates; ``progress(n)`` after each batch of ``n`` rows. What ``roberta-ext predict`` and
    the server's ``/predict`` run.

    >>> classify_rows(hub.model, hub.inputs, "mnli", [hub.inputs.encode("A", "B")], max_tokens=4096)  # doctest: +SKIP
    tensor([[ 2.1, -0.3, -1.9]])
    """
    logits = torch.empty(len(rows), model.num_classes(head))
    with torch.inference_mode():
        for batch in length_batches([len(row) for row in rows], max_tokens=max_tokens, batch_size=batch_size):
            tokens, _ = inputs.collate([rows[i] for i in batch])  # (B, T)
            logits[batch] = classify(model, inputs, head, tokens, return_logits=True).float().cpu()  # (B, C)
            if progress is not None:
                progress(len(batch))
    return logits


ChoiceLayout = Literal["multiple_choice", "commonsense_qa"]


def choice_rows(
    inputs: ModelInputs,
    context: str,
    choices: Sequence[str],
    *,
    layout: ChoiceLayout = "multiple_choice",
    max_choice_length: int | None = None,
    truncate: bool = False,
) -> list[list[int]]:
    """One row of indices per choice, as the multiple-choice fine-tuning tasks build them (see
    :func:`score_choices`)."""
    bos, eos = inputs.dictionary.bos(), inputs.dictionary.eos()
    if layout == "commonsense_qa":
        rows = [inputs.encode(context, choice, no_separator=True) for choice in choices]
    elif layout == "multiple_choice":
        # As sentence_ranking: --init-token before the choice, the choice cut to
        # --max-option-length, then --separator-token and the context, which already ends in </s>.
        separator = inputs.layout.separator(eos)[1:]  # the choice brings its own </s>
        context_ids = inputs.tokenizer.encode(context)
        rows = [
            [bos, *inputs.tokenizer.encode(choice), eos][:max_choice_length] + separator + context_ids + [eos]
            for choice in choices
        ]
    else:
        raise ValueError(f"layout must be 'multiple_choice' or 'commonsense_qa', got {layout!r}")
    return [row[: inputs.max_positions] for row in rows] if truncate else rows


@torch.no_grad()
def score_choices(
    model: EncoderModel,
    inputs: ModelInputs,
    context: str,
    choices: Sequence[str],
    head: str = "sentence_classification_head",
    *,
    layout: ChoiceLayout = "multiple_choice",
    max_choice_length: int | None = None,
    truncate: bool = False,
) -> torch.Tensor:
    """The logits ``(N,)`` of the one-output head ``head`` for each of the N ``choices``, in one
    batched pass without gradients; ``.argmax()`` is the predicted choice and ``.softmax(-1)`` the
    probabilities the multiple-choice loss trains.

    Each candidate is encoded as the fine-tuning task built it. ``layout="multiple_choice"``
    (``--task roberta_ext_multiple_choice``, fairseq's ``sentence_ranking``: RACE, SWAG): the
    choice first, then the context, ``<s> choice </s> </s> context </s>`` (the family's
    separator); ``max_choice_length`` is the task's ``--max-option-length`` (``<s>`` and ``</s>``
    of the choice included) and ``truncate=True`` its ``--shorten-method truncate`` at the model's
    maximum. ``layout="commonsense_qa"`` (``--task roberta_ext_commonsense_qa``): the context
    first, one ``</s>`` between, ``<s> Q: question </s> A: choice </s>`` — the caller writes the
    ``Q: ``/``A: `` prefixes; the result equals fairseq's CommonsenseQA snippet
    (``predict(head, encode('Q: ' + stem, 'A: ' + text, no_separator=True), return_logits=True)``
    per choice), in one pass instead of N.

    >>> score_choices(hub.model, hub.inputs, "The sun is hot.", ["Is it hot? yes", "Is it hot? no"])  # doctest: +SKIP
    tensor([ 2.1034, -1.8870])
    """
    if head not in model.classification_heads:
        raise KeyError(f"no classification head named {head!r}; registered heads: {sorted(model.classification_heads)}")
    outputs = model.classification_heads[head].num_classes
    if outputs != 1:
        raise ValueError(
            f"score_choices needs a head with one output (the multiple-choice tasks register num_classes=1); "
            f"{head!r} has {outputs}"
        )
    if not choices:
        raise ValueError("score_choices needs at least one choice")
    rows = choice_rows(inputs, context, choices, layout=layout, max_choice_length=max_choice_length, truncate=truncate)
    tokens, _ = inputs.collate(rows)  # (N, T)
    return classify(model, inputs, head, tokens, return_logits=True)[:, 0]


def tag(
    model: EncoderModel, inputs: ModelInputs, labels: Sequence[str] | None, sentence: str, head: str = "tagger"
) -> list[tuple[str, str, float]]:
    """Label every word of ``sentence`` with the token head ``head``: ``[(word, label,
    probability), ...]``. Words are split on whitespace and each is labelled by its first
    sub-word (:meth:`~roberta_ext.inference.inputs.ModelInputs.encode_words`), as the tagging
    fine-tuning task trains it; ``labels`` names the head's classes.

    >>> tag(hub.model, hub.inputs, hub.labels, "Ada Lovelace was born in London")  # doctest: +SKIP
    [('Ada', 'B-PER', 0.98), ('Lovelace', 'I-PER', 0.97), ('was', 'O', 0.99), ...]
    """
    if head not in model.token_heads:
        raise KeyError(f"no token head named {head!r}; registered token heads: {sorted(model.token_heads)}")
    if labels is None:
        raise ValueError("no label names: load with data_name_or_path pointing at a folder with label/dict.txt")
    words = sentence.split()
    if not words:
        return []
    ids, firsts = inputs.encode_words(words)
    if len(ids) > inputs.max_positions:
        raise ValueError(f"sentence is {len(ids)} tokens long, more than the model's {inputs.max_positions}")
    tokens = torch.tensor([ids], device=model.device)
    with torch.no_grad():
        logits = model.tag(head, extract_features(model, inputs, tokens))  # (1, T, labels)
    probs, best = logits[0, firsts].float().softmax(dim=-1).max(dim=-1)
    return [(word, labels[k], p) for word, k, p in zip(words, best.tolist(), probs.tolist())]


def check_lm_head(model: EncoderModel) -> None:
    """:class:`HeadError` unless ``model`` has a masked-LM head to fill masks with.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import RobertaModel
    >>> check_lm_head(RobertaModel(preset("tiny")))
    """
    if not model.has_lm_head:
        raise HeadError("this checkpoint has no masked-LM head (it was saved without one), so it cannot fill masks")


@dataclass(frozen=True)
class MaskedText:
    """A text ready to fill (:func:`encode_masked`): the mask spelt ``mask``, and its indices."""

    text: str
    mask: str
    ids: list[int]
    """``<s> left <mask> right </s>``."""


def encode_masked(
    inputs: ModelInputs,
    masked_input: str,
    *,
    mask: str,
    spellings: Sequence[str] = (),
    where: str = "masked_input",
) -> MaskedText:
    """The one check of a fill-mask input: every one of ``spellings`` (BERT's ``[MASK]`` beside
    ``<mask>``) read as ``mask``, exactly one mask (else :class:`~roberta_ext.inference.inputs.
    InputError`), at most ``inputs.max_positions`` tokens (else :class:`~roberta_ext.inference.
    inputs.InputTooLong`); both name the input as ``where``.

    >>> encode_masked(hub.inputs, "Hello [MASK]!", mask="<mask>", spellings=["[MASK]"]).text  # doctest: +SKIP
    'Hello <mask>!'
    """
    for spelling in spellings:
        if spelling != mask:
            masked_input = masked_input.replace(spelling, mask)
    count = masked_input.count(mask)
    if count != 1:
        named = " or ".join(dict.fromkeys((mask, *spellings)))
        raise InputError(f"{where} must hold exactly one {named}, got {count}", where=where)
    dictionary = inputs.dictionary
    # Each side is encoded with trailing spaces stripped: the space before <mask> belongs
    # to the predicted token (" 1977"), exactly as fairseq does it.
    left, right = (inputs.tokenizer.encode(span.rstrip()) for span in masked_input.split(mask))
    ids = [dictionary.bos(), *left, dictionary.index(mask), *right, dictionary.eos()]
    return MaskedText(masked_input, mask, check_length(ids, inputs.max_positions, where=where))


def fill_encoded_mask(
    model: EncoderModel, inputs: ModelInputs, masked: MaskedText, *, topk: int = 5
) -> list[tuple[str, float, str]]:
    """:func:`fill_mask` of a text :func:`encode_masked` has checked and encoded.

    >>> masked = encode_masked(hub.inputs, "Hi <mask>", mask="<mask>")              # doctest: +SKIP
    >>> fill_encoded_mask(hub.model, hub.inputs, masked)                          # doctest: +SKIP
    [('Hi there', 0.31, ' there'), ...]
    """
    check_lm_head(model)
    mask_index = inputs.dictionary.index(masked.mask)
    tokens = torch.tensor([masked.ids], dtype=torch.long, device=model.device)
    with model.inference():
        logits = model.lm_logits(extract_features(model, inputs, tokens), tokens.eq(mask_index))  # (1, V)
    probs, indices = logits[0].softmax(dim=-1).topk(k=topk)
    target = f" {masked.mask}" if f" {masked.mask}" in masked.text else masked.mask
    results = []
    for prob, index in zip(probs.tolist(), indices.tolist()):
        predicted = inputs.tokenizer.token_text(index)
        results.append((masked.text.replace(target, predicted), prob, predicted))
    return results


def fill_mask(
    model: EncoderModel,
    inputs: ModelInputs,
    masked_input: str,
    *,
    mask: str,
    topk: int = 5,
    spellings: Sequence[str] = (),
) -> list[tuple[str, float, str]]:
    """The ``topk`` fillings of the single ``mask`` in ``masked_input`` (written as ``mask`` or
    any of ``spellings``), as ``(filled sentence, probability, token)``, most probable first;
    every probability paired with its own token (fairseq's hub drops special symbols from the
    list and then mis-pairs the rest). The input is checked by :func:`encode_masked`.

    >>> fill_mask(hub.model, hub.inputs, "Star wars came out in <mask>", mask="<mask>", topk=1)  # doctest: +SKIP
    [('Star wars came out in 1977', 0.95, ' 1977')]
    """
    check_lm_head(model)
    masked = encode_masked(inputs, masked_input, mask=mask, spellings=spellings)
    return fill_encoded_mask(model, inputs, masked, topk=topk)


def replaced_token_probs(model: EncoderModel, inputs: ModelInputs, tokens: torch.Tensor) -> list[tuple[str, float]]:
    """ELECTRA's "real or fake" for one encoded row ``(T,)``: each token's text and the
    discriminator's probability that it was replaced, ``<s>``/``</s>`` left out.

    >>> replaced_token_probs(electra.model, electra.inputs, electra.encode("the chef ate the meal"))  # doctest: +SKIP
    [(' the', 0.01), (' chef', 0.02), (' ate', 0.91), (' the', 0.01), (' meal', 0.03)]
    """
    from ..families.electra import replaced_token_probs as discriminate

    if tokens.dim() != 1:
        raise ValueError(f"replaced_token_probs takes one sentence, got tokens of shape {tuple(tokens.shape)}")
    tokens = tokens.to(model.device)
    with torch.no_grad():
        probs = discriminate(model, tokens[None], inputs.segment_labels(tokens[None]))[0]
    dictionary = inputs.dictionary
    specials = {dictionary.bos(), dictionary.eos(), dictionary.pad()}
    return [(inputs.tokenizer.token_text(i), p) for i, p in zip(tokens.tolist(), probs.tolist()) if i not in specials]
