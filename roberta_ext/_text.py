"""Small helpers for the text of messages, so that every command and route words counts alike."""

from __future__ import annotations

__all__ = ["counted", "undecodable"]


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun`` in agreement: the singular for exactly one, else the plural
    (``noun + "s"`` unless ``plural`` says otherwise), so that a message never reads "1 items".

    >>> counted(1, "bad line"), counted(0, "row"), counted(3, "item"), counted(2, "index", "indices")
    ('1 bad line', '0 rows', '3 items', '2 indices')
    """
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def undecodable(error: UnicodeDecodeError, within: str = "") -> str:
    """Where bytes are not UTF-8, as every message says it: the reason, the offset of the first
    bad byte counted from 0 (``within`` names what it counts in: " of the line"), as Python's own
    "in position N" and the server's messages count, and the bad bytes.

    >>> try:
    ...     b"\\xffok".decode("utf-8")
    ... except UnicodeDecodeError as error:
    ...     print(undecodable(error, " of the line"))
    invalid start byte at byte offset 0 of the line: b'\\xff'
    """
    return f"{error.reason} at byte offset {error.start}{within}: {error.object[error.start : error.end]!r}"
