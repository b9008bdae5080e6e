"""Every request and answer body of the server, declared once as pydantic models: the handlers
validate requests with them (:func:`request_models`) and ``GET /openapi.json`` is their JSON
schema (:mod:`.openapi`), so the two cannot differ.

A request model is closed (no other field: ``additionalProperties: false``), strict (a JSON
number is no string, ``true`` no integer) and built per server: the ranges and names a request may
use are the served model's (:class:`RouteLimits`: ``dimensions``, token ids, ``top_k``, inputs per
request, heads, prompts). A union of shapes (a text or a list of texts) is chosen by the value's
own shape, so a refusal names the shape it was read as. ``null`` in an optional field means its
default. What only the library can check (one mask per text, an input's length, the head to
use) is checked by the library, named as the request's field (``inputs[3]``).

>>> limits = RouteLimits(max_items=4, dimension=32, vocab_size=100, heads=("mnli",), prompts=(),
...                      max_top_k=10, mask_spellings=("<mask>",))
>>> models = request_models(limits)
>>> models["/embed"].model_validate({"inputs": ["a", ["b", "c"]], "dimensions": None}).dimensions is None
True
>>> tuple(models["/fill_mask"].model_fields)
('inputs', 'top_k')
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    WrapValidator,
    create_model,
    model_validator,
)
from pydantic_core import PydanticCustomError

__all__ = [
    "ErrorBody",
    "Filling",
    "Health",
    "OpenAIEmbeddings",
    "OpenAIErrorBody",
    "Prediction",
    "RouteLimits",
    "Token",
    "request_models",
]


@dataclass(frozen=True, kw_only=True)
class RouteLimits:
    """What the served model and the server's options allow, as the request models state it."""

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
    auto_truncate: bool = False
    """The default of ``truncate`` (``--auto-truncate``)."""


class Body(BaseModel):
    """A request body: only the declared fields, JSON's types as they are; ``null`` for an
    optional field is its default (as TEI reads ``"truncate": null``)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _nulls_are_defaults(cls, data: Any) -> Any:
        if isinstance(data, dict) and None in data.values():
            fields = cls.model_fields
            return {k: v for k, v in data.items() if v is not None or k not in fields or fields[k].is_required()}
        return data


def _valid_unicode(text: str) -> str:
    """JSON's ``\\ud800`` escapes give strings with lone surrogates, which no tokenizer can encode."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise PydanticCustomError(
            "request",
            "is not valid Unicode: a lone surrogate {char} at character {at}",
            {"char": repr(text[error.start]), "at": error.start},
        ) from None
    return text


Text = Annotated[str, AfterValidator(_valid_unicode)]


def _integral(value: object) -> object:
    """JSON has one number type and JSON Schema's ``integer`` is any number without a fraction:
    ``5.0`` is the integer 5 (a client's JSON library may write it so), ``5.5`` and ``true`` are not."""
    if type(value) is float and value.is_integer():
        return int(value)
    return value


def integer(**constraints: Any) -> Any:
    """An integer within ``constraints`` (``Field``'s ``ge``, ``le``, ...), as JSON Schema's
    ``integer`` is (strict otherwise: no string, no boolean). The constraints come before the
    validator: after it, pydantic would check them but leave them out of the JSON schema."""
    return Annotated[int, Field(**constraints), BeforeValidator(_integral)]


def _shape(value: object) -> str | None:
    """``text``, ``list`` (of anything but lists, or empty) or ``nested`` (a list of lists)."""
    if isinstance(value, str):
        return "text"
    if isinstance(value, list):
        return "nested" if value and isinstance(value[0], list) else "list"
    return None


def _text_or_list(value: object) -> str | None:
    kind = _shape(value)
    return "list" if kind == "nested" else kind


def _text_or_pair(value: object) -> str | None:
    kind = _text_or_list(value)
    return "pair" if kind == "list" else kind


def _text_item_or_batch(value: object) -> str | None:
    """``/predict``'s: a flat list is one ``item`` (``[a]`` or ``[a, b]``), a nested one a batch."""
    kind = _shape(value)
    return "item" if kind == "list" else kind


def one_of(what: str, choose: Callable[[object], str | None] = _shape, **shapes: Any) -> Any:
    """A union of ``shapes`` (tag -> type), the one taken named by ``choose(value)``; a value of
    no shape there is refused as not ``what``. The tags show in an error's location, where
    :mod:`.validation` reads them (``pair``, ``item``)."""
    members = tuple(Annotated[kind, Tag(tag)] for tag, kind in shapes.items())
    return Annotated[Union[members], Discriminator(choose, custom_error_type="shape", custom_error_message=what)]  # noqa: UP007


def _list(what: str) -> Callable[[object], object]:
    """A check before a list's own: a value that is not a list is refused as not ``what``."""

    def check(value: object) -> object:
        if not isinstance(value, list):
            raise PydanticCustomError("shape", what)
        return value

    return check


def _no_token_ids(value: object) -> object:
    """OpenAI's API also takes token arrays: say so rather than 'must be a string'."""

    def token_ids(item: object) -> bool:
        return type(item) is int or (isinstance(item, list) and bool(item) and all(type(v) is int for v in item))

    if isinstance(value, list) and value and all(map(token_ids, value)):
        raise PydanticCustomError(
            "request", "must be a text or a list of texts: token ids (OpenAI's token arrays) are not accepted"
        )
    return value


def _lowercase(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def _one_mask(spellings: tuple[str, ...]) -> str:
    """A regular expression (ECMA-262's and Python's) of a text holding exactly one mask,
    however it is spelt: what :func:`~roberta_ext.inference.head_outputs.encode_masked` takes."""
    mask = "|".join(re.escape(spelling) for spelling in spellings)
    other = rf"(?:(?!{mask})[\s\S])*"
    return f"^{other}(?:{mask}){other}$"


def _optional(kind: Any, default: Any, description: str) -> Any:
    """An optional field: ``kind``, or null for ``default``."""
    return (Union[kind, None], Field(default, description=description))  # noqa: UP007 (kind may be None)


def _choice(choices: tuple[str, ...]) -> Any:
    """One of ``choices``; none: only null."""
    return Literal[choices] if choices else None


def _texts(limits: RouteLimits, text: Any = Text) -> Any:
    many = Annotated[list[text], Field(min_length=1, max_length=limits.max_items)]
    return one_of("a string or a list of strings", _text_or_list, text=text, list=many)


def _embed_inputs(limits: RouteLimits) -> Any:
    """``/embed``'s inputs: a text, or a list of texts and ``[text, text]`` pairs."""
    pair = Annotated[list[Text], Field(min_length=2, max_length=2, description="[text, text]")]
    item = one_of("a string", _text_or_pair, text=Text, pair=pair)
    return one_of(
        "a string, a list of strings or of [text, text] pairs",
        _text_or_list,
        text=Text,
        list=Annotated[list[item], Field(min_length=1, max_length=limits.max_items)],  # type: ignore[valid-type]
    )


def _predict_inputs(limits: RouteLimits) -> Any:
    """``/predict``'s inputs: a text, one ``[a]`` or ``[a, b]``, or a list of them."""
    one_or_two = Annotated[list[Text], Field(min_length=1, max_length=2, description="[a] or [a, b]")]
    return one_of(
        "a string, a pair [text, text] or a list of them",
        _text_item_or_batch,
        text=Text,
        item=one_or_two,
        nested=Annotated[
            list[Annotated[one_or_two, BeforeValidator(_list("a list of one or two texts"))]],
            Field(min_length=1, max_length=limits.max_items),
        ],
    )


def _head(limits: RouteLimits, choose_head: Callable[[str | None], str] | None) -> Any:
    """``/predict``'s head: one of the model's, required when it has several; ``choose_head``
    (the library's choice) gives the value, the default included."""
    head: Any = _optional(_choice(limits.heads) if limits.heads else str, None, "the head (default: the only one)")
    if len(limits.heads) > 1:  # no default: the request must name one
        head = (Literal[limits.heads], Field(description="the head"))
    if choose_head is None:
        return head
    return (
        Annotated[head[0], WrapValidator(lambda value, handler: handler(choose_head(value)))],
        Field(head[1].default, description=head[1].description, validate_default=True),
    )


def _masked_texts(limits: RouteLimits) -> Any:
    """``/fill_mask``'s inputs: texts with one mask each (the pattern says what the library checks)."""
    spellings = limits.mask_spellings or ("<mask>",)  # no masked-LM head: the route is not described
    masked = Annotated[
        Text,
        Field(
            description=f"a text with one {' or '.join(spellings)}",
            json_schema_extra={"pattern": _one_mask(spellings)},
        ),
    ]
    return _texts(limits, masked)


def _ids(limits: RouteLimits) -> Any:
    """``/decode``'s ids: ids of the vocabulary that stand for text, one list or several."""
    not_text = {"not": {"enum": list(limits.textless_ids)}} if limits.textless_ids else None
    token_id = integer(ge=0, le=limits.vocab_size - 1, json_schema_extra=not_text)
    row = Annotated[list[token_id], BeforeValidator(_list("a list of ids"))]  # type: ignore[valid-type]
    return one_of(
        "a list of ids or a list of such lists",
        list=Annotated[list[token_id], Field(min_length=1)],  # type: ignore[valid-type]
        nested=Annotated[list[row], Field(min_length=1, max_length=limits.max_items)],
    )


def request_models(
    limits: RouteLimits, *, choose_head: Callable[[str | None], str] | None = None
) -> dict[str, type[BaseModel]]:
    """The request body model of every POST route, for a server within ``limits``.
    ``choose_head`` (the library's :func:`~roberta_ext.inference.predict.choose_head` over the
    served model) gives ``/predict``'s ``head``, its default included."""
    truncate = _optional(bool, limits.auto_truncate, "cut inputs longer than the model takes instead of answering 413")
    direction = _optional(
        Annotated[Literal["right", "Right"], BeforeValidator(_lowercase)], "right", "where inputs are cut: right"
    )
    prompt_name = _optional(_choice(limits.prompts), None, "one of the model's prompts, prepended to each text")
    width = integer(ge=1, le=limits.dimension)

    def model(name: str, **fields: Any) -> type[BaseModel]:
        return create_model(name, __base__=Body, **fields)

    return {
        "/embed": model(
            "EmbedRequest",
            inputs=(_embed_inputs(limits), Field(description="a text, or a list of texts or [text, text] pairs")),
            normalize=_optional(bool, True, "L2-normalise each vector"),
            truncate=truncate,
            truncation_direction=direction,
            prompt_name=prompt_name,
            dimensions=_optional(width, None, "keep the first N values (normalised again when normalize)"),
        ),
        "/v1/embeddings": model(
            "OpenAIEmbeddingsRequest",
            input=(Annotated[_texts(limits), BeforeValidator(_no_token_ids)], Field(description="a text or texts")),
            model=_optional(str, None, "accepted and ignored"),
            encoding_format=_optional(
                _choice(("float", "base64")), "float", "float, or base64 of little-endian float32"
            ),
            dimensions=_optional(width, None, "keep the first N values, normalised again"),
            user=_optional(str, None, "accepted and ignored"),
        ),
        "/predict": model(
            "PredictRequest",
            inputs=(_predict_inputs(limits), Field(description="a text, a pair [a, b], or a list of [a] and [a, b]")),
            raw_scores=_optional(bool, False, "logits instead of probabilities"),
            truncate=truncate,
            truncation_direction=direction,
            head=_head(limits, choose_head),
        ),
        "/fill_mask": model(
            "FillMaskRequest",
            inputs=(_masked_texts(limits), ...),
            top_k=_optional(integer(ge=1, le=limits.max_top_k), 5, "fillings per text"),
        ),
        "/tokenize": model(
            "TokenizeRequest",
            inputs=(_texts(limits), ...),
            add_special_tokens=_optional(bool, True, "include <s> and </s>"),
            prompt_name=prompt_name,
        ),
        "/decode": model(
            "DecodeRequest",
            ids=(_ids(limits), ...),
            skip_special_tokens=_optional(bool, True, "leave <s>, </s>, <pad>, <unk>, <mask> out"),
        ),
    }


# ------------------------------------------------------------------------------ answers


class Prediction(BaseModel):
    score: float
    label: str


class Filling(BaseModel):
    score: float
    token_str: str
    sequence: str = Field(description="the text with the mask filled")


class Token(BaseModel):
    id: int
    text: str
    special: bool
    start: int | None = Field(description="character offset into the text (null: a special token or the prompt's)")
    stop: int | None


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"]
    embedding: list[float] | str = Field(description="floats, or base64 of little-endian float32")
    index: int


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddings(BaseModel):
    object: Literal["list"]
    data: list[OpenAIEmbedding]
    model: str
    usage: Usage


class Health(BaseModel):
    status: Literal["ok"]
    queue_depth: int


class ErrorBody(BaseModel):
    """Every error but ``/v1/embeddings``'."""

    error: str = Field(description="what is wrong")
    error_type: str = Field(
        description="Validation, Empty, Overloaded, Timeout, Backend, Unhealthy or Route (an unknown path or method)"
    )
    field: str | None = Field(
        None, description="the field of the request body at fault (inputs[3], ids[0][2], ...), when one is"
    )


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None
    code: int


class OpenAIErrorBody(BaseModel):
    """``/v1/embeddings``' errors, in OpenAI's shape."""

    error: OpenAIError
