"""The server past one machine: the same ASGI app as ``roberta-ext serve``
(:func:`~roberta_ext.serve.app.create_app`) as a Ray Serve deployment, one per replica.

Each replica loads the model (with the ``load`` function given: it is pickled to the cluster,
so it must read files every node can read) and runs the very app ``roberta-ext serve`` runs:
its batching worker, its admission (429 with ``Retry-After``), its routes and errors. Ray Serve's
proxy spreads requests over ``num_replicas`` replicas; each replica's answer says which it was in
an ``X-Replica`` header. What Ray adds:

* **replicas**: ``num_replicas`` processes, placed by Ray over the cluster's nodes, each with
  ``cpus_per_replica`` CPUs (and as many torch threads, unless ``options.threads`` says);
* **health**: Ray asks each replica every ``health_check_period_s``; one whose model worker has
  stopped answers unhealthy and Ray replaces it (``GET /health`` says the same over HTTP);
* **graceful shutdown**: ``serve.delete``/``serve.shutdown`` (or SIGTERM to a process blocked in
  :func:`serve_on_ray`) stop sending a replica new requests, wait up to ``options.shutdown_wait_s`` for those
  it has, then end its worker after its queue is done — as SIGTERM does to the plain server.

Ray's own limit on requests in flight per replica is set to the app's
``max_concurrent_requests``, so that admission stays the app's (the same 429s), and the
replicas' queues are where requests wait to be batched.

Ray is an optional extra (``pip install roberta_ext[ray]``): this module imports it only when called.

>>> from roberta_ext.serve.ray_serve import REPLICA_HEADER
>>> REPLICA_HEADER
'x-replica'
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..inference.inputs import ServedModel
from .app import create_app
from .options import ServeOptions

if TYPE_CHECKING:
    from ray.serve import Application
    from starlette.applications import Starlette
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["APP_NAME", "DEPLOYMENT_NAME", "REPLICA_HEADER", "deployment", "serve_on_ray"]

APP_NAME = "roberta_ext"
"""The Ray Serve application's name (``serve.delete(APP_NAME)`` stops it)."""
DEPLOYMENT_NAME = "RobertaExt"
"""The deployment's name in the application (``serve.status()``)."""
REPLICA_HEADER = "x-replica"
"""The answer header naming the replica that answered (Ray Serve's replica id)."""


def _replica_id() -> str:
    from ray import serve
    from ray.serve.exceptions import RayServeException

    try:
        return str(serve.get_replica_context().replica_id.unique_id)
    except RayServeException:  # not in a replica (the app built by hand): the process will do
        return f"pid-{os.getpid()}"


class _NamingReplica:
    """ASGI middleware: every HTTP answer of ``app`` gets an ``X-Replica`` header; lifespan and
    everything else passes through untouched."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def named(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, named)


def deployment(
    load: Callable[[], ServedModel],
    options: ServeOptions | None = None,
    *,
    num_replicas: int = 1,
    cpus_per_replica: float = 1.0,
    gpus_per_replica: float = 0.0,
    health_check_period_s: float = 10.0,
) -> Application:
    """A Ray Serve application of ``num_replicas`` replicas, each serving what ``load()`` returns
    (a hub, or anything :func:`~roberta_ext.serve.app.create_app` takes) with ``options``
    (their ``host``/``port`` are the proxy's: see :func:`serve_on_ray`). Run it with
    ``serve.run(app, name=APP_NAME, route_prefix="/")``.

    >>> app = deployment(lambda: roberta_ext.from_pretrained("my-model"), num_replicas=2)  # doctest: +SKIP
    >>> serve.run(app, name=APP_NAME, route_prefix="/")                                   # doctest: +SKIP
    """
    from ray import serve

    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")
    options = options or ServeOptions()
    if options.threads is None and cpus_per_replica >= 1:
        # torch would take every core of the node in each replica; a replica has its share.
        options = _with_threads(options, int(cpus_per_replica))
    served_options = options
    built: dict[str, Starlette] = {}  # in each replica, its app (unpickled there: one per replica)

    def build() -> ASGIApp:  # runs in each replica, as it starts
        built["app"] = create_app(load(), served_options)
        return _NamingReplica(built["app"], _replica_id())

    class Replica:
        """One replica: the app (the ASGI wrapper Ray adds runs its lifespan, hence its worker)."""

        def check_health(self) -> None:
            server = built["app"].state.server
            if not server.worker.alive and not server.draining:
                raise RuntimeError("the model worker of this replica is not running")

    return serve.deployment(
        name=DEPLOYMENT_NAME,
        num_replicas=num_replicas,
        ray_actor_options={"num_cpus": cpus_per_replica, "num_gpus": gpus_per_replica},
        max_ongoing_requests=options.max_concurrent_requests,
        graceful_shutdown_timeout_s=options.shutdown_wait_s,
        graceful_shutdown_wait_loop_s=0.2,
        health_check_period_s=health_check_period_s,
    )(serve.ingress(build)(Replica)).bind()


def _with_threads(options: ServeOptions, threads: int) -> ServeOptions:
    from dataclasses import replace

    return replace(options, threads=threads)


def serve_on_ray(
    load: Callable[[], ServedModel],
    options: ServeOptions | None = None,
    *,
    num_replicas: int = 1,
    address: str | None = None,
    blocking: bool = True,
    **replicas: Any,
) -> None:
    """Deploy :func:`deployment` on the Ray cluster at ``address`` (default: ``RAY_ADDRESS``, else
    a local one started here), its HTTP proxy on ``options.host``:``options.port``. With
    ``blocking``, serve until SIGTERM or Ctrl-C, then shut down gracefully (every accepted
    request answered) and return. ``replicas``: :func:`deployment`'s other options.

    >>> load = lambda: roberta_ext.from_pretrained("my-model")                        # doctest: +SKIP
    >>> serve_on_ray(load, ServeOptions(port=8080), num_replicas=2)                  # doctest: +SKIP
    """
    import ray
    from ray import serve

    options = options or ServeOptions()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, configure_logging=False)
    serve.start(http_options={"host": options.host, "port": options.port})
    serve.run(
        deployment(load, options, num_replicas=num_replicas, **replicas),
        name=APP_NAME,
        route_prefix="/",
        blocking=False,
    )
    if not blocking:
        return
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        # A timed wait: Python runs signal handlers in this thread, and a signal the kernel hands to
        # another of the process's threads (Ray's, say) would never wake an untimed one.
        while not stop.wait(0.25):
            pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        serve.shutdown()  # each replica drains: accepted requests are answered first
