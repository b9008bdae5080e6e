"""The request models of :mod:`roberta_ext.serve.schemas`, built in each test for the limits it gives
(no server, no model, no threads, so mutation testing can fork per mutant): the JSON schema each route's
body has in ``GET /openapi.json``, and what a body is read as or refused with, in the words the server
answers (:func:`~roberta_ext.serve.validation.validated`)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from pydantic import ValidationError

from roberta_ext.serve.openapi import openapi_description
from roberta_ext.serve.schemas import RouteLimits, request_models
from roberta_ext.serve.validation import RequestError, validated

LIMITS: dict[str, Any] = {
    "max_items": 3,
    "dimension": 32,
    "vocab_size": 100,
    "heads": ("mnli",),
    "prompts": ("query",),
    "max_top_k": 10,
    "mask_spellings": ("<mask>",),
}
RICH = {  # every limit that changes a schema set otherwise than in LIMITS
    "heads": ("mnli", "sst2"),
    "prompts": ("query", "passage"),
    "textless_ids": (4, 5),
    "mask_spellings": ("<mask>", "[MASK]"),
    "auto_truncate": True,
}


BUILT: dict[tuple[Any, ...], dict[str, Any]] = {}


@pytest.fixture(autouse=True)
def built_in_this_test_only():
    """Models are built in the test that reads them (a mutant's code must build them), once per test."""
    BUILT.clear()
    yield
    BUILT.clear()


def models(choose_head=None, **changes: Any) -> dict[str, Any]:
    key = (choose_head, *sorted(changes.items()))
    if key not in BUILT:
        BUILT[key] = request_models(RouteLimits(**(LIMITS | changes)), choose_head=choose_head)
    return BUILT[key]


def read(route: str, body: dict[str, Any], choose_head=None, **changes: Any) -> dict[str, Any]:
    """The values ``route`` reads from ``body`` (which it must accept) for a server of ``LIMITS | changes``."""
    request = validated(models(choose_head, **changes)[route], body, route=route)
    assert not isinstance(request, RequestError), f"{route} refused {body!r}: {request.message}"
    return request.model_dump()


def refused(route: str, body: dict[str, Any], **changes: Any) -> tuple[int, str | None, str, str]:
    """What ``route`` answers ``body``: status, field, message and error type."""
    error = validated(models(**changes)[route], body, route=route)
    assert isinstance(error, RequestError), f"{route} accepted {body!r}: {error!r}"
    return error.status, error.field, error.message, error.kind


# ------------------------------------------------------------------------------ the JSON schemas


def optional(kind: dict[str, Any], default: Any, description: str, title: str) -> dict[str, Any]:
    return {"anyOf": [kind, {"type": "null"}], "default": default, "description": description, "title": title}


def closed(title: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "additionalProperties": False,
        "properties": properties,
        "required": required,
        "title": title,
        "type": "object",
    }


def strings(most: int, item: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"items": item or {"type": "string"}, "maxItems": most, "minItems": 1, "type": "array"}


TRUNCATE = "cut inputs longer than the model takes instead of answering 413"
DIRECTION = {"enum": ["right", "Right"], "type": "string"}
PROMPT = "one of the model's prompts, prepended to each text"
MASK_PATTERN = r"^(?:(?!<mask>|\[MASK\])[\s\S])*(?:<mask>|\[MASK\])(?:(?!<mask>|\[MASK\])[\s\S])*$"
ID = {"maximum": 99, "minimum": 0, "not": {"enum": [4, 5]}, "type": "integer"}
PAIR = {"description": "[text, text]", "items": {"type": "string"}, "maxItems": 2, "minItems": 2, "type": "array"}
ONE_OR_TWO = {
    "description": "[a] or [a, b]",
    "items": {"type": "string"},
    "maxItems": 2,
    "minItems": 1,
    "type": "array",
}
MASKED = {"description": "a text with one <mask> or [MASK]", "pattern": MASK_PATTERN, "type": "string"}
WIDTH = {"maximum": 32, "minimum": 1, "type": "integer"}
PROMPTS = {"enum": ["query", "passage"], "type": "string"}

RICH_SCHEMAS = {
    "/embed": closed(
        "EmbedRequest",
        {
            "inputs": {
                "description": "a text, or a list of texts or [text, text] pairs",
                "oneOf": [{"type": "string"}, strings(3, {"oneOf": [{"type": "string"}, PAIR]})],
                "title": "Inputs",
            },
            "normalize": optional({"type": "boolean"}, True, "L2-normalise each vector", "Normalize"),
            "truncate": optional({"type": "boolean"}, True, TRUNCATE, "Truncate"),
            "truncation_direction": optional(DIRECTION, "right", "where inputs are cut: right", "Truncation Direction"),
            "prompt_name": optional(PROMPTS, None, PROMPT, "Prompt Name"),
            "dimensions": optional(
                WIDTH, None, "keep the first N values (normalised again when normalize)", "Dimensions"
            ),
        },
        ["inputs"],
    ),
    "/v1/embeddings": closed(
        "OpenAIEmbeddingsRequest",
        {
            "input": {"description": "a text or texts", "oneOf": [{"type": "string"}, strings(3)], "title": "Input"},
            "model": optional({"type": "string"}, None, "accepted and ignored", "Model"),
            "encoding_format": optional(
                {"enum": ["float", "base64"], "type": "string"},
                "float",
                "float, or base64 of little-endian float32",
                "Encoding Format",
            ),
            "dimensions": optional(WIDTH, None, "keep the first N values, normalised again", "Dimensions"),
            "user": optional({"type": "string"}, None, "accepted and ignored", "User"),
        },
        ["input"],
    ),
    "/predict": closed(
        "PredictRequest",
        {
            "inputs": {
                "description": "a text, a pair [a, b], or a list of [a] and [a, b]",
                "oneOf": [{"type": "string"}, ONE_OR_TWO, strings(3, ONE_OR_TWO)],
                "title": "Inputs",
            },
            "raw_scores": optional({"type": "boolean"}, False, "logits instead of probabilities", "Raw Scores"),
            "truncate": optional({"type": "boolean"}, True, TRUNCATE, "Truncate"),
            "truncation_direction": optional(DIRECTION, "right", "where inputs are cut: right", "Truncation Direction"),
            "head": {"description": "the head", "enum": ["mnli", "sst2"], "title": "Head", "type": "string"},
        },
        ["inputs", "head"],
    ),
    "/fill_mask": closed(
        "FillMaskRequest",
        {
            "inputs": {"oneOf": [MASKED, strings(3, MASKED)], "title": "Inputs"},
            "top_k": optional({"maximum": 10, "minimum": 1, "type": "integer"}, 5, "fillings per text", "Top K"),
        },
        ["inputs"],
    ),
    "/tokenize": closed(
        "TokenizeRequest",
        {
            "inputs": {"oneOf": [{"type": "string"}, strings(3)], "title": "Inputs"},
            "add_special_tokens": optional({"type": "boolean"}, True, "include <s> and </s>", "Add Special Tokens"),
            "prompt_name": optional(PROMPTS, None, PROMPT, "Prompt Name"),
        },
        ["inputs"],
    ),
    "/decode": closed(
        "DecodeRequest",
        {
            "ids": {
                "oneOf": [
                    {"items": ID, "minItems": 1, "type": "array"},
                    strings(3, {"items": ID, "type": "array"}),
                ],
                "title": "Ids",
            },
            "skip_special_tokens": optional(
                {"type": "boolean"}, True, "leave <s>, </s>, <pad>, <unk>, <mask> out", "Skip Special Tokens"
            ),
        },
        ["ids"],
    ),
}


@pytest.mark.parametrize("route", list(RICH_SCHEMAS))
def test_each_routes_body_schema_states_the_servers_limits(route):
    assert models(**RICH)[route].model_json_schema() == RICH_SCHEMAS[route]


def test_the_openapi_document_gives_these_schemas_as_the_request_bodies():
    limits = RouteLimits(**(LIMITS | RICH))
    paths = openapi_description("m", "1", limits, request_models(limits))["paths"]
    for route, schema in RICH_SCHEMAS.items():
        assert paths[route]["post"]["requestBody"]["content"]["application/json"]["schema"] == schema


def test_one_head_is_optional_and_no_textless_ids_no_prompts_or_masks_leave_their_pieces_out():
    schemas = {route: model.model_json_schema() for route, model in models(mask_spellings=(), prompts=()).items()}
    assert schemas["/predict"]["properties"]["head"] == optional(
        {"const": "mnli", "type": "string"}, None, "the head (default: the only one)", "Head"
    )
    assert schemas["/predict"]["required"] == ["inputs"]
    assert schemas["/predict"]["properties"]["truncate"]["default"] is False
    assert schemas["/embed"]["properties"]["prompt_name"] == {
        "default": None,
        "description": PROMPT,
        "title": "Prompt Name",
        "type": "null",
    }
    assert schemas["/decode"]["properties"]["ids"]["oneOf"][0]["items"] == {
        "maximum": 99,
        "minimum": 0,
        "type": "integer",
    }
    masked = schemas["/fill_mask"]["properties"]["inputs"]["oneOf"][0]
    assert masked == {
        "description": "a text with one <mask>",
        "pattern": "^(?:(?!<mask>)[\\s\\S])*(?:<mask>)(?:(?!<mask>)[\\s\\S])*$",
        "type": "string",
    }


def test_a_model_without_heads_takes_any_head_name():
    head = models(heads=())["/predict"].model_json_schema()["properties"]["head"]
    assert head == optional({"type": "string"}, None, "the head (default: the only one)", "Head")
    assert read("/predict", {"inputs": "a", "head": "x"}, heads=())["head"] == "x"
    assert read("/predict", {"inputs": "a"}, heads=())["head"] is None


@pytest.mark.parametrize(
    ("text", "one_mask"),
    [
        ("a <mask> b", True),
        ("[MASK]", True),
        ("line\n<mask>\nline", True),  # any character, line breaks too
        ("a b", False),
        ("<mask> <mask>", False),
        ("<mask> and [MASK]", False),
        ("[MASKED] MASK", False),  # the brackets are the spelling's, not a character class
        ("<mask", False),
    ],
)
def test_the_mask_pattern_holds_for_a_text_with_exactly_one_mask_however_spelt(text, one_mask):
    schema = models(mask_spellings=("<mask>", "[MASK]"))["/fill_mask"].model_json_schema()
    pattern = schema["properties"]["inputs"]["oneOf"][0]["pattern"]
    assert bool(re.search(pattern, text)) is one_mask


def test_each_route_has_its_fields_in_order():
    assert {route: tuple(model.model_fields) for route, model in models().items()} == {
        "/embed": ("inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "dimensions"),
        "/v1/embeddings": ("input", "model", "encoding_format", "dimensions", "user"),
        "/predict": ("inputs", "raw_scores", "truncate", "truncation_direction", "head"),
        "/fill_mask": ("inputs", "top_k"),
        "/tokenize": ("inputs", "add_special_tokens", "prompt_name"),
        "/decode": ("ids", "skip_special_tokens"),
    }


# ------------------------------------------------------------------------------ null, defaults


def test_null_in_an_optional_field_is_its_default():
    body = {"inputs": "a", "normalize": None, "truncate": None, "truncation_direction": None, "dimensions": None}
    assert read("/embed", body | {"prompt_name": None}) == {
        "inputs": "a",
        "normalize": True,
        "truncate": False,
        "truncation_direction": "right",
        "prompt_name": None,
        "dimensions": None,
    }
    assert read("/embed", {"inputs": "a", "truncate": None}, auto_truncate=True)["truncate"] is True
    assert read("/fill_mask", {"inputs": "<mask>", "top_k": None}) == {"inputs": "<mask>", "top_k": 5}
    assert read("/v1/embeddings", {"input": "a", "encoding_format": None})["encoding_format"] == "float"
    assert read("/predict", {"inputs": "a", "raw_scores": None}) == {
        "inputs": "a",
        "raw_scores": False,
        "truncate": False,
        "truncation_direction": "right",
        "head": None,
    }
    assert read("/tokenize", {"inputs": "a", "add_special_tokens": None})["add_special_tokens"] is True
    assert read("/decode", {"ids": [1], "skip_special_tokens": None})["skip_special_tokens"] is True


def test_values_given_are_read_as_given():
    body = {"inputs": "a", "normalize": False, "truncate": True, "prompt_name": "query", "dimensions": 8}
    assert read("/embed", body) == body | {"truncation_direction": "right"}
    assert read("/v1/embeddings", {"input": ["a"], "encoding_format": "base64", "model": "m", "user": "u"}) == {
        "input": ["a"],
        "model": "m",
        "encoding_format": "base64",
        "dimensions": None,
        "user": "u",
    }


def test_null_in_a_required_field_or_an_unknown_one_is_refused():
    assert refused("/embed", {"inputs": None}) == (
        422,
        "inputs",
        "inputs must be a string, a list of strings or of [text, text] pairs, got null",
        "Validation",
    )
    assert refused("/predict", {"inputs": "a", "head": None}, heads=("a", "b"))[:3] == (
        422,
        "head",
        "head must be one of a, b, got null",
    )
    assert refused("/embed", {"inputs": "a", "topk": None})[:3] == (
        422,
        "topk",
        "unknown field 'topk': /embed takes inputs, normalize, truncate, truncation_direction, prompt_name, dimensions",
    )


def test_a_body_that_is_not_an_object_is_refused_as_pydantic_refuses_it():
    for body in (["inputs", None], "inputs", None):
        with pytest.raises(ValidationError) as error:
            models()["/embed"].model_validate(body)
        assert [detail["type"] for detail in error.value.errors()] == ["model_type"]


# ------------------------------------------------------------------------------ texts, integers


def test_a_lone_surrogate_is_refused_with_where_it_is():
    assert refused("/embed", {"inputs": "ab\ud800c"}) == (
        422,
        "inputs",
        "inputs is not valid Unicode: a lone surrogate '\\ud800' at character 2",
        "Validation",
    )
    assert refused("/embed", {"inputs": ["x", ["a", "b\udfffc"]]})[1:3] == (
        "inputs[1][1]",
        "inputs[1][1] is not valid Unicode: a lone surrogate '\\udfff' at character 1",
    )
    assert refused("/tokenize", {"inputs": ["\udc00"]})[2] == (
        "inputs[0] is not valid Unicode: a lone surrogate '\\udc00' at character 0"
    )
    assert read("/tokenize", {"inputs": "\U0001f600 ok"})["inputs"] == "\U0001f600 ok"  # a pair of surrogates is one


@pytest.mark.parametrize(
    ("value", "told"),
    [
        (5.0, 5),
        (1, 1),
        (32.0, 32),
        (5.5, "dimensions must be an integer, got a number"),
        (True, "dimensions must be an integer, got a boolean"),
        ("5", "dimensions must be an integer, got a string"),
        (0, "dimensions must be in 1..32, got 0"),
        (33.0, "dimensions must be in 1..32, got 33"),
    ],
)
def test_an_integer_is_a_number_without_a_fraction_within_its_range(value, told):
    route = "/embed"
    if isinstance(told, int):
        got = read(route, {"inputs": "a", "dimensions": value})["dimensions"]
        assert got == told and type(got) is int
    else:
        assert refused(route, {"inputs": "a", "dimensions": value}) == (422, "dimensions", told, "Validation")


def test_top_k_and_ids_are_integers_in_their_own_ranges():
    assert read("/fill_mask", {"inputs": "<mask>", "top_k": 10.0})["top_k"] == 10
    assert refused("/fill_mask", {"inputs": "<mask>", "top_k": 11})[2] == "top_k must be in 1..10, got 11"
    assert refused("/fill_mask", {"inputs": "<mask>", "top_k": 0})[2] == "top_k must be in 1..10, got 0"
    assert read("/decode", {"ids": [0, 99.0]})["ids"] == [0, 99]
    assert refused("/decode", {"ids": [99, 100]})[1:3] == ("ids[1]", "ids[1] must be a token id in 0..99, got 100")
    assert refused("/decode", {"ids": [[1], [-1]]})[1:3] == (
        "ids[1][0]",
        "ids[1][0] must be a token id in 0..99, got -1",
    )
    assert refused("/decode", {"ids": [1.5]})[2] == "ids[0] must be a token id in 0..99, got a number"


# ------------------------------------------------------------------------------ shapes


def test_embed_takes_texts_and_pairs_in_one_list():
    assert read("/embed", {"inputs": [["a", "b"], "c"]})["inputs"] == [["a", "b"], "c"]
    assert read("/embed", {"inputs": "a"})["inputs"] == "a"
    assert refused("/embed", {"inputs": ["a", ["b"]]})[1:3] == (
        "inputs[1]",
        "inputs[1] must be a pair [text, text], got 1 item",
    )
    assert refused("/embed", {"inputs": [["a", "b", "c"]]})[2] == "inputs[0] must be a pair [text, text], got 3 items"
    assert refused("/embed", {"inputs": 5})[2] == (
        "inputs must be a string, a list of strings or of [text, text] pairs, got a number"
    )
    assert refused("/embed", {"inputs": ["a", 5]})[2] == "inputs[1] must be a string, got a number"
    assert refused("/embed", {"inputs": [["a", 5]]})[2] == "inputs[0][1] must be a string, got a number"
    assert refused("/embed", {"inputs": []})[:2] == (400, "inputs")
    assert refused("/embed", {"inputs": ["a"] * 4})[:3] == (
        413,
        "inputs",
        "inputs has 4 inputs, more than the maximum of 3 per request",
    )
    assert read("/embed", {"inputs": ["a", ["b", "c"], "d"]})["inputs"] == ["a", ["b", "c"], "d"]


def test_predict_takes_a_text_one_item_or_a_list_of_items():
    assert read("/predict", {"inputs": ["a", "b"]})["inputs"] == ["a", "b"]
    assert read("/predict", {"inputs": ["a"]})["inputs"] == ["a"]
    assert read("/predict", {"inputs": [["a"], ["b", "c"]]})["inputs"] == [["a"], ["b", "c"]]
    assert refused("/predict", {"inputs": [["a"], "b"]})[1:3] == (
        "inputs[1]",
        "inputs[1] must be a list of one or two texts, got a string",
    )
    assert refused("/predict", {"inputs": ["a", "b", "c"]})[1:3] == (
        "inputs",
        "inputs must be one text or a pair of texts, got a list of 3",
    )
    assert refused("/predict", {"inputs": [["a", "b", "c"]]})[2] == (
        "inputs[0] must be one text or a pair of texts, got a list of 3"
    )
    assert refused("/predict", {"inputs": [[]]})[2] == "inputs[0] must be one text or a pair of texts, got a list of 0"
    assert refused("/predict", {"inputs": []})[:3] == (400, "inputs", "inputs is an empty list")
    assert refused("/predict", {"inputs": [["a"]] * 4})[0] == 413
    assert refused("/predict", {"inputs": 5})[2] == (
        "inputs must be a string, a pair [text, text] or a list of them, got a number"
    )


def test_decode_takes_one_list_of_ids_or_a_list_of_them():
    assert read("/decode", {"ids": [1, 2]})["ids"] == [1, 2]
    assert read("/decode", {"ids": [[1], [2, 3], []]})["ids"] == [[1], [2, 3], []]
    assert refused("/decode", {"ids": [[1], 2]})[1:3] == ("ids[1]", "ids[1] must be a list of ids, got a number")
    assert refused("/decode", {"ids": [1, [2]]})[2] == "ids[1] must be a token id in 0..99, got a list"
    assert refused("/decode", {"ids": "a"})[2] == "ids must be a list of ids or a list of such lists, got a string"
    assert refused("/decode", {"ids": []})[:3] == (400, "ids", "ids is an empty list")
    assert refused("/decode", {"ids": [[1]] * 4})[:3] == (
        413,
        "ids",
        "ids has 4 inputs, more than the maximum of 3 per request",
    )
    assert read("/decode", {"ids": [1] * 50})["ids"] == [1] * 50  # one text's ids: no limit but the vocabulary's


def test_texts_take_a_text_or_up_to_max_items_texts():
    for route in ("/tokenize", "/fill_mask"):
        assert read(route, {"inputs": ["<mask>"] * 3})["inputs"] == ["<mask>"] * 3
        assert refused(route, {"inputs": ["<mask>"] * 4})[0] == 413
        assert refused(route, {"inputs": 1})[2] == "inputs must be a string or a list of strings, got a number"
        assert refused(route, {"inputs": [["a"]]})[2] == (
            "inputs[0] must be a string, got a list: inputs is a text or a list of texts"
        )
    assert read("/tokenize", {"inputs": "no mask"})["inputs"] == "no mask"  # the pattern is the library's check


@pytest.mark.parametrize(
    "value",
    [[1, 2], [[1, 2], [3]], [0], [[7]]],
)
def test_openai_token_arrays_are_refused_by_name(value):
    assert refused("/v1/embeddings", {"input": value}) == (
        422,
        "input",
        "input must be a text or a list of texts: token ids (OpenAI's token arrays) are not accepted",
        "Validation",
    )


@pytest.mark.parametrize(
    ("value", "field", "message"),
    [
        (["a", 1], "input[1]", "input[1] must be a string, got a number"),
        ([1, "a"], "input[0]", "input[0] must be a string, got a number"),
        ([True], "input[0]", "input[0] must be a string, got a boolean"),
        ([[]], "input[0]", "input[0] must be a string, got a list: input is a text or a list of texts"),
        ([[1, "a"]], "input[0]", "input[0] must be a string, got a list: input is a text or a list of texts"),
        ([[True]], "input[0]", "input[0] must be a string, got a list: input is a text or a list of texts"),
        ([1, [2, "a"]], "input[0]", "input[0] must be a string, got a number"),
    ],
)
def test_lists_that_are_not_all_token_ids_are_told_item_by_item(value, field, message):
    assert refused("/v1/embeddings", {"input": value})[1:3] == (field, message)


def test_the_truncation_direction_is_right_however_cased():
    for given in ("right", "Right", "RIGHT"):
        assert read("/embed", {"inputs": "a", "truncation_direction": given})["truncation_direction"] == "right"
    assert refused("/embed", {"inputs": "a", "truncation_direction": "left"})[2] == (
        "truncation_direction must be one of right, Right, got 'left'"
    )
    assert refused("/predict", {"inputs": "a", "truncation_direction": 1})[2] == (
        "truncation_direction must be one of right, Right, got 1"
    )


def test_prompt_names_and_encodings_are_the_choices_given():
    two = ("query", "passage")
    assert read("/tokenize", {"inputs": "a", "prompt_name": "passage"}, prompts=two)["prompt_name"] == "passage"
    assert refused("/embed", {"inputs": "a", "prompt_name": "doc"}, prompts=two)[2] == (
        "prompt_name must be one of query, passage, got 'doc'"
    )
    assert refused("/embed", {"inputs": "a", "prompt_name": "query"}, prompts=())[2] == (
        "prompt_name must be null (the model has none), got 'query'"
    )
    assert refused("/v1/embeddings", {"input": "a", "encoding_format": "int8"})[2] == (
        "encoding_format must be one of float, base64, got 'int8'"
    )


# ------------------------------------------------------------------------------ the head


def test_several_heads_need_one_named():
    assert read("/predict", {"inputs": "a", "head": "sst2"}, heads=("mnli", "sst2"))["head"] == "sst2"
    assert refused("/predict", {"inputs": "a"}, heads=("mnli", "sst2"))[:3] == (422, "head", "missing field 'head'")
    assert refused("/predict", {"inputs": "a", "head": "qnli"}, heads=("mnli", "sst2"))[2] == (
        "head must be one of mnli, sst2, got 'qnli'"
    )


def test_one_head_may_be_left_out_or_named():
    assert read("/predict", {"inputs": "a"})["head"] is None
    assert read("/predict", {"inputs": "a", "head": "mnli"})["head"] == "mnli"
    assert refused("/predict", {"inputs": "a", "head": "sst2"})[2] == "head must be one of mnli, got 'sst2'"


def test_the_librarys_choice_gives_the_head_its_default_included():
    asked = []

    def choose_head(name: str | None) -> str:
        asked.append(name)
        return name or "mnli"

    assert read("/predict", {"inputs": "a"}, choose_head)["head"] == "mnli"
    assert read("/predict", {"inputs": "a", "head": None}, choose_head)["head"] == "mnli"
    assert read("/predict", {"inputs": "a", "head": "mnli"}, choose_head)["head"] == "mnli"
    assert asked == [None, None, "mnli"]
    schema = models(choose_head)["/predict"].model_json_schema()
    assert schema["properties"]["head"] == optional(
        {"const": "mnli", "type": "string"}, None, "the head (default: the only one)", "Head"
    )
    assert schema["required"] == ["inputs"]


def test_the_librarys_choice_is_still_checked_against_the_heads():
    def choose_head(name: str | None) -> str:
        return "other" if name is None else name

    error = validated(models(choose_head)["/predict"], {"inputs": "a"}, route="/predict")
    assert isinstance(error, RequestError) and error.message == "head must be one of mnli, got 'other'"
    several = models(choose_head, heads=("mnli", "sst2"))["/predict"]
    assert several.model_json_schema()["properties"]["head"] == {
        "description": "the head",
        "enum": ["mnli", "sst2"],
        "title": "Head",
        "type": "string",
    }
    request = validated(several, {"inputs": "a", "head": "sst2"}, route="/predict")
    assert not isinstance(request, RequestError) and request.head == "sst2"
