"""Tokenizers that turn text into fairseq dictionary indices. Pure Python: no torch needed.

>>> from roberta_ext.tokenizers import FairseqGPT2Tokenizer
>>> tok = FairseqGPT2Tokenizer.from_files("encoder.json", "vocab.bpe", "dict.txt")  # doctest: +SKIP
>>> tok.encode("Hello world")  # doctest: +SKIP
[31414, 232]
"""

from .dictionary import Dictionary, DictionaryFormatError
from .gpt2_bpe import (
    GPT2_SPLIT_PATTERN,
    GPT2BPE,
    FairseqGPT2Tokenizer,
    GPT2BPEFormatError,
    ReferenceGPT2BPE,
    bytes_to_unicode,
)

__all__ = [
    "GPT2_SPLIT_PATTERN",
    "GPT2BPE",
    "Dictionary",
    "DictionaryFormatError",
    "FairseqGPT2Tokenizer",
    "GPT2BPEFormatError",
    "ReferenceGPT2BPE",
    "bytes_to_unicode",
]
