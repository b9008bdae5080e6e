"""The README's main job, scaled down: every step runs and the report comes out."""

from __future__ import annotations

import re
import subprocess
import sys

from roberta_ext.cli.quickstart import build_parser
from tests.conftest import REPO


def test_quickstart_runs_end_to_end_briefly_trained(quickstart_out):
    """The default shapes and vocabulary, 8 + 4 updates (the session's ``quickstart_out``
    fixture, which docs/ runs its examples on too; it needs fairseq, the ``--help`` test does not)."""
    report = (quickstart_out / "report.txt").read_text(encoding="utf-8")
    assert "decode(...) == the sentence: True" in report
    assert "return_all_hiddens -> 5 tensors" in report  # 4 layers + the embeddings
    assert re.search(
        r"validation perplexity of masked tokens: [\d.]+ +\(unigram baseline, no context: [\d.]+\)", report
    )
    assert re.search(r"held-out accuracy \(class vs function, \d+ docstrings\): [\d.]+", report)
    assert len(re.findall(r"^      +[\d.]+  '", report, re.M)) == 6  # 2 fill_mask calls x top 3
    for folder in ("pretrain", "finetune"):
        assert (quickstart_out / folder / "checkpoint_best.pt").is_file()


def test_quickstart_help():
    result = subprocess.run(
        [sys.executable, "-m", "roberta_ext", "quickstart", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "--pretrain-updates" in result.stdout


def test_every_option_has_help():
    """``--help`` explains every option (``--seed`` once had no text)."""
    parser = build_parser()
    assert [action.option_strings for action in parser._actions if not action.help] == []
    assert re.search(r"--seed SEED\s+seed of the train/valid/test split", parser.format_help())
