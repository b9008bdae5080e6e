"""Request bodies -> checked Python values, or a :class:`RequestError` that names the field.

Every handler reads its body through these functions, so a malformed body gets the same answer
on every route: not JSON or not UTF-8 -> 400, a field of the wrong type or value -> 422, an
empty list -> 400 (``Empty``), too many inputs or an input too long -> 413, as
text-embeddings-inference answers. A field the route does not take is refused (422) by
:func:`known_fields`, naming it: an ignored ``topk`` would silently answer with the default
``top_k``. Each route takes the fields its API documents (TEI's, or OpenAI's ``model``,
``user``, ...). The error's ``field`` is a path into the body (``inputs[3]``, ``ids[0][2]``),
so a client can tell which of its inputs was refused.

>>> texts_field({"inputs": ["a", "b"]}, "inputs", max_items=8)
(['a', 'b'], False)
>>> try:
...     texts_field({"inputs": ["a", 7]}, "inputs", max_items=8)
... except RequestError as error:
...     print(error.status, error.field, error)
422 inputs[1] inputs[1] must be a string, got a number
>>> try:
...     known_fields({"inputs": "a <mask>", "topk": 3}, ("inputs", "top_k"), route="/fill_mask")
... except RequestError as error:
...     print(error.status, error.field, error)
422 topk unknown field 'topk' (did you mean top_k?): /fill_mask takes inputs, top_k
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._text import counted
from ..errors import RobertaExtError

__all__ = [
    "RequestError",
    "bool_field",
    "choice_field",
    "ids_field",
    "int_field",
    "known_fields",
    "parse_json_object",
    "predict_inputs_field",
    "str_field",
    "texts_field",
]

JSON_TYPES = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number", float: "a number"}


class RequestError(RobertaExtError):
    """A request the server refuses (or could not serve), with its HTTP status, TEI's error type
    (``Validation``, ``Empty``, ``Overloaded``, ``Timeout``, ``Backend``, ``Unhealthy``, ...) and the
    field of the body at fault, if one is."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        kind: str = "Validation",
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind
        self.field = field
        self.headers = dict(headers or {})


def type_name(value: object) -> str:
    """How a JSON value's type is called in messages: ``a string``, ``null``, ..."""
    if value is None:
        return "null"
    return JSON_TYPES.get(type(value), type(value).__name__)


def parse_json_object(body: bytes) -> dict[str, Any]:
    """The JSON object of a request body: 400 for a body that is not UTF-8, not JSON, or not an object."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = body[error.start : error.start + 1]
        raise RequestError(400, f"the body is not valid UTF-8 (byte {error.start}: {bad!r})", field="body") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise RequestError(400, f"the body is not valid JSON: {error}", field="body") from None
    if not isinstance(value, dict):
        raise RequestError(422, f"the body must be a JSON object, got {type_name(value)}", field="body")
    return value


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
"""Other APIs' spellings of a field, for the hint in :func:`known_fields`'s answer."""


def known_fields(obj: Mapping[str, Any], fields: Collection[str], *, route: str) -> None:
    """422 naming every field of ``obj`` that ``route`` does not take (its ``fields``), with
    ``did you mean`` where the name is another API's spelling (``topk``) or a near miss
    (``normalise``) of one it takes."""
    unknown = [name for name in obj if name not in fields]
    if not unknown:
        return
    named = []
    for name in unknown:
        guess = ALIASES.get(name)
        if guess not in fields:
            guess = next(iter(difflib.get_close_matches(name, sorted(fields), n=1, cutoff=0.75)), None)
        named.append(f"{name!r}" + (f" (did you mean {guess}?)" if guess else ""))
    noun = "field" if len(unknown) == 1 else "fields"
    raise RequestError(422, f"unknown {noun} {', '.join(named)}: {route} takes {', '.join(fields)}", field=unknown[0])


def check_text(value: object, field: str) -> str:
    """``value`` if it is a string that UTF-8 can hold; 422 naming ``field`` otherwise.

    JSON's ``\\ud800`` escapes give strings with lone surrogates, which no tokenizer can encode.
    """
    if not isinstance(value, str):
        raise RequestError(422, f"{field} must be a string, got {type_name(value)}", field=field)
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise RequestError(
            422,
            f"{field} is not valid Unicode: a lone surrogate {value[error.start]!r} at character {error.start}",
            field=field,
        ) from None
    return value


def _present(obj: Mapping[str, Any], name: str) -> bool:
    return name in obj and obj[name] is not None


def texts_field(
    obj: Mapping[str, Any], name: str, *, max_items: int, pairs: bool = False
) -> tuple[list[str | tuple[str, str]], bool]:
    """A string or a non-empty list of them (with ``pairs``: items may be ``[text, text]``), and
    whether it was a single string. 413 beyond ``max_items`` items."""
    if name not in obj:
        raise RequestError(422, f"missing field {name!r}", field=name)
    value = obj[name]
    if isinstance(value, str):
        return [check_text(value, name)], True
    if not isinstance(value, list):
        kinds = "a string, a list of strings or of [text, text] pairs" if pairs else "a string or a list of strings"
        raise RequestError(422, f"{name} must be {kinds}, got {type_name(value)}", field=name)
    if not value:
        raise RequestError(400, f"{name} is an empty list", kind="Empty", field=name)
    if len(value) > max_items:
        raise RequestError(
            413, f"{name} has {len(value)} inputs, more than the maximum of {max_items} per request", field=name
        )
    items: list[str | tuple[str, str]] = []
    for i, item in enumerate(value):
        where = f"{name}[{i}]"
        if pairs and isinstance(item, list):
            if len(item) != 2:
                raise RequestError(
                    422, f"{where} must be a pair [text, text], got {counted(len(item), 'item')}", field=where
                )
            items.append((check_text(item[0], f"{where}[0]"), check_text(item[1], f"{where}[1]")))
        elif isinstance(item, list):  # say what a list may hold, not only what this item is not
            raise RequestError(
                422, f"{where} must be a string, got a list: {name} is a text or a list of texts", field=where
            )
        else:
            items.append(check_text(item, where))
    return items, False


def predict_inputs_field(obj: Mapping[str, Any], name: str, *, max_items: int) -> tuple[list[tuple[str, ...]], bool]:
    """TEI's ``/predict`` inputs: a string, a pair ``[a, b]`` (or ``[a]``), or a batch of them
    ``[[a], [a, b], ...]``; the texts of each item and whether it was a single item."""
    if name not in obj:
        raise RequestError(422, f"missing field {name!r}", field=name)
    value = obj[name]
    if isinstance(value, str):
        return [(check_text(value, name),)], True
    if not isinstance(value, list):
        raise RequestError(
            422, f"{name} must be a string, a pair [text, text] or a list of them, got {type_name(value)}", field=name
        )
    if not value:
        raise RequestError(400, f"{name} is an empty list", kind="Empty", field=name)

    def item(texts: list[Any], where: str) -> tuple[str, ...]:
        if len(texts) not in (1, 2):
            raise RequestError(
                422, f"{where} must be one text or a pair of texts, got a list of {len(texts)}", field=where
            )
        return tuple(check_text(text, f"{where}[{j}]") for j, text in enumerate(texts))

    if not isinstance(value[0], list):  # one item: [a] or [a, b]
        return [item(value, name)], True
    if len(value) > max_items:
        raise RequestError(
            413, f"{name} has {len(value)} inputs, more than the maximum of {max_items} per request", field=name
        )
    batch = []
    for i, texts in enumerate(value):
        if not isinstance(texts, list):
            raise RequestError(
                422, f"{name}[{i}] must be a list of one or two texts, got {type_name(texts)}", field=f"{name}[{i}]"
            )
        batch.append(item(texts, f"{name}[{i}]"))
    return batch, False


def ids_field(obj: Mapping[str, Any], name: str, *, vocab_size: int, max_items: int) -> tuple[list[list[int]], bool]:
    """A list of token ids or a non-empty list of such lists (ids in ``0..vocab_size-1``), and
    whether it was a single list."""
    if name not in obj:
        raise RequestError(422, f"missing field {name!r}", field=name)
    value = obj[name]
    if not isinstance(value, list):
        raise RequestError(
            422, f"{name} must be a list of ids or a list of such lists, got {type_name(value)}", field=name
        )
    if not value:
        raise RequestError(400, f"{name} is an empty list", kind="Empty", field=name)
    single = not isinstance(value[0], list)
    rows = [value] if single else value
    if len(rows) > max_items:
        raise RequestError(
            413, f"{name} has {len(rows)} inputs, more than the maximum of {max_items} per request", field=name
        )
    checked = []
    for i, row in enumerate(rows):
        where = name if single else f"{name}[{i}]"
        if not isinstance(row, list):
            raise RequestError(422, f"{where} must be a list of ids, got {type_name(row)}", field=where)
        for j, index in enumerate(row):
            if type(index) is not int or not 0 <= index < vocab_size:
                shown = type_name(index) if type(index) is not int else index
                raise RequestError(
                    422, f"{where}[{j}] must be a token id in 0..{vocab_size - 1}, got {shown}", field=f"{where}[{j}]"
                )
        checked.append(row)
    return checked, single


def bool_field(obj: Mapping[str, Any], name: str, default: bool) -> bool:
    """A boolean field; absent or null gives ``default``."""
    if not _present(obj, name):
        return default
    value = obj[name]
    if not isinstance(value, bool):
        raise RequestError(422, f"{name} must be true or false, got {type_name(value)}", field=name)
    return value


def int_field(obj: Mapping[str, Any], name: str, default: int | None, *, minimum: int, maximum: int) -> int | None:
    """An integer field in ``minimum..maximum``; absent or null gives ``default``."""
    if not _present(obj, name):
        return default
    value = obj[name]
    if type(value) is not int:  # bool is an int in Python, never in JSON
        raise RequestError(422, f"{name} must be an integer, got {type_name(value)}", field=name)
    if not minimum <= value <= maximum:
        raise RequestError(422, f"{name} must be in {minimum}..{maximum}, got {value}", field=name)
    return value


def str_field(obj: Mapping[str, Any], name: str, default: str | None) -> str | None:
    """A string field; absent or null gives ``default``."""
    if not _present(obj, name):
        return default
    return check_text(obj[name], name)


def choice_field(obj: Mapping[str, Any], name: str, default: str, choices: Sequence[str]) -> str:
    """A string field that must be one of ``choices`` (compared without case); absent or null gives ``default``."""
    value = str_field(obj, name, default)
    assert value is not None
    lowered = {choice.lower(): choice for choice in choices}
    if value.lower() not in lowered:
        raise RequestError(422, f"{name} must be one of {', '.join(choices)}, got {value!r}", field=name)
    return lowered[value.lower()]
