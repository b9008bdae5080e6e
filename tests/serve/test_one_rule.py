"""The server only speaks HTTP: the rules an input must meet are the library's, so the server
and the hub refuse the same input with the same message (the server naming the request's
field), and every answer the server gives has the shape its OpenAPI document declares (the
answer models of ``roberta_ext/serve/schemas.py``)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from pydantic import TypeAdapter

from roberta_ext.inference.head_outputs import HeadError, encode_masked
from roberta_ext.inference.inputs import InputError, InputTooLong
from roberta_ext.inference.predict import choose_head
from roberta_ext.serve.openapi import GETS, POSTS
from roberta_ext.serve.schemas import ErrorBody, OpenAIErrorBody
from tests.serve.conftest import serving

LONG = "word " * 80  # 81 tokens, more than the served model's 64 positions


@pytest.fixture(scope="module")
def live(hub):
    with serving(hub) as (url, server):
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, server


def refusal(answer: httpx.Response) -> tuple[int, str, str | None]:
    body = answer.json()
    if isinstance(body["error"], dict):
        return answer.status_code, body["error"]["message"], body["error"]["param"]
    return answer.status_code, body["error"], body.get("field")


# ------------------------------------------------------------------------------ the length rule


def test_encode_within_cuts_as_encode_truncated_or_refuses_naming_the_input(hub):
    inputs = hub.inputs
    for item in (LONG, (LONG, "a short answer"), ("a short premise", LONG)):
        assert inputs.encode_within(item, truncate=True) == inputs.encode_truncated(item, inputs.max_positions)
        told_as = r"^inputs\[2\] is \d+ tokens long, more than the maximum of 64 \(cut it\)$"
        with pytest.raises(InputTooLong, match=told_as) as told:
            inputs.encode_within(item, truncate=False, where="inputs[2]", hint="cut it")
        assert told.value.where == "inputs[2]" and told.value.limit == 64
        assert told.value.length == len(inputs.encode(*((item,) if isinstance(item, str) else item)))
    fits = ("A premise.", "A hypothesis.")
    assert inputs.encode_within(fits, truncate=False) == inputs.encode(*fits)
    assert inputs.encode_within(fits, truncate=True) == inputs.encode(*fits)
    assert issubclass(InputTooLong, InputError) and issubclass(InputError, ValueError)


def test_the_server_refuses_a_long_input_with_the_librarys_message(live, hub):
    client, _ = live
    for route, body, field in (
        ("/predict", {"inputs": [["a"], [LONG, "b"]]}, "inputs[1]"),
        ("/embed", {"inputs": ["a", LONG]}, "inputs[1]"),
        ("/embed", {"inputs": LONG}, "inputs"),
    ):
        item = body["inputs"][1] if isinstance(body["inputs"], list) else body["inputs"]
        with pytest.raises(InputTooLong) as library:
            hub.inputs.encode_within(item, truncate=False, where=field, hint="set truncate to cut it")
        assert refusal(client.post(route, json=body)) == (413, str(library.value), field), route


# ------------------------------------------------------------------------------ fill-mask's check


@pytest.mark.parametrize("text", ["no mask here", "<mask> and <mask>", "Hello <mask>! " + LONG])
def test_the_hub_and_the_server_refuse_a_fill_mask_input_alike(live, hub, text):
    client, _ = live
    with pytest.raises(InputError) as by_hub:
        hub.fill_mask(text)
    status, message, field = refusal(client.post("/fill_mask", json={"inputs": ["Hi <mask>", text]}))
    assert (status, field) == (413 if isinstance(by_hub.value, InputTooLong) else 422, "inputs[1]")
    assert message == str(by_hub.value).replace("masked_input", "inputs[1]")


def test_encode_masked_reads_every_spelling_and_counts_the_mask(hub):
    masked = encode_masked(hub.inputs, "Hello [MASK]!", mask="<mask>", spellings=("<mask>", "[MASK]"))
    assert masked.text == "Hello <mask>!"
    assert masked.ids.count(hub.dictionary.index("<mask>")) == 1 and masked.ids[0] == hub.dictionary.bos()
    with pytest.raises(InputError, match=r"^text must hold exactly one <mask> or \[MASK\], got 2$"):
        encode_masked(hub.inputs, "[MASK] <mask>", mask="<mask>", spellings=("<mask>", "[MASK]"), where="text")


def test_a_model_without_a_masked_lm_head_cannot_fill_masks(hub, monkeypatch):
    monkeypatch.setattr(hub.model, "has_lm_head", False)
    with pytest.raises(HeadError, match="no masked-LM head"):
        hub.fill_mask("Hello <mask>!")


# ------------------------------------------------------------------------------ the head


def test_the_server_chooses_the_head_as_the_library_does(live, hub):
    client, _ = live
    with pytest.raises(HeadError) as library:
        choose_head(hub.model, "nope")
    assert refusal(client.post("/predict", json={"inputs": "a", "head": "nope"})) == (422, str(library.value), "head")
    assert client.post("/predict", json={"inputs": "a", "head": None}).status_code == 200  # the only head


# ------------------------------------------------------------------------------ answers as declared


ANSWERED = {
    "/embed": {"inputs": ["a", ["b", "c"]]},
    "/v1/embeddings": {"input": ["a"], "encoding_format": "base64"},
    "/predict": {"inputs": [["a"], ["b", "c"]]},
    "/fill_mask": {"inputs": "Hello <mask>!"},
    "/tokenize": {"inputs": ["Hello world", ""]},
    "/decode": {"ids": [[0, 5, 2], [0]]},
}


def test_every_answer_has_the_shape_the_document_declares(live):
    client, _ = live
    assert set(ANSWERED) == set(POSTS)
    for path, body in ANSWERED.items():
        answer = client.post(path, json=body)
        assert answer.status_code == 200, answer.text
        TypeAdapter(POSTS[path][1]).validate_python(answer.json(), strict=True)
        refused = client.post(path, json={**body, "bogus": 1})
        error_model: Any = OpenAIErrorBody if path.startswith("/v1") else ErrorBody
        error_model.model_validate(refused.json(), strict=True)
    for path, (_, answer_type, media_type, _) in GETS.items():
        answer = client.get(path)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(media_type)
        TypeAdapter(answer_type).validate_python(answer.json() if media_type == "application/json" else answer.text)
