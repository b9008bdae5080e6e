"""What the server answers for a library error that reaches a handler: one table, keyed by
class, of HTTP status and TEI error type.

Handlers check what they can themselves and raise a :class:`~roberta_ext.serve.validation.
RequestError`, which carries its own status. An error of the library they call (the model lacks
the head asked for, a vocabulary file cannot be read) is answered here, by its class or its
nearest listed ancestor: a request the model cannot serve is the client's to fix (4xx, the
message as the library wrote it); a file of the served model is the server's (500, the
message prefixed with the error's class, as for any other failure).

>>> from roberta_ext.inference.head_outputs import HeadError
>>> error = answer_for(HeadError("the model has no classification head 'x'; its heads: ['y']"))
>>> error.status, error.kind, error.message
(422, 'Validation', "the model has no classification head 'x'; its heads: ['y']")
"""

from __future__ import annotations

from ..checkpoints import CheckpointError
from ..corpus.reading import CorpusError
from ..download import StoreError
from ..errors import RobertaExtError, lookup
from ..inference.head_outputs import HeadError
from ..tokenizers.errors import TokenizerError
from .validation import RequestError

__all__ = ["ERROR_STATUS", "answer_for"]

ERROR_STATUS: dict[type[BaseException], tuple[int, str]] = {
    HeadError: (422, "Validation"),  # no such head, or several and none named: the request's to fix
    CorpusError: (422, "Validation"),  # input rows the library cannot process
    TokenizerError: (500, "Backend"),  # the served model's vocabulary files
    CheckpointError: (500, "Backend"),  # the served model's weights
    StoreError: (500, "Backend"),  # a file the server could not fetch
    RobertaExtError: (500, "Backend"),  # any other error the package raises on purpose
}
"""``(HTTP status, TEI error type)`` of each library layer's error, found through the error's
MRO (:func:`~roberta_ext.errors.lookup`). A ``RequestError`` is not listed: it carries its own."""


def answer_for(error: RobertaExtError) -> RequestError:
    """The :class:`RequestError` to answer ``error`` with: itself if it is one, else by
    :data:`ERROR_STATUS`."""
    if isinstance(error, RequestError):
        return error
    status, kind = lookup(ERROR_STATUS, error) or (500, "Backend")
    message = str(error) if status < 500 else f"{type(error).__name__}: {error}"
    return RequestError(status, message, kind=kind)
