"""The rules of docs/architecture.md, read from the code so that they cannot drift back.

Imports are read with ``ast`` (module level, inside functions and under ``TYPE_CHECKING``
alike): a lazy or type-only import is still a dependency a reader has to follow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "roberta_ext"


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its ``__init__``)."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = modules()


def imported(name: str, path: Path) -> Iterator[tuple[str, int]]:
    """The package's modules that module ``name`` imports, with the line of each import."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
            # `from . import x` may import the module x; `from .m import f` imports m.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target in MODULES and target != name:
                yield target, node.lineno


GRAPH = {name: {target for target, _ in imported(name, path)} for name, path in MODULES.items()}


def test_only_the_doors_import_the_hub():
    """Features take a model and its ``ModelInputs``; the hub class is imported by the loader,
    the package's ``__init__``, ``hubconf.py`` and the command-line layer only."""
    allowed = {"roberta_ext", "roberta_ext.loading"}
    offenders = [
        f"{MODULES[name].relative_to(REPO)}:{line}"
        for name, path in MODULES.items()
        if name not in allowed and not name.startswith("roberta_ext.cli")
        for target, line in imported(name, path)
        if target == "roberta_ext.hub"
    ]
    assert not offenders, f"these modules import the hub (take a model and its inputs instead): {offenders}"


def test_no_import_circles_in_the_package():
    """Arrows point down only: no module reaches itself through what it imports (a package's
    ``__init__`` is not counted as imported by its sub-modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles: list[list[str]] = []

    def visit(name: str) -> None:  # Tarjan's strongly connected components
        index[name] = low[name] = len(index)
        stack.append(name)
        for target in GRAPH[name]:
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for name in MODULES:
        if name not in index:
            visit(name)
    assert not circles, f"import circles: {circles}"
