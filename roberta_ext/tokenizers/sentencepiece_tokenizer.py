"""ALBERT's tokenizer over a SentencePiece ``spiece.model``: the ids of transformers' slow ``AlbertTokenizer``.

ALBERT does not hand raw text to SentencePiece. transformers' sentencepiece-based
``AlbertTokenizer`` (transformers 4.x; transformers 5 only ships a ``tokenizers``-backed
rewrite) first:

1. cuts out the special tokens written in the text (``[CLS]``, ``[SEP]``, ``[MASK]``, ``<pad>``,
   ``<unk>``) and, with ``do_lower_case``, lowercases the rest one character at a time;
2. *preprocesses* each remaining piece of text: collapses whitespace
   (``" ".join(text.strip().split())``), turns LaTeX-style quotes (two backticks, two
   apostrophes) into ``"``, applies NFKD and drops combining characters (unless
   ``keep_accents``), and lowercases it;
3. encodes it with SentencePiece, then re-splits every piece that ends in a digit followed by
   a comma (``"▁9,"`` -> ``"▁9"``, ``","``), as Google's ALBERT does, so that ``9,9`` is never
   one ``"9,"`` plus ``"9"``.

:class:`SentencePieceTokenizer` does the same, giving the same pieces and ids, and
:func:`train_sentencepiece` learns an ALBERT-style ``spiece.model`` (ids 0-4 are ``<pad>``,
``<unk>``, ``[CLS]``, ``[SEP]``, ``[MASK]``) from text.

>>> import os, tempfile
>>> texts = ["Hello, world! 1,000 cats; 9,9 dogs.", "The quick brown fox jumps over the lazy dog."] * 20
>>> prefix = os.path.join(tempfile.mkdtemp(), "spiece")
>>> model = train_sentencepiece(texts, prefix, vocab_size=100, hard_vocab_limit=False)  # small text: fewer pieces
>>> tok = SentencePieceTokenizer.from_file(model)
>>> [tok.id_to_token(i) for i in range(5)]
['<pad>', '<unk>', '[CLS]', '[SEP]', '[MASK]']
>>> tok.tokenize("Hello [MASK] 9,9!")
['▁', 'he', 'l', 'l', 'o', '[MASK]', '▁', '9', ',', '9', '!']
>>> tok.decode(tok.encode("Hello  WORLD 1,000"))
'hello world 1,000'
"""

from __future__ import annotations

import io
import os
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import sentencepiece

from .._io import write_bytes_atomic
from .wordpiece import _lowercase_per_character  # transformers 4.x's per-character lowercasing

__all__ = [
    "ALBERT_CONTROL_SYMBOLS",
    "ALBERT_USER_DEFINED_SYMBOLS",
    "SentencePieceFormatError",
    "SentencePieceTokenizer",
    "preprocess_text",
    "train_sentencepiece",
]

SPIECE_UNDERLINE = "▁"
"""SentencePiece's mark for a word boundary (U+2581), written where the text had a space."""

ALBERT_CONTROL_SYMBOLS = ("[CLS]", "[SEP]", "[MASK]")
"""Control symbols of ALBERT's ``spiece.model``: ids 2, 3, 4, never produced from text."""

ALBERT_USER_DEFINED_SYMBOLS = ("(", ")", '"', "-", ".", "–", "£", "€")
"""Always kept as pieces of their own, as in ALBERT's ``spm_train`` command (its README)."""


class SentencePieceFormatError(ValueError):
    """A ``spiece.model`` that cannot be used (unreadable, or missing a special token); the message names it."""


def preprocess_text(text: str, *, do_lower_case: bool = True, keep_accents: bool = False) -> str:
    """ALBERT's ``preprocess_text``: collapse whitespace, LaTeX quotes to ``"``, strip accents, lowercase.

    >>> preprocess_text("  ``Ångström''\\tNAÏVE  ")
    '"angstrom" naive'
    """
    text = " ".join(text.strip().split())
    text = text.replace("``", '"').replace("''", '"')
    if not keep_accents and not text.isascii():  # ASCII: NFKD changes nothing, nothing combines
        text = unicodedata.normalize("NFKD", text).translate(_DROP_COMBINING)
    if do_lower_case:
        # The whole string at once, as ALBERT does, so Final_Sigma may apply here (to a "Σ" that
        # NFKD produced from, say, a mathematical bold capital sigma).
        text = text.lower()
    return text


class _DropCombining(dict):
    """A ``str.translate`` table, filled on demand, that deletes combining characters."""

    def __missing__(self, cp: int) -> int | None:
        value = self[cp] = None if unicodedata.combining(chr(cp)) else cp
        return value


_DROP_COMBINING = _DropCombining()


class SentencePieceTokenizer:
    """Text <-> ALBERT vocabulary ids, equal to transformers' sentencepiece-based ``AlbertTokenizer``
    (no ``[CLS]``/``[SEP]`` added).

    ``model_proto`` is the content of a ``spiece.model``; see :meth:`from_file`. ``do_lower_case``
    and ``keep_accents`` mean what they mean for ``AlbertTokenizer``. The special tokens must be
    pieces of the model. ``source`` names the model in error messages.

    >>> import os, tempfile
    >>> texts = ["9,9 and 1,000,000 are numbers, so are 19 and 99."] * 9 + ["Naïve café; «ÉCOLE»"] * 9
    >>> prefix = os.path.join(tempfile.mkdtemp(), "spiece")
    >>> tok = SentencePieceTokenizer.from_file(train_sentencepiece(texts, prefix, 100, hard_vocab_limit=False))
    >>> tok.tokenize("NAÏVE numbers: 9,9[MASK]")  # ":" was never seen: it stays as text, and encodes to <unk>
    ['▁n', 'a', 'i', 'v', 'e', '▁n', 'u', 'm', 'b', 'e', 'r', 's', ':', '▁9', ',', '9', '[MASK]']
    >>> tok.encode("NAÏVE numbers: 9,9[MASK]")
    [27, 18, 34, 38, 13, 27, 37, 36, 32, 13, 17, 24, 1, 28, 20, 16, 4]
    >>> tok.decode(tok.encode("NAÏVE numbers: 9,9[MASK]"))
    'naive numbers<unk> 9,9[MASK]'
    >>> tok.cls_id, tok.sep_id, tok.pad_id, tok.unk_id, tok.mask_id
    (2, 3, 0, 1, 4)
    """

    def __init__(
        self,
        model_proto: bytes,
        *,
        do_lower_case: bool = True,
        keep_accents: bool = False,
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        mask_token: str = "[MASK]",
        source: str = "SentencePiece model",
    ) -> None:
        self.source = source
        self.do_lower_case = do_lower_case
        self.keep_accents = keep_accents
        self.model_proto = model_proto
        """The ``spiece.model`` bytes, kept so that an export writes the very same model."""
        try:
            self.sp = sentencepiece.SentencePieceProcessor(model_proto=model_proto)
        except (RuntimeError, OSError, TypeError) as error:
            raise SentencePieceFormatError(f"{source}: not a SentencePiece model ({error})") from None
        specials = {"unk": unk_token, "pad": pad_token, "cls": cls_token, "sep": sep_token, "mask": mask_token}
        ids = {token: self.sp.piece_to_id(token) for token in specials.values()}
        # piece_to_id answers unk_id for an unknown piece, so check the piece really is there.
        absent = [role for role, token in specials.items() if self.sp.id_to_piece(ids[token]) != token]
        missing = [f"{role} token {specials[role]!r}" for role in absent]
        if missing:
            raise SentencePieceFormatError(
                f"{source}: lacks the {', '.join(missing)}; ALBERT models start with "
                "<pad>, <unk>, [CLS], [SEP], [MASK] (or pass the names this one uses)"
            )
        self.unk_token, self.pad_token, self.cls_token = unk_token, pad_token, cls_token
        self.sep_token, self.mask_token = sep_token, mask_token
        self._special_ids = ids
        # Longest first, so that of two specials starting at the same place the longer wins, as
        # with transformers' trie.
        alternatives = "|".join(map(re.escape, sorted(ids, key=len, reverse=True)))
        self._special_pattern = re.compile(f"({alternatives})")
        # transformers lowercases the text around the specials *before* it looks for them, so a
        # special spelled in lowercase ("<unk>", "<pad>") is also found where the text has "<UNK>".
        self._split_again = do_lower_case and any(_lowercase_per_character(t) == t for t in ids)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        do_lower_case: bool = True,
        keep_accents: bool = False,
        unk_token: str = "<unk>",
        pad_token: str = "<pad>",
        cls_token: str = "[CLS]",
        sep_token: str = "[SEP]",
        mask_token: str = "[MASK]",
    ) -> SentencePieceTokenizer:
        """Load a ``spiece.model``.

        Raises ``FileNotFoundError`` for a missing file and :class:`SentencePieceFormatError`,
        naming the file, for one that is not a SentencePiece model or lacks a special token.
        """
        try:
            model_proto = Path(path).read_bytes()
        except FileNotFoundError as error:
            message = "SentencePiece model (spiece.model) not found"
            raise FileNotFoundError(error.errno, message, str(path)) from None
        return cls(
            model_proto,
            do_lower_case=do_lower_case,
            keep_accents=keep_accents,
            unk_token=unk_token,
            pad_token=pad_token,
            cls_token=cls_token,
            sep_token=sep_token,
            mask_token=mask_token,
            source=str(path),
        )

    # ---------------------------------------------------------------- lookups

    @property
    def vocab_size(self) -> int:
        """Number of pieces in the model."""
        return self.sp.get_piece_size()

    @property
    def unk_id(self) -> int:
        """Id of ``<unk>``."""
        return self._special_ids[self.unk_token]

    @property
    def pad_id(self) -> int:
        """Id of ``<pad>``."""
        return self._special_ids[self.pad_token]

    @property
    def cls_id(self) -> int:
        """Id of ``[CLS]``."""
        return self._special_ids[self.cls_token]

    @property
    def sep_id(self) -> int:
        """Id of ``[SEP]``."""
        return self._special_ids[self.sep_token]

    @property
    def mask_id(self) -> int:
        """Id of ``[MASK]``."""
        return self._special_ids[self.mask_token]

    def id_to_token(self, token_id: int) -> str:
        """The piece with id ``token_id``; ``IndexError`` naming it when out of range."""
        if not 0 <= token_id < self.vocab_size:
            raise IndexError(f"token id {token_id} is out of range for {self.source} ({self.vocab_size} pieces)")
        return self.sp.id_to_piece(token_id)

    def token_to_id(self, token: str) -> int:
        """The id of piece ``token``; ``KeyError`` naming it when the model has no such piece."""
        token_id = self.sp.piece_to_id(token)
        if self.sp.id_to_piece(token_id) != token:
            raise KeyError(f"piece {token!r} is not in {self.source}")
        return token_id

    # ---------------------------------------------------------------- encoding

    def _chunks(self, text: str) -> Iterator[tuple[str, bool]]:
        """``(text, False)`` between special tokens (lowercased per character if asked), ``(token, True)``."""
        parts = self._special_pattern.split(text)
        if self.do_lower_case:
            parts[::2] = map(_lowercase_per_character, parts[::2])
            if self._split_again:
                parts = self._special_pattern.split("".join(parts))
        for i, part in enumerate(parts):
            if i % 2 or part:
                yield part, bool(i % 2)

    def _pieces(self, text: str) -> list[str]:
        """ALBERT's ``_tokenize`` of text without special tokens."""
        text = preprocess_text(text, do_lower_case=self.do_lower_case, keep_accents=self.keep_accents)
        pieces = self.sp.encode(text, out_type=str)
        if "," not in "".join(pieces):
            return pieces
        fixed: list[str] = []
        for piece in pieces:
            if len(piece) > 1 and piece[-1] == "," and piece[-2].isdigit():
                # Google's ALBERT: "9,9" -> ["▁9", ",", "9"], not ["▁9,", "9"]. The digits are
                # re-encoded on their own (without preprocessing, as upstream), keeping the word
                # boundary only if the original piece had one.
                digits = self.sp.encode(piece[:-1].replace(SPIECE_UNDERLINE, ""), out_type=str)
                if piece[0] != SPIECE_UNDERLINE and digits[0][0] == SPIECE_UNDERLINE:
                    if len(digits[0]) == 1:
                        digits = digits[1:]
                    else:
                        digits[0] = digits[0][1:]
                fixed.extend(digits)
                fixed.append(piece[-1])
            else:
                fixed.append(piece)
        return fixed

    def tokenize(self, text: str) -> list[str]:
        """The pieces of ``text`` (``AlbertTokenizer.tokenize``); text the model cannot spell
        appears as itself (and encodes to ``<unk>``). Text that is not valid Unicode (a lone
        surrogate, such as ``"\\ud800"``, from a badly decoded file) raises ``ValueError``:
        SentencePiece reads UTF-8, which cannot hold it."""
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"text {text[max(0, error.start - 20) : error.end + 20]!r} has a lone surrogate at "
                f"index {error.start} ({text[error.start]!r}): not valid Unicode, which "
                "SentencePiece cannot tokenize"
            ) from None
        pieces: list[str] = []
        for chunk, is_special in self._chunks(text):
            if is_special:
                pieces.append(chunk)
            else:
                pieces.extend(self._pieces(chunk))
        return pieces

    def encode(self, text: str) -> list[int]:
        """Vocabulary ids of ``text``, without ``[CLS]``/``[SEP]`` (``AlbertTokenizer``'s
        ``encode(text, add_special_tokens=False)``). Text the model cannot spell gets ``<unk>``."""
        # piece_to_id maps a piece that is not in the model (unknown text) to unk_id, as upstream.
        return self.sp.piece_to_id(self.tokenize(text))

    # ---------------------------------------------------------------- decoding

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ``ids``, as ``AlbertTokenizer.decode(ids)``: pieces decoded by SentencePiece,
        special tokens written as themselves with a space before a run of them."""
        specials = self._special_ids
        text, previous_special = "", False
        run: list[str] = []
        for token in map(self.id_to_token, ids):
            if token in specials:
                if not previous_special:
                    text += " "
                text += self.sp.decode(run) + token
                run, previous_special = [], True
            else:
                run.append(token)
                previous_special = False
        text += self.sp.decode(run)
        return text.strip()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.source!r}, {self.vocab_size} pieces, "
            f"do_lower_case={self.do_lower_case}, keep_accents={self.keep_accents})"
        )


# ---------------------------------------------------------------------------------------- training


def train_sentencepiece(
    texts: Iterable[str],
    model_prefix: str | os.PathLike[str],
    vocab_size: int,
    *,
    do_lower_case: bool = True,
    keep_accents: bool = False,
    model_type: str = "unigram",
    character_coverage: float = 0.99995,
    control_symbols: Sequence[str] = ALBERT_CONTROL_SYMBOLS,
    user_defined_symbols: Sequence[str] = ALBERT_USER_DEFINED_SYMBOLS,
    num_threads: int | None = None,
    progress: bool = False,
    **trainer_options: object,
) -> Path:
    """Learn an ALBERT-style SentencePiece model from ``texts``; write ``<model_prefix>.model`` and ``.vocab``.

    The options are those of ALBERT's ``spm_train`` command: a unigram model with ``<pad>`` = 0,
    ``<unk>`` = 1, the control symbols ``[CLS]``, ``[SEP]``, ``[MASK]`` = 2, 3, 4, no ``<s>``/``</s>``,
    and ALBERT's user-defined symbols. Each text is one training sentence, preprocessed as
    :class:`SentencePieceTokenizer` will preprocess it (pass the same ``do_lower_case`` and
    ``keep_accents``). ``trainer_options`` go to ``SentencePieceTrainer.train`` as they are. Both
    files are written atomically; an interrupted training leaves none behind. Returns the
    ``.model`` path. Raises ``ValueError`` with SentencePiece's reason when training fails (for
    instance a ``vocab_size`` larger than the text allows).

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> train_sentencepiece(["ab abc"] * 9, os.path.join(folder, "sp"), vocab_size=20, hard_vocab_limit=False).name
    'sp.model'
    >>> sorted(os.listdir(folder))
    ['sp.model', 'sp.vocab']
    """

    def sentences() -> Iterator[str]:
        for text in texts:
            if do_lower_case:
                text = _lowercase_per_character(text)
            yield preprocess_text(text, do_lower_case=do_lower_case, keep_accents=keep_accents)

    model = io.BytesIO()
    options: dict[str, Any] = dict(  # SentencePiece trainer flags of all kinds
        model_type=model_type,
        vocab_size=vocab_size,
        pad_id=0,
        unk_id=1,
        bos_id=-1,
        eos_id=-1,
        control_symbols=list(control_symbols),
        user_defined_symbols=list(user_defined_symbols),
        character_coverage=character_coverage,
        num_threads=num_threads or os.cpu_count() or 1,
        minloglevel=0 if progress else 2,
    )
    options.update(trainer_options)
    try:
        sentencepiece.SentencePieceTrainer.train(sentence_iterator=sentences(), model_writer=model, **options)
    except RuntimeError as error:
        raise ValueError(f"SentencePiece training for {model_prefix} failed: {error}") from None
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    vocab_rows = "".join(
        f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(processor.get_piece_size())
    )
    prefix = Path(model_prefix)
    model_path = prefix.with_name(prefix.name + ".model")
    write_bytes_atomic(model_path, model.getvalue())
    write_bytes_atomic(prefix.with_name(prefix.name + ".vocab"), vocab_rows.encode("utf-8"))
    return model_path
