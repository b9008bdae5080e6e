"""No module of the package uses another module's private (``_underscored``) names.

A leading underscore says "only this module relies on me": its author may rename, change or
delete it without looking elsewhere. An import of it from another module breaks that promise
silently, so this test reads every ``.py`` of ``roberta_ext/`` (and ``hubconf.py``) with
:mod:`ast` and fails on

* ``from roberta_ext.x import _name`` (relative forms included, imports inside functions too);
* ``module._name`` where ``module`` is a name bound to a module of the package by an import
  (``from . import wordpiece`` then ``wordpiece._check_text``; ``import roberta_ext.x as x``);
* a private *module* (``tokenizers/_bert_unicode``) used from outside the package that
  holds it: such a module is private to its package, not to itself.

Dunder names (``__version__``, ``__all__``) are public. What needs a helper from another module
should find it under a public name (and the helper, a docstring worth reading).

:data:`ALLOWED` lists the violations that were already there when the rule came, in code that
others were restructuring at the time. It may only shrink: the test also fails when a listed
pair no longer occurs, so remove it then.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "roberta_ext"

ALLOWED: frozenset[tuple[str, str]] = frozenset()
"""Known violations, each ``(importing module, "module._name")``: none is left (the last,
``corpus.glue`` using ``corpus.bpe._encode_chunk``, went with issue 33); it stays empty."""


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _package_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package and ``hubconf``."""
    files = sorted((REPO / PACKAGE).rglob("*.py")) + [REPO / "hubconf.py"]
    return {_module_name(path): path for path in files}


def _private_module_owner(module: str) -> str | None:
    """The package a module path is private to: for ``a.b._c.d``, ``a.b`` (the first private part's parent)."""
    parts = module.split(".")
    for i, part in enumerate(parts):
        if _is_private(part):
            return ".".join(parts[:i])
    return None


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def violations(source: str, module: str, *, is_package: bool, modules: set[str]) -> set[tuple[str, str]]:
    """``(module, "other_module._name")`` for each private name of another module of ``modules``
    that ``source`` (the text of ``module``) uses; ``is_package`` says whether it is an ``__init__``.

    >>> found = violations("from .b import _x, y\\nfrom . import b\\nb._z()", "p.a", is_package=False,
    ...                    modules={"p", "p.a", "p.b"})
    >>> sorted(found)
    [('p.a', 'p.b._x'), ('p.a', 'p.b._z')]
    """
    tree = ast.parse(source)
    found: set[tuple[str, str]] = set()
    # The package relative imports start from: the module's own for an __init__, its parent's otherwise.
    here = module.split(".") if is_package else module.split(".")[:-1]

    def use_module(target: str) -> None:
        owner = _private_module_owner(target)
        if owner is not None and not _inside(module, owner) and target != module:
            found.add((module, target))

    def use_name(target: str, name: str) -> None:
        if f"{target}.{name}" in modules:  # a submodule, not a name: private to its package only
            use_module(f"{target}.{name}")
        elif _is_private(name) and target != module:
            found.add((module, f"{target}.{name}"))

    bound: dict[str, str] = {}  # local name -> module of the package it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)] if node.level > 1 else here
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            if target not in modules:
                continue  # another library, or a name of the package only run time knows
            use_module(target)
            for alias in node.names:
                use_name(target, alias.name)
                if f"{target}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in modules:
                    continue
                use_module(alias.name)
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:  # `import a.b.c` binds `a`; the attribute chain reaches the rest
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]

    def resolve(node: ast.expr) -> str | None:
        """The module of the package an expression names (``x``, ``x.y``), if it names one."""
        if isinstance(node, ast.Name):
            return bound.get(node.id)
        if isinstance(node, ast.Attribute):
            parent = resolve(node.value)
            if parent is not None and f"{parent}.{node.attr}" in modules:
                return f"{parent}.{node.attr}"
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = resolve(node.value)
            if owner is not None:
                use_name(owner, node.attr)
    return found


def _all_violations() -> set[tuple[str, str]]:
    modules = _package_modules()
    found: set[tuple[str, str]] = set()
    for module, path in modules.items():
        source = path.read_text(encoding="utf-8")
        found |= violations(source, module, is_package=path.name == "__init__.py", modules=set(modules))
    return found


def test_no_module_uses_another_modules_private_names():
    new = _all_violations() - ALLOWED
    assert not new, "private names used from another module (make them public, or keep them inside):\n" + "\n".join(
        f"  {importer}: {name}" for importer, name in sorted(new)
    )


def test_the_allowlist_only_holds_violations_that_still_occur():
    gone = ALLOWED - _all_violations()
    assert not gone, "fixed: remove these pairs from ALLOWED in tests/test_private_imports.py:\n" + "\n".join(
        f"  {importer}: {name}" for importer, name in sorted(gone)
    )


MODULES = {"p", "p.a", "p.b", "p.sub", "p.sub.c", "p._priv", "p.sub._inner"}


@pytest.mark.parametrize(
    ("source", "module", "expected"),
    [
        ("from .b import _x", "p.a", {("p.a", "p.b._x")}),
        ("from p.b import _x as x", "p.a", {("p.a", "p.b._x")}),
        ("from ..b import _x", "p.sub.c", {("p.sub.c", "p.b._x")}),
        ("def f():\n    from .b import _x", "p.a", {("p.a", "p.b._x")}),
        ("from . import b\nb._x", "p.a", {("p.a", "p.b._x")}),
        ("import p.b as m\nm._x()", "p.a", {("p.a", "p.b._x")}),
        ("import p.sub.c\np.sub.c._x", "p.a", {("p.a", "p.sub.c._x")}),
        ("from .sub import _inner", "p.a", {("p.a", "p.sub._inner")}),  # a module private to p.sub
        ("from .sub._inner import y", "p.a", {("p.a", "p.sub._inner")}),
        ("from . import _inner", "p.sub.c", set()),  # inside its package: fine
        ("from .._priv import y", "p.sub.c", set()),
        ("from .b import __version__, y, _X as x", "p.a", {("p.a", "p.b._X")}),
        ("from .b import y\ny._x\nself._x\nfrom os import _exit", "p.a", set()),  # not modules of p
        ("from .a import _x", "p.a", set()),  # its own name, however reached
    ],
)
def test_the_scan_finds_what_it_should(source, module, expected):
    assert violations(source, module, is_package=False, modules=MODULES) == expected


def test_relative_imports_of_a_package_start_at_the_package_itself():
    assert violations("from .c import _x", "p.sub", is_package=True, modules=MODULES | {"p.sub.c"}) == {
        ("p.sub", "p.sub.c._x")
    }
