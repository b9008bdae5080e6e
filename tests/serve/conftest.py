"""What the server tests share: a small fine-tuned model folder (2 x 32, two labels), its hub,
and :func:`serving`, which runs the real server (uvicorn, in a thread) on a free loopback port."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

import roberta_ext
from roberta_ext.serve import ServeOptions, Server, create_app
from tests.test_hub import make_model_dir

LABELS = ["negative", "positive"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def served_model_dir(tmp_path_factory, bpe_files) -> Path:
    """A fairseq-layout folder with a classification head and label/dict.txt; 64 positions."""
    return make_model_dir(tmp_path_factory.mktemp("served"), bpe_files, max_positions=64, labels=LABELS)


@pytest.fixture(scope="module")
def hub(served_model_dir):
    return roberta_ext.from_pretrained(str(served_model_dir))


@contextlib.contextmanager
def serving(served, **options) -> Iterator[tuple[str, Server]]:
    """Run the app over ``served`` with these :class:`ServeOptions` on a free port; yield its
    base URL and :class:`Server`; stop it (gracefully) after."""
    port = free_port()
    app = create_app(served, ServeOptions(port=port, log_level="warning", **options))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name=f"uvicorn-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}", app.state.server
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the server did not stop"


class Gate:
    """Holds the model worker on a job of its own until :meth:`open`, so that requests sent
    meanwhile queue up and are batched together when it opens."""

    def __init__(self, server: Server) -> None:
        from roberta_ext.serve import Job, Task

        self.event = threading.Event()
        self.holding = threading.Event()
        self.server = server
        self.job = server.worker.submit(Job(Task("gate", self._wait), [0], [1]))
        assert self.holding.wait(30), "the worker did not take the gate's job"

    def _wait(self, items):
        self.holding.set()
        assert self.event.wait(60), "the gate was never opened"
        return items

    def wait_for_queue(self, depth: int, timeout: float = 30) -> None:
        """Until ``depth`` requests wait behind the gate."""
        deadline = time.monotonic() + timeout
        while self.server.worker.queue_depth < depth:
            assert time.monotonic() < deadline, f"{self.server.worker.queue_depth} requests queued, not {depth}"
            time.sleep(0.005)

    def open(self) -> None:
        self.event.set()
        self.job.future.result(timeout=30)
