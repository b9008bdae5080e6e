"""Batch embedding on Ray Data (:mod:`roberta_ext.embedding.ray_data`), on one local Ray cluster
for the module (two actors on two CPUs): rows read by the package's own rules (text, JSONL pairs,
Parquet), embedded by the same :class:`~roberta_ext.embedding.embedder.Embedder` in each actor,
written as ``roberta-ext embed`` writes them. The reference is ``roberta-ext embed`` on the same
file and ``hub.embed`` in this process: rows agree to float rounding (1e-6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import roberta_ext
from roberta_ext.cli.embed import main as embed_main
from roberta_ext.embedding.embedder import Embedder
from roberta_ext.embedding.ray_data import EMBEDDING, PATH, ROW, embed_dataset, read_texts, write_embedding_file
from roberta_ext.embedding.stream import EmbedError
from tests.conftest import REPO
from tests.peers import require
from tests.test_hub import make_model_dir

ray = require("ray", "the Ray Data pipeline runs on a local Ray cluster")
require("pyarrow", "Ray Data's blocks and Parquet files")

ROWS = 45


@pytest.fixture(scope="module")
def cluster():
    """One local Ray cluster for the module: two CPUs, no dashboard, quiet."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_files) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, max_positions=64)


@pytest.fixture(scope="module")
def hub(model_dir):
    return roberta_ext.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Texts of mixed lengths, past the model's 64 positions too (the length rule cuts them), an empty one."""
    words = "the quick brown fox jumps over a lazy dog while it rains".split()
    chosen = [" ".join(words[(i * 7 + k) % len(words)] for k in range(1 + (i * 13) % 90)) for i in range(ROWS)]
    chosen[3] = ""
    return chosen


def maker(model_dir: Path, **options):
    """What each actor calls to make its embedder (pickled to the cluster by value)."""
    return lambda: Embedder.for_hub(roberta_ext.from_pretrained(str(model_dir)), **options)


def test_text_file_to_npy_equals_roberta_ext_embed(cluster, tmp_path, model_dir, hub, texts):
    source = tmp_path / "texts.txt"
    # Line ends as files have them (LF, CRLF, a lone CR): none is part of a text, as roberta-ext embed reads them.
    ends = ["\n", "\r\n", "\r"]
    source.write_bytes("".join(f" {t}\t{ends[i % 3]}" for i, t in enumerate(texts)).encode())  # stripped
    assert embed_main([str(model_dir), "--input", str(source), "--output", str(tmp_path / "cli.npy")]) == 0

    dataset = read_texts(source)
    rows = dataset.count()
    embedded = embed_dataset(dataset, maker(model_dir), actors=2, batch_rows=8)  # 6 batches over 2 actors
    receipt = write_embedding_file(embedded, tmp_path / "ray.npy", rows=rows, record={"input": str(source)})

    first = read_texts(source).take(3)
    assert [(r[PATH], r[ROW], r["line"], r["text"]) for r in first] == [
        (str(source), i, i + 1, texts[i]) for i in range(3)
    ]
    got = np.load(tmp_path / "ray.npy")
    assert got.shape == (ROWS, hub.model.cfg.encoder_embed_dim) and got.dtype == np.float32
    np.testing.assert_allclose(got, np.load(tmp_path / "cli.npy"), atol=1e-6, rtol=0)
    np.testing.assert_allclose(got, hub.embed(texts).numpy(), atol=1e-6, rtol=0)
    written = json.loads((tmp_path / "ray.npy.json").read_text(encoding="utf-8"))
    assert written == receipt and written["rows"] == ROWS and written["dimension"] == got.shape[1]
    assert written["input"] == str(source) and written["engine"] == "ray" and written["rows_per_second"] > 0


def test_jsonl_pairs_with_the_models_options_to_safetensors(cluster, tmp_path, model_dir, hub, texts):
    import safetensors.numpy

    source = tmp_path / "pairs.jsonl"
    # A blank line is no row (as roberta-ext embed reads JSONL); CRLF ends are not part of a text.
    lines = [json.dumps({"id": i, "q": t, "a": t[::-1]}) for i, t in enumerate(texts)]
    source.write_bytes(("\r\n".join(lines[:10] + [""] + lines[10:]) + "\r\n").encode())
    options = dict(pooling=["cls", "max"], normalize=True, max_length=20, prompt="query: ")

    dataset = read_texts(source, fields=["q", "a"])
    embedded = embed_dataset(dataset, maker(model_dir, **options), fields=["q", "a"], batch_rows=16)
    write_embedding_file(embedded, tmp_path / "pairs.safetensors", rows=dataset.count())

    got = safetensors.numpy.load_file(str(tmp_path / "pairs.safetensors"))["embeddings"]
    pairs = [(t, t[::-1]) for t in texts]
    np.testing.assert_allclose(got, hub.embed(pairs, **options).numpy(), atol=1e-6, rtol=0)
    plain = hub.embed(pairs, pooling=["cls", "max"], normalize=True).numpy()
    assert not np.allclose(got, plain, atol=1e-3)  # the prompt and the length rule took effect


def test_parquet_files_keep_their_columns_and_write_parquet_shards(cluster, tmp_path, model_dir, hub, texts):
    import pyarrow
    import pyarrow.parquet

    folder = tmp_path / "in"
    folder.mkdir()
    for part in range(3):  # three files: three read tasks, rows told apart by their id column
        ids = list(range(part, ROWS, 3))
        table = pyarrow.table({"doc_id": ids, "body": [f"  {texts[i]} " for i in ids]})
        pyarrow.parquet.write_table(table, folder / f"part-{part}.parquet")
    embedded = embed_dataset(read_texts(folder, format="parquet", fields=["body"]), maker(model_dir), fields=["body"])
    embedded.write_parquet(str(tmp_path / "out"))

    written = pyarrow.parquet.read_table(tmp_path / "out")
    assert set(written.column_names) == {"doc_id", EMBEDDING}  # the text column is replaced
    order = np.argsort(written["doc_id"].to_numpy())
    got = np.stack(written[EMBEDDING].to_numpy(zero_copy_only=False))[order]
    assert sorted(written["doc_id"].to_pylist()) == list(range(ROWS))
    np.testing.assert_allclose(got, hub.embed(texts).numpy(), atol=1e-6, rtol=0)


def test_bad_inputs_are_refused_naming_them(cluster, tmp_path, model_dir):
    source = tmp_path / "bad.jsonl"
    source.write_text('{"q": "fine"}\n{"other": "no q here"}\n', encoding="utf-8")
    with pytest.raises(Exception, match=rf"{source}:2: no field 'q'"):
        read_texts(source, fields=["q"]).take_all()
    with pytest.raises(ValueError, match="needs one field holding the text"):
        read_texts(source)
    table = tmp_path / "numbers.parquet"
    import pyarrow
    import pyarrow.parquet

    pyarrow.parquet.write_table(pyarrow.table({"body": [1, 2]}), table)
    with pytest.raises(Exception, match="Parquet column 'body' is int64, not strings"):
        read_texts(table, fields=["body"]).take_all()
    (tmp_path / "empty.txt").write_bytes(b"")
    empty = embed_dataset(read_texts(tmp_path / "empty.txt"), maker(model_dir))
    with pytest.raises(EmbedError, match="the pipeline gave no rows, 2 were expected"):
        write_embedding_file(empty, tmp_path / "x.npy", rows=2)
    assert not (tmp_path / "x.npy").exists()


def test_importing_the_package_and_this_module_imports_no_ray():
    """Ray is an optional extra: ``import roberta_ext`` and the pipeline's module load without it."""
    program = (
        "import sys\nimport roberta_ext, roberta_ext.embedding.ray_data, roberta_ext.serve.ray_serve\n"
        "heavy = sorted(m for m in ('ray', 'pyarrow', 'pandas') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    result = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
