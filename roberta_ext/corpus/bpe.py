"""GPT-2 BPE for fairseq: ``roberta-ext bpe-encode`` (encode text as fairseq does) and
``roberta-ext train-bpe`` (learn a GPT-2 BPE + ``dict.txt``).

Each command (:mod:`roberta_ext.cli.corpus`) is a thin argument parser over a library function here:

* :func:`bpe_encode_files` is fairseq's ``examples/roberta/multiprocessing_bpe_encoder.py`` — same
  options, byte-identical outputs and the same stderr statistics — with what a long run needs:
  bounded memory (chunks of lines go to a process pool through a bounded in-flight window, and
  come back in order), a progress bar, errors that name the file and line, and outputs that
  appear under their real names only once the whole run succeeded.
* :func:`train_bpe_files` learns ``encoder.json`` + ``vocab.bpe`` (GPT-2's formats) and the
  ``dict.txt`` that ``fairseq-preprocess --only-source`` would build from the BPE-encoded text,
  for users who do not have OpenAI's files.

Lines are read as fairseq reads them (see :mod:`roberta_ext.corpus.reading`: universal newlines
for files, ``"\\n"`` only for standard input, each line ``str.strip()``-ed). Then, as in fairseq's
script: lines of parallel inputs are zipped into rows; a row in which any line is empty is dropped
from *all* outputs (counted as ``[num_filtered_EMPTY]``) unless ``keep_empty``, in which case the
empty line becomes an empty output line; an output line is the GPT-2 ids of the stripped line,
joined by single spaces.

Where fairseq's script fails late or silently, we fail early and loudly, writing nothing:
invalid UTF-8 (fairseq: a traceback, or lone surrogates from stdin), parallel inputs with
different numbers of lines (fairseq: silently truncates to the shortest), a number of inputs
different from the number of outputs, the same output path given twice.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

from tqdm import tqdm

from ..atomic import AtomicFiles
from ..tokenizers.bpe_trainer import count_words, train_bpe, write_bpe_files
from ..tokenizers.dictionary import Dictionary
from ..tokenizers.gpt2_bpe import GPT2BPE
from .pool import OrderedRunner
from .reading import STDIO, Chunk, CorpusError, InputFile, UndecodableLine, decode_row, read_chunks, total_size

__all__ = [
    "OUTPUT_NAMES",
    "EncodeStats",
    "TrainedBPE",
    "bpe_encode_files",
    "encode_chunk",
    "build_fairseq_dictionary",
    "train_bpe_files",
]

_LOG_EVERY_ROWS = 10_000  # fairseq's script prints "processed N lines" this often


# ----------------------------------------------------------------------------------- bpe-encode


@dataclass
class EncodeStats:
    """What :func:`bpe_encode_files` did."""

    rows: int = 0
    """Rows read (a row is one line of each input)."""
    written: int = 0
    """Rows written to every output."""
    filtered_empty: int = 0
    """Rows dropped because a line was empty after ``strip()`` (never with ``keep_empty``)."""
    bytes_read: int = 0
    """Bytes read from all inputs."""


def encode_chunk(bpe: GPT2BPE, chunk: Chunk, *, keep_empty: bool) -> tuple[list[bytes], int]:
    """One chunk as fairseq's ``MultiprocessingEncoder.encode_lines`` would, row by row: the
    unit of work ``bpe-encode``'s and ``glue-preprocess``'s worker processes share.

    Returns each output's text (ASCII: digits, spaces, newlines) and the number of dropped rows
    (a row with an empty text, unless ``keep_empty``).

    >>> chunk = Chunk(first_line=1, columns=[[b"Hello"], [b""]])  # doctest: +SKIP
    >>> encode_chunk(bpe, chunk, keep_empty=False)  # doctest: +SKIP
    ([b'', b''], 1)
    """
    encoded: list[list[str]] = [[] for _ in chunk.columns]
    filtered = 0
    for offset, row in enumerate(zip(*chunk.columns)):
        texts = decode_row(row, chunk.first_line + offset)
        if not keep_empty and not all(texts):
            filtered += 1
            continue
        for lines, text in zip(encoded, texts):
            lines.append(" ".join(map(str, bpe.encode(text))))
    return [("\n".join(lines) + "\n").encode("ascii") if lines else b"" for lines in encoded], filtered


def _stdout_writer() -> Callable[[bytes], object]:
    sys.stdout.flush()
    buffer = getattr(sys.stdout, "buffer", None)
    if buffer is not None:
        return buffer.write
    return lambda data: sys.stdout.write(data.decode("ascii"))


def bpe_encode_files(
    encoder_json: str | os.PathLike[str],
    vocab_bpe: str | os.PathLike[str],
    inputs: Sequence[str | os.PathLike[str]],
    outputs: Sequence[str | os.PathLike[str]],
    *,
    keep_empty: bool = False,
    workers: int = 1,
    progress: bool = False,
    log: IO[str] | None = None,
    chunk_rows: int | None = None,
) -> EncodeStats:
    """GPT-2 BPE-encode parallel text ``inputs`` into ``outputs``, as fairseq's encoder script.

    ``"-"`` is standard input / output. Outputs are written to temporary files and renamed into
    place only when every input was read and encoded; on any error nothing is written (an output
    to stdout is streamed, so it can end early). ``progress`` shows a tqdm bar (bytes) on stderr;
    ``log`` receives fairseq's messages (``processed N lines`` every 10000 rows when there is no
    bar, then ``[num_filtered_EMPTY] filtered N lines``). ``workers`` > 1 encodes in that many
    processes; ``chunk_rows`` (rows sent to a worker at a time) only tunes speed.

    >>> bpe_encode_files("encoder.json", "vocab.bpe", ["train.txt"], ["train.bpe"], workers=4)  # doctest: +SKIP
    EncodeStats(rows=1000, written=998, filtered_empty=2, bytes_read=65536)
    """
    if len(inputs) != len(outputs):
        raise CorpusError(
            f"number of input and output paths should match: {len(inputs)} inputs, {len(outputs)} outputs"
        )
    if not inputs:
        raise CorpusError("no inputs given")
    if [str(path) for path in inputs].count(STDIO) > 1:
        raise CorpusError("standard input ('-') can be given as only one of the inputs")
    files = [str(path) for path in outputs if str(path) != STDIO]
    duplicates = sorted({path for path in files if files.count(path) > 1})
    if duplicates:
        raise CorpusError(f"output path given more than once: {', '.join(duplicates)}")
    if workers < 1:
        raise CorpusError(f"workers must be >= 1, got {workers}")

    # Load once here, so that a bad vocabulary fails before any work with an error naming the
    # file (in a worker's initializer it would only break the pool).
    bpe = GPT2BPE.from_files(encoder_json, vocab_bpe)
    stats = EncodeStats()
    with AtomicFiles() as atomic:
        with contextlib.ExitStack() as stack:
            sources: list[InputFile] = []
            for path in inputs:
                sources.append(InputFile(path))
                stack.callback(sources[-1].close)
            writers: list[Callable[[bytes], object]] = []
            for path in outputs:
                if str(path) == STDIO:
                    writers.append(_stdout_writer())
                    stack.callback(sys.stdout.flush)
                else:
                    handle = stack.enter_context(open(atomic.temporary(path), "wb"))
                    writers.append(handle.write)
            runner = stack.enter_context(
                OrderedRunner(workers, GPT2BPE.from_files, (str(encoder_json), str(vocab_bpe)), local_state=bpe)
            )
            bar = stack.enter_context(
                tqdm(
                    total=total_size(sources),
                    desc="bpe-encode",
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1024,
                    disable=not progress,
                    file=sys.stderr,
                    dynamic_ncols=True,
                )
            )
            job = partial(encode_chunk, keep_empty=keep_empty)
            try:
                for chunk, (texts, filtered) in runner.map(job, read_chunks(sources, chunk_rows=chunk_rows)):
                    for write, text in zip(writers, texts):
                        write(text)
                    rows_before = stats.rows
                    stats.rows += len(chunk.columns[0])
                    stats.filtered_empty += filtered
                    stats.written += len(chunk.columns[0]) - filtered
                    stats.bytes_read += chunk.nbytes
                    bar.update(chunk.nbytes)
                    if log is not None and not progress:
                        for done in range(rows_before // _LOG_EVERY_ROWS + 1, stats.rows // _LOG_EVERY_ROWS + 1):
                            print(f"processed {done * _LOG_EVERY_ROWS} lines", file=log)
            except UndecodableLine as error:
                raise error.corpus_error(sources) from None
        # The temporary files are closed (flushed) here, so they can take their real names.
        atomic.commit()
    if log is not None and stats.filtered_empty:
        print(f"[num_filtered_EMPTY] filtered {stats.filtered_empty} lines", file=log)
    return stats


# ------------------------------------------------------------------------------------ train-bpe


def _count_words_chunk(_state: None, chunk: Chunk) -> Counter[str]:
    """Byte-level words of the chunk's non-empty stripped lines (what bpe-encode will see)."""
    texts = (decode_row((raw,), chunk.first_line + offset)[0] for offset, raw in enumerate(chunk.columns[0]))
    return count_words(text for text in texts if text)


def _count_ids_chunk(bpe: GPT2BPE, chunk: Chunk) -> Counter[int]:
    """GPT-2 ids of the chunk's non-empty stripped lines, counted (as fairseq-preprocess counts them)."""
    counts: Counter[int] = Counter()
    for offset, raw in enumerate(chunk.columns[0]):
        text = decode_row((raw,), chunk.first_line + offset)[0]
        if text:
            counts.update(bpe.encode(text))
    return counts


def _sum_over_files(
    paths: Sequence[str | os.PathLike[str]],
    job: Callable[[Any, Chunk], Counter],
    runner: OrderedRunner,
    *,
    progress: bool,
    desc: str,
) -> Counter:
    """Sum ``job``'s counters over every chunk of every file (each file read on its own)."""
    total: Counter = Counter()
    sources = [InputFile(path) for path in paths]
    try:
        with tqdm(
            total=total_size(sources),
            desc=desc,
            unit="B",
            unit_scale=True,
            unit_divisor=1024,
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
        ) as bar:
            for source in sources:
                try:
                    for chunk, counts in runner.map(job, read_chunks([source])):
                        total.update(counts)
                        bar.update(chunk.nbytes)
                except UndecodableLine as error:
                    raise error.corpus_error([source]) from None
    finally:
        for source in sources:
            source.close()
    return total


def build_fairseq_dictionary(id_counts: Mapping[int, int], *, padding_factor: int = 8) -> Dictionary:
    """The dictionary ``fairseq-preprocess`` builds from text whose tokens are GPT-2 ids.

    Same as fairseq's ``Dictionary.finalize``: symbols (the ids as strings) by count, highest
    first, ties by symbol *string* ("10" before "9"); then ``madeupwordNNNN`` rows with count 0
    until the size, the 4 special symbols included, is a multiple of ``padding_factor``.

    >>> d = build_fairseq_dictionary({9: 3, 10: 3, 7: 5})
    >>> d.symbols[4:], len(d)
    (['7', '10', '9', 'madeupword0000'], 8)
    """
    dictionary = Dictionary()
    # Sorting by (-count, symbol) equals fairseq's Counter(dict(sorted(...))).most_common().
    for symbol, count in sorted(((str(i), n) for i, n in id_counts.items()), key=lambda kv: (-kv[1], kv[0])):
        dictionary.add_symbol(symbol, n=count)
    padding = 0
    while padding_factor > 1 and len(dictionary) % padding_factor:
        dictionary.add_symbol(f"madeupword{padding:04d}", n=0)
        padding += 1
    return dictionary


@dataclass
class TrainedBPE:
    """What :func:`train_bpe_files` wrote."""

    encoder_json: Path
    vocab_bpe: Path
    dict_txt: Path
    num_merges: int
    """Merges learned (fewer than asked when no pair is frequent enough)."""
    vocab_size: int
    """Entries of ``encoder.json``: 256 bytes, one per new merged token, ``<|endoftext|>``."""
    dict_size: int
    """Rows of ``dict.txt``, padding rows included."""


OUTPUT_NAMES = ("encoder.json", "vocab.bpe", "dict.txt")


def train_bpe_files(
    inputs: Sequence[str | os.PathLike[str]],
    output_dir: str | os.PathLike[str],
    *,
    num_merges: int = 30_000,
    min_frequency: int = 2,
    dict_from: Sequence[str | os.PathLike[str]] | None = None,
    padding_factor: int = 8,
    workers: int = 1,
    force: bool = False,
    progress: bool = False,
) -> TrainedBPE:
    """Learn a GPT-2 BPE from ``inputs`` and write ``encoder.json``, ``vocab.bpe``, ``dict.txt``.

    Text is read line by line and stripped, as ``bpe-encode`` reads it. ``dict.txt`` counts the
    GPT-2 ids of ``dict_from`` (default: ``inputs``; e.g. only the training split) and equals the
    dictionary ``fairseq-preprocess --only-source`` builds from those files once BPE-encoded, so
    ``--srcdict dict.txt`` changes nothing there. Existing files are kept unless ``force``; the
    three files are written together at the end, or not at all.

    >>> trained = train_bpe_files(["train.txt"], "gpt2_bpe", num_merges=30000)  # doctest: +SKIP
    >>> trained.dict_txt  # doctest: +SKIP
    PosixPath('gpt2_bpe/dict.txt')
    """
    dict_from = list(inputs if dict_from is None else dict_from)
    if not inputs:
        raise CorpusError("no inputs given")
    if STDIO in (str(path) for path in [*inputs, *dict_from]):
        raise CorpusError("train-bpe reads its inputs more than once: give files, not '-'")
    if num_merges < 0 or min_frequency < 1 or padding_factor < 1 or workers < 1:
        raise CorpusError(
            "need num_merges >= 0, min_frequency >= 1, padding_factor >= 1 and workers >= 1, got "
            f"{num_merges}, {min_frequency}, {padding_factor} and {workers}"
        )
    output_dir = Path(output_dir)
    destinations = [output_dir / name for name in OUTPUT_NAMES]
    existing = [str(path) for path in destinations if path.exists()]
    if existing and not force:
        raise CorpusError(f"refusing to overwrite {', '.join(existing)} (use --force)")
    for path in [*inputs, *dict_from]:
        InputFile(path).close()  # fail now, not after learning the merges, if one is missing

    with OrderedRunner(workers) as runner:
        word_counts = _sum_over_files(inputs, _count_words_chunk, runner, progress=progress, desc="counting words")
    if not word_counts:
        raise CorpusError(f"no text in {', '.join(map(str, inputs))} (every line is empty)")
    encoder, merges = train_bpe(word_counts, num_merges, min_frequency=min_frequency, progress=progress)
    bpe = GPT2BPE(encoder, merges)  # also checks that the learned vocabulary is self-consistent
    with OrderedRunner(workers, GPT2BPE, (encoder, merges), local_state=bpe) as runner:
        id_counts = _sum_over_files(dict_from, _count_ids_chunk, runner, progress=progress, desc="counting ids")
    dictionary = build_fairseq_dictionary(id_counts, padding_factor=padding_factor)

    output_dir.mkdir(parents=True, exist_ok=True)
    with AtomicFiles() as atomic:
        encoder_tmp, vocab_tmp, dict_tmp = (atomic.temporary(path) for path in destinations)
        write_bpe_files(encoder, merges, encoder_tmp, vocab_tmp)
        dictionary.save(dict_tmp)
        atomic.commit()
    encoder_json, vocab_bpe, dict_txt = destinations
    return TrainedBPE(
        encoder_json,
        vocab_bpe,
        dict_txt,
        num_merges=len(merges),
        vocab_size=len(encoder),
        dict_size=len(dictionary) - dictionary.nspecial,
    )
