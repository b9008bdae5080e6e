"""The HTTP server: a Starlette (ASGI) app over one loaded model, its batching worker, and
:func:`run`, which serves it with uvicorn.

Routes, with text-embeddings-inference's (TEI's) request and response shapes where TEI has the
route: ``POST /embed``, ``POST /v1/embeddings`` (OpenAI's shape), ``POST /predict``,
``POST /fill_mask``, ``POST /tokenize``, ``POST /decode``, ``GET /health``, ``GET /info``,
``GET /metrics`` (Prometheus), ``GET /openapi.json``. Errors are JSON naming what is wrong:
``{"error": ..., "error_type": ..., "field": ...}`` (``/v1/embeddings``: OpenAI's
``{"error": {"message", "type", "param", "code"}}``).

Handlers run on the event loop. A route that queues model work first takes a worker slot,
before the body is read (a refusal, 429, costs no parsing or tokenizing); handlers then read and
check the body (within ``timeout_s``: 408 after), tokenize (so that an input too long is
answered 413 before it is queued), and hand the rows to the
:class:`~roberta_ext.serve.worker.BatchingWorker`, whose one thread runs the model. The app takes
an already loaded model (anything with ``model``, ``inputs`` and ``sentence_embedding``, as
:class:`~roberta_ext.inference.inputs.ServedModel` says; a hub is one, and its ``labels`` and
``mask_token`` are used when present): loading is the command line's job.

>>> app = create_app(hub, ServeOptions(max_batch_tokens=2048))     # doctest: +SKIP
>>> run(hub, ServeOptions(port=8080))                              # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import contextvars
import dataclasses
import functools
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import orjson
import torch
import torch.nn.functional as F
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..data.tagging import without_fillers
from ..embedding.embedder import Embedder
from ..errors import RobertaExtError
from ..inference.head_outputs import classify_rows, fill_mask
from ..inference.inputs import ServedModel
from ..modeling import EncoderModel
from ..tokenizers.registry import kind_of
from .errors import answer_for
from .metrics import CONTENT_TYPE, ServerMetrics
from .openapi import RouteLimits, openapi_description, request_fields
from .options import ServeOptions
from .validation import (
    RequestError,
    bool_field,
    choice_field,
    ids_field,
    int_field,
    known_fields,
    parse_json_object,
    predict_inputs_field,
    str_field,
    texts_field,
)
from .worker import BatchingWorker, Job, Overloaded, Results, ShuttingDown, Slot, Task

if TYPE_CHECKING:
    import socket

    import uvicorn

__all__ = ["Server", "create_app", "run"]

logger = logging.getLogger("roberta_ext.serve")

Handler = Callable[[Request], Awaitable[Response]]

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


MAX_TOP_K = 100

WATCH_AFTER_S = 0.1
"""How long a request waits for the model before the server watches whether its client left."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("roberta_ext")
    except PackageNotFoundError:
        return "unknown"


class Server:
    """One model served: the handlers of every route, the worker, the metrics. :func:`create_app`
    builds the Starlette app around it (``app.state.server``)."""

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
        self.started_at = time.time()
        self.draining = False
        """Whether shutdown has begun (:meth:`drain`)."""
        self._reading: set[asyncio.Timeout] = set()  # the deadlines of the bodies being read

    # ------------------------------------------------------------------ plumbing

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        """Start the worker with the app; at shutdown (after uvicorn has answered every accepted
        request), finish whatever is still queued and end the worker."""
        self.worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.worker.stop)

    def route(self, endpoint: str, handler: Handler, *, openai: bool = False, queues: bool = False) -> Handler:
        """``handler`` with errors turned into JSON answers and every answer counted and timed.

        A route that ``queues`` model work takes a worker slot before anything else: a request
        refused 429 (or 503 at shutdown) costs no reading, parsing or tokenizing of its body, so
        a storm of retrying clients cannot starve the requests admitted. The slot is released
        when the request ends, however it ends (answer, error, timeout, client gone)."""

        async def answer(request: Request) -> Response:
            begun = time.monotonic()
            kind = None
            slot, token = None, None
            try:
                if queues:
                    slot = self.admit()
                    token = _admitted.set((slot, request))
                response = await handler(request)
            except RequestError as error:
                kind = error.kind
                response = self.error_response(error, openai=openai)
            except ClientDisconnect:  # gone mid-body or while waiting: no one to answer, and no server fault
                logger.debug("%s: the client closed the connection before its answer", endpoint)
                kind = "ClientClosed"
                gone = RequestError(499, "the client closed the connection before its answer", kind=kind)
                response = self.error_response(gone, openai=openai)
            except RobertaExtError as error:  # a library error: answered by its class (serve/errors.py)
                answered = answer_for(error)
                if answered.status >= 500:
                    logger.exception("%s failed", endpoint)
                kind = answered.kind
                response = self.error_response(answered, openai=openai)
            except Exception as error:  # a bug: still a JSON answer naming it, and the server goes on
                logger.exception("%s failed", endpoint)
                kind = "Backend"
                failure = RequestError(500, f"{type(error).__name__}: {error}", kind=kind)
                response = self.error_response(failure, openai=openai)
            finally:
                if token is not None:
                    _admitted.reset(token)
                if slot is not None:
                    slot.release()
            self.metrics.requests.labels(endpoint, str(response.status_code)).inc()
            if kind is not None:
                self.metrics.errors.labels(endpoint, kind).inc()
            self.metrics.request_duration.labels(endpoint).observe(time.monotonic() - begun)
            return response

        return answer

    @staticmethod
    def error_response(error: RequestError, *, openai: bool = False) -> JSONAnswer:
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
        return RequestError(
            429, str(error), kind="Overloaded", headers={"Retry-After": str(self.options.retry_after_s)}
        )

    def drain(self) -> None:
        """Shutdown has begun (uvicorn stopped accepting): a request whose body has not all
        arrived is answered 503 now rather than holding the shutdown for its grace period, at
        whose end uvicorn would cut it off with a plain-text 500. Called on the event loop."""
        self.draining = True
        now = asyncio.get_running_loop().time()
        for deadline in self._reading:
            if not deadline.expired():  # one expiring is answered 408 already
                deadline.reschedule(now)

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
        try:
            return parse_json_object(b"".join(chunks))
        except RecursionError:  # json's parser recurses once per nested [ or {
            raise RequestError(
                400, "the body is not JSON this server reads: its lists or objects nest too deeply", field="body"
            ) from None

    async def compute(self, task: Task, items: Sequence[Any], lengths: Sequence[int]) -> Results:
        """Queue the items for the worker, in the request's slot, and wait for their results,
        within ``timeout_s``. A job whose request ends first (timed out, or its client hung up)
        is cancelled: the worker skips it if it has not begun, and the slot is freed at once."""
        admitted = _admitted.get()
        job = Job(task, items, lengths)
        try:
            self.worker.submit(job, slot=admitted[0] if admitted is not None else None)
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

    # ------------------------------------------------------------------ embeddings

    def embedder(self, prompt_name: str | None, normalize: bool) -> Embedder:
        """The model's own embedding settings with this prompt and normalisation (cached)."""
        key = (prompt_name, normalize)
        if key not in self._embedders:
            try:
                self._embedders[key] = Embedder.create(
                    self.model,
                    self.inputs,
                    self.served.sentence_embedding,
                    prompt_name=prompt_name,
                    normalize=normalize,
                    max_tokens=self.options.max_batch_tokens,
                    batch_size=self.options.max_batch_requests,
                )
            except KeyError as error:
                raise RequestError(422, str(error.args[0]), field="prompt_name") from None
        return self._embedders[key]

    def encode_for_embedding(
        self,
        embedder: Embedder,
        items: Sequence[Any],
        fields: Sequence[str],
        truncate: bool,
        *,
        how_to_cut: str = "set truncate to cut it",
    ) -> list[list[int]]:
        """Ids of each item as ``embed`` encodes it; an item longer than the model takes is cut
        when ``truncate``, else answered 413 naming its field and length, and ``how_to_cut``
        (the route's way: its ``truncate`` field, or the server's ``--auto-truncate``)."""
        if truncate:
            return [embedder.encode(item) for item in items]
        whole = dataclasses.replace(embedder, max_length=sys.maxsize)  # the same encoding, uncut
        rows = []
        for item, field in zip(items, fields):
            ids = whole.encode(item)
            if len(ids) > embedder.max_length:
                raise RequestError(
                    413,
                    f"{field} is {len(ids)} tokens long, more than the maximum of {embedder.max_length} ({how_to_cut})",
                    field=field,
                )
            rows.append(ids)
        return rows

    def embedding_task(self, embedder: Embedder) -> Task:
        return Task(
            ("embed", embedder.pooling, embedder.normalize, embedder.skip),
            lambda rows: embedder.embed_ids(rows).cpu(),  # (N, D) float32
        )

    async def embeddings(
        self,
        items: Sequence[Any],
        fields: Sequence[str],
        *,
        truncate: bool,
        normalize: bool,
        prompt_name: str | None,
        dimensions: int | None,
        how_to_cut: str = "set truncate to cut it",
    ) -> tuple[torch.Tensor, int]:
        """Embeddings ``(N, D)`` of the items (``dimensions``: the first that many values,
        normalised again when ``normalize``), and the tokens they took."""
        embedder = self.embedder(prompt_name, normalize)
        rows = self.encode_for_embedding(embedder, items, fields, truncate, how_to_cut=how_to_cut)
        lengths = [len(row) for row in rows]
        vectors = await self.compute(self.embedding_task(embedder), rows, lengths)
        assert isinstance(vectors, torch.Tensor)
        if dimensions is not None and dimensions < vectors.size(1):
            vectors = vectors[:, :dimensions]
            if normalize:
                vectors = F.normalize(vectors, p=2, dim=-1)
        return vectors, sum(lengths)

    async def embed(self, request: Request) -> Response:
        """TEI's ``POST /embed``: ``{"inputs": text | [text, ...], "normalize": true, "truncate":
        false, "prompt_name": null, "dimensions": null}`` -> ``[[float, ...], ...]``."""
        body = await self.read_json(request)
        self.check_fields(body, "/embed")
        items, single = texts_field(body, "inputs", max_items=self.options.max_client_batch_size, pairs=True)
        choice_field(body, "truncation_direction", "right", ("right",))
        vectors, _ = await self.embeddings(
            items,
            ["inputs"] if single else [f"inputs[{i}]" for i in range(len(items))],
            truncate=bool_field(body, "truncate", self.options.auto_truncate),
            normalize=bool_field(body, "normalize", True),
            prompt_name=str_field(body, "prompt_name", None),
            dimensions=int_field(body, "dimensions", None, minimum=1, maximum=self.default_embedder.dimension),
        )
        return JSONAnswer(vectors.contiguous().numpy())

    async def openai_embeddings(self, request: Request) -> Response:
        """OpenAI's ``POST /v1/embeddings``: ``{"input": text | [text, ...], "model": ...,
        "encoding_format": "float" | "base64", "dimensions": null}``; normalised vectors, as TEI gives."""
        body = await self.read_json(request)
        self.check_fields(body, "/v1/embeddings")
        value = body.get("input")
        if isinstance(value, list) and value and all(map(_token_ids, value)):
            raise RequestError(
                422,
                "input must be a text or a list of texts: token ids (OpenAI's token arrays) are not accepted",
                field="input",
            )
        items, single = texts_field(body, "input", max_items=self.options.max_client_batch_size)
        str_field(body, "model", None)
        str_field(body, "user", None)
        encoding = choice_field(body, "encoding_format", "float", ("float", "base64"))
        vectors, tokens = await self.embeddings(
            items,
            ["input"] if single else [f"input[{i}]" for i in range(len(items))],
            truncate=self.options.auto_truncate,  # TEI's rule: OpenAI's API has no truncate field
            normalize=True,
            prompt_name=None,
            dimensions=int_field(body, "dimensions", None, minimum=1, maximum=self.default_embedder.dimension),
            how_to_cut="this route cuts long inputs only when the server runs with --auto-truncate",
        )
        if encoding == "base64":  # little-endian float32, as OpenAI's clients decode it
            data: list[Any] = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors.numpy()]
        else:
            data = list(vectors.contiguous().numpy())
        return JSONAnswer(
            {
                "object": "list",
                "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(data)],
                "model": self.options.model_id,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    # ------------------------------------------------------------------ heads

    def choose_head(self, name: str | None) -> str:
        heads = sorted(self.model.classification_heads)
        if name is not None:
            if name not in heads:
                raise RequestError(
                    422, f"the model has no classification head {name!r}; its heads: {heads}", field="head"
                )
            return name
        if len(heads) == 1:
            return heads[0]
        if not heads:
            raise RequestError(422, "the model has no classification head to predict with", field="head")
        raise RequestError(422, f"the model has {len(heads)} classification heads, {heads}: name one", field="head")

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

    def classify_task(self, head: str) -> Task:
        model, inputs, options = self.model, self.inputs, self.options

        def compute(rows: Sequence[list[int]]) -> torch.Tensor:  # (N, outputs)
            return classify_rows(
                model, inputs, head, rows, max_tokens=options.max_batch_tokens, batch_size=options.max_batch_requests
            )

        return Task(("predict", head), compute)

    async def predict(self, request: Request) -> Response:
        """TEI's ``POST /predict``: ``{"inputs": text | [a, b] | [[a], [a, b], ...], "raw_scores":
        false, "truncate": false, "truncation_direction": "right", "head": null}`` -> ``[{"score",
        "label"}, ...]`` sorted by score (a batch: one such list per item). A one-output head
        (regression) gives its value as the score. ``truncate`` cuts as ``/embed`` does: a text
        at its end, a pair its longer side first."""
        body = await self.read_json(request)
        self.check_fields(body, "/predict")
        items, single = predict_inputs_field(body, "inputs", max_items=self.options.max_client_batch_size)
        head = self.choose_head(str_field(body, "head", None))
        raw = bool_field(body, "raw_scores", False)
        truncate = bool_field(body, "truncate", self.options.auto_truncate)
        choice_field(body, "truncation_direction", "right", ("right",))
        limit = self.inputs.max_positions
        rows = []
        for i, texts in enumerate(items):
            ids = self.inputs.encode(*texts)
            if len(ids) > limit:
                if not truncate:
                    field = "inputs" if single else f"inputs[{i}]"
                    raise RequestError(
                        413,
                        f"{field} is {len(ids)} tokens long, more than the maximum of {limit} (set truncate to cut it)",
                        field=field,
                    )
                ids = self.inputs.encode_truncated(texts, limit)  # longest_first, </s> kept
            rows.append(ids)
        logits = await self.compute(self.classify_task(head), rows, [len(row) for row in rows])
        assert isinstance(logits, torch.Tensor)
        names = self.class_names(logits.size(1))
        scores = logits if raw or logits.size(1) == 1 else logits.softmax(dim=-1)
        answers = []
        for row in scores.float().numpy():  # float32 scalars: written as float32 text, as vectors are
            order = sorted(range(len(row)), key=lambda k: -row[k])
            answers.append([{"score": row[k], "label": names[k]} for k in order])
        return JSONAnswer(answers[0] if single else answers)

    async def fill_mask(self, request: Request) -> Response:
        """``POST /fill_mask``: ``{"inputs": text | [text, ...], "top_k": 5}``, each text with one
        mask -> ``[{"score", "token_str", "sequence"}, ...]`` (a list of texts: one list each)."""
        if not self.model.has_lm_head or self.mask_token is None:
            raise RequestError(422, "this model has no masked-LM head, so it cannot fill masks", field="inputs")
        body = await self.read_json(request)
        self.check_fields(body, "/fill_mask")
        items, single = texts_field(body, "inputs", max_items=self.options.max_client_batch_size)
        top_k = int_field(body, "top_k", 5, minimum=1, maximum=min(MAX_TOP_K, len(self.dictionary)))
        assert top_k is not None
        mask, limit = self.mask_token, self.inputs.max_positions
        texts, lengths = [], []
        for i, text in enumerate(items):
            field = "inputs" if single else f"inputs[{i}]"
            assert isinstance(text, str)
            for spelling in self.mask_spellings[1:]:  # "[MASK]" and "<mask>" both mean the mask
                text = text.replace(spelling, mask)
            if text.count(mask) != 1:
                spellings = " or ".join(self.mask_spellings)
                raise RequestError(
                    422, f"{field} must hold exactly one {spellings}, it holds {text.count(mask)}", field=field
                )
            # As fill_mask encodes it: <s> left <mask> right </s>, each side without trailing spaces.
            left, right = (self.inputs.tokenizer.encode(span.rstrip()) for span in text.split(mask))
            length = len(left) + len(right) + 3
            if length > limit:
                raise RequestError(
                    413, f"{field} is {length} tokens long, more than the maximum of {limit}", field=field
                )
            texts.append(text)
            lengths.append(length)
        model, inputs = self.model, self.inputs
        task = Task(
            ("fill_mask", top_k),
            lambda batch: [fill_mask(model, inputs, text, mask=mask, topk=top_k) for text in batch],
        )
        results = await self.compute(task, texts, lengths)
        answers = [
            # The probability as float32 text, as vectors are written (not its float64 expansion).
            [{"score": np.float32(score), "token_str": token, "sequence": filled} for filled, score, token in result]
            for result in results
        ]
        return JSONAnswer(answers[0] if single else answers)

    # ------------------------------------------------------------------ text

    def special_ids(self) -> set[int]:
        d = self.dictionary
        specials = {d.bos(), d.eos(), d.pad(), d.unk(), *range(d.nspecial)}
        if self.mask_token is not None and self.mask_token in d:
            specials.add(d.index(self.mask_token))
        return specials

    async def tokenize(self, request: Request) -> Response:
        """TEI's ``POST /tokenize``: ``{"inputs": text | [text, ...], "add_special_tokens": true,
        "prompt_name": null}`` -> ``[[{"id", "text", "special", "start", "stop"}, ...], ...]``: the
        ids ``/embed`` runs (uncut); ``start``/``stop`` are character offsets into the text
        (``null`` for special tokens and the prompt's)."""
        body = await self.read_json(request)
        self.check_fields(body, "/tokenize")
        items, _ = texts_field(body, "inputs", max_items=self.options.max_client_batch_size)
        specials = bool_field(body, "add_special_tokens", True)
        embedder = self.embedder(str_field(body, "prompt_name", None), normalize=False)
        whole = dataclasses.replace(embedder, max_length=sys.maxsize)
        special_ids = self.special_ids()
        tokenizer = self.inputs.tokenizer
        answers = []
        for text in items:
            assert isinstance(text, str)
            ids = whole.encode(text)
            spans = self.spans(embedder, text, len(ids) - 2)
            tokens = []
            for position, index in enumerate(ids):
                inner = 0 < position < len(ids) - 1
                if not specials and not inner:
                    continue
                start, stop = spans[position - 1] if inner else (None, None)
                tokens.append(
                    {
                        "id": index,
                        "text": self.dictionary[index] if index in special_ids else tokenizer.token_text(index),
                        "special": index in special_ids,
                        "start": start,
                        "stop": stop,
                    }
                )
            answers.append(tokens)
        return JSONAnswer(answers)

    def spans(self, embedder: Embedder, text: str, count: int) -> list[tuple[int | None, int | None]]:
        """Character offsets into ``text`` of the ``count`` tokens between ``<s>`` and ``</s>``;
        ``(None, None)`` where the tokenizer cannot say (a prompt's tokens, lowercasing that
        changed the text's length)."""
        unknown: list[tuple[int | None, int | None]] = [(None, None)] * count
        fed = embedder.prompt + text
        if embedder.do_lower_case:
            from ..tokenizers.normalization import lowercase_per_character

            fed = lowercase_per_character(fed)
        if len(fed) != len(embedder.prompt) + len(text):
            return unknown
        try:
            found = kind_of(self.inputs.tokenizer).spans(self.inputs.tokenizer, fed)
        except Exception:  # offsets are a courtesy: the ids are the answer
            return unknown
        if len(found) != count:
            return unknown
        shift = len(embedder.prompt)
        return [(start - shift, stop - shift) if start >= shift else (None, None) for start, stop in found]

    async def decode(self, request: Request) -> Response:
        """TEI's ``POST /decode``: ``{"ids": [id, ...] | [[id, ...], ...], "skip_special_tokens":
        true}`` -> ``[text, ...]``."""
        body = await self.read_json(request)
        self.check_fields(body, "/decode")
        rows, single = ids_field(
            body, "ids", vocab_size=len(self.dictionary), max_items=self.options.max_client_batch_size
        )
        skip = bool_field(body, "skip_special_tokens", True)
        special_ids = self.special_ids()
        texts = []
        for i, row in enumerate(rows):
            where = "ids" if single else f"ids[{i}]"
            pieces: list[str] = []
            run: list[int] = []  # positions of the ordinary ids since the last special one
            for j, index in enumerate(row):
                if index in special_ids:
                    if run:
                        pieces.append(self.decode_run(row, run, where))
                        run = []
                    if not skip:
                        pieces.append(self.dictionary[index])
                else:
                    run.append(j)
            if run:
                pieces.append(self.decode_run(row, run, where))
            texts.append("".join(pieces))
        return JSONAnswer(texts)

    def decode_run(self, row: Sequence[int], positions: Sequence[int], where: str) -> str:
        """Text of ``row``'s ids at ``positions``. An id that stands for no text (a ``madeupword``
        filler of a GPT-2 ``dict.txt``, which fairseq's ``decode`` refuses too) is answered 422
        naming it, ``ids[i][j]``."""
        tokenizer = self.inputs.tokenizer
        try:
            return tokenizer.decode([row[j] for j in positions])
        except (ValueError, KeyError):
            for j in positions:  # which one: only on failure
                try:
                    tokenizer.decode([row[j]])
                except (ValueError, KeyError):
                    raise RequestError(
                        422,
                        f"{where}[{j}] is {row[j]}, {self.dictionary[row[j]]!r} in the dictionary, which stands "
                        "for no text: the tokenizer cannot decode it",
                        field=f"{where}[{j}]",
                    ) from None
            raise

    # ------------------------------------------------------------------ about the server

    def info_body(self) -> dict[str, Any]:
        """What ``GET /info`` says: TEI's fields, then the model's own (family, sizes, heads, dtype)."""
        model, options, embedder = self.model, self.options, self.default_embedder
        heads = {name: model.num_classes(name) for name in sorted(model.classification_heads)}
        if heads:
            outputs = heads[sorted(heads)[0]]
            names = self.class_names(outputs)
            model_type: dict[str, Any] = {
                "classifier": {
                    "id2label": {str(k): name for k, name in enumerate(names)},
                    "label2id": {name: k for k, name in enumerate(names)},
                }
            }
        else:
            model_type = {"embedding": {"pooling": ",".join(embedder.pooling)}}
        return {
            "model_id": options.model_id,
            "model_sha": None,
            "model_dtype": model_dtype(model),
            "model_type": model_type,
            "max_concurrent_requests": options.max_concurrent_requests,
            "max_input_length": embedder.max_length,
            "max_batch_tokens": options.max_batch_tokens,
            "max_batch_requests": options.max_batch_requests,
            "max_client_batch_size": options.max_client_batch_size,
            "auto_truncate": options.auto_truncate,
            "tokenization_workers": 1,
            "version": _version(),
            "family": getattr(model.cfg, "family", "roberta"),
            "hidden_size": model.cfg.encoder_embed_dim,
            "layers": model.cfg.encoder_layers,
            "embedding_dimension": embedder.dimension,
            "pooling": list(embedder.pooling),
            "normalize_by_default": True,
            "prompts": sorted(self.served.sentence_embedding.prompts),
            "max_positions": self.inputs.max_positions,
            "vocab_size": len(self.dictionary),
            "classification_heads": heads,
            "token_heads": {name: model.num_classes(name) for name in sorted(model.token_heads)},
            "masked_lm_head": bool(model.has_lm_head),
            "mask_token": self.mask_token if model.has_lm_head else None,
            "labels": self.label_names(),
            "device": str(model.device),
            "threads": options.threads if options.threads is not None else torch.get_num_threads(),
            "timeout_s": options.timeout_s,
        }

    async def info(self, request: Request) -> Response:
        return JSONAnswer(self.info_body())

    async def health(self, request: Request) -> Response:
        if not self.worker.alive:
            raise RequestError(503, "the model worker is not running", kind="Unhealthy")
        return JSONAnswer({"status": "ok", "queue_depth": self.worker.queue_depth})

    async def prometheus(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def openapi(self, request: Request) -> Response:
        return JSONAnswer(openapi_description(self.options.model_id, _version(), self.route_limits()))

    def route_limits(self) -> RouteLimits:
        """What this model and these options let a request ask, for the OpenAPI schemas."""
        return RouteLimits(
            max_items=self.options.max_client_batch_size,
            dimension=self.default_embedder.dimension,
            vocab_size=len(self.dictionary),
            textless_ids=tuple(i for i, s in enumerate(self.dictionary.symbols) if s.startswith("madeupword")),
            heads=tuple(sorted(self.model.classification_heads)),
            prompts=tuple(sorted(self.served.sentence_embedding.prompts)),
            max_top_k=min(MAX_TOP_K, len(self.dictionary)),
            mask_spellings=self.mask_spellings if self.model.has_lm_head and self.mask_token is not None else (),
        )

    @functools.cached_property
    def request_fields(self) -> dict[str, tuple[str, ...]]:
        """The fields each POST route takes: those its OpenAPI schema declares."""
        return request_fields(self.route_limits())

    def check_fields(self, body: dict[str, Any], path: str) -> None:
        """422 naming any field of ``body`` that the route at ``path`` does not take."""
        known_fields(body, self.request_fields[path], route=path)


def _token_ids(item: object) -> bool:
    """Whether an item of ``/v1/embeddings``' ``input`` is a token id or a list of them (OpenAI's token arrays)."""
    return type(item) is int or (isinstance(item, list) and bool(item) and all(type(v) is int for v in item))


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


def model_dtype(model: EncoderModel) -> str:
    """``int8`` for a model quantized by :func:`~roberta_ext.export.int8.quantize_int8`, else
    its parameters' dtype (``float32``, ``bfloat16``, ...)."""
    from ..export.int8 import Int8Linear, PerTensorInt8Linear

    if any(isinstance(module, Int8Linear | PerTensorInt8Linear) for module in model.modules()):
        return "int8"
    return str(model.dtype).removeprefix("torch.")


def create_app(served: ServedModel, options: ServeOptions | None = None) -> Starlette:
    """A Starlette app serving ``served`` (a hub, or anything with ``model``, ``inputs`` and
    ``sentence_embedding``); its worker starts and stops with the app's lifespan.

    Use it as any ASGI app: :func:`run` serves it with uvicorn; ``uvicorn --factory
    my_module:make_app --workers 4`` runs replicas of a factory that loads the model and calls this.
    """
    server = Server(served, options or ServeOptions())
    r = server.route
    routes = [
        Route("/embed", r("embed", server.embed, queues=True), methods=["POST"]),
        Route(
            "/v1/embeddings", r("v1/embeddings", server.openai_embeddings, openai=True, queues=True), methods=["POST"]
        ),
        Route("/predict", r("predict", server.predict, queues=True), methods=["POST"]),
        Route("/fill_mask", r("fill_mask", server.fill_mask, queues=True), methods=["POST"]),
        Route("/tokenize", r("tokenize", server.tokenize), methods=["POST"]),
        Route("/decode", r("decode", server.decode), methods=["POST"]),
        Route("/health", r("health", server.health), methods=["GET"]),
        Route("/info", r("info", server.info), methods=["GET"]),
        Route("/metrics", server.prometheus, methods=["GET"]),
        Route("/openapi.json", server.openapi, methods=["GET"]),
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

    app = Starlette(routes=routes, lifespan=server.lifespan, exception_handlers={HTTPException: http_error})
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
