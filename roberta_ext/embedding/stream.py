"""Embedding a file of texts into an embedding file, streamed, resumable and sharded: what
``roberta-ext embed`` runs (:func:`embed_file`, :func:`merge_shards`; the command line is
:mod:`roberta_ext.cli.embed`).

:func:`embed_file` reads the rows of an input (text, JSONL or TSV, read by
:class:`~roberta_ext.corpus.rows.RowReader` under its rules) and writes row ``i`` = the embedding
of data row ``i`` as ``.npy`` or ``.safetensors`` (:mod:`.files`), with ``OUT.npy.json`` beside
it: what made it (model, input, options) and which rows were skipped.

How it runs (each point is a promise the tests check):

* **Streaming.** The input is read ``chunk_rows`` rows at a time; each chunk is tokenized,
  sorted by length and embedded in batches of at most ``max_tokens`` padded tokens
  (:class:`~roberta_ext.embedding.embedder.Embedder`, as ``hub.embed``), and written as one part.
  Memory holds one chunk, whatever the file's size.
* **Resumable.** Parts go to ``OUT.npy.parts/`` (``NNNNNNNN.npy`` + ``NNNNNNNN.json`` each,
  written atomically, and a ``manifest.json`` naming the input (path, size, modification time),
  the model and every option that changes the result). A run that stops (Ctrl-C, a crash, a
  kill) leaves its finished parts; the same command run again embeds only the rest, and
  refuses, naming the difference, when the input or an option changed. At the end the parts
  are assembled into ``OUT.npy`` (atomically) and removed.
* **Sharded.** :class:`Shard` ``I/N`` (or torchrun's ``RANK``/``WORLD_SIZE``) embeds the rows ``i``
  with ``i % N == I`` into ``OUT.shard-I-of-N.npy``; :func:`merge_shards` interleaves the N
  shard files back into row order. Round robin rather than contiguous ranges: every shard gets
  the same mix of short and long rows, so they finish together.
* **Standard input** (``-``) is saved to a hidden file beside the output for the run (the rows
  are read twice: counted, then embedded), and removed after it. A pipe has no size or time, so a
  resumed run knows it by its content: piping the same text again resumes.
* **Bad rows** (not UTF-8, not JSON, a missing field or column) stop the run with
  ``FILE:LINE: what is wrong``; with ``skip_bad_lines`` they are counted, get no row, and are
  listed (row, line, problem) in ``OUT.npy.json``.
* **One run per output.** A run holds an exclusive lock on its output (:mod:`.locking`) from
  before the model loads to the end: a second run on the same output (the same shard) is
  refused at once, naming the process that holds it, or with ``wait`` waits for it, then
  finds the output finished (refused without ``force``) or its parts to resume. Holding
  it, a run removes the temporaries a killed assembly left beside the output.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from ..atomic import AtomicFiles, atomic_write
from ..corpus.reading import STDIO, CorpusError
from ..corpus.rows import BadRow, Columns, Line, RowReader, has_header
from .embedder import Embedder
from .files import RowReader as EmbeddingRows
from .files import file_format, write_embeddings
from .locking import Wait, output_lock, remove_stale_temporaries

__all__ = [
    "DEFAULT_CHUNK_ROWS",
    "FAIL_AFTER_CHUNKS",
    "EmbedError",
    "InputSpec",
    "Options",
    "Shard",
    "embed_file",
    "merge_shards",
    "shard_files",
]

DEFAULT_CHUNK_ROWS = 8192
"""Rows per part: the unit of memory, of resumption and of length sorting."""
FAIL_AFTER_CHUNKS = "ROBERTA_EXT_EMBED_FAIL_AFTER_CHUNKS"
"""For tests: after writing this many parts, the process kills itself (SIGKILL: no cleanup runs)."""
MANIFEST = "manifest.json"


class EmbedError(CorpusError):
    """An input, an option or a model ``roberta-ext embed`` cannot work with; the message names it."""


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class InputSpec:
    """Which file, in which format (:data:`~roberta_ext.corpus.rows.FORMATS`), and where its
    texts are (``fields``: JSONL keys or TSV columns, one or two: a pair); ``header``: whether a
    TSV has a header line (None: :func:`~roberta_ext.corpus.rows.has_header`'s rule). ``path``
    ``-`` is standard input, which :func:`embed_file` saves to a file first (:func:`_saved_stdin`)."""

    path: Path
    format: str
    fields: tuple[str, ...] = ()
    header: bool | None = None
    stdin_sha256: str | None = None
    """Set when ``path`` holds standard input, saved: its SHA-256, what a resumed run compares."""

    @property
    def reads_stdin(self) -> bool:
        """Whether the input is standard input (``-``, or the file it was saved to)."""
        return str(self.path) == STDIO or self.stdin_sha256 is not None

    @property
    def name(self) -> str:
        """The input as messages name it: its path, or ``<stdin>``."""
        return "<stdin>" if self.reads_stdin else str(self.path)

    def reader(self) -> RowReader:
        if not self.path.is_file():
            raise EmbedError(f"{self.path}: input file not found (or not a file)")
        columns = Columns(self.fields) if self.format != "text" else None
        reader = RowReader(self.path, format=self.format, columns=columns, header=self.header)
        reader.name = self.name  # a saved standard input's lines are <stdin>'s, not the hidden file's
        return reader

    def identity(self) -> dict[str, Any]:
        """What a resumed run must find unchanged: the file (path, size, modification time; for
        standard input, its size and SHA-256) and how it is read."""
        info = self.path.stat()
        found: dict[str, Any] = (
            {"path": STDIO, "size": info.st_size, "sha256": self.stdin_sha256}
            if self.stdin_sha256 is not None
            else {"path": str(self.path.resolve()), "size": info.st_size, "mtime_ns": info.st_mtime_ns}
        )
        return {
            **found,
            "format": self.format,
            "fields": list(self.fields),
            "header": has_header(Columns(self.fields), self.header) if self.format == "tsv" else None,
        }


# ----------------------------------------------------------------------------- sharding


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: the rows ``i`` with ``i % count == index``."""

    index: int = 0
    count: int = 1

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"I/N"`` -> ``Shard(I, N)``.

        >>> Shard.parse("1/4")
        Shard(index=1, count=4)
        """
        try:
            index, count = (int(part) for part in text.split("/"))
        except ValueError:
            raise ValueError(f"expected I/N (e.g. 0/4), got {text!r}") from None
        if not 0 <= index < count:
            raise ValueError(f"shard I/N needs 0 <= I < N, got {text!r}")
        return cls(index, count)

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> Shard:
        """torchrun's ``RANK`` of ``WORLD_SIZE`` (a single shard without them).

        >>> Shard.from_environment({"RANK": "1", "WORLD_SIZE": "2"})
        Shard(index=1, count=2)
        """
        count = int(environ.get("WORLD_SIZE", "1") or 1)
        index = int(environ.get("RANK", "0") or 0)
        if count < 1 or not 0 <= index < count:
            raise EmbedError(f"RANK={index} and WORLD_SIZE={count} do not name a shard")
        return cls(index, count)

    def owns(self, row: int) -> bool:
        return row % self.count == self.index

    def rows_of(self, total: int) -> int:
        """How many of ``total`` rows are this shard's."""
        return max(0, (total - self.index + self.count - 1) // self.count)

    def output(self, output: Path) -> Path:
        """``emb.npy`` -> ``emb.shard-I-of-N.npy`` (itself for a single shard).

        >>> Shard(1, 4).output(Path("out/emb.npy")).name
        'emb.shard-1-of-4.npy'
        """
        if self.count == 1:
            return output
        return output.with_name(f"{output.stem}.shard-{self.index}-of-{self.count}{output.suffix}")


def receipt_path(output: Path) -> Path:
    """``emb.npy`` -> ``emb.npy.json``: what made the file."""
    return output.with_name(output.name + ".json")


def parts_path(output: Path) -> Path:
    """``emb.npy`` -> ``emb.npy.parts``: the finished chunks of an unfinished run."""
    return output.with_name(output.name + ".parts")


# ----------------------------------------------------------------------------- parts


class Parts:
    """The folder of finished chunks: ``manifest.json``, then ``NNNNNNNN.npy`` + ``NNNNNNNN.json``
    per chunk (the JSON last: a chunk is finished when its JSON exists)."""

    def __init__(self, folder: Path, manifest: dict[str, Any]) -> None:
        self.folder = folder
        path = folder / MANIFEST
        if path.is_file():
            try:
                found = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as error:
                raise EmbedError(f"{path}: not valid JSON ({error}); delete {folder} to start over") from None
            differences = _differences(found, manifest)
            if differences:
                raise EmbedError(
                    f"{folder} holds the parts of a different run ({'; '.join(differences)}): run the same command "
                    f"to resume it, or delete {folder} to start over"
                )
        else:
            folder.mkdir(parents=True, exist_ok=True)
            with atomic_write(path) as file:
                json.dump(manifest, file, indent=1)

    def _name(self, chunk: int) -> str:
        return f"{chunk:08d}"

    def done(self, chunk: int) -> dict[str, Any] | None:
        """The record of a finished chunk, or None."""
        path = self.folder / f"{self._name(chunk)}.json"
        if not path.is_file():
            return None
        try:
            record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        except ValueError:
            return None  # cannot happen with atomic writes; redo the chunk rather than trust it
        return record if (self.folder / f"{self._name(chunk)}.npy").is_file() else None

    def write(self, chunk: int, embeddings: np.ndarray, record: dict[str, Any]) -> None:
        with AtomicFiles() as files:
            array_path = files.temporary(self.folder / f"{self._name(chunk)}.npy")
            record_path = files.temporary(self.folder / f"{self._name(chunk)}.json")
            with open(array_path, "wb") as file:
                np.save(file, np.ascontiguousarray(embeddings, dtype="<f4"))
            record_path.write_text(json.dumps(record), encoding="utf-8")
            files.commit()

    def array(self, chunk: int) -> np.ndarray:
        return np.load(self.folder / f"{self._name(chunk)}.npy")


def _differences(found: dict[str, Any], wanted: dict[str, Any], prefix: str = "") -> list[str]:
    """``key: was A, now B`` for every leaf that differs."""
    out = []
    for key in sorted(set(found) | set(wanted)):
        a, b = found.get(key), wanted.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out.extend(_differences(a, b, f"{prefix}{key}."))
        elif a != b:
            out.append(f"{prefix}{key} was {a!r}, now {b!r}")
    return out


# ----------------------------------------------------------------------------- embedding a file


@dataclass(frozen=True)
class Options:
    """What changes the embeddings, hence what a resumed run must share with the first
    (``skip_bad_lines`` aside: a run that stopped at a bad line resumes with it)."""

    model: str
    pooling: tuple[str, ...] | None
    normalize: bool | None
    max_length: int | None
    prompt: str | None
    prompt_name: str | None
    dtype: str
    skip_bad_lines: bool
    chunk_rows: int
    loaded_with: tuple[tuple[str, str], ...] = ()
    """How the model was loaded, where not by default (``("checkpoint_file", "checkpoint_best.pt")``, ...)."""

    def record(self) -> dict[str, Any]:
        loaded_with = {"loaded_with": dict(self.loaded_with)} if self.loaded_with else {}
        return {
            "model": _model_identity(self.model),
            **loaded_with,
            "pooling": None if self.pooling is None else list(self.pooling),
            "normalize": self.normalize,
            "max_length": self.max_length,
            "prompt": self.prompt,
            "prompt_name": self.prompt_name,
            "dtype": self.dtype,
            "chunk_rows": self.chunk_rows,
        }


def _model_identity(model: str) -> str:
    return str(Path(model).resolve()) if Path(model).exists() else model


def _chunks(reader: RowReader, shard: Shard, size: int) -> Iterator[list[Line]]:
    chunk: list[Line] = []
    for line in reader.lines():
        if shard.owns(line.index):
            chunk.append(line)
            if len(chunk) == size:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to do
        return None


def release_freed_memory() -> None:
    """Give the heap's free pages back to the system (glibc's ``malloc_trim``).

    Batches of ever-different shapes leave glibc's heap fragmented: the memory torch frees
    stays mapped, and the process grew from 315 MB to 835 MB over 30k lines of a small BERT
    (4k-row chunks) without this call after each chunk, and stayed at 341-345 MB with it.
    """
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _fail_after() -> int | None:
    value = os.environ.get(FAIL_AFTER_CHUNKS, "").strip()
    return int(value) if value else None


def _target(output: Path, shard: Shard) -> Path:
    """The file ``shard`` writes: ``shard.output(output)``, checked to be ``.npy`` or ``.safetensors``."""
    if output.suffix.lower() not in (".npy", ".safetensors"):
        raise EmbedError(f"{output}: the output must end in .npy or .safetensors")
    return shard.output(output)


def _stdin_path(target: Path) -> Path:
    """Where standard input is saved for a run writing ``target``, under a temporary's name
    (``.emb.npy.stdin.XXXXXXXX.tmp``)."""
    return target.with_name(target.name + ".stdin")


def _clean_after_kills(target: Path) -> None:
    """Remove what a run killed while assembling ``target`` (or saving its standard input) left
    (its lock held: none is writing)."""
    remove_stale_temporaries(target)
    remove_stale_temporaries(receipt_path(target))
    remove_stale_temporaries(_stdin_path(target))


@contextlib.contextmanager
def _saved_stdin(spec: InputSpec, target: Path) -> Iterator[InputSpec]:
    """``spec`` reading standard input saved to a hidden file beside ``target``, removed when the
    block ends: a run reads its rows twice (to count them, then to embed them), which a pipe cannot
    give, and knows a resumed run's input by its SHA-256, as a pipe has no size or time."""
    digest = hashlib.sha256()
    with AtomicFiles() as files:  # never committed: the saved copy is removed on leaving
        saved = files.temporary(_stdin_path(target))
        with open(saved, "wb") as file:
            while block := sys.stdin.buffer.read(1 << 20):
                digest.update(block)
                file.write(block)
        yield dataclasses.replace(spec, path=saved, stdin_sha256=digest.hexdigest())


def embed_file(
    embedder: Embedder | Callable[[], Embedder],
    spec: InputSpec,
    output: Path,
    options: Options,
    *,
    shard: Shard = Shard(),
    force: bool = False,
    progress: bool = False,
    wait: Wait = False,
) -> dict[str, Any]:
    """Embed the rows of ``spec`` that ``shard`` owns into ``shard.output(output)``, resuming
    from its parts folder; returns the receipt written beside it. Holds the output's lock
    (:func:`~.locking.output_lock`): refused while another run writes it, unless ``wait``
    (:data:`~.locking.Wait`). ``embedder`` may be a function that makes one (loads the model):
    it is called once the lock is held and the input checked, so that a run refused at once
    loads nothing. A finished output is replaced only with ``force``.

    >>> embed_file(embedder, InputSpec(Path("texts.txt"), "text"), Path("emb.npy"), options)  # doctest: +SKIP
    """
    target = _target(output, shard)
    if not spec.reads_stdin and not spec.path.is_file():
        raise EmbedError(f"{spec.path}: input file not found (or not a file)")
    with output_lock(target, wait=wait):
        return _embed_locked(embedder, spec, target, options, shard=shard, force=force, progress=progress)


def _embed_locked(
    embedder: Embedder | Callable[[], Embedder],
    spec: InputSpec,
    target: Path,
    options: Options,
    *,
    shard: Shard,
    force: bool,
    progress: bool,
) -> dict[str, Any]:
    """:func:`embed_file` into ``target``, whose lock the caller holds."""
    _clean_after_kills(target)
    parts_folder = parts_path(target)
    if (target.exists() or receipt_path(target).exists()) and not parts_folder.exists() and not force:
        raise EmbedError(f"refusing to overwrite {target} (use --force)")
    if spec.reads_stdin:
        with _saved_stdin(spec, target) as saved:
            return _embed_rows(embedder, saved, target, options, shard=shard, progress=progress)
    return _embed_rows(embedder, spec, target, options, shard=shard, progress=progress)


def _embed_rows(
    embedder: Embedder | Callable[[], Embedder],
    spec: InputSpec,
    target: Path,
    options: Options,
    *,
    shard: Shard,
    progress: bool,
) -> dict[str, Any]:
    """:func:`_embed_locked` once the output may be written and the input is a file."""
    parts_folder = parts_path(target)
    reader = spec.reader()
    input_rows = reader.count() or 0  # (a file: never None) also checks a TSV's header line
    if not isinstance(embedder, Embedder):
        embedder = embedder()
    manifest = {
        "input": spec.identity(),
        "options": options.record(),
        "shard": [shard.index, shard.count],
        "dimension": embedder.dimension,
    }
    parts = Parts(parts_folder, manifest)
    started = time.perf_counter()
    with tqdm(
        total=shard.rows_of(input_rows),
        unit="rows",
        desc="embed" if shard.count == 1 else f"embed shard {shard.index}/{shard.count}",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
        records, embedded = _embed_chunks(embedder, reader, parts, options, shard, bar)
    chunks = (shard.rows_of(input_rows) + options.chunk_rows - 1) // options.chunk_rows
    if len(records) != chunks:
        raise EmbedError(f"{spec.name}: read {len(records)} chunks of rows, expected {chunks}: did the file change?")
    seconds = time.perf_counter() - started
    receipt = {
        "rows": sum(r["rows"] for r in records),
        "skip_bad_lines": options.skip_bad_lines,
        "dimension": embedder.dimension,
        "dtype": "float32",
        "input_rows": input_rows,
        "skipped": [entry for r in records for entry in r["skipped"]],
        **manifest,
    }
    _assemble(target, (parts.array(r["chunk"]) for r in records), receipt)
    shutil.rmtree(parts_folder)
    receipt["rows_per_second"] = embedded / seconds if seconds > 0 else None
    return receipt


def _embed_chunks(
    embedder: Embedder, reader: RowReader, parts: Parts, options: Options, shard: Shard, bar: tqdm
) -> tuple[list[dict[str, Any]], int]:
    """Every chunk of the shard's rows, from its part when a finished one is there, else embedded
    and written as a part: the chunks' records, and the rows embedded now."""
    records: list[dict[str, Any]] = []
    fail_after = _fail_after()
    written = embedded = 0
    for number, chunk in enumerate(_chunks(reader, shard, options.chunk_rows)):
        record = parts.done(number)
        if record is not None:
            if record["skipped"] and not options.skip_bad_lines:
                row, line, problem = record["skipped"][0]
                raise EmbedError(
                    f"{reader.name}:{line}: {problem}; the interrupted run in {parts.folder} skipped it "
                    "(--skip-bad-lines): resume with --skip-bad-lines, or delete the folder to start over"
                )
            records.append(record)
            bar.update(len(chunk))
            continue
        texts: list[str | tuple[str, ...]] = []
        skipped: list[list[Any]] = []
        for line in chunk:
            try:
                row = reader.parse(line)
            except BadRow as error:
                if not options.skip_bad_lines:
                    raise EmbedError(f"{error} (--skip-bad-lines skips such lines)") from None
                skipped.append([line.index, line.line, error.problem])
                bar.update(1)
                continue
            texts.append(row.texts[0] if len(row.texts) == 1 else row.texts)
        embeddings = embedder.embed(texts, progress=bar.update).cpu().numpy()
        record = {"chunk": number, "rows": len(texts), "rows_read": len(chunk), "skipped": skipped}
        parts.write(number, embeddings, record)
        records.append(record)
        del embeddings
        release_freed_memory()
        embedded += len(texts)
        written += 1
        if fail_after is not None and written >= fail_after:
            os.kill(os.getpid(), signal.SIGKILL)
    return records, embedded


def _assemble(target: Path, blocks: Iterator[np.ndarray], receipt: dict[str, Any]) -> None:
    """Write ``target`` from ``blocks`` and its receipt, both appearing together."""
    target.parent.mkdir(parents=True, exist_ok=True)
    metadata = {"roberta_ext": json.dumps(receipt)} if file_format(target) == "safetensors" else None
    with AtomicFiles() as files:
        with open(files.temporary(target), "wb") as file:
            write_embeddings(
                target, blocks, rows=receipt["rows"], dimension=receipt["dimension"], metadata=metadata, file=file
            )
        files.temporary(receipt_path(target)).write_text(json.dumps(receipt, indent=1) + "\n", encoding="utf-8")
        files.commit()


# ----------------------------------------------------------------------------- merging


def _read_receipt(path: Path) -> dict[str, Any]:
    receipt = receipt_path(path)
    if not path.is_file():
        raise EmbedError(f"{path}: shard file not found")
    try:
        found: dict[str, Any] = json.loads(receipt.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise EmbedError(f"{receipt}: missing; it says which rows {path.name} holds, and merge needs it") from None
    except ValueError as error:
        raise EmbedError(f"{receipt}: not valid JSON ({error})") from None
    return found


def shard_files(output: Path) -> list[Path]:
    """The shard files of ``output`` beside it (``emb.shard-*-of-*.npy`` for ``emb.npy``), sorted:
    what :func:`merge_shards` merges when none are named."""
    return sorted(output.parent.glob(f"{output.stem}.shard-*-of-*{output.suffix}"))


def merge_shards(shards: Sequence[Path], output: Path, *, force: bool = False, wait: Wait = False) -> dict[str, Any]:
    """Interleave the N shard files of one run (``--shard I/N`` for every I) back into row
    order in ``output``, a block of rows at a time; returns the receipt written beside it.
    Holds ``output``'s lock, as :func:`embed_file` does.

    >>> merge_shards([Path("emb.shard-0-of-2.npy"), Path("emb.shard-1-of-2.npy")], Path("emb.npy"))  # doctest: +SKIP
    """
    if output.suffix.lower() not in (".npy", ".safetensors"):
        raise EmbedError(f"{output}: the output must end in .npy or .safetensors")
    with output_lock(output, wait=wait):
        _clean_after_kills(output)
        return _merge_locked(shards, output, force=force)


def _merge_locked(shards: Sequence[Path], output: Path, *, force: bool) -> dict[str, Any]:
    if (output.exists() or receipt_path(output).exists()) and not force:
        raise EmbedError(f"refusing to overwrite {output} (use --force)")
    if not shards:
        raise EmbedError("no shard files to merge")
    receipts = [_read_receipt(path) for path in shards]
    first = receipts[0]
    count = first["shard"][1]
    by_index: dict[int, tuple[Path, dict[str, Any]]] = {}
    for path, receipt in zip(shards, receipts):
        for key in ("input", "options", "dimension", "input_rows"):
            if receipt.get(key) != first.get(key):
                differences = (
                    _differences(first[key], receipt[key])
                    if isinstance(receipt.get(key), dict) and isinstance(first.get(key), dict)
                    else [f"{key} {first.get(key)!r} against {receipt.get(key)!r}"]
                )
                raise EmbedError(f"{path} is not from the same run as {shards[0]}: {'; '.join(differences)}")
        index, shard_count = receipt["shard"]
        if shard_count != count:
            raise EmbedError(f"{path} is shard {index} of {shard_count}, {shards[0]} one of {count}")
        if index in by_index:
            raise EmbedError(f"{path} and {by_index[index][0]} are both shard {index} of {count}")
        by_index[index] = (path, receipt)
    missing = [i for i in range(count) if i not in by_index]
    if missing:
        raise EmbedError(f"shards {missing} of {count} are missing (given: {', '.join(map(str, shards))})")
    readers = [EmbeddingRows(by_index[i][0]) for i in range(count)]
    for i, reader in enumerate(readers):
        if len(reader) != by_index[i][1]["rows"]:
            raise EmbedError(f"{by_index[i][0]} holds {len(reader)} rows, its receipt says {by_index[i][1]['rows']}")
    input_rows, dimension = first["input_rows"], first["dimension"]
    skipped = sorted((entry for i in range(count) for entry in by_index[i][1]["skipped"]), key=lambda e: e[0])
    skipped_rows = np.array([entry[0] for entry in skipped], dtype=np.int64)

    def blocks(block_rows: int = 16384) -> Iterator[np.ndarray]:
        cursors = [0] * count
        for start in range(0, input_rows, block_rows):
            rows = np.arange(start, min(start + block_rows, input_rows))
            kept = rows[~np.isin(rows, skipped_rows)]
            out = np.empty((len(kept), dimension), dtype="<f4")
            for i, reader in enumerate(readers):
                mine = kept[kept % count == i]
                if len(mine):
                    out[np.searchsorted(kept, mine)] = reader[cursors[i] : cursors[i] + len(mine)]
                    cursors[i] += len(mine)
            yield out

    receipt = {**first, "rows": input_rows - len(skipped), "skipped": skipped, "shard": [0, 1]}
    receipt.pop("rows_per_second", None)
    _assemble(output, blocks(), receipt)
    return receipt
