"""One model served: :class:`Server` holds the model, its batching worker and its metrics, and
does what every route shares — admission (a worker slot before the body is read), reading and
validating the body, queueing model work and waiting for it, turning errors into JSON answers.
The routes' handlers (:mod:`.routes`) are written over it; :func:`~roberta_ext.serve.app.
create_app` puts the two together.

>>> server = Server(hub, ServeOptions())                          # doctest: +SKIP
>>> server.request_fields["/fill_mask"]                           # doctest: +SKIP
('inputs', 'top_k')
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import gc
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import orjson
import torch
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response

from ..data.tagging import without_fillers
from ..embedding.embedder import Embedder
from ..errors import RobertaExtError
from ..inference.head_outputs import classify_rows
from ..inference.inputs import ServedModel
from ..inference.predict import choose_head
from .errors import RequestError, answer_for
from .metrics import ServerMetrics
from .options import ServeOptions
from .schemas import RouteLimits, request_models
from .validation import parse_json_object, validated
from .worker import BatchingWorker, Job, Overloaded, Results, ShuttingDown, Slot, Task, WouldTimeOut

__all__ = ["JSONAnswer", "Server"]

logger = logging.getLogger("roberta_ext.serve")

Handler = Callable[[Request], Awaitable[Response]]

MAX_TOP_K = 100

WATCH_AFTER_S = 0.1
"""How long a request waits for the model before the server watches whether its client left."""

_admitted: contextvars.ContextVar[tuple[Slot, Request] | None] = contextvars.ContextVar(
    "roberta_ext_serve_admitted", default=None
)
"""The request being handled by a route that queues model work, and the worker slot it took
(:meth:`Server.route`): :meth:`Server.compute` queues the request's work in that slot, and
drops it if the client hangs up. Each request runs in a task of its own, so each sees its own."""


class JSONAnswer(JSONResponse):
    """A JSON answer rendered by orjson, numpy arrays included: a float32 vector is written as
    float32 (the shortest text that reads back to the same float32, as TEI's serde_json writes
    it), not as the float64 expansion ``json.dumps(tensor.tolist())`` gives. Rendering a 768-float
    embedding took 16 us against the json module's 309 us, on the event loop every request shares,
    and the text is 45% shorter.

    >>> JSONAnswer({"embedding": torch.tensor([0.1, -2.5]).numpy()}).body
    b'{"embedding":[0.1,-2.5]}'
    """

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)


class Server:
    """One model served: the worker, the metrics, the request models, and the plumbing of every
    route. :func:`~roberta_ext.serve.app.create_app` builds the Starlette app around it
    (``app.state.server``)."""

    def __init__(self, served: ServedModel, options: ServeOptions) -> None:
        self.served = served
        self.options = options
        self.model = served.model
        self.inputs = served.inputs
        self.dictionary = served.inputs.dictionary
        self.labels: Sequence[str] | None = getattr(served, "labels", None)
        self.mask_token: str | None = getattr(served, "mask_token", None)
        self.mask_spellings: tuple[str, ...] = tuple(
            getattr(served, "mask_spellings", (self.mask_token,) if self.mask_token else ())
        )
        self.metrics = ServerMetrics()
        self.worker = BatchingWorker(
            max_batch_tokens=options.max_batch_tokens,
            max_batch_requests=options.max_batch_requests,
            max_concurrent_requests=options.max_concurrent_requests,
            threads=options.threads,
            metrics=self.metrics,
        )
        self.model.eval()  # the server owns the model now: no dropout in any head
        self._embedders: dict[tuple[str | None, bool], Embedder] = {}
        self.default_embedder = self.embedder(None, normalize=True)
        self.limits = RouteLimits(
            max_items=options.max_client_batch_size,
            dimension=self.default_embedder.dimension,
            vocab_size=len(self.dictionary),
            textless_ids=tuple(i for i, s in enumerate(self.dictionary.symbols) if s.startswith("madeupword")),
            heads=tuple(sorted(self.model.classification_heads)),
            prompts=tuple(sorted(served.sentence_embedding.prompts)),
            max_top_k=min(MAX_TOP_K, len(self.dictionary)),
            mask_spellings=self.mask_spellings if self.model.has_lm_head and self.mask_token is not None else (),
            auto_truncate=options.auto_truncate,
        )
        """What this model and these options let a request ask (the request models' ranges)."""
        self.models = request_models(self.limits, choose_head=functools.partial(choose_head, self.model))
        """The request model of each POST route: its validation and its OpenAPI schema."""
        self.started_at = time.time()
        self.draining = False
        """Whether shutdown has begun (:meth:`drain`)."""
        self._reading: set[asyncio.Timeout] = set()  # the deadlines of the bodies being read

    @property
    def request_fields(self) -> dict[str, tuple[str, ...]]:
        """The fields each POST route takes: its request model's."""
        return {path: tuple(model.model_fields) for path, model in self.models.items()}

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Start the worker with the app; at shutdown (after uvicorn has answered every accepted
        request), finish whatever is still queued and end the worker.

        While it serves, what was alive when it started (the model, the tokenizer's tables, the
        libraries) is out of the cyclic garbage collector's reach (``gc.freeze``): a full
        collection walked all of it, holding the GIL, every few hundred requests — 43% of the
        event loop's time and a stall of the model thread's Python, on a 6 x 384 model at 32
        clients. Handed back at shutdown."""
        gc.collect()
        gc.freeze()
        self.worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.worker.stop)
            gc.unfreeze()

    def route(self, endpoint: str, handler: Handler, *, openai: bool = False, queues: bool = False) -> Handler:
        """``handler`` with errors turned into JSON answers and every answer counted and timed.

        A route that ``queues`` model work takes a worker slot before anything else: a request
        refused 429 (or 503 at shutdown) costs no reading, parsing or tokenizing of its body, so
        a storm of retrying clients cannot starve the requests admitted. The slot is released
        when the request ends, however it ends (answer, error, timeout, client gone)."""

        async def answer(request: Request) -> Response:
            begun = time.monotonic()
            failure: RequestError | None = None
            slot, token = None, None
            try:
                if queues:
                    slot = self.admit()
                    token = _admitted.set((slot, request))
                response = await handler(request)
            except ClientDisconnect:  # gone mid-body or while waiting: no one to answer, and no server fault
                logger.debug("%s: the client closed the connection before its answer", endpoint)
                failure = RequestError(499, "the client closed the connection before its answer", kind="ClientClosed")
            except RobertaExtError as error:  # a refusal, or a library error answered by its class (errors.py)
                failure = answer_for(error)
                if failure.status >= 500 and failure is not error:  # a failure of the library, not a refusal
                    logger.exception("%s failed", endpoint)
            except Exception as error:  # a bug: still a JSON answer naming it, and the server goes on
                logger.exception("%s failed", endpoint)
                failure = RequestError(500, f"{type(error).__name__}: {error}", kind="Backend")
            finally:
                if token is not None:
                    _admitted.reset(token)
                if slot is not None:
                    slot.release()
            if failure is not None:
                response = self.error_response(failure, openai=openai)
                self.metrics.errors.labels(endpoint, failure.kind).inc()
            self.metrics.requests.labels(endpoint, str(response.status_code)).inc()
            self.metrics.request_duration.labels(endpoint).observe(time.monotonic() - begun)
            return response

        return answer

    @staticmethod
    def error_response(error: RequestError, *, openai: bool = False) -> JSONAnswer:
        """``{"error", "error_type", "field"}`` (schemas.ErrorBody), or OpenAI's shape (schemas.OpenAIErrorBody)."""
        if openai:
            body: dict[str, Any] = {
                "error": {"message": error.message, "type": error.kind, "param": error.field, "code": error.status}
            }
        else:
            body = {"error": error.message, "error_type": error.kind}
            if error.field is not None:
                body["field"] = error.field
        return JSONAnswer(body, status_code=error.status, headers=error.headers)

    def admit(self) -> Slot:
        """A worker slot for the request about to be read: 429 with ``Retry-After`` when all
        ``max_concurrent_requests`` are taken, 503 once the server is stopping."""
        try:
            return self.worker.admit()
        except (Overloaded, ShuttingDown) as error:
            raise self.refusal(error) from None

    def refusal(self, error: Overloaded | ShuttingDown) -> RequestError:
        if isinstance(error, ShuttingDown):
            return RequestError(503, str(error), kind="Unhealthy")
        # Refused on the expected wait: when it would fit, from the same estimate; else (every
        # slot taken, before the body is read) the configured --retry-after.
        wait = error.retry_after_s if isinstance(error, WouldTimeOut) else self.options.retry_after_s
        return RequestError(429, str(error), kind="Overloaded", headers={"Retry-After": str(wait)})

    def drain(self) -> None:
        """Shutdown has begun (uvicorn stopped accepting): a request whose body has not all
        arrived is answered 503 now rather than holding the shutdown for its grace period, at
        whose end uvicorn would cut it off with a plain-text 500. Called on the event loop."""
        self.draining = True
        now = asyncio.get_running_loop().time()
        for deadline in self._reading:
            if not deadline.expired():  # one expiring is answered 408 already
                deadline.reschedule(now)

    async def read(self, request: Request, route: str) -> Any:
        """The body of a request to ``route``, validated by the route's request model."""
        answer = validated(self.models[route], await self.read_json(request), route=route)
        if isinstance(answer, RequestError):
            raise answer
        return answer

    async def read_json(self, request: Request) -> dict[str, Any]:
        """The body's JSON object, read at most ``payload_limit`` bytes far (413 beyond) and
        within ``timeout_s`` (408 after; 503 once the server is stopping), so that a client
        sending slowly or not at all cannot hold a slot and a connection for ever."""
        limit = self.options.payload_limit
        declared = request.headers.get("content-length", "")
        too_large = RequestError(413, f"the body is larger than the limit of {limit} bytes", field="body")
        if declared.isdigit() and int(declared) > limit:
            raise too_large
        chunks, size = [], 0
        try:
            # Stopping: a body already received is read, one still on its way is not waited for.
            async with asyncio.timeout(0 if self.draining else self.options.timeout_s) as deadline:
                self._reading.add(deadline)
                try:
                    async for chunk in request.stream():
                        size += len(chunk)
                        if size > limit:
                            raise too_large
                        chunks.append(chunk)
                finally:
                    self._reading.discard(deadline)
        except TimeoutError:
            # The rest of the body may still come: close the connection rather than read it as a request.
            close = {"Connection": "close"}
            if self.draining:
                raise RequestError(
                    503, "the server is shutting down and the body had not all arrived", kind="Unhealthy", headers=close
                ) from None
            raise RequestError(
                408,
                f"the body did not arrive within {self.options.timeout_s:g} s ({size} bytes came)",
                kind="Timeout",
                field="body",
                headers=close,
            ) from None
        return parse_json_object(b"".join(chunks))

    async def compute(self, task: Task, items: Sequence[Any], lengths: Sequence[int]) -> Results:
        """Queue the items for the worker, in the request's slot, and wait for their results,
        within ``timeout_s``: 429 at once, before any model work, when the work queued ahead
        would not let them be done in time (:class:`~roberta_ext.serve.worker.WouldTimeOut`).
        A job whose request ends first (timed out, or its client hung up) is cancelled: the
        worker skips it if it has not begun, and the slot is freed at once."""
        admitted = _admitted.get()
        job = Job(task, items, lengths)
        try:
            self.worker.submit(job, slot=admitted[0] if admitted is not None else None, within=self.options.timeout_s)
        except (Overloaded, ShuttingDown) as error:
            raise self.refusal(error) from None
        # Most answers come at once; one still waiting after a moment watches its connection, so
        # that work whose client has left (its own timeout, a crash) is dropped, not computed.
        watch = _HangUpWatch(admitted[1], job, after=WATCH_AFTER_S) if admitted is not None else None
        try:
            results = await asyncio.wait_for(asyncio.wrap_future(job.future), self.options.timeout_s)
        except TimeoutError:
            # wait_for cancelled the job's future already: the worker skips it if it has not begun.
            raise RequestError(
                504, f"the request did not finish within {self.options.timeout_s:g} s", kind="Timeout"
            ) from None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if watch is None or not watch.left or (current is not None and current.cancelling()):
                raise  # this task itself was cancelled (uvicorn's grace period ended)
            raise ClientDisconnect() from None
        except Exception as error:
            raise RequestError(
                500, f"the model failed on this request: {type(error).__name__}: {error}", kind="Backend"
            ) from None
        finally:
            if watch is not None:
                watch.stop()
        if watch is not None and watch.left:  # it was running already: its answer has no one to go to
            raise ClientDisconnect()
        if isinstance(results, torch.Tensor) and results.is_floating_point() and not bool(results.isfinite().all()):
            # JSON has no NaN: an answer of nulls would hide the failure (a float16 overflow, damaged weights).
            raise RequestError(
                500, "the model gave non-finite values (NaN or infinity) for this request", kind="Backend"
            )
        return results

    # ------------------------------------------------------------------ the library's work, as tasks

    def embedder(self, prompt_name: str | None, normalize: bool) -> Embedder:
        """The model's own embedding settings with this prompt and normalisation (cached)."""
        key = (prompt_name, normalize)
        if key not in self._embedders:
            self._embedders[key] = Embedder.create(
                self.model,
                self.inputs,
                self.served.sentence_embedding,
                prompt_name=prompt_name,
                normalize=normalize,
                max_tokens=self.options.max_batch_tokens,
                batch_size=self.options.max_batch_requests,
            )
        return self._embedders[key]

    def embedding_task(self, embedder: Embedder) -> Task:
        return Task(
            ("embed", embedder.pooling, embedder.normalize, embedder.skip),
            lambda rows: embedder.embed_ids(rows).cpu(),  # (N, D) float32
        )

    def classify_task(self, head: str) -> Task:
        model, inputs, options = self.model, self.inputs, self.options

        def compute(rows: Sequence[list[int]]) -> torch.Tensor:  # (N, outputs)
            return classify_rows(
                model, inputs, head, rows, max_tokens=options.max_batch_tokens, batch_size=options.max_batch_requests
            )

        return Task(("predict", head), compute)

    def label_names(self) -> list[str] | None:
        """The model's labels (``label/dict.txt``'s) without the ``madeupwordNNNN`` fillers
        ``fairseq-preprocess`` pads that dictionary with, at its end (as
        :func:`~roberta_ext.data.tagging.without_fillers`): class k is still ``labels[k]``, as
        the library's ``predict`` names it."""
        return None if self.labels is None else without_fillers(self.labels)

    def class_names(self, outputs: int) -> list[str]:
        """Label names of a head's classes: ``label/dict.txt``'s, else ``LABEL_k`` as transformers names them."""
        labels = self.label_names()
        if labels is not None and len(labels) >= outputs:
            return labels[:outputs]
        return [f"LABEL_{k}" for k in range(outputs)]

    def special_ids(self) -> set[int]:
        d = self.dictionary
        specials = {d.bos(), d.eos(), d.pad(), d.unk(), *range(d.nspecial)}
        if self.mask_token is not None and self.mask_token in d:
            specials.add(d.index(self.mask_token))
        return specials


class _HangUpWatch:
    """Watches the connection of a request whose body has been read, from ``after`` seconds on
    (a task per request from the start cost 20% of the requests/s of small requests): when the
    client hangs up, :attr:`left` is set and the request's job cancelled (the worker skips it if
    it has not begun). :meth:`stop` when the request ends."""

    def __init__(self, request: Request, job: Job, *, after: float) -> None:
        self.left = False
        self._watching: asyncio.Task[None] | None = None
        self._timer = asyncio.get_running_loop().call_later(after, self._start, request, job)

    def _start(self, request: Request, job: Job) -> None:
        self._watching = asyncio.ensure_future(self._watch(request, job))

    async def _watch(self, request: Request, job: Job) -> None:
        # The body has been read: all the connection can still say is that the client left.
        while (await request.receive())["type"] != "http.disconnect":
            pass
        self.left = True
        job.future.cancel()

    def stop(self) -> None:
        self._timer.cancel()
        if self._watching is not None:
            self._watching.cancel()
