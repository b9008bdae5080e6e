"""Modules that moved, still importable under their old names (with a ``DeprecationWarning``
naming the new one), so that code written against an earlier layout keeps working.

>>> import warnings
>>> with warnings.catch_warnings(record=True):
...     import roberta_ext.inputs
>>> roberta_ext.inputs is sys.modules["roberta_ext.inference.inputs"]
True
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    "roberta_ext._io": "roberta_ext.atomic",
    "roberta_ext.checkpoints.store": "roberta_ext.download",
    "roberta_ext.inputs": "roberta_ext.inference.inputs",
    "roberta_ext.head_outputs": "roberta_ext.inference.head_outputs",
    "roberta_ext.alignment": "roberta_ext.inference.alignment",
    "roberta_ext.qa": "roberta_ext.inference.qa",
    "roberta_ext.predict": "roberta_ext.inference.predict",
    "roberta_ext.compiled": "roberta_ext.inference.compiled",
}
"""Old dotted name -> where the module lives now (moved in 0.2; the old names go in 0.3)."""


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name of :data:`MOVED` and loads it as the module it moved to."""

    def find_spec(
        self, fullname: str, path: object = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def exec_module(self, module: ModuleType) -> None:
        new = MOVED[module.__name__]
        warnings.warn(f"{module.__name__} moved to {new}: import it from there", DeprecationWarning, stacklevel=2)
        # The import system returns what sys.modules holds once this returns: the real module.
        sys.modules[module.__name__] = importlib.import_module(new)


def install() -> None:
    """Let the old names of :data:`MOVED` import (once per process)."""
    if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
        sys.meta_path.append(_Alias())
