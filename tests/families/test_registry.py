"""The family registry: every family's presets build, names resolve, and no code outside
``roberta_ext/families/`` decides anything by a family's name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from roberta_ext.families import Family, families, family_of_transformers, get_family, preset, register_family
from roberta_ext.modeling import RobertaModel

PACKAGE = Path(__file__).resolve().parents[2] / "roberta_ext"
NAMES = {family.name for family in families()}


def test_the_seven_families_are_registered_in_order():
    assert [family.name for family in families()] == [
        "roberta",
        "bert",
        "albert",
        "electra",
        "spanbert",
        "xlmr",
        "modernbert",
    ]


@pytest.mark.parametrize("family", families(), ids=lambda family: family.name)
def test_every_preset_builds_a_model_of_its_family(family: Family):
    for size, make in family.presets.items():
        cfg = make()
        assert cfg.family == family.name
        assert preset(f"{family.name}-{size}") == cfg
    tiny = RobertaModel(family.preset("tiny")).eval()
    tokens = torch.tensor([[0, 5, 6, 2]]) if family.preset("tiny").padding_idx == 1 else torch.tensor([[2, 5, 6, 3]])
    assert tiny(tokens, features_only=True)[0].shape == (1, 4, family.preset("tiny").encoder_embed_dim)


def test_roberta_sizes_need_no_prefix():
    assert preset("base") == preset("roberta-base") == get_family("roberta").preset("base")
    large = preset("large")
    assert (large.encoder_layers, large.encoder_embed_dim, large.encoder_attention_heads) == (24, 1024, 16)


def test_a_preset_takes_overrides():
    assert preset("bert-tiny", encoder_layers=3) == get_family("bert").preset("tiny").replace(encoder_layers=3)


def test_unknown_names_are_errors_naming_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown model family 'gpt'.*'albert'"):
        get_family("gpt")
    with pytest.raises(ValueError, match=r"unknown model family 'gpt'"):
        preset("base", family="gpt")  # EncoderConfig itself knows no family: the families check
    with pytest.raises(ValueError, match=r"unknown preset 'bert-huge'.*'bert-base'"):
        preset("bert-huge")
    with pytest.raises(ValueError, match="family 'bert' has no preset 'huge'"):
        get_family("bert").preset("huge")


def test_a_name_registers_once():
    with pytest.raises(ValueError, match="already registered"):
        register_family(Family(name="bert", presets={}, tokenizer="wordpiece"))
    assert register_family(get_family("bert")) is get_family("bert")  # the same record again is harmless


def test_transformers_model_types_find_their_family():
    assert {f.name: family_of_transformers(f.transformers.model_type).name for f in families() if f.transformers} == {
        "roberta": "roberta",
        "bert": "bert",
        "albert": "albert",
        "electra": "electra",
        "xlmr": "xlmr",
        "modernbert": "modernbert",
    }
    assert family_of_transformers("gpt2") is None


def _decisions_by_family_name(tree: ast.AST) -> list[int]:
    """Lines comparing something with a family's name, or keying a dict by family names."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            constants = [o.value for o in operands if isinstance(o, ast.Constant)]
            constants += [
                e.value
                for o in operands
                if isinstance(o, (ast.Tuple, ast.List, ast.Set))
                for e in o.elts
                if isinstance(e, ast.Constant)
            ]
            if any(c in NAMES for c in constants):
                lines.append(node.lineno)
        elif isinstance(node, ast.Dict):
            keys = [k.value for k in node.keys if isinstance(k, ast.Constant)]
            if sum(k in NAMES for k in keys) >= 2:
                lines.append(node.lineno)
    return lines


def test_nothing_outside_the_families_branches_on_a_family_name():
    """The rule of docs/architecture.md: a family's knowledge lives in its module. (Text that
    merely names a family — docs, messages, defaults — is fine; a decision is not.)"""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if "families" in path.relative_to(PACKAGE).parts:
            continue
        lines = _decisions_by_family_name(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[str(path.relative_to(PACKAGE))] = lines
    assert found == {}


def test_the_check_sees_a_decision_by_name():
    assert _decisions_by_family_name(ast.parse('x = cfg.family == "roberta"\ny = {"bert": 1, "albert": 2}')) == [1, 2]
