"""The fenced code blocks of a Markdown page, for the tests that run what docs/ shows.

Fences are what docs/ uses: a line of three or more backticks, possibly indented (a block
inside a list item), whose info string's first word is the block's language; the block ends at
a line of at least as many backticks and nothing else. The opening fence's indentation is
removed from the block's lines, as Markdown does. ``~~~`` fences are not recognised.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

_OPENING = re.compile(r"(?P<indent>[ \t]*)(?P<fence>`{3,})[ \t]*(?P<language>[^`\s]*)[^`]*")


@dataclass(frozen=True)
class Block:
    """One fenced block: the page it is on, the 1-based line of its opening fence, its language
    (``""`` when the fence names none) and its text (the lines between the fences, each ending
    with a newline)."""

    page: Path
    line: int
    language: str
    text: str

    @property
    def where(self) -> str:
        """``page.md:line``, for messages."""
        return f"{self.page.name}:{self.line}"


def code_blocks(path: str | Path, languages: Collection[str]) -> list[Block]:
    """The blocks of the page at ``path`` whose language is one of ``languages``, in page order.

    Raises ``ValueError`` for a fence that is never closed, which would otherwise swallow the
    rest of the page silently.
    """
    page = Path(path)
    lines = page.read_text(encoding="utf-8").splitlines(keepends=True)
    blocks = []
    index = 0
    while index < len(lines):
        opening = _OPENING.fullmatch(lines[index].rstrip("\r\n"))
        index += 1
        if opening is None:
            continue
        start, indent, fence = index, len(opening["indent"]), opening["fence"]
        while index < len(lines) and not re.fullmatch(rf"[ \t]*{fence}`*[ \t]*", lines[index].rstrip("\r\n")):
            index += 1
        if index == len(lines):
            raise ValueError(f"{page.name}:{start}: the code fence is never closed")
        if opening["language"] in languages:
            body = [line[min(indent, len(line) - len(line.lstrip(" \t"))) :] for line in lines[start:index]]
            blocks.append(Block(page, start, opening["language"], "".join(body)))
        index += 1
    return blocks
