"""The server's OpenAPI 3.1 description (``GET /openapi.json``), written out by hand: the app
has no schema library, and the shapes are few and fixed.

>>> description = openapi_description("my-model", "0.1.0")
>>> sorted(description["paths"])[:4]
['/decode', '/embed', '/fill_mask', '/health']
"""

from __future__ import annotations

from typing import Any

__all__ = ["openapi_description"]


def _string(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "description": description, **extra}


def _boolean(description: str, default: bool) -> dict[str, Any]:
    return {"type": "boolean", "description": description, "default": default}


def _integer(description: str, **extra: Any) -> dict[str, Any]:
    return {"type": ["integer", "null"], "description": description, **extra}


TEXT = {"type": "string"}
TEXTS = {"oneOf": [TEXT, {"type": "array", "items": TEXT, "minItems": 1}], "description": "a text or a list of texts"}
PAIR = {"type": "array", "items": TEXT, "minItems": 1, "maxItems": 2}
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
    "422": "a field has the wrong type or value (unknown head, prompt, ...)",
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


def _get(summary: str, response: dict[str, Any], media_type: str = "application/json") -> dict[str, Any]:
    return {
        "get": {
            "summary": summary,
            "responses": {"200": {"description": "OK", "content": {media_type: {"schema": response}}}},
        }
    }


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


TRUNCATE = _boolean("cut inputs longer than the model takes instead of answering 413 (default: --auto-truncate)", False)
PROMPT_NAME = {"type": ["string", "null"], "description": "one of the model's prompts, prepended to each text"}


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


def _embedding_paths() -> dict[str, Any]:
    return {
        "/embed": _post(
            "Sentence embeddings, pooled as the model's own settings say (text-embeddings-inference's /embed)",
            _object(
                {
                    "inputs": {
                        "oneOf": [TEXT, {"type": "array", "items": {"oneOf": [TEXT, PAIR]}, "minItems": 1}],
                        "description": "a text, or a list of texts or [text, text] pairs",
                    },
                    "normalize": _boolean("L2-normalise each vector", True),
                    "truncate": TRUNCATE,
                    "truncation_direction": _string("right (the only one)", default="right"),
                    "prompt_name": PROMPT_NAME,
                    "dimensions": _integer("keep the first N values (normalised again when normalize)"),
                },
                ["inputs"],
            ),
            VECTORS,
        ),
        "/v1/embeddings": _post(
            "OpenAI-compatible embeddings (normalised)",
            _object(
                {
                    "input": TEXTS,
                    "model": {"type": ["string", "null"], "description": "accepted and ignored"},
                    "encoding_format": _string(
                        "float, or base64 of little-endian float32", enum=["float", "base64"], default="float"
                    ),
                    "dimensions": _integer("keep the first N values, normalised again"),
                    "user": {"type": ["string", "null"]},
                },
                ["input"],
            ),
            _object(
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
            ),
            openai=True,
        ),
    }


def _head_paths() -> dict[str, Any]:
    return {
        "/predict": _post(
            "A classification (or regression) head's scores, with label names (text-embeddings-inference's /predict)",
            _object(
                {
                    "inputs": {
                        "oneOf": [TEXT, PAIR, {"type": "array", "items": PAIR, "minItems": 1}],
                        "description": "a text, a pair [a, b], or a list of [a] and [a, b]",
                    },
                    "raw_scores": _boolean("logits instead of probabilities", False),
                    "truncate": TRUNCATE,
                    "head": {"type": ["string", "null"], "description": "the head (default: the model's only one)"},
                },
                ["inputs"],
            ),
            {
                "oneOf": [
                    {"type": "array", "items": PREDICTION},
                    {"type": "array", "items": {"type": "array", "items": PREDICTION}},
                ],
                "description": "scores sorted from the highest; a list of them for a list of inputs",
            },
        ),
        "/fill_mask": _post(
            "The most probable fillings of the one mask in each text",
            _object(
                {"inputs": TEXTS, "top_k": _integer("fillings per text", default=5, minimum=1, maximum=100)},
                ["inputs"],
            ),
            {
                "oneOf": [
                    {"type": "array", "items": FILLING},
                    {"type": "array", "items": {"type": "array", "items": FILLING}},
                ]
            },
        ),
    }


def _text_paths() -> dict[str, Any]:
    return {
        "/tokenize": _post(
            "The tokens /embed runs for each text (text-embeddings-inference's /tokenize)",
            _object(
                {
                    "inputs": TEXTS,
                    "add_special_tokens": _boolean("include <s> and </s>", True),
                    "prompt_name": PROMPT_NAME,
                },
                ["inputs"],
            ),
            {"type": "array", "items": {"type": "array", "items": TOKEN}},
        ),
        "/decode": _post(
            "Token ids back to text (text-embeddings-inference's /decode)",
            _object(
                {
                    "ids": {
                        "oneOf": [
                            {"type": "array", "items": {"type": "integer"}},
                            {"type": "array", "items": {"type": "array", "items": {"type": "integer"}}},
                        ]
                    },
                    "skip_special_tokens": _boolean("leave <s>, </s>, <pad>, <unk>, <mask> out", True),
                },
                ["ids"],
            ),
            {"type": "array", "items": TEXT},
        ),
    }


def openapi_description(model_id: str, version: str) -> dict[str, Any]:
    """The OpenAPI document of a server of ``model_id``."""
    paths = {
        **_embedding_paths(),
        **_head_paths(),
        **_text_paths(),
        "/health": _get("200 while the model worker runs, 503 otherwise", {"type": "object"}),
        "/info": _get("The model and the server's settings", {"type": "object"}),
        "/metrics": _get("Prometheus metrics", TEXT, "text/plain"),
        "/openapi.json": _get("This description", {"type": "object"}),
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": f"roberta_ext server: {model_id}",
            "version": version,
            "description": "Embeddings, classification and mask filling over one model, with dynamic batching.",
        },
        "paths": paths,
    }
