"""``roberta-ext embed``: every input format, row order, resuming after a kill, shards and merge,
bad lines, CRLF files, a fairseq-train save dir (``--checkpoint-file``), one run per output (the
lock, ``--wait``, a killed assembly's temporaries), and ``--help``. The reference is
``hub.embed`` on the same texts in the same process (the command sorts and batches per chunk,
so rows agree to float rounding); runs of the command with the same chunks agree bit for bit."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

import roberta_ext
from roberta_ext.atomic import AtomicFiles
from roberta_ext.cli.embed import main as embed_main
from roberta_ext.embedding.locking import lock_path, output_lock
from roberta_ext.embedding.stream import FAIL_AFTER_CHUNKS, Shard
from roberta_ext.quickstart import stdlib_docstrings
from tests.conftest import REPO
from tests.test_hub import make_model_dir

ROWS = 60
CHUNK = ["--chunk-rows", "7"]  # 9 chunks: seams everywhere


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_files) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, max_positions=64)


@pytest.fixture(scope="module")
def hub(model_dir):
    return roberta_ext.from_pretrained(str(model_dir))


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Docstrings of mixed lengths (a few words to past the model's 64 positions), an empty one;
    stripped, as the command strips every text it reads (corpus/rows.py)."""
    docs = [text for text, _ in stdlib_docstrings()]
    chosen = [docs[i * 37 % len(docs)][: 20 + (i * 53) % 400].strip() for i in range(ROWS)]
    chosen[5] = ""
    return chosen


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def run(*argv: str) -> int:
    return embed_main([str(a) for a in argv])


def receipt(path: Path) -> dict:
    return json.loads(path.with_name(path.name + ".json").read_text(encoding="utf-8"))


def run_process(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roberta_ext", "embed", *map(str, argv)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})},
    )


def test_text_file_to_npy_row_i_is_line_i(tmp_path, model_dir, hub, texts):
    source = write_lines(tmp_path / "texts.txt", texts)
    assert run(model_dir, "--input", source, "--output", tmp_path / "emb.npy", *CHUNK) == 0
    got = np.load(tmp_path / "emb.npy")
    np.testing.assert_allclose(got, hub.embed(texts).numpy(), atol=1e-6, rtol=1e-5)
    record = receipt(tmp_path / "emb.npy")
    assert record["rows"] == record["input_rows"] == ROWS and record["skipped"] == []
    assert record["input"]["path"] == str(source.resolve()) and record["options"]["model"] == str(model_dir)
    assert not (tmp_path / "emb.npy.parts").exists()
    # The same command again refuses to overwrite; --force (or --overwrite) gives the same bytes.
    assert run(model_dir, "--input", source, "--output", tmp_path / "emb.npy", *CHUNK) == 1
    for force in ("--force", "--overwrite"):
        assert run(model_dir, "--input", source, "--output", tmp_path / "emb.npy", *CHUNK, force) == 0
        assert np.array_equal(np.load(tmp_path / "emb.npy"), got)


def test_int8_gives_the_int8_hubs_embeddings(tmp_path, model_dir, hub, texts):
    """``--dtype int8`` is ``from_pretrained(..., dtype="int8")`` (on the CPU without --device):
    its rows are the int8 hub's, and close to float32's."""
    source = write_lines(tmp_path / "texts.txt", texts)
    assert run(model_dir, "--input", source, "--output", tmp_path / "int8.npy", "--dtype", "int8", *CHUNK) == 0
    got = torch.from_numpy(np.load(tmp_path / "int8.npy"))
    int8 = roberta_ext.from_pretrained(str(model_dir), dtype="int8")
    torch.testing.assert_close(got, int8.embed(texts), atol=1e-5, rtol=1e-4)
    assert not torch.allclose(got, hub.embed(texts), atol=1e-6)  # quantized, not float32
    assert float(torch.nn.functional.cosine_similarity(got, hub.embed(texts)).min()) > 0.99
    assert receipt(tmp_path / "int8.npy")["options"]["dtype"] == "int8"


def test_jsonl_pairs_tsv_columns_and_safetensors(tmp_path, model_dir, hub, texts):
    import safetensors.torch as safetensors

    records = [{"id": i, "text": t, "other": t[::-1]} for i, t in enumerate(texts)]
    jsonl = write_lines(tmp_path / "rows.jsonl", [json.dumps(r) for r in records])
    out = tmp_path / "emb.safetensors"
    assert run(model_dir, "--input", jsonl, "--field", "text", "--output", out, "--pooling", "cls,max") == 0
    loaded = safetensors.load_file(str(out))["embeddings"]
    torch.testing.assert_close(loaded, hub.embed(texts, pooling=["cls", "max"]), atol=1e-6, rtol=1e-5)
    assert json.loads(safetensors.safe_open(str(out), "pt").metadata()["roberta_ext"])["rows"] == ROWS

    pairs = [(t, t[::-1]) for t in texts]
    out = tmp_path / "pairs.npy"
    assert run(model_dir, "--input", jsonl, "--field", "text", "--field", "other", "--output", out) == 0
    np.testing.assert_allclose(np.load(out), hub.embed(pairs).numpy(), atol=1e-6, rtol=1e-5)

    tsv = write_lines(tmp_path / "rows.tsv", ["id\tsentence", *(f"{i}\t{t}" for i, t in enumerate(texts))])
    assert run(model_dir, "--input", tsv, "--column", "sentence", "--output", tmp_path / "a.npy", "--normalize") == 0
    expected = hub.embed(texts, normalize=True).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), expected, atol=1e-6, rtol=1e-5)
    headless = write_lines(tmp_path / "rows2.tsv", [f"{i}\t{t}" for i, t in enumerate(texts)])
    assert run(model_dir, "--input", headless, "--no-header", "--column", "1", "--output", tmp_path / "b.npy") == 0
    np.testing.assert_allclose(np.load(tmp_path / "b.npy"), hub.embed(texts).numpy(), atol=1e-6, rtol=1e-5)


def test_crlf_files_embed_as_the_same_lines_without_cr(tmp_path, model_dir, texts):
    """Windows line ends (a text file, a TSV with a header line) leave no ``\\r`` in a row: the
    embeddings equal those of the same file with ``\\n`` line ends, bit for bit."""
    rows = texts[:12]
    for name, lines, options in (
        ("texts.txt", rows, []),
        ("rows.tsv", ["id\tsentence", *(f"{i}\t{t}" for i, t in enumerate(rows))], ["--column", "sentence"]),
    ):
        unix, windows = tmp_path / f"unix-{name}", tmp_path / f"windows-{name}"
        unix.write_bytes("".join(f"{line}\n" for line in lines).encode())
        windows.write_bytes("".join(f"{line}\r\n" for line in lines).encode())
        for source in (unix, windows):
            assert run(model_dir, "--input", source, "--output", tmp_path / f"{source.stem}.npy", *options) == 0
        assert np.array_equal(
            np.load(tmp_path / f"windows-{Path(name).stem}.npy"), np.load(tmp_path / f"unix-{Path(name).stem}.npy")
        )
        assert receipt(tmp_path / f"windows-{Path(name).stem}.npy")["rows"] == len(rows)


def test_texts_are_stripped_as_every_reader_strips_them(tmp_path, model_dir, hub):
    """Spaces around a text line, a TSV cell or a JSON string are not part of the text (the one
    stripping rule of corpus/rows.py, which predict follows too)."""
    texts = ["A dog runs.", "Two cats sleep under a tree.", ""]
    padded = write_lines(tmp_path / "padded.txt", [f"  {t}\t " for t in texts])
    assert run(model_dir, "--input", padded, "--output", tmp_path / "a.npy") == 0
    tsv = write_lines(tmp_path / "padded.tsv", [f"0\t {t} " for t in texts])
    assert run(model_dir, "--input", tsv, "--column", "1", "--output", tmp_path / "b.npy") == 0  # numbers: no header
    jsonl = write_lines(tmp_path / "padded.jsonl", [json.dumps({"text": f" {t}\n"}) for t in texts])
    assert run(model_dir, "--input", jsonl, "--field", "text", "--output", tmp_path / "c.npy") == 0
    for name in ("a", "b", "c"):
        np.testing.assert_allclose(np.load(tmp_path / f"{name}.npy"), hub.embed(texts).numpy(), atol=1e-6, rtol=1e-5)


def test_a_fairseq_train_save_dir_is_embedded_with_checkpoint_file(tmp_path, model_dir, hub, texts, capsys):
    """``embed quickstart_out/pretrain`` once failed: ``model.pt`` does not exist there. The
    model arguments are predict's and export's: --checkpoint-file (and --data-name-or-path)."""
    save_dir = tmp_path / "pretrain"
    save_dir.mkdir()
    shutil.copy(model_dir / "model.pt", save_dir / "checkpoint_best.pt")
    data = tmp_path / "data-bin"
    data.mkdir()
    shutil.copy(model_dir / "dict.txt", data / "dict.txt")
    for name in ("encoder.json", "vocab.bpe"):
        shutil.copy(model_dir / name, save_dir / name)
    source = write_lines(tmp_path / "texts.txt", texts[:8])
    out = tmp_path / "emb.npy"
    assert run(save_dir, "--input", source, "--output", out) == 1
    err = capsys.readouterr().err
    assert "model.pt' does not exist" in err and "checkpoint_best.pt" in err and "--checkpoint-file" in err
    options = ("--checkpoint-file", "checkpoint_best.pt", "--data-name-or-path", str(data))
    assert run(save_dir, *options, "--input", source, "--output", out) == 0
    np.testing.assert_allclose(np.load(out), hub.embed(texts[:8]).numpy(), atol=1e-6, rtol=1e-5)
    assert receipt(out)["options"]["loaded_with"] == {
        "checkpoint_file": "checkpoint_best.pt",
        "data_name_or_path": str(data),
    }


@pytest.fixture
def one_thread():
    """One torch thread here, as in the killed processes (``OMP_NUM_THREADS=1``): the same
    kernels on the same chunks, hence the same bits."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_resume_after_a_kill_continues_where_it_stopped(tmp_path, model_dir, texts, capsys, one_thread):
    source = write_lines(tmp_path / "texts.txt", texts)
    whole = tmp_path / "whole.npy"
    assert run(model_dir, "--input", source, "--output", whole, *CHUNK) == 0
    out = tmp_path / "emb.npy"
    killed = run_process(model_dir, "--input", source, "--output", out, *CHUNK, env={FAIL_AFTER_CHUNKS: "3"})
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL: no cleanup ran
    parts = tmp_path / "emb.npy.parts"
    assert sorted(p.name for p in parts.iterdir()) == [
        *(f"0000000{i}.{kind}" for i in range(3) for kind in ("json", "npy")),
        "manifest.json",
    ]
    assert not out.exists()
    # Another option is refused, naming what differs; the same command finishes the run.
    assert run(model_dir, "--input", source, "--output", out, *CHUNK, "--pooling", "cls") == 1
    assert "pooling was None, now ['cls']" in capsys.readouterr().err
    assert run(model_dir, "--input", source, "--output", out, *CHUNK) == 0
    assert np.array_equal(np.load(out), np.load(whole))  # the same chunks: the same bits
    assert not parts.exists()
    # An input that changed under an interrupted run is refused too.
    with source.open("a", encoding="utf-8") as file:
        file.write("one more line\n")
    other = tmp_path / "other.npy"
    killed = run_process(model_dir, "--input", source, "--output", other, *CHUNK, env={FAIL_AFTER_CHUNKS: "1"})
    assert killed.returncode == -9
    write_lines(source, texts[:-1])
    assert run(model_dir, "--input", source, "--output", other, *CHUNK) == 1
    assert "input.size was" in capsys.readouterr().err


def test_standard_input_is_embedded_and_a_killed_run_resumes_on_the_same_text(
    tmp_path, model_dir, texts, capsys, monkeypatch, one_thread
):
    """``--input -`` was refused as "input file not found", though docs/predict.md said embed read
    standard input: it is saved beside the output for the run (read twice) and known by its
    SHA-256, so that piping the same text again resumes a killed run, and another text does not."""
    source = write_lines(tmp_path / "texts.txt", texts)
    data = source.read_bytes()
    whole = tmp_path / "whole.npy"
    assert run(model_dir, "--input", source, "--output", whole, *CHUNK) == 0
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    piped = tmp_path / "piped.npy"
    assert run(model_dir, "--input", "-", "--output", piped, *CHUNK) == 0
    assert np.array_equal(np.load(piped), np.load(whole))  # the same chunks: the same bits
    assert {name: receipt(piped)["input"][name] for name in ("path", "size", "sha256")} == {
        "path": "-",
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    assert not [name for name in os.listdir(tmp_path) if "stdin" in name]  # the saved copy is gone

    out = tmp_path / "emb.npy"
    command = [sys.executable, "-m", "roberta_ext", "embed", str(model_dir), "--input", "-", "--output", str(out)]
    killed = subprocess.run(
        [*command, *CHUNK],
        input=data,
        cwd=REPO,
        capture_output=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", FAIL_AFTER_CHUNKS: "3"},
    )
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL: its saved copy of stdin stays
    assert [name.startswith(".emb.npy.stdin.") for name in os.listdir(tmp_path) if "stdin" in name] == [True]
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data.replace(b"\n", b" \n", 1))))
    assert run(model_dir, "--input", "-", "--output", out, *CHUNK) == 1  # another text
    assert "input.sha256 was" in capsys.readouterr().err
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert run(model_dir, "--input", "-", "--output", out, *CHUNK) == 0  # the same text resumes
    assert np.array_equal(np.load(out), np.load(whole))
    assert not [name for name in os.listdir(tmp_path) if "stdin" in name or name.endswith(".parts")]
    # A bad line of standard input is <stdin>'s, not the saved copy's.
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"fine\n\xff\n")))
    assert run(model_dir, "--input", "-", "--output", tmp_path / "bad.npy") == 1
    assert "<stdin>:2: not valid UTF-8 (invalid start byte at byte offset 0: b'\\xff')" in capsys.readouterr().err
    assert not [name for name in os.listdir(tmp_path) if "stdin" in name]  # nor after an error


def test_shards_and_merge_equal_a_single_run(tmp_path, model_dir, texts, monkeypatch):
    source = write_lines(tmp_path / "texts.txt", texts)
    single = tmp_path / "single.npy"
    assert run(model_dir, "--input", source, "--output", single, *CHUNK) == 0
    out = tmp_path / "emb.npy"
    for i in range(3):
        assert run(model_dir, "--input", source, "--output", out, *CHUNK, "--shard", f"{i}/3") == 0
    shards = [tmp_path / f"emb.shard-{i}-of-3.npy" for i in range(3)]
    assert [len(np.load(s)) for s in shards] == [20, 20, 20]
    np.testing.assert_allclose(np.load(shards[1]), np.load(single)[1::3], atol=1e-6, rtol=1e-5)
    assert run("merge", shards[2], shards[0], "--output", out) == 1  # shard 1 missing
    assert run("merge", *shards, "--output", out) == 0
    np.testing.assert_allclose(np.load(out), np.load(single), atol=1e-6, rtol=1e-5)
    assert receipt(out)["rows"] == ROWS and receipt(out)["shard"] == [0, 1]
    # torchrun's environment chooses the shard when --shard is not given; merge finds the files.
    monkeypatch.setenv("WORLD_SIZE", "2")
    for rank in ("0", "1"):
        monkeypatch.setenv("RANK", rank)
        assert run(model_dir, "--input", source, "--output", tmp_path / "t.safetensors", *CHUNK) == 0
    assert run("merge", "--output", tmp_path / "t.safetensors") == 0
    from safetensors.numpy import load_file

    np.testing.assert_allclose(load_file(str(tmp_path / "t.safetensors"))["embeddings"], np.load(single), atol=1e-6)


def test_uneven_shards_cover_every_row_once(tmp_path, model_dir, texts):
    """59 rows in 4 shards (15, 15, 15, 14): the remainder rows are someone's, and merge puts
    each in its place (issue 26: a floor division in Shard.rows_of passed every even test)."""
    for total in range(0, 23):
        for count in range(1, 6):
            sizes = [Shard(i, count).rows_of(total) for i in range(count)]
            assert sizes == [len(range(i, total, count)) for i in range(count)], (total, count)
    source = write_lines(tmp_path / "texts.txt", texts[: ROWS - 1])
    single = tmp_path / "single.npy"
    assert run(model_dir, "--input", source, "--output", single) == 0
    out = tmp_path / "emb.npy"
    for i in range(4):
        assert run(model_dir, "--input", source, "--output", out, "--shard", f"{i}/4") == 0
    assert [len(np.load(tmp_path / f"emb.shard-{i}-of-4.npy")) for i in range(4)] == [15, 15, 15, 14]
    assert run("merge", *(tmp_path / f"emb.shard-{i}-of-4.npy" for i in range(4)), "--output", out) == 0
    np.testing.assert_allclose(np.load(out), np.load(single), atol=1e-6, rtol=1e-5)


def test_bad_lines_name_file_and_line_unless_skipped(tmp_path, model_dir, hub, texts, capsys, monkeypatch):
    lines = [t.encode() for t in texts[:10]]
    lines[3] = b"caf\xe9 latin-1"
    source = tmp_path / "texts.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    assert run(model_dir, "--input", source, "--output", tmp_path / "a.npy") == 1
    assert f"{source}:4: not valid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "a.npy").exists()

    assert run(model_dir, "--input", source, "--output", tmp_path / "a.npy", "--skip-bad-lines", "--overwrite") == 0
    assert f"skipped 1 bad line (first: {source}:4: not valid UTF-8" in capsys.readouterr().err
    kept = texts[:3] + texts[4:10]
    np.testing.assert_allclose(np.load(tmp_path / "a.npy"), hub.embed(kept).numpy(), atol=1e-6, rtol=1e-5)
    assert [entry[:2] for entry in receipt(tmp_path / "a.npy")["skipped"]] == [[3, 4]]

    rows = [json.dumps({"text": t}) for t in texts[:6]]
    rows[1], rows[4] = json.dumps({"title": "no text"}), "{not json"
    jsonl = write_lines(tmp_path / "rows.jsonl", rows)
    assert run(model_dir, "--input", jsonl, "--field", "text", "--output", tmp_path / "j.npy") == 1
    assert f"{jsonl}:2: no field 'text'; the object has ['title']" in capsys.readouterr().err
    # Skipped lines and shards: the merge puts every row back in its place.
    for i in range(2):
        args = ("--field", "text", "--skip-bad-lines", "--shard", f"{i}/2", "--chunk-rows", "2")
        assert run(model_dir, "--input", jsonl, "--output", tmp_path / "j.npy", *args) == 0
    assert run("merge", "--output", tmp_path / "j.npy") == 0
    kept = [texts[i] for i in (0, 2, 3, 5)]
    np.testing.assert_allclose(np.load(tmp_path / "j.npy"), hub.embed(kept).numpy(), atol=1e-6, rtol=1e-5)
    assert [entry[:2] for entry in receipt(tmp_path / "j.npy")["skipped"]] == [[1, 2], [4, 5]]


def test_help_and_usage_errors(capsys, tmp_path, model_dir):
    with pytest.raises(SystemExit) as exit_info:
        embed_main(["--help"])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    assert "--shard I/N" in shown and "--skip-bad-lines" in shown and "merge" in shown
    with pytest.raises(SystemExit):
        embed_main(["merge", "--help"])
    assert "--output" in capsys.readouterr().out
    source = write_lines(tmp_path / "x.jsonl", ['{"text": "a"}'])
    with pytest.raises(SystemExit):
        embed_main([str(model_dir), "--input", str(source), "--output", str(tmp_path / "x.npy")])
    assert "needs --field" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        embed_main([str(model_dir), "--input", str(source), "--field", "t", "--output", "x.npy", "--shard", "2/2"])
    assert "0 <= I < N" in capsys.readouterr().err
    assert run(model_dir, "--input", source, "--field", "text", "--output", tmp_path / "x.txt") == 1
    assert ".npy or .safetensors" in capsys.readouterr().err
    assert (
        run(model_dir, "--input", source, "--field", "text", "--output", tmp_path / "x.npy", "--prompt-name", "q") == 1
    )
    assert "'q' is not one of the model's prompts" in capsys.readouterr().err


# ----------------------------------------------------------------------------- one run per output

HOLD_LOCK = (
    "import sys\n"
    "from pathlib import Path\n"
    "from roberta_ext.embedding.locking import output_lock\n"
    "with output_lock(Path(sys.argv[1])):\n"
    "    print('locked', flush=True)\n"
    "    sys.stdin.read()\n"
)
"""Another process holding an output's lock, as a run writing it does, until its stdin closes."""


@contextlib.contextmanager
def held_until(output: Path, seconds: float, then: Callable[[], None] = lambda: None) -> Iterator[None]:
    """This process holds ``output``'s lock; a thread calls ``then`` after ``seconds`` and lets go."""
    lock = output_lock(output)
    lock.__enter__()

    def release() -> None:
        time.sleep(seconds)
        try:
            then()
        finally:
            lock.__exit__(None, None, None)

    thread = threading.Thread(target=release)
    thread.start()
    try:
        yield
    finally:
        thread.join()


def test_a_second_run_on_the_same_output_stops_at_once_naming_the_first(tmp_path, model_dir, texts, capsys):
    """Before the lock, two runs at once both embedded every part, and the one to finish second
    failed with ``[Errno 2]`` on the parts folder the first had assembled and deleted."""
    source = write_lines(tmp_path / "texts.txt", texts[:10])
    out = tmp_path / "out.npy"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(out)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        assert run(model_dir, "--input", source, "--output", out) == 1
        err = capsys.readouterr().err
        assert f"another run (process {holder.pid} on host {socket.gethostname()}) is writing {out}" in err
        assert "--wait" in err
        assert not out.exists() and not (tmp_path / "out.npy.parts").exists()  # no work done
    finally:
        holder.communicate("", timeout=60)  # closing its stdin ends it
    assert holder.returncode == 0 and not lock_path(out).exists()  # the holder removed its lock file

    # Shards write different files, so they lock different files: shard 1 runs while shard 0 is
    # held, a second run of shard 0 does not; merge locks its own output.
    shard0 = Shard(0, 2).output(out)
    with output_lock(shard0):
        assert run(model_dir, "--input", source, "--output", out, "--shard", "1/2") == 0
        assert run(model_dir, "--input", source, "--output", out, "--shard", "0/2") == 1
        assert f"(process {os.getpid()} on host {socket.gethostname()}) is writing {shard0}" in capsys.readouterr().err
    assert run(model_dir, "--input", source, "--output", out, "--shard", "0/2") == 0
    with output_lock(out):
        assert run("merge", "--output", out) == 1
        assert f"is writing {out}" in capsys.readouterr().err
    assert run("merge", "--output", out) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "out.npy",
        "out.npy.json",
        *(f"out.shard-{i}-of-2.npy{suffix}" for i in range(2) for suffix in ("", ".json")),
        "texts.txt",
    ]  # no lock file left


def test_wait_waits_for_the_other_run_then_resumes_or_refuses(tmp_path, model_dir, hub, texts, capsys):
    texts = texts[:14]
    source = write_lines(tmp_path / "texts.txt", texts)
    out, parts = tmp_path / "out.npy", tmp_path / "out.npy.parts"
    seen: list[tuple[bool, bool]] = []
    # Another run holds the output and stops without finishing it: --wait waits, then embeds it.
    with held_until(out, 0.5, then=lambda: seen.append((parts.exists(), out.exists()))):
        assert run(model_dir, "--input", source, "--output", out, *CHUNK, "--wait") == 0
    assert seen == [(False, False)]  # nothing was done while the other held it
    me = f"process {os.getpid()} on host {socket.gethostname()}"
    assert f"another run ({me}) is writing {out}; waiting for it to finish" in capsys.readouterr().err
    np.testing.assert_allclose(np.load(out), hub.embed(texts).numpy(), atol=1e-6, rtol=1e-5)
    # The other run finished the output: --wait then finds it, and refuses it without --overwrite.
    with held_until(out, 0.3):
        assert run(model_dir, "--input", source, "--output", out, *CHUNK, "--wait") == 1
    assert f"refusing to overwrite {out} (use --force)" in capsys.readouterr().err
    with held_until(out, 0.3):
        assert run(model_dir, "--input", source, "--output", out, *CHUNK, "--wait", "--overwrite") == 0
    assert not lock_path(out).exists()


def test_the_next_run_removes_what_a_killed_assembly_left(tmp_path, model_dir, texts):
    """The atomic writer's temporaries of the output and its receipt, as a kill between their
    creation and their rename leaves them; nobody else's (another output's, a shard's, a
    look-alike), and only while holding the lock."""
    source = write_lines(tmp_path / "texts.txt", texts[:10])
    out = tmp_path / "out.npy"
    killed = AtomicFiles()  # never committed nor closed: as a SIGKILL leaves it
    stale = [killed.temporary(out), killed.temporary(tmp_path / "out.npy.json")]
    others = [killed.temporary(tmp_path / name) for name in ("other.npy", "out.shard-0-of-2.npy", "out.npy.parts")]
    others.append(tmp_path / ".out.npy.notmine.tmp")
    for path in [*stale, *others]:
        path.write_bytes(b"half a file")
    with output_lock(out):
        assert run(model_dir, "--input", source, "--output", out) == 1
    assert all(path.exists() for path in stale)  # another run holds the output: not ours to touch
    assert run(model_dir, "--input", source, "--output", out) == 0
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in others)
    assert len(np.load(out)) == 10
