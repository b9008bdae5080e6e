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


# ------------------------------------------------------------------ the command-line layer

ARGPARSE_ELSEWHERE = {
    "roberta_ext.checkpoints.safe_load": "allows the argparse.Namespace fairseq checkpoints hold when unpickling them",
}
"""Modules outside roberta_ext/cli/ that import argparse, and why (none parses a command line)."""


def test_argparse_is_imported_only_by_the_command_line_layer():
    """Every parser lives in roberta_ext/cli/; the library functions take plain arguments."""
    offenders = []
    for name, path in MODULES.items():
        if name == "roberta_ext.cli" or name.startswith("roberta_ext.cli.") or name in ARGPARSE_ELSEWHERE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            if any(imported_name.split(".")[0] == "argparse" for imported_name in names):
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert not offenders, f"argparse outside roberta_ext/cli/ (move the parser there): {offenders}"
    assert all(name in MODULES for name in ARGPARSE_ELSEWHERE)


# ------------------------------------------------------------------------- function length

MAX_FUNCTION_LINES = 80
LONG_FUNCTIONS = {
    "roberta_ext/quickstart.py::run": 304,
    "roberta_ext/loading.py::from_pretrained": 110,
    "roberta_ext/data/masking.py::BatchMasker.__init__": 99,
    "roberta_ext/data/masking.py::BatchMasker._choose_spans": 97,
    "roberta_ext/corpus/bpe.py::bpe_encode_files": 93,
}
"""The functions longer than :data:`MAX_FUNCTION_LINES` when the rule came (issue 22), with
their length then: an entry may only shrink, and goes when its function is 80 lines or fewer."""


def function_lengths() -> dict[str, int]:
    """``path::Class.method`` (nested functions as ``outer.inner``) -> lines from ``def`` to the
    last line of the body, docstring included, for every function of the package."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, path: str, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                assert child.end_lineno is not None
                lengths[f"{path}::{prefix}{child.name}"] = child.end_lineno - child.lineno + 1
                visit(child, path, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, path, f"{prefix}{child.name}.")

    for path in MODULES.values():
        visit(ast.parse(path.read_text(encoding="utf-8")), str(path.relative_to(REPO)), "")
    return lengths


def test_no_function_grows_past_80_lines():
    """A ratchet: no new function over 80 lines, and the long ones of LONG_FUNCTIONS only shrink."""
    lengths = function_lengths()
    new = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES and name not in LONG_FUNCTIONS}
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines (split them along their jobs): {new}"
    grew = {name: (limit, lengths[name]) for name, limit in LONG_FUNCTIONS.items() if lengths.get(name, 0) > limit}
    assert not grew, f"long functions that grew (allowed, now): {grew}"
    done = [name for name in LONG_FUNCTIONS if lengths.get(name, 0) <= MAX_FUNCTION_LINES]
    assert not done, f"gone or {MAX_FUNCTION_LINES} lines or fewer now: remove them from LONG_FUNCTIONS: {done}"


# ------------------------------------------------------------------------- the model interface

ENCODER_PATH_OWNERS = ("roberta_ext.modeling", "roberta_ext.fairseq_plugin")
"""The packages that may name fairseq's ``encoder.sentence_encoder`` path: the model itself and
the fairseq plugin, whose models fairseq's code reaches into by that path."""


def _code_strings_and_attributes(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """Attribute names and string constants of ``tree``, docstrings and other bare string
    statements (which describe, never run) left out, with their lines."""
    described = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            yield node.attr, node.lineno
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in described:
            yield node.value, node.lineno


def test_only_the_model_and_the_plugin_name_fairseqs_encoder_path():
    """Features use the model's typed interface (``features``, ``transformer``, ``embed_tokens``,
    ``device``); state-dict key tables spell the path through ``modeling.ENCODER_PREFIX``."""
    offenders = [
        f"{path.relative_to(REPO)}:{line}"
        for name, path in MODULES.items()
        if not name.startswith(ENCODER_PATH_OWNERS)
        for text, line in _code_strings_and_attributes(ast.parse(path.read_text(encoding="utf-8")))
        if "sentence_encoder" in text
    ]
    assert not offenders, f"fairseq's encoder path outside modeling/ and fairseq_plugin/: {offenders}"


def test_public_functions_take_the_model_type_not_any():
    """A public function's (or method's) ``model`` parameter is annotated with the model type
    (``EncoderModel``), never ``Any``: a reader sees what it takes, mypy checks what it calls."""
    offenders = []
    for name, path in MODULES.items():
        if name.startswith("roberta_ext.fairseq_plugin"):  # fairseq's own model classes
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or node.name.startswith("_"):
                continue
            arguments = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            for argument in arguments:
                if argument.arg == "model" and ast.unparse(argument.annotation or ast.Constant(None)) == "Any":
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}")
    assert not offenders, f"functions taking `model: Any` (annotate EncoderModel): {offenders}"


# ------------------------------------------------------------------------ one error hierarchy

NOT_PROJECT_ERRORS = {
    # Control-flow signals, each caught where it is raised and never reported as it is: deriving
    # from RobertaExtError would let a door's `except` answer for a signal meant for its catcher.
    "roberta_ext.download._TransientError": "a failed download attempt, retried; then a DownloadError",
    "roberta_ext.corpus.reading.UndecodableLine": "a line that is not UTF-8, in a worker; then a CorpusError naming it",
    "roberta_ext.tokenizers.wordpiece._LoneSurrogate": "raised inside str.translate; its catcher names the text",
}
"""Exception classes of the package that must not derive from the base, each with why."""


def _names_an_exception(base: ast.expr) -> bool:
    name = ast.unparse(base).rsplit(".", 1)[-1]
    return name.endswith(("Error", "Exception"))


def _exception_class_candidates(path: Path) -> tuple[list[str], list[str]]:
    """The top-level classes of a module (checked by importing it) and the nested ``ClassDef`` s
    whose bases name an exception (which cannot be imported to check: not allowed)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top = [node.name for node in tree.body if isinstance(node, ast.ClassDef) and node.bases]
    nested = [
        f"{path.relative_to(REPO)}:{node.lineno} {node.name}"
        for outer in ast.walk(tree)
        if isinstance(outer, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        for node in ast.walk(outer)
        if node is not outer and isinstance(node, ast.ClassDef) and any(map(_names_an_exception, node.bases))
    ]
    return top, nested


def _errors_not_from_the_base(names: Iterator[str] | list[str]) -> tuple[list[str], list[str]]:
    """``(offenders, allowlisted seen)`` among the exception classes of the modules ``names``."""
    import importlib

    from roberta_ext.errors import RobertaExtError

    offenders, seen = [], []
    for name in names:
        top, nested = _exception_class_candidates(MODULES[name])
        offenders += nested
        module = importlib.import_module(name)
        for class_name in top:
            cls = getattr(module, class_name)
            if not (isinstance(cls, type) and issubclass(cls, BaseException)) or issubclass(cls, Warning):
                continue  # not an exception (a warning category is not an error either)
            if f"{name}.{class_name}" in NOT_PROJECT_ERRORS:
                seen.append(f"{name}.{class_name}")
            elif not issubclass(cls, RobertaExtError):
                bases = ", ".join(ancestor.__name__ for ancestor in cls.__mro__[1:-2])
                offenders.append(f"{MODULES[name].relative_to(REPO)} {class_name} ({bases})")
    return offenders, seen


def test_every_error_of_the_package_derives_from_the_base():
    """Every exception class of ``roberta_ext`` (the plugin's: see the next test) derives from
    ``roberta_ext.errors.RobertaExtError``, through its layer's class; the allowlist holds only
    control-flow signals, and only ones that still exist."""
    offenders, seen = _errors_not_from_the_base(
        name for name in MODULES if not name.startswith("roberta_ext.fairseq_plugin") and name != "roberta_ext.__main__"
    )
    assert not offenders, f"exception classes not derived from RobertaExtError (derive from your layer's): {offenders}"
    assert sorted(seen) == sorted(NOT_PROJECT_ERRORS), "NOT_PROJECT_ERRORS names a class that is gone: remove it"


def test_every_error_of_the_plugin_derives_from_the_base():
    from tests.peers import require

    require("fairseq", "the plugin's modules import fairseq")
    offenders, _ = _errors_not_from_the_base(
        [name for name in MODULES if name.startswith("roberta_ext.fairseq_plugin")]
    )
    assert not offenders, f"exception classes not derived from RobertaExtError (derive from your layer's): {offenders}"


# ------------------------------------------------------------------------------------ layers

BOTTOM = {"roberta_ext.errors", "roberta_ext._text", "roberta_ext.atomic", "roberta_ext.download"}
"""What every layer may use and that uses no other part of the package: the error base, text
helpers, atomic files and the download cache (as tiktoken's ``load.py``)."""

ABOVE = {
    "roberta_ext.checkpoints": "files of weights; the text side (tokenizers, corpus tools, data) never needs them",
    "roberta_ext.loading": "a door",
    "roberta_ext.hub": "a door",
    "roberta_ext.cli": "a door",
    "roberta_ext.serve": "a door",
    "roberta_ext.fairseq_plugin": "fairseq's door",
}
"""Packages the text side and the features must not import, and why."""


def test_the_bottom_layer_imports_only_itself():
    """``errors``, ``_text``, ``atomic`` and ``download`` import nothing of the package but each other."""
    offenders = {name: sorted(GRAPH[name] - BOTTOM) for name in BOTTOM if GRAPH[name] - BOTTOM}
    assert not offenders, f"the bottom layer imports from above it: {offenders}"


def test_text_side_and_features_do_not_import_the_layers_above_them():
    """``tokenizers/``, ``corpus/``, ``data/`` and ``inference/`` (the features that take a model
    and its inputs) import neither checkpoints nor any door."""
    lower = ("roberta_ext.tokenizers", "roberta_ext.corpus", "roberta_ext.data", "roberta_ext.inference")
    offenders = [
        f"{MODULES[name].relative_to(REPO)}:{line} imports {target} ({ABOVE[above]})"
        for name, path in MODULES.items()
        if name.startswith(lower)
        for target, line in imported(name, path)
        for above in ABOVE
        if target == above or target.startswith(above + ".")
    ]
    assert not offenders, "\n".join(offenders)


def test_one_test_file_per_module():
    """A module's tests live in one ``test_<module>.py``, never split into a ``test_<module>_units.py``
    beside it: a newcomer can tell where a test belongs."""
    split = sorted(str(path.relative_to(REPO)) for path in (REPO / "tests").rglob("test_*_units.py"))
    assert not split, f"merge these into their module's test file: {split}"
