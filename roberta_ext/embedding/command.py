"""``roberta-ext embed``: sentence embeddings of a file of texts, streamed into an embedding file.

``roberta-ext embed MODEL --input FILE --output OUT.npy`` reads text (a text per line), JSONL
(``--field``) or TSV (``--column``) and writes row ``i`` = the embedding of data row ``i`` (line
``i + 1``, after a TSV's header), as ``.npy`` or ``.safetensors`` (:mod:`.files`), with
``OUT.npy.json`` beside it: what made it (model, input, options) and which lines were skipped.

How it runs (each point is a promise the tests check):

* **Streaming.** The input is read ``--chunk-rows`` rows at a time; each chunk is tokenized,
  sorted by length and embedded in batches of at most ``--max-tokens`` padded tokens
  (:class:`~roberta_ext.embedding.embedder.Embedder`, as ``hub.embed``), and written as one part.
  Memory holds one chunk, whatever the file's size.
* **Resumable.** Parts go to ``OUT.npy.parts/`` (``NNNNNNNN.npy`` + ``NNNNNNNN.json`` each,
  written atomically, and a ``manifest.json`` naming the input (path, size, modification time),
  the model and every option that changes the result). A run that stops (Ctrl-C, a crash, a
  kill) leaves its finished parts; the same command run again embeds only the rest, and
  refuses, naming the difference, when the input or an option changed. At the end the parts
  are assembled into ``OUT.npy`` (atomically) and removed.
* **Sharded.** ``--shard I/N`` (or torchrun's ``RANK``/``WORLD_SIZE``) embeds the rows ``i``
  with ``i % N == I`` into ``OUT.shard-I-of-N.npy``; ``roberta-ext embed merge`` interleaves the
  N shard files back into row order. Round robin rather than contiguous ranges: every shard
  gets the same mix of short and long rows, so they finish together.
* **Bad lines** (not UTF-8, not JSON, a missing field or column) stop the run with
  ``FILE:LINE: what is wrong``; with ``--skip-bad-lines`` they are counted, get no row, and are
  listed (row, line, problem) in ``OUT.npy.json``.
* **One run per output.** A run holds an exclusive lock on its output (:mod:`.locking`) from
  before the model loads to the end: a second run on the same output (the same shard) is
  refused at once, naming the process that holds it, or with ``--wait`` waits for it, then
  finds the output finished (refused without ``--overwrite``) or its parts to resume. Holding
  it, a run removes the temporaries a killed assembly left beside the output.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from .._io import AtomicFiles, atomic_write
from ..checkpoints import CheckpointError
from ..corpus.commands import positive_int, run_command
from ..corpus.reading import CorpusError, InputFile
from .embedder import DEFAULT_MAX_TOKENS, DEFAULT_MAX_TOKENS_CUDA, Embedder
from .files import RowReader, file_format, write_embeddings
from .locking import Wait, output_lock, remove_stale_temporaries
from .pooling import POOLING_MODES, check_modes

__all__ = ["DEFAULT_CHUNK_ROWS", "FAIL_AFTER_CHUNKS", "EmbedError", "embed_file", "embed_main", "merge_shards"]

PROG = "roberta-ext embed"
DEFAULT_CHUNK_ROWS = 8192
"""Rows per part: the unit of memory, of resumption and of length sorting."""
FAIL_AFTER_CHUNKS = "ROBERTA_EXT_EMBED_FAIL_AFTER_CHUNKS"
"""For tests: after writing this many parts, the process kills itself (SIGKILL: no cleanup runs)."""
MANIFEST = "manifest.json"
INPUT_FORMATS = ("text", "jsonl", "tsv")
DTYPES = ("float32", "bfloat16", "float16", "int8")
"""``--dtype`` choices: a torch dtype's name, or ``int8`` (``from_pretrained(..., dtype="int8")``: CPU only)."""


class EmbedError(CorpusError):
    """An input, an option or a model ``roberta-ext embed`` cannot work with; the message names it."""


class BadLine(Exception):
    """One data row that cannot be read; the caller adds the file and line."""


# ----------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class InputSpec:
    """Which file, in which format, and where its texts are (``fields``: JSONL keys or TSV
    columns, one or two: a pair)."""

    path: Path
    format: str
    fields: tuple[str, ...] = ()
    header: bool = True

    def identity(self) -> dict[str, Any]:
        """What a resumed run must find unchanged: the file (path, size, modification time) and how it is read."""
        info = self.path.stat()
        return {
            "path": str(self.path.resolve()),
            "size": info.st_size,
            "mtime_ns": info.st_mtime_ns,
            "format": self.format,
            "fields": list(self.fields),
            "header": self.header if self.format == "tsv" else None,
        }


@dataclass(frozen=True)
class Row:
    index: int  # 0-based data row
    line: int  # 1-based line number
    raw: bytes


def _strip_terminator(raw: bytes) -> bytes:
    if raw.endswith(b"\n"):
        raw = raw[:-1]
    return raw[:-1] if raw.endswith(b"\r") else raw


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        bad = raw[error.start : error.end]
        raise BadLine(f"not valid UTF-8 ({error.reason} at byte {error.start + 1}: {bad!r})") from None


class RowSource:
    """The data rows of an input, in order (a TSV's header read and checked first), and the
    parser that turns a row's bytes into its text or pair."""

    def __init__(self, spec: InputSpec) -> None:
        self.spec = spec
        self.name = str(spec.path)
        if not spec.path.is_file():
            raise EmbedError(f"{self.name}: input file not found (or not a file)")
        self.columns: list[int] = []
        if spec.format == "tsv":
            self.columns = self._tsv_columns()

    def _tsv_columns(self) -> list[int]:
        header: list[str] = []
        if self.spec.header:
            source = InputFile(self.spec.path)
            try:
                first = next(iter(source.lines()), None)
            finally:
                source.close()
            if first is None:
                raise EmbedError(f"{self.name}: empty file, but a TSV header line was expected (or --no-header)")
            try:
                header = _decode(_strip_terminator(first)).split("\t")
            except BadLine as error:
                raise EmbedError(f"{self.name}:1: header line {error}") from None
        columns = []
        for field in self.spec.fields:
            if field in header:
                columns.append(header.index(field))
            elif field.isdigit():
                columns.append(int(field))
            else:
                known = ", ".join(header) if header else "none: --no-header was given"
                raise EmbedError(f"{self.name}:1: no column {field!r} in the header (columns: {known})")
        return columns

    def rows(self) -> Iterator[Row]:
        source = InputFile(self.spec.path)
        try:
            skip = 1 if self.spec.format == "tsv" and self.spec.header else 0
            for line, raw in enumerate(source.lines(), start=1):
                if line > skip:
                    yield Row(line - skip - 1, line, raw)
        finally:
            source.close()

    def count(self) -> int:
        """Data rows in the file (a progress bar's total), counted without decoding."""
        return sum(1 for _ in self.rows())

    def text(self, row: Row) -> str | tuple[str, ...]:
        """The row's text (or pair); :class:`BadLine` when it has none."""
        line = _decode(_strip_terminator(row.raw))
        if self.spec.format == "text":
            return line
        if self.spec.format == "tsv":
            cells = line.split("\t")
            missing = [str(self.spec.fields[k]) for k, c in enumerate(self.columns) if c >= len(cells)]
            if missing:
                raise BadLine(f"has {len(cells)} tab-separated columns, no column {', '.join(missing)}")
            texts = tuple(cells[c] for c in self.columns)
        else:
            try:
                record = json.loads(line)
            except ValueError as error:
                raise BadLine(f"not valid JSON ({error})") from None
            if not isinstance(record, dict):
                raise BadLine(f"a JSON {type(record).__name__}, not an object")
            for field in self.spec.fields:
                if field not in record:
                    raise BadLine(f"no field {field!r} (fields: {', '.join(map(str, record)) or 'none'})")
                if not isinstance(record[field], str):
                    raise BadLine(f"field {field!r} is a JSON {type(record[field]).__name__}, not a string")
            texts = tuple(record[field] for field in self.spec.fields)
        return texts[0] if len(texts) == 1 else texts


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
            raise argparse.ArgumentTypeError(f"expected I/N (e.g. 0/4), got {text!r}") from None
        if not 0 <= index < count:
            raise argparse.ArgumentTypeError(f"shard I/N needs 0 <= I < N, got {text!r}")
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

    def record(self) -> dict[str, Any]:
        return {
            "model": self.model,
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


def _chunks(source: RowSource, shard: Shard, size: int) -> Iterator[list[Row]]:
    chunk: list[Row] = []
    for row in source.rows():
        if shard.owns(row.index):
            chunk.append(row)
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


def _clean_after_kills(target: Path) -> None:
    """Remove what a run killed while assembling ``target`` left (its lock held: none is writing)."""
    remove_stale_temporaries(target)
    remove_stale_temporaries(receipt_path(target))


def embed_file(
    embedder: Embedder,
    spec: InputSpec,
    output: Path,
    options: Options,
    *,
    shard: Shard = Shard(),
    overwrite: bool = False,
    progress: bool = False,
    wait: Wait = False,
) -> dict[str, Any]:
    """Embed the rows of ``spec`` that ``shard`` owns into ``shard.output(output)``, resuming
    from its parts folder; returns the receipt written beside it. Holds the output's lock
    (:func:`~.locking.output_lock`): refused while another run writes it, unless ``wait``
    (:data:`~.locking.Wait`).

    >>> embed_file(embedder, InputSpec(Path("texts.txt"), "text"), Path("emb.npy"), options)  # doctest: +SKIP
    """
    target = _target(output, shard)
    with output_lock(target, wait=wait):
        return _embed_locked(embedder, spec, target, options, shard=shard, overwrite=overwrite, progress=progress)


def _embed_locked(
    embedder: Embedder,
    spec: InputSpec,
    target: Path,
    options: Options,
    *,
    shard: Shard,
    overwrite: bool,
    progress: bool,
) -> dict[str, Any]:
    """:func:`embed_file` into ``target``, whose lock the caller holds."""
    _clean_after_kills(target)
    parts_folder = parts_path(target)
    if (target.exists() or receipt_path(target).exists()) and not parts_folder.exists() and not overwrite:
        raise EmbedError(f"{target} exists; refusing to overwrite it (use --overwrite)")
    source = RowSource(spec)
    manifest = {
        "input": spec.identity(),
        "options": options.record(),
        "shard": [shard.index, shard.count],
        "dimension": embedder.dimension,
    }
    parts = Parts(parts_folder, manifest)
    input_rows = source.count()
    chunks = (shard.rows_of(input_rows) + options.chunk_rows - 1) // options.chunk_rows
    records: list[dict[str, Any]] = []
    fail_after = _fail_after()
    written = 0
    started, embedded = time.perf_counter(), 0
    with tqdm(
        total=shard.rows_of(input_rows),
        unit="rows",
        desc="embed" if shard.count == 1 else f"embed shard {shard.index}/{shard.count}",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    ) as bar:
        for number, chunk in enumerate(_chunks(source, shard, options.chunk_rows)):
            record = parts.done(number)
            if record is not None:
                if record["skipped"] and not options.skip_bad_lines:
                    row, line, problem = record["skipped"][0]
                    raise EmbedError(
                        f"{source.name}:{line}: {problem}; the interrupted run in {parts_folder} skipped it "
                        "(--skip-bad-lines): resume with --skip-bad-lines, or delete the folder to start over"
                    )
                records.append(record)
                bar.update(len(chunk))
                continue
            texts: list[str | tuple[str, ...]] = []
            skipped: list[list[Any]] = []
            for row in chunk:
                try:
                    texts.append(source.text(row))
                except BadLine as error:
                    if not options.skip_bad_lines:
                        raise EmbedError(
                            f"{source.name}:{row.line}: {error} (--skip-bad-lines skips such lines)"
                        ) from None
                    skipped.append([row.index, row.line, str(error)])
                    bar.update(1)
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
    if len(records) != chunks:
        raise EmbedError(f"{spec.path}: read {len(records)} chunks of rows, expected {chunks}: did the file change?")
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


def merge_shards(
    shards: Sequence[Path], output: Path, *, overwrite: bool = False, wait: Wait = False
) -> dict[str, Any]:
    """Interleave the N shard files of one run (``--shard I/N`` for every I) back into row
    order in ``output``, a block of rows at a time; returns the receipt written beside it.
    Holds ``output``'s lock, as :func:`embed_file` does.

    >>> merge_shards([Path("emb.shard-0-of-2.npy"), Path("emb.shard-1-of-2.npy")], Path("emb.npy"))  # doctest: +SKIP
    """
    if output.suffix.lower() not in (".npy", ".safetensors"):
        raise EmbedError(f"{output}: the output must end in .npy or .safetensors")
    with output_lock(output, wait=wait):
        _clean_after_kills(output)
        return _merge_locked(shards, output, overwrite=overwrite)


def _merge_locked(shards: Sequence[Path], output: Path, *, overwrite: bool) -> dict[str, Any]:
    if (output.exists() or receipt_path(output).exists()) and not overwrite:
        raise EmbedError(f"{output}: exists; refusing to overwrite it (use --overwrite)")
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
    readers = [RowReader(by_index[i][0]) for i in range(count)]
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


# ----------------------------------------------------------------------------- command line


def _input_format(path: Path, given: str | None) -> str:
    if given is not None:
        return given
    suffix = path.suffix.lower()
    return "jsonl" if suffix in (".jsonl", ".json", ".ndjson") else "tsv" if suffix == ".tsv" else "text"


def _device(given: str | None) -> str:
    """``--device``, or cuda (torchrun's ``LOCAL_RANK``-th GPU) when there is one, else cpu."""
    local_rank = os.environ.get("LOCAL_RANK")
    if given is None:
        given = "cuda" if torch.cuda.is_available() else "cpu"
    if given == "cuda" and local_rank is not None:
        return f"cuda:{int(local_rank)}"
    return given


def _pooling(text: str) -> tuple[str, ...]:
    try:
        return check_modes(text.split(","), "--pooling")
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _add_wait_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--wait",
        action="store_true",
        help="when another run is writing the output, wait for it to finish (default: stop at once, naming it)",
    )


def _waiting(prog: str, wait: bool) -> Wait:
    """``--wait``: wait, saying for whom on stderr."""
    return (lambda message: print(f"{prog}: {message}", file=sys.stderr, flush=True)) if wait else False


def _merge_main(argv: Sequence[str]) -> int:
    prog = f"{PROG} merge"
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Interleave the shard files of one sharded run (--shard I/N for every I) back into row order.",
        epilog=f"example: {prog} emb.shard-0-of-2.npy emb.shard-1-of-2.npy --output emb.npy "
        f"(or just: {prog} --output emb.npy, which finds emb.shard-*-of-*.npy)",
    )
    parser.add_argument(
        "shards", nargs="*", type=Path, metavar="SHARD", help="shard files (default: OUTPUT's shard-*-of-* siblings)"
    )
    parser.add_argument("--output", required=True, type=Path, metavar="FILE", help=".npy or .safetensors to write")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    _add_wait_argument(parser)
    args = parser.parse_args(argv)

    def body() -> int:
        pattern = f"{args.output.stem}.shard-*-of-*{args.output.suffix}"
        shards = list(args.shards) or sorted(args.output.parent.glob(pattern))
        if not shards:
            raise EmbedError(f"no shard files given, and none named {args.output.parent / pattern}")
        receipt = merge_shards(shards, args.output, overwrite=args.overwrite, wait=_waiting(prog, args.wait))
        print(
            f"{prog}: {len(shards)} shards -> {args.output}: {receipt['rows']} rows x {receipt['dimension']}"
            + (f"; {len(receipt['skipped'])} bad lines had no row" if receipt["skipped"] else ""),
            file=sys.stderr,
        )
        return 0

    return run_command(prog, body)


def embed_main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext embed``: a file of texts -> an embedding file (``merge`` as first argument
    merges shard files).

    >>> embed_main(["my-model", "--input", "texts.txt", "--output", "emb.npy"])  # doctest: +SKIP
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "merge":
        return _merge_main(argv[1:])
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Sentence embeddings of every row of a file: text (one per line), JSONL (--field) or TSV (--column) in; "
            ".npy or .safetensors out, row i = data row i, with OUTPUT.json beside it (model, input, options, skipped "
            "lines). Streams the file in chunks; an interrupted run resumes where it stopped when run again; "
            f"--shard I/N (or torchrun's RANK/WORLD_SIZE) embeds every N-th row, and '{PROG} merge' joins the shards."
        ),
        epilog=(
            f"examples: {PROG} my-model --input texts.txt --output emb.npy; "
            f"{PROG} my-model --input qa.jsonl --field question --output q.safetensors --dtype bfloat16; "
            f"{PROG} my-model --input texts.txt --output emb.npy --shard 0/2 (and 1/2), then "
            f"{PROG} merge --output emb.npy"
        ),
    )
    parser.add_argument(
        "model", metavar="MODEL", help="a model folder: sentence-transformers, transformers or fairseq (with dict.txt)"
    )
    parser.add_argument("--input", required=True, type=Path, metavar="FILE", help="the texts")
    parser.add_argument("--output", required=True, type=Path, metavar="FILE", help=".npy or .safetensors to write")
    parser.add_argument(
        "--format",
        choices=INPUT_FORMATS,
        help="how to read --input (default: by its suffix: .jsonl/.json jsonl, .tsv tsv, else text)",
    )
    parser.add_argument(
        "--field",
        action="append",
        default=[],
        metavar="NAME",
        help="JSONL: the key holding the text (twice: a pair of texts)",
    )
    parser.add_argument(
        "--column",
        action="append",
        default=[],
        metavar="NAME|INDEX",
        help="TSV: the column holding the text, by header name or 0-based index (twice: a pair)",
    )
    parser.add_argument("--no-header", action="store_true", help="TSV: the first line is data, not column names")
    parser.add_argument(
        "--pooling",
        type=_pooling,
        metavar="MODE[,MODE]",
        help=f"{', '.join(POOLING_MODES)} (several: concatenated; default: the model's own, else mean)",
    )
    normalize = parser.add_mutually_exclusive_group()
    normalize.add_argument("--normalize", dest="normalize", action="store_true", default=None, help="L2-normalise")
    normalize.add_argument("--no-normalize", dest="normalize", action="store_false", help="do not L2-normalise")
    parser.add_argument(
        "--max-length",
        type=positive_int,
        metavar="N",
        help="truncate inputs to N tokens (default: the model's max_seq_length, else its max_positions)",
    )
    prompt = parser.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", metavar="TEXT", help="prepend TEXT to every text")
    prompt.add_argument("--prompt-name", metavar="NAME", help="prepend the model's prompt NAME")
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        metavar="N",
        help=f"padded tokens per batch (default: {DEFAULT_MAX_TOKENS}, on a GPU {DEFAULT_MAX_TOKENS_CUDA})",
    )
    parser.add_argument(
        "--chunk-rows",
        type=positive_int,
        default=DEFAULT_CHUNK_ROWS,
        metavar="N",
        help=f"rows per part: what is kept of an interrupted run, and what is held in memory (default: "
        f"{DEFAULT_CHUNK_ROWS})",
    )
    parser.add_argument(
        "--device", metavar="DEVICE", help="cpu, cuda, cuda:1, ... (default: cuda (LOCAL_RANK's) if there is one)"
    )
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default="float32",
        help="the model's dtype; int8: its linear layers in int8 on the CPU, about 2x fp32 (output: float32)",
    )
    parser.add_argument(
        "--shard",
        type=Shard.parse,
        metavar="I/N",
        help="embed rows i with i %% N == I into OUTPUT.shard-I-of-N (default: torchrun's RANK/WORLD_SIZE, else all)",
    )
    parser.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="skip lines that cannot be read (not UTF-8, not JSON, no such field): they get no row and are listed "
        "in OUTPUT.json",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    _add_wait_argument(parser)
    args = parser.parse_args(argv)
    input_format = _input_format(args.input, args.format)
    fields = tuple(args.field if input_format == "jsonl" else args.column)
    if input_format == "jsonl" and not args.field:
        parser.error("a JSONL input needs --field (the key holding the text)")
    if input_format == "tsv" and not args.column:
        parser.error("a TSV input needs --column (the column holding the text)")
    if input_format == "text" and (args.field or args.column):
        parser.error("--field and --column are for JSONL and TSV inputs (see --format)")
    if len(fields) > 2:
        parser.error("--field/--column take one text or a pair (given at most twice)")

    def body() -> int:
        shard = args.shard or Shard.from_environment()
        spec = InputSpec(args.input, input_format, fields, not args.no_header)
        if not spec.path.is_file():
            raise EmbedError(f"{spec.path}: input file not found (or not a file)")
        target = _target(args.output, shard)
        # The lock before the model loads: a second run on this output stops at once.
        with output_lock(target, wait=_waiting(PROG, args.wait)):
            return run_locked(shard, spec, target)

    def run_locked(shard: Shard, spec: InputSpec, target: Path) -> int:
        from ..loading import from_pretrained

        try:
            # int8 runs on the CPU: without --device, it takes the CPU even where a GPU is.
            device = "cpu" if args.dtype == "int8" and args.device is None else _device(args.device)
            dtype = args.dtype if args.dtype == "int8" else getattr(torch, args.dtype)
            hub = from_pretrained(args.model, device=device, dtype=dtype)
            embedder = Embedder.for_hub(
                hub,
                pooling=args.pooling,
                normalize=args.normalize,
                max_length=args.max_length,
                prompt=args.prompt,
                prompt_name=args.prompt_name,
                max_tokens=args.max_tokens,
            )
        except (CheckpointError, KeyError, ValueError) as error:  # a model or an option: one line, naming it
            message = error.args[0] if isinstance(error, KeyError) and error.args else error
            raise EmbedError(f"{args.model}: {message}") from None
        options = Options(
            model=_model_identity(args.model),
            pooling=args.pooling,
            normalize=args.normalize,
            max_length=args.max_length,
            prompt=args.prompt,
            prompt_name=args.prompt_name,
            dtype=args.dtype,
            skip_bad_lines=args.skip_bad_lines,
            chunk_rows=args.chunk_rows,
        )
        try:
            receipt = _embed_locked(
                embedder, spec, target, options, shard=shard, overwrite=args.overwrite, progress=sys.stderr.isatty()
            )
        except KeyboardInterrupt:
            print(
                f"\n{PROG}: interrupted; the finished chunks are kept in {parts_path(target)}: run the same command "
                "again to resume",
                file=sys.stderr,
            )
            return 130
        rate = receipt.get("rows_per_second")
        message = f"{PROG}: {receipt['rows']} rows x {receipt['dimension']} -> {target}"
        if rate:
            message += f" ({rate:.0f} rows/s)"
        if receipt["skipped"]:
            first = receipt["skipped"][0]
            message += (
                f"; skipped {len(receipt['skipped'])} bad lines (first: {spec.path}:{first[1]}: {first[2]}), "
                f"listed in {receipt_path(target)}"
            )
        print(message, file=sys.stderr)
        return 0

    return run_command(PROG, body)
