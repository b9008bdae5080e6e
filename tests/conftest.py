"""Shared fixtures: a trained BPE vocabulary, fairseq reference checkpoints, and running code
with fairseq blocked."""

from __future__ import annotations

import json
import locale
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
import torch
from filelock import FileLock
from hypothesis import Phase, settings
from tqdm import tqdm

from tests import peers
from tests.bpe_fixtures import BpeFiles, build_bpe_files

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent
BLOCKED = ("fairseq", "fairseq_cli", "omegaconf", "hydra")


# Put at the top of a ``python -c`` program to run it in a process where fairseq is absent.
BLOCK_SNIPPET = (
    "import importlib.abc, sys\n"
    "class _Block(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path, target=None):\n"
    f"        if name.split('.')[0] in {BLOCKED!r}:\n"
    "            raise ModuleNotFoundError('No module named %r (blocked by the test)' % name, name=name)\n"
    "sys.meta_path.insert(0, _Block())\n"
)


WORKER = os.environ.get("PYTEST_XDIST_WORKER")
"""``gw0``, ``gw1``, ... under pytest-xdist (``make test`` runs three on two cores), else None."""

if WORKER is not None:
    # A thread per worker: workers that spread torch over both cores each only thrash, and a
    # third worker fills the time the others wait on the subprocesses they start (measured:
    # 2 workers 12.5 min, 3 workers with OMP_NUM_THREADS=1 for every process 9.3 min).
    torch.set_num_threads(1)

T = TypeVar("T")

settings.register_profile(
    "mutation",
    derandomize=True,
    database=None,
    phases=(Phase.explicit, Phase.generate),
    max_examples=20,
    deadline=None,
)
"""``--hypothesis-profile=mutation`` (scripts/mutation/modules.toml): the same examples for every mutant,
no example database written into the scratch copy, and no shrinking (a mutant fails at its first failing
example, not after minutes of shrinking it). A test's own ``@settings(max_examples=...)`` still wins over
``max_examples`` here, which only applies to tests that set none."""


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{peers.MARKER}(module, reason): the test needs this peer (tests/peers.py)")


def built_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], T]) -> T:
    """``build(folder)`` run once per test run, even with several xdist workers: the first
    worker to ask builds into a folder shared by the run's workers (under a file lock) and
    leaves ``done`` there; the others wait for it and call ``build`` again only to read back
    what is there — so ``build`` must return a value derived from the folder's files alone when
    ``folder / "done"`` exists (every builder below does: it returns a manifest it reads)."""
    if WORKER is None:
        return build(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent / f"shared-{name}"  # the run's, not the worker's
    with FileLock(str(shared) + ".lock"):
        shared.mkdir(exist_ok=True)
        value = build(shared)
        (shared / "done").touch()
    return value


def pytest_runtest_setup(item: pytest.Item) -> None:
    peers.check_marks(item)  # skips, or fails with ROBERTA_EXT_REQUIRE_PEERS=1, when a peer is missing


def run_without_fairseq(program: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    """Run a Python ``program`` in a fresh interpreter in which fairseq, omegaconf and hydra
    cannot be imported; raise with its output if it fails."""
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_SNIPPET + program, *args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        raise AssertionError(f"program failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result


@pytest.fixture
def tqdm_lock_of_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread lock of this test's own for tqdm. Its default lock holds a multiprocessing lock,
    shared with every process forked after it was made: mutmut forks a process per mutant and kills
    those that run too long, and one killed while holding it hangs every later one that draws a bar.
    Test files that draw bars take it with ``pytestmark = pytest.mark.usefixtures(...)``."""
    monkeypatch.setattr(tqdm, "_lock", threading.RLock(), raising=False)


@pytest.fixture
def ascii_locale():
    """The C locale for character types, as a process started without a UTF-8 locale has it (the
    default encoding of ``open`` is then ASCII): a file read without ``encoding=`` fails on non-ASCII
    text. The previous locale is restored after the test."""
    if sys.flags.utf8_mode:
        pytest.skip("Python's UTF-8 mode reads every file as UTF-8 whatever the locale")
    previous = locale.setlocale(locale.LC_CTYPE)
    locale.setlocale(locale.LC_CTYPE, "C")
    try:
        yield
    finally:
        locale.setlocale(locale.LC_CTYPE, previous)


@pytest.fixture(scope="session")
def bpe_files(tmp_path_factory: pytest.TempPathFactory) -> BpeFiles:
    """A trained GPT-2-style ``encoder.json``, ``vocab.bpe`` and fairseq ``dict.txt`` (read-only)."""
    return build_bpe_files(tmp_path_factory.mktemp("gpt2_bpe"))


@pytest.fixture(scope="session")
def fairseq_reference(tmp_path_factory) -> dict:
    """Checkpoints built by fairseq in every layout, with both hubs' outputs on them.

    Returns ``{layout: model_dir}``; each ``model_dir`` holds ``outputs_fairseq.pt`` (recorded
    by fairseq's ``RobertaHubInterface``) and ``outputs_ours.pt`` (recorded by ours in a process
    where fairseq, omegaconf and hydra cannot be imported). See ``tests/fairseq_reference.py``.
    """
    peers.require_installed("fairseq", "the reference checkpoints are built by fairseq")
    return built_once(tmp_path_factory, "fairseq_reference", _reference_builder("tests.fairseq_reference"))["models"]


@pytest.fixture(scope="session")
def xlmr_reference(tmp_path_factory) -> dict:
    """XLM-R-shaped checkpoints built by fairseq (a SentencePiece model and dict.txt made in the
    run), with fairseq's ``XLMRModel`` hub outputs and ours on them (ours recorded where fairseq,
    omegaconf and hydra cannot be imported); also a GPT-2 RoBERTa for word alignment.

    Returns the manifest: ``{"models": {"base" | "xl" | "gpt2": model_dir}, "sentencepiece_model": path,
    "fairseq-preprocess": dict.txt, "xlmr": dict.txt}``; each ``model_dir`` holds
    ``outputs_fairseq.pt`` and ``outputs_ours.pt``. See ``tests/xlmr_reference.py``. About 70 s.
    """
    peers.require_installed("fairseq", "the XLM-R reference checkpoints are built by fairseq")
    return built_once(tmp_path_factory, "xlmr_reference", _reference_builder("tests.xlmr_reference"))


def _reference_builder(module: str) -> Callable[[Path], dict]:
    """Builds a reference folder with ``python -m module OUT`` (fairseq's outputs), then the same
    module with ``--impl ours`` where fairseq cannot be imported; returns its manifest."""

    def build(out: Path) -> dict:
        if not (out / "done").exists():
            result = subprocess.run(
                [sys.executable, "-m", module, str(out)], cwd=REPO, capture_output=True, text=True, timeout=600
            )
            if result.returncode != 0:
                raise RuntimeError(f"{module} failed:\n{result.stderr[-4000:]}")
            run_without_fairseq(
                f"import runpy, sys; sys.argv = [{module!r}, {str(out)!r}, '--impl', 'ours']; "
                f"runpy.run_module({module!r}, run_name='__main__')"
            )
        return json.loads((out / "manifest.json").read_text())

    return build


QUICKSTART_SMALL = ["--pretrain-updates", "8", "--finetune-updates", "4"]
"""The quickstart at its default shapes and vocabulary (4 x 128, 3000 merges), briefly trained:
what docs/ runs its ``>>>`` examples on. Ids and shapes equal a full ``make quickstart`` run's
on the same Python; trained values (probabilities, predictions) do not."""


@pytest.fixture(scope="session")
def quickstart_out(tmp_path_factory) -> Path:
    """``python -m roberta_ext quickstart`` (:data:`QUICKSTART_SMALL`) run once: its
    ``quickstart_out/`` folder (``pretrain/``, ``finetune/``, data), with the report it printed
    in ``report.txt``. About 45 s on 2 cores."""
    peers.require_installed("fairseq", "the quickstart trains with fairseq-train")

    def build(folder: Path) -> Path:
        out = folder / "quickstart_out"
        if not (folder / "done").exists():
            result = subprocess.run(
                [sys.executable, "-m", "roberta_ext", "quickstart", "--out", str(out), *QUICKSTART_SMALL],
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=900,
            )
            assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
            (out / "report.txt").write_text(result.stdout, encoding="utf-8")
        return out

    return built_once(tmp_path_factory, "quickstart", build)


class RunsCode:
    """Pickles to a call of ``os.system`` — what a malicious checkpoint does. Loading it must
    fail before ``marker`` is created."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)
