# The two commands of the README, and helpers. Each target sets up .venv itself.
.PHONY: quickstart test docs venv

quickstart:      ## pretrain + fine-tune a small RoBERTa with fairseq-train --user-dir, then use it via torch.hub
	scripts/bootstrap.sh full
	.venv/bin/python -m roberta_ext quickstart

test:            ## the whole test suite (installs fairseq, the peers and test tools first)
	scripts/bootstrap.sh full
	.venv/bin/python -m pytest -q tests
	.venv/bin/python -m mkdocs build --strict --quiet --site-dir build/site

docs:
	scripts/bootstrap.sh full
	.venv/bin/python -m mkdocs build --strict --site-dir build/site

venv:
	scripts/bootstrap.sh full
