"""What the server answers for a refusal or a library error: :class:`RequestError` (a refusal,
with its own HTTP status) and one table, keyed by class, of HTTP status and TEI error type.

Handlers validate requests (:mod:`.validation`) and call the library; what the library refuses
(the model lacks the head asked for, an input too long or without its mask) is answered here, by
the error's class or its nearest listed ancestor: a request the model cannot serve is the
client's to fix (4xx, the message as the library wrote it, the field it names); a file of the
served model is the server's (500, the message prefixed with the error's class, as for any other
failure).

>>> from roberta_ext.inference.head_outputs import HeadError
>>> error = answer_for(HeadError("the model has no classification head 'x'; its heads: ['y']"))
>>> error.status, error.kind, error.message
(422, 'Validation', "the model has no classification head 'x'; its heads: ['y']")
"""

from __future__ import annotations

from collections.abc import Mapping

from ..checkpoints import CheckpointError
from ..corpus.reading import CorpusError
from ..download import StoreError
from ..errors import RobertaExtError, lookup
from ..inference.head_outputs import HeadError
from ..inference.inputs import InputError, InputTooLong
from ..tokenizers.errors import TokenizerError

__all__ = ["ERROR_STATUS", "RequestError", "answer_for"]


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


ERROR_STATUS: dict[type[BaseException], tuple[int, str]] = {
    HeadError: (422, "Validation"),  # no such head, or several and none named: the request's to fix
    InputTooLong: (413, "Validation"),  # longer than the model takes, and not to be cut (TEI's status)
    InputError: (422, "Validation"),  # a text fill-mask cannot take (no mask, two masks)
    CorpusError: (422, "Validation"),  # input rows the library cannot process
    TokenizerError: (500, "Backend"),  # the served model's vocabulary files
    CheckpointError: (500, "Backend"),  # the served model's weights
    StoreError: (500, "Backend"),  # a file the server could not fetch
    RobertaExtError: (500, "Backend"),  # any other error the package raises on purpose
}
"""``(HTTP status, TEI error type)`` of each library layer's error, found through the error's
MRO (:func:`~roberta_ext.errors.lookup`). A ``RequestError`` is not listed: it carries its own."""


def answer_for(error: RobertaExtError, *, field: str | None = None) -> RequestError:
    """The :class:`RequestError` to answer ``error`` with: itself if it is one, else by
    :data:`ERROR_STATUS`, naming ``field`` (default: the input an ``InputError`` names)."""
    if isinstance(error, RequestError):
        return error
    status, kind = lookup(ERROR_STATUS, error) or (500, "Backend")
    message = str(error) if status < 500 else f"{type(error).__name__}: {error}"
    if field is None and isinstance(error, InputError):
        field = error.where
    return RequestError(status, message, kind=kind, field=field)
