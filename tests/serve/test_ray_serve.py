"""The server as a Ray Serve deployment (:mod:`roberta_ext.serve.ray_serve`), on one local Ray
cluster for the module: two replicas, each the same app as ``roberta-ext serve`` (its batching
worker, its routes and errors), answer the rows the model gives in this process (to 1e-6); Ray's
health check and ``/health`` see the worker; deleting the application answers every request
already accepted before the replicas stop.

The replicas' model sleeps in each forward pass for as long as a file beside it says (0 at
first), so that the shutdown test can hold requests in flight while the application is deleted.

Then the same deployment without a cluster (which mutmut can judge; the cluster's replicas fail to start on a
mutated module, see :func:`lifespan`): the application :func:`deployment` builds (its deployment's name,
replicas, resources, limits and health period, as Ray Serve reads them), a replica made the way Ray Serve makes
one (its class's ``async __init__``, then the ASGI lifespan) answering in this process with its ``X-Replica``
header and its health check, the header middleware on its own, and :func:`serve_on_ray` with Ray's calls
recorded."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import roberta_ext
from roberta_ext.serve import ServeOptions
from roberta_ext.serve.ray_serve import (
    APP_NAME,
    DEPLOYMENT_NAME,
    REPLICA_HEADER,
    _NamingReplica,
    deployment,
    serve_on_ray,
)
from tests.peers import require
from tests.serve.conftest import LABELS, free_port

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


@pytest.fixture(scope="class")
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


# ------------------------------------------------- without a cluster: what mutmut can judge


def config(app) -> Any:
    """What Ray Serve deploys for ``app``: its one deployment."""
    return app._bound_deployment


def loader(model_dir) -> Any:
    """What a replica calls to load its model (pickled to the cluster by Ray, so no hub in its closure)."""
    return lambda: roberta_ext.from_pretrained(str(model_dir))


def make_replica(app) -> Any:
    """A replica as Ray Serve makes one: the ingress class's ``async __init__`` (which builds the app)."""
    cls = config(app).func_or_class
    replica = cls.__new__(cls)
    asyncio.run(cls.__init__(replica))
    return replica


@contextlib.asynccontextmanager
async def lifespan(replica) -> AsyncIterator[None]:
    """The ASGI lifespan of ``replica``, as the wrapper Ray Serve adds runs it when the replica starts and stops.

    Driven here rather than by the wrapper's own (uvicorn's ``LifespanOn``): uvicorn tells ASGI 3 apps by their
    ``async def __call__``, and under mutmut ``_NamingReplica.__call__`` is a plain function returning a coroutine
    (its trampoline), which uvicorn then calls as an ASGI 2 app ("'coroutine' object is not callable")."""
    events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    running = asyncio.ensure_future(
        replica({"type": "lifespan", "asgi": {"version": "3.0"}, "state": {}}, events.get, sent.put)
    )

    async def step(event: str) -> None:
        """Send ``lifespan.<event>``; the app answers ``lifespan.<event>.complete`` (an app that fails raises here)."""
        await events.put({"type": f"lifespan.{event}"})
        answer = asyncio.ensure_future(sent.get())
        await asyncio.wait({answer, running}, timeout=30, return_when=asyncio.FIRST_COMPLETED)
        if not answer.done():
            answer.cancel()
            if running.done():
                running.result()  # the app's error, if it failed
            pytest.fail(f"the app did not answer lifespan.{event}")
        assert answer.result()["type"] == f"lifespan.{event}.complete", answer.result()

    await step("startup")
    try:
        yield
    finally:
        await step("shutdown")
        await running


def test_fewer_than_one_replica_is_refused():
    with pytest.raises(ValueError) as error:
        deployment(lambda: None, num_replicas=0)
    assert str(error.value) == "num_replicas must be >= 1, got 0"
    assert config(deployment(lambda: None, num_replicas=1)).num_replicas == 1


def test_the_deployment_takes_its_replicas_resources_and_limits_from_the_arguments_and_options():
    options = ServeOptions(max_concurrent_requests=7, timeout_s=3.0, graceful_shutdown_s=12.5, threads=2)
    spec = config(
        deployment(
            lambda: None, options, num_replicas=3, cpus_per_replica=2.5, gpus_per_replica=0.5, health_check_period_s=4
        )
    )
    assert spec.name == DEPLOYMENT_NAME == "RobertaExt"
    assert spec.num_replicas == 3
    assert spec.ray_actor_options == {"num_cpus": 2.5, "num_gpus": 0.5}
    assert spec.max_ongoing_requests == 7  # Ray's limit is the app's: admission (429s) stays the app's
    settings = spec._deployment_config
    assert settings.graceful_shutdown_timeout_s == 12.5
    assert settings.graceful_shutdown_wait_loop_s == 0.2
    assert settings.health_check_period_s == 4


def test_the_deployments_defaults():
    spec = config(deployment(lambda: None))
    assert spec.num_replicas == 1
    assert spec.ray_actor_options == {"num_cpus": 1.0, "num_gpus": 0.0}
    assert spec.max_ongoing_requests == ServeOptions().max_concurrent_requests == 512
    assert spec._deployment_config.graceful_shutdown_timeout_s == ServeOptions().shutdown_wait_s == 35.0
    assert spec._deployment_config.health_check_period_s == 10.0


@pytest.mark.parametrize(
    ("cpus", "threads", "expected"),
    [(2.7, None, 2), (1.0, None, 1), (0.5, None, None), (4.0, 3, 3), (0.5, 3, 3)],
    ids=["share-of-cpus", "one-cpu", "under-one-cpu", "threads-given", "threads-given-under-one-cpu"],
)
def test_each_replica_runs_torch_with_its_share_of_cpus_unless_threads_are_given(
    served_model_dir, cpus, threads, expected
):
    """The replica's app (built, its worker not started: no torch thread count is changed here)."""
    options = ServeOptions(threads=threads, model_id="ray-model")
    replica = make_replica(deployment(loader(served_model_dir), options, cpus_per_replica=cpus))
    server = replica.app.app.state.server
    assert server.options.threads == expected
    assert server.worker.threads == expected
    assert server.options.model_id == "ray-model"  # the other options as given
    assert options.threads == threads  # the caller's options are not changed


def test_a_replica_serves_the_app_over_what_load_returns_naming_itself(served_model_dir, hub):
    loads = []

    def load():
        loads.append(1)
        return roberta_ext.from_pretrained(str(served_model_dir))

    replica = make_replica(deployment(load, ServeOptions(max_batch_tokens=1024, log_level="warning")))
    assert loads == [1]
    assert isinstance(replica.app, _NamingReplica) and replica.app.header == (
        b"x-replica",
        f"pid-{os.getpid()}".encode(),
    )
    server = replica.app.app.state.server

    async def serve_some() -> tuple[httpx.Response, httpx.Response, httpx.Response]:
        async with lifespan(replica):
            assert server.worker.alive
            replica.check_health()  # a running worker: healthy
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=replica), base_url="http://test") as client:
                info = await client.get("/info")
                embedded = await client.post("/embed", json={"inputs": ["Hello world!", "a second text"]})
                bad = await client.post("/embed", json={"inputs": 3})
        assert not server.worker.alive
        return info, embedded, bad

    info, embedded, bad = asyncio.run(serve_some())
    for answer in (info, embedded, bad):
        assert answer.headers[REPLICA_HEADER] == f"pid-{os.getpid()}"
    assert info.status_code == 200 and info.json()["max_batch_tokens"] == 1024
    assert embedded.status_code == 200
    np.testing.assert_allclose(
        np.array(embedded.json(), dtype=np.float32),
        hub.embed(["Hello world!", "a second text"], normalize=True).numpy(),
        atol=1e-6,
        rtol=0,
    )
    assert bad.status_code == 422 and bad.json()["field"] == "inputs"


def test_a_replica_whose_worker_stopped_is_unhealthy_unless_it_is_draining(served_model_dir):
    replica = make_replica(deployment(loader(served_model_dir), ServeOptions(log_level="warning")))
    server = replica.app.app.state.server
    server.worker.start()
    replica.check_health()
    server.worker.stop()
    with pytest.raises(RuntimeError) as error:
        replica.check_health()
    assert str(error.value) == "the model worker of this replica is not running"
    server.draining = True  # shutting down: the worker ends after its queue, and Ray is stopping it anyway
    replica.check_health()


def test_the_replicas_id_is_ray_serves_inside_a_replica(served_model_dir, monkeypatch):
    class Context:
        class replica_id:  # noqa: N801 - Ray Serve's attribute
            unique_id = 1234

    monkeypatch.setattr(serve, "get_replica_context", lambda: Context)
    replica = make_replica(deployment(loader(served_model_dir)))
    assert replica.app.header == (b"x-replica", b"1234")


def naming_run(scope: dict[str, Any], messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], Any]:
    """What ``_NamingReplica`` sends on for an app that sends ``messages``, and the send callable the app got."""
    got: dict[str, Any] = {}
    sent: list[dict[str, Any]] = []

    async def app(scope, receive, send):
        got["send"] = send
        for message in messages:
            await send(message)

    async def send(message):
        sent.append(message)

    async def receive():
        return {"type": "http.request"}

    asyncio.run(_NamingReplica(app, "replica-7")(scope, receive, send))
    return sent, got["send"] is send


def test_the_header_is_added_to_every_http_answer_after_the_apps_own():
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]}
    body = {"type": "http.response.body", "body": b"ok"}
    sent, same_send = naming_run({"type": "http"}, [start, body])
    assert sent == [
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/plain"), (b"x-replica", b"replica-7")],
        },
        {"type": "http.response.body", "body": b"ok"},
    ]
    assert start["headers"] == [(b"content-type", b"text/plain")]  # the app's message is not changed
    assert not same_send
    bare, _ = naming_run({"type": "http"}, [{"type": "http.response.start", "status": 204}])
    assert bare == [{"type": "http.response.start", "status": 204, "headers": [(b"x-replica", b"replica-7")]}]


@pytest.mark.parametrize("kind", ["lifespan", "websocket"])
def test_everything_but_http_passes_through_untouched(kind):
    message = {"type": "http.response.start", "status": 200, "headers": []}  # even a message that looks like HTTP's
    sent, same_send = naming_run({"type": kind}, [message])
    assert sent == [message] and sent[0] is message
    assert same_send


class Recorder:
    """Ray's calls that :func:`serve_on_ray` makes, recorded instead of run."""

    def __init__(self, monkeypatch, initialized: bool) -> None:
        self.calls: list[tuple[str, tuple, dict]] = []
        monkeypatch.setattr(ray, "is_initialized", lambda: initialized)
        for module, name in [(ray, "init"), (serve, "start"), (serve, "run"), (serve, "shutdown")]:
            monkeypatch.setattr(module, name, self.recording(name))

    def recording(self, name: str):
        def record(*args, **kwargs):
            self.calls.append((name, args, kwargs))

        return record


def test_serve_on_ray_starts_ray_and_the_proxy_and_runs_the_application(monkeypatch, served_model_dir):
    recorder = Recorder(monkeypatch, initialized=False)
    options = ServeOptions(host="0.0.0.0", port=9123, max_concurrent_requests=5, model_id="on-ray")
    assert (
        serve_on_ray(
            loader(served_model_dir),
            options,
            num_replicas=2,
            address="ray://head:10001",
            blocking=False,
            cpus_per_replica=3,
        )
        is None
    )
    assert [name for name, _, _ in recorder.calls] == ["init", "start", "run"]
    assert recorder.calls[0][1:] == (
        (),
        {"address": "ray://head:10001", "include_dashboard": False, "configure_logging": False},
    )
    assert recorder.calls[1][1:] == ((), {"http_options": {"host": "0.0.0.0", "port": 9123}})
    (app,), how = recorder.calls[2][1:]
    assert how == {"name": APP_NAME, "route_prefix": "/", "blocking": False}
    spec = config(app)
    assert (spec.name, spec.num_replicas, spec.max_ongoing_requests) == (DEPLOYMENT_NAME, 2, 5)
    assert spec.ray_actor_options == {"num_cpus": 3, "num_gpus": 0.0}
    server = make_replica(app).app.app.state.server  # each replica serves what the load given returns
    assert server.options.model_id == "on-ray" and server.options.threads == 3
    assert server.label_names() == LABELS  # the model folder given


def test_serve_on_ray_joins_a_running_ray_with_the_default_options(monkeypatch):
    recorder = Recorder(monkeypatch, initialized=True)
    serve_on_ray(lambda: None, blocking=False)
    assert [name for name, _, _ in recorder.calls] == ["start", "run"]
    assert recorder.calls[0][2] == {"http_options": {"host": "127.0.0.1", "port": 8080}}
    assert config(recorder.calls[1][1][0]).num_replicas == 1


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_on_ray_serves_until_a_signal_then_shuts_down_and_puts_the_handlers_back(monkeypatch, sig):
    recorder = Recorder(monkeypatch, initialized=True)
    caught: list[int] = []

    def before(signum, frame):
        caught.append(signum)

    previous = {s: signal.signal(s, before) for s in (signal.SIGTERM, signal.SIGINT)}
    served = threading.Event()
    calls_when_signalled: list[str] = []
    unheard: list[int] = []

    def send_signal_once_serving() -> None:
        """The signal, once serve_on_ray's handlers are in place (none if it returns or fails first),
        taken by this thread, not the main one: the kernel hands a signal sent to the process to any
        of its threads. If serving goes on, the main thread's own after 10 s (the test fails, not hangs)."""
        deadline = time.monotonic() + 60
        while signal.getsignal(sig) is before and not served.wait(0.005) and time.monotonic() < deadline:
            pass
        served.wait(0.5)  # longer than serve_on_ray's wait between looks at its signals: still serving?
        if signal.getsignal(sig) is not before and not served.is_set():
            calls_when_signalled.extend(name for name, _, _ in recorder.calls)
            signal.pthread_kill(threading.get_ident(), sig)
            if not served.wait(10):
                unheard.append(sig)
                signal.pthread_kill(threading.main_thread().ident, sig)

    sender = threading.Thread(target=send_signal_once_serving)
    sender.start()
    try:
        serve_on_ray(lambda: None)
        served.set()
        sender.join(30)
        assert calls_when_signalled == ["start", "run"]  # serving, not shut down yet
        assert unheard == []  # a signal taken by another thread than the main one stops it too
        assert [name for name, _, _ in recorder.calls] == ["start", "run", "shutdown"]
        assert caught == []  # the signal was serve_on_ray's
        assert signal.getsignal(signal.SIGTERM) is before and signal.getsignal(signal.SIGINT) is before
    finally:
        served.set()
        sender.join(30)
        for s, handler in previous.items():
            signal.signal(s, handler)


# ------------------------------------------------- on a local cluster, after the tests without one


class TestOnALocalCluster:
    """The deployment on its local cluster, shut down (the class's fixture) before the tests without one run."""

    def test_two_replicas_answer_the_exact_rows(self, base_url, hub):
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

    def test_the_apps_routes_and_errors_are_served_as_they_are(self, base_url, hub):
        info = httpx.get(f"{base_url}/info", timeout=30)
        assert info.status_code == 200 and info.json()["max_batch_tokens"] == 2048  # the options given
        health = httpx.get(f"{base_url}/health", timeout=30)
        assert health.status_code == 200 and health.json()["status"] == "ok"
        bad = httpx.post(f"{base_url}/embed", json={"inputs": 3}, timeout=30)
        assert bad.status_code == 422 and bad.json()["field"] == "inputs"
        tokens = httpx.post(f"{base_url}/tokenize", json={"inputs": "Hello world!"}, timeout=30)
        assert tokens.status_code == 200 and [t["id"] for t in tokens.json()[0]] == hub.encode("Hello world!").tolist()

    def test_deleting_the_application_answers_every_accepted_request_first(self, base_url, hub, delay_file):
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
