"""``roberta-ext glue-preprocess`` (``roberta_ext/corpus/glue.py``'s ``glue_preprocess``) on a tiny
corpus with the small BPE of ``tests/bpe_fixtures.py``: the fairseq-preprocess runs it asks for (those
of ``preprocess_GLUE_tasks.sh``), each task's folder, the BPE text against fairseq's own GPT-2 encoder,
the statistics and the report, and the errors found before any work. fairseq-preprocess is replaced by
a stand-in that records its arguments and copies the text it would binarize
(``tests/corpus/test_glue.py`` runs the real one, against the script, byte for byte)."""

from __future__ import annotations

import importlib.util
import io
import re
import shutil
from pathlib import Path

import pytest

from roberta_ext.corpus import CorpusError, glue, preparation
from roberta_ext.corpus.binarize import PreprocessBatch
from roberta_ext.corpus.glue import TASKS, GlueStats, glue_preprocess
from roberta_ext.tokenizers.dictionary import DictionaryFormatError
from roberta_ext.tokenizers.gpt2_bpe import GPT2BPEFormatError
from tests.corpus.test_glue import QQP_HEADER, STSB_HEADER, stsb_row, write

pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")


# ------------------------------------------------------------------- fairseq-preprocess's runs


def test_the_fairseq_preprocess_runs_are_the_scripts_for_a_pair_task_with_five_splits():
    texts = [glue._SplitText(stem, split) for stem, split in TASKS["MNLI"].splits]
    commands = glue._preprocess_commands(TASKS["MNLI"], texts, "T", Path("/bpe/dict.txt"), 3)
    assert commands == [
        [
            "--only-source",
            "--trainpref",
            "T/train.input0",
            "--validpref",
            "T/dev_matched.input0,T/dev_mismatched.input0",
        ]
        + ["--testpref", "T/test_matched.input0,T/test_mismatched.input0", "--destdir", "input0", "--workers", "3"]
        + ["--srcdict", "/bpe/dict.txt"],
        [
            "--only-source",
            "--trainpref",
            "T/train.input1",
            "--validpref",
            "T/dev_matched.input1,T/dev_mismatched.input1",
        ]
        + ["--testpref", "T/test_matched.input1,T/test_mismatched.input1", "--destdir", "input1", "--workers", "3"]
        + ["--srcdict", "/bpe/dict.txt"],
        ["--only-source", "--trainpref", "T/train.label", "--validpref", "T/dev_matched.label,T/dev_mismatched.label"]
        + ["--destdir", "label", "--workers", "3"],
    ]


def test_the_fairseq_preprocess_runs_of_a_single_sentence_task_and_of_stsb():
    texts = [glue._SplitText(stem, split) for stem, split in TASKS["CoLA"].splits]
    assert glue._preprocess_commands(TASKS["CoLA"], texts, ".text", Path("d.txt"), 1) == [
        ["--only-source", "--trainpref", ".text/train.input0", "--validpref", ".text/dev.input0", "--testpref"]
        + [".text/test.input0", "--destdir", "input0", "--workers", "1", "--srcdict", "d.txt"],
        ["--only-source", "--trainpref", ".text/train.label", "--validpref", ".text/dev.label", "--destdir", "label"]
        + ["--workers", "1"],
    ]
    texts = [glue._SplitText(stem, split) for stem, split in TASKS["STS-B"].splits]
    commands = glue._preprocess_commands(TASKS["STS-B"], texts, ".text", Path("d.txt"), 2)
    assert [command[command.index("--destdir") + 1] for command in commands] == ["input0", "input1"]


# ------------------------------------------------------------------- the whole command


class FairseqPreprocess:
    """fairseq-preprocess's stand-in: records each batch, and for each run copies the text it would
    binarize to ``<destdir>/<split>.txt`` (fairseq's names: ``valid``, ``valid1``, ...), writes a
    ``preprocess.log``, and for the labels a ``dict.txt`` of the train labels as fairseq orders them
    (most frequent first, then by name), padded with ``madeupwordNNNN`` to a multiple of 8."""

    def __init__(self) -> None:
        self.batches: list[PreprocessBatch] = []
        self.reports: dict[str, list[str]] = {}

    def __call__(self, batches):
        reports = {}
        for batch in batches:
            self.batches.append(PreprocessBatch(batch.name, batch.cwd, [list(c) for c in batch.commands]))
            reports[batch.name] = []
            for command in batch.commands:
                options = {command[i]: command[i + 1] for i in range(1, len(command) - 1, 2)}
                destdir = Path(batch.cwd) / options["--destdir"]
                destdir.mkdir()
                (destdir / "preprocess.log").write_text(f"run in {batch.cwd}\n")
                for option, split in (("--trainpref", "train"), ("--validpref", "valid"), ("--testpref", "test")):
                    for i, prefix in enumerate(options.get(option, "").split(",") if option in options else []):
                        source = Path(batch.cwd) / prefix
                        shutil.copyfile(source, destdir / f"{split}{i or ''}.txt")
                        lines = source.read_text().splitlines()
                        tokens = sum(len(line.split()) + 1 for line in lines)
                        reports[batch.name].append(  # fairseq's line, without "(by <unk>)"
                            f"[None] {prefix}: {len(lines)} sents, {tokens} tokens, 0.0% replaced"
                        )
                if "--srcdict" not in options:
                    counts: dict[str, int] = {}
                    for line in (Path(batch.cwd) / options["--trainpref"]).read_text().splitlines():
                        counts[line.strip()] = counts.get(line.strip(), 0) + 1
                    symbols = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
                    while (len(symbols) + 4) % 8:
                        symbols.append((f"madeupword{len(symbols) - len(counts):04d}", 0))
                    (destdir / "dict.txt").write_text("".join(f"{s} {n}\n" for s, n in symbols))
        self.reports |= reports
        return reports


@pytest.fixture
def fairseq_preprocess(monkeypatch) -> FairseqPreprocess:
    monkeypatch.setattr(preparation, "check_fairseq", lambda why: None)
    stand_in = FairseqPreprocess()
    monkeypatch.setattr(preparation, "run_fairseq_preprocess", stand_in)
    return stand_in


def tiny_glue(folder: Path) -> Path:
    """Three tasks of GLUE, two or three rows per file: RTE (a pair task, its dev.tsv with CRLF ends),
    CoLA (one sentence, no header in train and dev) and STS-B (scores)."""
    write(
        folder / "RTE" / "train.tsv",
        "index\ts1\ts2\tlabel\n0\tA man sings.\tSomeone sings.\tentailment\n"
        "1\tA dog.\t  A cat. \tnot_entailment\n2\tIt rains.\tIt is wet.\tentailment\n",
    )
    write(folder / "RTE" / "dev.tsv", "index\ts1\ts2\tlabel\r\n0\tThe sun.\tLight.\tnot_entailment\r\n")
    write(folder / "RTE" / "test.tsv", "index\ts1\ts2\n0\tA test.\t\n1\tTwo.\tThree.")
    write(folder / "CoLA" / "train.tsv", "gj04\t1\t\tThe sailors rode.\ngj04\t0\t*\tRode the.\n")
    write(folder / "CoLA" / "dev.tsv", "gj04\t0\t*\tThe sailors.\n")
    write(folder / "CoLA" / "test.tsv", "index\tsentence\n0\tA sentence.\n")
    write(folder / "STS-B" / "train.tsv", STSB_HEADER + stsb_row("3.8", "A plane.", "A jet.") + stsb_row("5.000"))
    write(folder / "STS-B" / "dev.tsv", STSB_HEADER + stsb_row("0.0000005", "x", "y"))
    write(folder / "STS-B" / "test.tsv", STSB_HEADER + "0\tg\tf\ty\to\ts\ts\tone\ttwo\n")
    return folder


def gpt2_encoder(bpe_files):
    """fairseq's own GPT-2 BPE (``fairseq/data/encoders/gpt2_bpe_utils.py``), without fairseq's import."""
    spec = importlib.util.find_spec("fairseq")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fairseq is not installed")
    source = Path(next(iter(spec.submodule_search_locations))) / "data" / "encoders" / "gpt2_bpe_utils.py"
    module_spec = importlib.util.spec_from_file_location("gpt2_bpe_utils_of_fairseq", source)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_encoder(str(bpe_files.encoder_json), str(bpe_files.vocab_bpe))


def encoded(encoder, lines: list[str]) -> bytes:
    """``multiprocessing_bpe_encoder.py --keep-empty``: each line stripped, an empty one kept."""
    return "".join(" ".join(map(str, encoder.encode(line.strip()))) + "\n" for line in lines).encode()


@pytest.fixture(scope="module")
def glue_dir(tmp_path_factory) -> Path:
    return tiny_glue(tmp_path_factory.mktemp("glue") / "glue_data")


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_glue_preprocess_writes_each_tasks_folder_as_the_script_does(
    glue_dir, bpe_files, fairseq_preprocess, tmp_path, capsys
):
    out = tmp_path / "out"
    log = io.StringIO()
    stats = glue_preprocess(glue_dir, ["rte", "CoLA", "sts-b"], out, bpe_dir=bpe_files.dict_txt.parent, log=log)
    encoder = gpt2_encoder(bpe_files)

    assert sorted(path.name for path in out.iterdir()) == ["CoLA-bin", "RTE-bin", "STS-B-bin"]
    assert tree(out / "RTE-bin") == {
        "input0/test.txt": encoded(encoder, ["A test.", "Two."]),
        "input0/train.txt": encoded(encoder, ["A man sings.", "A dog.", "It rains."]),
        "input0/valid.txt": encoded(encoder, ["The sun."]),
        "input1/test.txt": encoded(encoder, ["", "Three."]),
        "input1/train.txt": encoded(encoder, ["Someone sings.", "A cat.", "It is wet."]),
        "input1/valid.txt": encoded(encoder, ["Light."]),
        "label/dict.txt": b"entailment 2\nnot_entailment 1\nmadeupword0000 0\nmadeupword0001 0\n",
        "label/train.txt": b"entailment\nnot_entailment\nentailment\n",
        "label/valid.txt": b"not_entailment\r\n",
    }
    assert tree(out / "CoLA-bin") == {
        "input0/test.txt": encoded(encoder, ["A sentence."]),
        "input0/train.txt": encoded(encoder, ["The sailors rode.", "Rode the."]),
        "input0/valid.txt": encoded(encoder, ["The sailors."]),
        "label/dict.txt": b"0 1\n1 1\nmadeupword0000 0\nmadeupword0001 0\n",
        "label/train.txt": b"1\n0\n",
        "label/valid.txt": b"0\n",
    }
    assert tree(out / "STS-B-bin") == {
        "input0/test.txt": encoded(encoder, ["one"]),
        "input0/train.txt": encoded(encoder, ["A plane.", "a"]),
        "input0/valid.txt": encoded(encoder, ["x"]),
        "input1/test.txt": encoded(encoder, ["two"]),
        "input1/train.txt": encoded(encoder, ["A jet.", "b"]),
        "input1/valid.txt": encoded(encoder, ["y"]),
        "label/train.label": b"0.76\n1\n",
        "label/valid.label": b"1e-07\n",
    }

    assert [(s.task, s.output, s.rows, s.dropped, s.labels) for s in stats] == [
        ("RTE", out / "RTE-bin", {"train": 3, "valid": 1, "test": 2}, {}, ["entailment", "not_entailment"]),
        ("CoLA", out / "CoLA-bin", {"train": 2, "valid": 1, "test": 1}, {}, ["0", "1"]),
        ("STS-B", out / "STS-B-bin", {"train": 2, "valid": 1, "test": 1}, {}, []),
    ]
    assert [s.report for s in stats] == [fairseq_preprocess.reports[name] for name in ("RTE", "CoLA", "STS-B")]

    def tokens(task: str) -> int:  # the BPE ids and each line's </s>, as fairseq-preprocess counts them
        files = tree(out / f"{task}-bin")
        return sum(
            len(line.split()) + 1 for name in files if name.startswith("input") for line in files[name].splitlines()
        )

    assert log.getvalue() == (
        "binarizing with fairseq-preprocess: RTE, CoLA, STS-B\n"
        f"RTE: train 3, valid 1, test 2 rows -> {out / 'RTE-bin'}; labels (class 0, 1, ...): "
        "entailment not_entailment\n"
        f"RTE: {tokens('RTE')} BPE tokens; <unk> (not in dict.txt): at most 0.0% (test.tsv, input1)\n"
        f"CoLA: train 2, valid 1, test 1 rows -> {out / 'CoLA-bin'}; labels (class 0, 1, ...): 0 1\n"
        f"CoLA: {tokens('CoLA')} BPE tokens; <unk> (not in dict.txt): at most 0.0% (test.tsv, input0)\n"
        f"STS-B: train 2, valid 1, test 1 rows -> {out / 'STS-B-bin'}; scores / 5 in label/\n"
        f"STS-B: {tokens('STS-B')} BPE tokens; <unk> (not in dict.txt): at most 0.0% (test.tsv, input1)\n"
    )
    assert capsys.readouterr() == ("", "")


def test_fairseq_preprocess_is_asked_for_the_scripts_runs_in_each_tasks_folder(
    glue_dir, bpe_files, fairseq_preprocess, tmp_path
):
    glue_preprocess(glue_dir, ["STS-B", "RTE"], tmp_path / "out", bpe_dir=bpe_files.dict_txt.parent)
    dict_txt = str(bpe_files.dict_txt.resolve())
    batches = fairseq_preprocess.batches
    assert [batch.name for batch in batches] == ["STS-B", "RTE"]
    assert all(batch.cwd.parent == tmp_path / "out" and batch.cwd.name != f"{batch.name}-bin" for batch in batches)
    source = ["--trainpref", ".text/train.{0}", "--validpref", ".text/dev.{0}"]
    test = ["--testpref", ".text/test.{0}"]
    for batch, columns in zip(batches, (["input0", "input1"], ["input0", "input1", "label"])):
        expected = [
            ["--only-source", *(arg.format(column) for arg in source)]
            + ([] if column == "label" else [arg.format(column) for arg in test])
            + ["--destdir", column, "--workers", "1"]
            + ([] if column == "label" else ["--srcdict", dict_txt])
            for column in columns
        ]
        assert batch.commands == expected


def test_bpe_workers_encode_as_one_process_does_and_are_fairseqs_workers(
    glue_dir, bpe_files, fairseq_preprocess, tmp_path
):
    glue_preprocess(glue_dir, ["RTE"], tmp_path / "one", bpe_dir=bpe_files.dict_txt.parent, workers=1)
    glue_preprocess(glue_dir, ["RTE"], tmp_path / "two", bpe_dir=bpe_files.dict_txt.parent, workers=2)
    assert tree(tmp_path / "two" / "RTE-bin") == tree(tmp_path / "one" / "RTE-bin")
    one, two = fairseq_preprocess.batches
    assert [command[command.index("--workers") + 1] for command in one.commands + two.commands] == ["1"] * 3 + ["2"] * 3


def test_a_bad_bpe_vocabulary_is_refused_before_the_rows_are_read(glue_dir, bpe_files, fairseq_preprocess, tmp_path):
    folder = tmp_path / "glue"
    shutil.copytree(glue_dir, folder)
    write(folder / "RTE" / "train.tsv", "no rows here")
    bpe = tmp_path / "bpe"
    shutil.copytree(bpe_files.dict_txt.parent, bpe)
    write(bpe / "encoder.json", "{")
    with pytest.raises(GPT2BPEFormatError, match="^" + re.escape(f"{bpe / 'encoder.json'}: ")):
        glue_preprocess(folder, ["RTE"], tmp_path / "out", bpe_dir=bpe)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []


def test_the_report_sums_the_bpe_tokens_and_names_the_worst_unk_rate():
    stats = GlueStats("MNLI", Path("out/MNLI-bin"), {"train": 3, "valid": 2}, labels=["a", "b"])
    stats.report = [
        "[None] .text/train.input0: 3 sents, 20 tokens, 0.5% replaced (by <unk>)",
        "[None] .text/dev_matched.input1: 2 sents, 7 tokens, 1.25% replaced (by <unk>)",
        "[None] .text/dev_mismatched.input0: 2 sents, 9 tokens, 1.25% replaced (by <unk>)",
        "[None] .text/train.label: 3 sents, 6 tokens, 50.0% replaced (by <unk>)",
        "something else",
    ]
    log = io.StringIO()
    glue._report(stats, log)
    assert log.getvalue() == (
        "MNLI: train 3, valid 2 rows -> out/MNLI-bin; labels (class 0, 1, ...): a b\n"
        "MNLI: 36 BPE tokens; <unk> (not in dict.txt): at most 1.25% (dev_mismatched.tsv, input0)\n"
    )


def test_the_report_names_the_first_split_when_no_token_is_replaced_and_omits_tokens_when_none():
    stats = GlueStats("RTE", Path("RTE-bin"), {"train": 1}, labels=["x"])
    stats.report = ["[None] .text/train.input0: 1 sents, 4 tokens, 0.0% replaced (by <unk>)"]
    log = io.StringIO()
    glue._report(stats, log)
    assert (
        log.getvalue().splitlines()[1] == "RTE: 4 BPE tokens; <unk> (not in dict.txt): at most 0.0% (train.tsv, input0)"
    )
    stats.report = ["[None] .text/train.label: 1 sents, 2 tokens, 0.0% replaced (by <unk>)"]
    log = io.StringIO()
    glue._report(stats, log)
    assert log.getvalue() == "RTE: train 1 rows -> RTE-bin; labels (class 0, 1, ...): x\n"


@pytest.mark.parametrize(
    ("lines", "shown"),
    [
        ([3], "3"),
        (list(range(2, 12)), "2, 3, 4, 5, 6, 7, 8, 9, 10, 11"),
        (list(range(2, 13)), "2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ..."),
    ],
)
def test_the_report_lists_the_first_ten_dropped_lines(lines, shown):
    stats = GlueStats("QQP", Path("QQP-bin"), {"train": 5}, {"train.tsv": lines, "dev.tsv": [4, 5]}, ["0", "1"])
    log = io.StringIO()
    glue._report(stats, log)
    assert log.getvalue().splitlines()[1:] == [
        f"QQP: dropped {len(lines)} {'row' if len(lines) == 1 else 'rows'} of train.tsv without exactly 6 "
        f"tab-separated columns, as preprocess_GLUE_tasks.sh does ({'line' if len(lines) == 1 else 'lines'} {shown})",
        "QQP: dropped 2 rows of dev.tsv without exactly 6 tab-separated columns, as preprocess_GLUE_tasks.sh does "
        "(lines 4, 5)",
    ]


def test_glue_stats_start_empty():
    stats = GlueStats("RTE", Path("RTE-bin"))
    assert (stats.rows, stats.dropped, stats.labels, stats.report) == ({}, {}, [], [])
    assert GlueStats("RTE", Path("a")).rows is not stats.rows


def test_qqps_dropped_rows_are_counted_per_file(bpe_files, fairseq_preprocess, tmp_path):
    folder = tmp_path / "glue"
    write(folder / "QQP" / "train.tsv", QQP_HEADER + "0\t1\t2\ta?\tb?\t0\n1\t3\t4\tbroken\n2\t5\t6\tc?\td?\t1\n")
    write(folder / "QQP" / "dev.tsv", QQP_HEADER + "0\t1\t2\ta?\tb?\t1\n")
    write(folder / "QQP" / "test.tsv", "id\tquestion1\tquestion2\n0\te?\tf?\n")
    log = io.StringIO()
    (stats,) = glue_preprocess(folder, ["QQP"], tmp_path / "out", bpe_dir=bpe_files.dict_txt.parent, log=log)
    assert (stats.rows, stats.dropped, stats.labels) == (
        {"train": 2, "valid": 1, "test": 1},
        {"train.tsv": [3]},
        ["0", "1"],
    )
    assert (
        "QQP: dropped 1 row of train.tsv without exactly 6 tab-separated columns, as preprocess_GLUE_tasks.sh does "
        "(line 3)\n"
    ) in log.getvalue()


def test_progress_shows_a_bar_over_the_rows_being_encoded(glue_dir, bpe_files, fairseq_preprocess, tmp_path, capsys):
    glue_preprocess(glue_dir, ["CoLA"], tmp_path / "out", bpe_dir=bpe_files.dict_txt.parent, progress=True)
    frames = [frame for frame in capsys.readouterr().err.split("\r") if frame]
    assert frames[-1].startswith("glue-preprocess: BPE: 100%") and "4/4 [" in frames[-1]
    assert frames[-1].endswith(" rows/s, CoLA]\n")
    assert frames[0] == "glue-preprocess: BPE:   0%|          | 0/4 [00:00<?, ? rows/s]"
    assert all(frame.endswith((" rows/s]", " rows/s, CoLA]", " rows/s, CoLA]\n")) for frame in frames)
    assert not any("| 0/4 " in frame and "CoLA" in frame for frame in frames)  # the task is named with its rows
    glue_preprocess(glue_dir, ["CoLA"], tmp_path / "again", bpe_dir=bpe_files.dict_txt.parent)
    assert capsys.readouterr().err == ""


def test_nothing_is_written_without_a_log(glue_dir, bpe_files, fairseq_preprocess, tmp_path, capsys):
    glue_preprocess(glue_dir, ["CoLA"], tmp_path / "out", bpe_dir=bpe_files.dict_txt.parent)
    assert capsys.readouterr() == ("", "")


def test_missing_files_are_named_before_any_work(glue_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(preparation, "check_fairseq", lambda why: pytest.fail("checked fairseq first"))
    folder = tmp_path / "glue"
    shutil.copytree(glue_dir, folder)
    (folder / "RTE" / "dev.tsv").unlink()
    (folder / "MNLI").mkdir()
    write(folder / "MNLI" / "train.tsv", "")
    (folder / "MNLI" / "dev_matched.tsv").mkdir()
    cases = [
        (
            ["CoLA", "RTE"],
            f"{folder / 'RTE' / 'dev.tsv'}: not found (RTE needs train.tsv, dev.tsv, test.tsv in {folder / 'RTE'})",
        ),
        (
            ["MNLI"],
            f"{folder / 'MNLI' / 'dev_matched.tsv'}: not found (MNLI needs train.tsv, dev_matched.tsv, "
            f"dev_mismatched.tsv, test_matched.tsv, test_mismatched.tsv in {folder / 'MNLI'})",
        ),
    ]
    for tasks, message in cases:
        with pytest.raises(CorpusError, match=re.escape(message) + "$"):
            glue_preprocess(folder, tasks, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_existing_output_is_refused_before_any_work_unless_forced(glue_dir, bpe_files, fairseq_preprocess, tmp_path):
    out = tmp_path / "out"
    write(out / "CoLA-bin" / "mine.txt", "keep me")
    write(out / "RTE-bin", "a file")
    for tasks, target in ((["CoLA"], out / "CoLA-bin"), (["STS-B", "RTE"], out / "RTE-bin")):
        with pytest.raises(CorpusError, match=re.escape(f"refusing to overwrite {target} (use --force)") + "$"):
            glue_preprocess(glue_dir, tasks, out, bpe_dir=bpe_files.dict_txt.parent)
    assert fairseq_preprocess.batches == []
    assert (out / "CoLA-bin" / "mine.txt").read_text() == "keep me"

    (out / "STS-B-bin").mkdir()  # an empty folder is no output
    glue_preprocess(glue_dir, ["STS-B"], out, bpe_dir=bpe_files.dict_txt.parent)
    glue_preprocess(glue_dir, ["CoLA"], out, bpe_dir=bpe_files.dict_txt.parent, force=True)
    assert sorted(path.name for path in (out / "CoLA-bin").iterdir()) == ["input0", "label"]
    assert (out / "STS-B-bin" / "label" / "valid.label").read_text() == "1e-07\n"


def test_fairseq_is_required_with_the_reason(glue_dir, tmp_path, monkeypatch):
    def missing(why):
        raise CorpusError(f"fairseq is not installed: {why}")

    monkeypatch.setattr(preparation, "check_fairseq", missing)
    message = (
        "fairseq is not installed: glue-preprocess binarizes with its fairseq-preprocess, as "
        "preprocess_GLUE_tasks.sh does"
    )
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        glue_preprocess(glue_dir, ["RTE"], tmp_path / "out")


def test_a_malformed_bpe_dictionary_is_refused_naming_it(glue_dir, bpe_files, fairseq_preprocess, tmp_path):
    folder = tmp_path / "bpe"
    shutil.copytree(bpe_files.dict_txt.parent, folder)
    write(folder / "dict.txt", "hello 7\nno-count\n")
    with pytest.raises(DictionaryFormatError, match=re.escape(f"{folder / 'dict.txt'}:2")):
        glue_preprocess(glue_dir, ["RTE"], tmp_path / "out", bpe_dir=folder)
    assert fairseq_preprocess.batches == []


def test_an_error_in_a_later_task_writes_no_folder(glue_dir, bpe_files, fairseq_preprocess, tmp_path):
    folder = tmp_path / "glue"
    shutil.copytree(glue_dir, folder)
    write(folder / "STS-B" / "dev.tsv", STSB_HEADER + stsb_row("five"))
    out = tmp_path / "out"
    message = f"{folder / 'STS-B' / 'dev.tsv'}:2: column 10: STS-B's score must be a number, got 'five'"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        glue_preprocess(folder, ["RTE", "STS-B"], out, bpe_dir=bpe_files.dict_txt.parent)
    assert not out.exists() or list(out.iterdir()) == []
    assert fairseq_preprocess.batches == []
