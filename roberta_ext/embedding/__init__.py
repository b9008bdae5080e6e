"""Sentence embeddings: pooling, sentence-transformers folders, and embedding files.

* :mod:`~roberta_ext.embedding.pooling` — every pooling mode of sentence-transformers, the
  :class:`SentenceEmbedding` settings a hub carries, similarity scores;
* :mod:`~roberta_ext.embedding.st_folder` — reading a sentence-transformers folder
  (``modules.json``, ``1_Pooling/config.json``, ``2_Normalize``, ``sentence_bert_config.json``);
* :mod:`~roberta_ext.embedding.embedder` — the engine behind ``hub.embed``: tokenize, truncate,
  sort by length, batch by a token budget, encode, pool;
* :mod:`~roberta_ext.embedding.files` — ``.npy`` and safetensors files of embeddings, written
  a row block at a time;
* :mod:`~roberta_ext.embedding.stream` — what ``roberta-ext embed`` runs: files of texts to
  embedding files, streaming, resumable and sharded (:mod:`~roberta_ext.embedding.locking`: one
  writer per output).

>>> from roberta_ext.embedding import POOLING_MODES
>>> POOLING_MODES[:3]
('mean', 'cls', 'max')
"""

from .embedder import Embedder, embed
from .pooling import POOLING_MODES, SentenceEmbedding, pool, similarity
from .st_folder import is_sentence_transformers_dir, read_sentence_transformers

__all__ = [
    "POOLING_MODES",
    "Embedder",
    "SentenceEmbedding",
    "embed",
    "is_sentence_transformers_dir",
    "pool",
    "read_sentence_transformers",
    "similarity",
]
