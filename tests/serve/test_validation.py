"""Request bodies read into the routes' request models, called directly (no server, no model,
no threads, so mutation testing can fork per mutant): what a valid body gives, and the exact
status, field path, message and error type of every kind of refusal :mod:`.validation` tells."""

from __future__ import annotations

import dataclasses
import json

import pytest

from roberta_ext.serve.schemas import RouteLimits, request_models
from roberta_ext.serve.validation import RequestError, parse_json_object, type_name, validated
from tests.serve.test_schemas import LIMITS as LIMIT_VALUES
from tests.serve.test_schemas import models, read, refused

LIMITS = RouteLimits(**LIMIT_VALUES)
EMBED_TAKES = "/embed takes inputs, normalize, truncate, truncation_direction, prompt_name, dimensions"


def test_the_request_models_are_the_six_post_routes():
    assert list(models()) == ["/embed", "/v1/embeddings", "/predict", "/fill_mask", "/tokenize", "/decode"]


# ------------------------------------------------------------------------------ type_name


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (None, "null"),
        (True, "a boolean"),
        (False, "a boolean"),
        (0, "a number"),
        (1.5, "a number"),
        ("", "a string"),
        ([], "a list"),
        ({}, "an object"),
        (b"x", "bytes"),  # not JSON: its Python type's name
    ],
)
def test_type_name_calls_each_json_type_as_the_messages_do(value, name):
    assert type_name(value) == name


# ------------------------------------------------------------------------------ parse_json_object


@pytest.mark.parametrize("body", [b'{"inputs": ["a", 1], "top_k": null}', b"{}", b' {"a": {"b": [1.5]}} '])
def test_parse_json_object_returns_a_json_object_as_it_is(body):
    assert parse_json_object(body) == json.loads(body)


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"inputs": ', 400, "the body is not valid JSON: Expecting value: line 1 column 12 (char 11)"),
        (b"", 400, "the body is not valid JSON: Expecting value: line 1 column 1 (char 0)"),
        (b"\xff\xfe", 400, "the body is not valid UTF-8 (byte 0: b'\\xff')"),
        (b'{"inputs": "\xff"}', 400, "the body is not valid UTF-8 (byte 12: b'\\xff')"),
        (b"[" * 100_000, 400, "the body is not JSON this server reads: its lists or objects nest too deeply"),
        (b'["a list"]', 422, "the body must be a JSON object, got a list"),
        (b"3", 422, "the body must be a JSON object, got a number"),
        (b'"text"', 422, "the body must be a JSON object, got a string"),
        (b"null", 422, "the body must be a JSON object, got null"),
        (b"true", 422, "the body must be a JSON object, got a boolean"),
    ],
    ids=["truncated", "empty", "not-utf8", "not-utf8-inside", "too-deep", "list", "number", "string", "null", "bool"],
)
def test_parse_json_object_refuses_a_body_that_is_not_a_json_object_naming_the_body(body, status, message):
    with pytest.raises(RequestError) as caught:
        parse_json_object(body)
    assert (caught.value.status, caught.value.field, caught.value.message) == (status, "body", message)
    assert caught.value.kind == "Validation"


# ------------------------------------------------------------------------------ valid bodies

EMBED_DEFAULTS = {
    "normalize": True,
    "truncate": False,
    "truncation_direction": "right",
    "prompt_name": None,
    "dimensions": None,
}


@pytest.mark.parametrize(
    ("route", "body", "values"),
    [
        ("/embed", {"inputs": "a"}, {"inputs": "a", **EMBED_DEFAULTS}),
        (
            "/embed",
            {"inputs": ["a", ["b", "c"]], "normalize": False, "truncate": True, "dimensions": 32},
            {**EMBED_DEFAULTS, "inputs": ["a", ["b", "c"]], "normalize": False, "truncate": True, "dimensions": 32},
        ),
        (
            "/embed",
            {"inputs": "a", "truncation_direction": "Right", "prompt_name": "query", "dimensions": 4.0},
            {**EMBED_DEFAULTS, "inputs": "a", "prompt_name": "query", "dimensions": 4},
        ),
        ("/embed", {"inputs": "a", "normalize": None, "dimensions": None}, {"inputs": "a", **EMBED_DEFAULTS}),
        (
            "/v1/embeddings",
            {"input": ["a", "b"], "model": "m", "encoding_format": "base64", "dimensions": 1, "user": "u"},
            {"input": ["a", "b"], "model": "m", "encoding_format": "base64", "dimensions": 1, "user": "u"},
        ),
        (
            "/v1/embeddings",
            {"input": "a"},
            {"input": "a", "model": None, "encoding_format": "float", "dimensions": None, "user": None},
        ),
        (
            "/predict",
            {"inputs": [["a"], ["b", "c"]], "raw_scores": True, "head": "mnli"},
            {
                "inputs": [["a"], ["b", "c"]],
                "raw_scores": True,
                "truncate": False,
                "truncation_direction": "right",
                "head": "mnli",
            },
        ),
        (
            "/predict",
            {"inputs": ["a", "b"]},
            {
                "inputs": ["a", "b"],
                "raw_scores": False,
                "truncate": False,
                "truncation_direction": "right",
                "head": None,
            },
        ),
        ("/fill_mask", {"inputs": "a <mask>"}, {"inputs": "a <mask>", "top_k": 5}),
        ("/fill_mask", {"inputs": ["<mask>", "b <mask>"], "top_k": 3}, {"inputs": ["<mask>", "b <mask>"], "top_k": 3}),
        (
            "/tokenize",
            {"inputs": ["a", "b"], "add_special_tokens": False, "prompt_name": "query"},
            {"inputs": ["a", "b"], "add_special_tokens": False, "prompt_name": "query"},
        ),
        ("/tokenize", {"inputs": "a"}, {"inputs": "a", "add_special_tokens": True, "prompt_name": None}),
        ("/decode", {"ids": [0, 5, 99]}, {"ids": [0, 5, 99], "skip_special_tokens": True}),
        (
            "/decode",
            {"ids": [[1], [2, 3]], "skip_special_tokens": False},
            {"ids": [[1], [2, 3]], "skip_special_tokens": False},
        ),
    ],
)
def test_each_route_returns_the_model_with_the_values_of_a_valid_body(route, body, values):
    assert read(route, body) == values


# ------------------------------------------------------------------------------ wrong types and values


@pytest.mark.parametrize(
    ("route", "body", "field", "message"),
    [
        ("/embed", {}, "inputs", "missing field 'inputs'"),
        ("/decode", {"skip_special_tokens": True}, "ids", "missing field 'ids'"),
        (
            "/embed",
            {"inputs": 3},
            "inputs",
            "inputs must be a string, a list of strings or of [text, text] pairs, got a number",
        ),
        ("/embed", {"inputs": ["a", 7]}, "inputs[1]", "inputs[1] must be a string, got a number"),
        ("/embed", {"inputs": ["ok", None]}, "inputs[1]", "inputs[1] must be a string, got null"),
        ("/embed", {"inputs": ["a", ["b", 3]]}, "inputs[1][1]", "inputs[1][1] must be a string, got a number"),
        (
            "/embed",
            {"inputs": ["a", ["b", "c", "d"]]},
            "inputs[1]",
            "inputs[1] must be a pair [text, text], got 3 items",
        ),
        ("/embed", {"inputs": ["a", ["b"]]}, "inputs[1]", "inputs[1] must be a pair [text, text], got 1 item"),
        (
            "/embed",
            {"inputs": "\ud800 x"},
            "inputs",
            "inputs is not valid Unicode: a lone surrogate '\\ud800' at character 0",
        ),
        ("/embed", {"inputs": "x", "normalize": "yes"}, "normalize", "normalize must be true or false, got a string"),
        ("/embed", {"inputs": "x", "truncate": 1}, "truncate", "truncate must be true or false, got a number"),
        ("/embed", {"inputs": "x", "dimensions": True}, "dimensions", "dimensions must be an integer, got a boolean"),
        ("/embed", {"inputs": "x", "dimensions": "4"}, "dimensions", "dimensions must be an integer, got a string"),
        ("/embed", {"inputs": "x", "dimensions": 4.5}, "dimensions", "dimensions must be an integer, got a number"),
        (
            "/embed",
            {"inputs": "x", "prompt_name": "nope"},
            "prompt_name",
            "prompt_name must be one of query, got 'nope'",
        ),
        (
            "/embed",
            {"inputs": "x", "truncation_direction": "left"},
            "truncation_direction",
            "truncation_direction must be one of right, Right, got 'left'",
        ),
        ("/v1/embeddings", {"input": ["a", 7]}, "input[1]", "input[1] must be a string, got a number"),
        (
            "/v1/embeddings",
            {"input": ["a", ["b"]]},
            "input[1]",
            "input[1] must be a string, got a list: input is a text or a list of texts",
        ),
        (
            "/v1/embeddings",
            {"input": [1, 2]},
            "input",
            "input must be a text or a list of texts: token ids (OpenAI's token arrays) are not accepted",
        ),
        (
            "/v1/embeddings",
            {"input": "x", "encoding_format": "int8"},
            "encoding_format",
            "encoding_format must be one of float, base64, got 'int8'",
        ),
        ("/v1/embeddings", {"input": "x", "model": 3}, "model", "model must be a string, got a number"),
        ("/predict", {"inputs": "x", "head": "nope"}, "head", "head must be one of mnli, got 'nope'"),
        (
            "/predict",
            {"inputs": ["a", "b", "c"]},
            "inputs",
            "inputs must be one text or a pair of texts, got a list of 3",
        ),
        (
            "/predict",
            {"inputs": [["a"], "b"]},
            "inputs[1]",
            "inputs[1] must be a list of one or two texts, got a string",
        ),
        (
            "/predict",
            {"inputs": [["a"], ["a", "b", "c"]]},
            "inputs[1]",
            "inputs[1] must be one text or a pair of texts, got a list of 3",
        ),
        (
            "/predict",
            {"inputs": [["a"], []]},
            "inputs[1]",
            "inputs[1] must be one text or a pair of texts, got a list of 0",
        ),
        ("/predict", {"inputs": "x", "raw_scores": 1}, "raw_scores", "raw_scores must be true or false, got a number"),
        ("/fill_mask", {"inputs": ["<mask>", 1]}, "inputs[1]", "inputs[1] must be a string, got a number"),
        ("/fill_mask", {"inputs": "<mask>", "top_k": True}, "top_k", "top_k must be an integer, got a boolean"),
        ("/fill_mask", {"inputs": "<mask>", "top_k": "3"}, "top_k", "top_k must be an integer, got a string"),
        ("/fill_mask", {"inputs": "<mask>", "top_k": 3.5}, "top_k", "top_k must be an integer, got a number"),
        ("/tokenize", {"inputs": {"a": 1}}, "inputs", "inputs must be a string or a list of strings, got an object"),
        ("/tokenize", {"inputs": ["a", 1.5]}, "inputs[1]", "inputs[1] must be a string, got a number"),
        (
            "/tokenize",
            {"inputs": "a", "add_special_tokens": "no"},
            "add_special_tokens",
            "add_special_tokens must be true or false, got a string",
        ),
        ("/decode", {"ids": "abc"}, "ids", "ids must be a list of ids or a list of such lists, got a string"),
        ("/decode", {"ids": [[0], 3]}, "ids[1]", "ids[1] must be a list of ids, got a number"),
        ("/decode", {"ids": [[0], [1.5]]}, "ids[1][0]", "ids[1][0] must be a token id in 0..99, got a number"),
        (
            "/decode",
            {"ids": [[0, 1, 2], [3, 4, "5"]]},
            "ids[1][2]",
            "ids[1][2] must be a token id in 0..99, got a string",
        ),
        (
            "/decode",
            {"ids": [[0, 1, 2], [3, 4, True]]},
            "ids[1][2]",
            "ids[1][2] must be a token id in 0..99, got a boolean",
        ),
        (
            "/decode",
            {"ids": [0, 1], "skip_special_tokens": 0},
            "skip_special_tokens",
            "skip_special_tokens must be true or false, got a number",
        ),
    ],
)
def test_each_route_refuses_a_wrong_type_naming_the_field_path(route, body, field, message):
    assert refused(route, body) == (422, field, message, "Validation")


# ------------------------------------------------------------------------------ list lengths

LIST_FIELDS = [
    ("/embed", "inputs", "a"),
    ("/v1/embeddings", "input", "a"),
    ("/predict", "inputs", ["a"]),
    ("/fill_mask", "inputs", "<mask>"),
    ("/tokenize", "inputs", "a"),
    ("/decode", "ids", [0]),
]


@pytest.mark.parametrize(("route", "field", "item"), LIST_FIELDS)
def test_an_empty_list_of_inputs_is_a_400_empty_answer(route, field, item):
    assert refused(route, {field: []}) == (400, field, f"{field} is an empty list", "Empty")


@pytest.mark.parametrize(("route", "field", "item"), LIST_FIELDS)
def test_exactly_max_items_inputs_are_accepted_and_one_more_is_a_413(route, field, item):
    most = LIMITS.max_items
    assert read(route, {field: [item] * most})[field] == [item] * most
    message = f"{field} has {most + 1} inputs, more than the maximum of {most} per request"
    assert refused(route, {field: [item] * (most + 1)}) == (413, field, message, "Validation")


def test_one_list_of_ids_is_one_text_and_not_limited_to_max_items():
    ids = list(range(LIMITS.max_items + 5))
    assert read("/decode", {"ids": ids})["ids"] == ids


# ------------------------------------------------------------------------------ integer ranges


@pytest.mark.parametrize(
    ("route", "body", "field", "ends", "span"),
    [
        ("/fill_mask", {"inputs": "<mask>"}, "top_k", (1, 10), "1..10"),
        ("/embed", {"inputs": "x"}, "dimensions", (1, 32), "1..32"),
        ("/v1/embeddings", {"input": "x"}, "dimensions", (1, 32), "1..32"),
    ],
)
def test_an_integer_field_accepts_its_ends_and_refuses_one_past_them(route, body, field, ends, span):
    low, high = ends
    assert read(route, {**body, field: low})[field] == low
    assert read(route, {**body, field: high})[field] == high
    for outside in (low - 1, high + 1):
        message = f"{field} must be in {span}, got {outside}"
        assert refused(route, {**body, field: outside}) == (422, field, message, "Validation")


@pytest.mark.parametrize(
    ("ids", "field", "shown"),
    [
        ([0, -1], "ids[1]", -1),
        ([0, 100], "ids[1]", 100),
        ([0, 99999], "ids[1]", 99999),
        ([[5], [1, 100]], "ids[1][1]", 100),
    ],
)
def test_decode_refuses_an_id_outside_the_vocabulary_naming_its_place(ids, field, shown):
    message = f"{field} must be a token id in 0..99, got {shown}"
    assert refused("/decode", {"ids": ids}) == (422, field, message, "Validation")


# ------------------------------------------------------------------------------ unknown fields


@pytest.mark.parametrize(
    ("route", "body", "field", "message"),
    [
        (
            "/fill_mask",
            {"inputs": "<mask>", "topk": 3},
            "topk",
            "unknown field 'topk' (did you mean top_k?): /fill_mask takes inputs, top_k",
        ),
        (
            "/fill_mask",
            {"inputs": "<mask>", "k": 3},
            "k",
            "unknown field 'k' (did you mean top_k?): /fill_mask takes inputs, top_k",
        ),
        (
            "/embed",
            {"inputs": "x", "normalise": True},
            "normalise",
            f"unknown field 'normalise' (did you mean normalize?): {EMBED_TAKES}",
        ),
        ("/embed", {"inputs": "x", "zzz": 1}, "zzz", f"unknown field 'zzz': {EMBED_TAKES}"),
        (
            "/v1/embeddings",
            {"inputs": "x"},
            "inputs",
            "unknown field 'inputs' (did you mean input?): "
            "/v1/embeddings takes input, model, encoding_format, dimensions, user",
        ),
        (
            "/predict",
            {"inputs": "x", "return_logits": True},
            "return_logits",
            "unknown field 'return_logits' (did you mean raw_scores?): "
            "/predict takes inputs, raw_scores, truncate, truncation_direction, head",
        ),
        (
            "/tokenize",
            {"inputs": "a", "prompt": "query"},
            "prompt",
            "unknown field 'prompt' (did you mean prompt_name?): "
            "/tokenize takes inputs, add_special_tokens, prompt_name",
        ),
        (
            "/decode",
            {"ids": [1], "skip_special": False},
            "skip_special",
            "unknown field 'skip_special' (did you mean skip_special_tokens?): /decode takes ids, skip_special_tokens",
        ),
        (
            "/fill_mask",
            {"inputs": "<mask>", "return_logits": True},
            "return_logits",
            "unknown field 'return_logits': /fill_mask takes inputs, top_k",  # raw_scores is not /fill_mask's
        ),
    ],
)
def test_an_unknown_field_is_refused_by_name_with_did_you_mean_where_one_fits(route, body, field, message):
    assert refused(route, body) == (422, field, message, "Validation")


def test_several_unknown_fields_are_all_named_in_the_order_of_the_body():
    body = {"inputs": "x", "input": "y", "zzz": 1, "truncation": True}
    message = (
        "unknown fields 'input' (did you mean inputs?), 'zzz', 'truncation' (did you mean truncate?): " + EMBED_TAKES
    )
    assert refused("/embed", body) == (422, "input", message, "Validation")


def test_an_unknown_field_is_told_before_a_wrong_value_of_a_known_one():
    body = {"inputs": 3, "top_k": 0, "topk": 3}
    message = "unknown field 'topk' (did you mean top_k?): /fill_mask takes inputs, top_k"
    assert refused("/fill_mask", body) == (422, "topk", message, "Validation")


@pytest.mark.parametrize("route", ["/embed", "/tokenize"])
def test_a_model_without_prompts_takes_no_prompt_name_and_says_so(route):
    models = request_models(dataclasses.replace(LIMITS, prompts=()))
    error = validated(models[route], {"inputs": "x", "prompt_name": "query"}, route=route)
    assert isinstance(error, RequestError)
    assert (error.status, error.field, error.message) == (
        422,
        "prompt_name",
        "prompt_name must be null (the model has none), got 'query'",
    )
    assert not isinstance(validated(models[route], {"inputs": "x", "prompt_name": None}, route=route), RequestError)


def test_a_name_far_from_every_field_gets_no_did_you_mean():
    """``inp`` is 0.67 alike ``inputs``: below the 0.75 a suggestion needs (difflib's default, 0.6, would offer it)."""
    assert refused("/embed", {"inputs": "x", "inp": 1}) == (
        422,
        "inp",
        f"unknown field 'inp': {EMBED_TAKES}",
        "Validation",
    )
