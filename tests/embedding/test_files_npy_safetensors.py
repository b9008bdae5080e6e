"""Embedding files written a block at a time (:mod:`roberta_ext.embedding.files`) against the
formats' own writers and readers: ``np.save``'s bytes for ``.npy``, safetensors' own
``save``/``load`` and its header for ``.safetensors``; the messages of every refusal, and that a
refused write leaves nothing behind."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import load_file
from safetensors.numpy import save as safetensors_save

from roberta_ext.embedding.files import FORMATS, TENSOR_NAME, RowReader, file_format, write_embeddings

ROWS = np.arange(35, dtype=np.float64).reshape(7, 5) / 4 - 3
"""7 rows of 5, float64 (written as float32), negative and fractional values."""


def blocks(array: np.ndarray, *sizes: int) -> list[np.ndarray]:
    """``array`` cut into consecutive blocks of these row counts."""
    return np.split(array, np.cumsum(sizes)[:-1])


def npy_bytes(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def safetensors_header(path: Path) -> tuple[int, dict]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return length, json.loads(data[8 : 8 + length])


def test_formats_and_tensor_name():
    assert FORMATS == {".npy": "npy", ".safetensors": "safetensors"}
    assert TENSOR_NAME == "embeddings"


@pytest.mark.parametrize(
    ("path", "kind"),
    [("emb.npy", "npy"), ("out/EMB.NPY", "npy"), ("a.b.safetensors", "safetensors"), ("x.SafeTensors", "safetensors")],
)
def test_file_format_from_the_suffix_in_any_case(path, kind):
    assert file_format(path) == kind
    assert file_format(Path(path)) == kind


@pytest.mark.parametrize("path", ["emb.txt", "emb", "emb.npy.json", "npy", Path("out/emb.pt")])
def test_file_format_refuses_other_suffixes_naming_the_file(path):
    with pytest.raises(ValueError) as caught:
        file_format(path)
    assert str(caught.value) == f"{str(path)!r}: an embedding file ends in .npy or .safetensors"


@pytest.mark.parametrize("sizes", [(7,), (3, 4), (1, 0, 5, 1)], ids=["one", "two", "with-empty"])
def test_npy_is_byte_for_byte_what_np_save_writes(tmp_path, sizes):
    path = tmp_path / "emb.npy"
    write_embeddings(path, blocks(ROWS, *sizes), rows=7, dimension=5)
    expected = ROWS.astype(np.float32)
    assert path.read_bytes() == npy_bytes(expected)
    loaded = np.load(path)
    assert loaded.dtype == np.float32 and np.array_equal(loaded, expected)


def test_safetensors_loads_as_safetensors_own_file(tmp_path):
    path = tmp_path / "emb.safetensors"
    metadata = {"model": "roberta", "rows": "7"}
    write_embeddings(path, blocks(ROWS, 2, 5), rows=7, dimension=5, metadata=metadata)
    expected = ROWS.astype(np.float32)
    loaded = load_file(str(path))
    assert list(loaded) == ["embeddings"]
    assert loaded["embeddings"].dtype == np.float32 and np.array_equal(loaded["embeddings"], expected)
    with safe_open(str(path), framework="numpy") as handle:
        assert handle.metadata() == metadata
    # The header, as safetensors writes it: its length, then JSON padded with spaces so that the
    # data starts 8-byte aligned; the data is the rows' little-endian float32 bytes.
    length, header = safetensors_header(path)
    assert length % 8 == 0
    assert header == {
        "__metadata__": metadata,
        "embeddings": {"dtype": "F32", "shape": [7, 5], "data_offsets": [0, 7 * 5 * 4]},
    }
    raw = path.read_bytes()[8:]
    assert raw[:length].rstrip(b" ") == json.dumps(header, separators=(",", ":")).encode("utf-8")
    assert raw[length:] == expected.astype("<f4").tobytes()
    own = safetensors_save({"embeddings": expected}, metadata=metadata)
    assert load_file(str(path))["embeddings"].tobytes() == own[8 + struct.unpack("<Q", own[:8])[0] :]


@pytest.mark.parametrize("metadata", [None, {}])
def test_safetensors_without_metadata_has_no_metadata_entry(tmp_path, metadata):
    path = tmp_path / "emb.safetensors"
    write_embeddings(path, [ROWS[:3]], rows=3, dimension=5, metadata=metadata)
    length, header = safetensors_header(path)
    assert header == {"embeddings": {"dtype": "F32", "shape": [3, 5], "data_offsets": [0, 60]}}
    assert (8 + length) % 8 == 0
    with safe_open(str(path), framework="numpy") as handle:
        assert handle.metadata() is None


@pytest.mark.parametrize("name", ["emb.npy", "emb.safetensors"])
def test_no_rows(tmp_path, name):
    path = tmp_path / name
    write_embeddings(path, [], rows=0, dimension=4)
    reader = RowReader(path)
    assert reader.shape == (0, 4) and len(reader) == 0
    if name.endswith(".npy"):
        assert np.load(path).shape == (0, 4) and reader[0:0].shape == (0, 4)
    else:
        assert load_file(str(path))["embeddings"].shape == (0, 4)


def test_no_rows_of_a_safetensors_file_slice_to_nothing(tmp_path):
    path = tmp_path / "emb.safetensors"
    write_embeddings(path, [], rows=0, dimension=4)
    assert RowReader(path)[0:0].shape == (0, 4)


def test_npy_metadata_is_ignored(tmp_path):
    path = tmp_path / "emb.npy"
    write_embeddings(path, [ROWS], rows=7, dimension=5, metadata={"k": "v"})
    assert path.read_bytes() == npy_bytes(ROWS.astype(np.float32))


@pytest.mark.parametrize("name", ["emb.npy", "emb.safetensors"])
def test_into_an_open_file_writes_there_only(tmp_path, name):
    path = tmp_path / name
    other = tmp_path / "elsewhere.bin"
    with open(other, "wb") as file:
        write_embeddings(path, blocks(ROWS, 4, 3), rows=7, dimension=5, file=file)
    assert not path.exists()
    reference = tmp_path / f"reference-{name}"
    write_embeddings(reference, [ROWS], rows=7, dimension=5)
    assert other.read_bytes() == reference.read_bytes()


def left_behind(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


@pytest.mark.parametrize("name", ["emb.npy", "emb.safetensors"])
@pytest.mark.parametrize(
    ("given", "rows", "message"),
    [
        (blocks(ROWS, 3, 4), 8, "{path!r}: 7 rows written of the 8 announced"),
        ([], 2, "{path!r}: 0 rows written of the 2 announced"),
        (blocks(ROWS, 3, 4), 6, "{path!r}: more than the 6 rows announced"),
        (blocks(ROWS, 3, 4), 3, "{path!r}: more than the 3 rows announced"),
        ([ROWS[:3], ROWS[3:, :4]], 7, "{path!r}: a block of shape (4, 4) in a file of 5-wide rows"),
        ([ROWS[:2], ROWS[2]], 3, "{path!r}: a block of shape (5,) in a file of 5-wide rows"),
        ([ROWS[None]], 7, "{path!r}: a block of shape (1, 7, 5) in a file of 5-wide rows"),
    ],
    ids=["too-few", "none", "too-many", "too-many-at-once", "narrow", "one-d", "three-d"],
)
def test_refused_writes_name_the_file_and_leave_nothing(tmp_path, name, given, rows, message):
    path = tmp_path / name
    with pytest.raises(ValueError) as caught:
        write_embeddings(path, given, rows=rows, dimension=5)
    assert str(caught.value) == message.format(path=str(path))
    assert left_behind(tmp_path) == []


def test_a_refused_write_keeps_the_file_that_was_there(tmp_path):
    path = tmp_path / "emb.npy"
    write_embeddings(path, [ROWS], rows=7, dimension=5)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="6 rows written of the 7 announced"):
        write_embeddings(path, [ROWS[:6] + 1], rows=7, dimension=5)
    assert path.read_bytes() == before
    assert left_behind(tmp_path) == ["emb.npy"]


def test_a_refused_suffix_writes_nothing(tmp_path):
    with pytest.raises(ValueError, match="ends in .npy or .safetensors"):
        write_embeddings(tmp_path / "emb.txt", [ROWS], rows=7, dimension=5)
    assert left_behind(tmp_path) == []


@pytest.mark.parametrize("name", ["emb.npy", "emb.safetensors"])
def test_row_reader_reads_slices_as_float32(tmp_path, name):
    path = tmp_path / name
    write_embeddings(path, blocks(ROWS, 5, 2), rows=7, dimension=5, metadata={"k": "v"})
    reader = RowReader(str(path))
    assert reader.path == path
    assert reader.shape == (7, 5) and len(reader) == 7
    assert all(isinstance(n, int) for n in reader.shape)
    expected = ROWS.astype(np.float32)
    for rows in [slice(0, 7), slice(2, 5), slice(6, 7), slice(5, None), slice(3, 3)]:
        got = reader[rows]
        assert got.dtype == np.float32 and np.array_equal(got, expected[rows])
    assert reader.metadata == ({"k": "v"} if name.endswith(".safetensors") else {})


def test_row_reader_of_foreign_files_gives_float32(tmp_path):
    """Files that numpy and safetensors wrote themselves, in float64 and float16."""
    np.save(tmp_path / "f64.npy", ROWS)
    reader = RowReader(tmp_path / "f64.npy")
    assert reader[1:3].dtype == np.float32 and np.array_equal(reader[1:3], ROWS[1:3].astype(np.float32))
    (tmp_path / "f16.safetensors").write_bytes(safetensors_save({"embeddings": ROWS.astype(np.float16)}))
    reader = RowReader(tmp_path / "f16.safetensors")
    assert reader.shape == (7, 5) and reader.metadata == {}
    assert reader[0:7].dtype == np.float32 and np.array_equal(reader[0:7], ROWS.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize(("shape", "shown"), [((2, 3, 4), "(2, 3, 4)"), ((6,), "(6,)")])
@pytest.mark.parametrize("name", ["emb.npy", "emb.safetensors"])
def test_row_reader_refuses_what_is_not_2d(tmp_path, name, shape, shown):
    path = tmp_path / name
    array = np.zeros(shape, dtype=np.float32)
    if name.endswith(".npy"):
        np.save(path, array)
    else:
        path.write_bytes(safetensors_save({"embeddings": array}))
    with pytest.raises(ValueError) as caught:
        RowReader(path)
    assert str(caught.value) == f"{str(path)!r}: expected a 2-D array of embeddings, got shape {shown}"


def test_row_reader_refuses_other_suffixes(tmp_path):
    with pytest.raises(ValueError, match=r"'emb\.bin': an embedding file ends in \.npy or \.safetensors"):
        RowReader("emb.bin")


@pytest.mark.parametrize("name", ["emb.npy", "emb.safetensors"])
def test_row_reader_reads_rows_from_the_file_when_asked(tmp_path, name):
    """Rows are read from the file slice by slice, not loaded when the reader opens it (merge reads
    shards bigger than memory): bytes changed in place after opening are what a slice gives."""
    path = tmp_path / name
    write_embeddings(path, [ROWS], rows=7, dimension=5)
    reader = RowReader(path)
    size = path.stat().st_size
    with open(path, "r+b") as file:
        file.seek(size - 2 * 5 * 4)  # row 5 of 7
        file.write(np.full(5, 9.5, dtype="<f4").tobytes())
    assert reader[5:6].tolist() == [[9.5] * 5]
    assert np.array_equal(reader[0:5], ROWS[:5].astype(np.float32))
