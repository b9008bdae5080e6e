# The two commands of the README, and helpers. Each target sets up .venv itself.
.PHONY: quickstart test lint docs venv mutation

quickstart:      ## pretrain + fine-tune a small RoBERTa with fairseq-train --user-dir, then use it via torch.hub
	scripts/bootstrap.sh full
	.venv/bin/python -m roberta_ext quickstart

test:            ## lint, types, the whole test suite and the docs build (installs fairseq, the peers and tools first)
	scripts/bootstrap.sh full
	$(MAKE) --no-print-directory lint
	# A missing peer fails (tests/peers.py). Three workers on two cores, a test file to a worker, every process
	# (fairseq-train runs included) on one thread: 9 min where two workers took 12.5 and one 21 (tests/conftest.py).
	OMP_NUM_THREADS=1 ROBERTA_EXT_REQUIRE_PEERS=1 .venv/bin/python -m pytest -q --durations=15 -n 3 --dist loadfile tests
	.venv/bin/python -m mkdocs build --strict --quiet --site-dir build/site

lint:            ## ruff (lint and format) and mypy, as configured in pyproject.toml
	scripts/bootstrap.sh full
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

mutation:        ## mutmut on the modules of scripts/mutation/modules.toml, each against its own tests (MODULES="rows batching" for some)
	scripts/bootstrap.sh full
	.venv/bin/python -m pip install -q --disable-pip-version-check -r requirements/mutation.txt
	# One module at a time, one mutant at a time (two cores); scratch copies and results under build/mutation/.
	.venv/bin/python scripts/mutation/run.py $(MODULES)

docs:
	scripts/bootstrap.sh full
	.venv/bin/python -m mkdocs build --strict --site-dir build/site

venv:
	scripts/bootstrap.sh full
