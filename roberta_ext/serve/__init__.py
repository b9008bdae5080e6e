"""An HTTP inference server over one loaded model: embeddings, classification, fill-mask,
tokenizing, with dynamic batching; a door onto the same features as the hub and the command line.

* :mod:`.app` — :func:`create_app` (a Starlette ASGI app: the route table) and :func:`run`
  (serve it with uvicorn; SIGTERM drains);
* :mod:`.server` — :class:`Server`: admission, body reading, the worker's tasks, error answers;
* :mod:`.routes` — the handlers: parse (a request model), call the library, render;
* :mod:`.schemas` — every request and answer body, declared once as pydantic models;
* :mod:`.validation` — bodies to request models, or a :class:`RequestError` naming the field;
* :mod:`.errors` — :class:`RequestError`, and the HTTP status of each library error, by class;
* :mod:`.worker` — :class:`BatchingWorker`: a bounded queue and one model thread that batches
  requests by a padded-token budget and scatters the results back;
* :mod:`.admission` — each request's expected wait, from the tokens queued ahead of it and the
  measured rate: one that would time out is refused 429 at once;
* :mod:`.options` — :class:`ServeOptions`, every setting declared once;
* :mod:`.metrics`, :mod:`.openapi` — ``GET /metrics`` and ``GET /openapi.json`` (derived from the models).

The server takes an already loaded model (a hub, or anything with ``model``, ``inputs`` and
``sentence_embedding``): ``roberta-ext serve MODEL`` loads it with the same model arguments as
every command. See docs/serving.md.

>>> from roberta_ext.serve import ServeOptions
>>> ServeOptions().host
'127.0.0.1'
"""

from .app import Server, create_app, run
from .errors import RequestError
from .options import ServeOptions
from .worker import BatchingWorker, Job, Overloaded, ShuttingDown, Task, WouldTimeOut

__all__ = [
    "BatchingWorker",
    "Job",
    "Overloaded",
    "RequestError",
    "ServeOptions",
    "Server",
    "ShuttingDown",
    "Task",
    "WouldTimeOut",
    "create_app",
    "run",
]
