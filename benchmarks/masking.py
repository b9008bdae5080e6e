"""Milliseconds per ``BatchMasker`` call on a RoBERTa-base-shaped batch (16 x 512, vocabulary 50265),
for every masking mode, with one torch thread (a data-loader worker) and with the default count.

Rows are right-padded to random lengths between 256 and 512 tokens (``<s> ... </s>``), ids drawn
uniformly from the ordinary vocabulary, and ~70% of the vocabulary marked as word starts (GPT-2
BPE: pieces with a leading space). Also times fairseq's per-item ``MaskTokensDataset`` on the same
rows when fairseq is installed, for scale. Run: ``python benchmarks/masking.py``.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from roberta_ext.data.masking import BatchMasker, MaskingConfig

BATCH, LENGTH, VOCAB = 16, 512, 50265
BOS, PAD, EOS, UNK, MASK = 0, 1, 2, 3, VOCAB - 1


def _batch(generator: torch.Generator) -> torch.Tensor:
    tokens = torch.randint(4, MASK, (BATCH, LENGTH), generator=generator)  # (B, T)
    lengths = torch.randint(256, LENGTH + 1, (BATCH,), generator=generator)
    lengths[0] = LENGTH
    columns = torch.arange(LENGTH)
    tokens[:, 0] = BOS
    tokens[columns == (lengths[:, None] - 1)] = EOS
    tokens[columns >= lengths[:, None]] = PAD
    return tokens


def _time_ms(call: Callable[[], object], repeats: int = 50) -> float:
    for _ in range(5):
        call()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


def main() -> None:
    generator = torch.Generator().manual_seed(0)
    tokens = _batch(generator)
    indices = torch.arange(BATCH) * 7919
    word_starts = torch.rand(VOCAB, generator=generator) < 0.7
    counts = torch.randint(1, 10_000, (VOCAB,), generator=generator).double()
    modes = {
        "token": MaskingConfig(),
        "token, freq-weighted": MaskingConfig(freq_weighted_replacement=True),
        "whole word": MaskingConfig(mask_whole_words=True),
        "span (SpanBERT)": MaskingConfig(span_masking=True),
    }
    print(f"batch {BATCH} x {LENGTH}, vocabulary {VOCAB}, {int(tokens.ne(PAD).sum())} real tokens; median ms per call")
    default_threads = torch.get_num_threads()
    for name, cfg in modes.items():
        masker = BatchMasker(cfg, vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=[BOS, PAD, EOS, UNK, MASK],
                             word_starts=word_starts, replacement_weights=counts)  # fmt: skip
        epoch = iter(range(10**9))
        row = []
        for threads in (1, default_threads):
            torch.set_num_threads(threads)
            ms = _time_ms(lambda masker=masker, epoch=epoch: masker(tokens, indices, next(epoch)))
            row.append(f"{ms:6.2f} ms ({threads} thread{'s' * (threads > 1)})")
        torch.set_num_threads(default_threads)
        print(f"  {name:22s} " + "   ".join(row))

    try:
        from fairseq.data import Dictionary, MaskTokensDataset
    except ImportError:
        return
    dictionary = Dictionary()
    for i in range(4, VOCAB - 1):
        dictionary.add_symbol(f"w{i}")
    assert dictionary.add_symbol("<mask>") == MASK
    rows = [row[row.ne(PAD)] for row in tokens]
    dataset = MaskTokensDataset(rows, dictionary, pad_idx=PAD, mask_idx=MASK, seed=1)
    epoch = iter(range(10**9))

    def fairseq_batch() -> None:
        dataset.set_epoch(next(epoch))
        for i in range(BATCH):
            dataset[i]

    torch.set_num_threads(1)
    ms = _time_ms(fairseq_batch, 10)
    print(f"  fairseq MaskTokensDataset, {BATCH} items (inputs only; targets are a second pass): {ms:6.2f} ms")


if __name__ == "__main__":
    main()
