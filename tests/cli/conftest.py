"""Fixtures of the commands' tests."""

from __future__ import annotations

import pytest

from roberta_ext.cli import running


@pytest.fixture
def threads_asked(monkeypatch) -> list:
    """The thread counts ``run_command`` sets torch to and gives back (None: left alone), recorded
    instead of set: in a forked process (mutmut's children) torch set to more than one thread
    hangs in its next parallel kernel."""
    asked: list = []
    monkeypatch.setattr(running, "_set_threads", asked.append)
    return asked
