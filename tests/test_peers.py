"""tests/peers.py: a missing peer skips a test, or fails it when ROBERTA_EXT_REQUIRE_PEERS=1
(what ``make test``, and so CI, sets) — at module level, inside a test, and as a marker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests import peers
from tests.conftest import REPO

MISSING = "roberta_ext_no_such_peer"


@pytest.mark.parametrize("check", [peers.require, peers.require_installed])
def test_a_missing_peer_skips_without_the_variable(monkeypatch, check):
    monkeypatch.delenv(peers.REQUIRE_PEERS, raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{MISSING} is not installed: the test says why"):
        check(MISSING, "the test says why")
    monkeypatch.setenv(peers.REQUIRE_PEERS, "0")
    with pytest.raises(pytest.skip.Exception):
        check(f"{MISSING}.sub")  # a missing parent package too


@pytest.mark.parametrize("check", [peers.require, peers.require_installed])
def test_a_missing_peer_fails_with_the_variable(monkeypatch, check):
    monkeypatch.setenv(peers.REQUIRE_PEERS, "1")
    with pytest.raises(pytest.fail.Exception, match=f"{MISSING} is not installed.*ROBERTA_EXT_REQUIRE_PEERS=1"):
        check(MISSING)


def test_a_present_peer_is_returned(monkeypatch):
    monkeypatch.setenv(peers.REQUIRE_PEERS, "1")
    assert peers.require("json") is json
    assert peers.require_installed("json").name == "json"


def run_pytest(tmp_path, require_peers: bool) -> subprocess.CompletedProcess:
    """pytest on a folder of tests that need a missing peer in each of the three ways."""
    (tmp_path / "conftest.py").write_text("from tests.conftest import pytest_configure, pytest_runtest_setup\n")
    (tmp_path / "test_module_level.py").write_text(
        textwrap.dedent(f"""
        from tests.peers import require
        require({MISSING!r}, "the whole file needs it")

        def test_never_runs():
            pass
        """)
    )
    (tmp_path / "test_in_test_and_marker.py").write_text(
        textwrap.dedent(f"""
        from tests.peers import needs, require

        def test_requires_inside():
            require({MISSING!r})

        @needs({MISSING!r}, "marked")
        def test_marked():
            pass

        def test_needs_nothing():
            pass
        """)
    )
    env = {k: v for k, v in os.environ.items() if k != peers.REQUIRE_PEERS}
    if require_peers:
        env[peers.REQUIRE_PEERS] = "1"
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rA",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_pytest_skips_every_way_without_the_variable(tmp_path):
    result = run_pytest(tmp_path, require_peers=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed, 3 skipped" in result.stdout, result.stdout


def test_pytest_fails_every_way_with_the_variable(tmp_path):
    result = run_pytest(tmp_path, require_peers=True)
    assert result.returncode != 0
    out = result.stdout
    assert "ERROR test_module_level.py" in out, out  # the file fails at collection
    assert "FAILED test_in_test_and_marker.py::test_requires_inside" in out, out
    assert "ERROR test_in_test_and_marker.py::test_marked" in out, out  # in setup
    assert "PASSED test_in_test_and_marker.py::test_needs_nothing" in out, out
    assert f"{MISSING} is not installed: the whole file needs it" in out, out
    assert "skipped" not in out.splitlines()[-1], out
