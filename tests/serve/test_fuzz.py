"""Every route driven from the OpenAPI document the server serves, by schemathesis, in process
on the ASGI app (no network): requests valid under the document and requests that break it
(a wrong type, a missing or unknown field, a value out of range), a bounded number per route.
No answer may be a 5xx; every answer's status, media type and body must be one the document
lists for that route (a valid request answered 200, or 413 for an input longer than the model
takes; an invalid one refused 4xx); and the server is healthy after each route's run."""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from starlette.testclient import TestClient

from roberta_ext.serve import ServeOptions, create_app
from roberta_ext.serve.schemas import RouteLimits, request_models
from roberta_ext.serve.validation import validated

EXAMPLES = 25
"""Requests per route and mode (valid, invalid): about 15 s for every route on two cores."""

ROUTES = [
    ("POST", "/embed"),
    ("POST", "/v1/embeddings"),
    ("POST", "/predict"),
    ("POST", "/fill_mask"),
    ("POST", "/tokenize"),
    ("POST", "/decode"),
    ("GET", "/health"),
    ("GET", "/info"),
    ("GET", "/metrics"),
    ("GET", "/openapi.json"),
]
"""Every operation of the document (a test checks that it lists no other)."""

CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {
            # A request the document allows is answered 200, or 413 when an input is longer than
            # the model takes (a length in tokens no schema can state).
            "positive_data_acceptance": {"expected-statuses": [200, 413]},
            # One it rules out is refused, as the document says (never 200, never 5xx).
            "negative_data_rejection": {"expected-statuses": [400, 413, 422]},
        },
    }
)


@pytest.fixture(scope="module")
def fuzzed_app(hub):
    """The app over the test model (a classification head and a masked-LM head: every route
    described), with small limits so that the fuzzer reaches them."""
    return create_app(hub, ServeOptions(max_client_batch_size=4, timeout_s=30))


@pytest.fixture(scope="module")
def fuzzed_schema(fuzzed_app):
    """The document as the app serves it. schemathesis runs the app's lifespan (the model
    worker) on its first request and keeps it for the process."""
    return schemathesis.openapi.from_asgi("/openapi.json", fuzzed_app, config=CONFIG)


def test_the_fuzzed_routes_are_every_route_of_the_document(fuzzed_schema):
    listed = {(method.upper(), path) for path, item in fuzzed_schema.raw_schema["paths"].items() for method in item}
    assert listed == set(ROUTES)


FUZZED = [
    (method, path, mode)
    for method, path in ROUTES
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if method == "POST" or mode is GenerationMode.POSITIVE  # a GET takes no parameters: nothing to break
]


@pytest.mark.parametrize(("method", "path", "mode"), FUZZED, ids=[f"{m} {p} {mode.value}" for m, p, mode in FUZZED])
def test_every_route_answers_as_its_schema_says(fuzzed_schema, method, path, mode):
    """Every check schemathesis has (no 5xx; status, media type, headers and body as
    documented; valid data accepted, invalid data refused) on generated requests."""
    operation = fuzzed_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,  # the same requests every run: a failure here is reproducible
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def fuzz(case):
        case.call_and_validate()

    fuzz()
    # Healthy afterwards: the worker alive, nothing left queued, every slot free, a request answered.
    server = fuzzed_schema.app.state.server
    client = TestClient(fuzzed_schema.app)  # the lifespan is schemathesis's, running since its first request
    assert client.get("/health").json() == {"status": "ok", "queue_depth": 0}
    assert client.post("/embed", json={"inputs": "still here"}).status_code == 200
    assert server.worker._in_flight == 0


def test_an_integer_is_what_json_schema_calls_one():
    """What the fuzzer found first: JSON Schema's ``integer`` is any number without a fraction,
    so ``5.0`` is valid under the document; the strict request models refused it (422)."""
    limits = RouteLimits(
        max_items=4, dimension=32, vocab_size=100, heads=(), prompts=(), max_top_k=10, mask_spellings=("<mask>",)
    )
    models = request_models(limits)
    assert models["/embed"].model_validate({"inputs": "a", "dimensions": 5.0}).dimensions == 5
    assert models["/decode"].model_validate({"ids": [0.0, 7.0]}).ids == [0, 7]
    assert models["/fill_mask"].model_validate({"inputs": "a <mask>", "top_k": 3.0}).top_k == 3
    for body, message in (
        ({"inputs": "a", "dimensions": 5.5}, "dimensions must be an integer, got a number"),
        ({"inputs": "a", "dimensions": True}, "dimensions must be an integer, got a boolean"),
        ({"inputs": "a", "dimensions": "5"}, "dimensions must be an integer, got a string"),
        ({"inputs": "a", "dimensions": 33.0}, "dimensions must be in 1..32, got 33"),
    ):
        error = validated(models["/embed"], body, route="/embed")
        assert (error.status, error.message) == (422, message), body
    schema = models["/embed"].model_json_schema()["properties"]["dimensions"]["anyOf"][0]
    assert (schema["minimum"], schema["maximum"]) == (1, 32)  # the range is in the document too
