"""The tests' fork server (tests/forkserver.py) runs fairseq's scripts as the scripts themselves
do: same output, exit status, signals and imports. Each comparison runs the real console script
beside the shim."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import forkserver
from tests.peers import needs

pytestmark = needs("fairseq", "the fork server serves fairseq's scripts")

BIN = Path(sys.executable).parent


def both(tool: str, *args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """``tool`` run as the real script in ``cwd/real`` and through the server in ``cwd/served``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = []
    for path, folder in ((str(BIN / tool), cwd / "real"), (forkserver.command(tool), cwd / "served")):
        folder.mkdir(exist_ok=True)
        runs.append(subprocess.run([path, *args], cwd=folder, env=env, capture_output=True, text=True, timeout=300))
    return runs[0], runs[1]


@pytest.mark.skipif(not forkserver.enabled(), reason="ROBERTA_EXT_TEST_FORKSERVER=0")
def test_a_served_script_answers_as_the_real_one(tmp_path: Path):
    (tmp_path / "train.txt").write_text("a b c\nb c d\n", encoding="utf-8")
    args = ("--only-source", "--trainpref", str(tmp_path / "train.txt"), "--workers", "1", "--destdir", "bin")
    real, served = both("fairseq-preprocess", *args, cwd=tmp_path)
    assert served.returncode == real.returncode == 0
    for name in ("dict.txt", "train.bin", "train.idx"):
        assert (tmp_path / "served" / "bin" / name).read_bytes() == (tmp_path / "real" / "bin" / name).read_bytes()
    real, served = both("fairseq-preprocess", "--no-such-option", cwd=tmp_path)
    assert served.returncode == real.returncode == 2
    assert served.stderr.splitlines()[-1] == real.stderr.splitlines()[-1]  # argparse's own line, prog included
    assert served.stdout == real.stdout


@pytest.mark.skipif(not forkserver.enabled(), reason="ROBERTA_EXT_TEST_FORKSERVER=0")
def test_a_served_script_gets_its_signals_and_forgets_the_other_scripts(tmp_path: Path):
    # A command that waits for its input (a FIFO no one writes): SIGTERM to the shim ends the
    # child as it would end the script.
    os.mkfifo(tmp_path / "fifo")
    shim = subprocess.Popen(
        [forkserver.command("fairseq-preprocess"), "--only-source", "--trainpref", "fifo", "--workers", "1"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)
    shim.send_signal(signal.SIGTERM)
    assert shim.wait(30) == -signal.SIGTERM
    # A --user-dir package that says, when fairseq imports it, which scripts' modules are loaded.
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "__init__.py").write_text(
        "import sys\nprint('loaded:', sorted(m for m in sys.modules if m.startswith('fairseq_cli.')))\n"
    )
    real, served = both("fairseq-train", "--user-dir", str(probe), "--help", cwd=tmp_path)
    assert served.returncode == real.returncode == 0
    loaded = [line for line in served.stdout.splitlines() if line.startswith("loaded:")]
    assert loaded == [line for line in real.stdout.splitlines() if line.startswith("loaded:")]
    assert loaded == ["loaded: ['fairseq_cli.train']"]
    assert "usage: fairseq-train" in served.stdout
