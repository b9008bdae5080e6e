"""Text -> model input, written once: what every feature and door uses to feed a model.

A :class:`ModelInputs` is built by the loader beside the model (``hub.inputs``) and holds the
tokenizer and the family's conventions: ``<s> a </s>`` for one text; for a pair RoBERTa's
``<s> a </s> </s> b </s>`` or the BERT family's ``[CLS] a [SEP] b [SEP]`` with segment ids;
truncation of pairs longest side first; words -> the index of each word's first sub-word;
padding into a batch. Features (embedding, export, alignment, QA, tagging, predict) take a
model and this object, never the hub, so they work the same under every door. An input longer
than the model takes is cut or refused by one rule (:meth:`ModelInputs.encode_within`), whichever
door it came through: :class:`InputTooLong` names it.

>>> from roberta_ext.inference.inputs import PairLayout
>>> layout = PairLayout(double_separator=True, segments=False)
>>> layout.join(0, 2, [10, 11], [20])
[0, 10, 11, 2, 2, 20, 2]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, overload

import torch

from ..data.batching import collate
from ..errors import RobertaExtError
from ..families import get_family
from ..modeling import EncoderModel
from ..tokenizers.dictionary import Dictionary
from ..tokenizers.registry import Tokenizer

__all__ = [
    "InputError",
    "InputTooLong",
    "ModelInputs",
    "PairLayout",
    "ServedModel",
    "TextInput",
    "check_length",
    "extract_features",
    "extract_features_long",
    "pair_layout",
    "truncate_longest_first",
    "word_pieces",
]

TextInput = str | Sequence[str]
"""A text, or a pair of texts (a tuple or list of two)."""


class InputError(RobertaExtError, ValueError):
    """A text the model cannot take as it is (too long, or without the one mask fill-mask needs):
    the message names the input (:attr:`where`, as the caller calls it: ``masked_input``,
    ``inputs[3]``) and what is wrong. The inference layer's error about inputs; a ``ValueError``
    too, as these checks always raised."""

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.where = where


class InputTooLong(InputError):
    """An input longer than the model takes (or the length asked for), where cutting it was not asked.

    >>> str(InputTooLong("inputs[1]", 83, 64, hint="set truncate to cut it"))
    'inputs[1] is 83 tokens long, more than the maximum of 64 (set truncate to cut it)'
    """

    def __init__(self, where: str, length: int, limit: int, *, hint: str | None = None) -> None:
        told = f" ({hint})" if hint else ""
        super().__init__(f"{where} is {length} tokens long, more than the maximum of {limit}{told}", where=where)
        self.length = length
        self.limit = limit


def check_length(ids: list[int], limit: int, *, where: str = "input", hint: str | None = None) -> list[int]:
    """``ids`` if there are at most ``limit`` of them, else :class:`InputTooLong` naming ``where``
    (``hint``: how the caller may cut it).

    >>> check_length([0, 5, 2], 3)
    [0, 5, 2]
    """
    if len(ids) > limit:
        raise InputTooLong(where, len(ids), limit, hint=hint)
    return ids


@dataclass(frozen=True)
class PairLayout:
    """How a family joins two texts into one row."""

    double_separator: bool
    """RoBERTa's ``</s> </s>`` between the two (fairseq's pairs); one ``[SEP]`` for the BERT family."""
    segments: bool
    """Segment ids 0 (first text) and 1 (second) for models with segment embeddings."""

    def separator(self, eos: int) -> list[int]:
        """What stands between the two texts' ids (the first text's own ``</s>`` included)."""
        return [eos, eos] if self.double_separator else [eos]

    def join(self, bos: int, eos: int, first: Sequence[int], second: Sequence[int] | None = None) -> list[int]:
        """``<s> first </s>``, or with ``second`` the pair in this layout.

        >>> PairLayout(double_separator=False, segments=True).join(101, 102, [7], [8, 9])
        [101, 7, 102, 8, 9, 102]
        """
        if second is None:
            return [bos, *first, eos]
        return [bos, *first, *self.separator(eos), *second, eos]


def pair_layout(cfg: Any) -> PairLayout:
    """The pair layout of a model config: a doubled separator where the family joins pairs so
    (RoBERTa), segment ids when the model has (at least two) segment embeddings.

    >>> from roberta_ext.families import preset
    >>> pair_layout(preset("tiny")), pair_layout(preset("bert-tiny"))
    (PairLayout(double_separator=True, segments=False), PairLayout(double_separator=False, segments=True))
    """
    return PairLayout(
        double_separator=get_family(getattr(cfg, "family", "roberta")).double_separator,
        segments=getattr(cfg, "type_vocab_size", 0) >= 2,
    )


def truncate_longest_first(first: list[int], second: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Cut a pair to at most ``budget`` ids together, as transformers' tokenizers'
    ``truncation="longest_first"``: the longer side gives way first; when both must be cut,
    each keeps half (the longer, or on a tie the second, keeps the odd one).

    >>> truncate_longest_first([1, 2, 3, 4, 5, 6], [7, 8], 6)
    ([1, 2, 3, 4], [7, 8])
    >>> [len(side) for side in truncate_longest_first([0] * 9, [0] * 7, 5)]
    [3, 2]
    """
    if len(first) + len(second) <= budget:
        return first, second
    short, long = sorted((len(first), len(second)))
    # The tokenizers library's arithmetic (tokenizers/src/utils/truncation.rs), n1 <= n2.
    keep_long = short if short > budget else max(short, budget - short)
    keep_short = short
    if keep_short + keep_long > budget:
        keep_short = budget // 2
        keep_long = keep_short + budget % 2
    if len(first) > len(second):
        return first[:keep_long], second[:keep_short]
    return first[:keep_short], second[:keep_long]


def word_pieces(words: Sequence[str], encode_word: Callable[..., list[Any]], unk: Any) -> tuple[list[Any], list[int]]:
    """The sub-words of ``words`` back to back and the position of each word's first one: the
    rule token tagging trains and predicts with (a word is labelled by its first sub-word; a
    word the tokenizer gives nothing for becomes ``unk``). ``encode_word(word, first=...)``
    tokenizes one word (``first``: it starts the text, so GPT-2 BPE adds no leading space);
    the pieces are indices for a model or token strings for ``fairseq-preprocess``.

    >>> word_pieces(["ab", "", "c"], lambda w, first: list(w), "<unk>")
    (['a', 'b', '<unk>', 'c'], [0, 2, 3])
    """
    pieces: list[Any] = []
    firsts = []
    for i, word in enumerate(words):
        firsts.append(len(pieces))
        pieces.extend(encode_word(word, first=i == 0) or [unk])
    return pieces, firsts


@dataclass(frozen=True, eq=False)
class ModelInputs:
    """Text -> input of one model: its tokenizer, its family's pair layout and its length limit.

    >>> inputs = hub.inputs                                           # doctest: +SKIP
    >>> inputs.encode("Hello", "world")                               # doctest: +SKIP
    [0, 31414, 2, 2, 8331, 2]
    >>> tokens, lengths = inputs.collate([inputs.encode("Hi"), inputs.encode("Hello world")])  # doctest: +SKIP
    """

    tokenizer: Tokenizer
    """Text <-> dictionary indices, without specials (``encode``, ``decode``, ``encode_word``)."""
    layout: PairLayout
    max_positions: int
    """Longest row the model accepts, ``<s>`` and ``</s>`` included."""

    @classmethod
    def for_model(cls, model: EncoderModel, tokenizer: Tokenizer) -> ModelInputs:
        """The inputs of ``model`` over ``tokenizer``."""
        return cls(tokenizer=tokenizer, layout=pair_layout(model.cfg), max_positions=model.max_positions())

    @property
    def dictionary(self) -> Dictionary:
        return self.tokenizer.dictionary

    def encode(self, sentence: str, *addl_sentences: str, no_separator: bool | None = None) -> list[int]:
        """Indices of ``<s> a </s>``, a pair in the family's layout, or more texts joined the
        same way (fairseq's ``encode``); ``no_separator=True`` puts one ``</s>`` between texts
        where RoBERTa puts two, ``False`` two where the BERT family puts one."""
        double = self.layout.double_separator if no_separator is None else not no_separator
        eos = self.dictionary.eos()
        ids = [self.dictionary.bos(), *self.tokenizer.encode(sentence), eos]
        for extra in addl_sentences:
            if double:
                ids.append(eos)
            ids.extend(self.tokenizer.encode(extra))
            ids.append(eos)
        return ids

    def decode(self, ids: Sequence[int]) -> str | list[str]:
        """Indices back to text (fairseq's ``decode``): a leading ``<s>`` dropped; sentences
        separated by ``</s> </s>`` (a document break) come back as a list."""
        if ids and ids[0] == self.dictionary.bos():
            ids = ids[1:]
        eos = self.dictionary.eos()
        # A document break is two </s> in a row; the second starts the next sentence.
        sentences, start = [], 0
        for i in range(len(ids) - 1):
            if ids[i] == eos and ids[i + 1] == eos:
                sentences.append(ids[start : i + 1])
                start = i + 1
        sentences.append(ids[start:])
        texts = [self.tokenizer.decode(list(s)) for s in sentences]
        return texts[0] if len(texts) == 1 else texts

    def encode_truncated(self, item: TextInput, max_length: int) -> list[int]:
        """Indices of a text or pair cut to ``max_length`` in all, specials counted: a single
        text loses its end, a pair its longest side first (transformers' ``longest_first``, as
        sentence-transformers truncates)."""
        texts = (item,) if isinstance(item, str) else tuple(item)
        if len(texts) not in (1, 2) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"expected a text or a pair of texts, got {item!r}")
        bos, eos = self.dictionary.bos(), self.dictionary.eos()
        first = self.tokenizer.encode(texts[0])
        if len(texts) == 1:
            return self.layout.join(bos, eos, first[: max(0, max_length - 2)])
        budget = max(0, max_length - 2 - len(self.layout.separator(eos)))
        first, second = truncate_longest_first(first, self.tokenizer.encode(texts[1]), budget)
        return self.layout.join(bos, eos, first, second)

    def encode_within(
        self,
        item: TextInput,
        max_length: int | None = None,
        *,
        truncate: bool,
        where: str = "input",
        hint: str | None = None,
    ) -> list[int]:
        """Indices of a text or pair of at most ``max_length`` (default: :attr:`max_positions`),
        by the one rule every door follows: cut as :meth:`encode_truncated` cuts when
        ``truncate``, else :class:`InputTooLong` naming ``where`` (``hint``: how to cut it).

        >>> hub.inputs.encode_within("word " * 600, truncate=False, where="inputs[2]")  # doctest: +SKIP
        Traceback (most recent call last):
        roberta_ext.inference.inputs.InputTooLong: inputs[2] is 602 tokens long, more than the maximum of 512
        """
        limit = self.max_positions if max_length is None else max_length
        ids = self.encode_truncated(item, limit if truncate else sys.maxsize)
        return check_length(ids, limit, where=where, hint=hint)

    def encode_words(self, words: Sequence[str]) -> tuple[list[int], list[int]]:
        """``<s>``, the sub-words of ``words``, ``</s>``, and the position of each word's first
        sub-word in that row (:func:`word_pieces`: the positions a token head labels words at)."""
        pieces, firsts = word_pieces(words, self.tokenizer.encode_word, self.dictionary.unk())
        return [self.dictionary.bos(), *pieces, self.dictionary.eos()], [1 + i for i in firsts]

    def collate(self, rows: Sequence[Sequence[int] | torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad rows into ``(tokens (B, T), lengths (B,))`` with this dictionary's ``<pad>``."""
        return collate(rows, self.dictionary.pad())

    def segments(self, tokens: torch.Tensor) -> torch.Tensor:
        """BERT's segment (token-type) ids of encoded rows: 0 up to and including the first
        ``</s>``/``[SEP]``, 1 after it; 0 on padding."""
        is_sep = tokens.eq(self.dictionary.eos()).long()
        before = torch.cumsum(is_sep, dim=-1) - is_sep  # separators strictly before each position
        return (before.gt(0) & tokens.ne(self.dictionary.pad())).long()

    def segment_labels(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """What the model's ``segment_labels`` takes: :meth:`segments` for models with segment
        embeddings, else ``None``."""
        return self.segments(tokens) if self.layout.segments else None


@overload
def extract_features(
    model: EncoderModel, inputs: ModelInputs, tokens: torch.Tensor, *, return_all_hiddens: Literal[False] = False
) -> torch.Tensor: ...
@overload
def extract_features(
    model: EncoderModel, inputs: ModelInputs, tokens: torch.Tensor, *, return_all_hiddens: Literal[True]
) -> list[torch.Tensor]: ...
@overload
def extract_features(
    model: EncoderModel, inputs: ModelInputs, tokens: torch.Tensor, *, return_all_hiddens: bool
) -> torch.Tensor | list[torch.Tensor]: ...
def extract_features(
    model: EncoderModel, inputs: ModelInputs, tokens: torch.Tensor, *, return_all_hiddens: bool = False
) -> torch.Tensor | list[torch.Tensor]:
    """Features ``(B, T, C)`` of encoded rows ``(T,)`` or ``(B, T)`` (with
    ``return_all_hiddens``: the embeddings and every layer's output), segment ids computed from
    the rows; ``ValueError`` beyond ``inputs.max_positions``.

    >>> extract_features(hub.model, hub.inputs, hub.inputs.collate([[0, 5, 2]])[0]).shape  # doctest: +SKIP
    torch.Size([1, 3, 768])
    """
    if tokens.dim() == 1:
        tokens = tokens.unsqueeze(0)
    if tokens.size(-1) > inputs.max_positions:
        raise ValueError(f"tokens exceeds maximum length: {tokens.size(-1)} > {inputs.max_positions}")
    tokens = tokens.to(device=model.device)
    out = model.features(tokens, segment_labels=inputs.segment_labels(tokens), return_all_hiddens=return_all_hiddens)
    return list(out.hidden_states) if out.hidden_states is not None else out.last_hidden_state


def extract_features_long(
    model: EncoderModel, inputs: ModelInputs, tokens: torch.Tensor, *, stride: int | None = None
) -> torch.Tensor:
    """Features ``(1, T, C)`` of one encoded row of any length, by sliding windows.

    Each window holds ``max_positions - 2`` content tokens between its own ``<s>`` and ``</s>``;
    consecutive windows start ``stride`` tokens apart (default: half a window), and each token
    takes its features from the window in which it sits furthest from an edge. A row that fits
    is computed in one pass, identically to :func:`extract_features`.

    >>> extract_features_long(hub.model, hub.inputs, hub.encode("word " * 2000)).shape  # doctest: +SKIP
    torch.Size([1, 2002, 1024])
    """
    if tokens.dim() == 2 and tokens.size(0) == 1:
        tokens = tokens[0]
    if tokens.dim() != 1:
        raise ValueError(f"extract_features_long takes one sequence (T,), got shape {tuple(tokens.shape)}")
    limit = inputs.max_positions
    if tokens.numel() <= limit:
        return extract_features(model, inputs, tokens)
    bos, eos = inputs.dictionary.bos(), inputs.dictionary.eos()
    has_bos, has_eos = int(tokens[0]) == bos, int(tokens[-1]) == eos
    content = tokens[int(has_bos) : tokens.numel() - int(has_eos)]
    window = limit - 2
    stride = stride or window // 2
    if not 0 < stride <= window:
        raise ValueError(f"stride must be in 1..{window}, got {stride}")
    starts = list(range(0, max(content.numel() - window, 0) + 1, stride))
    if starts[-1] + window < content.numel():
        starts.append(content.numel() - window)
    rows = [torch.cat([tokens.new_tensor([bos]), content[s : s + window], tokens.new_tensor([eos])]) for s in starts]
    features = extract_features(model, inputs, torch.stack(rows))  # (W, window + 2, C)

    out = features.new_empty(content.numel(), features.size(-1))
    best = torch.full((content.numel(),), -1, dtype=torch.long)
    for w, start in enumerate(starts):
        positions = torch.arange(start, start + window)
        distance = torch.minimum(positions - start, start + window - 1 - positions)  # to the window's edge
        take = distance > best[positions]
        out[positions[take]] = features[w, 1:-1][take]
        best[positions[take]] = distance[take]
    pieces = [features[0, :1]] if has_bos else []
    pieces.append(out)
    if has_eos:
        pieces.append(features[-1, -1:])
    return torch.cat(pieces).unsqueeze(0)


class ServedModel(Protocol):
    """The three things a feature that serves a whole model reads (export, the server): the
    model, its inputs and how it pools sentence embeddings. A hub is one; features never
    import the hub's class."""

    model: EncoderModel
    inputs: ModelInputs
    sentence_embedding: Any
    """A :class:`~roberta_ext.embedding.pooling.SentenceEmbedding`."""
