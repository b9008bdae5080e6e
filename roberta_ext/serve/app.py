"""The HTTP server: a Starlette (ASGI) app over one loaded model (:func:`create_app`), and
:func:`run`, which serves it with uvicorn.

Routes, with text-embeddings-inference's (TEI's) request and response shapes where TEI has the
route: ``POST /embed``, ``POST /v1/embeddings`` (OpenAI's shape), ``POST /predict``,
``POST /fill_mask``, ``POST /tokenize``, ``POST /decode``, ``GET /health``, ``GET /info``,
``GET /metrics`` (Prometheus), ``GET /openapi.json``. Errors are JSON naming what is wrong:
``{"error": ..., "error_type": ..., "field": ...}`` (``/v1/embeddings``: OpenAI's
``{"error": {"message", "type", "param", "code"}}``).

Handlers run on the event loop. A route that queues model work first takes a worker slot,
before the body is read (a refusal, 429, costs no parsing or tokenizing); handlers then read the
body (within ``timeout_s``: 408 after) and validate it with the route's request model
(:mod:`.schemas`, from which ``/openapi.json`` comes too), call the library (which refuses an
input too long, 413, before it is queued), and hand the rows to the
:class:`~roberta_ext.serve.worker.BatchingWorker`, whose one thread runs the model. The app takes
an already loaded model (anything with ``model``, ``inputs`` and ``sentence_embedding``, as
:class:`~roberta_ext.inference.inputs.ServedModel` says; a hub is one, and its ``labels`` and
``mask_token`` are used when present): loading is the command line's job.

* :mod:`.server` — :class:`Server`: the worker, the metrics, admission, body reading, errors;
* :mod:`.routes` — the handlers: parse, call the library, render.

>>> app = create_app(hub, ServeOptions(max_batch_tokens=2048))     # doctest: +SKIP
>>> run(hub, ServeOptions(port=8080))                              # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import functools
import math
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..inference.inputs import ServedModel
from . import routes
from .errors import RequestError
from .options import ServeOptions
from .server import JSONAnswer, Server

if TYPE_CHECKING:
    import socket

    import uvicorn

__all__ = ["JSONAnswer", "Server", "create_app", "run", "uvicorn_server"]

POST, GET = ["POST"], ["GET"]


def create_app(served: ServedModel, options: ServeOptions | None = None) -> Starlette:
    """A Starlette app serving ``served`` (a hub, or anything with ``model``, ``inputs`` and
    ``sentence_embedding``); its worker starts and stops with the app's lifespan.

    Use it as any ASGI app: :func:`run` serves it with uvicorn; ``uvicorn --factory
    my_module:make_app --workers 4`` runs replicas of a factory that loads the model and calls this.
    """
    server = Server(served, options or ServeOptions())

    def route(path: str, endpoint: str, handler: routes.Handler, methods: list[str], **how: bool) -> Route:
        return Route(path, server.route(endpoint, functools.partial(handler, server), **how), methods=methods)

    table = [
        route("/embed", "embed", routes.embed, POST, queues=True),
        route("/v1/embeddings", "v1/embeddings", routes.openai_embeddings, POST, openai=True, queues=True),
        route("/predict", "predict", routes.predict, POST, queues=True),
        route("/fill_mask", "fill_mask", routes.fill_mask, POST, queues=True),
        route("/tokenize", "tokenize", routes.tokenize, POST),
        route("/decode", "decode", routes.decode, POST),
        route("/health", "health", routes.health, GET),
        route("/info", "info", routes.info, GET),
        Route("/metrics", functools.partial(routes.prometheus, server), methods=GET),
        Route("/openapi.json", functools.partial(routes.openapi, server), methods=GET),
    ]

    async def http_error(request: Request, error: Exception) -> Response:
        assert isinstance(error, HTTPException)
        failure = RequestError(
            error.status_code,
            f"{request.method} {request.url.path}: {error.detail}",
            kind="Route",
            headers=error.headers,  # a 405's Allow: the methods the path takes
        )
        return Server.error_response(failure)

    app = Starlette(routes=table, lifespan=server.lifespan, exception_handlers={HTTPException: http_error})
    app.state.server = server
    return app


def uvicorn_server(app: Starlette, options: ServeOptions) -> uvicorn.Server:
    """The uvicorn server :func:`run` runs ``app`` (from :func:`create_app`) with. When its
    shutdown begins (SIGTERM, or ``should_exit``), it tells the app (:meth:`Server.drain`)."""
    import uvicorn

    class Draining(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            app.state.server.drain()
            await super().shutdown(sockets)

    config = uvicorn.Config(
        app,
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        access_log=options.access_log,
        timeout_graceful_shutdown=math.ceil(options.shutdown_wait_s),
        lifespan="on",
    )
    return Draining(config)


@contextlib.contextmanager
def _sigterm_handled_by_uvicorn() -> Iterator[None]:
    """While uvicorn serves, SIGTERM is its cue for a graceful shutdown; once done, uvicorn sends
    the signal again to the handler it found, so that the default action (death by SIGTERM,
    status 143) would still happen. That handler is a no-op here: a drained server exits 0."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: None)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(served: ServedModel, options: ServeOptions | None = None) -> None:
    """Serve ``served`` with uvicorn until SIGTERM or Ctrl-C: then stop accepting connections,
    answer every request already accepted (waiting up to ``options.shutdown_wait_s``), finish the
    worker's queue and return. ``RuntimeError`` if the server could not start (a port in use)."""
    options = options or ServeOptions()
    server = uvicorn_server(create_app(served, options), options)
    with _sigterm_handled_by_uvicorn():
        server.run()
    if not server.started:
        raise RuntimeError(f"the server could not start on {options.host}:{options.port}")
