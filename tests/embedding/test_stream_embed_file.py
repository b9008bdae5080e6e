"""Streaming a file of texts into an embedding file (:mod:`roberta_ext.embedding.stream`) with a
stand-in embedder whose row for a text is computed from the text alone, so that every row can be
checked exactly and a run takes milliseconds: row order, chunks, shards and their merge,
resuming (and refusing to resume a different run), bad rows, the receipt, and the message of
every refusal. test_command.py runs the same through ``roberta-ext embed`` with a real model
(and kills a process mid-run)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors import safe_open

from roberta_ext.corpus.reading import CorpusError
from roberta_ext.embedding.locking import OutputBusy, lock_path, output_lock
from roberta_ext.embedding.stream import (
    DEFAULT_CHUNK_ROWS,
    FAIL_AFTER_CHUNKS,
    EmbedError,
    InputSpec,
    Options,
    Shard,
    embed_file,
    merge_shards,
    parts_path,
    receipt_path,
    shard_files,
)

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")


TEXTS = [f"text {i}" + " word" * (i % 4) for i in range(11)]  # stripped, as every reader strips them
TEXTS[4] = ""


def vector(text: str | tuple[str, ...]) -> list[float]:
    """The stand-in's embedding: from the text alone (a pair: both texts)."""
    joined = " | ".join(text) if isinstance(text, tuple) else text
    return [float(len(joined)), float(sum(map(ord, joined)) % 1009), float(isinstance(text, tuple))]


class StandIn:
    """An embedder (what :func:`embed_file` uses of one: ``dimension`` and ``embed``)."""

    dimension = 3

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls: list[list[Any]] = []
        self.fail_on_call = fail_on_call

    def __call__(self) -> StandIn:
        """As the model-loading function :func:`embed_file` also takes."""
        return self

    def embed(self, texts, *, progress=None) -> torch.Tensor:
        self.calls.append(list(texts))
        if self.fail_on_call is not None and len(self.calls) == self.fail_on_call:
            raise KeyboardInterrupt("stopped")
        if progress is not None:
            progress(len(texts))
        return torch.tensor([vector(t) for t in texts], dtype=torch.float32).reshape(len(texts), 3)


def expected(texts) -> np.ndarray:
    return np.array([vector(t) for t in texts], dtype=np.float32).reshape(len(texts), 3)


def options(**changes: Any) -> Options:
    values: dict[str, Any] = dict(
        model="my-model",
        pooling=None,
        normalize=None,
        max_length=None,
        prompt=None,
        prompt_name=None,
        dtype="float32",
        skip_bad_lines=False,
        chunk_rows=3,
    )
    values.update(changes)
    return Options(**values)


def text_file(folder: Path, lines: list[str] = TEXTS, name: str = "texts.txt") -> InputSpec:
    path = folder / name
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return InputSpec(path, "text")


def names(folder: Path) -> list[str]:
    return sorted(entry.name for entry in folder.iterdir())


def refusal(function, *args, **kwargs) -> str:
    with pytest.raises(EmbedError) as caught:
        function(*args, **kwargs)
    assert isinstance(caught.value, CorpusError)
    return str(caught.value)


# ----------------------------------------------------------------------------- shards


def test_shard_parse():
    assert Shard.parse("0/1") == Shard(0, 1) == Shard()
    assert Shard.parse("3/4") == Shard(3, 4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1", "expected I/N (e.g. 0/4), got '1'"),
        ("a/2", "expected I/N (e.g. 0/4), got 'a/2'"),
        ("1/2/3", "expected I/N (e.g. 0/4), got '1/2/3'"),
        ("2/2", "shard I/N needs 0 <= I < N, got '2/2'"),
        ("-1/2", "shard I/N needs 0 <= I < N, got '-1/2'"),
        ("0/0", "shard I/N needs 0 <= I < N, got '0/0'"),
    ],
)
def test_shard_parse_refusals(text, message):
    with pytest.raises(ValueError) as caught:
        Shard.parse(text)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("environ", "shard"),
    [
        ({}, Shard(0, 1)),
        ({"RANK": "", "WORLD_SIZE": ""}, Shard(0, 1)),
        ({"RANK": "2", "WORLD_SIZE": "3"}, Shard(2, 3)),
        ({"WORLD_SIZE": "2"}, Shard(0, 2)),
    ],
)
def test_shard_from_environment(environ, shard):
    assert Shard.from_environment(environ) == shard


@pytest.mark.parametrize(("rank", "size"), [("1", "1"), ("0", "0"), ("-1", "2"), ("3", "-2")])
def test_shard_from_environment_refusals(rank, size):
    message = refusal(Shard.from_environment, {"RANK": rank, "WORLD_SIZE": size})
    assert message == f"RANK={rank} and WORLD_SIZE={size} do not name a shard"


@pytest.mark.parametrize("count", [1, 2, 3, 5])
def test_shards_split_the_rows_round_robin(count):
    for total in range(12):
        owned = [[row for row in range(total) if Shard(index, count).owns(row)] for index in range(count)]
        assert sorted(row for rows in owned for row in rows) == list(range(total))
        for index in range(count):
            assert owned[index] == list(range(index, total, count))
            assert Shard(index, count).rows_of(total) == len(owned[index])


def test_file_names():
    assert Shard(1, 4).output(Path("out/emb.npy")) == Path("out/emb.shard-1-of-4.npy")
    assert Shard(0, 2).output(Path("e.safetensors")) == Path("e.shard-0-of-2.safetensors")
    assert Shard(0, 1).output(Path("out/emb.npy")) == Path("out/emb.npy")
    assert receipt_path(Path("out/emb.npy")) == Path("out/emb.npy.json")
    assert parts_path(Path("out/emb.npy")) == Path("out/emb.npy.parts")
    assert DEFAULT_CHUNK_ROWS == 8192 and FAIL_AFTER_CHUNKS == "ROBERTA_EXT_EMBED_FAIL_AFTER_CHUNKS"


def test_shard_files_finds_this_outputs_shards_sorted(tmp_path):
    for name in ["emb.shard-1-of-2.npy", "emb.shard-0-of-2.npy", "emb.shard-0-of-2.npy.json", "other.shard-0-of-2.npy"]:
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "emb.shard-0-of-2.safetensors").write_bytes(b"")
    assert shard_files(tmp_path / "emb.npy") == [tmp_path / "emb.shard-0-of-2.npy", tmp_path / "emb.shard-1-of-2.npy"]


# ----------------------------------------------------------------------------- options and inputs


def test_options_record(tmp_path):
    assert options(pooling=("cls", "max"), normalize=True, max_length=7, prompt="q: ", dtype="bf16").record() == {
        "model": "my-model",
        "pooling": ["cls", "max"],
        "normalize": True,
        "max_length": 7,
        "prompt": "q: ",
        "prompt_name": None,
        "dtype": "bf16",
        "chunk_rows": 3,
    }
    record = options(model=str(tmp_path), loaded_with=(("checkpoint_file", "best.pt"),), prompt_name="q").record()
    assert record["model"] == str(tmp_path.resolve())
    assert record["loaded_with"] == {"checkpoint_file": "best.pt"}
    assert list(record)[:2] == ["model", "loaded_with"] and record["prompt_name"] == "q"
    assert record["pooling"] is None and "loaded_with" not in options().record()


def test_input_identity(tmp_path):
    spec = text_file(tmp_path)
    info = spec.path.stat()
    assert spec.identity() == {
        "path": str(spec.path.resolve()),
        "size": info.st_size,
        "mtime_ns": info.st_mtime_ns,
        "format": "text",
        "fields": [],
        "header": None,
    }
    tsv = tmp_path / "rows.tsv"
    tsv.write_text("a\tb\n", encoding="utf-8")
    assert InputSpec(tsv, "tsv", ("0", "1")).identity()["header"] is False
    assert InputSpec(tsv, "tsv", ("a", "b")).identity()["header"] is True
    assert InputSpec(tsv, "tsv", ("0",), header=True).identity()["header"] is True
    assert InputSpec(tsv, "tsv", ("0", "1")).identity()["fields"] == ["0", "1"]


def test_a_missing_input_is_refused_before_anything(tmp_path):
    called = []
    spec = InputSpec(tmp_path / "absent.txt", "text")
    out = tmp_path / "new" / "e.npy"  # not even the output's folder is made
    for path in (spec.path, tmp_path):
        message = refusal(embed_file, lambda: called.append(1), InputSpec(path, "text"), out, options())
        assert message == f"{path}: input file not found (or not a file)"
        with pytest.raises(EmbedError, match="input file not found"):
            InputSpec(path, "text").reader()
    assert called == [] and names(tmp_path) == []


@pytest.mark.parametrize("name", ["emb.txt", "emb", "emb.npy.json"])
def test_an_output_of_another_kind_is_refused(tmp_path, name):
    spec = text_file(tmp_path)
    message = refusal(embed_file, StandIn(), spec, tmp_path / name, options())
    assert message == f"{tmp_path / name}: the output must end in .npy or .safetensors"
    message = refusal(merge_shards, [], tmp_path / name)
    assert message == f"{tmp_path / name}: the output must end in .npy or .safetensors"
    assert names(tmp_path) == ["texts.txt"]


# ----------------------------------------------------------------------------- embedding a file


def test_row_i_is_line_i_in_chunks(tmp_path):
    spec = text_file(tmp_path)
    embedder = StandIn()
    receipt = embed_file(lambda: embedder, spec, tmp_path / "emb.npy", options())
    got = np.load(tmp_path / "emb.npy")
    assert got.dtype == np.float32 and np.array_equal(got, expected(TEXTS))
    assert embedder.calls == [TEXTS[0:3], TEXTS[3:6], TEXTS[6:9], TEXTS[9:11]]
    assert names(tmp_path) == ["emb.npy", "emb.npy.json", "texts.txt"]  # no parts, no lock left
    on_disk = json.loads(receipt_path(tmp_path / "emb.npy").read_text("utf-8"))
    assert on_disk == {key: value for key, value in receipt.items() if key != "rows_per_second"}
    assert receipt_path(tmp_path / "emb.npy").read_text("utf-8") == json.dumps(on_disk, indent=1) + "\n"
    assert on_disk == {
        "rows": 11,
        "skip_bad_lines": False,
        "dimension": 3,
        "dtype": "float32",
        "input_rows": 11,
        "skipped": [],
        "input": spec.identity(),
        "options": options().record(),
        "shard": [0, 1],
    }
    assert receipt["rows_per_second"] is None or receipt["rows_per_second"] > 0


def test_an_embedder_itself_is_used_as_it_is(tmp_path, monkeypatch):
    from roberta_ext.embedding import stream
    from roberta_ext.embedding.embedder import Embedder

    class Real(StandIn, Embedder):
        def __init__(self) -> None:
            StandIn.__init__(self)

        def __call__(self):
            raise AssertionError("an Embedder is not called")

    embedder = Real()
    embed_file(embedder, text_file(tmp_path), tmp_path / "emb.npy", options(chunk_rows=100))
    assert embedder.calls == [TEXTS] and stream.Embedder is Embedder


def test_the_progress_bar(tmp_path, capsys):
    spec = text_file(tmp_path)
    embed_file(StandIn(), spec, tmp_path / "emb.npy", options(), shard=Shard(1, 2), progress=True)
    err = capsys.readouterr().err
    assert "embed shard 1/2: 100%" in err and "5/5 [" in err and "rows/s" in err
    embed_file(StandIn(), spec, tmp_path / "emb.npy", options(), progress=True)
    err = capsys.readouterr().err
    assert "embed: 100%" in err and "11/11 [" in err
    embed_file(StandIn(), spec, tmp_path / "emb.npy", options(), force=True)
    assert capsys.readouterr().err == ""


def test_an_empty_file(tmp_path):
    spec = text_file(tmp_path, [])
    receipt = embed_file(StandIn(), spec, tmp_path / "emb.npy", options())
    assert np.load(tmp_path / "emb.npy").shape == (0, 3)
    assert receipt["rows"] == receipt["input_rows"] == 0


def test_a_finished_output_is_replaced_only_with_force(tmp_path):
    spec = text_file(tmp_path)
    out = tmp_path / "emb.npy"
    embed_file(StandIn(), spec, out, options())
    called = []
    message = refusal(embed_file, lambda: called.append(1), spec, out, options())
    assert message == f"refusing to overwrite {out} (use --force)"
    out.unlink()  # the receipt alone counts as finished too
    assert refusal(embed_file, lambda: called.append(1), spec, out, options()) == message
    assert called == []
    text_file(tmp_path, TEXTS[:4])
    embed_file(StandIn(), spec, out, options(), force=True)
    assert np.array_equal(np.load(out), expected(TEXTS[:4]))


def test_safetensors_carries_the_receipt(tmp_path):
    out = tmp_path / "emb.safetensors"
    receipt = embed_file(StandIn(), text_file(tmp_path), out, options())
    with safe_open(str(out), framework="numpy") as handle:
        assert np.array_equal(handle.get_tensor("embeddings"), expected(TEXTS))
        stored = json.loads(handle.metadata()["roberta_ext"])
    assert stored == {key: value for key, value in receipt.items() if key != "rows_per_second"}


def test_pairs_of_a_jsonl_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    rows = [{"a": f"first {i}", "b": f"second {i}" * i} for i in range(5)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    embedder = StandIn()
    embed_file(embedder, InputSpec(path, "jsonl", ("a", "b")), tmp_path / "emb.npy", options())
    pairs = [(row["a"], row["b"]) for row in rows]
    assert np.array_equal(np.load(tmp_path / "emb.npy"), expected(pairs))
    embed_file(StandIn(), InputSpec(path, "jsonl", ("b",)), tmp_path / "b.npy", options())
    assert np.array_equal(np.load(tmp_path / "b.npy"), expected([row["b"] for row in rows]))


def test_the_output_folder_is_made(tmp_path):
    out = tmp_path / "new" / "deeper" / "emb.npy"
    embed_file(StandIn(), text_file(tmp_path), out, options())
    assert np.array_equal(np.load(out), expected(TEXTS))
    assert names(out.parent) == ["emb.npy", "emb.npy.json"]


def test_a_run_holds_the_lock_and_removes_what_a_killed_assembly_left(tmp_path):
    spec = text_file(tmp_path)
    out = tmp_path / "emb.npy"
    stale = [tmp_path / f".emb.npy{kind}.0123abcd.tmp" for kind in ("", ".json", ".stdin")]  # .stdin: a saved stdin
    others = [tmp_path / ".other.npy.0123abcd.tmp"]
    for path in [*stale, *others]:
        path.write_bytes(b"half")
    seen = []

    def make() -> StandIn:
        seen.append((lock_path(out).exists(), any(path.exists() for path in stale)))
        return StandIn()

    with output_lock(out), pytest.raises(OutputBusy, match="^another run "):
        embed_file(make, spec, out, options())
    assert seen == [] and all(path.exists() for path in stale)
    embed_file(make, spec, out, options())
    assert seen == [(True, False)]
    assert all(path.exists() for path in others)


# ----------------------------------------------------------------------------- bad rows


def jsonl_with_bad_lines(folder: Path) -> InputSpec:
    path = folder / "rows.jsonl"
    lines = [json.dumps({"text": t}) for t in TEXTS[:7]]
    lines[2] = "{not json"
    lines[5] = json.dumps({"other": "x"})
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return InputSpec(path, "jsonl", ("text",))


def test_a_bad_row_stops_the_run_naming_file_and_line(tmp_path):
    spec = jsonl_with_bad_lines(tmp_path)
    message = refusal(embed_file, StandIn(), spec, tmp_path / "emb.npy", options())
    assert message.startswith(f"{spec.path}:3: ")
    assert message.endswith(" (--skip-bad-lines skips such lines)")
    assert not (tmp_path / "emb.npy").exists()


def test_bad_rows_skipped_are_listed(tmp_path):
    spec = jsonl_with_bad_lines(tmp_path)
    embedder = StandIn()
    receipt = embed_file(embedder, spec, tmp_path / "emb.npy", options(skip_bad_lines=True))
    kept = [TEXTS[i] for i in (0, 1, 3, 4, 6)]
    assert np.array_equal(np.load(tmp_path / "emb.npy"), expected(kept))
    assert embedder.calls == [kept[:2], kept[2:4], kept[4:]]
    assert receipt["rows"] == 5 and receipt["input_rows"] == 7 and receipt["skip_bad_lines"] is True
    assert [entry[:2] for entry in receipt["skipped"]] == [[2, 3], [5, 6]]
    assert all(isinstance(entry[2], str) and entry[2] for entry in receipt["skipped"])


# ----------------------------------------------------------------------------- resuming


def interrupted(tmp_path: Path, spec: InputSpec, out: Path, chunks_done: int, **changes: Any) -> None:
    """A run stopped while embedding chunk ``chunks_done`` (a Ctrl-C), its parts left."""
    with pytest.raises(KeyboardInterrupt):
        embed_file(StandIn(fail_on_call=chunks_done + 1), spec, out, options(**changes))
    assert parts_path(out).is_dir() and not out.exists()


def test_a_stopped_run_resumes_where_it_stopped(tmp_path):
    spec = text_file(tmp_path)
    out = tmp_path / "emb.npy"
    interrupted(tmp_path, spec, out, 2)
    assert sorted(p.name for p in parts_path(out).iterdir()) == [
        "00000000.json",
        "00000000.npy",
        "00000001.json",
        "00000001.npy",
        "manifest.json",
    ]
    embedder = StandIn()
    receipt = embed_file(embedder, spec, out, options())
    assert embedder.calls == [TEXTS[6:9], TEXTS[9:11]]  # only what was left
    assert np.array_equal(np.load(out), expected(TEXTS))
    assert receipt["rows"] == 11 and not parts_path(out).exists()
    # A finished output with a parts folder beside it (killed between assembly and cleanup) is resumed, not refused.
    interrupted(tmp_path, spec, tmp_path / "b.npy", 1)
    embed_file(StandIn(), spec, tmp_path / "b.npy", options())
    assert np.array_equal(np.load(tmp_path / "b.npy"), expected(TEXTS))


def test_a_part_without_its_array_or_with_a_broken_record_is_redone(tmp_path):
    spec = text_file(tmp_path)
    out = tmp_path / "emb.npy"
    interrupted(tmp_path, spec, out, 3)
    (parts_path(out) / "00000001.npy").unlink()
    (parts_path(out) / "00000002.json").write_text("{broken", encoding="utf-8")
    embedder = StandIn()
    embed_file(embedder, spec, out, options())
    assert embedder.calls == [TEXTS[3:6], TEXTS[6:9], TEXTS[9:11]]
    assert np.array_equal(np.load(out), expected(TEXTS))


def test_resuming_a_different_run_is_refused_naming_the_differences(tmp_path):
    spec = text_file(tmp_path)
    out = tmp_path / "emb.npy"
    interrupted(tmp_path, spec, out, 1)
    message = refusal(embed_file, StandIn(), spec, out, options(max_length=16, prompt="q: "))
    assert message == (
        f"{parts_path(out)} holds the parts of a different run (options.max_length was None, now 16; "
        "options.prompt was None, now 'q: '): run the same command to resume it, or delete "
        f"{parts_path(out)} to start over"
    )
    manifest = json.loads((parts_path(out) / "manifest.json").read_text("utf-8"))
    manifest["extra"] = {"k": 1}
    manifest["input"].pop("format")
    (parts_path(out) / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    message = refusal(embed_file, StandIn(), spec, out, options())
    assert "(extra was {'k': 1}, now None; input.format was None, now 'text')" in message
    (parts_path(out) / "manifest.json").write_text("{broken", encoding="utf-8")
    message = refusal(embed_file, StandIn(), spec, out, options())
    assert message.startswith(f"{parts_path(out) / 'manifest.json'}: not valid JSON (")
    assert message.endswith(f"); delete {parts_path(out)} to start over")


def test_a_changed_input_is_refused(tmp_path):
    spec = text_file(tmp_path)
    out = tmp_path / "emb.npy"
    interrupted(tmp_path, spec, out, 1)
    text_file(tmp_path, TEXTS + ["one more"])
    message = refusal(embed_file, StandIn(), spec, out, options())
    assert "input.size was " in message and "input.mtime_ns was " in message


def test_resuming_a_run_that_skipped_a_row_needs_skip_bad_lines(tmp_path):
    spec = jsonl_with_bad_lines(tmp_path)
    out = tmp_path / "emb.npy"
    interrupted(tmp_path, spec, out, 1, skip_bad_lines=True)
    message = refusal(embed_file, StandIn(), spec, out, options())
    assert message.startswith(f"{spec.path}:3: ")
    assert message.endswith(
        f"; the interrupted run in {parts_path(out)} skipped it (--skip-bad-lines): resume with "
        "--skip-bad-lines, or delete the folder to start over"
    )
    embed_file(StandIn(), spec, out, options(skip_bad_lines=True))
    assert len(np.load(out)) == 5


def test_a_file_that_lost_rows_while_read_is_refused(tmp_path, monkeypatch):
    spec = text_file(tmp_path)
    from roberta_ext.corpus.rows import RowReader

    monkeypatch.setattr(RowReader, "count", lambda self: 17)
    message = refusal(embed_file, StandIn(), spec, tmp_path / "emb.npy", options())
    assert message == f"{spec.path}: read 4 chunks of rows, expected 6: did the file change?"


class Killed(BaseException):
    pass


@pytest.mark.parametrize(("value", "parts"), [("1", 1), (" 2 ", 2), ("4", 4)])
def test_fail_after_chunks_kills_the_process_after_that_many_parts(tmp_path, monkeypatch, value, parts):
    """The test hook: SIGKILL to itself after writing that many parts (test_command.py lets a real
    process die of it; here ``os.kill`` is caught, and the run resumed)."""
    kills = []

    def kill(pid: int, sig: int) -> None:
        kills.append((pid, sig))
        raise Killed

    monkeypatch.setattr(os, "kill", kill)
    monkeypatch.setenv(FAIL_AFTER_CHUNKS, value)
    spec, out = text_file(tmp_path), tmp_path / "emb.npy"
    with pytest.raises(Killed):
        embed_file(StandIn(), spec, out, options())
    assert kills == [(os.getpid(), signal.SIGKILL)]
    assert sorted(p.name for p in parts_path(out).glob("*.npy")) == [f"{i:08d}.npy" for i in range(parts)]
    monkeypatch.setenv(FAIL_AFTER_CHUNKS, "")
    embedder = StandIn()
    embed_file(embedder, spec, out, options())
    assert len(embedder.calls) == 4 - parts and kills == [(os.getpid(), signal.SIGKILL)]
    assert np.array_equal(np.load(out), expected(TEXTS))


def test_no_fail_after_chunks_without_a_value(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "kill", lambda pid, sig: pytest.fail("killed"))
    monkeypatch.setenv(FAIL_AFTER_CHUNKS, " ")
    embed_file(StandIn(), text_file(tmp_path), tmp_path / "emb.npy", options())
    assert np.array_equal(np.load(tmp_path / "emb.npy"), expected(TEXTS))


# ----------------------------------------------------------------------------- shards and merge


def sharded(spec: InputSpec, count: int, out: Path, **changes: Any) -> list[Path]:
    for index in range(count):
        embed_file(StandIn(), spec, out, options(**changes), shard=Shard(index, count))
    return [Shard(index, count).output(out) for index in range(count)]


@pytest.mark.parametrize("count", [2, 3])
@pytest.mark.parametrize("name", ["emb.npy", "emb.safetensors"])
def test_shards_merge_into_a_single_runs_rows(tmp_path, count, name):
    out = tmp_path / name
    spec = text_file(tmp_path)
    files = sharded(spec, count, out)
    single = embed_file(StandIn(), spec, tmp_path / f"single{out.suffix}", options())
    receipt = merge_shards(files[::-1], out)
    from roberta_ext.embedding.files import RowReader as EmbeddingRows

    assert np.array_equal(EmbeddingRows(out)[0:11], expected(TEXTS))
    assert receipt == {key: value for key, value in single.items() if key != "rows_per_second"}
    assert json.loads(receipt_path(out).read_text("utf-8")) == receipt
    for index, path in enumerate(files):
        assert np.array_equal(EmbeddingRows(path)[0 : len(TEXTS[index::count])], expected(TEXTS[index::count]))


def test_merge_in_small_blocks_with_skipped_rows(tmp_path, monkeypatch):
    spec = jsonl_with_bad_lines(tmp_path)
    out = tmp_path / "emb.npy"
    for index in range(3):
        embed_file(StandIn(), spec, out, options(skip_bad_lines=True), shard=Shard(index, 3))
    single = embed_file(StandIn(), spec, tmp_path / "single.npy", options(skip_bad_lines=True))
    receipt = merge_shards(shard_files(out), out)
    assert np.array_equal(np.load(out), np.load(tmp_path / "single.npy"))
    assert receipt["skipped"] == single["skipped"] and receipt["rows"] == 5


def test_merge_refusals(tmp_path):
    out = tmp_path / "emb.npy"
    files = sharded(text_file(tmp_path), 3, out)
    assert refusal(merge_shards, [], out) == "no shard files to merge"
    assert refusal(merge_shards, files[:2], out) == (f"shards [2] of 3 are missing (given: {files[0]}, {files[1]})")
    assert refusal(merge_shards, [files[0], files[1], files[0]], out) == (
        f"{files[0]} and {files[0]} are both shard 0 of 3"
    )
    (tmp_path / "two").mkdir()
    other = sharded(text_file(tmp_path / "two"), 2, tmp_path / "two" / "emb.npy")
    message = refusal(merge_shards, [files[0], other[1]], out)
    assert message.startswith(f"{other[1]} is not from the same run as {files[0]}: ")
    assert (
        f"path was {str((tmp_path / 'texts.txt').resolve())!r}, now {str((tmp_path / 'two' / 'texts.txt').resolve())!r}"
        in message
    )
    missing = tmp_path / "emb.shard-5-of-6.npy"
    assert refusal(merge_shards, [missing], out) == f"{missing}: shard file not found"
    receipt_path(files[2]).unlink()
    assert refusal(merge_shards, files, out) == (
        f"{receipt_path(files[2])}: missing; it says which rows {files[2].name} holds, and merge needs it"
    )
    receipt_path(files[2]).write_text("{broken", encoding="utf-8")
    assert refusal(merge_shards, files, out).startswith(f"{receipt_path(files[2])}: not valid JSON (")
    assert names(tmp_path).count("emb.npy") == 0


def test_merge_refuses_shards_of_other_runs(tmp_path):
    out = tmp_path / "emb.npy"
    files = sharded(text_file(tmp_path), 2, out)
    receipt = json.loads(receipt_path(files[1]).read_text("utf-8"))
    for key, value, difference in [
        ("dimension", 4, "dimension 3 against 4"),
        ("input_rows", 12, "input_rows 11 against 12"),
        ("options", {**receipt["options"], "dtype": "bf16"}, "dtype was 'float32', now 'bf16'"),
        ("options", None, "options {"),
        (
            "options",
            {**receipt["options"], "dtype": "bf16", "prompt": "q"},
            "dtype was 'float32', now 'bf16'; prompt was None, now 'q'",
        ),
    ]:
        receipt_path(files[1]).write_text(json.dumps({**receipt, key: value}), encoding="utf-8")
        message = refusal(merge_shards, files, out)
        assert message.startswith(f"{files[1]} is not from the same run as {files[0]}: ")
        assert difference in message
    receipt_path(files[1]).write_text(json.dumps({**receipt, "shard": [1, 3]}), encoding="utf-8")
    assert refusal(merge_shards, files, out) == f"{files[1]} is shard 1 of 3, {files[0]} one of 2"
    receipt_path(files[1]).write_text(json.dumps({**receipt, "rows": 2}), encoding="utf-8")
    assert refusal(merge_shards, files, out) == f"{files[1]} holds 5 rows, its receipt says 2"


def test_merge_refuses_to_overwrite_without_force(tmp_path):
    out = tmp_path / "emb.npy"
    files = sharded(text_file(tmp_path), 2, out)
    merge_shards(files, out)
    assert refusal(merge_shards, files, out) == f"refusing to overwrite {out} (use --force)"
    out.unlink()
    assert refusal(merge_shards, files, out) == f"refusing to overwrite {out} (use --force)"
    merge_shards(files, out, force=True)
    assert np.array_equal(np.load(out), expected(TEXTS))
    with output_lock(out), pytest.raises(OutputBusy, match="^another run "):
        merge_shards(files, out, force=True)


def test_merge_removes_what_a_killed_merge_left(tmp_path):
    out = tmp_path / "emb.npy"
    files = sharded(text_file(tmp_path), 2, out)
    stale = tmp_path / ".emb.npy.json.0123abcd.tmp"
    stale.write_bytes(b"half")
    merge_shards(files, out)
    assert not stale.exists()


# ----------------------------------------------------------------------------- what the first run's survivors showed


def test_the_input_is_read_in_the_format_and_with_the_header_given(tmp_path):
    jsonl = tmp_path / "rows.txt"  # a JSONL file whose name says text
    jsonl.write_text("".join(json.dumps({"t": t}) + "\n" for t in TEXTS[:4]), encoding="utf-8")
    embed_file(StandIn(), InputSpec(jsonl, "jsonl", ("t",)), tmp_path / "a.npy", options())
    assert np.array_equal(np.load(tmp_path / "a.npy"), expected(TEXTS[:4]))
    tsv = tmp_path / "rows.tsv"
    tsv.write_text("title\n" + "".join(f"{t}\n" for t in TEXTS[:4]), encoding="utf-8")
    receipt = embed_file(StandIn(), InputSpec(tsv, "tsv", ("0",), header=True), tmp_path / "b.npy", options())
    assert np.array_equal(np.load(tmp_path / "b.npy"), expected(TEXTS[:4])) and receipt["input_rows"] == 4


def test_a_parts_folder_without_its_manifest_is_used(tmp_path):
    """A run killed between making the parts folder and writing its manifest."""
    spec, out = text_file(tmp_path), tmp_path / "emb.npy"
    parts_path(out).mkdir()
    embed_file(StandIn(), spec, out, options())
    assert np.array_equal(np.load(out), expected(TEXTS)) and not parts_path(out).exists()


def test_each_part_records_its_rows(tmp_path):
    spec, out = jsonl_with_bad_lines(tmp_path), tmp_path / "emb.npy"
    interrupted(tmp_path, spec, out, 1, skip_bad_lines=True)
    record = json.loads((parts_path(out) / "00000000.json").read_text("utf-8"))
    assert record == {"chunk": 0, "rows": 2, "rows_read": 3, "skipped": [[2, 3, record["skipped"][0][2]]]}
    manifest = json.loads((parts_path(out) / "manifest.json").read_text("utf-8"))
    assert manifest == {
        "input": spec.identity(),
        "options": options(skip_bad_lines=True).record(),
        "shard": [0, 1],
        "dimension": 3,
    }


def test_the_model_is_named_by_its_resolved_path(tmp_path):
    (tmp_path / "x").mkdir()
    roundabout = tmp_path / "x" / ".."
    assert options(model=str(roundabout)).record()["model"] == str(tmp_path.resolve())


class Slow(StandIn):
    def embed(self, texts, *, progress=None) -> torch.Tensor:
        time.sleep(0.02)
        return super().embed(texts, progress=progress)


def test_rows_per_second_is_of_the_rows_embedded_now(tmp_path):
    spec = text_file(tmp_path)
    started = time.perf_counter()
    receipt = embed_file(Slow(), spec, tmp_path / "emb.npy", options())
    elapsed = time.perf_counter() - started
    assert 11 / elapsed <= receipt["rows_per_second"] <= 11 / (4 * 0.02)


def last_bar(err: str) -> str:
    return err.strip().split("\r")[-1]


def test_the_progress_bar_counts_skipped_and_resumed_rows(tmp_path, capsys):
    spec = jsonl_with_bad_lines(tmp_path)
    embed_file(StandIn(), spec, tmp_path / "emb.npy", options(skip_bad_lines=True), progress=True)
    assert "| 7/7 [" in last_bar(capsys.readouterr().err)  # 5 embedded, 2 skipped
    text = text_file(tmp_path)
    interrupted(tmp_path, text, tmp_path / "t.npy", 2)
    capsys.readouterr()
    embed_file(StandIn(), text, tmp_path / "t.npy", options(), progress=True)
    assert "| 11/11 [" in last_bar(capsys.readouterr().err)  # 6 from the parts, 5 embedded now


@pytest.mark.parametrize("what", ["embed", "merge"])
def test_wait_waits_for_the_run_that_holds_the_output(tmp_path, what):
    spec, out = text_file(tmp_path), tmp_path / "emb.npy"
    files = sharded(spec, 2, out) if what == "merge" else []
    lock = output_lock(out)
    lock.__enter__()
    threading.Timer(0.1, lambda: lock.__exit__(None, None, None)).start()
    if what == "embed":
        embed_file(StandIn(), spec, out, options(), wait=True)
    else:
        merge_shards(files, out, wait=True)
    assert np.array_equal(np.load(out), expected(TEXTS))


def test_merge_of_more_rows_than_a_block(tmp_path):
    """merge_shards interleaves 16384 rows at a time: a file of more rows takes several blocks."""
    lines = [f"row {i}" for i in range(2 * 16384 + 7)]
    spec, out = text_file(tmp_path, lines), tmp_path / "emb.npy"
    files = sharded(spec, 3, out, chunk_rows=DEFAULT_CHUNK_ROWS)
    merge_shards(files, out)
    assert np.array_equal(np.load(out), expected(lines))


# ----------------------------------------------------------------------------- standard input

STDIN = InputSpec(Path("-"), "text")
PIPED = "".join(f"{line}\n" for line in TEXTS).encode("utf-8")


def pipe(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """``data`` as this process's standard input."""
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))


def saved_copies(folder: Path) -> list[str]:
    return [name for name in names(folder) if "stdin" in name]


def test_standard_input_is_saved_beside_the_output_for_the_run(tmp_path, monkeypatch, capsys):
    pipe(monkeypatch, PIPED)
    out = tmp_path / "emb.npy"
    seen = []

    def make() -> StandIn:
        seen.append(saved_copies(tmp_path))
        return StandIn()

    receipt = embed_file(make, STDIN, out, options(), progress=True)
    assert np.array_equal(np.load(out), expected(TEXTS))
    assert receipt["input"] == {
        "path": "-",
        "size": len(PIPED),
        "sha256": hashlib.sha256(PIPED).hexdigest(),
        "format": "text",
        "fields": [],
        "header": None,
    }
    assert json.loads(receipt_path(out).read_text("utf-8"))["input"] == receipt["input"]
    assert len(seen) == 1 and len(seen[0]) == 1, seen  # while the model loads: the saved copy, hidden
    assert re.fullmatch(r"\.emb\.npy\.stdin\.[0-9a-f]{8}\.tmp", seen[0][0]), seen
    assert "embed: 100%" in capsys.readouterr().err
    assert names(tmp_path) == ["emb.npy", "emb.npy.json"]  # the saved copy is gone


def test_a_stopped_run_on_standard_input_resumes_on_the_same_text_only(tmp_path, monkeypatch):
    out = tmp_path / "emb.npy"
    pipe(monkeypatch, PIPED)
    interrupted(tmp_path, STDIN, out, 2)
    assert saved_copies(tmp_path) == []  # removed after a stop too
    other = PIPED.replace(b"text 0", b"text X")  # the same size, another text
    pipe(monkeypatch, other)
    message = refusal(embed_file, StandIn(), STDIN, out, options())
    was, now = hashlib.sha256(PIPED).hexdigest(), hashlib.sha256(other).hexdigest()
    parts = parts_path(out)
    assert message == (
        f"{parts} holds the parts of a different run (input.sha256 was {was!r}, now {now!r}): run the same "
        f"command to resume it, or delete {parts} to start over"
    )
    pipe(monkeypatch, PIPED)
    embedder = StandIn()
    embed_file(embedder, STDIN, out, options())
    assert embedder.calls == [TEXTS[6:9], TEXTS[9:11]]
    assert np.array_equal(np.load(out), expected(TEXTS))
    assert names(tmp_path) == ["emb.npy", "emb.npy.json"]


def test_a_bad_line_of_standard_input_is_stdins(tmp_path, monkeypatch):
    pipe(monkeypatch, b"fine\n\xff\n")
    message = refusal(embed_file, StandIn(), STDIN, tmp_path / "emb.npy", options())
    assert message.startswith("<stdin>:2: not valid UTF-8 ")
    assert names(tmp_path) == ["emb.npy.parts"]  # the saved copy is gone; the finished parts stay
