"""Every ``>>>`` example in docs/ runs, page by page, as a reader would type it.

Each page is one doctest session (names carry over from example to example, as in a Python
prompt), run from a folder holding ``quickstart_out/`` — what ``make quickstart`` leaves in
the repository root — and ``hubconf.py``, so ``torch.hub.load(".", ...)`` works as the pages
show. The quickstart is the one of :data:`tests.conftest.QUICKSTART_SMALL`: the default shapes
and vocabulary, so ids, shapes and sizes are those a reader gets; values that depend on how
long it trained (probabilities, predicted labels) are written ``...`` on the pages.

Downloads are impossible here and never attempted: the cache is an empty folder and
``ROBERTA_EXT_OFFLINE=1``.
"""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

from tests.conftest import REPO

PAGES = sorted(path.name for path in (REPO / "docs").glob("*.md") if "\n>>> " in path.read_text(encoding="utf-8"))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.fixture(scope="module")
def reader_folder(quickstart_out: Path, tmp_path_factory) -> Path:
    """A folder laid out as the repository root after ``make quickstart``."""
    folder = tmp_path_factory.mktemp("reader")
    (folder / "quickstart_out").symlink_to(quickstart_out)
    (folder / "hubconf.py").symlink_to(REPO / "hubconf.py")
    return folder


def test_every_page_with_examples_is_collected():
    assert {"checkpoints.md", "fine-tuning.md", "getting-started.md", "hub-api.md", "tokenizers.md"} <= set(PAGES)


@pytest.mark.parametrize("page", PAGES)
def test_page_examples_run(page: str, reader_folder: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(reader_folder)
    monkeypatch.setenv("ROBERTA_EXT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("ROBERTA_EXT_OFFLINE", "1")
    path = REPO / "docs" / page
    test = doctest.DocTestParser().get_doctest(
        path.read_text(encoding="utf-8"), {"__name__": "__docs__"}, page, str(path), 0
    )
    assert test.examples
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    result = runner.run(test, out=report.append, clear_globs=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples of docs/{page} failed:\n" + "".join(
        report
    )
