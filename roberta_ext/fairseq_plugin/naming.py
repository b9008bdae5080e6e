"""The one naming rule for everything the plugin registers with fairseq.

Every task, criterion, model, architecture, optimizer and learning-rate scheduler name is
``<family>_ext`` or ``<family>_ext_<what>``: the models are ``roberta_ext``, ``electra_ext`` and
``spanbert_ext``, the architectures ``<family>_ext_<size>`` (``bert_ext_base``), the tasks and
criteria ``roberta_ext_<objective>`` (``roberta_ext_mlm``, ``roberta_ext_electra``), the optimizer
``roberta_ext_stable_adamw`` and the scheduler ``roberta_ext_warmup_stable_decay``. fairseq keeps one
object per name in each registry (0.12 raises on a duplicate architecture and silently keeps the
first task or model), so a bare name such as ``electra`` or ``token_classification`` could be
fairseq's or another plugin's, and shadow ours or be shadowed; an ``_ext`` name cannot.

>>> [follows_naming_rule(n) for n in ("roberta_ext_electra", "bert_ext_base", "electra", "roberta")]
[True, True, False, False]
"""

from __future__ import annotations

import re


def name_rule() -> re.Pattern[str]:
    """What every name the plugin registers with fairseq matches: a registered family's name,
    ``_ext``, and optionally ``_<what>``. Derived from the family registry, so a new family's
    architectures follow the rule without a change here."""
    from ..families import families

    return re.compile(rf"^({'|'.join(re.escape(f.name) for f in families())})_ext(_[a-z0-9_]+)?$")


PACKAGE = __name__.split(".")[0]


def follows_naming_rule(name: str) -> bool:
    """Does ``name`` match :func:`name_rule`?"""
    return name_rule().fullmatch(name) is not None


def registered_names() -> dict[str, list[str]]:
    """The names this package has registered with fairseq, by registry: ``task``, ``criterion``,
    ``model``, ``architecture``, ``optimizer`` and ``lr_scheduler``, each sorted. Told apart from
    fairseq's and other plugins' by the module of the registered class (or, for an architecture,
    of its function or model)."""
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_REGISTRY
    from fairseq.optim import OPTIMIZER_REGISTRY
    from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    def ours(*objects: object) -> bool:
        return any(getattr(o, "__module__", "").split(".")[0] == PACKAGE for o in objects)

    return {
        "task": sorted(n for n, cls in TASK_REGISTRY.items() if ours(cls)),
        "criterion": sorted(n for n, cls in CRITERION_REGISTRY.items() if ours(cls)),
        "model": sorted(n for n, cls in MODEL_REGISTRY.items() if ours(cls)),
        # fairseq registers an architecture named after each model with a dataclass (a no-op
        # function of fairseq's own): the model class tells that one apart.
        "architecture": sorted(n for n, cls in ARCH_MODEL_REGISTRY.items() if ours(cls, ARCH_CONFIG_REGISTRY.get(n))),
        "optimizer": sorted(n for n, cls in OPTIMIZER_REGISTRY.items() if ours(cls)),
        "lr_scheduler": sorted(n for n, cls in LR_SCHEDULER_REGISTRY.items() if ours(cls)),
    }
