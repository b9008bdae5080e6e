"""``roberta-ext train-bpe``: learn encoder.json, vocab.bpe and dict.txt; see :mod:`roberta_ext.corpus`."""

from roberta_ext.corpus import train_bpe_main as main

__all__ = ["main"]
