"""Read the Unicode tables of HF ``tokenizers``' BERT normalizer and pre-tokenizer off the installed library.

``roberta_ext/tokenizers/_bert_unicode.py`` holds what this probe finds; the tests check that the two
still agree, and ``python -m tests.tokenizers.bert_unicode_probe`` prints the tables in that
module's format, to paste there when ``tokenizers`` changes them.

Each table is read by running every code point but the surrogates through the library, a block
of code points per call, interleaved with a letter or a separator that no step changes, merges
with, or reaches across:

* ``other``: deleted by ``BertNormalizer(clean_text=True)`` (its ``is_control``: the
  ``unicode_categories`` crate's ``is_other``, less ``\\t \\n \\r``). NUL and U+FFFD, deleted by
  a rule of their own, are left out.
* ``punctuation``: isolated by ``BertPreTokenizer`` between two letters (``a{c}a``).
* ``nonspacing_marks``: a code point that ``strip_accents`` deletes outright (NFD, then the crate's
  ``is_mark_nonspacing``).
* ``nfd_known``: code points that the library's NFD (the ``unicode-normalization-alignments`` crate)
  decomposes or reorders: ``NFD("\\u0345" + c + "\\u0334") != "\\u0345" + c + "\\u0334"`` exactly
  when ``c`` has a canonical decomposition or a nonzero combining class there.
* ``lowercase``: ``{c: lowercase c}`` (code points) where the library's lowercasing (Rust's
  ``char::to_lowercase``) differs from this Python's ``str.lower``.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable

SEPARATOR = "|"
CODE_POINTS = [cp for cp in range(0x110000) if not 0xD800 <= cp <= 0xDFFF]
"""Every code point a ``str`` can hold as text (lone surrogates cannot be passed to the library)."""


def ranges(code_points: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted code points as inclusive ``(first, last)`` runs.

    >>> ranges([5, 1, 2, 3])
    [(1, 3), (5, 5)]
    """
    runs: list[list[int]] = []
    for cp in sorted(code_points):
        if runs and runs[-1][1] == cp - 1:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp])
    return [(first, last) for first, last in runs]


def _each(normalize: Callable[[str], str], code_points: list[int], make: Callable[[str], str] = str) -> list[str]:
    """``normalize(make(chr(cp)))`` for each code point: ``|``-separated in one call (``|`` itself alone)."""
    rest = [cp for cp in code_points if chr(cp) != SEPARATOR]
    outputs = iter(normalize(SEPARATOR.join([make(chr(cp)) for cp in rest])).split(SEPARATOR))
    results = [normalize(make(SEPARATOR)) if chr(cp) == SEPARATOR else next(outputs) for cp in code_points]
    assert next(outputs, None) is None
    return results


def probe_tables(block_size: int = 1 << 14) -> dict[str, object]:
    """The tables, read off the installed ``tokenizers``.

    Code points go through the library a block at a time; a block whose output shows that none of
    its code points has the property is done, and the others are read code point by code point
    (each call still takes the whole block, separated by ``|``)."""
    from tokenizers import normalizers, pre_tokenizers

    def bert(**options) -> Callable[[str], str]:
        defaults = dict(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=False)
        return normalizers.BertNormalizer(**{**defaults, **options}).normalize_str

    clean, strip, lower = bert(clean_text=True), bert(strip_accents=True), bert(lowercase=True)
    nfd = normalizers.NFD().normalize_str
    pre_tokenize = pre_tokenizers.BertPreTokenizer().pre_tokenize_str
    probe = "\u0345{}\u0334".format  # NFD reorders these two around any mark, and decomposes as ever
    other: set[int] = set()
    punctuation: set[int] = set()
    nonspacing: set[int] = set()
    nfd_known: set[int] = set()
    lowercase: dict[int, str] = {}
    for start in range(0, len(CODE_POINTS), block_size):
        block = CODE_POINTS[start : start + block_size]
        chars = [chr(cp) for cp in block]
        text = "".join(chars)
        # clean_text keeps a code point, deletes it or makes it a space (NUL and U+FFFD by a rule
        # of their own).
        if clean(text) != text:
            other |= {cp for cp, out in zip(block, _each(clean, block)) if out == ""} - {0, 0xFFFD}
        # A punctuation character comes out of the pre-tokenizer alone; any other merges with the
        # a's around it (or, being whitespace, disappears).
        pieces = pre_tokenize("a" + "a".join(chars) + "a")
        punctuation |= {ord(piece) for piece, _ in pieces if len(piece) == 1 and piece != "a"}
        if strip(text) != text:
            nonspacing |= {cp for cp, out in zip(block, _each(strip, block)) if out == ""}
        probed = "".join(map(probe, chars))
        if nfd(probed) != probed:
            nfd_known |= {cp for cp, out in zip(block, _each(nfd, block, probe)) if out != probe(chr(cp))}
        # Python's str.lower is per character but for Final_Sigma, which Σ -> σ turns off.
        if lower(text) != text.replace("\u03a3", "\u03c3").lower():
            lowercase |= {cp: out for cp, out in zip(block, _each(lower, block)) if out != chr(cp).lower()}
    assert all(len(out) == 1 for out in lowercase.values()), "a one-to-many lowercasing: the table needs strings"
    return {
        "other": ranges(other),
        "punctuation": ranges(punctuation),
        "nonspacing_marks": ranges(nonspacing),
        "nfd_known": ranges(nfd_known),
        "lowercase": lowercase,
    }


def _format_ranges(runs: list[tuple[int, int]]) -> str:
    return _wrap([f"{a:04X}" if a == b else f"{a:04X}-{b:04X}" for a, b in runs])


def _wrap(items: list[str]) -> str:
    """Space-separated items as implicitly concatenated string literals, one per source line."""
    lines, line = [], ""
    for item in items:
        if len(line) + len(item) + 1 > 96:
            lines.append(line)
            line = ""
        line = f"{line} {item}" if line else item
    lines.append(line)
    return "\n".join(f'    "{line} "' for line in lines)


def _format_lowercase(lowercase: dict[int, str]) -> str:
    """``{cp: lower}`` as ``first-last>lower_of_first`` runs in which both sides go up by one."""
    runs: list[list[int]] = []
    for cp, out in sorted(lowercase.items()):
        if runs and runs[-1][1] == cp - 1 and runs[-1][2] + cp - runs[-1][0] == ord(out):
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, ord(out)])
    return _wrap([f"{a:04X}>{t:04X}" if a == b else f"{a:04X}-{b:04X}>{t:04X}" for a, b, t in runs])


def main() -> None:
    import tokenizers

    tables = probe_tables()
    print(f"# tokenizers {tokenizers.__version__}; Python's unicodedata {unicodedata.unidata_version}")
    for name in ("other", "punctuation", "nonspacing_marks", "nfd_known"):
        runs = tables[name]
        assert isinstance(runs, list)
        print(f"{name.upper()} = _Ranges(\n{_format_ranges(runs)}\n)")
    lowercase = tables["lowercase"]
    assert isinstance(lowercase, dict)
    print(f"LOWERCASE = _lowercase(\n{_format_lowercase(lowercase)}\n)")


if __name__ == "__main__":
    main()
