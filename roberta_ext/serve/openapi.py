"""The server's OpenAPI 3.1 description (``GET /openapi.json``), written out by hand: the app
has no schema library, and the shapes are few and fixed.

The request schemas say exactly what the routes accept, so that a request valid under them is
never refused as malformed (422 or 400; 413 for an input too long stays possible): every
range is the served model's (:class:`RouteLimits`: ``dimensions``, ids, ``top_k``, inputs per
request), head and prompt names are listed (``enum``), no other field is allowed
(``additionalProperties: false``; the handlers check the same field names,
:func:`request_fields`).

>>> limits = RouteLimits(max_items=32, dimension=768, vocab_size=50265, heads=("mnli",),
...                      prompts=(), max_top_k=100, mask_spellings=("<mask>",))
>>> description = openapi_description("my-model", "0.1.0", limits)
>>> sorted(description["paths"])[:4]
['/decode', '/embed', '/fill_mask', '/health']
>>> request_fields(limits)["/fill_mask"]
('inputs', 'top_k')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["RouteLimits", "openapi_description", "request_fields"]


@dataclass(frozen=True, kw_only=True)
class RouteLimits:
    """What the served model and the server's options allow, as the schemas state it."""

    max_items: int
    """Inputs per request at most (``--max-client-batch-size``)."""
    dimension: int
    """Width of an embedding: ``dimensions`` is in ``1..dimension``."""
    vocab_size: int
    """Token ids are in ``0..vocab_size-1``."""
    textless_ids: tuple[int, ...] = ()
    """Ids that stand for no text (``dict.txt``'s ``madeupword`` fillers): ``/decode`` refuses them."""
    heads: tuple[str, ...]
    """The classification heads; none: ``/predict`` is not described (it answers 422)."""
    prompts: tuple[str, ...]
    """The model's prompt names, the values ``prompt_name`` may take."""
    max_top_k: int
    """``top_k`` is in ``1..max_top_k``."""
    mask_spellings: tuple[str, ...]
    """How the mask may be written; none (no masked-LM head): ``/fill_mask`` is not described."""


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _boolean(description: str, default: bool) -> dict[str, Any]:
    return {"type": ["boolean", "null"], "description": description, "default": default}


def _integer(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": ["integer", "null"], "description": description, **extra}


def _choice(description: str, choices: tuple[str, ...], **extra: Any) -> dict[str, Any]:
    """A field that takes one of ``choices``, or null (the default)."""
    return {"type": ["string", "null"], "enum": [*choices, None], "description": description, **extra}


def _texts(max_items: int, text: dict[str, Any] | None = None) -> dict[str, Any]:
    text = text or TEXT
    return {
        "oneOf": [text, {"type": "array", "items": text, "minItems": 1, "maxItems": max_items}],
        "description": "a text or a list of texts",
    }


TEXT = {"type": "string"}
VECTORS = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}

ERROR = {
    "type": "object",
    "properties": {
        "error": _string("what is wrong"),
        "error_type": _string(
            "Validation, Empty, Overloaded, Timeout, Backend, Unhealthy or Route (an unknown path or method)"
        ),
        "field": _string("the field of the request body at fault (inputs[3], ids[0][2], ...), when one is"),
    },
    "required": ["error", "error_type"],
}

OPENAI_ERROR = {
    "type": "object",
    "properties": {
        "error": {
            "type": "object",
            "properties": {
                "message": TEXT,
                "type": TEXT,
                "param": {"type": ["string", "null"]},
                "code": {"type": "integer"},
            },
        }
    },
}

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


def _post(summary: str, request: dict[str, Any], response: dict[str, Any], *, openai: bool = False) -> dict[str, Any]:
    error = {"application/json": {"schema": OPENAI_ERROR if openai else ERROR}}
    return {
        "post": {
            "summary": summary,
            "requestBody": {"required": True, "content": {"application/json": {"schema": request}}},
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": response}}},
                **{code: {"description": text, "content": error} for code, text in ERRORS.items()},
            },
        }
    }


def _get(
    summary: str,
    response: dict[str, Any],
    media_type: str = "application/json",
    *,
    errors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A GET operation; ``errors``: status -> when it is answered (as a JSON error)."""
    error = {"application/json": {"schema": ERROR}}
    return {
        "get": {
            "summary": summary,
            "responses": {
                "200": {"description": "OK", "content": {media_type: {"schema": response}}},
                **{code: {"description": text, "content": error} for code, text in (errors or {}).items()},
            },
        }
    }


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


def _request(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A request body: these fields and no other (the handlers refuse the others by name)."""
    return {**_object(properties, required), "additionalProperties": False}


TRUNCATE = _boolean("cut inputs longer than the model takes instead of answering 413 (default: --auto-truncate)", False)
TRUNCATION_DIRECTION = _choice("where inputs are cut: right (the only one)", ("right", "Right"), default="right")


PREDICTION = _object({"score": {"type": "number"}, "label": TEXT}, ["score", "label"])
FILLING = _object(
    {"score": {"type": "number"}, "token_str": TEXT, "sequence": _string("the text with the mask filled")},
    ["score", "token_str", "sequence"],
)
TOKEN = _object(
    {
        "id": {"type": "integer"},
        "text": TEXT,
        "special": {"type": "boolean"},
        "start": {"type": ["integer", "null"]},
        "stop": {"type": ["integer", "null"]},
    },
    ["id", "text", "special", "start", "stop"],
)


def _one_mask(spellings: tuple[str, ...]) -> str:
    """A regular expression (ECMA-262's and Python's) of a text holding exactly one mask,
    however it is spelt: ``/fill_mask`` refuses a text with none or several."""
    mask = "|".join(re.escape(spelling) for spelling in spellings)
    other = rf"(?:(?!{mask})[\s\S])*"
    return f"^{other}(?:{mask}){other}$"


def _embed_request(limits: RouteLimits, prompt_name: dict[str, Any]) -> dict[str, Any]:
    """``/embed``'s body: TEI's texts or pairs and options."""
    pair = {"type": "array", "items": TEXT, "minItems": 2, "maxItems": 2, "description": "[text, text]"}
    return _request(
        {
            "inputs": {
                "oneOf": [
                    TEXT,
                    {
                        "type": "array",
                        "items": {"oneOf": [TEXT, pair]},
                        "minItems": 1,
                        "maxItems": limits.max_items,
                    },
                ],
                "description": "a text, or a list of texts or [text, text] pairs",
            },
            "normalize": _boolean("L2-normalise each vector", True),
            "truncate": TRUNCATE,
            "truncation_direction": TRUNCATION_DIRECTION,
            "prompt_name": prompt_name,
            "dimensions": _integer(
                "keep the first N values (normalised again when normalize)", minimum=1, maximum=limits.dimension
            ),
        },
        ["inputs"],
    )


def _decode_request(limits: RouteLimits) -> dict[str, Any]:
    """``/decode``'s body: ids of the vocabulary that stand for text, one list or several."""
    token_id: dict[str, Any] = {"type": "integer", "minimum": 0, "maximum": limits.vocab_size - 1}
    if limits.textless_ids:
        token_id["not"] = {"enum": list(limits.textless_ids)}
    return _request(
        {
            "ids": {
                "oneOf": [
                    {"type": "array", "items": token_id, "minItems": 1},
                    {
                        "type": "array",
                        "items": {"type": "array", "items": token_id},
                        "minItems": 1,
                        "maxItems": limits.max_items,
                    },
                ]
            },
            "skip_special_tokens": _boolean("leave <s>, </s>, <pad>, <unk>, <mask> out", True),
        },
        ["ids"],
    )


def request_schemas(limits: RouteLimits) -> dict[str, dict[str, Any]]:
    """The request body of every POST route, as its handler checks it."""
    texts = _texts(limits.max_items)
    one_or_two = {"type": "array", "items": TEXT, "minItems": 1, "maxItems": 2, "description": "[a] or [a, b]"}
    prompt_name = _choice("one of the model's prompts, prepended to each text", limits.prompts)
    head: dict[str, Any] = _choice("the head (default: the model's only one)", limits.heads)
    if len(limits.heads) > 1:  # no default: the request must name one
        head = {"type": "string", "enum": list(limits.heads), "description": "the head"}
    spellings = limits.mask_spellings or ("<mask>",)  # no masked-LM head: the path is not described
    masked = {**TEXT, "pattern": _one_mask(spellings), "description": f"a text with one {' or '.join(spellings)}"}
    return {
        "/embed": _embed_request(limits, prompt_name),
        "/v1/embeddings": _request(
            {
                "input": texts,
                "model": {"type": ["string", "null"], "description": "accepted and ignored"},
                "encoding_format": _choice(
                    "float, or base64 of little-endian float32", ("float", "base64"), default="float"
                ),
                "dimensions": _integer(
                    "keep the first N values, normalised again", minimum=1, maximum=limits.dimension
                ),
                "user": {"type": ["string", "null"], "description": "accepted and ignored"},
            },
            ["input"],
        ),
        "/predict": _request(
            {
                "inputs": {
                    "oneOf": [
                        TEXT,
                        one_or_two,
                        {"type": "array", "items": one_or_two, "minItems": 1, "maxItems": limits.max_items},
                    ],
                    "description": "a text, a pair [a, b], or a list of [a] and [a, b]",
                },
                "raw_scores": _boolean("logits instead of probabilities", False),
                "truncate": TRUNCATE,
                "truncation_direction": TRUNCATION_DIRECTION,
                "head": head,
            },
            ["inputs", "head"] if len(limits.heads) > 1 else ["inputs"],
        ),
        "/fill_mask": _request(
            {
                "inputs": _texts(limits.max_items, masked),
                "top_k": _integer("fillings per text", default=5, minimum=1, maximum=limits.max_top_k),
            },
            ["inputs"],
        ),
        "/tokenize": _request(
            {
                "inputs": texts,
                "add_special_tokens": _boolean("include <s> and </s>", True),
                "prompt_name": prompt_name,
            },
            ["inputs"],
        ),
        "/decode": _decode_request(limits),
    }


def request_fields(limits: RouteLimits) -> dict[str, tuple[str, ...]]:
    """The fields each POST route takes: its schema's, so that the two never differ."""
    return {path: tuple(schema["properties"]) for path, schema in request_schemas(limits).items()}


OPENAI_EMBEDDINGS = _object(
    {
        "object": _string("list"),
        "data": {
            "type": "array",
            "items": _object(
                {
                    "object": _string("embedding"),
                    "embedding": {"oneOf": [{"type": "array", "items": {"type": "number"}}, TEXT]},
                    "index": {"type": "integer"},
                },
                ["object", "embedding", "index"],
            ),
        },
        "model": TEXT,
        "usage": _object(
            {"prompt_tokens": {"type": "integer"}, "total_tokens": {"type": "integer"}},
            ["prompt_tokens", "total_tokens"],
        ),
    },
    ["object", "data", "model", "usage"],
)


def _one_or_list(item: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    """An answer: a list of ``item`` for one input, a list of such lists for a list of inputs."""
    schema: dict[str, Any] = {
        "oneOf": [{"type": "array", "items": item}, {"type": "array", "items": {"type": "array", "items": item}}]
    }
    if description:
        schema["description"] = description
    return schema


def openapi_description(model_id: str, version: str, limits: RouteLimits) -> dict[str, Any]:
    """The OpenAPI document of a server of ``model_id`` within ``limits``. ``/predict`` and
    ``/fill_mask`` are described only when the model has the head they need: without it they
    refuse every request (422)."""
    requests = request_schemas(limits)
    paths = {
        "/embed": _post(
            "Sentence embeddings, pooled as the model's own settings say (text-embeddings-inference's /embed)",
            requests["/embed"],
            VECTORS,
        ),
        "/v1/embeddings": _post(
            "OpenAI-compatible embeddings (normalised); inputs too long are cut only when the server runs with "
            "--auto-truncate",
            requests["/v1/embeddings"],
            OPENAI_EMBEDDINGS,
            openai=True,
        ),
    }
    if limits.heads:
        paths["/predict"] = _post(
            "A classification (or regression) head's scores, with label names (text-embeddings-inference's /predict)",
            requests["/predict"],
            _one_or_list(PREDICTION, "scores sorted from the highest; a list of them for a list of inputs"),
        )
    if limits.mask_spellings:
        paths["/fill_mask"] = _post(
            "The most probable fillings of the one mask in each text", requests["/fill_mask"], _one_or_list(FILLING)
        )
    paths |= {
        "/tokenize": _post(
            "The tokens /embed runs for each text (text-embeddings-inference's /tokenize)",
            requests["/tokenize"],
            {"type": "array", "items": {"type": "array", "items": TOKEN}},
        ),
        "/decode": _post(
            "Token ids back to text (text-embeddings-inference's /decode)",
            requests["/decode"],
            {"type": "array", "items": TEXT},
        ),
        "/health": _get(
            "200 while the model worker runs, 503 otherwise",
            {"type": "object"},
            errors={"503": "the model worker is not running (error_type Unhealthy)"},
        ),
        "/info": _get("The model and the server's settings", {"type": "object"}),
        "/metrics": _get("Prometheus metrics", TEXT, "text/plain"),
        "/openapi.json": _get("This description", {"type": "object"}),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"roberta_ext server: {model_id}",
            "version": version,
            "description": "Embeddings, classification and mask filling over one model, with dynamic batching. "
            "A method a path does not take is answered 405 with an Allow header naming those it takes.",
        },
        "paths": paths,
    }
