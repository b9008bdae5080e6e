"""The fairseq plugin: registers the ``roberta_ext``, ``electra_ext`` and ``spanbert_ext`` models
and their architectures, the ``roberta_ext_<objective>`` tasks and criteria, the optimizer
``roberta_ext_stable_adamw`` and the scheduler ``roberta_ext_warmup_stable_decay`` (ModernBERT's
recipe; every name follows the rule of :mod:`.naming`); makes fairseq's checkpoint loader work under torch 2.13 (see
:mod:`.checkpoint_compat`) and stops fairseq's prefetch threads cleanly at exit (see
:mod:`.shutdown`).

Imported by ``fairseq-train --user-dir path/to/roberta_ext`` (through ``roberta_ext/__init__``),
or explicitly: ``import roberta_ext.fairseq_plugin``. This package is the only one that imports
fairseq.
"""

from . import (  # noqa: F401  (each registers its models, tasks, criteria, optimizer or scheduler)
    checkpoint_compat,
    criterions,
    dictionaries,
    electra,
    lr_schedulers,
    models,
    multiple_choice,
    naming,
    optim,
    question_answering,
    sentence_pairs,
    shutdown,
    spanbert,
    tagging,
    tasks,
)

models.register_architectures()  # <family>_ext_<size> for every family, from its presets
checkpoint_compat.install()
shutdown.install()  # stop fairseq's prefetch threads before exit (an abort after training otherwise)

__all__ = ["checkpoint_compat", "criterions", "models", "naming", "tasks"]
