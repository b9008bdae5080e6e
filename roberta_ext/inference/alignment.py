"""Features of words instead of sub-word tokens: fairseq's ``extract_features_aligned_to_words``
without spaCy, for any text.

fairseq's version (``fairseq/models/roberta/alignment_utils.py``) splits the sentence with
spaCy, decodes every BPE token on its own and matches the strings. That needs spaCy, and it
fails — an ``AssertionError`` or "Cannot align" — wherever a token's own text is not a piece
of the sentence: a curly quote or an emoji split across byte-level tokens (each half decodes
to U+FFFD; fairseq#3094, #1106, #3339), SentencePiece's normalization (``ﬁ`` -> ``fi``), an
unknown token, a word-start ``▁`` on its own (XLM-R: ``你好`` -> ``▁``, ``你好``), or a
whitespace token between words.

Here each token knows the characters of the sentence it came from (its *span*: exact byte
offsets for GPT-2 BPE and XLM-R's SentencePiece, a character match for WordPiece and ALBERT,
see :meth:`TokenizerKind.spans <roberta_ext.tokenizers.registry.TokenizerKind.spans>`), and
a token belongs to every word its span overlaps. Tokens that cover only whitespace (or
nothing) belong to the next word, or the last one at the end of the text.

Words (:func:`split_words`) are what fairseq's spaCy tokenizer mostly gives without its
English exceptions: the text is cut at whitespace and at every punctuation mark or symbol,
each of which is a word of its own; letters, digits and combining marks stay together, and a
character is never split from its combining marks or an emoji from its modifiers (Unicode's
grapheme clusters). Control and format characters only separate words. (spaCy keeps
``3.14`` and ``U.S.`` whole and splits ``don't`` into ``do``, ``n't``; here they are ``3 . 14``,
``U . S .`` and ``don ' t``.)

The features of a word are fairseq's: the sum of its tokens' features, a token shared by
``k`` words counting ``1/k`` in each, so that the rows sum to the tokens' features. Where
fairseq's functions work, the result is theirs (tests/test_alignment.py).

>>> split_words("“Don't panic!” 👍🏽")
[('“', 0, 1), ('Don', 1, 4), ("'", 4, 5), ('t', 5, 6), ('panic', 7, 12), ('!', 12, 13), ('”', 13, 14), ('👍🏽', 15, 17)]
>>> align_tokens_to_words([(0, 1), (1, 6), (6, 8), (8, 9)], [(0, 3), (4, 9)])  # token 2 is in both words
[[1, 2], [2, 3, 4]]
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import regex
import torch

from ..modeling import EncoderModel
from ..tokenizers.registry import kind_of
from .inputs import ModelInputs, extract_features

__all__ = [
    "WordFeatures",
    "align_features_to_words",
    "align_tokens_to_words",
    "extract_features_aligned_to_words",
    "split_words",
]

_GRAPHEME = regex.compile(r"\X")
_WORD_CHARACTER = ("L", "M", "N")  # Unicode categories (first letter) that make up words


def _grapheme_kind(grapheme: str) -> str:
    """``"space"`` (separates words), ``"word"`` (part of a run of letters and digits) or ``"mark"``
    (a punctuation mark, symbol or emoji: a word of its own)."""
    first = grapheme[0]
    category = unicodedata.category(first)
    if first.isspace() or category in ("Cc", "Cf", "Zl", "Zp", "Zs", "Cs"):
        return "space"
    if category[0] in _WORD_CHARACTER or first == "_":
        return "word"
    return "mark"


def split_words(text: str) -> list[tuple[str, int, int]]:
    """The words of ``text`` as ``(word, start, end)`` with ``text[start:end] == word``: runs of
    letters, digits and combining marks, and every punctuation mark, symbol or emoji on its own
    (each a whole grapheme cluster), separated by whitespace, control and format characters.

    >>> split_words("naïve, 3.14 🇯🇵\\u200b中文")
    [('naïve', 0, 5), (',', 5, 6), ('3', 7, 8), ('.', 8, 9), ('14', 9, 11), ('🇯🇵', 12, 14), ('中文', 15, 17)]
    >>> [word for word, _, _ in split_words("e\\u0301te\\u0301!")] == ["e\\u0301te\\u0301", "!"]  # marks stay
    True
    """
    words: list[tuple[str, int, int]] = []
    start, previous = 0, "space"
    for match in _GRAPHEME.finditer(text):
        kind = _grapheme_kind(match.group())
        if kind != "word" or previous != "word":  # a run of word characters goes on; anything else ends it
            if previous != "space":
                words.append((text[start : match.start()], start, match.start()))
            start = match.start()
        previous = kind
    if previous != "space":
        words.append((text[start:], start, len(text)))
    return words


def align_tokens_to_words(
    token_spans: Sequence[tuple[int, int]], word_spans: Sequence[tuple[int, int]]
) -> list[list[int]]:
    """For each word, the positions of its tokens, counted as in the encoded sentence (``<s>``
    is 0, so the first token is 1). A token belongs to every word its span overlaps; a token
    overlapping none (whitespace, a word-start ``▁``) to the next word, or the last at the end.
    Every word gets a token: one that overlaps none shares the token before it (or after it);
    only where there are no tokens at all (a tokenizer that dropped the whole text) is a word's
    list empty.

    >>> align_tokens_to_words([(0, 0), (0, 2), (2, 3), (3, 5)], [(0, 2), (2, 5)])
    [[1, 2], [3, 4]]
    """
    alignment: list[list[int]] = [[] for _ in word_spans]
    if not word_spans:
        return alignment
    first_word = 0  # words that end before a token starts are behind us
    for position, (start, end) in enumerate(token_spans, start=1):
        while first_word < len(word_spans) - 1 and word_spans[first_word][1] <= start:
            first_word += 1
        overlapping = []
        for w in range(first_word, len(word_spans)):
            if word_spans[w][0] >= end:  # this word and the ones after it start after the token
                break
            if start < word_spans[w][1]:
                overlapping.append(w)
        if not overlapping:  # whitespace or nothing: the word that follows, or the last one
            following = (w for w in range(first_word, len(word_spans)) if word_spans[w][0] >= start)
            overlapping = [next(following, len(word_spans) - 1)]
        for w in overlapping:
            alignment[w].append(position)
    for w, positions in enumerate(alignment):
        if not positions:  # a word no token came from (a tokenizer dropped it): its neighbour's token
            before = [p for tokens in alignment[:w] for p in tokens]
            after = [p for tokens in alignment[w + 1 :] for p in tokens]
            if before or after:
                positions.append(max(before) if before else min(after))
    return alignment


def align_features_to_words(features: torch.Tensor, alignment: Sequence[Sequence[int]]) -> torch.Tensor:
    """fairseq's ``align_features_to_words``: rows ``(<s>, word 1, ..., word W, </s>)`` from the
    token features ``(T, C)`` of ``<s> tokens </s>``. A word's row is the sum of its tokens'
    features, a token shared by ``k`` words counting ``1/k`` in each; the rows sum to the
    features' sum. Tokens after the last aligned one keep rows of their own (``</s>``); a word
    without tokens gets zeros.

    >>> features = torch.arange(10.0).reshape(5, 2)
    >>> align_features_to_words(features, [[1, 2], [2, 3]])
    tensor([[0.0000, 1.0000],
            [4.0000, 5.5000],
            [8.0000, 9.5000],
            [8.0000, 9.0000]])
    """
    if features.dim() != 2:
        raise ValueError(f"align_features_to_words takes features (T, C), got shape {tuple(features.shape)}")
    counts = Counter(j for positions in alignment for j in positions)
    if counts[0]:
        raise ValueError("<s> (position 0) cannot belong to a word")
    shares = features.new_tensor([counts.get(j, 1) for j in range(len(features))])
    weighted = features / shares.unsqueeze(-1)
    rows = [weighted[0]]
    for positions in alignment:
        rows.append(weighted[list(positions)].sum(dim=0))  # zeros for a word without tokens
    last = max((j for positions in alignment for j in positions), default=len(features) - 2)
    rows.extend(weighted[j] for j in range(last + 1, len(features)))
    return torch.stack(rows)


@dataclass
class WordFeatures:
    """What :func:`extract_features_aligned_to_words` returns: row ``i`` of ``features`` belongs
    to ``words[i]``, which starts with ``<s>`` and ends with ``</s>`` (fairseq's spaCy ``Doc``
    has the same tokens, with ``doc[i].vector`` as row ``i``)."""

    words: list[str]
    """``<s>``, the words of the sentence, ``</s>``."""
    spans: list[tuple[int, int]]
    """Where each word is in the sentence (``<s>`` at ``(0, 0)``, ``</s>`` at its end)."""
    features: torch.Tensor | list[torch.Tensor]
    """``(W + 2, C)``; with ``return_all_hiddens`` one such tensor per layer, embeddings first."""
    alignment: list[list[int]]
    """The positions in ``tokens`` of each word's sub-word tokens (``<s>`` is position 0)."""
    tokens: torch.Tensor
    """The encoded sentence ``(T,)``."""

    def __len__(self) -> int:
        return len(self.words)

    def vector(self, index: int) -> torch.Tensor:
        """Row ``index`` of ``features`` (of its last tensor, with ``return_all_hiddens``): the
        features of ``words[index]``, as spaCy's ``doc[index].vector`` in fairseq's method."""
        features = self.features[-1] if isinstance(self.features, list) else self.features
        return features[index]


def extract_features_aligned_to_words(
    model: EncoderModel, inputs: ModelInputs, sentence: str, *, return_all_hiddens: bool = False
) -> WordFeatures:
    """``hub.extract_features_aligned_to_words(sentence)`` as a function of a model and its
    inputs: the words of ``sentence`` (:func:`split_words`), its tokens aligned to them
    (:func:`align_tokens_to_words` over the tokenizer kind's spans) and the summed features
    (:func:`align_features_to_words`)."""
    tokens = torch.tensor(inputs.encode(sentence))
    token_spans = kind_of(inputs.tokenizer).spans(inputs.tokenizer, sentence)
    if len(token_spans) != len(tokens) - 2:
        raise RuntimeError(
            f"the tokenizer gave {len(token_spans)} token spans for {len(tokens) - 2} tokens of {sentence!r}"
        )
    words = split_words(sentence)
    alignment = align_tokens_to_words(token_spans, [(start, end) for _, start, end in words])
    hidden = extract_features(model, inputs, tokens, return_all_hiddens=return_all_hiddens)
    aligned = []
    for layer in hidden if isinstance(hidden, list) else [hidden]:
        features = layer.squeeze(0)  # (T, C)
        # A text without words (whitespace only) keeps the rows of <s> and </s> alone.
        aligned.append(align_features_to_words(features, alignment) if words else features[[0, -1]])
    return WordFeatures(
        words=["<s>", *(word for word, _, _ in words), "</s>"],
        spans=[(0, 0), *((start, end) for _, start, end in words), (len(sentence), len(sentence))],
        features=aligned if return_all_hiddens else aligned[0],
        alignment=alignment,
        tokens=tokens,
    )
