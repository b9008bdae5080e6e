# The two commands of the README, and helpers. Each target sets up .venv itself.
.PHONY: quickstart test lint docs venv

quickstart:      ## pretrain + fine-tune a small RoBERTa with fairseq-train --user-dir, then use it via torch.hub
	scripts/bootstrap.sh full
	.venv/bin/python -m roberta_ext quickstart

test:            ## lint, types, the whole test suite and the docs build (installs fairseq, the peers and tools first)
	scripts/bootstrap.sh full
	$(MAKE) --no-print-directory lint
	# a missing peer fails (tests/peers.py); two workers, a test file to a worker (tests/conftest.py: built_once)
	ROBERTA_EXT_REQUIRE_PEERS=1 .venv/bin/python -m pytest -q --durations=15 -n 2 --dist loadfile tests
	.venv/bin/python -m mkdocs build --strict --quiet --site-dir build/site

lint:            ## ruff (lint and format) and mypy, as configured in pyproject.toml
	scripts/bootstrap.sh full
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy

docs:
	scripts/bootstrap.sh full
	.venv/bin/python -m mkdocs build --strict --site-dir build/site

venv:
	scripts/bootstrap.sh full
