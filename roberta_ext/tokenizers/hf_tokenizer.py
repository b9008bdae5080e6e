"""Tokenizers read from a ``tokenizer.json`` by the ``tokenizers`` library, the reference implementation.

Some tokenizers are not ours to rewrite. ModernBERT's ``tokenizer.json`` is a byte-level BPE
(the OLMo / GPT-NeoX vocabulary), but not GPT-2's: an NFC normalizer runs first, and added
tokens are cut out of the text before the BPE sees it — runs of 2 to 24 spaces,
``|||IP_ADDRESS|||``, and a ``[MASK]`` that absorbs the spaces before it (``lstrip``). mmBERT's
Gemma vocabulary adds byte fallback and other normalizers. Approximating any of these with our
GPT-2 BPE would give other ids without a word of warning, so a ``tokenizer.json`` is read by the
library that writes it (``tokenizers``, Rust): the ids are transformers' fast tokenizer's by
construction. What this module adds is the project's side of it:

* the model's index space: a transformers folder's ids *are* the embedding rows (a dictionary
  with one symbol per row, padded past the tokenizer to the rows it has: ModernBERT-base's
  50368); a fairseq checkpoint sees them through ``dict.txt``, whose symbols are the ids
  written in decimal, as fairseq's ``gpt2`` and ``hf_byte_bpe`` write them;
* which tokens play fairseq's ``<s>``, ``</s>``, ``<pad>``, ``<unk>`` and the mask: ``<s>`` and
  ``</s>`` are what the file's post-processor puts around one text (``[CLS] a [SEP]``), the
  others what ``tokenizer_config.json`` names;
* the interface every hub tokenizer has: ``encode`` (no ``<s>``/``</s>``: the hub's inputs add
  them in the family's layout, which must be the template's), ``decode``, ``encode_word``,
  ``token_text`` and ``spans``.

>>> from tokenizers import Tokenizer, models, pre_tokenizers, decoders, processors
>>> vocab = {"[CLS]": 0, "[SEP]": 1, "[PAD]": 2, "[UNK]": 3, "h": 4, "i": 5, "Ġ": 6, "hi": 7, "Ġhi": 8}
>>> library = Tokenizer(models.BPE(vocab, [("h", "i"), ("Ġ", "hi")]))
>>> library.pre_tokenizer, library.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
>>> library.post_processor = processors.TemplateProcessing(
...     single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", 0), ("[SEP]", 1)])
>>> tok = HFTokenizer.for_model(library, rows=12, names={"pad_token": "[PAD]", "unk_token": "[UNK]"})
>>> tok.encode("hi hi"), tok.decode([0, 7, 8, 1]), tok.token_text(8), tok.spans("hi hi")
([7, 8], 'hi hi', ' hi', [(0, 2), (2, 5)])
>>> d = tok.dictionary
>>> d.bos(), d.eos(), d.pad(), d.unk(), len(d), d[11]
(0, 1, 2, 3, 12, '<id:11>')
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dictionary import Dictionary
from .errors import TokenizerError
from .normalization import check_unicode

if TYPE_CHECKING:
    import tokenizers

__all__ = ["HFTokenizer", "HFTokenizerFormatError", "special_token_names"]

READER = "the tokenizers library"
"""What reads the text, for messages about text it cannot read."""

DEFAULT_MASK = "<mask>"
"""The hub's mask spelling, for a tokenizer that names no mask token."""

ROLES = ("pad_token", "unk_token", "mask_token")
"""The special tokens named in ``tokenizer_config.json`` that the dictionary needs (``<s>`` and
``</s>`` come from the post-processor's template)."""


class HFTokenizerFormatError(TokenizerError):
    """A ``tokenizer.json`` that cannot serve a model: unreadable, without a template that puts
    one token before and after a text, without a padding or unknown token, or with more ids
    than the model has rows. The message names the file."""


def _library() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise ImportError(
            "a tokenizer.json (ModernBERT's and other transformers folders whose tokenizer is that file) is read "
            "by the tokenizers library: pip install tokenizers"
        ) from None
    return tokenizers


def special_token_names(directory: Path, tokenizer_config: Mapping[str, Any]) -> dict[str, str]:
    """``{"pad_token": "[PAD]", ...}``: the special tokens a transformers folder names, from
    ``tokenizer_config.json`` (``tokenizer_config``), else ``special_tokens_map.json`` (which
    transformers 4 wrote beside it). A name is a string or, as transformers 4 wrote it, an
    AddedToken ``{"content": "[PAD]", ...}``."""
    names: dict[str, str] = {}
    sources: list[Mapping[str, Any]] = [tokenizer_config]
    specials_map = directory / "special_tokens_map.json"
    if specials_map.is_file():
        try:
            sources.append(json.loads(specials_map.read_text(encoding="utf-8")))
        except ValueError as error:
            raise HFTokenizerFormatError(f"{str(specials_map)!r} is not valid JSON ({error})") from None
    for key in ROLES:
        for source in sources:
            name = source.get(key)
            if isinstance(name, Mapping):
                name = name.get("content")
            if isinstance(name, str):
                names[key] = name
                break
    return names


class HFTokenizer:
    """Text <-> model indices through a ``tokenizers.Tokenizer`` (a ``tokenizer.json``).

    Build one with :meth:`from_file` (a transformers folder: ids are indices) or
    :meth:`over_dictionary` (a fairseq checkpoint: ids through ``dict.txt``).
    """

    def __init__(
        self,
        library: tokenizers.Tokenizer,
        dictionary: Dictionary,
        *,
        mask_token: str,
        to_index: Sequence[int] | None = None,
    ) -> None:
        self.library = library
        """The ``tokenizers.Tokenizer``: what turns text into ids and back."""
        self.dictionary = dictionary
        self.mask_token = mask_token
        """How the mask is written in text (``[MASK]``); :data:`DEFAULT_MASK` for a tokenizer naming none."""
        self.is_identity = to_index is None
        """The tokenizer's ids are the model's indices (a transformers folder)."""
        self._to_index = None if to_index is None else list(to_index)
        self._to_id = None if to_index is None else {index: i for i, index in enumerate(to_index)}
        # token_text decodes a token after a known one, so that a decoder which strips the
        # first token's leading space (SentencePiece's Metaspace) still shows it.
        self._anchor = library.encode("a", add_special_tokens=False).ids
        self._anchor_text = library.decode(self._anchor, skip_special_tokens=False)

    @classmethod
    def from_file(
        cls,
        path: str | os.PathLike[str],
        *,
        rows: int,
        names: Mapping[str, str],
        double_separator: bool = False,
    ) -> HFTokenizer:
        """The tokenizer of a transformers folder: ``tokenizer.json`` at ``path``, its ids the
        indices of a model with ``rows`` embedding rows; ``names`` the special tokens the folder
        names (:func:`special_token_names`); ``double_separator`` how the model's family joins a
        pair (``</s> </s>`` between the texts, RoBERTa's, or one ``[SEP]``)."""
        return cls.for_model(_read(Path(path)), rows=rows, names=names, double_separator=double_separator, source=path)

    @classmethod
    def for_model(
        cls,
        library: tokenizers.Tokenizer,
        *,
        rows: int,
        names: Mapping[str, str],
        double_separator: bool = False,
        source: str | os.PathLike[str] = "tokenizer.json",
    ) -> HFTokenizer:
        """:meth:`from_file` for a ``tokenizers.Tokenizer`` in memory (``source`` names it in messages)."""
        where = str(source)
        vocab = library.get_vocab(with_added_tokens=True)  # token -> id
        if vocab and max(vocab.values()) >= rows:
            raise HFTokenizerFormatError(
                f"{where!r} has ids up to {max(vocab.values())}, but the model's embedding has {rows} rows: this "
                "tokenizer does not belong to this model"
            )
        bos, eos = _template(library, where, double_separator)
        roles = {"bos": bos, "eos": eos}
        for role in ("pad", "unk"):
            name = names.get(f"{role}_token") or _fallback(library, role)
            if name is None:
                raise HFTokenizerFormatError(
                    f"{where!r}: the folder names no {role}_token (tokenizer_config.json, special_tokens_map.json)"
                )
            token_id = library.token_to_id(name)
            if token_id is None:
                raise HFTokenizerFormatError(f"{where!r}: its {role}_token {name!r} is not in its vocabulary")
            roles[role] = token_id
        mask = names.get("mask_token")
        if mask is not None and library.token_to_id(mask) is None:
            raise HFTokenizerFormatError(f"{where!r}: its mask_token {mask!r} is not in its vocabulary")
        symbols = _symbols(vocab, rows)
        dictionary = Dictionary.from_symbols(
            symbols,
            bos=symbols[roles["bos"]],
            eos=symbols[roles["eos"]],
            pad=symbols[roles["pad"]],
            unk=symbols[roles["unk"]],
            source=where,
        )
        # The padding and truncation a tokenizer.json may carry are transformers' call options,
        # which it resets on every call; the hub's inputs cut and pad rows themselves.
        library.no_padding()
        library.no_truncation()
        return cls(library, dictionary, mask_token=mask or DEFAULT_MASK)

    @classmethod
    def over_dictionary(cls, path: str | os.PathLike[str], dictionary: Dictionary) -> HFTokenizer:
        """The tokenizer of a fairseq checkpoint: ``tokenizer.json`` at ``path``, whose ids are
        symbols of ``dictionary`` written in decimal (fairseq's way for every BPE that gives ids);
        an id ``dict.txt`` lacks is ``<unk>``, as in fairseq."""
        library = _read(Path(path))
        library.no_padding()
        library.no_truncation()
        size = max(library.get_vocab(with_added_tokens=True).values(), default=-1) + 1
        to_index = [dictionary.index(str(i)) for i in range(size)]
        return cls(library, dictionary, mask_token=DEFAULT_MASK, to_index=to_index)

    # ----------------------------------------------------------------------------- text
    def encode(self, text: str) -> list[int]:
        """Indices of ``text``, without ``<s>``/``</s>`` (``tokenizer(text, add_special_tokens=False)``);
        special tokens written in the text (``[MASK]``, ``[SEP]``) are those tokens, as in transformers."""
        check_unicode(text, reader=READER)
        ids = self.library.encode(text, add_special_tokens=False).ids
        if self._to_index is None:
            return ids
        to_index = self._to_index
        return [to_index[i] for i in ids]

    def encode_word(self, word: str, *, first: bool) -> list[int]:
        """Indices of one word of a whitespace-split sentence: after the first, a word is read
        as it stands in the sentence, after a space (byte-level BPE spells ``" word"`` and
        ``"word"`` differently)."""
        return self.encode(word if first else f" {word}")

    def decode(self, indices: Iterable[int]) -> str:
        """Text of ``indices`` (the library's decoder); the dictionary's ``bos``/``eos``/``pad`` are
        dropped, other special tokens (``[MASK]``) written out. Byte-level BPE gives the text back
        (NFC-normalised where the tokenizer normalises): transformers' ``clean_up_tokenization_spaces``,
        which deletes the space before ``.`` or ``,`` and so loses text, is not applied."""
        skip = {self.dictionary.bos(), self.dictionary.eos(), self.dictionary.pad()}
        ids = [i for i in map(self._id, indices) if i is not None and i not in skip]
        return self.library.decode(ids, skip_special_tokens=False)

    def token_text(self, index: int) -> str:
        """The text one token adds to a sentence: ``" capital"`` for a word start, ``"s"`` for
        a continuation (how ``fill_mask`` writes its predictions); ``""`` for a row of the model
        that no token has."""
        token_id = self._id(index)
        if token_id is None:
            return self.dictionary[index]
        text = self.library.decode([*self._anchor, token_id], skip_special_tokens=False)
        if text.startswith(self._anchor_text):
            return text[len(self._anchor_text) :]
        return self.library.decode([token_id], skip_special_tokens=False)

    def spans(self, text: str) -> list[tuple[int, int]]:
        """For each token of ``encode(text)``, the characters ``text[start:end]`` it came from
        (the library's offsets, transformers' ``offset_mapping``: a byte-level token holding part of
        a character covers that character, and ``" hi"`` covers its space)."""
        check_unicode(text, reader=READER)
        return [(start, end) for start, end in self.library.encode(text, add_special_tokens=False).offsets]

    def to_json(self) -> str:
        """The ``tokenizer.json`` (what transformers reads back with the same ids)."""
        return self.library.to_str()

    def _id(self, index: int) -> int | None:
        """The tokenizer's id of model index ``index``; None for a symbol no id has (fairseq's
        ``<s>``, ``<mask>``)."""
        if self._to_id is None:
            return index
        return self._to_id.get(index)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dictionary.source!r}, {len(self.dictionary)} indices)"


def _read(path: Path) -> tokenizers.Tokenizer:
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file {str(path)!r} does not exist")
    library = _library()
    try:
        return library.Tokenizer.from_file(str(path))
    except Exception as error:  # the library raises a bare Exception naming the JSON problem
        raise HFTokenizerFormatError(
            f"{str(path)!r} is not a tokenizer.json the tokenizers library reads ({error})"
        ) from None


def _template(library: tokenizers.Tokenizer, where: str, double_separator: bool) -> tuple[int, int]:
    """``(bos, eos)``: the ids the post-processor puts before and after one text, checked to
    join a pair as the model's family does. Read from what the template does to two probe texts,
    so every post-processor (``TemplateProcessing``, ``BertProcessing``, ``RobertaProcessing``,
    a ``Sequence`` of them) is read the same way."""
    first = library.encode("a", add_special_tokens=False).ids
    second = library.encode("b", add_special_tokens=False).ids
    single = library.encode("a", add_special_tokens=True).ids
    pair = library.encode("a", "b", add_special_tokens=True).ids
    separators = 2 if double_separator else 1
    if len(single) == len(first) + 2 and single[1:-1] == first:
        bos, eos = single[0], single[-1]
        if pair == [bos, *first, *[eos] * separators, *second, eos]:
            return bos, eos
    expected = "<s> a </s> </s> b </s>" if double_separator else "[CLS] a [SEP] b [SEP]"
    raise HFTokenizerFormatError(
        f"{where!r}: its post-processor gives {_tokens(library, single)} for a text 'a' and "
        f"{_tokens(library, pair)} for a pair 'a', 'b'; this model reads one token before and after a text "
        f"and a pair as {expected}"
    )


def _tokens(library: tokenizers.Tokenizer, ids: Sequence[int]) -> list[str | None]:
    return [library.id_to_token(i) for i in ids]


def _fallback(library: tokenizers.Tokenizer, role: str) -> str | None:
    """A padding or unknown token the ``tokenizer.json`` itself names, when the folder's configs
    do not: its ``padding`` settings, its model's ``unk_token``."""
    if role == "pad":
        padding = library.padding
        return None if padding is None else padding.get("pad_token")
    unk = getattr(library.model, "unk_token", None)
    return unk if isinstance(unk, str) else None


def _symbols(vocab: Mapping[str, int], rows: int) -> list[str]:
    """One distinct symbol per model row: each id's token, ``<id:N>`` for a row no token has
    (ModernBERT-base pads its 50,280 BPE ids and specials to 50,368 rows)."""
    names: dict[int, str] = {}
    for token, token_id in sorted(vocab.items(), key=lambda item: item[1]):
        names.setdefault(token_id, token)
    taken = set(names.values())
    symbols = []
    for row in range(rows):
        symbol = names.get(row)
        if symbol is None:
            symbol = f"<id:{row}>"
            while symbol in taken:  # a token spelled like a filler: the filler steps aside
                symbol = f"<{symbol}>"
            taken.add(symbol)
        symbols.append(symbol)
    return symbols
