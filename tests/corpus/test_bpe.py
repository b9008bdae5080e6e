"""Corpus tools against fairseq: ``bpe-encode`` vs fairseq's encoder script, ``train-bpe`` vs
``fairseq-preprocess``.

fairseq's ``examples/roberta/multiprocessing_bpe_encoder.py`` is not in the installed wheel, so
:func:`fairseq_encoder_script` below is its main loop, copied from the script (fairseq 0.12,
``examples/roberta/multiprocessing_bpe_encoder.py``) with only the process pool left out: the
pool changes which process encodes a row, not what is written. It runs fairseq's own
``gpt2_bpe_utils.get_encoder``; our outputs must equal its outputs byte for byte.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import re
import signal
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roberta_ext.cli.corpus import bpe_encode_main, train_bpe_main
from roberta_ext.corpus import (
    CorpusError,
    bpe_encode_files,
    build_fairseq_dictionary,
    reading,
)
from roberta_ext.tokenizers import GPT2BPE, GPT2BPEFormatError
from roberta_ext.tokenizers.dictionary import Dictionary
from tests.bpe_fixtures import UNICODE_SAMPLES, BpeFiles, build_bpe_files
from tests.peers import require, require_installed

REPO = Path(__file__).resolve().parents[2]
FAIRSEQ_PREPROCESS = Path(sys.executable).parent / "fairseq-preprocess"


# ------------------------------------------------------------------------------------ reference


def fairseq_encoder_script(
    encoder_json: Path,
    vocab_bpe: Path,
    inputs: list[str],
    outputs: list[str],
    *,
    keep_empty: bool,
    stdin: io.TextIOBase | None = None,
    stdout: io.TextIOBase | None = None,
) -> str:
    """fairseq's multiprocessing_bpe_encoder.py main(), minus the pool; returns what it prints to stderr."""
    gpt2_bpe_utils = require("fairseq.data.encoders.gpt2_bpe_utils", "fairseq's GPT-2 encoder is the peer")
    bpe = gpt2_bpe_utils.get_encoder(str(encoder_json), str(vocab_bpe))

    def encode_lines(lines):  # MultiprocessingEncoder.encode_lines, verbatim
        enc_lines = []
        for line in lines:
            line = line.strip()
            if len(line) == 0 and not keep_empty:
                return ["EMPTY", None]
            tokens = list(map(str, bpe.encode(line)))
            enc_lines.append(" ".join(tokens))
        return ["PASS", enc_lines]

    stderr = io.StringIO()
    with contextlib.ExitStack() as stack:
        inputs_h = [stack.enter_context(open(i, encoding="utf-8")) if i != "-" else stdin for i in inputs]
        outputs_h = [stack.enter_context(open(o, "w", encoding="utf-8")) if o != "-" else stdout for o in outputs]
        stats = Counter()
        for i, (filt, enc_lines) in enumerate(map(encode_lines, zip(*inputs_h)), start=1):
            if filt == "PASS":
                for enc_line, output_h in zip(enc_lines, outputs_h):
                    print(enc_line, file=output_h)
            else:
                stats["num_filtered_" + filt] += 1
            if i % 10000 == 0:
                print(f"processed {i} lines", file=stderr)
        for k, v in stats.most_common():
            print(f"[{k}] filtered {v} lines", file=stderr)
    return stderr.getvalue()


# --------------------------------------------------------------------------------------- corpora

# Line content that text-mode reading does NOT split ("\x85", "\u2028", "\x0b", ... are line
# breaks for str.splitlines but not for open(...)), or that strip() removes at the ends.
_ODD_LINES = [
    "",
    "   ",
    "\t \u3000",
    "  leading and trailing spaces  ",
    "\ufeffstarts with a BOM",
    "next line\x85inside",
    "line separator\u2028paragraph separator\u2029inside",
    "vertical tab\x0bform feed\x0cfile separator\x1cend",
    "\x0c\x1c only separators at the ends \x1f\x85",
    "nbsp\u00a0inside and at the end\u00a0",
    "zero\u200bwidth\u200d and \U0001f469\u200d\U0001f469\u200d\U0001f467 family",
]


def logical_lines(count: int, *, seed: int) -> list[str]:
    """``count`` lines without "\\r"/"\\n": the Unicode samples cut at their line breaks, odd lines, empties."""
    pool = [piece for sample in UNICODE_SAMPLES for piece in re.split(r"\r\n|\r|\n", sample)] + _ODD_LINES
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(count)]


def write_lines(
    path: Path, lines: list[str], *, terminators: tuple[str, ...] = ("\n", "\r\n", "\r"), last: str = ""
) -> Path:
    """Join lines with rotating terminators (bytes kept as given: newline="")."""
    parts, previous = [], ""
    for k, line in enumerate(lines[:-1]):
        terminator = terminators[k % len(terminators)]
        if previous == "\r" and not line and terminator.startswith("\n"):
            terminator = "\r"  # "\r" + "" + "\n" would be one "\r\n" line break, not two
        parts.append(line + terminator)
        previous = terminator
    path.write_text("".join(parts) + lines[-1] + last, encoding="utf-8", newline="")
    return path


@pytest.fixture
def vocab(tmp_path: Path) -> BpeFiles:
    return build_bpe_files(tmp_path / "vocab")


def _encode_cli(vocab: BpeFiles, inputs: list[Path | str], outputs: list[Path | str], *extra: str) -> int:
    return bpe_encode_main(
        [
            "--encoder-json",
            str(vocab.encoder_json),
            "--vocab-bpe",
            str(vocab.vocab_bpe),
            "--inputs",
            *map(str, inputs),
            "--outputs",
            *map(str, outputs),
            "--no-progress",
            *extra,
        ]
    )


def _leftovers(directory: Path) -> list[str]:
    """Temporary files of ours left in ``directory`` (there must be none)."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# ----------------------------------------------------------------------------- bpe-encode = fairseq


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("keep_empty", [False, True])
@pytest.mark.parametrize("parallel", [1, 2])
def test_bpe_encode_equals_fairseq_script(tmp_path, vocab, capsys, monkeypatch, workers, keep_empty, parallel):
    monkeypatch.setattr(reading, "CHUNK_ROWS", 13)  # many chunks, so order across workers matters
    inputs = [
        write_lines(tmp_path / "a.txt", logical_lines(300, seed=1), last="\r\n"),
        write_lines(tmp_path / "b.txt", logical_lines(300, seed=2), terminators=("\r\n",)),
    ][:parallel]
    ours = [tmp_path / f"ours{k}.bpe" for k in range(parallel)]
    theirs = [tmp_path / f"theirs{k}.bpe" for k in range(parallel)]
    extra = ["--workers", str(workers), *(["--keep-empty"] if keep_empty else [])]

    assert _encode_cli(vocab, inputs, ours, *extra) == 0
    expected_stderr = fairseq_encoder_script(
        vocab.encoder_json, vocab.vocab_bpe, list(map(str, inputs)), list(map(str, theirs)), keep_empty=keep_empty
    )
    for mine, reference in zip(ours, theirs):
        assert mine.read_bytes() == reference.read_bytes()
    assert capsys.readouterr().err == expected_stderr
    if not keep_empty:
        assert "[num_filtered_EMPTY] filtered" in expected_stderr  # the corpus does hold empty rows
    assert _leftovers(tmp_path) == []


def test_bpe_encode_progress_messages_and_stats(tmp_path, vocab, capsys, monkeypatch):
    """fairseq's 'processed N lines' every 10000 rows (when no bar), over many small chunks."""
    monkeypatch.setattr(reading, "CHUNK_ROWS", 777)
    lines = [f"line {k} {'' if k % 7 else '  '}" if k % 11 else "" for k in range(25_000)]
    source = write_lines(tmp_path / "in.txt", lines, terminators=("\n",), last="\n")
    assert _encode_cli(vocab, [source], [tmp_path / "ours.bpe"], "--workers", "2") == 0
    expected = fairseq_encoder_script(
        vocab.encoder_json, vocab.vocab_bpe, [str(source)], [str(tmp_path / "theirs.bpe")], keep_empty=False
    )
    assert expected.startswith("processed 10000 lines\nprocessed 20000 lines\n[num_filtered_EMPTY] filtered ")
    assert capsys.readouterr().err == expected
    assert (tmp_path / "ours.bpe").read_bytes() == (tmp_path / "theirs.bpe").read_bytes()

    stats = bpe_encode_files(vocab.encoder_json, vocab.vocab_bpe, [source], [tmp_path / "again.bpe"])
    assert (stats.rows, stats.filtered_empty, stats.written) == (25_000, 2273, 25_000 - 2273)
    assert stats.bytes_read == source.stat().st_size


_LINE_PIECES = st.sampled_from(
    ["a", " ", "\t", "\r", "\n", "\r\n", "\x85", "\u2028", "\x0c", "é", "😀", "'s", "12", "\ufeff"]
)


@settings(max_examples=40, deadline=None)
@given(text=st.lists(st.one_of(_LINE_PIECES, st.text(max_size=3)), min_size=1, max_size=30).map("".join))
def test_bpe_encode_splits_and_strips_lines_as_text_mode(tmp_path_factory, text):
    """Any text, any mix of line breaks: same lines as open(path, "r", encoding="utf-8")."""
    directory = tmp_path_factory.mktemp("lines")
    files = build_bpe_files(directory)
    source = directory / "in.txt"
    source.write_text(text, encoding="utf-8", errors="surrogatepass", newline="")
    if any("\ud800" <= ch <= "\udfff" for ch in text):
        return  # lone surrogates are not UTF-8 text; covered by the invalid-UTF-8 tests
    bpe_encode_files(files.encoder_json, files.vocab_bpe, [source], [directory / "ours"], keep_empty=True)
    fairseq_encoder_script(
        files.encoder_json, files.vocab_bpe, [str(source)], [str(directory / "theirs")], keep_empty=True
    )
    assert (directory / "ours").read_bytes() == (directory / "theirs").read_bytes()


def test_bpe_encode_stdin_to_stdout(vocab, capsys, monkeypatch):
    """'-' as fairseq's script reads sys.stdin on POSIX: lines end at "\\n" only, "\\r" stays inside."""
    data = ("".join(line + "\r\n" for line in logical_lines(200, seed=3)) + "a lone \r inside\n\nend").encode("utf-8")

    def stdio() -> tuple[io.TextIOWrapper, io.TextIOWrapper]:
        # CPython builds sys.stdin with newline="\n" on POSIX (create_stdio in pylifecycle.c).
        return (
            io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline="\n"),
            io.TextIOWrapper(io.BytesIO(), encoding="utf-8", newline="\n"),
        )

    stdin, stdout = stdio()
    with monkeypatch.context() as patch:
        patch.setattr(sys, "stdin", stdin)
        patch.setattr(sys, "stdout", stdout)
        assert _encode_cli(vocab, ["-"], ["-"], "--workers", "2") == 0
    ours = stdout.buffer.getvalue()
    stdin, stdout = stdio()
    expected_stderr = fairseq_encoder_script(
        vocab.encoder_json, vocab.vocab_bpe, ["-"], ["-"], keep_empty=False, stdin=stdin, stdout=stdout
    )
    stdout.flush()
    assert ours == stdout.buffer.getvalue()
    assert capsys.readouterr().err == expected_stderr
    # One output line per "\n"-terminated non-blank line: the lone "\r" did not split its line.
    assert ours.count(b"\n") == sum(1 for line in data.decode().split("\n") if line.strip())


# ----------------------------------------------------------------------------- bpe-encode errors


def test_bpe_encode_invalid_utf8_midway_writes_nothing(tmp_path, vocab, capsys, monkeypatch):
    monkeypatch.setattr(reading, "CHUNK_ROWS", 64)  # earlier chunks are encoded and written first
    lines = [line.encode("utf-8") for line in logical_lines(1000, seed=4)]
    lines[499] = b"valid start \xc3\x28 then garbage"
    source = tmp_path / "in.txt"
    source.write_bytes(b"\n".join(lines) + b"\n")
    parallel = write_lines(tmp_path / "other.txt", logical_lines(1000, seed=5), last="\n")
    old = tmp_path / "a.bpe"
    old.write_text("previous contents\n")
    for workers in ("1", "2"):
        assert _encode_cli(vocab, [parallel, source], [tmp_path / "b.bpe", old], "--workers", workers) == 1
        err = capsys.readouterr().err
        assert f"{source}:500: not valid UTF-8" in err and "invalid continuation byte" in err
        assert old.read_text() == "previous contents\n"  # untouched, not truncated
        assert not (tmp_path / "b.bpe").exists()
        assert _leftovers(tmp_path) == []


def test_bpe_encode_missing_input(tmp_path, vocab, capsys):
    assert _encode_cli(vocab, [tmp_path / "missing.txt"], [tmp_path / "out.bpe"]) == 1
    assert f"input file not found: '{tmp_path / 'missing.txt'}'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab"]
    assert _encode_cli(vocab, [tmp_path], [tmp_path / "out.bpe"]) == 1
    assert "input is a directory" in capsys.readouterr().err


def test_bpe_encode_counts_of_inputs_and_outputs(tmp_path, vocab, capsys):
    source = write_lines(tmp_path / "in.txt", ["a", "b"])
    with pytest.raises(SystemExit) as exit_info:
        _encode_cli(vocab, [source, source], [tmp_path / "out.bpe"])
    assert exit_info.value.code == 2
    assert "2 inputs, 1 outputs" in capsys.readouterr().err
    with pytest.raises(CorpusError, match="number of input and output paths should match"):
        bpe_encode_files(vocab.encoder_json, vocab.vocab_bpe, [source], [])
    with pytest.raises(CorpusError, match="given more than once"):
        bpe_encode_files(vocab.encoder_json, vocab.vocab_bpe, [source, source], [tmp_path / "o", tmp_path / "o"])


def test_bpe_encode_parallel_inputs_of_different_lengths(tmp_path, vocab, capsys):
    short = write_lines(tmp_path / "short.txt", ["a", "b", "c"])
    long = write_lines(tmp_path / "long.txt", ["a", "b", "c", "d"])  # fairseq's zip() would drop "d"
    assert _encode_cli(vocab, [long, short], [tmp_path / "1.bpe", tmp_path / "2.bpe"]) == 1
    err = capsys.readouterr().err
    assert f"{short} ended after 3 lines, but {long} has more" in err
    assert "parallel columns" in err and "run bpe-encode once per file" in err  # not tokenize's separate files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.txt", "short.txt", "vocab"]


def test_inputs_help_tells_parallel_columns_from_separate_files(capsys):
    """``bpe-encode --inputs a b`` are fairseq's parallel columns, ``tokenize --inputs a b``
    separate files: both --help texts say so, naming the other command."""
    from roberta_ext.cli.corpus import tokenize_main

    for main, meaning, other in (
        (bpe_encode_main, "PARALLEL COLUMNS", "roberta-ext tokenize"),
        (tokenize_main, "SEPARATE files", "roberta-ext bpe-encode"),
    ):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert meaning in text and other in text


def test_bpe_encode_bad_vocabulary_or_output_folder(tmp_path, vocab, capsys):
    source = write_lines(tmp_path / "in.txt", ["hello"])
    vocab.vocab_bpe.write_text("#version: 0.2\nĠ t\nthis line has three fields\n", encoding="utf-8")
    assert _encode_cli(vocab, [source], [tmp_path / "out.bpe"]) == 1
    assert f"{vocab.vocab_bpe}:3: expected '<left> <right>'" in capsys.readouterr().err
    vocab.encoder_json.write_text("{not json", encoding="utf-8")
    with pytest.raises(GPT2BPEFormatError, match=re.escape(str(vocab.encoder_json))):
        bpe_encode_files(vocab.encoder_json, vocab.vocab_bpe, [source], [tmp_path / "out.bpe"])
    assert not (tmp_path / "out.bpe").exists()

    good = build_bpe_files(tmp_path / "good")
    assert _encode_cli(good, [source], [tmp_path / "no" / "such" / "dir" / "out.bpe"]) == 1
    assert f"output directory does not exist: '{tmp_path / 'no' / 'such' / 'dir'}'" in capsys.readouterr().err


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_bpe_encode_interrupted_leaves_no_output(tmp_path, vocab):
    """Ctrl-C (SIGINT to the whole process group) or SIGTERM mid-run: temporary files go away.

    Both runs go at once, through ``python -m roberta_ext``: each spends seconds importing torch.
    """
    runs = {}
    for signal_number in (signal.SIGINT, signal.SIGTERM):
        directory = tmp_path / signal.Signals(signal_number).name
        directory.mkdir()
        output = directory / "out.bpe"
        output.write_text("previous contents\n")
        runs[signal_number] = (
            directory,
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "roberta_ext",
                    "bpe-encode",
                    "--encoder-json",
                    str(vocab.encoder_json),
                    "--vocab-bpe",
                    str(vocab.vocab_bpe),
                    "--inputs",
                    "-",
                    "--outputs",
                    str(output),
                    "--workers",
                    "2",
                ],
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=REPO,
                start_new_session=True,
                # As from a terminal: a test suite started in the background of a non-interactive
                # shell inherits SIGINT ignored, and so would the command (rightly: nohup semantics).
                preexec_fn=_sigint_default,
            ),
        )
    try:
        for _directory, process in runs.values():
            process.stdin.write(b"some text\n" * 10_000)  # then stdin stays open: the run waits for more
            process.stdin.flush()
        for signal_number, (directory, process) in runs.items():
            deadline = time.monotonic() + 60
            while not _leftovers(directory) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert _leftovers(directory), "the run never started writing"
            time.sleep(0.3)
            if signal_number == signal.SIGINT:
                os.killpg(process.pid, signal.SIGINT)  # what the terminal does on Ctrl-C
            else:
                process.send_signal(signal.SIGTERM)
        for signal_number, (directory, process) in runs.items():
            returncode = process.wait(timeout=60)
            stderr = process.stderr.read().decode()
            assert returncode == 128 + signal_number, stderr
            assert "Traceback" not in stderr
            assert (directory / "out.bpe").read_text() == "previous contents\n"
            assert _leftovers(directory) == []
    finally:
        for _, process in runs.values():
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdin.close()
            process.stderr.close()


# ------------------------------------------------------------------------------------ train-bpe


def _stdlib_text(name: str) -> str:
    return (Path(sysconfig.get_paths()["stdlib"]) / name).read_text(encoding="utf-8")


def test_build_fairseq_dictionary_equals_finalize():
    """Ties broken by symbol string, padding rows: as fairseq's Dictionary.finalize."""
    fairseq_data = require("fairseq.data", "fairseq's Dictionary.finalize is the peer")
    rng = random.Random(0)
    counts = {token_id: rng.choice([1, 2, 3, 50]) for token_id in rng.sample(range(2000), 301)}
    theirs = fairseq_data.Dictionary()
    for symbol, count in sorted((str(i), n) for i, n in counts.items()):
        theirs.add_symbol(symbol, count)
    theirs.finalize(padding_factor=8)
    ours = build_fairseq_dictionary(counts)
    assert (ours.symbols, ours.count) == (theirs.symbols, theirs.count)
    assert len(ours) % 8 == 0 and ours.symbols[-1].startswith("madeupword")


def test_train_bpe_then_fairseq_preprocess(tmp_path):
    """dict.txt == the dictionary fairseq-preprocess builds itself, and --srcdict changes nothing."""
    require_installed("fairseq_cli.preprocess", "the test runs fairseq-preprocess")
    gpt2_bpe_utils = require("fairseq.data.encoders.gpt2_bpe_utils", "fairseq's GPT-2 encoder is the peer")
    lines = [*_stdlib_text("textwrap.py").splitlines(), *logical_lines(400, seed=6)]
    train = write_lines(tmp_path / "train.txt", lines)
    extra = tmp_path / "extra.txt"  # learned from, but not counted in dict.txt
    extra.write_text(_stdlib_text("calendar.py"), encoding="utf-8")
    out = tmp_path / "gpt2_bpe"
    assert (
        train_bpe_main(
            [
                "--inputs",
                str(train),
                str(extra),
                "--output-dir",
                str(out),
                "--num-merges",
                "400",
                "--dict-from",
                str(train),
                "--workers",
                "2",
                "--no-progress",
            ]
        )
        == 0
    )
    assert _leftovers(out) == []

    # fairseq's own GPT-2 encoder reads the learned files and agrees with ours.
    theirs = gpt2_bpe_utils.get_encoder(str(out / "encoder.json"), str(out / "vocab.bpe"))
    ours = GPT2BPE.from_files(out / "encoder.json", out / "vocab.bpe")
    sample = _stdlib_text("calendar.py")[:5000] + "".join(UNICODE_SAMPLES)
    assert ours.encode(sample) == theirs.encode(sample)
    assert len(theirs.bpe_ranks) == 400

    assert (
        bpe_encode_main(
            [
                "--encoder-json",
                str(out / "encoder.json"),
                "--vocab-bpe",
                str(out / "vocab.bpe"),
                "--inputs",
                str(train),
                "--outputs",
                str(tmp_path / "train.bpe"),
                "--workers",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )
    common = [str(FAIRSEQ_PREPROCESS), "--only-source", "--trainpref", str(tmp_path / "train.bpe"), "--workers", "1"]
    runs = [  # both at once: each spends seconds importing fairseq
        subprocess.Popen(
            [*common, "--destdir", str(tmp_path / "own")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        ),
        subprocess.Popen(
            [*common, "--destdir", str(tmp_path / "src"), "--srcdict", str(out / "dict.txt")],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ),
    ]
    for run in runs:
        log = run.communicate(timeout=300)[0].decode()
        assert run.returncode == 0, log
    assert (tmp_path / "own" / "dict.txt").read_bytes() == (out / "dict.txt").read_bytes()
    for name in ("dict.txt", "train.bin", "train.idx"):
        assert (tmp_path / "src" / name).read_bytes() == (tmp_path / "own" / name).read_bytes(), name


def test_train_bpe_dict_counts_the_encoded_inputs(tmp_path, capsys):
    """Without --dict-from, dict.txt counts the ids of every input, as they come out of bpe-encode."""
    inputs = [
        write_lines(tmp_path / "a.txt", logical_lines(300, seed=7)),
        write_lines(tmp_path / "b.txt", _stdlib_text("textwrap.py").splitlines()[:400], terminators=("\r\n",)),
    ]
    out = tmp_path / "out"
    args = ["--inputs", *map(str, inputs), "--output-dir", str(out), "--num-merges", "200", "--workers", "1"]
    assert train_bpe_main(args) == 0
    assert "learned 200 merges (457 tokens)" in capsys.readouterr().err
    encoded = [tmp_path / "a.bpe", tmp_path / "b.bpe"]
    bpe_encode_files(out / "encoder.json", out / "vocab.bpe", inputs[:1], encoded[:1])
    bpe_encode_files(out / "encoder.json", out / "vocab.bpe", inputs[1:], encoded[1:])
    counts = Counter(token for path in encoded for token in path.read_text().split())
    expected = build_fairseq_dictionary({int(symbol): n for symbol, n in counts.items()})
    rows = out.joinpath("dict.txt").read_text().splitlines()
    assert rows == [f"{s} {n}" for s, n in zip(expected.symbols[4:], expected.count[4:])]
    assert len(rows) + 4 == len(expected) and len(expected) % 8 == 0


def test_train_bpe_refuses_to_overwrite(tmp_path, capsys):
    source = write_lines(tmp_path / "in.txt", logical_lines(100, seed=8))
    out = tmp_path / "out"
    out.mkdir()
    (out / "vocab.bpe").write_text("mine\n")
    args = ["--inputs", str(source), "--output-dir", str(out), "--num-merges", "50", "--workers", "1"]
    assert train_bpe_main(args) == 1
    assert f"refusing to overwrite {out / 'vocab.bpe'} (use --force)" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["vocab.bpe"]
    assert train_bpe_main([*args, "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["dict.txt", "encoder.json", "vocab.bpe"]
    assert (out / "vocab.bpe").read_text().startswith("#version: 0.2\n")


def test_train_bpe_interrupted_while_writing_leaves_nothing(tmp_path, monkeypatch):
    source = write_lines(tmp_path / "in.txt", logical_lines(100, seed=9))
    out = tmp_path / "out"

    def interrupted_save(self, path):  # encoder.json and vocab.bpe are written by then
        raise KeyboardInterrupt

    monkeypatch.setattr(Dictionary, "save", interrupted_save)
    args = ["--inputs", str(source), "--output-dir", str(out), "--num-merges", "20", "--workers", "1"]
    assert train_bpe_main(args) == 130
    assert list(out.iterdir()) == []


def test_train_bpe_input_errors(tmp_path, capsys):
    out = str(tmp_path / "out")
    assert train_bpe_main(["--inputs", str(tmp_path / "missing.txt"), "--output-dir", out]) == 1
    assert "input file not found" in capsys.readouterr().err
    assert train_bpe_main(["--inputs", "-", "--output-dir", out]) == 1
    assert "give files, not '-'" in capsys.readouterr().err
    empty = write_lines(tmp_path / "empty.txt", ["", "  ", "\t"])
    assert train_bpe_main(["--inputs", str(empty), "--output-dir", out, "--workers", "1"]) == 1
    assert "every line is empty" in capsys.readouterr().err
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\nfine\n\xff\n")
    assert train_bpe_main(["--inputs", str(bad), "--output-dir", out, "--workers", "2"]) == 1
    assert f"{bad}:3: not valid UTF-8" in capsys.readouterr().err
    assert not Path(out).exists() or list(Path(out).iterdir()) == []
