# The two commands of the README, and helpers. Each target sets up .venv itself.
.PHONY: demo test docs bench venv

demo:            ## build a small model with the project's own tools and use it through torch.hub
	scripts/bootstrap.sh core
	.venv/bin/python -m roberta_ext demo

test:            ## the whole test suite (installs fairseq, the peers and test tools first)
	scripts/bootstrap.sh full
	.venv/bin/python -m pytest -q tests
	.venv/bin/python -m mkdocs build --strict --quiet --site-dir build/site

docs:
	scripts/bootstrap.sh full
	.venv/bin/python -m mkdocs build --strict --site-dir build/site

venv:
	scripts/bootstrap.sh full
