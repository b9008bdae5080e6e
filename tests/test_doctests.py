"""Every ``>>>`` example in the package's docstrings runs (examples that need files a reader
brings, such as a released checkpoint, say ``# doctest: +SKIP``). The fairseq plugin's modules
import fairseq, so theirs run only where fairseq is installed."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import roberta_ext
from tests.peers import require

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(roberta_ext.__path__, "roberta_ext.")
    if info.name != "roberta_ext.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_module_examples_run(name: str, tmp_path, monkeypatch):
    if name.startswith("roberta_ext.fairseq_plugin"):
        require("fairseq", "the plugin's modules import fairseq")
    monkeypatch.chdir(tmp_path)  # an example that writes a file writes it here
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of {name} failed"
