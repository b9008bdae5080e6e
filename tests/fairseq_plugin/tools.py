"""fairseq's console scripts as the plugin tests run them, and their JSON logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests import forkserver
from tests.conftest import REPO

BIN = Path(sys.executable).parent
USER_DIR = str(REPO / "roberta_ext")


def run(tool: str, *args: str, cwd: Path | None = None, omp_threads: int | None = 1) -> str:
    """Run a console script of this environment (``fairseq-train``, ...) with this repository
    importable; return its output, or fail with it. ``omp_threads=None`` leaves torch's
    thread count at its default. fairseq's scripts start from the tests' fork server
    (tests/forkserver.py): the same command, without its 8 s of imports."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if omp_threads is not None:
        env["OMP_NUM_THREADS"] = str(omp_threads)
    result = subprocess.run(
        [forkserver.command(tool), *args], cwd=cwd, capture_output=True, text=True, env=env, timeout=600
    )
    output = result.stdout + result.stderr
    if result.returncode != 0:
        raise AssertionError(f"{tool} failed ({result.returncode}):\n{output[-6000:]}")
    return output


def preprocess(destdir: Path, trainpref: Path, validpref: Path, *, srcdict: Path | None = None) -> Path:
    """``fairseq-preprocess --only-source`` of one column (a dictionary of its own unless
    ``srcdict``); returns ``destdir``."""
    args = ["--only-source", "--trainpref", str(trainpref), "--validpref", str(validpref), "--destdir", str(destdir)]
    run("fairseq-preprocess", *args, *(["--srcdict", str(srcdict)] if srcdict else []), "--workers", "1")
    return destdir


def log_records(log: str, kind: str = "train_inner") -> list[dict]:
    """fairseq's JSON log records of one kind (``train_inner``, ``valid``), in order, from
    ``fairseq-train``'s log lines (``| valid |``) or ``fairseq-hydra-train``'s (``[valid][INFO]``)."""
    marks = (f"| {kind} |", f"[{kind}][")
    return [json.loads(line[line.index("{") :]) for line in log.splitlines() if any(m in line for m in marks)]
