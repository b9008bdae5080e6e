"""Corpus tools: GPT-2 BPE-encode text files as fairseq does, and learn a GPT-2 BPE + ``dict.txt``.

Two commands (``roberta-ext bpe-encode`` and ``roberta-ext train-bpe``), each a thin argument
parser over a library function:

* :func:`bpe_encode_files` is fairseq's ``examples/roberta/multiprocessing_bpe_encoder.py`` — same
  options, byte-identical outputs and the same stderr statistics — with what a long run needs:
  bounded memory (chunks of lines go to a process pool through a bounded in-flight window, and
  come back in order), a progress bar, errors that name the file and line, and outputs that
  appear under their real names only once the whole run succeeded.
* :func:`train_bpe_files` learns ``encoder.json`` + ``vocab.bpe`` (GPT-2's formats) and the
  ``dict.txt`` that ``fairseq-preprocess --only-source`` would build from the BPE-encoded text,
  for users who do not have OpenAI's files.

What "the same as fairseq" means, line by line (the quirks are kept on purpose; outputs are fed
to ``fairseq-preprocess`` next to files produced by fairseq's script):

* A file is read as ``open(path, "r", encoding="utf-8")`` reads it: universal newlines, so
  ``"\\n"``, ``"\\r\\n"`` and a lone ``"\\r"`` each end a line (``"\\x85"``, ``"\\u2028"`` and other
  Unicode line breaks do not). Standard input is read as CPython's ``sys.stdin`` on POSIX reads
  it: lines end at ``"\\n"`` only, so a ``"\\r"`` inside a line stays there.
* Each line is ``str.strip()``-ed. Lines of parallel inputs are zipped into rows; a row in which
  any line is empty is dropped from *all* outputs (counted as ``[num_filtered_EMPTY]``) unless
  ``keep_empty``, in which case the empty line becomes an empty output line.
* An output line is the GPT-2 ids of the stripped line, joined by single spaces.

Where fairseq's script fails late or silently, we fail early and loudly, writing nothing:
invalid UTF-8 (fairseq: a traceback, or lone surrogates from stdin), parallel inputs with
different numbers of lines (fairseq: silently truncates to the shortest), a number of inputs
different from the number of outputs, the same output path given twice.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import stat
import sys
import tempfile
import warnings
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from itertools import zip_longest
from pathlib import Path
from typing import IO, Any, NamedTuple

from tqdm import tqdm

from .tokenizers.bpe_trainer import count_words, train_bpe, write_bpe_files
from .tokenizers.dictionary import Dictionary, DictionaryFormatError
from .tokenizers.gpt2_bpe import GPT2BPE, GPT2BPEFormatError

__all__ = [
    "CorpusError",
    "EncodeStats",
    "TrainedBPE",
    "bpe_encode_files",
    "bpe_encode_main",
    "build_fairseq_dictionary",
    "train_bpe_files",
    "train_bpe_main",
]

STDIO = "-"
"""The path that means standard input (for inputs) or standard output (for outputs)."""

DEFAULT_WORKERS = min(20, os.cpu_count() or 1)
"""fairseq's script defaults to 20 processes; more than the machine's cores only costs memory."""

# A chunk is the unit of work sent to a worker: big enough that pickling and IPC are a small
# fraction of its encoding time, small enough that a few in flight per worker stay a few MB.
CHUNK_ROWS = 4096
CHUNK_BYTES = 1 << 18
_IN_FLIGHT_PER_WORKER = 2  # keeps every worker busy while the parent reads and writes

_LOG_EVERY_ROWS = 10_000  # fairseq's script prints "processed N lines" this often


class CorpusError(ValueError):
    """An input the corpus tools cannot process; the message names the file (and line)."""


# ---------------------------------------------------------------------------------------- input


class _InputFile:
    """One input, read as bytes and split into lines exactly where fairseq's reader splits them.

    Reading bytes (not text) lets us count progress in bytes, report invalid UTF-8 with a line
    number, and leave the decoding to the workers.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.bytes_read = 0
        self.size: int | None = None
        if self.path == STDIO:
            self.name = "<stdin>"
            stdin = getattr(sys.stdin, "buffer", None)
            if stdin is None:
                raise CorpusError("standard input is not a byte stream; give a file path instead of '-'")
            self._file: IO[bytes] = stdin
            self._owned = False
            # CPython opens sys.stdin with newline="\n" on POSIX: only "\n" ends a line there.
            self.universal_newlines = False
            return
        self.name = self.path
        try:
            self._file = open(self.path, "rb")  # noqa: SIM115 (closed by close())
        except FileNotFoundError:
            raise FileNotFoundError(errno.ENOENT, "input file not found", self.path) from None
        except IsADirectoryError:
            raise IsADirectoryError(errno.EISDIR, "input is a directory, not a file", self.path) from None
        except OSError as error:
            raise OSError(error.errno, f"cannot read input file ({error.strerror})", self.path) from None
        self._owned = True
        self.universal_newlines = True
        info = os.fstat(self._file.fileno())
        if stat.S_ISREG(info.st_mode):
            self.size = info.st_size

    def lines(self) -> Iterator[bytes]:
        """The raw lines, terminators included or not (callers strip them)."""
        for raw in self._file:
            self.bytes_read += len(raw)
            if self.universal_newlines and b"\r" in raw:
                # Universal newlines: "\r\n" and a lone "\r" also end a line. A binary line ends
                # at "\n", so a "\r\n" pair never straddles two of them; and "\r"/"\n" bytes never
                # occur inside a multi-byte UTF-8 character, so splitting bytes is safe.
                pieces = raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
                if not pieces[-1]:
                    pieces.pop()
                yield from pieces
            else:
                yield raw

    def close(self) -> None:
        if self._owned:
            self._file.close()


class _Chunk(NamedTuple):
    """Consecutive rows of the zipped inputs: ``columns[i]`` holds input ``i``'s raw lines."""

    first_line: int  # 1-based line number of the first row, for error messages
    columns: tuple[list[bytes], ...]
    nbytes: int  # bytes of input these rows came from, for the progress bar


def _read_chunks(
    inputs: Sequence[_InputFile], *, chunk_rows: int | None = None, chunk_bytes: int | None = None
) -> Iterator[_Chunk]:
    """Rows of the inputs read in lockstep, cut into chunks; raise if the inputs differ in length."""
    # Defaults looked up at call time, so that tests can shrink chunks to exercise their seams.
    chunk_rows = chunk_rows or CHUNK_ROWS
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    rows = zip_longest(*(source.lines() for source in inputs))
    first_line = 1
    while True:
        start = sum(source.bytes_read for source in inputs)
        columns: tuple[list[bytes], ...] = tuple([] for _ in inputs)
        size = 0
        for row in rows:
            if None in row:
                _raise_length_mismatch(inputs, row, lines_before=first_line - 1 + len(columns[0]))
            for column, line in zip(columns, row):
                column.append(line)
            size += sum(map(len, row))
            if len(columns[0]) >= chunk_rows or size >= chunk_bytes:
                break
        if not columns[0]:
            return
        yield _Chunk(first_line, columns, sum(source.bytes_read for source in inputs) - start)
        first_line += len(columns[0])


def _raise_length_mismatch(inputs: Sequence[_InputFile], row: tuple[bytes | None, ...], *, lines_before: int) -> None:
    ended = [source.name for source, line in zip(inputs, row) if line is None]
    longer = [source.name for source, line in zip(inputs, row) if line is not None]
    # fairseq's zip() would silently drop the extra lines, misaligning nothing but losing data.
    # Unequal lengths usually mean separate files were meant (as `roberta-ext tokenize
    # --inputs a b` takes them): say how to encode those.
    raise CorpusError(
        f"parallel inputs have different numbers of lines: {', '.join(ended)} ended after "
        f"{lines_before} lines, but {', '.join(longer)} has more. bpe-encode --inputs A B reads A and B as "
        f"parallel columns (fairseq's meaning: line i of each is one row, and an empty line drops the row "
        f"from every output). To encode separate files, run bpe-encode once per file."
    )


class _UndecodableLine(Exception):
    """Raised in a worker for a line that is not UTF-8; picklable, so it crosses the pool."""

    def __init__(self, column: int, line_number: int, detail: str) -> None:
        super().__init__(column, line_number, detail)
        self.column, self.line_number, self.detail = column, line_number, detail


def _decode_row(row: Sequence[bytes], line_number: int) -> list[str]:
    """Decoded, stripped lines of one row (``str.strip`` as fairseq: Unicode whitespace too)."""
    try:
        return [raw.decode("utf-8").strip() for raw in row]
    except UnicodeDecodeError:
        for column, raw in enumerate(row):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as error:
                detail = f"{error.reason} at byte {error.start + 1} of the line: {raw[error.start:error.end]!r}"
                raise _UndecodableLine(column, line_number, detail) from None
        raise  # unreachable: one of the lines failed above


def _undecodable_error(inputs: Sequence[_InputFile], error: _UndecodableLine) -> CorpusError:
    return CorpusError(f"{inputs[error.column].name}:{error.line_number}: not valid UTF-8 ({error.detail})")


# ---------------------------------------------------------------------------------- parallelism

_worker_state: Any = None  # set in each pool worker by _init_worker


def _init_worker(factory: Callable[..., Any] | None, args: tuple) -> None:
    # Ctrl-C reaches the whole process group; the parent handles it (cancels what is queued and
    # cleans up), so workers ignore it rather than each print a traceback. SIGTERM must still
    # kill a worker, not run the handler the parent may have installed before the fork.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    warnings.simplefilter("ignore")  # the parent already showed the vocabulary's warnings once
    global _worker_state
    _worker_state = factory(*args) if factory is not None else None


def _run_in_worker(job: Callable[[Any, _Chunk], Any], chunk: _Chunk) -> Any:
    return job(_worker_state, chunk)


class _OrderedRunner:
    """``job(state, chunk)`` over chunks, results in input order, at most a few chunks in memory.

    ``Pool.imap`` would do the ordering, but its feeder thread reads the whole input ahead of the
    workers; here the parent reads a chunk only when one of a bounded number of slots is free.
    A ``ProcessPoolExecutor`` rather than a ``Pool``: a worker that dies (killed for memory, or
    its initializer failed) raises ``BrokenProcessPool`` instead of hanging the run forever.
    With ``workers <= 1`` everything runs in this process (no pool, no pickling).
    """

    def __init__(
        self,
        workers: int,
        factory: Callable[..., Any] | None = None,
        args: tuple = (),
        *,
        local_state: Any = None,
    ) -> None:
        """Workers build their state with ``factory(*args)``; in-process, ``local_state`` is used
        if given (the caller often has it already)."""
        self.workers = workers
        self._executor: ProcessPoolExecutor | None = None
        if workers <= 1:
            if local_state is None and factory is not None:
                local_state = factory(*args)
            self._state = local_state
        else:
            self._executor = ProcessPoolExecutor(workers, initializer=_init_worker, initargs=(factory, args))

    def __enter__(self) -> _OrderedRunner:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if self._executor is None:
            return
        if exc_type is None:
            self._executor.shutdown(wait=True)
            return
        # After a failure or an interrupt nothing the workers do is wanted: stop them now instead
        # of waiting for running chunks. Waiting could also hang for good when Ctrl-C landed in
        # the middle of submit() and left the executor's bookkeeping half-updated.
        processes = list((getattr(self._executor, "_processes", None) or {}).values())
        self._executor.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=10)

    def map(self, job: Callable[[Any, _Chunk], Any], chunks: Iterable[_Chunk]) -> Iterator[tuple[_Chunk, Any]]:
        if self._executor is None:
            for chunk in chunks:
                yield chunk, job(self._state, chunk)
            return
        pending: deque[tuple[_Chunk, Future]] = deque()
        for chunk in chunks:
            pending.append((chunk, self._executor.submit(_run_in_worker, job, chunk)))
            if len(pending) >= _IN_FLIGHT_PER_WORKER * self.workers:
                done, future = pending.popleft()
                yield done, _result(future)
        while pending:
            done, future = pending.popleft()
            yield done, _result(future)


def _result(future: Future) -> Any:
    try:
        return future.result()
    except BrokenProcessPool as error:
        raise BrokenProcessPool(f"a worker process died unexpectedly (out of memory?): {error}") from None


# --------------------------------------------------------------------------------------- output


def _new_file_mode(path: Path) -> int:
    """The permissions ``open(path, "w")`` would leave: the old file's, or 0o666 minus the umask."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        pass
    umask = os.umask(0o022)  # the only portable way to read the umask is to set it
    os.umask(umask)
    return 0o666 & ~umask


class _AtomicFiles:
    """Temporary files next to their destinations, renamed into place by :meth:`commit`.

    Leaving the ``with`` block without a commit (an error, Ctrl-C, SIGTERM turned into
    SystemExit) deletes them: a failed run never leaves a half-written file under a real name,
    and an existing file of that name is untouched.
    """

    def __init__(self) -> None:
        self._pending: list[tuple[Path, Path]] = []

    def __enter__(self) -> _AtomicFiles:
        return self

    def temporary(self, destination: str | os.PathLike[str]) -> Path:
        """Create and return an empty temporary file that :meth:`commit` moves to ``destination``."""
        destination = Path(destination)
        directory = destination.parent
        if not directory.is_dir():
            raise FileNotFoundError(errno.ENOENT, "output directory does not exist", str(directory))
        try:
            fd, name = tempfile.mkstemp(dir=directory, prefix=f".{destination.name}.", suffix=".tmp")
        except OSError as error:
            raise OSError(error.errno, f"cannot write output ({error.strerror})", str(destination)) from None
        os.close(fd)
        self._pending.append((Path(name), destination))
        return Path(name)

    def commit(self) -> None:
        for temporary, destination in self._pending:
            os.chmod(temporary, _new_file_mode(destination))  # mkstemp makes 0o600 files
            os.replace(temporary, destination)
        self._pending.clear()

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        for temporary, _ in self._pending:
            with contextlib.suppress(FileNotFoundError):
                temporary.unlink()
        self._pending.clear()


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


def _encode_chunk(bpe: GPT2BPE, chunk: _Chunk, *, keep_empty: bool) -> tuple[list[bytes], int]:
    """One chunk as fairseq's ``MultiprocessingEncoder.encode_lines`` would, row by row.

    Returns each output's text (ASCII: digits, spaces, newlines) and the number of dropped rows.
    """
    encoded: list[list[str]] = [[] for _ in chunk.columns]
    filtered = 0
    for offset, row in enumerate(zip(*chunk.columns)):
        texts = _decode_row(row, chunk.first_line + offset)
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
    with _AtomicFiles() as atomic:
        with contextlib.ExitStack() as stack:
            sources: list[_InputFile] = []
            for path in inputs:
                sources.append(_InputFile(path))
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
                _OrderedRunner(workers, GPT2BPE.from_files, (str(encoder_json), str(vocab_bpe)), local_state=bpe)
            )
            sizes = [source.size for source in sources]
            bar = stack.enter_context(
                tqdm(total=None if None in sizes else sum(sizes), desc="bpe-encode", unit="B", unit_scale=True,
                     unit_divisor=1024, disable=not progress, file=sys.stderr, dynamic_ncols=True)
            )
            job = partial(_encode_chunk, keep_empty=keep_empty)
            try:
                for chunk, (texts, filtered) in runner.map(job, _read_chunks(sources, chunk_rows=chunk_rows)):
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
            except _UndecodableLine as error:
                raise _undecodable_error(sources, error) from None
        # The temporary files are closed (flushed) here, so they can take their real names.
        atomic.commit()
    if log is not None and stats.filtered_empty:
        print(f"[num_filtered_EMPTY] filtered {stats.filtered_empty} lines", file=log)
    return stats


# ------------------------------------------------------------------------------------ train-bpe


def _count_words_chunk(_state: None, chunk: _Chunk) -> Counter[str]:
    """Byte-level words of the chunk's non-empty stripped lines (what bpe-encode will see)."""
    texts = (_decode_row((raw,), chunk.first_line + offset)[0] for offset, raw in enumerate(chunk.columns[0]))
    return count_words(text for text in texts if text)


def _count_ids_chunk(bpe: GPT2BPE, chunk: _Chunk) -> Counter[int]:
    """GPT-2 ids of the chunk's non-empty stripped lines, counted (as fairseq-preprocess counts them)."""
    counts: Counter[int] = Counter()
    for offset, raw in enumerate(chunk.columns[0]):
        text = _decode_row((raw,), chunk.first_line + offset)[0]
        if text:
            counts.update(bpe.encode(text))
    return counts


def _sum_over_files(
    paths: Sequence[str | os.PathLike[str]],
    job: Callable[[Any, _Chunk], Counter],
    runner: _OrderedRunner,
    *,
    progress: bool,
    desc: str,
) -> Counter:
    """Sum ``job``'s counters over every chunk of every file (each file read on its own)."""
    total: Counter = Counter()
    sources = [_InputFile(path) for path in paths]
    try:
        sizes = [source.size for source in sources]
        with tqdm(
            total=None if None in sizes else sum(sizes), desc=desc, unit="B", unit_scale=True,
            unit_divisor=1024, disable=not progress, file=sys.stderr, dynamic_ncols=True,
        ) as bar:
            for source in sources:
                try:
                    for chunk, counts in runner.map(job, _read_chunks([source])):
                        total.update(counts)
                        bar.update(chunk.nbytes)
                except _UndecodableLine as error:
                    raise _undecodable_error([source], error) from None
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
        _InputFile(path).close()  # fail now, not after learning the merges, if one is missing

    with _OrderedRunner(workers) as runner:
        word_counts = _sum_over_files(inputs, _count_words_chunk, runner, progress=progress, desc="counting words")
    if not word_counts:
        raise CorpusError(f"no text in {', '.join(map(str, inputs))} (every line is empty)")
    encoder, merges = train_bpe(word_counts, num_merges, min_frequency=min_frequency, progress=progress)
    bpe = GPT2BPE(encoder, merges)  # also checks that the learned vocabulary is self-consistent
    with _OrderedRunner(workers, GPT2BPE, (encoder, merges), local_state=bpe) as runner:
        id_counts = _sum_over_files(dict_from, _count_ids_chunk, runner, progress=progress, desc="counting ids")
    dictionary = build_fairseq_dictionary(id_counts, padding_factor=padding_factor)

    output_dir.mkdir(parents=True, exist_ok=True)
    with _AtomicFiles() as atomic:
        encoder_tmp, vocab_tmp, dict_tmp = (atomic.temporary(path) for path in destinations)
        write_bpe_files(encoder, merges, encoder_tmp, vocab_tmp)
        dictionary.save(dict_tmp)
        atomic.commit()
    return TrainedBPE(
        *destinations, num_merges=len(merges), vocab_size=len(encoder), dict_size=len(dictionary) - dictionary.nspecial
    )


# ------------------------------------------------------------------------------ command lines


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """Turn SIGTERM into SystemExit while a command runs, so its cleanup (finally) still runs."""

    def handler(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_command(prog: str, body: Callable[[], int]) -> int:
    """Run a command; expected failures become one line on stderr and exit status 1 (130: Ctrl-C)."""
    try:
        with _sigterm_as_exit():
            return body()
    except (CorpusError, GPT2BPEFormatError, DictionaryFormatError, OSError, BrokenProcessPool) as error:
        if isinstance(error, BrokenPipeError):  # e.g. `bpe-encode ... | head`: not worth a message
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 1
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"\n{prog}: interrupted; no output file was written or changed", file=sys.stderr)
        return 130


def bpe_encode_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext bpe-encode``: fairseq's ``multiprocessing_bpe_encoder.py``, same options.

    >>> bpe_encode_main(["--encoder-json", "encoder.json", "--vocab-bpe", "vocab.bpe",
    ...                  "--inputs", "train.txt", "--outputs", "train.bpe"])  # doctest: +SKIP
    0
    """
    prog = "roberta-ext bpe-encode"
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Encode text files with GPT-2 byte-level BPE, one output line of space-separated GPT-2 "
            "ids per input line: byte-identical to fairseq's examples/roberta/"
            "multiprocessing_bpe_encoder.py, with the same options. Lines are read with universal "
            "newlines and stripped; with several parallel inputs, a row is dropped from all outputs "
            "when any of its lines is empty (unless --keep-empty). Outputs appear only when the "
            "whole run succeeded."
        ),
        epilog=(
            "example: roberta-ext bpe-encode --encoder-json gpt2_bpe/encoder.json --vocab-bpe "
            "gpt2_bpe/vocab.bpe --inputs train.raw --outputs train.bpe --workers 8"
        ),
    )
    parser.add_argument("--encoder-json", required=True, metavar="FILE", help="path to encoder.json")
    parser.add_argument("--vocab-bpe", required=True, metavar="FILE", help="path to vocab.bpe")
    parser.add_argument("--inputs", nargs="+", default=[STDIO], metavar="FILE",
                        help="input files to filter/encode; '-' is stdin (default: -). Several files are "
                             "PARALLEL COLUMNS, as in fairseq: line i of every file is one row, and they must "
                             "have equal numbers of lines. For separate files (train, valid), run once per "
                             "file (unlike 'roberta-ext tokenize', whose --inputs are separate files)")
    parser.add_argument("--outputs", nargs="+", default=[STDIO], metavar="FILE",
                        help="path to save encoded outputs, one per input; '-' is stdout (default: -)")
    parser.add_argument("--keep-empty", action="store_true",
                        help="keep empty lines (as empty output lines) instead of dropping their rows")
    parser.add_argument("--workers", type=_positive_int, default=DEFAULT_WORKERS, metavar="N",
                        help=f"processes that encode; 1 runs in this process (default: {DEFAULT_WORKERS})")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: when stderr is a terminal; "
                             "without it, fairseq's 'processed N lines' messages are printed)")
    args = parser.parse_args(argv)
    if len(args.inputs) != len(args.outputs):
        parser.error(
            f"number of input and output paths should match: {len(args.inputs)} inputs, {len(args.outputs)} outputs"
        )
    progress = sys.stderr.isatty() if args.progress is None else args.progress

    def body() -> int:
        bpe_encode_files(
            args.encoder_json, args.vocab_bpe, args.inputs, args.outputs,
            keep_empty=args.keep_empty, workers=args.workers, progress=progress, log=sys.stderr,
        )
        return 0

    return _run_command(prog, body)


def train_bpe_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext train-bpe``: learn encoder.json, vocab.bpe and dict.txt from text files.

    >>> train_bpe_main(["--inputs", "train.txt", "--output-dir", "gpt2_bpe"])  # doctest: +SKIP
    0
    """
    prog = "roberta-ext train-bpe"
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Learn a GPT-2-format byte-level BPE (encoder.json, vocab.bpe) from text files, and the "
            "fairseq dict.txt of the BPE-encoded text: the same file fairseq-preprocess --only-source "
            "would build, so it can be passed as --srcdict. For users without OpenAI's GPT-2 files."
        ),
        epilog=(
            "example: roberta-ext train-bpe --inputs train.raw --output-dir gpt2_bpe --num-merges 30000; "
            "then roberta-ext bpe-encode --encoder-json gpt2_bpe/encoder.json --vocab-bpe gpt2_bpe/vocab.bpe "
            "--inputs train.raw --outputs train.bpe; fairseq-preprocess --only-source --srcdict "
            "gpt2_bpe/dict.txt --trainpref train.bpe --destdir data-bin"
        ),
    )
    parser.add_argument("--inputs", nargs="+", required=True, metavar="FILE", help="text files to learn from")
    parser.add_argument("--output-dir", required=True, type=Path, metavar="DIR",
                        help="folder for encoder.json, vocab.bpe and dict.txt (created if missing)")
    parser.add_argument("--num-merges", type=_non_negative_int, default=30_000, metavar="N",
                        help="merges to learn; the vocabulary gets up to N + 257 tokens (default: 30000)")
    parser.add_argument("--min-frequency", type=_positive_int, default=2, metavar="N",
                        help="stop when the best pair occurs fewer than N times (default: 2)")
    parser.add_argument("--dict-from", nargs="+", metavar="FILE",
                        help="text files whose BPE ids dict.txt counts, e.g. just the training split "
                             "you will pass to fairseq-preprocess --trainpref (default: --inputs)")
    parser.add_argument("--padding-factor", type=_positive_int, default=8, metavar="N",
                        help="pad dict.txt with madeupwordNNNN rows as fairseq-preprocess does (default: 8)")
    parser.add_argument("--workers", type=_positive_int, default=DEFAULT_WORKERS, metavar="N",
                        help=f"processes that read and encode text (default: {DEFAULT_WORKERS})")
    parser.add_argument("--force", action="store_true", help="overwrite existing files in --output-dir")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show progress bars on stderr (default: when stderr is a terminal)")
    args = parser.parse_args(argv)
    progress = sys.stderr.isatty() if args.progress is None else args.progress

    def body() -> int:
        trained = train_bpe_files(
            args.inputs, args.output_dir, num_merges=args.num_merges, min_frequency=args.min_frequency,
            dict_from=args.dict_from, padding_factor=args.padding_factor, workers=args.workers,
            force=args.force, progress=progress,
        )
        print(
            f"learned {trained.num_merges} merges ({trained.vocab_size} tokens); dict.txt has "
            f"{trained.dict_size} rows; wrote {trained.encoder_json}, {trained.vocab_bpe}, {trained.dict_txt}",
            file=sys.stderr,
        )
        return 0

    return _run_command(prog, body)
