"""The one place where a tokenizer kind (a string) chooses an implementation.

Five kinds exist: ``gpt2`` (byte-level BPE, RoBERTa), ``wordpiece`` (BERT, ELECTRA, SpanBERT;
fairseq's name for it is ``bert``), ``sentencepiece`` (ALBERT's ``spiece.model``),
``xlmr_sentencepiece`` (XLM-R's ``sentencepiece.bpe.model``, fairseq's ``--bpe sentencepiece``)
and ``hf_tokenizer`` (a ``tokenizer.json`` read by the ``tokenizers`` library: ModernBERT's, and
any transformers folder whose tokenizer is that file — :func:`kind_for_transformers`).
Each :class:`TokenizerKind` knows how to build its tokenizer for a fairseq checkpoint (over
``dict.txt``), how to read a transformers directory's tokenizer files, how to write them, which
files announce it in a model folder, and where each token of a text came from (word alignment).
Loading code asks :func:`choose_kind` or :func:`get_kind` and never tests a kind's name itself.
``bpe="sentencepiece"`` (fairseq's name) is XLM-R's kind or ALBERT's, as the model files say.

>>> get_kind("bert").name, get_kind("sentencepiece").files, get_kind("xlmr_sentencepiece").files
('wordpiece', ('spiece.model',), ('sentencepiece.bpe.model',))
>>> get_kind("char")
Traceback (most recent call last):
...
ValueError: bpe='char' is not supported; choose one of ('gpt2', 'bert', 'wordpiece', 'sentencepiece', ...)
>>> kind_for_transformers(Path("ModernBERT-base"), {"tokenizer_class": "PreTrainedTokenizerFast"}, "hf_tokenizer").name
'hf_tokenizer'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .dictionary import Dictionary
from .gpt2_bpe import GPT2BPE, FairseqGPT2Tokenizer, bytes_to_unicode, read_encoder_json, read_vocab_bpe
from .hf_tokenizer import HFTokenizer, special_token_names
from .pieces import PieceTokenizer, char_spans

Tokenizer = FairseqGPT2Tokenizer | PieceTokenizer | HFTokenizer
"""What a hub holds: text <-> model indices (``encode``, ``decode``, ``encode_word``,
``token_text``, ``dictionary``)."""

GENERIC_TRANSFORMERS_CLASSES = frozenset({"PreTrainedTokenizerFast", "TokenizersBackend"})
"""transformers' tokenizer classes that are their ``tokenizer.json`` and nothing else (4.x's
name and 5's): a folder naming one is read by the ``tokenizers`` library, whatever its family."""

GPT2_IDS = frozenset(range(50257))
"""The ids of GPT-2's BPE: fairseq's ``gpt2_bpe/dict.txt`` lists every one (and three
``madeupword``s), so a ``dict.txt`` lacking some was built over another BPE."""


@dataclass(frozen=True, kw_only=True)
class TokenizerFiles:
    """Where the user said a fairseq checkpoint's tokenizer files are (``from_pretrained``'s
    arguments, fairseq's names); ``None`` means the model folder's usual file."""

    gpt2_encoder_json: str | None = None
    gpt2_vocab_bpe: str | None = None
    bpe_vocab_file: str | os.PathLike[str] | None = None
    bpe_cased: bool = False
    sentencepiece_model: str | os.PathLike[str] | None = None
    cache_dir: str | os.PathLike[str] | None = None
    offline: bool | None = None


class TokenizerKind(Protocol):
    """One kind of tokenizer, as the loaders and exporters need it."""

    name: str
    files: tuple[str, ...]
    """Files whose presence in a model folder says the folder uses this kind."""
    bpe_names: tuple[str, ...]
    """The ``bpe=`` values that mean this kind (fairseq's ``--bpe`` names, and its own)."""
    family: str | None
    """The family of a fairseq checkpoint that names none but comes with this kind's files
    (fairseq's XLM-R checkpoints are RoBERTa checkpoints with XLM-R's tokenizer); ``None``:
    the checkpoint's own."""

    def given(self, files: TokenizerFiles) -> bool:
        """Whether the user named this kind's files explicitly."""
        ...

    def for_fairseq(self, model_dir: Path, dictionary: Dictionary, files: TokenizerFiles) -> Tokenizer:
        """The tokenizer of a fairseq checkpoint: this kind's files over ``dict.txt``."""
        ...

    def from_transformers(
        self,
        directory: Path,
        tokenizer_config: Mapping[str, Any],
        fast: Mapping[str, Any],
        vocab_size: int,
        *,
        double_separator: bool = False,
    ) -> Tokenizer:
        """The tokenizer of a transformers directory, with its ids (``fast``: tokenizer.json's
        model). ``double_separator``: the family joins a pair as ``<s> a </s> </s> b </s>``; a
        kind whose files say how pairs are joined (a ``tokenizer.json``'s template) refuses files
        that join them otherwise."""
        ...

    def save_transformers(
        self, tokenizer: Tokenizer, directory: Path, config: dict[str, Any], *, mask_token: str
    ) -> None:
        """Write the tokenizer files of a transformers directory; add to ``tokenizer_config.json``'s ``config``."""
        ...

    def spans(self, tokenizer: Tokenizer, text: str) -> list[tuple[int, int]]:
        """For each token of ``tokenizer.encode(text)``, the characters ``text[start:end]`` it came from."""
        ...


def _specials(dictionary: Dictionary, mask_token: str) -> dict[str, str]:
    return {
        "bos_token": dictionary.bos_word,
        "eos_token": dictionary.eos_word,
        "pad_token": dictionary.pad_word,
        "unk_token": dictionary.unk_word,
        "mask_token": mask_token,
    }


def _cls_sep_specials(dictionary: Dictionary, mask_token: str) -> dict[str, str]:
    """The specials of a ``[CLS] a [SEP]`` tokenizer config (BERT's, ModernBERT's)."""
    return {
        "cls_token": dictionary.bos_word,
        "sep_token": dictionary.eos_word,
        "pad_token": dictionary.pad_word,
        "unk_token": dictionary.unk_word,
        "mask_token": mask_token,
    }


class GPT2Kind:
    """GPT-2 byte-level BPE: ``encoder.json`` + ``vocab.bpe`` (fairseq), ``vocab.json`` +
    ``merges.txt`` or a BPE ``tokenizer.json`` (transformers)."""

    name = "gpt2"
    files: tuple[str, ...] = ("encoder.json", "vocab.bpe")
    bpe_names: tuple[str, ...] = ("gpt2",)
    family: str | None = None

    def given(self, files: TokenizerFiles) -> bool:
        return files.gpt2_encoder_json is not None

    def for_fairseq(self, model_dir: Path, dictionary: Dictionary, files: TokenizerFiles) -> Tokenizer:

        encoder_json, vocab_bpe = files.gpt2_encoder_json, files.gpt2_vocab_bpe
        if (encoder_json is None) != (vocab_bpe is None):
            raise ValueError("pass both gpt2_encoder_json and gpt2_vocab_bpe, or neither")
        if encoder_json is not None and vocab_bpe is not None:
            paths = tuple(_local_or_download(f, files.cache_dir, files.offline) for f in (encoder_json, vocab_bpe))
        elif all((model_dir / name).is_file() for name in self.files):
            paths = (model_dir / "encoder.json", model_dir / "vocab.bpe")
        else:
            paths = self._default_files(model_dir, dictionary, files)
        return FairseqGPT2Tokenizer(GPT2BPE.from_files(*paths), dictionary)

    def _default_files(self, model_dir: Path, dictionary: Dictionary, files: TokenizerFiles) -> tuple[Path, Path]:
        """fairseq's default GPT-2 BPE (``--gpt2-encoder-json``'s default URL), from the cache or
        downloaded — for GPT-2's own dictionary only. A checkpoint trained on a BPE of the user's
        own names these URLs too (fairseq-train's defaults), and GPT-2's BPE over that ``dict.txt``
        gives wrong ids without a word of warning: refused here, naming what to pass."""
        from .. import download

        how = (
            "pass gpt2_encoder_json= and gpt2_vocab_bpe= (--gpt2-encoder-json and --gpt2-vocab-bpe on the "
            f"roberta-ext commands), or put encoder.json and vocab.bpe in {str(model_dir)!r}"
        )
        ids = {int(s) for s in dictionary.symbols if s.isdigit()}
        if not ids >= GPT2_IDS:
            raise FileNotFoundError(
                f"no GPT-2 BPE files for {dictionary.source!r}: none were given or found beside the model or its "
                f"data, and fairseq's default GPT-2 BPE does not fit this dictionary ({len(ids)} BPE ids, not "
                f"GPT-2's {len(GPT2_IDS)}: it comes from a BPE of your own, such as roberta-ext train-bpe's); {how}"
            )
        try:
            return download.resolve_gpt2_bpe_files(cache_dir=files.cache_dir, offline=files.offline)
        except download.DownloadError as err:
            raise FileNotFoundError(f"no GPT-2 BPE files: {err}; {how}") from None

    def from_transformers(
        self,
        directory: Path,
        tokenizer_config: Mapping[str, Any],
        fast: Mapping[str, Any],
        vocab_size: int,
        *,
        double_separator: bool = False,
    ) -> Tokenizer:
        if (directory / "vocab.json").is_file():
            vocab = read_encoder_json(directory / "vocab.json")
            merges = read_vocab_bpe(directory / "merges.txt")
        elif fast.get("type") == "BPE":
            vocab = dict(fast["vocab"])
            merges = []
            for merge in fast["merges"]:  # "a b" (older tokenizer.json files) or ["a", "b"]
                first, second = merge.split(" ", 1) if isinstance(merge, str) else merge
                merges.append((first, second))
        else:
            raise FileNotFoundError(f"{str(directory)!r} has neither vocab.json + merges.txt nor a BPE tokenizer.json")
        bpe = _transformers_bpe(vocab, merges, vocab_size)
        # Index i is vocab.json's id i; specials keep their names so the hub finds <s>, <mask>, ...
        names: dict[int, str] = {}
        for token, token_id in vocab.items():  # the first token of an id names it
            names.setdefault(token_id, token)
        names = {i: t for i, t in names.items() if t.startswith("<") and t.endswith(">")}
        symbols = [names.get(i, str(i)) for i in range(vocab_size)]
        dictionary = Dictionary.from_symbols(
            symbols, bos="<s>", pad="<pad>", eos="</s>", unk="<unk>", source=str(directory)
        )
        return FairseqGPT2Tokenizer(bpe, dictionary)

    def save_transformers(
        self, tokenizer: Tokenizer, directory: Path, config: dict[str, Any], *, mask_token: str
    ) -> None:
        assert isinstance(tokenizer, FairseqGPT2Tokenizer)
        bpe, dictionary = tokenizer.bpe, tokenizer.dictionary
        vocab: dict[str, int] = {}  # vocab.json in the model's index space
        for index, symbol in enumerate(dictionary.symbols):
            vocab.setdefault(bpe.decoder[int(symbol)] if symbol.isdigit() else symbol, index)
        # BPE tokens the dictionary lacks are <unk> for the model (fairseq's rule); listing them
        # with <unk>'s index keeps transformers' BPE complete and gives the same ids.
        for token in bpe.encoder:
            vocab.setdefault(token, dictionary.unk())
        (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        merges = "\n".join(" ".join(pair) for pair in bpe.merges)
        (directory / "merges.txt").write_text(f"#version: 0.2\n{merges}\n", encoding="utf-8")
        config.update(
            tokenizer_class="RobertaTokenizer",
            **_specials(dictionary, mask_token),
            sep_token=dictionary.eos_word,
            cls_token=dictionary.bos_word,
        )

    def spans(self, tokenizer: Tokenizer, text: str) -> list[tuple[int, int]]:
        # Byte-level BPE is lossless: the tokens' bytes are the text's UTF-8, in order. A token
        # holding part of a character (half of a curly quote) covers that whole character.
        assert isinstance(tokenizer, FairseqGPT2Tokenizer)
        decoder = tokenizer.bpe.decoder  # a token's string has one symbol per byte
        lengths = [len(decoder[token_id]) for token_id in tokenizer.bpe.encode(text)]
        return char_spans(text, lengths)


class WordPieceKind:
    """BERT's WordPiece over a ``vocab.txt`` (or a WordPiece ``tokenizer.json``)."""

    name = "wordpiece"
    files: tuple[str, ...] = ("vocab.txt",)
    bpe_names: tuple[str, ...] = ("bert", "wordpiece")
    family: str | None = None

    def given(self, files: TokenizerFiles) -> bool:
        return files.bpe_vocab_file is not None

    def for_fairseq(self, model_dir: Path, dictionary: Dictionary, files: TokenizerFiles) -> Tokenizer:
        from .wordpiece import WordPieceTokenizer

        vocab = Path(files.bpe_vocab_file) if files.bpe_vocab_file is not None else model_dir / "vocab.txt"
        return PieceTokenizer(
            WordPieceTokenizer.from_file(vocab, do_lower_case=not files.bpe_cased), dictionary, "wordpiece"
        )

    def from_transformers(
        self,
        directory: Path,
        tokenizer_config: Mapping[str, Any],
        fast: Mapping[str, Any],
        vocab_size: int,
        *,
        double_separator: bool = False,
    ) -> Tokenizer:
        from .wordpiece import WordPieceTokenizer, read_vocab

        options = {
            "do_lower_case": tokenizer_config.get("do_lower_case", True),
            "strip_accents": tokenizer_config.get("strip_accents"),
            "tokenize_chinese_chars": tokenizer_config.get("tokenize_chinese_chars", True),
        }
        if (directory / "vocab.txt").is_file():
            tokens = read_vocab(directory / "vocab.txt")
        elif fast.get("type") == "WordPiece":
            tokens = [t for t, _ in sorted(fast["vocab"].items(), key=lambda item: item[1])]
        else:
            raise FileNotFoundError(f"{str(directory)!r} has neither vocab.txt nor a WordPiece tokenizer.json")
        names: dict[str, Any] = {}
        for k in ("unk_token", "cls_token", "sep_token", "pad_token", "mask_token"):
            name = tokenizer_config.get(k)
            if isinstance(name, Mapping):  # an AddedToken, as transformers 4 wrote it: {"content": ..., ...}
                name = name.get("content")
            if isinstance(name, str):
                names[k] = name
        return PieceTokenizer.for_vocabulary(
            WordPieceTokenizer(tokens, **options, **names, source=str(directory)), "wordpiece"
        )

    def save_transformers(
        self, tokenizer: Tokenizer, directory: Path, config: dict[str, Any], *, mask_token: str
    ) -> None:
        assert isinstance(tokenizer, PieceTokenizer)
        dictionary = tokenizer.dictionary
        (directory / "vocab.txt").write_text("".join(f"{s}\n" for s in dictionary.symbols), encoding="utf-8")
        config.update(
            tokenizer_class="BertTokenizer",
            do_lower_case=tokenizer.pieces.do_lower_case,
            **_cls_sep_specials(dictionary, mask_token),
        )

    def spans(self, tokenizer: Tokenizer, text: str) -> list[tuple[int, int]]:
        assert isinstance(tokenizer, PieceTokenizer)
        return tokenizer.spans(text)


class SentencePieceKind:
    """ALBERT's SentencePiece model (``spiece.model``)."""

    name = "sentencepiece"
    files: tuple[str, ...] = ("spiece.model",)
    bpe_names: tuple[str, ...] = ("sentencepiece",)
    family: str | None = None

    def given(self, files: TokenizerFiles) -> bool:
        return files.sentencepiece_model is not None and not _is_xlmr_model(files.sentencepiece_model)

    def for_fairseq(self, model_dir: Path, dictionary: Dictionary, files: TokenizerFiles) -> Tokenizer:
        from .sentencepiece_tokenizer import SentencePieceTokenizer

        spm = Path(files.sentencepiece_model) if files.sentencepiece_model is not None else model_dir / "spiece.model"
        return PieceTokenizer(
            SentencePieceTokenizer.from_file(spm, do_lower_case=not files.bpe_cased), dictionary, "sentencepiece"
        )

    def from_transformers(
        self,
        directory: Path,
        tokenizer_config: Mapping[str, Any],
        fast: Mapping[str, Any],
        vocab_size: int,
        *,
        double_separator: bool = False,
    ) -> Tokenizer:
        from .sentencepiece_tokenizer import SentencePieceTokenizer

        if not (directory / "spiece.model").is_file():
            raise FileNotFoundError(f"{str(directory)!r} has no spiece.model (ALBERT's SentencePiece model)")
        pieces = SentencePieceTokenizer.from_file(
            directory / "spiece.model",
            do_lower_case=tokenizer_config.get("do_lower_case", True),
            keep_accents=tokenizer_config.get("keep_accents", False),
        )
        return PieceTokenizer.for_vocabulary(pieces, "sentencepiece")

    def save_transformers(
        self, tokenizer: Tokenizer, directory: Path, config: dict[str, Any], *, mask_token: str
    ) -> None:
        from .sentencepiece_tokenizer import SentencePieceTokenizer

        assert isinstance(tokenizer, PieceTokenizer)
        if not tokenizer.is_identity:
            raise ValueError("only SentencePiece models whose ids are the model's indices can be exported")
        pieces = tokenizer.pieces
        assert isinstance(pieces, SentencePieceTokenizer)
        (directory / "spiece.model").write_bytes(pieces.model_proto)
        config.update(
            tokenizer_class="AlbertTokenizer", do_lower_case=pieces.do_lower_case, keep_accents=pieces.keep_accents
        )

    def spans(self, tokenizer: Tokenizer, text: str) -> list[tuple[int, int]]:
        assert isinstance(tokenizer, PieceTokenizer)
        return tokenizer.spans(text)


class XLMRSentencePieceKind:
    """XLM-R's SentencePiece model (``sentencepiece.bpe.model``), read as fairseq's ``--bpe
    sentencepiece`` reads it: pieces through ``dict.txt`` (fairseq), or XLM-R's id layout
    (transformers' ``XLMRobertaTokenizer``: ``<s> <pad> </s> <unk>``, the pieces, ``<mask>``)."""

    name = "xlmr_sentencepiece"
    files: tuple[str, ...] = ("sentencepiece.bpe.model",)
    bpe_names: tuple[str, ...] = ("sentencepiece", "xlmr_sentencepiece")
    family: str | None = "xlmr"

    def given(self, files: TokenizerFiles) -> bool:
        return files.sentencepiece_model is not None and _is_xlmr_model(files.sentencepiece_model)

    def for_fairseq(self, model_dir: Path, dictionary: Dictionary, files: TokenizerFiles) -> Tokenizer:
        from .sentencepiece_tokenizer import XLMRSentencePiece

        spm = Path(files.sentencepiece_model) if files.sentencepiece_model is not None else model_dir / self.files[0]
        return PieceTokenizer(XLMRSentencePiece.from_file(spm), dictionary, "sentencepiece")

    def from_transformers(
        self,
        directory: Path,
        tokenizer_config: Mapping[str, Any],
        fast: Mapping[str, Any],
        vocab_size: int,
        *,
        double_separator: bool = False,
    ) -> Tokenizer:
        from .sentencepiece_tokenizer import XLMRSentencePiece

        if not (directory / self.files[0]).is_file():
            raise FileNotFoundError(f"{str(directory)!r} has no {self.files[0]} (XLM-R's SentencePiece model)")
        pieces = XLMRSentencePiece.from_file(directory / self.files[0], split_specials=True)
        return PieceTokenizer.for_vocabulary(pieces, "sentencepiece")

    def save_transformers(
        self, tokenizer: Tokenizer, directory: Path, config: dict[str, Any], *, mask_token: str
    ) -> None:
        from .sentencepiece_tokenizer import XLMRSentencePiece

        assert isinstance(tokenizer, PieceTokenizer) and isinstance(tokenizer.pieces, XLMRSentencePiece)
        if not tokenizer.is_identity:
            raise ValueError(
                "transformers' XLMRobertaTokenizer numbers the pieces as XLM-R's dict.txt does (the model's "
                "pieces in order); this model's dict.txt orders them otherwise. Train on data preprocessed with "
                "the dict.txt that 'roberta-ext tokenize --tokenizer xlmr_sentencepiece --dict-out' writes"
            )
        (directory / self.files[0]).write_bytes(tokenizer.pieces.model_proto)
        config.update(
            tokenizer_class="XLMRobertaTokenizer",
            **_specials(tokenizer.dictionary, mask_token),
            sep_token="</s>",
            cls_token="<s>",
        )

    def spans(self, tokenizer: Tokenizer, text: str) -> list[tuple[int, int]]:
        assert isinstance(tokenizer, PieceTokenizer)
        return tokenizer.spans(text)


class HFTokenizerKind:
    """A ``tokenizer.json`` read by the ``tokenizers`` library (:mod:`.hf_tokenizer`): ModernBERT's
    byte-level BPE, mmBERT's Gemma vocabulary, any folder whose tokenizer is that file. The
    library is the reference implementation: nothing here approximates it."""

    name = "hf_tokenizer"
    files: tuple[str, ...] = ("tokenizer.json",)
    bpe_names: tuple[str, ...] = ("hf_tokenizer",)
    family: str | None = None

    def given(self, files: TokenizerFiles) -> bool:
        return False  # no from_pretrained argument names a tokenizer.json: the model folder holds it

    def for_fairseq(self, model_dir: Path, dictionary: Dictionary, files: TokenizerFiles) -> Tokenizer:
        path = model_dir / self.files[0]
        if not path.is_file():
            raise FileNotFoundError(
                f"{str(model_dir)!r} has no tokenizer.json, which the hf_tokenizer tokenizer reads (its ids are "
                "the symbols of dict.txt); put it in the model folder"
            )
        return HFTokenizer.over_dictionary(path, dictionary)

    def from_transformers(
        self,
        directory: Path,
        tokenizer_config: Mapping[str, Any],
        fast: Mapping[str, Any],
        vocab_size: int,
        *,
        double_separator: bool = False,
    ) -> Tokenizer:
        if not (directory / self.files[0]).is_file():
            raise FileNotFoundError(f"{str(directory)!r} has no tokenizer.json (the tokenizers library's file)")
        return HFTokenizer.from_file(
            directory / self.files[0],
            rows=vocab_size,
            names=special_token_names(directory, tokenizer_config),
            double_separator=double_separator,
        )

    def save_transformers(
        self, tokenizer: Tokenizer, directory: Path, config: dict[str, Any], *, mask_token: str
    ) -> None:
        assert isinstance(tokenizer, HFTokenizer)
        if not tokenizer.is_identity:
            raise ValueError(
                "this model's indices are dict.txt's, not its tokenizer.json's ids: transformers would read other "
                "ids from the tokenizer.json"
            )
        (directory / self.files[0]).write_text(tokenizer.to_json(), encoding="utf-8")
        dictionary = tokenizer.dictionary
        config.update(
            tokenizer_class="PreTrainedTokenizerFast",
            **_cls_sep_specials(dictionary, mask_token),
        )

    def spans(self, tokenizer: Tokenizer, text: str) -> list[tuple[int, int]]:
        assert isinstance(tokenizer, HFTokenizer)
        return tokenizer.spans(text)


KINDS: dict[str, TokenizerKind] = {
    kind.name: kind
    for kind in (GPT2Kind(), WordPieceKind(), SentencePieceKind(), XLMRSentencePieceKind(), HFTokenizerKind())
}
ALIASES = {"bert": "wordpiece"}  # fairseq's --bpe name for WordPiece
BPE_CHOICES = ("gpt2", "bert", "wordpiece", "sentencepiece", "xlmr_sentencepiece", "hf_tokenizer")
"""The ``bpe=`` values ``from_pretrained`` accepts (fairseq's names, and ours)."""


def get_kind(name: str) -> TokenizerKind:
    """The kind called ``name`` (or fairseq's alias for it); ``sentencepiece`` is ALBERT's here
    (:func:`choose_kind` lets the files decide between ALBERT's and XLM-R's)."""
    if name not in BPE_CHOICES:
        raise ValueError(f"bpe={name!r} is not supported; choose one of {BPE_CHOICES}")
    return KINDS[ALIASES.get(name, name)]


def choose_kind(bpe: str | None, model_dir: Path, files: TokenizerFiles, default: str) -> TokenizerKind:
    """The kind of a fairseq checkpoint's folder: among the kinds ``bpe`` names (all when
    ``None``), the one whose files the user gave, else the one whose files the folder holds,
    else the kind ``bpe`` names first (``default``, the family's usual one, when ``bpe`` is None).

    ``bpe="sentencepiece"`` is fairseq's name for XLM-R's tokenizer; here it also means ALBERT's:
    a ``sentencepiece.bpe.model`` (or a ``sentencepiece_model`` with SentencePiece's default
    ids ``<unk>, <s>, </s>``) is XLM-R's, a ``spiece.model`` ALBERT's.

    >>> choose_kind("sentencepiece", Path("xlmr.base"), TokenizerFiles(), "gpt2").name   # doctest: +SKIP
    'xlmr_sentencepiece'
    """
    if bpe is None:
        return kind_for_folder(model_dir, files, default)
    get_kind(bpe)  # a ValueError naming the choices
    candidates = kinds_named(bpe)
    for kind in candidates:
        if kind.given(files):
            return kind
    for kind in candidates:
        if in_folder(kind, model_dir):
            return kind
    return get_kind(bpe)


def kinds_named(bpe: str) -> list[TokenizerKind]:
    """The kinds ``bpe=`` may mean: those with fairseq's ``--bpe`` name ``bpe``, or that name.

    >>> [kind.name for kind in kinds_named("sentencepiece")]
    ['sentencepiece', 'xlmr_sentencepiece']
    """
    return [kind for kind in KINDS.values() if bpe in kind.bpe_names or bpe == kind.name]


def in_folder(kind: TokenizerKind, model_dir: Path) -> bool:
    """Whether ``model_dir`` holds every file that says a folder uses ``kind``."""
    return all((model_dir / name).is_file() for name in kind.files)


def kind_of(tokenizer: Tokenizer) -> TokenizerKind:
    """The kind of a tokenizer a hub holds."""
    if isinstance(tokenizer, FairseqGPT2Tokenizer):
        return KINDS["gpt2"]
    if isinstance(tokenizer, HFTokenizer):
        return KINDS["hf_tokenizer"]
    return KINDS[getattr(tokenizer.pieces, "kind", tokenizer.kind)]


def kind_for_folder(model_dir: Path, files: TokenizerFiles, default: str) -> TokenizerKind:
    """The kind the user's arguments name, else the one whose files the folder holds (GPT-2
    BPE, then ``vocab.txt``, then ``spiece.model``, then ``sentencepiece.bpe.model``, then
    ``tokenizer.json``), else ``default`` (the family's usual one)."""
    for kind in KINDS.values():
        if kind.given(files):
            return kind
    for kind in KINDS.values():
        if in_folder(kind, model_dir):
            return kind
    return get_kind(default)


def kind_for_transformers(directory: Path, tokenizer_config: Mapping[str, Any], default: str) -> TokenizerKind:
    """The kind that reads a transformers folder's tokenizer as transformers' ``AutoTokenizer``
    does. ``default`` is the family's kind; transformers' class for the family reads that
    kind's own files (``vocab.json`` + ``merges.txt``, ``vocab.txt``, ``spiece.model``, ...),
    and so do we. The ``tokenizers`` library reads the folder's ``tokenizer.json`` instead when
    that file *is* the tokenizer: when the family's kind is that (ModernBERT: transformers
    always reads its ``tokenizer.json`` alone), or when ``tokenizer_config.json`` names
    transformers' generic class (:data:`GENERIC_TRANSFORMERS_CLASSES`), whose normalizer, added
    tokens and template may be anything: approximating them with our own tokenizers would give
    other ids without a word of warning.

    >>> kind_for_transformers(Path("roberta-base"), {"tokenizer_class": "RobertaTokenizer"}, "gpt2").name
    'gpt2'
    """
    kind = get_kind(default)
    generic = tokenizer_config.get("tokenizer_class") in GENERIC_TRANSFORMERS_CLASSES
    if generic and (directory / "tokenizer.json").is_file():
        return KINDS["hf_tokenizer"]
    return kind


def write_transformers_tokenizer(tokenizer: Tokenizer, directory: Path, *, max_positions: int, mask_token: str) -> None:
    """Write ``tokenizer``'s files for transformers into ``directory``: its kind's vocabulary
    files and ``tokenizer_config.json`` (``model_max_length``, the specials, the class)."""
    config: dict[str, Any] = {"model_max_length": max_positions}
    kind_of(tokenizer).save_transformers(tokenizer, directory, config, mask_token=mask_token)
    (directory / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def _transformers_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], vocab_size: int) -> GPT2BPE:
    """GPT-2 BPE over transformers' ``vocab.json`` (token -> model index) and merges.

    A vocabulary exported from a fairseq model lacks the BPE tokens its ``dict.txt`` lacked;
    transformers' tokenizer turns those into ``<unk>``, and so do we: they enter the encoder
    with ids past the model's vocabulary (``vocab_size`` rows, which may be more than
    ``vocab.json`` lists), which the dictionary does not know and maps to ``<unk>`` (fairseq's
    behaviour for symbols missing from ``dict.txt``).
    """
    encoder: dict[str, int] = {}
    owned: set[int] = set()
    for token, token_id in vocab.items():  # later tokens sharing an id (exported <unk> fillers) are dropped
        if token_id not in owned:
            encoder[token] = token_id
            owned.add(token_id)
    next_id = max(max(encoder.values(), default=-1) + 1, vocab_size)
    for token in [*bytes_to_unicode().values(), *(t for a, b in merges for t in (a, b, a + b))]:
        if token not in encoder:
            encoder[token] = next_id
            next_id += 1
    return GPT2BPE(encoder, merges)


def _is_xlmr_model(path: str | os.PathLike[str]) -> bool:
    """Whether the SentencePiece model at ``path`` has spm_train's default ids (``<unk>``, ``<s>``,
    ``</s>`` = 0, 1, 2: XLM-R's) rather than ALBERT's (``<pad>``, ``<unk>``, ``[CLS]``); False for a
    file that is not there or not a SentencePiece model (the ALBERT kind then says what is wrong)."""
    import sentencepiece

    from .sentencepiece_tokenizer import SPM_DEFAULT_SPECIALS

    try:
        sp = sentencepiece.SentencePieceProcessor(model_file=os.fspath(path))
    except (OSError, RuntimeError):
        return False
    return tuple(sp.id_to_piece(i) for i in range(min(3, sp.get_piece_size()))) == SPM_DEFAULT_SPECIALS


def _local_or_download(path_or_url: str | os.PathLike[str], cache_dir: Any, offline: bool | None) -> Path:
    """A local file as it is; an http(s) URL fetched once into the cache (as fairseq's cached_path)."""
    from .. import download

    text = os.fspath(path_or_url)
    if text.startswith(("http://", "https://")):
        return download.resolve_file(text, cache_dir=cache_dir, offline=offline)
    if not os.path.isfile(text):
        raise FileNotFoundError(f"BPE file {text!r} does not exist")
    return Path(text)


__all__ = [
    "BPE_CHOICES",
    "GENERIC_TRANSFORMERS_CLASSES",
    "KINDS",
    "TokenizerFiles",
    "TokenizerKind",
    "choose_kind",
    "get_kind",
    "in_folder",
    "kind_for_folder",
    "kind_for_transformers",
    "kind_of",
    "kinds_named",
    "write_transformers_tokenizer",
]
