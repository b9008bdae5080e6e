"""``roberta-ext serve`` as a process: its flags cover every server option, SIGTERM lets it
answer every request it accepted and exit 0, and ``--workers`` runs replicas on one port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
import torch

import roberta_ext
from tests.conftest import REPO
from tests.serve.conftest import free_port
from tests.test_hub import make_model_dir

LONG = "word " * 240  # 243 tokens


@pytest.fixture(scope="module")
def long_model_dir(tmp_path_factory, bpe_files) -> Path:
    """4 layers, 256 positions: a request of 32 inputs of 243 tokens takes some 30 ms."""
    return make_model_dir(tmp_path_factory.mktemp("serve-cli"), bpe_files, layers=4, max_positions=256)


def start(model_dir: Path, port: int, *options: str) -> subprocess.Popen:
    program = "import sys\nfrom roberta_ext.cli.serve import main\nsys.exit(main(sys.argv[1:]))"
    command = [sys.executable, "-c", program, str(model_dir), "--port", str(port), *options]
    env = {**os.environ, "ROBERTA_EXT_OFFLINE": "1"}
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_until_healthy(process: subprocess.Popen, url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()[0]
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise AssertionError(f"the server did not become healthy: {process.communicate()[0]}")


def test_sigterm_answers_every_accepted_request_then_exits_0(long_model_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(long_model_dir, port, "--max-batch-tokens", "2048", "--threads", "1")
    try:
        wait_until_healthy(process, url)
        answers: list[httpx.Response | Exception] = []

        def send() -> None:
            try:  # a connection of its own, closed after: no keep-alive races at shutdown
                answers.append(httpx.post(f"{url}/embed", json={"inputs": [LONG] * 32}, timeout=120))
            except httpx.TransportError as error:
                answers.append(error)

        threads = [threading.Thread(target=send) for _ in range(16)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 60
        while (depth := httpx.get(f"{url}/health", timeout=5).json()["queue_depth"]) < 6:
            assert time.monotonic() < deadline, "requests did not queue up"
        answered_before = len(answers)
        process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(120)
        output, _ = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    served = [a for a in answers if isinstance(a, httpx.Response)]
    refused = [a.text for a in served if a.status_code != 200]
    assert not refused and all(len(a.json()) == 32 for a in served), refused
    # Every request queued when SIGTERM came was answered (others may have found the door closed).
    assert len(served) >= answered_before + depth, (len(served), answered_before, depth, answers)
    assert "Finished server process" in output


def test_workers_serve_replicas_on_one_port_and_stop_on_sigterm(long_model_dir):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    process = start(long_model_dir, port, "--workers", "2", "--threads", "1")
    try:
        wait_until_healthy(process, url, timeout=90)
        texts = ["Hello world!", LONG]
        vectors = httpx.post(f"{url}/embed", json={"inputs": texts}, timeout=60).json()
        hub = roberta_ext.from_pretrained(str(long_model_dir))
        assert torch.equal(torch.tensor(vectors), hub.embed(texts, normalize=True))
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output
    assert output.count("Application startup complete") == 2, output
