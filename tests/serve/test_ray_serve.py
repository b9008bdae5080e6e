"""The server as a Ray Serve deployment (:mod:`roberta_ext.serve.ray_serve`), on one local Ray
cluster for the module: two replicas, each the same app as ``roberta-ext serve`` (its batching
worker, its routes and errors), answer the rows the model gives in this process (to 1e-6); Ray's
health check and ``/health`` see the worker; deleting the application answers every request
already accepted before the replicas stop.

The replicas' model sleeps in each forward pass for as long as a file beside it says (0 at
first), so that the shutdown test can hold requests in flight while the application is deleted."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest

import roberta_ext
from roberta_ext.serve import ServeOptions
from roberta_ext.serve.ray_serve import APP_NAME, DEPLOYMENT_NAME, REPLICA_HEADER, deployment
from tests.peers import require
from tests.serve.conftest import free_port

ray = require("ray", "the deployment runs on a local Ray cluster")
serve = require("ray.serve", "Ray Serve runs the replicas")

TEXTS = [f"request {i}: " + "some words to embed " * (1 + i % 5) for i in range(24)]


def slowed_loader(model_dir: Path, delay_file: Path):
    """What each replica calls to load its model: the hub, whose forward pass first sleeps for the
    seconds ``delay_file`` says (read at each pass). Pickled to the replicas by value."""

    def load():
        hub = roberta_ext.from_pretrained(str(model_dir))

        def pause(module, args):
            seconds = float(delay_file.read_text())
            if seconds:
                time.sleep(seconds)

        hub.model.register_forward_pre_hook(pause)
        return hub

    return load


@pytest.fixture(scope="module")
def delay_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("delay") / "seconds"
    path.write_text("0")
    return path


@pytest.fixture(scope="module")
def base_url(served_model_dir, delay_file):
    """Two replicas of one CPU each on a two-CPU local cluster, the proxy on a free port.

    Serve gives its HTTP proxy 5 s to start and then kills it; in a full test run, beside three
    other test workers on two cores, it once took longer and the module's setup failed. The
    cluster's processes take their environment from this one: the proxy gets 60 s here."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
        patch.setenv("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        options = ServeOptions(max_batch_tokens=2048, timeout_s=20, log_level="warning")
        app = deployment(slowed_loader(served_model_dir, delay_file), options, num_replicas=2, health_check_period_s=1)
        serve.run(app, name=APP_NAME, route_prefix="/")
        yield f"http://127.0.0.1:{port}"
        serve.shutdown()
        ray.shutdown()


def embed(base_url: str, inputs: list[str]) -> httpx.Response:
    return httpx.post(f"{base_url}/embed", json={"inputs": inputs}, timeout=60)


def test_two_replicas_answer_the_exact_rows(base_url, hub):
    batches = [TEXTS[i : i + 3] for i in range(0, len(TEXTS), 3)] * 3
    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(lambda inputs: embed(base_url, inputs), batches))
    assert [a.status_code for a in answers] == [200] * len(batches)
    for inputs, answer in zip(batches, answers):
        np.testing.assert_allclose(
            np.array(answer.json(), dtype=np.float32), hub.embed(inputs, normalize=True).numpy(), atol=1e-6, rtol=0
        )
    replicas = {answer.headers[REPLICA_HEADER] for answer in answers}
    assert len(replicas) == 2, f"every answer came from {replicas}"
    status = serve.status().applications[APP_NAME]
    assert status.status == "RUNNING"
    assert status.deployments[DEPLOYMENT_NAME].replica_states == {"RUNNING": 2}


def test_the_apps_routes_and_errors_are_served_as_they_are(base_url, hub):
    info = httpx.get(f"{base_url}/info", timeout=30)
    assert info.status_code == 200 and info.json()["max_batch_tokens"] == 2048  # the options given
    health = httpx.get(f"{base_url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    bad = httpx.post(f"{base_url}/embed", json={"inputs": 3}, timeout=30)
    assert bad.status_code == 422 and bad.json()["field"] == "inputs"
    tokens = httpx.post(f"{base_url}/tokenize", json={"inputs": "Hello world!"}, timeout=30)
    assert tokens.status_code == 200 and [t["id"] for t in tokens.json()[0]] == hub.encode("Hello world!").tolist()


def test_deleting_the_application_answers_every_accepted_request_first(base_url, hub, delay_file):
    delay_file.write_text("1.5")  # each forward pass now takes 1.5 s: the requests below are in flight
    inputs = [[text] for text in TEXTS[:4]]
    with ThreadPoolExecutor(len(inputs)) as pool:
        pending = [pool.submit(embed, base_url, one) for one in inputs]
        time.sleep(0.7)
        deleted = threading.Thread(target=serve.delete, args=(APP_NAME,))
        deleted.start()
        answers = [future.result(timeout=60) for future in pending]
        deleted.join(60)
    delay_file.write_text("0")
    assert [a.status_code for a in answers] == [200] * len(inputs), [a.text for a in answers]
    for one, answer in zip(inputs, answers):
        np.testing.assert_allclose(np.array(answer.json()), hub.embed(one, normalize=True).numpy(), atol=1e-6)
    assert APP_NAME not in serve.status().applications
    assert embed(base_url, ["after"]).status_code == 404  # the proxy has no application left
