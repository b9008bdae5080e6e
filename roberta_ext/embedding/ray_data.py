"""Batch embedding past one machine: a Ray Data pipeline over the same
:class:`~roberta_ext.embedding.embedder.Embedder` as ``roberta-ext embed`` (the same length rule,
pooling, normalisation and prompts), so that its rows equal the command's.

* :func:`read_texts` — text, JSONL or TSV files read under :mod:`roberta_ext.corpus.rows`' rules
  (each text stripped, CRLF and lone CR line ends, an empty line an empty text, a bad line an
  error naming ``FILE:LINE``), one Ray read task per file; Parquet files read by Ray, their texts
  stripped the same way. Every row keeps its other columns (``path`` and ``row``, the 0-based data
  row of its file, for the files this module reads).
* :func:`embed_dataset` — ``map_batches`` with :class:`EmbedBatch`, a callable class: each Ray
  actor makes one embedder (loads the model once) and embeds a batch at a time; the text columns
  are replaced by ``embedding`` (float32 rows).
* :func:`write_embedding_file` — the rows, in input order, into one ``.npy`` or ``.safetensors``
  file with ``OUT.npy.json`` beside it, as ``roberta-ext embed`` writes them (the driver writes
  while the cluster embeds, a block at a time); or Ray's own ``dataset.write_parquet(folder)``
  for Parquet shards written by the workers, each row carrying ``path`` and ``row``.

Ray is an optional extra (``pip install roberta_ext[ray]``): this module imports it only when
called. The model is made by a function the caller gives (``make_embedder``), called once in each
actor: it is pickled to the cluster, so it must load from files every node can read.

>>> from roberta_ext.embedding.ray_data import EMBEDDING
>>> EMBEDDING
'embedding'
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..atomic import AtomicFiles
from ..corpus.rows import BadRow, Columns, RowReader, input_format
from .embedder import Embedder
from .files import file_format, write_embeddings
from .locking import output_lock
from .stream import EmbedError, receipt_path

if TYPE_CHECKING:
    import pyarrow
    import ray.data

__all__ = [
    "EMBEDDING",
    "PATH",
    "ROW",
    "EmbedBatch",
    "embed_dataset",
    "read_texts",
    "text_fields",
    "write_embedding_file",
]

EMBEDDING = "embedding"
"""The column of the embeddings (float32 rows of :attr:`Embedder.dimension` values)."""
PATH = "path"
"""The column naming the file a row was read from."""
ROW = "row"
"""The column holding a row's 0-based data row in its file: what row ``i`` of ``roberta-ext embed``'s output is."""

BLOCK_ROWS = 4096
"""Rows per block a read task hands on: small enough that embedding starts before a big file is read."""


def text_fields(format: str, fields: Sequence[str] = ()) -> tuple[str, ...]:
    """The columns holding the text (and its pair) for ``format``: ``("text",)`` for a text file,
    else ``fields`` (one, or two for pairs); ``ValueError`` naming what is missing.

    >>> text_fields("text"), text_fields("jsonl", ["question", "answer"])
    (('text',), ('question', 'answer'))
    """
    if format == "text":
        if fields:
            raise ValueError("a text input has no fields: each line is a text")
        return ("text",)
    if not 1 <= len(fields) <= 2:
        raise ValueError(f"a {format} input needs one field holding the text (two for pairs), got {list(fields)}")
    return tuple(fields)


def read_texts(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    format: str | None = None,
    fields: Sequence[str] = (),
    header: bool | None = None,
    read_cpus: float = 0.0,
) -> ray.data.Dataset:
    """A Ray dataset of the rows of ``paths`` (files or folders): ``format`` ``text``, ``jsonl``
    or ``tsv`` (default: by the first path's suffix, as ``roberta-ext embed`` chooses) read by
    :class:`~roberta_ext.corpus.rows.RowReader`, or ``parquet`` read by Ray (all columns kept).
    ``fields``: the JSON keys, TSV columns or Parquet columns holding the text (two: a pair).
    ``read_cpus``: the CPUs a read task asks Ray for (none by default: see the comment below).

    >>> dataset = read_texts("texts.txt")               # doctest: +SKIP
    >>> dataset.take(1)                                 # doctest: +SKIP
    [{'path': '/data/texts.txt', 'row': 0, 'line': 1, 'text': 'Hello world!'}]
    """
    import ray.data

    listed = [os.fspath(p) for p in ([paths] if isinstance(paths, (str, os.PathLike)) else paths)]
    if not listed:
        raise ValueError("no input paths given")
    if format is None:
        format = "parquet" if Path(listed[0]).suffix.lower() == ".parquet" else input_format(listed[0])
    names = text_fields(format, fields)
    # Reading takes no CPU of its own: the actors embedding take the CPUs, and a read task
    # waiting for one they hold would wait for ever (2 actors on a 2-CPU node did).
    if format == "parquet":
        return ray.data.read_parquet(listed, num_cpus=read_cpus).map_batches(
            lambda table: _stripped(table, names), batch_format="pyarrow", num_cpus=read_cpus
        )
    columns = None if format == "text" else Columns(names)
    return ray.data.read_datasource(_rows_source(listed, format, columns, header), num_cpus=read_cpus)


def _stripped(table: pyarrow.Table, names: tuple[str, ...]) -> pyarrow.Table:
    """``table`` with its text columns stripped (as every reader of the package strips a text);
    ``EmbedError`` naming a column that is missing or holds something else than strings."""
    import pyarrow
    import pyarrow.compute as pc

    for name in names:
        if name not in table.column_names:
            raise EmbedError(f"no column {name!r} in the Parquet input; it has {table.column_names}")
        column = table[name]
        if not (pyarrow.types.is_string(column.type) or pyarrow.types.is_large_string(column.type)):
            raise EmbedError(f"Parquet column {name!r} is {column.type}, not strings")
        if column.null_count:
            raise EmbedError(f"Parquet column {name!r} has {column.null_count} null values; a row needs a text")
        table = table.set_column(table.column_names.index(name), name, pc.utf8_trim_whitespace(column))
    return table


def _rows_source(paths: list[str], format: str, columns: Columns | None, header: bool | None) -> Any:
    """A Ray file datasource whose read task for a file yields its rows as
    :class:`~roberta_ext.corpus.rows.RowReader` reads them, :data:`BLOCK_ROWS` at a time."""
    from ray.data.datasource import FileBasedDatasource

    class TextRows(FileBasedDatasource):
        def _read_stream(self, f: pyarrow.NativeFile, path: str) -> Iterator[pyarrow.Table]:
            # The reader opens the file itself (the files must be where every node can read
            # them): its line rules are those of `roberta-ext embed`, CRLF and lone CR included.
            yield from _row_blocks(RowReader(path, format=format, columns=columns, header=header), path)

    return TextRows(paths)


def _row_blocks(reader: RowReader, path: str) -> Iterator[pyarrow.Table]:
    import pyarrow

    names = ("text",) if reader.columns is None else reader.columns.texts
    block: dict[str, list[Any]] = {PATH: [], ROW: [], "line": [], **{name: [] for name in names}}
    yielded = False
    for line in reader.lines():
        try:
            row = reader.parse(line)
        except BadRow as error:  # the message is FILE:LINE: problem
            raise EmbedError(f"{error} (roberta-ext embed --skip-bad-lines can skip such lines)") from None
        block[PATH].append(path)
        block[ROW].append(row.index)
        block["line"].append(row.line)
        for name, text in zip(names, row.texts):
            block[name].append(text)
        if len(block[ROW]) == BLOCK_ROWS:
            yield pyarrow.table(block)
            block, yielded = {name: [] for name in block}, True
    if block[ROW] or not yielded:  # an empty file is a block of no rows, with its columns
        yield pyarrow.table(block, schema=_schema(names))


def _schema(names: Sequence[str]) -> pyarrow.Schema:
    import pyarrow

    fields = [(PATH, pyarrow.string()), (ROW, pyarrow.int64()), ("line", pyarrow.int64())]
    return pyarrow.schema(fields + [(name, pyarrow.string()) for name in names])


class EmbedBatch:
    """The callable class ``map_batches`` runs in each Ray actor: ``make_embedder()`` is called
    once per actor (loading the model there), then each batch's texts (``fields``: the text
    column, and its pair's) are embedded; the text columns are replaced by :data:`EMBEDDING`
    (float32, N x :attr:`Embedder.dimension`), the other columns kept. ``threads``: torch's CPU
    threads in the actor (default: torch's choice).

    >>> embed = EmbedBatch(lambda: embedder, ("text",))              # doctest: +SKIP
    >>> embed({"row": np.array([0]), "text": np.array(["Hi!"])})     # doctest: +SKIP
    {'row': array([0]), 'embedding': array([[...]], dtype=float32)}
    """

    def __init__(
        self, make_embedder: Callable[[], Embedder], fields: Sequence[str] = ("text",), threads: int | None = None
    ) -> None:
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self.embedder = make_embedder()
        self.fields = tuple(fields)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        columns = [[str(text) for text in batch[name]] for name in self.fields]
        items: list[str | tuple[str, ...]] = list(columns[0]) if len(columns) == 1 else list(zip(*columns))
        out = {name: values for name, values in batch.items() if name not in self.fields}
        out[EMBEDDING] = self.embedder.embed(items).cpu().numpy().astype(np.float32, copy=False)  # (N, D)
        return out


def embed_dataset(
    dataset: ray.data.Dataset,
    make_embedder: Callable[[], Embedder],
    *,
    fields: Sequence[str] = ("text",),
    actors: int = 1,
    cpus_per_actor: float = 1.0,
    gpus_per_actor: float = 0.0,
    batch_rows: int = 1024,
) -> ray.data.Dataset:
    """``dataset`` with its text columns (``fields``) replaced by :data:`EMBEDDING`: ``actors``
    Ray actors (each with ``cpus_per_actor`` CPUs, as many torch threads, and ``gpus_per_actor``
    GPUs) each make an embedder with ``make_embedder`` and embed ``batch_rows`` rows at a time
    (the embedder sorts a batch by length and cuts it by its token budget, as ``roberta-ext
    embed`` does a chunk). Lazy, as every Ray dataset: nothing runs until it is read or written.
    Rows stay in input order (the dataset's ``preserve_order`` is set).

    >>> embedded = embed_dataset(read_texts("texts.txt"), make_embedder, actors=4)   # doctest: +SKIP
    >>> embedded.write_parquet("embeddings/")                                         # doctest: +SKIP
    """
    from ray.data import ActorPoolStrategy

    if actors < 1 or batch_rows < 1:
        raise ValueError(f"actors and batch_rows must be >= 1, got {actors} and {batch_rows}")
    dataset.context.execution_options.preserve_order = True
    threads = max(1, int(cpus_per_actor))
    return dataset.map_batches(
        EmbedBatch,
        fn_constructor_args=(make_embedder, tuple(fields), threads),
        batch_size=batch_rows,
        batch_format="numpy",
        compute=ActorPoolStrategy(size=actors),
        num_cpus=cpus_per_actor,
        num_gpus=gpus_per_actor,
    )


def write_embedding_file(
    embedded: ray.data.Dataset, output: Path, *, rows: int, record: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Write the :data:`EMBEDDING` rows of ``embedded`` (``rows`` of them: count the input, not
    the embedded dataset, which would embed it all once more), in order, to ``output``
    (``.npy`` or ``.safetensors``) with its receipt ``OUT.json`` beside it, both atomically and
    under the output's lock, as ``roberta-ext embed`` writes them; returns the receipt
    (``record``'s entries, ``rows``, ``dimension``, ``dtype``, ``rows_per_second``).

    >>> source = read_texts("texts.txt")                                        # doctest: +SKIP
    >>> embedded = embed_dataset(source, make_embedder)                         # doctest: +SKIP
    >>> write_embedding_file(embedded, Path("emb.npy"), rows=source.count())    # doctest: +SKIP
    """
    output = Path(output)
    kind = file_format(output)
    with output_lock(output):
        started = time.perf_counter()
        batches = iter(embedded.iter_batches(batch_format="numpy", batch_size=None))  # one run of the pipeline
        # The header comes first and says the width: the first rows tell it.
        first = next((batch[EMBEDDING] for batch in batches if len(batch[EMBEDDING])), None)
        if first is None and rows:
            raise EmbedError(f"{output}: the pipeline gave no rows, {rows} were expected")
        dimension = 0 if first is None else int(first.shape[1])
        receipt = {**(record or {}), "rows": rows, "dimension": dimension, "dtype": "float32", "engine": "ray"}

        def blocks() -> Iterator[np.ndarray]:
            if first is not None:
                yield first
            for batch in batches:
                yield batch[EMBEDDING]

        output.parent.mkdir(parents=True, exist_ok=True)
        metadata = {"roberta_ext": json.dumps(receipt)} if kind == "safetensors" else None
        with AtomicFiles() as files:
            with open(files.temporary(output), "wb") as file:
                write_embeddings(output, blocks(), rows=rows, dimension=dimension, metadata=metadata, file=file)
            seconds = time.perf_counter() - started
            receipt["rows_per_second"] = rows / seconds if seconds > 0 else None
            files.temporary(receipt_path(output)).write_text(json.dumps(receipt, indent=1) + "\n", encoding="utf-8")
            files.commit()
    return receipt
