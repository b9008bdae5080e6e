"""Embedding files, written a block of rows at a time: ``.npy`` and safetensors.

Both formats put a small header before the raw rows, so a file of any size is written with
the memory of one block: the header first (the row count is known before the first row is
written), then each block's bytes. ``.npy`` is numpy's format (``np.load(path)``, or
``np.load(path, mmap_mode="r")`` to read rows without loading them all); a ``.safetensors``
file holds one float32 tensor named ``embeddings`` and the string ``metadata`` given
(``safetensors.torch.load_file(path)["embeddings"]``). Files are written atomically
(:func:`roberta_ext.atomic.atomic_path`): whole, or not at all.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = ["FORMATS", "TENSOR_NAME", "RowReader", "file_format", "write_embeddings"]

FORMATS = {".npy": "npy", ".safetensors": "safetensors"}
"""Output suffix -> format."""

TENSOR_NAME = "embeddings"
"""The tensor's name in a safetensors file."""

_DTYPE = np.dtype("<f4")


def file_format(path: str | os.PathLike[str]) -> str:
    """``"npy"`` or ``"safetensors"``, from the file's suffix; ``ValueError`` for any other.

    >>> file_format("out/emb.safetensors")
    'safetensors'
    """
    suffix = Path(path).suffix.lower()
    if suffix not in FORMATS:
        raise ValueError(f"{str(path)!r}: an embedding file ends in .npy or .safetensors")
    return FORMATS[suffix]


def _write_header(file: IO[Any], kind: str, rows: int, dimension: int, metadata: Mapping[str, str]) -> None:
    if kind == "npy":
        np.lib.format.write_array_header_1_0(
            file, {"descr": np.lib.format.dtype_to_descr(_DTYPE), "fortran_order": False, "shape": (rows, dimension)}
        )
        return
    header: dict[str, Any] = {
        TENSOR_NAME: {"dtype": "F32", "shape": [rows, dimension], "data_offsets": [0, rows * dimension * 4]}
    }
    if metadata:
        header["__metadata__"] = dict(metadata)
    encoded = json.dumps(header, separators=(",", ":")).encode("utf-8")
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    file.write(struct.pack("<Q", len(encoded)))
    file.write(encoded)


def write_embeddings(
    path: str | os.PathLike[str],
    blocks: Iterable[np.ndarray],
    *,
    rows: int,
    dimension: int,
    metadata: Mapping[str, str] | None = None,
    file: IO[Any] | None = None,
) -> None:
    """Write ``rows`` x ``dimension`` float32 embeddings, given as consecutive ``blocks`` of
    rows, to ``path`` (``.npy`` or ``.safetensors``; ``metadata`` goes into a safetensors
    header). The blocks must add up to ``rows`` rows, or nothing is written. With ``file``,
    write into that open binary file instead (the caller makes it atomic); else the file is
    written atomically.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "emb.npy")
    >>> write_embeddings(path, [np.ones((2, 3)), np.zeros((1, 3))], rows=3, dimension=3)
    >>> np.load(path).sum(axis=1).tolist()
    [3.0, 3.0, 0.0]
    """
    kind = file_format(path)
    if file is None:
        from ..atomic import atomic_write

        with atomic_write(path, "wb") as out:
            write_embeddings(path, blocks, rows=rows, dimension=dimension, metadata=metadata, file=out)
        return
    _write_header(file, kind, rows, dimension, metadata or {})
    written = 0
    for block in blocks:
        block = np.ascontiguousarray(block, dtype=_DTYPE)
        if block.ndim != 2 or block.shape[1] != dimension:
            raise ValueError(f"{str(path)!r}: a block of shape {block.shape} in a file of {dimension}-wide rows")
        written += block.shape[0]
        if written > rows:
            raise ValueError(f"{str(path)!r}: more than the {rows} rows announced")
        file.write(block.tobytes())
    if written != rows:
        raise ValueError(f"{str(path)!r}: {written} rows written of the {rows} announced")


class RowReader:
    """Rows of an embedding file, read a slice at a time (``reader[a:b]`` -> float32 array), its
    shape in :attr:`shape`, a safetensors file's metadata in :attr:`metadata`.

    >>> import tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "emb.safetensors")
    >>> write_embeddings(path, [np.arange(6).reshape(3, 2)], rows=3, dimension=2, metadata={"k": "v"})
    >>> reader = RowReader(path)
    >>> reader.shape, reader[1:3].tolist(), reader.metadata
    ((3, 2), [[2.0, 3.0], [4.0, 5.0]], {'k': 'v'})
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.metadata: dict[str, str] = {}
        if file_format(path) == "npy":
            array = np.load(self.path, mmap_mode="r")
            self._get = array.__getitem__
            shape = array.shape
        else:
            from safetensors import safe_open

            handle = safe_open(str(self.path), framework="numpy")
            self.metadata = dict(handle.metadata() or {})
            tensor = handle.get_slice(TENSOR_NAME)
            self._get = tensor.__getitem__
            shape = tuple(tensor.get_shape())
        if len(shape) != 2:
            raise ValueError(f"{str(path)!r}: expected a 2-D array of embeddings, got shape {shape}")
        self.shape: tuple[int, int] = (int(shape[0]), int(shape[1]))

    def __getitem__(self, rows: slice) -> np.ndarray:
        if len(range(*rows.indices(self.shape[0]))) == 0:  # safetensors refuses an empty slice of 0 rows
            return np.empty((0, self.shape[1]), dtype=_DTYPE)
        return np.asarray(self._get(rows), dtype=_DTYPE)

    def __len__(self) -> int:
        return self.shape[0]
