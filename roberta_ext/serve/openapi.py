"""The server's OpenAPI 3.1 description (``GET /openapi.json``), derived from the request and
answer models of :mod:`.schemas`: a request valid under it is never refused as malformed (422
or 400; 413 for an input too long stays possible), and one it rules out is refused. Only what
no model holds is written here: each route's summary and the statuses it may answer.

>>> limits = RouteLimits(max_items=32, dimension=768, vocab_size=50265, heads=("mnli",),
...                      prompts=(), max_top_k=100, mask_spellings=("<mask>",))
>>> description = openapi_description("my-model", "0.1.0", limits)
>>> sorted(description["paths"])[:4]
['/decode', '/embed', '/fill_mask', '/health']
>>> request_fields(limits)["/fill_mask"]
('inputs', 'top_k')
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter

from .schemas import (
    ErrorBody,
    Filling,
    Health,
    OpenAIEmbeddings,
    OpenAIErrorBody,
    Prediction,
    RouteLimits,
    Token,
    request_models,
)

__all__ = ["RouteLimits", "openapi_description", "request_fields"]

REFS = "#/components/schemas/{model}"

ERRORS = {
    "400": "the body is not UTF-8 JSON, or a list is empty",
    "413": "the body, the number of inputs or an input's length is over the limit",
    "422": "a field the route does not take, or of the wrong type or value; also a text with a lone surrogate "
    "(a \\ud800 escape), which no schema can rule out",
    "429": "the queue is full: retry after Retry-After seconds",
    "500": "the model failed on this request (other requests are unaffected)",
    "503": "the server is shutting down",
    "504": "the request did not finish within the server's timeout",
}

POSTS: dict[str, tuple[str, Any]] = {
    "/embed": (
        "Sentence embeddings, pooled as the model's own settings say (text-embeddings-inference's /embed)",
        list[list[float]],
    ),
    "/v1/embeddings": (
        "OpenAI-compatible embeddings (normalised); inputs too long are cut only when the server runs with "
        "--auto-truncate",
        OpenAIEmbeddings,
    ),
    "/predict": (
        "A classification (or regression) head's scores, with label names, sorted from the highest; a list of "
        "them for a list of inputs (text-embeddings-inference's /predict)",
        list[Prediction] | list[list[Prediction]],
    ),
    "/fill_mask": ("The most probable fillings of the one mask in each text", list[Filling] | list[list[Filling]]),
    "/tokenize": ("The tokens /embed runs for each text (text-embeddings-inference's /tokenize)", list[list[Token]]),
    "/decode": ("Token ids back to text (text-embeddings-inference's /decode)", list[str]),
}
"""Each POST route's summary and answer."""

GETS: dict[str, tuple[str, Any, str, dict[str, str]]] = {
    "/health": (
        "200 while the model worker runs, 503 otherwise",
        Health,
        "application/json",
        {"503": "the model worker is not running (error_type Unhealthy)"},
    ),
    "/info": ("The model and the server's settings", dict[str, Any], "application/json", {}),
    "/metrics": ("Prometheus metrics", str, "text/plain", {}),
    "/openapi.json": ("This description", dict[str, Any], "application/json", {}),
}
"""Each GET route's summary, answer, media type and error statuses."""


class _Schemas:
    """JSON schemas of types, the models they refer to gathered as the document's components."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def of(self, kind: Any) -> dict[str, Any]:
        schema = TypeAdapter(kind).json_schema(ref_template=REFS)
        self.components.update(schema.pop("$defs", {}))
        if isinstance(kind, type) and issubclass(kind, BaseModel):  # a component of its own, referred to
            self.components[kind.__name__] = schema
            return {"$ref": REFS.format(model=kind.__name__)}
        return schema

    def content(self, kind: Any, media_type: str = "application/json") -> dict[str, Any]:
        return {media_type: {"schema": self.of(kind)}}


def request_fields(limits: RouteLimits) -> dict[str, tuple[str, ...]]:
    """The fields each POST route takes: its request model's."""
    return {path: tuple(model.model_fields) for path, model in request_models(limits).items()}


def openapi_description(
    model_id: str, version: str, limits: RouteLimits, models: dict[str, type[BaseModel]] | None = None
) -> dict[str, Any]:
    """The OpenAPI document of a server of ``model_id`` within ``limits`` (whose request models
    are ``models``, by default built from ``limits``). ``/predict`` and ``/fill_mask`` are
    described only when the model has the head they need: without it they refuse every request
    (422). Request bodies are given whole, in place; the answers' models are components."""
    models = models or request_models(limits)
    schemas = _Schemas()
    paths: dict[str, Any] = {}
    for path, (summary, answer) in POSTS.items():
        if (path == "/predict" and not limits.heads) or (path == "/fill_mask" and not limits.mask_spellings):
            continue
        errors = schemas.content(OpenAIErrorBody if path == "/v1/embeddings" else ErrorBody)
        request = models[path].model_json_schema(ref_template=REFS)
        paths[path] = {
            "post": {
                "summary": summary,
                "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
                "responses": {
                    "200": {"description": "OK", "content": schemas.content(answer)},
                    **{code: {"description": text, "content": errors} for code, text in ERRORS.items()},
                },
            }
        }
    for path, (summary, answer, media_type, statuses) in GETS.items():
        responses = {"200": {"description": "OK", "content": schemas.content(answer, media_type)}}
        responses |= {
            code: {"description": text, "content": schemas.content(ErrorBody)} for code, text in statuses.items()
        }
        paths[path] = {"get": {"summary": summary, "responses": responses}}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"roberta_ext server: {model_id}",
            "version": version,
            "description": "Embeddings, classification and mask filling over one model, with dynamic batching. "
            "A method a path does not take is answered 405 with an Allow header naming those it takes.",
        },
        "paths": paths,
        "components": {"schemas": schemas.components},
    }
