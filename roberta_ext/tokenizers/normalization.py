"""Text normalisation shared by the WordPiece and SentencePiece tokenizers and the sentence embedder.

What transformers does to text before a model's own tokenizer sees it, written once:

* :func:`lowercase_per_character`: lowercasing one character at a time, as transformers 4.x's
  slow tokenizers did (and as HF ``tokenizers``' ``Lowercase`` normalizer does, with its own
  Unicode tables), which differs from ``str.lower`` on a word-final ``Σ``;
* :class:`SpecialTokenSplitter`: cutting special tokens (``[MASK]``, ``<unk>``) out of text, with
  the rest optionally lowercased first, as transformers' ``PreTrainedTokenizer.tokenize`` does;
* :func:`check_unicode`: refusing a ``str`` that holds a lone surrogate, which is not text, with
  a message that says where it is.

>>> splitter = SpecialTokenSplitter({"[MASK]": 4}, lowercase=True)
>>> list(splitter.split("ΟΔΟΣ [MASK]!"))
[('οδοσ ', None), ('[MASK]', 4), ('!', None)]
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

__all__ = ["SpecialTokenSplitter", "check_unicode", "lowercase_per_character"]


def lowercase_per_character(text: str) -> str:
    """``"".join(c.lower() for c in text)``, fast.

    transformers 4.x lowercased the text around special tokens one character at a time (its
    pattern's ``(.+?)`` group matches one character), and so does HF ``tokenizers``' ``Lowercase``.
    Python's ``str.lower`` is per character except for one context rule (Final_Sigma): a capital
    sigma that ends a word becomes ``ς``. Turning every ``Σ`` into ``σ`` first removes the rule.
    Characters are this Python's ``unicodedata``'s; the ``tokenizers`` library (Rust) also lowercases
    a few letters that Unicode added after this Python's version (see ``_bert_unicode.LOWERCASE``).

    >>> lowercase_per_character("ΟΔΟΣ İ"), "ΟΔΟΣ".lower()
    ('οδοσ i̇', 'οδος')
    """
    return text.replace("Σ", "σ").lower()


class SpecialTokenSplitter:
    """Cuts special tokens out of text, as transformers' ``PreTrainedTokenizer.tokenize`` does
    before calling the model's own tokenizer.

    ``special_ids`` maps each special token to its id. Specials are matched exactly as written
    (case-sensitive, no whitespace stripped around them): of two starting at the same place the
    longer wins, as with transformers' trie. With ``lowercase=True`` the text between specials is
    lowercased with :func:`lowercase_per_character` (the specials themselves are not), and, as
    transformers lowercases *before* it looks for specials, a special spelled in lowercase
    (``"<unk>"``) is then also found where the text has ``"<UNK>"``. The tokenizers whose
    transformers peer matches specials in the text as written (transformers 5's ``BertTokenizer``,
    ``XLMRobertaTokenizer``) pass ``lowercase=False`` and lowercase later, if at all.

    >>> splitter = SpecialTokenSplitter({"<unk>": 1, "[MASK]": 4, "[MASK]]": 9}, lowercase=True)
    >>> list(splitter.split("Hi[MASK]]<UNK>![MASK]"))
    [('hi', None), ('[MASK]]', 9), ('<unk>', 1), ('!', None), ('[MASK]', 4)]
    >>> list(SpecialTokenSplitter({"<unk>": 1}).split("Hi<UNK><unk>"))
    [('Hi<UNK>', None), ('<unk>', 1)]
    """

    def __init__(self, special_ids: Mapping[str, int], *, lowercase: bool = False) -> None:
        self.special_ids = dict(special_ids)
        """Special token -> id, as given."""
        self.lowercase = lowercase
        """Whether the text between specials is lowercased (before specials are looked for)."""
        # Longest first (a stable sort: equal lengths keep their order), so that of two specials
        # starting at the same place the longer wins, as with transformers' trie.
        alternatives = "|".join(map(re.escape, sorted(self.special_ids, key=len, reverse=True)))
        self._pattern = re.compile(f"({alternatives})")

    def split(self, text: str) -> Iterator[tuple[str, int | None]]:
        """``(text, None)`` for each non-empty stretch of text between specials (lowercased if
        asked), ``(token, id)`` for each special, in order.

        >>> list(SpecialTokenSplitter({"[SEP]": 3}).split("a[SEP][SEP]b"))
        [('a', None), ('[SEP]', 3), ('[SEP]', 3), ('b', None)]
        """
        parts = self._pattern.split(text)  # text, special, text, special, ..., text
        if self.lowercase:
            # transformers 4 lowercases the text between specials, joins, and only then looks for
            # specials: one written in lowercase can appear where the text had capitals ("<UNK>"),
            # and any special across a seam of lowercased text and another special ("a[M" in
            # "a" + "[MASK]"), so the joined text is split again.
            parts[::2] = map(lowercase_per_character, parts[::2])
            parts = self._pattern.split("".join(parts))
        ids = self.special_ids
        for i, part in enumerate(parts):
            if i % 2:
                yield part, ids[part]
            elif part:
                yield part, None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.special_ids!r}, lowercase={self.lowercase})"


def check_unicode(text: str, *, reader: str) -> None:
    """Raise ``ValueError`` naming the first lone surrogate of ``text``, if it has one.

    A ``str`` can hold a lone surrogate (``errors="surrogateescape"`` makes ``"\\udcff"`` of a byte
    0xff) but it is not text: it has no UTF-8, which SentencePiece and HF ``tokenizers`` read.
    ``reader`` names what cannot read it, for the message.

    >>> check_unicode("ok", reader="SentencePiece")
    >>> check_unicode("ok \\udcff bytes", reader="SentencePiece")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: text 'ok \\udcff bytes' has a lone surrogate at index 3 ('\\udcff'): not valid Unicode, which...
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"text {text[max(0, error.start - 20) : error.end + 20]!r} has a lone surrogate at index "
            f"{error.start} ({text[error.start]!r}): not valid Unicode, which {reader} cannot tokenize; "
            "decode the bytes properly first"
        ) from None
