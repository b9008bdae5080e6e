"""``roberta-ext tokenize``: sub-word tokens per line, the input ``fairseq-preprocess`` reads for
BERT, ALBERT and XLM-R.

``roberta-ext tokenize --tokenizer {wordpiece,sentencepiece,xlmr_sentencepiece} --model FILE
--inputs ... --outputs ...`` writes each input line as its WordPiece (``vocab.txt``),
ALBERT SentencePiece (``spiece.model``) or XLM-R SentencePiece (``sentencepiece.bpe.model``,
the pieces fairseq's ``--bpe sentencepiece`` and its ``spm_encode`` give) tokens separated by
single spaces — what ``fairseq-preprocess --only-source`` reads (GPT-2 BPE has ``roberta-ext
bpe-encode``, :mod:`roberta_ext.corpus.bpe`). With ``--dict-out``, the XLM-R tokenizer also
writes XLM-R's ``dict.txt``: every piece of the model in the model's order, with its count in
the outputs; ``fairseq-preprocess --srcdict`` that file gives a model XLM-R's indices (a piece's
SentencePiece id + 1), which transformers' ``XLMRobertaTokenizer`` shares.
Empty lines stay empty lines: they separate documents for ``--task roberta_ext_sentence_pair_mlm``. The
tokenizer's unknown token becomes fairseq's ``<unk>``; a line with text but no token (only
control characters, say) is written as ``<unk>`` and counted, so that it never turns into a
document break.

:class:`TokenWriter` (text -> tokens, for any of the three tokenizers) is also what
``roberta-ext prepare-tagging`` (:mod:`roberta_ext.corpus.tagging`) tokenizes words with.
Outputs are written under temporary names and moved into place only when everything succeeded;
errors name the file and line. Lines are read as ``bpe-encode`` reads them
(:mod:`roberta_ext.corpus.reading`).
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tqdm import tqdm

from ..atomic import AtomicFiles
from .pool import OrderedRunner
from .reading import Chunk, CorpusError, InputFile, UndecodableLine, decode_row, read_chunks, total_size

if TYPE_CHECKING:
    from ..tokenizers.pieces import SubwordTokenizer

__all__ = [
    "PIECE_TOKENIZERS",
    "TOKENIZERS",
    "UNK",
    "TokenizeStats",
    "TokenWriter",
    "join_tokens",
    "tokenize_files",
]

TOKENIZERS = ("gpt2", "wordpiece", "sentencepiece", "xlmr_sentencepiece")
PIECE_TOKENIZERS = ("wordpiece", "sentencepiece", "xlmr_sentencepiece")
UNK = "<unk>"
"""fairseq's unknown symbol: what the tokenizers' own unknown tokens are written as."""


class TokenWriter:
    """Text -> the tokens ``fairseq-preprocess`` reads, for one tokenizer.

    ``gpt2`` writes GPT-2 BPE ids (as RoBERTa's ``dict.txt`` lists them), ``wordpiece``,
    ``sentencepiece`` and ``xlmr_sentencepiece`` their pieces. ``cased`` keeps the case (BERT's
    ``do_lower_case=False``; XLM-R's SentencePiece never lowercases).
    """

    def __init__(
        self,
        kind: str,
        *,
        model: str | None = None,
        encoder_json: str | None = None,
        vocab_bpe: str | None = None,
        cased: bool = False,
    ) -> None:
        if kind not in TOKENIZERS:
            raise CorpusError(f"unknown tokenizer {kind!r}; choose one of {', '.join(TOKENIZERS)}")
        self.kind = kind
        self._args = (kind, model, encoder_json, vocab_bpe, cased)
        if kind == "gpt2":
            if not encoder_json or not vocab_bpe:
                raise CorpusError("the gpt2 tokenizer needs --gpt2-encoder-json and --gpt2-vocab-bpe")
            from ..tokenizers.gpt2_bpe import GPT2BPE

            self._bpe = GPT2BPE.from_files(encoder_json, vocab_bpe)
            return
        if not model:
            raise CorpusError(
                f"the {kind} tokenizer needs --model (vocab.txt for wordpiece, spiece.model for sentencepiece, "
                "sentencepiece.bpe.model for xlmr_sentencepiece)"
            )
        self._pieces: SubwordTokenizer
        self._known: Container[str] | None = None  # tokens the model has, where the tokenizer writes others
        try:
            if kind == "wordpiece":
                from ..tokenizers.wordpiece import WordPieceTokenizer

                self._pieces = WordPieceTokenizer.from_file(model, do_lower_case=not cased)
            elif kind == "xlmr_sentencepiece":
                from ..tokenizers.sentencepiece_tokenizer import XLMRSentencePiece

                # Characters SentencePiece cannot spell come out as themselves: <unk> for the model.
                self._pieces = self._known = XLMRSentencePiece.from_file(model)
            else:
                from ..tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer

                self._pieces = SentencePieceTokenizer.from_file(model, do_lower_case=not cased)
        except ValueError as error:  # the tokenizers' format errors name the file
            raise CorpusError(str(error)) from None
        self._unk = self._pieces.unk_token

    def tokens(self, text: str) -> list[str]:
        """The tokens of ``text``.

        >>> TokenWriter("wordpiece", model="vocab.txt").tokens("Unaffable!")  # doctest: +SKIP
        ['un', '##aff', '##able', '!']
        """
        if self.kind == "gpt2":
            return [str(i) for i in self._bpe.encode(text)]
        unk, known = self._unk, self._known
        if known is not None:
            return [piece if piece in known and piece != unk else UNK for piece in self._pieces.tokenize(text)]
        return [UNK if piece == unk else piece for piece in self._pieces.tokenize(text)]

    def xlmr_dictionary(self, counts: Mapping[str, int]) -> str:
        """XLM-R's ``dict.txt`` for the ``xlmr_sentencepiece`` tokenizer: the model's pieces in
        its order (from SentencePiece's id 3 on), each with its count in ``counts``.

        >>> writer = TokenWriter("xlmr_sentencepiece", model="sentencepiece.bpe.model")  # doctest: +SKIP
        >>> writer.xlmr_dictionary({",": 12}).splitlines()[:3]                          # doctest: +SKIP
        [', 12', '. 0', '▁ 0']
        """
        from ..tokenizers.sentencepiece_tokenizer import XLMR_SPECIALS, XLMRSentencePiece

        pieces = self._pieces
        if not isinstance(pieces, XLMRSentencePiece):
            raise CorpusError(f"XLM-R's dict.txt needs the xlmr_sentencepiece tokenizer, not {self.kind}")
        rows = (pieces.id_to_token(i) for i in range(len(XLMR_SPECIALS), pieces.vocab_size - 1))  # not <mask>
        return "".join(f"{piece} {counts.get(piece, 0)}\n" for piece in rows)

    def word_tokens(self, word: str, *, first: bool) -> list[str]:
        """The tokens of one word of a sentence, as the hub's ``tag()`` makes them: GPT-2 sees a
        word after the first with its leading space (as inside a sentence). May be empty (a word
        of control characters); the caller writes ``<unk>`` then, as ``tag()`` does."""
        return self.tokens(word if first or self.kind != "gpt2" else f" {word}")


def _make_writer(
    kind: str, model: str | None, encoder_json: str | None, vocab_bpe: str | None, cased: bool
) -> TokenWriter:
    return TokenWriter(kind, model=model, encoder_json=encoder_json, vocab_bpe=vocab_bpe, cased=cased)


def join_tokens(tokens: list[str], where: str) -> str:
    """Tokens joined by spaces; fail if a token holds whitespace (fairseq would split it).

    ``where`` (``"line 7"``, ``"train.conll:12"``) starts the error message.

    >>> join_tokens(["un", "##aff", "##able"], "line 1")
    'un ##aff ##able'
    """
    line = " ".join(tokens)
    if len(line.split()) != len(tokens):
        bad = next(token for token in tokens if len(token.split()) != 1)
        raise CorpusError(
            f"{where}: the tokenizer produced the token {bad!r}, which fairseq would split at its whitespace"
        )
    return line


# ------------------------------------------------------------------------------------ tokenize


@dataclass
class TokenizeStats:
    """What :func:`tokenize_files` did."""

    lines: int = 0
    """Lines read, over all inputs."""
    empty: int = 0
    """Lines that were empty after ``strip()`` (written as empty lines)."""
    tokens: int = 0
    """Tokens written."""
    unknown: int = 0
    """Tokens written as ``<unk>``."""
    no_tokens: int = 0
    """Lines with text but no token, written as ``<unk>``."""
    first_without_tokens: str | None = None
    """``file:line`` of the first such line."""
    counts: Counter[str] = field(default_factory=Counter)
    """How often each token was written."""


def _tokenize_chunk(writer: TokenWriter, chunk: Chunk) -> tuple[bytes, TokenizeStats]:
    stats = TokenizeStats()
    out: list[str] = []
    for offset, raw in enumerate(chunk.columns[0]):
        line_number = chunk.first_line + offset
        text = decode_row((raw,), line_number)[0]
        stats.lines += 1
        if not text:
            stats.empty += 1
            out.append("")
            continue
        tokens = writer.tokens(text)
        if not tokens:
            stats.no_tokens += 1
            if stats.first_without_tokens is None:
                stats.first_without_tokens = str(line_number)
            tokens = [UNK]
        stats.tokens += len(tokens)
        stats.unknown += tokens.count(UNK)
        stats.counts.update(tokens)
        out.append(join_tokens(tokens, f"line {line_number}"))
    return "".join(f"{line}\n" for line in out).encode("utf-8"), stats


def tokenize_files(
    writer: TokenWriter,
    inputs: Sequence[str | os.PathLike[str]],
    outputs: Sequence[str | os.PathLike[str]],
    *,
    workers: int = 1,
    progress: bool = False,
    dict_out: str | os.PathLike[str] | None = None,
) -> TokenizeStats:
    """Tokenize each input into its output, a line of space-separated tokens per input line.

    Lines are read as ``bpe-encode`` reads them (UTF-8, universal newlines, ``strip()``); empty
    lines stay empty. Outputs appear under their names only when every input was tokenized.
    ``dict_out`` (``xlmr_sentencepiece`` only) also writes XLM-R's ``dict.txt`` there, with the
    outputs' counts (:meth:`TokenWriter.xlmr_dictionary`).

    >>> writer = TokenWriter("sentencepiece", model="spiece.model")  # doctest: +SKIP
    >>> tokenize_files(writer, ["train.txt"], ["train.tok"]).lines  # doctest: +SKIP
    120000
    """
    if len(inputs) != len(outputs):
        raise CorpusError(
            f"number of input and output paths should match: {len(inputs)} inputs, {len(outputs)} outputs"
        )
    if not inputs:
        raise CorpusError("no inputs given")
    names = [str(path) for path in outputs]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise CorpusError(f"output path given more than once: {', '.join(duplicates)}")
    overlap = sorted({os.path.realpath(p) for p in inputs} & {os.path.realpath(p) for p in outputs})
    if overlap:
        raise CorpusError(f"an output would overwrite an input: {', '.join(overlap)}")
    if workers < 1:
        raise CorpusError(f"workers must be >= 1, got {workers}")
    if dict_out is not None and writer.kind != "xlmr_sentencepiece":
        raise CorpusError(
            f"--dict-out writes XLM-R's dict.txt: it needs --tokenizer xlmr_sentencepiece, not {writer.kind}"
        )
    total = TokenizeStats()
    sources = [InputFile(path) for path in inputs]  # fail now if one is missing
    try:
        with AtomicFiles() as atomic, OrderedRunner(workers, _make_writer, writer._args, local_state=writer) as runner:
            with tqdm(
                total=total_size(sources),
                desc="tokenize",
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                disable=not progress,
                file=sys.stderr,
                dynamic_ncols=True,
            ) as bar:
                for source, output in zip(sources, outputs):
                    with open(atomic.temporary(output), "wb") as handle:
                        try:
                            for chunk, (text, stats) in runner.map(_tokenize_chunk, read_chunks([source])):
                                handle.write(text)
                                bar.update(chunk.nbytes)
                                if stats.first_without_tokens and total.first_without_tokens is None:
                                    total.first_without_tokens = f"{source.name}:{stats.first_without_tokens}"
                                for name in ("lines", "empty", "tokens", "unknown", "no_tokens"):
                                    setattr(total, name, getattr(total, name) + getattr(stats, name))
                                total.counts.update(stats.counts)
                        except UndecodableLine as error:
                            raise error.corpus_error([source]) from None
                        except CorpusError as error:  # "line N: ..." from a chunk: name the file
                            raise CorpusError(f"{source.name}:{str(error).removeprefix('line ')}") from None
            if dict_out is not None:
                with open(atomic.temporary(dict_out), "w", encoding="utf-8") as handle:
                    handle.write(writer.xlmr_dictionary(total.counts))
            atomic.commit()
    finally:
        for source in sources:
            source.close()
    return total
