"""Every name the plugin registers with fairseq follows the one rule of
``roberta_ext.fairseq_plugin.naming``: ``<family>_ext`` or ``<family>_ext_<what>``, so that it can
never collide with fairseq's names or another plugin's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.peers import require

require("fairseq", "the names live in fairseq's registries")

import roberta_ext.fairseq_plugin  # noqa: F401  (registers)
from roberta_ext.fairseq_plugin import naming
from roberta_ext.fairseq_plugin.naming import follows_naming_rule, registered_names
from tests.conftest import REPO

# What a fresh process adds to fairseq's registries when it imports the plugin.
SNAPSHOT = """
import json
from fairseq.criterions import CRITERION_REGISTRY
from fairseq.models import ARCH_MODEL_REGISTRY, MODEL_REGISTRY
from fairseq.optim import OPTIMIZER_REGISTRY
from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY
from fairseq.tasks import TASK_REGISTRY
registries = {"task": TASK_REGISTRY, "criterion": CRITERION_REGISTRY, "model": MODEL_REGISTRY,
              "architecture": ARCH_MODEL_REGISTRY, "optimizer": OPTIMIZER_REGISTRY,
              "lr_scheduler": LR_SCHEDULER_REGISTRY}
before = {kind: set(registry) for kind, registry in registries.items()}
import roberta_ext.fairseq_plugin
print(json.dumps({kind: sorted(set(registry) - before[kind]) for kind, registry in registries.items()}))
"""


@pytest.mark.parametrize(
    "name",
    [
        "roberta_ext",
        "roberta_ext_mlm",
        "roberta_ext_sentence_pair_mlm",
        "bert_ext_base",
        "albert_ext_large",
        "electra_ext",
        "electra_ext_small",
        "spanbert_ext_base",
        "roberta_ext_2",
        "roberta_ext_stable_adamw",
        "modernbert_ext_large",
    ],
)
def test_the_rule_accepts(name):
    assert follows_naming_rule(name)


@pytest.mark.parametrize(
    "name",
    [
        "electra",
        "spanbert",
        "sentence_pair_mlm",
        "token_classification",
        "extractive_qa",
        "roberta",
        "masked_lm",
        "gpt2_ext",  # no family called gpt2
        "roberta_ext_",
        "roberta_extra",
        "Roberta_ext",
        "roberta_ext-mlm",
        "roberta_ext_mlm\n",
        "stable_adamw",
        "warmup_stable_decay",
    ],
)
def test_the_rule_refuses(name):
    assert not follows_naming_rule(name)


def test_every_registered_name_follows_the_rule():
    names = registered_names()
    broken = {kind: [n for n in found if not follows_naming_rule(n)] for kind, found in names.items()}
    assert not any(broken.values()), f"names against {naming.name_rule().pattern}: {broken}"
    # The test sees the plugin's registrations: every kind, and the tasks renamed to the rule.
    assert {
        "roberta_ext_electra",
        "roberta_ext_spanbert",
        "roberta_ext_sentence_pair_mlm",
        "roberta_ext_token_classification",
        "roberta_ext_extractive_qa",
    } <= set(names["task"]) & set(names["criterion"])
    assert {"roberta_ext", "electra_ext", "spanbert_ext"} <= set(names["model"])
    assert {"roberta_ext_base", "bert_ext_base", "albert_ext_base", "electra_ext_small", "spanbert_ext_base"} <= set(
        names["architecture"]
    )
    assert {"modernbert_ext_base", "modernbert_ext_large"} <= set(names["architecture"])
    assert names["optimizer"] == ["roberta_ext_stable_adamw"]
    assert names["lr_scheduler"] == ["roberta_ext_warmup_stable_decay"]


def test_the_plugin_adds_exactly_those_names_to_a_fresh_process():
    result = subprocess.run([sys.executable, "-c", SNAPSHOT], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    added = json.loads(result.stdout.strip().splitlines()[-1])
    assert added == registered_names()


def test_the_architectures_named_after_the_models_are_ours():
    """fairseq registers an architecture named after each model with a dataclass, with a no-op
    function of its own: the model class makes those the plugin's."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY

    names = registered_names()
    assert set(names["model"]) <= set(names["architecture"])
    for model in names["model"]:
        assert ARCH_MODEL_REGISTRY[model].__module__.startswith("roberta_ext.")
        assert ARCH_CONFIG_REGISTRY[model].__module__.startswith("fairseq.")


def test_an_architecture_of_ours_on_fairseqs_model_is_ours(monkeypatch):
    """An architecture whose function is the plugin's counts as the plugin's even on fairseq's
    own model class (``register_model_architecture("roberta", ...)``); fairseq's are not."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    monkeypatch.setitem(ARCH_MODEL_REGISTRY, "roberta_ext_on_fairseqs_model", MODEL_REGISTRY["roberta"])
    monkeypatch.setitem(ARCH_CONFIG_REGISTRY, "roberta_ext_on_fairseqs_model", ARCH_CONFIG_REGISTRY["roberta_ext_base"])
    architectures = registered_names()["architecture"]
    assert "roberta_ext_on_fairseqs_model" in architectures
    assert "roberta_base" in ARCH_MODEL_REGISTRY and "roberta_base" not in architectures


def test_an_architecture_without_a_function_is_told_apart_by_its_model(monkeypatch):
    """fairseq's ``build_model`` runs an architecture's function only if there is one: an entry put
    straight into ``ARCH_MODEL_REGISTRY`` (another plugin's, or ours) is judged by its model alone."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_REGISTRY, MODEL_REGISTRY

    monkeypatch.setitem(ARCH_MODEL_REGISTRY, "other_plugin_arch", MODEL_REGISTRY["roberta"])
    monkeypatch.setitem(ARCH_MODEL_REGISTRY, "roberta_ext_without_function", MODEL_REGISTRY["roberta_ext"])
    assert (
        "other_plugin_arch" not in ARCH_CONFIG_REGISTRY and "roberta_ext_without_function" not in ARCH_CONFIG_REGISTRY
    )
    architectures = registered_names()["architecture"]
    assert "roberta_ext_without_function" in architectures and "other_plugin_arch" not in architectures
