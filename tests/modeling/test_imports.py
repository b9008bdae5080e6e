"""``roberta_ext/modeling/`` stands alone: it imports the standard library, torch and itself,
nothing else of the package (issue 22). The rule is read from the code — every ``import`` and
``from ... import``, at module level, inside functions and under ``TYPE_CHECKING`` alike — so an
import circle through the families cannot come back unnoticed; and a fresh interpreter imports
the package and builds a model with no other part of ``roberta_ext`` loaded."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "roberta_ext"
MODELING = PACKAGE / "modeling"
ALLOWED_TOP_LEVEL = set(sys.stdlib_module_names) | {"torch"}
SELF = "roberta_ext.modeling"


def _allowed(module: str) -> bool:
    """An absolute module name the modeling package may import."""
    return module.split(".")[0] in ALLOWED_TOP_LEVEL or module == SELF or module.startswith(SELF + ".")


def foreign_imports(source: str) -> list[tuple[int, str]]:
    """``(line, what)`` for each import in ``source`` that reaches outside the stdlib, torch and
    the modeling package: a relative import of more than one dot (``from ..families import
    preset``), or an absolute one of anything else. ``importlib.import_module("...")`` and
    ``__import__("...")`` with a literal name count as imports too."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, f"import {alias.name}") for alias in node.names if not _allowed(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level > 1 or (node.level == 0 and not _allowed(module)):
                found.append((node.lineno, f"from {'.' * node.level}{module} import ..."))
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            target = node.args[0].value
            if name in ("import_module", "__import__") and isinstance(target, str) and not target.startswith("."):
                if not _allowed(target):
                    found.append((node.lineno, f"{name}({target!r})"))
    return found


def test_modeling_imports_only_the_stdlib_torch_and_itself():
    files = sorted(MODELING.rglob("*.py"))
    assert {path.name for path in files} >= {"__init__.py", "attention.py", "config.py", "encoder.py", "model.py"}
    found = {
        str(path.relative_to(PACKAGE)): imports
        for path in files
        if (imports := foreign_imports(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_rule_sees_every_kind_of_import():
    source = """
from __future__ import annotations
import os, dataclasses
import torch.nn.functional as F
from typing import TYPE_CHECKING
from . import dropout
from .config import EncoderConfig
from roberta_ext.modeling.attention import Packing
import numpy
from ..families import get_family
if TYPE_CHECKING:
    from roberta_ext.hub import RobertaHubInterface

def preset(name):
    from ..families import preset
    import importlib
    importlib.import_module("roberta_ext.families")
    importlib.import_module("torch.nn.attention.varlen")
    return preset(name)
"""
    assert foreign_imports(source) == [
        (9, "import numpy"),
        (10, "from ..families import ..."),
        (12, "from roberta_ext.hub import ..."),
        (15, "from ..families import ..."),
        (17, "import_module('roberta_ext.families')"),
    ]


def test_a_fresh_interpreter_builds_a_model_from_modeling_alone():
    """``roberta_ext/__init__.py`` imports the whole package, so the check stands in an empty
    ``roberta_ext`` package and imports ``roberta_ext.modeling`` from its folder alone."""
    script = f"""
import sys, types
package = types.ModuleType("roberta_ext")
package.__path__ = [{str(PACKAGE)!r}]
sys.modules["roberta_ext"] = package
import torch
from roberta_ext.modeling import EncoderConfig, RobertaModel, use_attention
cfg = EncoderConfig(vocab_size=64, encoder_layers=1, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
                    encoder_attention_heads=4, max_positions=64, attention="masked")
model = RobertaModel(cfg).eval()
with torch.no_grad(), use_attention(model, "per_sequence"):
    assert model(torch.tensor([[0, 5, 6, 2], [0, 7, 2, 1]]))[0].shape == (2, 4, 64)
loaded = sorted(name for name in sys.modules if name.startswith("roberta_ext."))
assert all(name.startswith("roberta_ext.modeling") for name in loaded), loaded
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
