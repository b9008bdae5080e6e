"""Tokenizers that turn text into model ids. Pure Python (plus ``sentencepiece``): no torch needed.

GPT-2 byte-level BPE into fairseq dictionary indices (RoBERTa), WordPiece over a ``vocab.txt``
(BERT), SentencePiece over a ``spiece.model`` (ALBERT), SentencePiece over XLM-R's
``sentencepiece.bpe.model`` in fairseq's ids (XLM-R), and a ``tokenizer.json`` read by the
``tokenizers`` library (:class:`HFTokenizer`: ModernBERT), imported only when one is read.

>>> from roberta_ext.tokenizers import FairseqGPT2Tokenizer, WordPieceTokenizer, SentencePieceTokenizer
>>> from roberta_ext.tokenizers import XLMRSentencePiece
>>> tok = FairseqGPT2Tokenizer.from_files("encoder.json", "vocab.bpe", "dict.txt")  # doctest: +SKIP
>>> tok.encode("Hello world")  # doctest: +SKIP
[31414, 232]
>>> WordPieceTokenizer.from_file("vocab.txt").encode("Hello world")  # doctest: +SKIP
[7592, 2088]
>>> SentencePieceTokenizer.from_file("spiece.model").encode("Hello world")  # doctest: +SKIP
[10975, 126]
>>> XLMRSentencePiece.from_file("sentencepiece.bpe.model").encode("Hello world")  # doctest: +SKIP
[35378, 8999]
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
from .hf_tokenizer import HFTokenizer, HFTokenizerFormatError
from .sentencepiece_tokenizer import (
    SentencePieceFormatError,
    SentencePieceTokenizer,
    XLMRSentencePiece,
    train_sentencepiece,
    train_xlmr_sentencepiece,
)
from .wordpiece import (
    BasicTokenizer,
    BertPreTokenizer,
    WordPiece,
    WordPieceFormatError,
    WordPieceTokenizer,
    read_vocab,
    train_wordpiece_vocab,
    write_vocab,
)

__all__ = [
    "GPT2_SPLIT_PATTERN",
    "GPT2BPE",
    "BasicTokenizer",
    "BertPreTokenizer",
    "Dictionary",
    "DictionaryFormatError",
    "FairseqGPT2Tokenizer",
    "GPT2BPEFormatError",
    "HFTokenizer",
    "HFTokenizerFormatError",
    "ReferenceGPT2BPE",
    "SentencePieceFormatError",
    "SentencePieceTokenizer",
    "WordPiece",
    "WordPieceFormatError",
    "WordPieceTokenizer",
    "XLMRSentencePiece",
    "bytes_to_unicode",
    "read_vocab",
    "train_sentencepiece",
    "train_wordpiece_vocab",
    "train_xlmr_sentencepiece",
    "write_vocab",
]
