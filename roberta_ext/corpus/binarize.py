"""fairseq-preprocess for the corpus commands (``glue-preprocess``, ``prepare-multiple-choice``,
``prepare-tagging``): fairseq's own binarizer, so that the ``.bin``/``.idx`` files are the ones
fairseq writes.

All the runs of one command go through fairseq-preprocess's entry point in **one** Python
process: importing fairseq costs seconds, which each console-script run would pay again (GLUE's
eight tasks make 22 runs). Each batch of runs works in its own folder, after a marker line that
names it, so a failure names the batch it happened in; the log handler fairseq adds per run is
removed after each, so that each ``preprocess.log`` holds its own run only.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .reading import CorpusError

__all__ = ["PreprocessBatch", "check_fairseq", "run_fairseq_preprocess"]

_MARKER = "== roberta-ext fairseq-preprocess: "
_RUNNER = """
import json, os, sys
from fairseq_cli import preprocess
for batch in json.load(sys.stdin):
    print(batch["marker"], flush=True)
    os.chdir(batch["cwd"])
    for arguments in batch["commands"]:
        sys.argv = ["fairseq-preprocess", *arguments]
        preprocess.cli_main()
        for handler in list(preprocess.logger.handlers):
            preprocess.logger.removeHandler(handler)
            handler.close()
        sys.stdout.flush()
"""


@dataclass
class PreprocessBatch:
    """fairseq-preprocess runs (``commands``: each one's arguments, without the program) made in
    ``cwd``; ``name`` names them in errors and reports."""

    name: str
    cwd: Path
    commands: list[list[str]] = field(default_factory=list)


def check_fairseq(why: str) -> None:
    """Raise :class:`CorpusError` unless fairseq can be imported by this Python; ``why`` ends
    the message (what the command needs it for, and what to do instead).

    >>> check_fairseq("prepare-tagging binarizes with fairseq-preprocess")  # doctest: +SKIP
    """
    if importlib.util.find_spec("fairseq_cli") is None:
        raise CorpusError(f"fairseq is not installed for {sys.executable}: {why}")


def run_fairseq_preprocess(batches: Sequence[PreprocessBatch]) -> dict[str, list[str]]:
    """Run every batch, in order, in one process; return fairseq's ``PATH: N sents, M tokens,
    X% replaced (by <unk>)`` lines per batch name. A failing run raises :class:`CorpusError`
    naming its batch, with the end of fairseq's output.

    >>> run_fairseq_preprocess([PreprocessBatch("input0", Path("out"), [["--only-source", "--trainpref",
    ...     "train.input0", "--destdir", "input0", "--srcdict", "dict.txt"]])])  # doctest: +SKIP
    {'input0': ['train.input0: 3 sents, 21 tokens, 0.0% replaced (by <unk>)']}
    """
    request = [
        {"marker": f"{_MARKER}{batch.name}", "cwd": str(Path(batch.cwd).resolve()), "commands": batch.commands}
        for batch in batches
    ]
    result = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(request),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    if result.returncode != 0:
        running = [line.removeprefix(_MARKER) for line in result.stdout.splitlines() if line.startswith(_MARKER)]
        where = f" for {running[-1]}" if running else ""
        raise CorpusError(f"fairseq-preprocess failed{where} ({result.returncode}):\n{result.stdout[-3000:]}")
    reports: dict[str, list[str]] = {batch.name: [] for batch in batches}
    name = ""
    for line in result.stdout.splitlines():
        if line.startswith(_MARKER):
            name = line.removeprefix(_MARKER)
        elif "replaced" in line and ": " in line:
            reports.setdefault(name, []).append(line.split("] ", 1)[-1])
    return reports
