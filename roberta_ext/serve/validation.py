"""Request bodies -> validated request models (:mod:`.schemas`), or a :class:`RequestError`
that names the field.

Every handler reads its body through :func:`parse_json_object` and its route's model, so a
malformed body gets the same answer on every route: not JSON or not UTF-8 -> 400, a field of the
wrong type or value -> 422, an empty list -> 400 (``Empty``), too many inputs -> 413, as
text-embeddings-inference answers. pydantic's errors are told in these terms
(:func:`request_error`); the error's ``field`` is a path into the body (``inputs[3]``,
``ids[0][2]``), so a client can tell which of its inputs was refused. A field the route does not
take is refused by name, with ``did you mean`` where it is another API's spelling: an ignored
``topk`` would silently answer with the default ``top_k``.

>>> from roberta_ext.serve.schemas import RouteLimits, request_models
>>> limits = RouteLimits(max_items=8, dimension=32, vocab_size=100, heads=(), prompts=(),
...                      max_top_k=10, mask_spellings=("<mask>",))
>>> models = request_models(limits)
>>> error = validated(models["/embed"], {"inputs": ["a", 7]}, route="/embed")
>>> error.status, error.field, error.message
(422, 'inputs[1]', 'inputs[1] must be a string, got a number')
>>> error = validated(models["/fill_mask"], {"inputs": "a <mask>", "topk": 3}, route="/fill_mask")
>>> error.status, error.field, error.message
(422, 'topk', "unknown field 'topk' (did you mean top_k?): /fill_mask takes inputs, top_k")
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from .._text import counted
from ..errors import RobertaExtError
from .errors import RequestError, answer_for

__all__ = ["RequestError", "parse_json_object", "request_error", "validated"]

JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


def type_name(value: object) -> str:
    """How a JSON value's type is called in messages: ``a string``, ``null``, ..."""
    if value is None:
        return "null"
    return JSON_TYPES.get(type(value), type(value).__name__)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body: 400 for a body that is not UTF-8 or not JSON, 422 for
    one that is not an object."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = body[error.start : error.start + 1]
        raise RequestError(400, f"the body is not valid UTF-8 (byte {error.start}: {bad!r})", field="body") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise RequestError(400, f"the body is not valid JSON: {error}", field="body") from None
    except RecursionError:  # json's parser recurses once per nested [ or {
        raise RequestError(
            400, "the body is not JSON this server reads: its lists or objects nest too deeply", field="body"
        ) from None
    if not isinstance(value, dict):
        raise RequestError(422, f"the body must be a JSON object, got {type_name(value)}", field="body")
    return value


def validated(model: type[BaseModel], body: dict[str, Any], *, route: str) -> Any:
    """``body`` as an instance of ``model`` (the request model of ``route``); else the
    :class:`RequestError` :func:`request_error` tells, returned, for the caller to raise."""
    try:
        return model.model_validate(body)
    except ValidationError as error:
        return request_error(error, model, route=route)


ALIASES = {
    "topk": "top_k",  # the hub's fill_mask and fairseq spell it so
    "k": "top_k",
    "return_logits": "raw_scores",  # the hub's predict
    "input": "inputs",  # OpenAI's spelling on a TEI route ...
    "inputs": "input",  # ... and TEI's on OpenAI's
    "truncation": "truncate",  # transformers' tokenizers
    "prompt": "prompt_name",
    "skip_special": "skip_special_tokens",
}
"""Other APIs' spellings of a field, for the hint of an unknown field's answer."""


def unknown_fields(unknown: Sequence[str], fields: Sequence[str], *, route: str) -> RequestError:
    """422 naming every field of ``unknown`` (the route takes ``fields``), with ``did you mean``
    where the name is another API's spelling (``topk``) or a near miss (``normalise``) of one it takes."""
    named = []
    for name in unknown:
        guess = ALIASES.get(name)
        if guess not in fields:
            guess = next(iter(difflib.get_close_matches(name, sorted(fields), n=1, cutoff=0.75)), None)
        named.append(f"{name!r}" + (f" (did you mean {guess}?)" if guess else ""))
    noun = "field" if len(unknown) == 1 else "fields"
    return RequestError(422, f"unknown {noun} {', '.join(named)}: {route} takes {', '.join(fields)}", field=unknown[0])


def request_error(error: ValidationError, model: type[BaseModel], *, route: str) -> RequestError:
    """pydantic's ``error`` of a body ``model`` refused, told as this server tells it: the
    fields the route does not take first, else the first field at fault."""
    details = error.errors(include_url=False)
    unknown = [str(detail["loc"][0]) for detail in details if detail["type"] == "extra_forbidden"]
    if unknown:
        return unknown_fields(unknown, tuple(model.model_fields), route=route)
    return _told(details[0], _constraints(model))


def _told(detail: ErrorDetails, constraints: dict[str, dict[str, Any]]) -> RequestError:
    """One refusal, in words naming its field. A location holds the field, the indices into it
    and the tags of the shapes it was read as (:func:`~roberta_ext.serve.schemas.one_of`)."""
    name, *steps = detail["loc"]
    name = str(name)
    where = name + "".join(f"[{step}]" for step in steps if isinstance(step, int))
    tags = [step for step in steps if isinstance(step, str)]
    kind, value, ctx = detail["type"], detail["input"], detail.get("ctx", {})
    limits = constraints.get(name, {})
    if kind == "missing":
        return RequestError(422, f"missing field {name!r}", field=name)
    if kind == "value_error" and isinstance(ctx.get("error"), RobertaExtError):  # the library's own check
        return answer_for(ctx["error"], field=where)
    if kind in ("too_short", "too_long"):
        return _wrong_length(where, tags, value, top=where == name, kind=kind, most=ctx.get("max_length"))
    if kind == "request":  # our own checks (schemas.py): the message says what is wrong
        message = f"{where} {detail['msg']}"
    elif kind == "shape":
        message = f"{where} must be {detail['msg']}, got {type_name(value)}"
    elif kind == "string_type":
        message = f"{where} must be a string, got {type_name(value)}"
        if isinstance(value, list):  # say what a list may hold, not only what this item is not
            message += f": {name} is a text or a list of texts"
    elif kind == "bool_type":
        message = f"{where} must be true or false, got {type_name(value)}"
    elif kind in ("int_type", "greater_than_equal", "less_than_equal"):
        shown = value if kind != "int_type" else type_name(value)
        span = f"{limits.get('minimum')}..{limits.get('maximum')}"
        if name == "ids":
            message = f"{where} must be a token id in {span}, got {shown}"
        elif kind == "int_type":
            message = f"{where} must be an integer, got {shown}"
        else:
            message = f"{where} must be in {span}, got {shown}"
    elif kind in ("literal_error", "none_required"):
        choices = ", ".join(limits.get("enum", ()))
        told = f"one of {choices}" if choices else "null (the model has none)"
        shown = "null" if value is None else repr(value)  # JSON's word for None
        message = f"{where} must be {told}, got {shown}"
    else:
        message = f"{where}: {detail['msg']}"
    return RequestError(422, message, field=where)


def _wrong_length(where: str, tags: list[str], value: Any, *, top: bool, kind: str, most: int | None) -> RequestError:
    """A list of the wrong length: an empty list of inputs (400 ``Empty``), too many inputs
    (413), a pair that is not two texts, a ``/predict`` item that is not one or two."""
    if "pair" in tags:
        return RequestError(422, f"{where} must be a pair [text, text], got {counted(len(value), 'item')}", field=where)
    if top and not value:
        return RequestError(400, f"{where} is an empty list", kind="Empty", field=where)
    if top and kind == "too_long" and "item" not in tags:
        message = f"{where} has {len(value)} inputs, more than the maximum of {most} per request"
        return RequestError(413, message, field=where)
    return RequestError(422, f"{where} must be one text or a pair of texts, got a list of {len(value)}", field=where)


@functools.cache
def _constraints(model: type[BaseModel]) -> dict[str, dict[str, Any]]:
    """Each field's range (``minimum``, ``maximum``) and choices (``enum``), as its JSON schema states them."""
    found: dict[str, dict[str, Any]] = {}

    def walk(schema: Any, into: dict[str, Any]) -> None:
        if isinstance(schema, dict):
            if "const" in schema:
                into.setdefault("enum", [schema["const"]])
            for key in ("minimum", "maximum", "enum"):
                if key in schema and key not in into:
                    into[key] = schema[key]
            for key, child in schema.items():
                if key != "not":  # what is ruled out is no choice
                    walk(child, into)
        elif isinstance(schema, list):
            for child in schema:
                walk(child, into)

    for name, schema in model.model_json_schema()["properties"].items():
        walk(schema, found.setdefault(name, {}))
    return found
