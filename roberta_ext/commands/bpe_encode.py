"""``roberta-ext bpe-encode``: fairseq's multiprocessing_bpe_encoder.py; see :mod:`roberta_ext.corpus`."""

from roberta_ext.corpus import bpe_encode_main as main

__all__ = ["main"]
