"""The one base of every error roberta_ext raises on purpose, and the lookup that maps an error
to what a door answers for it.

Each layer defines its own subclass of :class:`RobertaExtError`, in that layer:
``CheckpointError`` (``checkpoints/``), ``StoreError`` (the download cache), ``TokenizerError``
(``tokenizers/``), ``CorpusError`` (``corpus/``), ``HeadError`` (the heads' outputs),
``InputError`` (a text the model cannot take: ``inference/inputs.py``), ``OutputBusy``
(``embedding/``), ``ExportError`` (``export/``), ``CommandError`` (``cli/``), ``RequestError``
(``serve/``). A caller can catch one layer's failures, or every deliberate
failure of the package at once. The doors map them once, in a table keyed by class: the
command line's exit statuses (``cli/running.py``), the server's HTTP statuses
(``serve/errors.py``); :func:`lookup` finds an error's entry through its MRO, so a subclass
answers as its nearest listed ancestor.

This module imports nothing of the package: every layer can import it.

>>> class LayerError(RobertaExtError): ...
>>> class FileFormatError(LayerError, ValueError): ...
>>> lookup({LayerError: 2, RobertaExtError: 1}, FileFormatError("bad.txt:3: not a number"))
2
>>> lookup({LayerError: 2}, KeyError("x")) is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

__all__ = ["RobertaExtError", "lookup"]

T = TypeVar("T")


class RobertaExtError(Exception):
    """A failure roberta_ext reports on purpose: the message names the input and what is wrong
    with it. Never raised itself; each layer raises its own subclass (some of which are also
    ``ValueError`` or ``OSError``, for callers that catch those)."""


def lookup(table: Mapping[type[BaseException], T], error: BaseException) -> T | None:
    """The entry of ``table`` for ``error``'s class or its nearest ancestor (in MRO order), or
    None when no class of its MRO is listed."""
    for cls in type(error).__mro__:
        if cls in table:
            return table[cls]
    return None
