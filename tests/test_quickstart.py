"""The README's main job, scaled down: every step runs and the report comes out."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("fairseq")


def test_quickstart_runs_end_to_end_at_a_tiny_scale(tmp_path):
    out = tmp_path / "qs"
    result = subprocess.run(
        [sys.executable, "-m", "roberta_ext", "quickstart", "--out", str(out), "--merges", "300", "--layers", "1",
         "--dim", "32", "--tokens-per-sample", "64", "--pretrain-updates", "8", "--finetune-updates", "4",
         "--batch-size", "8"],
        cwd=REPO, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    report = result.stdout
    assert "decode(...) == the sentence: True" in report
    assert "return_all_hiddens -> 2 tensors" in report
    assert re.search(r"validation perplexity of masked tokens: [\d.]+ +\(unigram baseline, no context: [\d.]+\)", report)
    assert re.search(r"held-out accuracy \(class vs function, \d+ docstrings\): [\d.]+", report)
    assert len(re.findall(r"^      +[\d.]+  '", report, re.M)) == 6  # 2 fill_mask calls x top 3
    for folder in ("pretrain", "finetune"):
        assert (out / folder / "checkpoint_best.pt").is_file()


def test_quickstart_help():
    result = subprocess.run([sys.executable, "-m", "roberta_ext", "quickstart", "--help"], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "--pretrain-updates" in result.stdout
