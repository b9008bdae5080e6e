"""Run mutmut on each module of scripts/mutation/modules.toml against that module's own tests.

mutmut reads its settings from ``[tool.mutmut]`` of the ``pyproject.toml`` in the directory it runs in, one
test selection for the whole run. To judge each module by its own tests only, every module gets a scratch
copy of the repository (``build/mutation/<name>/``: the package, the tests and ``pyproject.toml`` with that
module's ``[tool.mutmut]``), and mutmut runs there. ``results.txt`` in that folder is ``mutmut results --all``.

    python scripts/mutation/run.py            # every module of modules.toml
    python scripts/mutation/run.py rows batching
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "scripts" / "mutation" / "modules.toml"
WORK = REPO / "build" / "mutation"
COPIED = ("roberta_ext", "tests", "pyproject.toml", "setup.py", "hubconf.py")


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(f'"{value}"' for value in values) + "]"


def prepare(name: str, module: str, tests: list[str]) -> Path:
    """A fresh scratch copy of the repository whose [tool.mutmut] mutates ``module`` only, judged by ``tests``."""
    where = WORK / name
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for entry in COPIED:
        source = REPO / entry
        if source.is_dir():
            shutil.copytree(source, where / entry, ignore=ignore)
        else:
            shutil.copy2(source, where / entry)
    settings = (
        "\n[tool.mutmut]\n"
        'source_paths = ["roberta_ext"]\n'
        f"only_mutate = {_toml_list([module])}\n"
        f"pytest_add_cli_args_test_selection = {_toml_list(tests)}\n"
        'pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:xdist"]\n'
        "use_git_change_detection = false\n"
    )
    with open(where / "pyproject.toml", "a", encoding="utf-8") as file:
        file.write(settings)
    return where


def _function_name(mutant: str) -> str:
    """``roberta_ext.x.x_func__mutmut_3`` or ``...xǁClassǁmethod__mutmut_3`` -> ``func`` / ``method``."""
    mangled = mutant.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    return mangled.split("ǁ")[-1] if "ǁ" in mangled else mangled.removeprefix("x_")


def survivors(where: Path, module: str, results: str) -> list[str]:
    """``file:line  mutant: state`` and the line before and after the mutation, for each mutant not killed."""
    mutmut = Path(sys.executable).parent / "mutmut"
    source = (REPO / module).read_text("utf-8").splitlines()
    lines = []
    for entry in results.splitlines():
        if ": " not in entry or entry.rstrip().endswith(": killed"):
            continue
        mutant, state = (part.strip() for part in entry.rsplit(": ", 1))
        diff = subprocess.run([str(mutmut), "show", mutant], cwd=where, capture_output=True, text=True).stdout
        removed = [line[1:] for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
        added = [line[1:] for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
        start = next(
            (i for i, text in enumerate(source) if re.match(rf"\s*(async )?def {_function_name(mutant)}\(", text)), 0
        )
        number = next(
            (i + 1 for i in range(start, len(source)) if removed and source[i].strip() == removed[0].strip()), 0
        )
        lines.append(f"{module}:{number}  {mutant}: {state}")
        lines += [f"    - {text.strip()}" for text in removed] + [f"    + {text.strip()}" for text in added]
    return lines


def main(names: list[str]) -> int:
    table = tomllib.loads(MODULES.read_text("utf-8"))
    unknown = [name for name in names if name not in table]
    if unknown:
        print(f"unknown module(s) {unknown}; modules.toml has {sorted(table)}", file=sys.stderr)
        return 2
    mutmut = Path(sys.executable).parent / "mutmut"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    status = 0
    for name in names or list(table):
        entry = table[name]
        where = prepare(name, entry["module"], entry["tests"])
        print(f"== {name}: {entry['module']} <- {' '.join(entry['tests'])}", flush=True)
        # One worker: the machine has two cores and the tests start torch.
        run = subprocess.run([str(mutmut), "run", "--max-children", "1"], cwd=where, env=env)
        status = status or run.returncode
        results = subprocess.run(
            [str(mutmut), "results", "--all", "true"], cwd=where, env=env, capture_output=True, text=True
        )
        (where / "results.txt").write_text(results.stdout + results.stderr, "utf-8")
        counts: dict[str, int] = {}
        for line in results.stdout.splitlines():
            if ": " in line:
                state = line.rsplit(": ", 1)[1].strip()
                counts[state] = counts.get(state, 0) + 1
        report = survivors(where, entry["module"], results.stdout)
        (where / "survivors.txt").write_text("\n".join(report) + "\n", "utf-8")
        print(f"== {name}: {sum(counts.values())} mutants, {counts}; not killed: {where / 'survivors.txt'}", flush=True)
    return status


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
