"""What each route takes, and that the served OpenAPI document says exactly that: unknown
fields refused by name, ``/v1/embeddings``' long inputs and nested lists answered in its own
terms, one truncation rule for pairs, label names without fairseq's fillers, scores written
as float32, and requests valid under the served schema accepted while the ones it rules out
are refused."""

from __future__ import annotations

import math
import re
from typing import Any

import httpx
import numpy as np
import pytest
import torch

from tests.serve.conftest import LABELS, serving

HEAD = "sentence_classification_head"
LONG = "word " * 80  # 81 tokens, more than the served model's 64 positions


@pytest.fixture(scope="module")
def live(hub):
    with serving(hub) as (url, server):
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, server


def post(client: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    return client.post(path, json=body)


def message(response: httpx.Response) -> str:
    """The error's text, in TEI's shape or OpenAI's."""
    error = response.json()["error"]
    return error["message"] if isinstance(error, dict) else error


def field(response: httpx.Response) -> str | None:
    body = response.json()
    return body["error"]["param"] if isinstance(body["error"], dict) else body.get("field")


# ------------------------------------------------------------------------------ unknown fields


MINIMAL = {
    "/embed": {"inputs": "a"},
    "/v1/embeddings": {"input": "a"},
    "/predict": {"inputs": "a"},
    "/fill_mask": {"inputs": "Hello <mask>!"},
    "/tokenize": {"inputs": "a"},
    "/decode": {"ids": [0, 5, 2]},
}


@pytest.mark.parametrize("path", sorted(MINIMAL))
def test_every_route_refuses_a_field_it_does_not_take_naming_it(live, path):
    client, _ = live
    assert post(client, path, MINIMAL[path]).status_code == 200
    refused = post(client, path, {**MINIMAL[path], "bogus": 1, "also_bogus": None})
    assert refused.status_code == 422 and field(refused) == "bogus", refused.text
    assert "unknown fields 'bogus', 'also_bogus'" in message(refused)
    assert f"{path} takes " in message(refused)


def test_other_apis_spellings_get_a_did_you_mean(live):
    client, _ = live
    topk = post(client, "/fill_mask", {"inputs": "Hello <mask>!", "topk": -1})  # the hub's and fairseq's spelling
    assert topk.status_code == 422 and field(topk) == "topk"
    assert "unknown field 'topk' (did you mean top_k?)" in message(topk)
    assert "(did you mean input?)" in message(post(client, "/v1/embeddings", {"inputs": "a"}))
    assert "(did you mean inputs?)" in message(post(client, "/embed", {"inputs": "a", "input": "b"}))
    assert "(did you mean normalize?)" in message(post(client, "/embed", {"inputs": "a", "normalise": False}))
    assert "(did you mean raw_scores?)" in message(post(client, "/predict", {"inputs": "a", "return_logits": True}))


def test_each_api_s_documented_fields_are_taken(live):
    client, _ = live
    openai = {"input": ["a"], "model": "any", "user": "someone", "encoding_format": "float", "dimensions": 8}
    assert post(client, "/v1/embeddings", openai).status_code == 200
    tei = {
        "/embed": {
            "inputs": ["a"],
            "normalize": True,
            "truncate": False,
            "truncation_direction": "Right",
            "prompt_name": None,
            "dimensions": 8,
        },
        "/predict": {"inputs": "a", "raw_scores": False, "truncate": False, "truncation_direction": "right"},
        "/tokenize": {"inputs": "a", "add_special_tokens": True, "prompt_name": None},
        "/decode": {"ids": [0, 5, 2], "skip_special_tokens": True},
    }
    for path, body in tei.items():
        assert post(client, path, body).status_code == 200, path


# ------------------------------------------------------------------------------ /v1/embeddings


def test_openai_long_input_names_the_server_flag_and_auto_truncate_cuts_it(live, hub):
    client, _ = live
    refused = post(client, "/v1/embeddings", {"input": ["fine", LONG]})
    assert refused.status_code == 413 and field(refused) == "input[1]"
    assert "--auto-truncate" in message(refused) and "set truncate" not in message(refused)
    with serving(hub, auto_truncate=True) as (url, _):
        cut = httpx.post(f"{url}/v1/embeddings", json={"input": ["fine", LONG]}, timeout=30)
    assert cut.status_code == 200, cut.text
    vectors = torch.tensor([item["embedding"] for item in cut.json()["data"]])
    assert torch.equal(vectors, hub.embed(["fine", LONG], normalize=True))


def test_openai_nested_text_lists_are_told_what_input_takes(live):
    client, _ = live
    nested = post(client, "/v1/embeddings", {"input": [["a", "b"]]})
    assert nested.status_code == 422 and field(nested) == "input[0]"
    assert "input is a text or a list of texts" in message(nested) and "token" not in message(nested)
    tokens = post(client, "/v1/embeddings", {"input": [[1, 2, 3]]})
    assert tokens.status_code == 422 and field(tokens) == "input"
    assert "token ids (OpenAI's token arrays) are not accepted" in message(tokens)


# ------------------------------------------------------------------------------ /predict


def test_predict_truncates_a_pair_longest_first_as_embed_does(live, hub, monkeypatch):
    """The longer side gives way (the library's longest_first, </s> kept), as /embed cuts a
    pair, not the end of the row (which cut a pair's second text away)."""
    client, server = live
    import roberta_ext.serve.server as app  # where the predict task calls the library

    ran: list[list[int]] = []

    def recording(model, inputs, head, rows, **options):
        ran.extend(list(row) for row in rows)
        return classify_rows(model, inputs, head, rows, **options)

    classify_rows = app.classify_rows
    monkeypatch.setattr(app, "classify_rows", recording)
    limit = hub.inputs.max_positions
    for pair in ((LONG, "a short answer"), ("a short premise", LONG)):
        ran.clear()
        answer = post(client, "/predict", {"inputs": list(pair), "truncate": True})
        assert answer.status_code == 200, answer.text
        expected = hub.inputs.encode_truncated(pair, limit)
        assert ran == [expected] == [server.default_embedder.encode(pair)]
        short = hub.inputs.tokenizer.encode(pair[0] if pair[1] == LONG else pair[1])
        assert len(expected) == limit and expected[-1] == hub.dictionary.eos()
        assert any(expected[i : i + len(short)] == short for i in range(limit))  # the short text whole


def test_labels_leave_fairseqs_filler_symbols_out(hub, monkeypatch):
    """fairseq-preprocess pads label/dict.txt with madeupwordNNNN: those are no labels."""
    monkeypatch.setattr(hub, "labels", [*LABELS, "madeupword0000", "madeupword0001"])
    with serving(hub) as (url, _):
        info = httpx.get(f"{url}/info", timeout=30).json()
        predicted = httpx.post(f"{url}/predict", json={"inputs": "Great movie!"}, timeout=30).json()
    assert info["labels"] == LABELS
    assert info["model_type"]["classifier"]["id2label"] == {"0": "negative", "1": "positive"}
    assert sorted(p["label"] for p in predicted) == sorted(LABELS)


# ------------------------------------------------------------------------------ float32 text


def test_scores_are_written_as_float32_text(live):
    """Each score is the shortest text of its float32 value, as vectors are: it reads back as
    itself through float32 (a float64 expansion such as 0.5013812184333801 would not)."""
    client, _ = live
    filled = post(client, "/fill_mask", {"inputs": "Hello <mask>!", "top_k": 5}).json()
    predicted = post(client, "/predict", {"inputs": "Great movie!"}).json()
    values = [f["score"] for f in filled] + [p["score"] for p in predicted]
    assert values and all(value == float(str(np.float32(value))) for value in values), values


# ------------------------------------------------------------------------------ the OpenAPI document


def valid(value: Any, schema: dict[str, Any]) -> bool:
    """Whether ``value`` is valid under ``schema``, for the parts of JSON Schema the served
    description uses (type, enum, const, oneOf, anyOf, not, items, min/maxItems,
    minimum/maximum, pattern, properties, required, additionalProperties)."""
    if "oneOf" in schema and sum(valid(value, option) for option in schema["oneOf"]) != 1:
        return False
    if "anyOf" in schema and not any(valid(value, option) for option in schema["anyOf"]):
        return False
    if "const" in schema and value != schema["const"]:
        return False
    if "not" in schema and valid(value, schema["not"]):
        return False
    kinds = schema.get("type")
    if kinds is not None:
        kinds = [kinds] if isinstance(kinds, str) else kinds
        is_kind = {
            "string": isinstance(value, str),
            "integer": type(value) is int,
            "number": type(value) in (int, float),
            "boolean": type(value) is bool,
            "null": value is None,
            "array": isinstance(value, list),
            "object": isinstance(value, dict),
        }
        if not any(is_kind[kind] for kind in kinds):
            return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        return False
    if type(value) in (int, float):
        if not schema.get("minimum", -math.inf) <= value <= schema.get("maximum", math.inf):
            return False
    if isinstance(value, list):
        if not schema.get("minItems", 0) <= len(value) <= schema.get("maxItems", math.inf):
            return False
        if "items" in schema and not all(valid(item, schema["items"]) for item in value):
            return False
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        if any(name not in value for name in schema.get("required", [])):
            return False
        if schema.get("additionalProperties") is False and any(name not in properties for name in value):
            return False
        if not all(valid(item, properties[name]) for name, item in value.items() if name in properties):
            return False
    return True


def request_schema(description: dict[str, Any], path: str) -> dict[str, Any]:
    return description["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]


# Requests the old document allowed and the routes refuse: the schema must now rule them out.
RULED_OUT = [
    ("/embed", {"inputs": [["a one-item pair"]]}),
    ("/embed", {"inputs": "a", "dimensions": 33}),
    ("/v1/embeddings", {"input": "a", "dimensions": 0}),
    ("/decode", {"ids": [0, 99999]}),
    ("/decode", {"ids": [-1]}),
    ("/decode", {"ids": [[0, 1995, 2]]}),  # a madeupword filler of the test model's dict.txt
    ("/predict", {"inputs": "a", "head": "nope"}),
    ("/embed", {"inputs": "a", "prompt_name": "query"}),
    ("/tokenize", {"inputs": "a", "prompt_name": "query"}),
    ("/embed", {"inputs": "a", "truncation_direction": "left"}),
    ("/fill_mask", {"inputs": "Hello <mask>!", "topk": 3}),
    ("/fill_mask", {"inputs": "no mask"}),
    ("/fill_mask", {"inputs": ["<mask>", "two <mask> <mask>"]}),
    ("/fill_mask", {"inputs": "<mask>", "top_k": 101}),
    ("/predict", {"inputs": [["a", "b", "c"]]}),
]


@pytest.mark.parametrize(("path", "body"), RULED_OUT, ids=[f"{p} {b}" for p, b in RULED_OUT])
def test_what_the_routes_refuse_the_schema_rules_out(live, path, body):
    client, _ = live
    description = client.get("/openapi.json").json()
    assert not valid(body, request_schema(description, path))
    assert post(client, path, body).status_code in (400, 422)


def test_requests_valid_under_the_schema_are_accepted(live, hub):
    """Every range's edge, each optional field null, one-item and two-item pairs, a prompt-less
    model's only prompt_name (null), the head by name."""
    client, server = live
    description = client.get("/openapi.json").json()
    dimension, vocab = server.default_embedder.dimension, len(hub.dictionary)
    top_k_schema = request_schema(description, "/fill_mask")["properties"]["top_k"]  # an integer, or null
    top_k = next(option["maximum"] for option in top_k_schema["anyOf"] if option.get("type") == "integer")
    assert (dimension, top_k) == (32, min(100, vocab))
    accepted = [
        ("/embed", {"inputs": [["a", "b"], "c"], "dimensions": dimension, "truncation_direction": "Right"}),
        ("/embed", {"inputs": "a", "normalize": None, "truncate": None, "prompt_name": None, "dimensions": 1}),
        ("/v1/embeddings", {"input": ["a"], "model": None, "user": None, "encoding_format": "base64"}),
        ("/predict", {"inputs": ["a one-item pair"], "head": HEAD, "raw_scores": True}),
        ("/predict", {"inputs": [["a"], ["b", "c"]], "head": None, "truncation_direction": None}),
        ("/fill_mask", {"inputs": ["<mask>", "Hello <mask>!"], "top_k": top_k}),
        ("/tokenize", {"inputs": ["a", ""], "add_special_tokens": None}),
        ("/decode", {"ids": [[0, vocab - 1], []], "skip_special_tokens": False}),
        ("/decode", {"ids": [0]}),
    ]
    for path, body in accepted:
        assert valid(body, request_schema(description, path)), (path, body)
        answer = post(client, path, body)
        assert answer.status_code == 200, (path, body, answer.text)


def test_every_request_schema_is_closed_and_names_the_fields_its_route_takes(live):
    client, server = live
    description = client.get("/openapi.json").json()
    for path, fields in server.request_fields.items():
        schema = request_schema(description, path)
        assert schema["additionalProperties"] is False, path
        assert tuple(schema["properties"]) == fields, path


def test_health_documents_its_503_and_a_405_names_the_allowed_methods(live):
    client, _ = live
    description = client.get("/openapi.json").json()
    assert "503" in description["paths"]["/health"]["get"]["responses"]
    wrong = client.get("/embed")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json()["error_type"] == "Route"
    assert set(client.post("/health").headers["allow"].split(", ")) == {"GET", "HEAD"}


def test_the_schema_follows_the_model_heads_and_vocabulary():
    """Several heads: ``head`` is required (the route asks to name one); no head or no
    masked-LM head: the route that needs it is not described (it refuses every request);
    fillers of ``dict.txt``: ids ``/decode`` refuses."""
    from roberta_ext.serve.openapi import RouteLimits, openapi_description

    def described(**changes: Any) -> dict[str, Any]:
        limits = {"max_items": 4, "dimension": 8, "vocab_size": 10, "heads": ("only",), "prompts": ("query",)}
        limits |= {"max_top_k": 10, "mask_spellings": ("<mask>", "[MASK]")} | changes
        return openapi_description("m", "0", RouteLimits(**limits))

    two = request_schema(described(heads=("a", "b")), "/predict")
    assert not valid({"inputs": "x"}, two) and valid({"inputs": "x", "head": "b"}, two)
    assert not valid({"inputs": "x", "head": None}, two)
    assert valid({"inputs": "x"}, request_schema(described(), "/predict"))
    assert "/predict" not in described(heads=())["paths"]
    assert "/fill_mask" not in described(mask_spellings=())["paths"]
    fill = request_schema(described(), "/fill_mask")
    assert valid({"inputs": ["a [MASK].", "<mask> b"]}, fill)
    assert not valid({"inputs": "a [MASK] <mask>"}, fill) and not valid({"inputs": [str(["x"] * 5)]}, fill)
    embed = request_schema(described(), "/embed")
    assert valid({"inputs": "x", "prompt_name": "query"}, embed) and not valid({"inputs": ["a"] * 5}, embed)
    decode = request_schema(described(textless_ids=(7, 8)), "/decode")
    assert valid({"ids": [0, 6, 9]}, decode) and not valid({"ids": [[0], [8]]}, decode)
