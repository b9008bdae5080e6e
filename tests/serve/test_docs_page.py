"""docs/serving.md's ``curl`` commands, run against the real server as a reader would run them.

The page's blocks are marked ``# not run`` for the docs' command test (they need a server); here
the server runs (the fine-tuned test model: a classification head, a masked-LM head) and every
block holding ``curl`` runs with ``localhost:8080`` pointed at it. Outside the page's "Errors"
section every request must succeed (curl ``--fail-with-body``); in it, every answer must be a
JSON error naming its field."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import REPO
from tests.docs.markdown import code_blocks
from tests.serve.conftest import serving

PAGE = REPO / "docs" / "serving.md"
LINES = PAGE.read_text(encoding="utf-8").splitlines()
ERRORS = (LINES.index("## Errors") + 1, LINES.index("## Metrics") + 1)  # 1-based, as Block.line
BLOCKS = [block for block in code_blocks(PAGE, ("sh", "bash")) if "curl " in block.text]


@pytest.fixture(scope="module")
def url(hub):
    with serving(hub) as (base, _):
        yield base


def test_the_page_shows_every_route():
    shown = "\n".join(block.text for block in BLOCKS)
    for route in ("/embed", "/v1/embeddings", "/predict", "/fill_mask", "/tokenize", "/decode", "/health", "/info"):
        assert f"localhost:8080{route}" in shown, route
    assert all(block.text.startswith("# not run: ") for block in BLOCKS)


@pytest.mark.parametrize("block", BLOCKS, ids=[block.where for block in BLOCKS])
def test_curl_examples_run_against_the_server(block, url):
    errors = ERRORS[0] < block.line < ERRORS[1]
    prelude = "" if errors else 'curl() { command curl --fail-with-body "$@"; }\n'
    script = prelude + block.text.replace("localhost:8080", url.removeprefix("http://"))
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{block.where}:\n{script}\n{done.stdout}\n{done.stderr}"
    assert done.stdout.strip(), block.where
    if errors:  # one JSON error per curl, back to back (curl adds no newline)
        decoder, text, position = json.JSONDecoder(), done.stdout.strip(), 0
        while position < len(text):
            error, position = decoder.raw_decode(text, position)
            assert error["error_type"] and error["field"], error
