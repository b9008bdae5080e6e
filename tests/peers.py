"""Optional peers of the tests (fairseq, transformers, sentencepiece, ...): one rule for all of them.

A test that needs a peer which is not installed is skipped — unless the environment variable
``ROBERTA_EXT_REQUIRE_PEERS`` is ``1``, as ``make test`` (what CI runs) sets it: then a missing
peer is a failure that names it, so that a broken install can never pass as a green run of
skipped tests.

Three ways to say a test needs a peer:

* at module level, for a whole file: ``fairseq = require("fairseq", "the tests run fairseq-train")``
  (skips or fails the file at collection; returns the module, as ``pytest.importorskip`` did);
* inside a test or fixture: the same call, for that test only;
* as a marker: ``@needs("fairseq", "...")`` (checked in ``tests/conftest.py`` before the test runs).

:func:`require_installed` (and the marker) find a peer without importing it: for tests that run
its commands or read its files.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from importlib.machinery import ModuleSpec
from types import ModuleType
from typing import NoReturn

import pytest

REQUIRE_PEERS = "ROBERTA_EXT_REQUIRE_PEERS"
"""Set to ``1``: a missing peer fails the test instead of skipping it."""

MARKER = "needs_peer"


def peers_required() -> bool:
    """Is every peer required (``ROBERTA_EXT_REQUIRE_PEERS=1``)?"""
    return os.environ.get(REQUIRE_PEERS, "").strip() == "1"


def _missing(module: str, reason: str, error: BaseException | None) -> NoReturn:
    message = f"{module} is not installed" + (f": {reason}" if reason else "")
    if error is not None:
        message += f" ({type(error).__name__}: {error})"
    if peers_required():
        pytest.fail(
            f"{message}. {REQUIRE_PEERS}=1 requires every peer: install it "
            "(scripts/bootstrap.sh full), or unset the variable to skip such tests",
            pytrace=False,
        )
    pytest.skip(message, allow_module_level=True)


def require(module: str, reason: str = "") -> ModuleType:
    """Import and return ``module``; skip the test (or the whole file, at module level) if it
    cannot be imported, or fail when :func:`peers_required`. ``reason`` says what needs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        failure = error  # reported outside the handler: no "during handling" chain in the report
    _missing(module, reason, failure)


def require_installed(module: str, reason: str = "") -> ModuleSpec:
    """The spec of ``module``, found without importing it (its parent packages are imported);
    skip or fail as :func:`require` when it is not installed."""
    failure = None
    try:
        spec = importlib.util.find_spec(module)
    except ImportError as error:  # a parent package is missing
        spec, failure = None, error
    if spec is None:
        _missing(module, reason, failure)
    return spec


def needs(module: str, reason: str = "") -> pytest.MarkDecorator:
    """A marker: the test needs ``module`` installed (see :func:`require_installed`; the test
    imports it or runs its commands itself). ``tests/conftest.py`` checks it when the test is set
    up: collecting the test imports nothing."""
    return getattr(pytest.mark, MARKER)(module, reason)


def check_marks(item: pytest.Item) -> None:
    """:func:`require_installed` every peer the :func:`needs` markers of ``item`` name."""
    for mark in item.iter_markers(MARKER):
        require_installed(*mark.args, **mark.kwargs)
