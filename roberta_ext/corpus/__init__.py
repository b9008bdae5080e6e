"""Corpus tools: text files -> what ``fairseq-preprocess`` reads (the ``roberta-ext`` commands of
:mod:`roberta_ext.cli.corpus` are thin parsers over these functions).

* :mod:`~roberta_ext.corpus.bpe` — ``bpe-encode`` (fairseq's GPT-2 encoder script, byte for
  byte) and ``train-bpe`` (learn ``encoder.json`` + ``vocab.bpe`` + ``dict.txt``).
* :mod:`~roberta_ext.corpus.tokenize` — ``tokenize``: WordPiece or SentencePiece tokens per line.
* :mod:`~roberta_ext.corpus.tagging` — ``prepare-tagging``: CoNLL-style files -> data for
  ``--task roberta_ext_token_classification``.
* :mod:`~roberta_ext.corpus.glue` — ``glue-preprocess``, and how ``predict`` reads a GLUE file.
* :mod:`~roberta_ext.corpus.rows` — the rows of a text, TSV or JSONL input, as ``predict`` and
  ``embed`` read them (one stripping rule, one header rule).
* What they share: :mod:`~roberta_ext.corpus.reading` (lines as fairseq reads them, in chunks,
  errors naming file and line), :mod:`~roberta_ext.corpus.pool` (an ordered, memory-bounded
  process pool).

Every output appears under its real name only once the whole run succeeded
(:mod:`roberta_ext.atomic`).
"""

from .bpe import (
    EncodeStats,
    TrainedBPE,
    bpe_encode_files,
    build_fairseq_dictionary,
    train_bpe_files,
)
from .reading import STDIO, CorpusError
from .tagging import IGNORE_LABEL, TaggedSentence, TagStats, prepare_tagging, read_conll
from .tokenize import PIECE_TOKENIZERS, TOKENIZERS, TokenizeStats, TokenWriter, tokenize_files

__all__ = [
    "IGNORE_LABEL",
    "PIECE_TOKENIZERS",
    "STDIO",
    "TOKENIZERS",
    "CorpusError",
    "EncodeStats",
    "TagStats",
    "TaggedSentence",
    "TokenWriter",
    "TokenizeStats",
    "TrainedBPE",
    "bpe_encode_files",
    "build_fairseq_dictionary",
    "prepare_tagging",
    "read_conll",
    "tokenize_files",
    "train_bpe_files",
]
