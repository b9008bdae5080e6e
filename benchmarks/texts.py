"""The text sets every speed comparison runs on: a target met on one length mix only is not met.

All three come from the standard library's docstrings (``roberta_ext.quickstart.stdlib_docstrings``:
present wherever Python is, English prose with code names in it), shuffled with a fixed seed:

``short``
    one-sentence lines of 6 to 20 words: where sorting by length leaves little padding to skip,
    so what counts is the per-batch and per-token work outside the matrix products;
``mixed``
    whole docstrings, a few tokens to past 512: where skipping padding pays most;
``long``
    paragraphs of consecutive docstrings joined to 1,500-2,500 characters (about 350-600 BPE
    tokens), at or past the ``max_seq_length`` of sentence-transformers folders (256 for MiniLM,
    512 for a base model): attention's share of the time is largest.

>>> from benchmarks.texts import text_set
>>> lines = text_set("short", 100)
>>> len(lines), all(6 <= len(line.split()) <= 20 for line in lines)
(100, True)
"""

from __future__ import annotations

import functools
import random

__all__ = ["TEXT_SETS", "docstrings", "text_set"]

TEXT_SETS = ("short", "mixed", "long")


@functools.cache
def docstrings() -> tuple[str, ...]:
    """Every docstring of the standard library, whitespace-normalised, shuffled with seed 0."""
    from roberta_ext.quickstart import stdlib_docstrings

    docs = [text for text, _ in stdlib_docstrings()]
    random.Random(0).shuffle(docs)
    return tuple(docs)


@functools.cache
def _sets() -> dict[str, tuple[str, ...]]:
    docs = docstrings()
    sentences = [s.strip().rstrip(".") + "." for doc in docs for s in doc.split(". ")]
    short = [s for s in sentences if 6 <= len(s.split()) <= 20]
    long: list[str] = []
    paragraph = ""
    for doc in docs:
        paragraph = f"{paragraph} {doc}".strip()
        if len(paragraph) >= 1500:
            if len(paragraph) <= 2500:
                long.append(paragraph)
            paragraph = ""
    return {"short": tuple(short), "mixed": docs, "long": tuple(long)}


def text_set(name: str, count: int | None = None) -> list[str]:
    """The first ``count`` texts (default: all) of text set ``name`` (one of :data:`TEXT_SETS`)."""
    if name not in TEXT_SETS:
        raise ValueError(f"unknown text set {name!r}: one of {', '.join(TEXT_SETS)}")
    texts = _sets()[name]
    if count is not None and count > len(texts):
        raise ValueError(f"text set {name!r} has {len(texts)} texts, not {count}")
    return list(texts[:count])
