"""The OpenAPI document of :mod:`roberta_ext.serve.openapi` (``GET /openapi.json``), built in each test
without a server (no model, no threads, so mutation testing can fork per mutant): the paths and methods
it describes, the statuses and media types of each, the answers' schemas as components every reference
reaches, checked with ``jsonschema`` (JSON Schema 2020-12, OpenAPI 3.1's dialect) against answers the
server gives and ones it never gives. The request bodies themselves are ``tests/serve/test_schemas.py``'s."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest

from roberta_ext.serve.openapi import openapi_description, request_fields
from roberta_ext.serve.schemas import RouteLimits, request_models
from tests.serve.test_schemas import LIMITS

POSTS = ["/embed", "/v1/embeddings", "/predict", "/fill_mask", "/tokenize", "/decode"]
GETS = ["/health", "/info", "/metrics", "/openapi.json"]
ERROR_STATUSES = ["400", "413", "422", "429", "500", "503", "504"]
ANSWERS = ["ErrorBody", "OpenAIErrorBody", "OpenAIError", "OpenAIEmbeddings", "OpenAIEmbedding", "Usage"]
ANSWERS += ["Prediction", "Filling", "Token", "Health"]


def document(**changes: Any) -> dict[str, Any]:
    """The document of a server of ``LIMITS | changes``, its request models built from them."""
    return openapi_description("my-model", "1.2.3", RouteLimits(**(LIMITS | changes)))


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def references(node: Any) -> set[str]:
    """Every ``$ref`` in ``node``."""
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(references(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(references(value) for value in node))
    return set()


def valid(value: Any, schema: dict[str, Any], described: dict[str, Any]) -> bool:
    """Whether ``value`` is valid under ``schema`` of the document ``described`` (its references resolved
    in that document's components), by JSON Schema 2020-12."""
    whole = schema | {"components": described["components"]}
    return jsonschema.Draft202012Validator(whole).is_valid(value)


def answer(described: dict[str, Any], path: str, method: str = "post", status: str = "200") -> dict[str, Any]:
    return described["paths"][path][method]["responses"][status]


# ------------------------------------------------------------------------------ the document


def test_the_document_is_openapi_3_1_json_with_the_models_name_and_the_servers_version():
    described = document()
    assert json.loads(json.dumps(described)) == described
    assert described["openapi"] == "3.1.0"
    assert described["info"] == {
        "title": "roberta_ext server: my-model",
        "version": "1.2.3",
        "description": "Embeddings, classification and mask filling over one model, with dynamic batching. "
        "A method a path does not take is answered 405 with an Allow header naming those it takes.",
    }
    assert list(described) == ["openapi", "info", "paths", "components"]


def test_every_route_is_described_with_its_one_method_and_summary():
    described = document()
    assert list(described["paths"]) == POSTS + GETS
    assert {path: list(item) for path, item in described["paths"].items()} == {
        **{path: ["post"] for path in POSTS},
        **{path: ["get"] for path in GETS},
    }
    summaries = {path: next(iter(item.values()))["summary"] for path, item in described["paths"].items()}
    assert summaries == {
        "/embed": "Sentence embeddings, pooled as the model's own settings say (text-embeddings-inference's /embed)",
        "/v1/embeddings": "OpenAI-compatible embeddings (normalised); inputs too long are cut only when the server "
        "runs with --auto-truncate",
        "/predict": "A classification (or regression) head's scores, with label names, sorted from the highest; a "
        "list of them for a list of inputs (text-embeddings-inference's /predict)",
        "/fill_mask": "The most probable fillings of the one mask in each text",
        "/tokenize": "The tokens /embed runs for each text (text-embeddings-inference's /tokenize)",
        "/decode": "Token ids back to text (text-embeddings-inference's /decode)",
        "/health": "200 while the model worker runs, 503 otherwise",
        "/info": "The model and the server's settings",
        "/metrics": "Prometheus metrics",
        "/openapi.json": "This description",
    }


@pytest.mark.parametrize(
    ("changes", "left_out"),
    [
        ({"heads": ()}, ["/predict"]),
        ({"mask_spellings": ()}, ["/fill_mask"]),
        ({"heads": (), "mask_spellings": ()}, ["/predict", "/fill_mask"]),
    ],
    ids=["no-head", "no-mask", "neither"],
)
def test_a_route_whose_head_the_model_lacks_is_left_out_and_only_it(changes, left_out):
    described = document(**changes)
    assert list(described["paths"]) == [path for path in POSTS if path not in left_out] + GETS
    if "/predict" in left_out:  # nothing refers to its answer any more
        assert "Prediction" not in described["components"]["schemas"]
    if "/fill_mask" in left_out:
        assert "Filling" not in described["components"]["schemas"]


def test_each_post_route_takes_a_required_json_body_its_request_models_schema():
    limits = RouteLimits(**LIMITS)
    models = request_models(limits)
    described = openapi_description("m", "1", limits)
    for path in POSTS:
        assert described["paths"][path]["post"]["requestBody"] == {
            "required": True,
            "content": {"application/json": {"schema": models[path].model_json_schema()}},
        }
        jsonschema.Draft202012Validator.check_schema(models[path].model_json_schema())


def test_the_servers_own_request_models_are_described_when_given():
    """The server passes the models it validates with (built with the served model's head chooser);
    those are what the document gives, not ones built again from the limits."""
    limits = RouteLimits(**LIMITS)
    wider = request_models(RouteLimits(**(LIMITS | {"max_items": 7, "heads": ("mnli", "sst2")})))
    described = openapi_description("m", "1", limits, wider)
    for path in POSTS:
        assert described["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"] == (
            wider[path].model_json_schema()
        )
    assert (
        described["paths"]["/embed"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"][
            "inputs"
        ]["oneOf"][1]["maxItems"]
        == 7
    )


def test_request_fields_are_each_post_routes_fields_in_order():
    limits = RouteLimits(**LIMITS)
    fields = request_fields(limits)
    assert list(fields) == POSTS
    assert fields["/fill_mask"] == ("inputs", "top_k")
    assert fields["/decode"] == ("ids", "skip_special_tokens")
    assert fields == {path: tuple(model.model_fields) for path, model in request_models(limits).items()}
    assert all(isinstance(names, tuple) for names in fields.values())


# ------------------------------------------------------------------------------ statuses and errors

# Written out, not read from openapi.ERRORS: these are the words clients and generated docs show, so a
# changed description is a change this test should see.
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


@pytest.mark.parametrize("path", POSTS)
def test_each_post_route_answers_ok_or_one_of_the_error_statuses_in_its_error_shape(path):
    responses = document()["paths"][path]["post"]["responses"]
    assert list(responses) == ["200", *ERROR_STATUSES]
    assert responses["200"]["description"] == "OK" and list(responses["200"]["content"]) == ["application/json"]
    error = ref("OpenAIErrorBody" if path == "/v1/embeddings" else "ErrorBody")
    for status, text in ERRORS.items():
        assert responses[status] == {"description": text, "content": {"application/json": {"schema": error}}}


def test_get_routes_answer_in_their_media_type_and_only_health_answers_503():
    described = document()
    expected = {
        "/health": ("application/json", ref("Health")),
        "/info": ("application/json", {"additionalProperties": True, "type": "object"}),
        "/metrics": ("text/plain", {"type": "string"}),
        "/openapi.json": ("application/json", {"additionalProperties": True, "type": "object"}),
    }
    for path, (media_type, schema) in expected.items():
        responses = described["paths"][path]["get"]["responses"]
        assert responses["200"] == {"description": "OK", "content": {media_type: {"schema": schema}}}
        assert list(responses) == (["200", "503"] if path == "/health" else ["200"])
    assert answer(described, "/health", "get", "503") == {
        "description": "the model worker is not running (error_type Unhealthy)",
        "content": {"application/json": {"schema": ref("ErrorBody")}},
    }


# ------------------------------------------------------------------------------ the answers' schemas


def test_every_reference_reaches_a_component_and_every_component_is_referred_to():
    described = document()
    components = described["components"]["schemas"]
    assert sorted(components) == sorted(ANSWERS)
    assert references(described) == {f"#/components/schemas/{name}" for name in ANSWERS}
    assert references(described["paths"]) == {
        f"#/components/schemas/{name}" for name in ANSWERS if name not in ("OpenAIError", "OpenAIEmbedding", "Usage")
    }
    for schema in components.values():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert "$defs" not in schema  # models they refer to are components of their own
    assert components["OpenAIEmbeddings"]["properties"]["usage"] == ref("Usage")
    assert components["OpenAIEmbeddings"]["properties"]["data"]["items"] == ref("OpenAIEmbedding")
    assert components["OpenAIErrorBody"]["properties"]["error"] == ref("OpenAIError")
    assert components["Health"]["properties"]["status"] == {"const": "ok", "title": "Status", "type": "string"}


GIVEN = [  # (path, status, an answer the server gives, one it never gives)
    ("/embed", "200", [[0.5, -1.0], [0.25, 2.0]], [["a"]]),
    (
        "/v1/embeddings",
        "200",
        {
            "object": "list",
            "data": [
                {"object": "embedding", "embedding": [0.5], "index": 0},
                {"object": "embedding", "embedding": "AAAAPw==", "index": 1},
            ],
            "model": "my-model",
            "usage": {"prompt_tokens": 3, "total_tokens": 3},
        },
        {
            "object": "list",
            "data": [{"object": "embedding", "embedding": [0.5], "index": 0}],
            "model": "my-model",
            "usage": {"prompt_tokens": 3},
        },
    ),
    ("/predict", "200", [{"score": 0.9, "label": "entailment"}], [{"score": 0.9}]),
    ("/predict", "200", [[{"score": 0.9, "label": "a"}], [{"score": 0.1, "label": "b"}]], [[{"label": 1}]]),
    ("/fill_mask", "200", [[{"score": 0.5, "token_str": " a", "sequence": "x a"}]], [{"score": 0.5}]),
    (
        "/tokenize",
        "200",
        [[{"id": 0, "text": "<s>", "special": True, "start": None, "stop": None}]],
        [[{"id": 0, "text": "<s>", "special": "yes", "start": None, "stop": None}]],
    ),
    ("/decode", "200", ["a text"], [[1, 2]]),
    ("/embed", "413", {"error": "too long", "error_type": "Validation", "field": "inputs[0]"}, {"error": "x"}),
    (
        "/v1/embeddings",
        "422",
        {"error": {"message": "m", "type": "invalid_request_error", "param": None, "code": 422}},
        {"error": "m", "error_type": "Validation"},
    ),
]


@pytest.mark.parametrize(
    ("path", "status", "given", "never"),
    GIVEN,
    ids=[f"{path}-{status}-{i}" for i, (path, status, *_) in enumerate(GIVEN)],
)
def test_the_answers_schemas_take_what_the_server_answers_and_rule_out_other_shapes(path, status, given, never):
    described = document()
    schema = answer(described, path, status=status)["content"]["application/json"]["schema"]
    assert valid(given, schema, described)
    assert not valid(never, schema, described)


def test_health_answers_are_described_with_the_workers_states():
    described = document()
    ok = answer(described, "/health", "get")["content"]["application/json"]["schema"]
    down = answer(described, "/health", "get", "503")["content"]["application/json"]["schema"]
    assert valid({"status": "ok", "queue_depth": 2}, ok, described)
    assert not valid({"status": "down", "queue_depth": 2}, ok, described)
    assert valid({"error": "the model worker is not running", "error_type": "Unhealthy"}, down, described)
    assert not valid({"error_type": "Unhealthy"}, down, described)
