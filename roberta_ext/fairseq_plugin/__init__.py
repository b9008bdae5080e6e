"""The fairseq plugin: registers the ``roberta_ext`` model and architectures, the
``roberta_ext_mlm`` and ``roberta_ext_classification`` tasks and criteria, and makes fairseq's
checkpoint loader work under torch 2.13 (see :mod:`.checkpoint_compat`) and stops fairseq's
prefetch threads cleanly at exit (see :mod:`.shutdown`).

Imported by ``fairseq-train --user-dir path/to/roberta_ext`` (through ``roberta_ext/__init__``),
or explicitly: ``import roberta_ext.fairseq_plugin``. This package is the only one that imports
fairseq.
"""

from . import checkpoint_compat, criterions, models, shutdown, tasks
from . import electra, question_answering, spanbert  # noqa: F401,E402  (electra_ext, spanbert_ext, extractive_qa)
from . import sentence_pairs, tagging  # noqa: F401,E402  (sentence_pair_mlm, token_classification)

checkpoint_compat.install()
shutdown.install()  # stop fairseq's prefetch threads before exit (an abort after training otherwise)

__all__ = ["checkpoint_compat", "criterions", "models", "tasks"]
