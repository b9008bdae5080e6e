"""Learn a GPT-2-format byte-level BPE (``encoder.json`` + ``vocab.bpe``) from text.

For users without OpenAI's GPT-2 files, and for machines that cannot download them. The
result is read by :class:`~roberta_ext.tokenizers.gpt2_bpe.GPT2BPE` and by fairseq's own
``gpt2`` BPE alike: the first 256 ids are the bytes (in ``bytes_to_unicode`` order, as in
GPT-2's file), then one id per merge in the order learned, then ``<|endoftext|>``.

Training is the classic algorithm on word counts: split text with GPT-2's pattern, count
distinct words, then repeatedly merge the most frequent adjacent pair (ties broken by the
pair itself, so results are reproducible), updating only the words that contain it.
"""

from __future__ import annotations

import heapq
import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable

import regex
from tqdm import tqdm

from ..atomic import write_text_atomic
from .gpt2_bpe import GPT2_SPLIT_PATTERN, bytes_to_unicode

END_OF_TEXT = "<|endoftext|>"


def count_words(texts: Iterable[str]) -> Counter[str]:
    """Distinct pre-tokenised words of ``texts`` (as byte-level strings) with their counts.

    >>> count_words(["hi hi"]) == Counter({"hi": 1, "Ġhi": 1})
    True
    """
    byte_encoder = bytes_to_unicode()
    table = [byte_encoder[b] for b in range(256)]
    split = regex.compile(GPT2_SPLIT_PATTERN)
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(split.findall(text))
    return Counter({"".join(table[b] for b in w.encode("utf-8")): n for w, n in counts.items()})


def train_bpe(
    word_counts: Counter[str], num_merges: int, *, min_frequency: int = 2, progress: bool = False
) -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Learn up to ``num_merges`` merges from byte-level ``word_counts`` (see :func:`count_words`).

    Returns ``(encoder, merges)`` in GPT-2's format. Stops early when no pair occurs at least
    ``min_frequency`` times.

    >>> encoder, merges = train_bpe(count_words(["low lower lowest"] * 3), num_merges=2)
    >>> merges
    [('l', 'o'), ('lo', 'w')]
    >>> encoder["low"]
    257
    """
    words = [list(w) for w in word_counts]
    freqs = list(word_counts.values())
    pair_counts: Counter[tuple[str, str]] = Counter()
    where: defaultdict[tuple[str, str], set[int]] = defaultdict(set)
    for i, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += freqs[i]
            where[pair].add(i)
    # A max-heap of (-count, pair) with lazy deletion: stale entries are skipped on pop.
    heap = [(-n, pair) for pair, n in pair_counts.items()]
    heapq.heapify(heap)

    merges: list[tuple[str, str]] = []
    bar = tqdm(total=num_merges, desc="learning BPE merges", unit="merge", disable=not progress)
    while len(merges) < num_merges and heap:
        neg, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg:
            continue  # stale
        if -neg < min_frequency:
            break
        merges.append(pair)
        bar.update()
        merged = pair[0] + pair[1]
        changed: Counter[tuple[str, str]] = Counter()
        for i in where.pop(pair):
            symbols, n = words[i], freqs[i]
            for old in zip(symbols, symbols[1:]):
                changed[old] -= n
            words[i] = symbols = _apply_merge(symbols, pair, merged)
            for new in zip(symbols, symbols[1:]):
                changed[new] += n
                where[new].add(i)
        for p, delta in changed.items():
            if delta:
                pair_counts[p] += delta
                if pair_counts[p] > 0:
                    heapq.heappush(heap, (-pair_counts[p], p))
                else:
                    del pair_counts[p]
        pair_counts.pop(pair, None)
    bar.close()

    # GPT-2's order: printable bytes (which map to themselves) first, then the remapped ones,
    # i.e. by code point of the byte-level symbol ("!" is id 0, as in GPT-2's encoder.json).
    byte_symbols = sorted(bytes_to_unicode().values(), key=ord)
    encoder = {symbol: i for i, symbol in enumerate(byte_symbols)}
    for left, right in merges:
        encoder.setdefault(left + right, len(encoder))
    encoder[END_OF_TEXT] = len(encoder)
    return encoder, merges


def _apply_merge(symbols: list[str], pair: tuple[str, str], merged: str) -> list[str]:
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == pair[0] and symbols[i + 1] == pair[1]:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def write_bpe_files(
    encoder: dict[str, int],
    merges: list[tuple[str, str]],
    encoder_json: str | os.PathLike,
    vocab_bpe: str | os.PathLike,
) -> None:
    """Write ``encoder.json`` and ``vocab.bpe`` in GPT-2's format, each atomically.

    >>> write_bpe_files(*train_bpe(count_words(["a b"]), 0), "/tmp/e.json", "/tmp/v.bpe")  # doctest: +SKIP
    """
    write_text_atomic(encoder_json, json.dumps(encoder, ensure_ascii=False))
    write_text_atomic(vocab_bpe, "#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
