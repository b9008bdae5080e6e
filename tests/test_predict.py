"""``roberta-ext predict``: predictions equal the hub's one example at a time, in input order
despite length-sorted batches, for every input format; GLUE's submission format; metrics equal
sklearn's and scipy's; heads chosen or refused; bad input named by file and line, with no output
left behind. The models are tiny and built here (random weights, heads scaled so that classes
differ clearly), saved in fairseq's layout with a fine-tuning data folder."""

from __future__ import annotations

import functools
import io
import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import roberta_ext
from roberta_ext.checkpoints import save_roberta_checkpoint
from roberta_ext.cli.predict import main as predict_main
from roberta_ext.corpus.glue import TASKS
from roberta_ext.corpus.rows import Row
from roberta_ext.families import preset
from roberta_ext.inference.predict import predict_rows
from roberta_ext.metrics import (
    METRICS,
    accuracy,
    compute_metrics,
    f1_score,
    matthews_corrcoef,
    pearson,
    spearman,
)
from roberta_ext.modeling import RobertaModel
from roberta_ext.tokenizers import Dictionary
from tests.conftest import run_without_fairseq
from tests.peers import require

WORDS = "the a man woman dog runs sleeps quickly under bright green river city old new book reads".split()


def make_classifier(directory: Path, bpe_files, heads: dict[str, int], labels: list[str] | None) -> Path:
    """A fine-tuned-like model folder: ``model.pt`` with classification heads ``{name: outputs}``,
    ``input0/dict.txt``, ``label/dict.txt`` (``labels``, padded with madeupwords to a multiple
    of 8 as fairseq-preprocess pads it) and the BPE files."""
    directory.mkdir(parents=True)
    vocab = len(Dictionary.load(bpe_files.dict_txt)) + 1  # + <mask>
    torch.manual_seed(0)
    model = RobertaModel(preset("tiny", vocab_size=vocab))
    for name, outputs in heads.items():
        model.register_classification_head(name, num_classes=outputs)
    # At random initialisation attention is nearly uniform and adds little to <s>, so every
    # input gets about the same logits and one class wins everywhere. Larger value and output
    # projections make <s> depend on the input (each class then wins somewhere, and a row given
    # another row's prediction shows); float32 rounding stays near 1e-7 of the logits.
    with torch.no_grad():
        for layer in model.encoder.sentence_encoder.layers:
            layer.self_attn.v_proj.weight.mul_(30.0)
            layer.self_attn.out_proj.weight.mul_(30.0)
        for head in model.classification_heads.values():
            head.out_proj.weight.mul_(20.0)
    save_roberta_checkpoint(model, directory / "model.pt")
    (directory / "input0").mkdir()
    shutil.copy(bpe_files.dict_txt, directory / "input0" / "dict.txt")
    shutil.copy(bpe_files.encoder_json, directory / "encoder.json")
    shutil.copy(bpe_files.vocab_bpe, directory / "vocab.bpe")
    if labels is not None:
        (directory / "label").mkdir()
        padding = [f"madeupword{i:04d} 0" for i in range((-(len(labels) + 4)) % 8)]
        rows = [f"{label} {100 - i}" for i, label in enumerate(labels)] + padding
        (directory / "label" / "dict.txt").write_text("".join(f"{row}\n" for row in rows))
    return directory


@pytest.fixture(scope="module")
def models(tmp_path_factory, bpe_files) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("predict_models")
    return {
        "nli": make_classifier(root / "nli", bpe_files, {"sentence_classification_head": 3}, ["a", "b", "c"]),
        # MRPC's label/dict.txt: "1" is the more frequent label, so it is class 0.
        "binary": make_classifier(root / "binary", bpe_files, {"sentence_classification_head": 2}, ["1", "0"]),
        "stsb": make_classifier(root / "stsb", bpe_files, {"sentence_classification_head": 1}, None),
        "two_heads": make_classifier(root / "two", bpe_files, {"sentiment": 2, "topic": 3}, ["x", "y", "z"]),
    }


def sentence(rng: random.Random, longest: int = 7) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, longest))).capitalize() + "."


def pairs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    return [(sentence(rng), sentence(rng)) for _ in range(count)]


@functools.cache
def load_hub(model_dir: Path) -> roberta_ext.RobertaHubInterface:
    return roberta_ext.from_pretrained(str(model_dir))


def reference(model_dir: Path, rows, head: str = "sentence_classification_head") -> torch.Tensor:
    """Logits (N, C) of the hub's ``predict`` called on one example at a time."""
    hub = load_hub(model_dir)
    with torch.no_grad():
        return torch.cat([hub.predict(head, hub.encode(*row), return_logits=True) for row in rows])


def run(capsys, *argv) -> tuple[int, str, str]:
    code = predict_main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def read_tsv(path: Path) -> tuple[list[str], list[list[str]]]:
    header, *rows = (line.split("\t") for line in path.read_text(encoding="utf-8").splitlines())
    return header, rows


def write_glue(path: Path, header: str | None, rows: list[list[str]]) -> Path:
    lines = ([header] if header is not None else []) + ["\t".join(row) for row in rows]
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


# ------------------------------------------------------------------------ equality with the hub


def test_logits_equal_the_hubs_one_at_a_time_in_input_order(models):
    """Chunks of 7 rows, each sorted by length into batches of at most 40 padded tokens: the
    rows come back in input order, each with the logits of the hub's own single-example call."""
    rows = pairs(40)
    hub = roberta_ext.from_pretrained(str(models["nli"]))
    examples = [Row(i, i + 1, row) for i, row in enumerate(rows)]
    out = list(
        predict_rows(
            hub.model, hub.inputs, "sentence_classification_head", examples, max_tokens=40, batch_size=5, chunk_rows=7
        )
    )
    assert [example.line for example, _ in out] == list(range(1, 41))
    logits = torch.stack([row for _, row in out])
    expected = reference(models["nli"], rows)
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=0)
    assert torch.equal(logits.argmax(-1), expected.argmax(-1))
    assert len(set(expected.argmax(-1).tolist())) == 3  # every class occurs: the test can see a mix-up


def test_glue_dev_file_submission_format_probabilities_and_accuracy(models, tmp_path, capsys):
    rows = pairs(30, seed=1)
    expected = reference(models["nli"], rows)
    names = ["a", "b", "c"]
    gold = [names[k] if i % 3 else names[(k + 1) % 3] for i, k in enumerate(expected.argmax(-1).tolist())]
    dev = write_glue(
        tmp_path / "dev.tsv",
        "index\tsentence1\tsentence2\tlabel",
        [[str(i), f" {a} ", b, label] for i, ((a, b), label) in enumerate(zip(rows, gold))],
    )
    output = tmp_path / "RTE.tsv"
    code, out, err = run(
        capsys, models["nli"], "--glue-task", "RTE", "--input", dev, "--output", output, "--probabilities",
        "--max-tokens", "48", "--chunk-rows", "8", "--metrics-file", tmp_path / "metrics.json",
    )  # fmt: skip
    assert code == 0, err
    header, written = read_tsv(output)
    assert header == ["index", "prediction", "prob_a", "prob_b", "prob_c"]
    assert [row[0] for row in written] == [str(i) for i in range(30)]
    assert [row[1] for row in written] == [names[k] for k in expected.argmax(-1).tolist()]
    probabilities = torch.tensor([[float(p) for p in row[2:]] for row in written])
    torch.testing.assert_close(probabilities, expected.softmax(-1), atol=1e-5, rtol=0)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(30, dtype=torch.float32), atol=1e-5, rtol=0)
    correct = sum(names[k] == g for k, g in zip(expected.argmax(-1).tolist(), gold))
    assert out.strip() == f"accuracy {round(100 * correct / 30, 1)}"
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"rows": 30, "accuracy": correct / 30}
    assert "30 rows ->" in err


def test_glue_test_file_is_read_with_the_test_columns_and_gives_no_metrics(models, tmp_path, capsys):
    rows = pairs(5, seed=2)
    test = write_glue(
        tmp_path / "test.tsv", "index\tsentence1\tsentence2", [[str(i), a, b] for i, (a, b) in enumerate(rows)]
    )
    code, out, err = run(capsys, models["nli"], "--glue-task", "rte", "--input", test, "--output", tmp_path / "p.tsv")
    assert code == 0, err
    assert out == ""
    _, written = read_tsv(tmp_path / "p.tsv")
    assert [row[1] for row in written] == [["a", "b", "c"][k] for k in reference(models["nli"], rows).argmax(-1)]


@pytest.mark.parametrize("task", sorted(TASKS))
def test_every_glue_tasks_dev_and_test_columns(task, models, tmp_path, capsys):
    """A made-up file per task and split, laid out as GLUE's (the columns of fairseq's script,
    1-based there): the texts where the task's columns say, every other column filled with
    noise that would change the predictions if read, a header line where GLUE has one."""
    spec = TASKS[task]
    pair = len(spec.input_columns) == 2
    rows = [row if pair else row[:1] for row in pairs(6, seed=3)]
    kind = "stsb" if spec.regression else "binary" if "f1" in spec.metrics else "nli"
    model, names = models[kind], {"stsb": [], "binary": ["1", "0"], "nli": ["a", "b", "c"]}[kind]
    expected = reference(model, rows)
    # A train file is read as a dev file, except for MNLI's label column (gold_label moves).
    for split in ("train", "dev", "test") if spec.dev_label_column else ("dev", "test"):
        columns, label = spec.inputs_of(split), spec.label_of(split)
        width = spec.exact_columns if split != "test" and spec.exact_columns else max(*columns, label or 0) + 1
        lines = []
        for row in rows:
            fields = [f"noise {j} the dog" for j in range(width)]
            for column, text in zip(columns, row):
                fields[column - 1] = text
            if label is not None:
                fields[label - 1] = "2.5" if spec.regression else names[0]
            lines.append(fields)
        header = None if split in spec.headerless else "\t".join(f"h{j}" for j in range(width))
        path = write_glue(tmp_path / f"{split}.tsv", header, lines)
        output = tmp_path / f"{task}-{split}.tsv"
        code, out, err = run(capsys, model, "--glue-task", task.lower(), "--input", path, "--output", output)
        assert code == 0, err
        _, written = read_tsv(output)
        if spec.regression:  # STS-B: trained on scores / 5, written as scores
            values = torch.tensor([float(row[1]) for row in written])
            torch.testing.assert_close(values, expected[:, 0] * 5, atol=1e-5, rtol=0)
        else:
            assert [row[1] for row in written] == [names[k] for k in expected.argmax(-1)]
        assert bool(out) == (split != "test")
        if spec.exact_columns and split != "test":  # a row fairseq's script would drop is named
            write_glue(path, header, [*lines[:2], [*lines[2], "extra"]])
            code, _, err = run(capsys, model, "--glue-task", task, "--input", path, "--output", output, "--force")
            assert code == 1 and f"{path}:4: the line has 7 tab-separated fields, not 6" in err


def test_every_glue_task_is_scored_by_known_metrics():
    for task in TASKS.values():
        assert task.metrics and set(task.metrics) <= set(METRICS), task.name
        assert ("accuracy" in task.metrics) != task.regression, task.name


def test_jsonl_input_and_output(models, tmp_path, capsys):
    """Default fields (text, text_pair, label), explicit ones, texts no TSV can hold, JSON output."""
    rows = [("Tabs\tand\nnewlines in a text.", "Emoji 👍🏽 and 中文."), *pairs(9, seed=4)]
    expected = reference(models["nli"], rows)
    records = [{"text": a, "text_pair": b, "label": "a", "id": i} for i, (a, b) in enumerate(rows)]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records) + "\n", encoding="utf-8")
    code, out, err = run(capsys, models["nli"], "--input", path, "--output", tmp_path / "p.jsonl", "--probabilities")
    assert code == 0, err
    assert "reading fields 'text', 'text_pair'; label from 'label'" in err
    written = [json.loads(line) for line in (tmp_path / "p.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [w["index"] for w in written] == list(range(10))
    assert [w["prediction"] for w in written] == [["a", "b", "c"][k] for k in expected.argmax(-1)]
    probabilities = torch.tensor([list(w["probabilities"].values()) for w in written])
    assert list(written[0]["probabilities"]) == ["a", "b", "c"]
    torch.testing.assert_close(probabilities, expected.softmax(-1), atol=1e-5, rtol=0)
    assert out.startswith("accuracy ")

    # Explicit fields: the first text alone, no label.
    code, out, err = run(
        capsys, models["nli"], "--input", path, "--fields", "text", "--output", tmp_path / "single.tsv"
    )
    assert code == 0, err
    _, written_tsv = read_tsv(tmp_path / "single.tsv")
    single = reference(models["nli"], [(a,) for a, _ in rows])
    assert [row[1] for row in written_tsv] == [["a", "b", "c"][k] for k in single.argmax(-1)]
    assert out == ""


def test_text_input_one_row_per_line_empty_lines_included(models, tmp_path, capsys):
    rng = random.Random(5)
    texts = [sentence(rng) for _ in range(8)]
    texts[3] = ""
    path = tmp_path / "sentences.txt"
    path.write_text("".join(f"  {t}\n" for t in texts), encoding="utf-8")
    code, _, err = run(capsys, models["nli"], "--input", path, "--output", tmp_path / "p.tsv")
    assert code == 0, err
    _, written = read_tsv(tmp_path / "p.tsv")
    assert [row[1] for row in written] == [
        ["a", "b", "c"][k] for k in reference(models["nli"], [(t,) for t in texts]).argmax(-1)
    ]


def test_tsv_columns_by_number_and_by_header_name(models, tmp_path, capsys):
    rows = pairs(6, seed=6)
    expected = [["a", "b", "c"][k] for k in reference(models["nli"], rows).argmax(-1)]
    no_header = write_glue(tmp_path / "plain.tsv", None, [["c", b, a] for a, b in rows])
    named = write_glue(tmp_path / "named.tsv", "gold\thypothesis\tpremise", [["c", b, a] for a, b in rows])
    for path, columns in ((no_header, "2,1,label=0"), (named, "premise,hypothesis,label=gold")):
        code, out, err = run(
            capsys, models["nli"], "--input", path, "--columns", columns, "--output", tmp_path / "p.tsv", "--force"
        )
        assert code == 0, err
        assert [row[1] for row in read_tsv(tmp_path / "p.tsv")[1]] == expected
        assert out.startswith("accuracy ")


# ------------------------------------------------------------------------------------ metrics


def test_binary_metrics_equal_sklearns_with_fairseqs_positive_label(models, tmp_path, capsys):
    """MRPC-style: F1 counts the label *named* 1, as fairseq's criterion (int(label name)),
    though it is class 0 of this model's label/dict.txt."""
    metrics = require("sklearn.metrics", "the metrics are checked against sklearn")
    rows = pairs(40, seed=7)
    predicted = [["1", "0"][k] for k in reference(models["binary"], rows).argmax(-1)]
    rng = random.Random(7)
    gold = [p if rng.random() < 0.7 else {"1": "0", "0": "1"}[p] for p in predicted]
    dev = write_glue(
        tmp_path / "dev.tsv",
        "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
        [[g, "1", "2", a, b] for g, (a, b) in zip(gold, rows)],
    )
    code, out, err = run(
        capsys, models["binary"], "--glue-task", "MRPC", "--input", dev, "--output", tmp_path / "p.tsv",
        "--metrics", "accuracy,f1,mcc", "--metrics-file", tmp_path / "m.json",
    )  # fmt: skip
    assert code == 0, err
    y_true, y_pred = [int(g) for g in gold], [int(p) for p in predicted]
    want = {
        "accuracy": metrics.accuracy_score(y_true, y_pred),
        "f1": metrics.f1_score(y_true, y_pred),
        "mcc": metrics.matthews_corrcoef(y_true, y_pred),
    }
    got = json.loads((tmp_path / "m.json").read_text())
    for name, value in want.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name
    assert got["acc_and_f1"] == pytest.approx((want["accuracy"] + want["f1"]) / 2, abs=1e-12)
    assert out.strip() == " | ".join(
        f"{name} {round(100 * got[name], 1)}" for name in ("accuracy", "f1", "mcc", "acc_and_f1")
    )


def test_stsb_regression_scaled_by_5_with_scipys_correlations(models, tmp_path, capsys):
    stats = require("scipy.stats", "the correlations are checked against scipy")
    rows = pairs(25, seed=8)
    outputs = reference(models["stsb"], rows)[:, 0] * 5
    rng = np.random.default_rng(8)
    gold = np.round(outputs.numpy() + rng.normal(0, 2, len(rows)), 1)  # ties among the ranks too
    dev = write_glue(
        tmp_path / "dev.tsv",
        "\t".join(f"h{j}" for j in range(10)),
        [["x"] * 7 + [a, b, str(g)] for (a, b), g in zip(rows, gold)],
    )
    code, out, err = run(
        capsys, models["stsb"], "--glue-task", "STS-B", "--input", dev, "--output", tmp_path / "p.tsv",
        "--metrics-file", tmp_path / "m.json",
    )  # fmt: skip
    assert code == 0, err
    # float32 values, as written (shortest text that reads back as the same float32)
    written = np.array([float(row[1]) for row in read_tsv(tmp_path / "p.tsv")[1]], dtype=np.float32).astype(float)
    np.testing.assert_allclose(written, outputs.numpy(), atol=1e-5)
    got = json.loads((tmp_path / "m.json").read_text())
    assert got["pearson"] == pytest.approx(stats.pearsonr(written, gold)[0], abs=1e-12)
    assert got["spearman"] == pytest.approx(stats.spearmanr(written, gold)[0], abs=1e-12)
    assert out.startswith("pearson ") and "spearman" in out and "pearson_and_spearman" in out


def test_metric_functions_equal_sklearn_and_scipy():
    sk = require("sklearn.metrics", "the metrics are checked against sklearn")
    stats = require("scipy.stats", "the correlations are checked against scipy")
    rng = np.random.default_rng(0)
    for trial in range(30):
        n = int(rng.integers(2, 60))
        k = 2 if trial % 2 else int(rng.integers(2, 5))
        t, p = rng.integers(0, k, n), rng.integers(0, k, n)
        assert accuracy(p, t) == pytest.approx(sk.accuracy_score(t, p), abs=1e-15)
        assert matthews_corrcoef(p, t) == pytest.approx(sk.matthews_corrcoef(t, p), abs=1e-12)
        if k == 2:
            assert f1_score(p, t) == pytest.approx(sk.f1_score(t, p, zero_division=0.0), abs=1e-12)
        x = rng.normal(size=n) if trial % 3 else rng.integers(0, 4, n).astype(float)  # with ties
        y = x * rng.normal() + rng.normal(size=n)
        assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
        assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
    # Degenerate cases: one class everywhere, no positive at all, constant values.
    assert matthews_corrcoef([1, 1, 1], [1, 1, 1]) == sk.matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0
    assert f1_score([0, 0], [0, 0]) == sk.f1_score([0, 0], [0, 0], zero_division=0.0) == 0.0
    assert np.isnan(pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]))
    assert compute_metrics(["pearson", "spearman"], [1.0, 2.0, 3.0], [1.0, 2.0, 4.0])["pearson_and_spearman"] == (
        pytest.approx((stats.pearsonr([1, 2, 3], [1, 2, 4])[0] + 1.0) / 2, abs=1e-12)
    )


# -------------------------------------------------------------------------------------- heads


def test_head_is_chosen_when_there_is_one_and_named_when_there_are_several(models, tmp_path, capsys):
    path = tmp_path / "in.txt"
    path.write_text("A man reads a book.\nThe dog sleeps.\n")
    output = tmp_path / "p.tsv"
    code, _, err = run(capsys, models["two_heads"], "--input", path, "--output", output)
    assert code == 1
    assert "2 classification heads, ['sentiment', 'topic']: choose one with --head" in err
    assert not output.exists()
    code, _, err = run(capsys, models["two_heads"], "--input", path, "--output", output, "--head", "topic")
    assert code == 0, err
    expected = reference(models["two_heads"], [("A man reads a book.",), ("The dog sleeps.",)], head="topic")
    assert [row[1] for row in read_tsv(output)[1]] == [["x", "y", "z"][k] for k in expected.argmax(-1)]
    code, _, err = run(capsys, models["two_heads"], "--input", path, "--output", output, "--head", "nope", "--force")
    assert code == 1 and "no classification head 'nope'; its heads: ['sentiment', 'topic']" in err


# ------------------------------------------------------------------------ standard streams, --force


def test_dash_reads_standard_input_and_writes_standard_output(models, tmp_path, capsys, monkeypatch):
    """``--output -`` wrote a file named ``-`` (and said ``3 rows -> -``): it is standard output,
    which then holds the predictions alone (the summary and the metrics go to stderr)."""
    rows = pairs(3, seed=12)
    expected = [["a", "b", "c"][k] for k in reference(models["nli"], rows).argmax(-1)]
    records = "".join(json.dumps({"text": a, "text_pair": b, "label": "b"}) + "\n" for a, b in rows)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(records.encode("utf-8"))))
    monkeypatch.chdir(tmp_path)
    code, out, err = run(capsys, models["nli"], "--input", "-", "--format", "jsonl", "--output", "-")
    assert code == 0, err
    assert out == "index\tprediction\n" + "".join(f"{i}\t{label}\n" for i, label in enumerate(expected))
    assert "3 rows -> standard output (head 'sentence_classification_head'" in err
    assert f"accuracy {round(100 * expected.count('b') / 3, 1)}" in err
    assert os.listdir(tmp_path) == []  # no file named "-"


def test_an_existing_output_is_replaced_only_with_force(models, tmp_path, capsys):
    """predict alone replaced an existing output silently; it now refuses before loading the
    model (a model that does not exist here), as every command that writes files does."""
    path = tmp_path / "in.txt"
    path.write_text("The dog sleeps.\n")
    output, metrics = tmp_path / "p.tsv", tmp_path / "metrics.json"
    output.write_text("mine\n")
    code, _, err = run(capsys, tmp_path / "no-model", "--input", path, "--output", output)
    assert (code, err) == (
        1,
        f"roberta-ext predict: error: --output {output} exists; refusing to replace it (use --force)\n",
    )
    metrics.write_text("{}")
    code, _, err = run(
        capsys, tmp_path / "no-model", "--input", path, "--output", tmp_path / "q.tsv", "--metrics-file", metrics
    )
    assert (code, err) == (
        1,
        f"roberta-ext predict: error: --metrics-file {metrics} exists; refusing to replace it (use --force)\n",
    )
    assert (output.read_text(), metrics.read_text()) == ("mine\n", "{}")
    code, _, err = run(capsys, models["nli"], "--input", path, "--output", output, "--metrics-file", metrics, "--force")
    assert code == 0, err
    assert "1 row -> " in err and read_tsv(output)[0] == ["index", "prediction"]
    assert json.loads(metrics.read_text()) == {"rows": 1}


# ---------------------------------------------------------------------------------- bad input


BAD_INPUTS = [
    # (file name, its text, options, the error expected)
    ("dev.tsv", "a\tb\tc\nonly one field\n", ["--columns", "0,1,label=2"],
     r"dev\.tsv:2: .*1 tab-separated field, so columns 1, 2 are missing"),
    ("dev.tsv", "x\ty\nThe dog.\tq\n", ["--columns", "x,label=y"],
     r"dev\.tsv:2: label 'q' is not one of the model's labels \['a', 'b', 'c'\]"),
    ("dev.tsv", "x\ty\n", ["--columns", "x,label=gold"], r"dev\.tsv:1: no column named 'gold' in the header line"),
    ("dev.tsv", "", ["--columns", "sentence,label=label"], r"dev\.tsv is empty: no header line"),
    ("dev.tsv", "", ["--glue-task", "RTE"], r"dev\.tsv is empty: no header line"),
    ("in.jsonl", '{"text": "fine"}\n{"text": "broken\n', [], r"in\.jsonl:2: not valid JSON"),
    ("in.jsonl", '{"text": "fine"}\n\n{"sentence": "no text"}\n', [],
     r"in\.jsonl:3: no field 'text'; the object has \['sentence'\]"),
    ("in.jsonl", '{"text": "a", "label": "b"}\n{"text": "a", "label": "d"}\n', [],
     r"in\.jsonl:2: label 'd' is not one"),
    ("in.jsonl", '{"text": 3}\n', [], r"in\.jsonl:1: field 'text' is 3, not a string"),
    ("in.txt", "ok\n" + "word " * 100 + "\n", [], r"in\.txt:2: \d+ tokens, more than the model's 64 positions"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "options", "message"), BAD_INPUTS)
def test_bad_input_names_file_and_line_and_writes_nothing(models, tmp_path, capsys, name, text, options, message):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    output = tmp_path / "out" / "p.tsv"
    output.parent.mkdir()
    code, _, err = run(capsys, models["nli"], "--input", path, "--output", output, "--chunk-rows", "1", *options)
    assert code == 1
    assert err.splitlines()[-1].startswith("roberta-ext predict: error: ")
    assert re.search(message, err), err
    assert list(output.parent.iterdir()) == []  # no output, no temporary


EMPTY_INPUTS = [
    # (file name, its text, options, the output file): inputs with no row, which need no header line
    ("in.txt", "", [], "p.tsv"),
    ("in.jsonl", "", [], "p.tsv"),
    ("in.jsonl", "\n\n", [], "p.jsonl"),  # blank lines are skipped
    ("dev.tsv", "sentence\tlabel\n", ["--columns", "sentence,label=label"], "p.tsv"),  # a header line only
    ("plain.tsv", "", ["--columns", "0,label=1"], "p.tsv"),  # read without a header line
    ("test.tsv", "index\tsentence1\tsentence2\n", ["--glue-task", "RTE"], "p.tsv"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "options", "output_name"), EMPTY_INPUTS)
def test_an_input_without_rows_writes_a_header_only_output_and_says_so(
    models, tmp_path, capsys, name, text, options, output_name
):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    output = tmp_path / output_name
    code, out, err = run(capsys, models["nli"], "--input", path, "--output", output, *options)
    assert code == 0, err
    written = "an empty" if output_name.endswith(".jsonl") else "a header-only"
    assert f"roberta-ext predict: {path} has 0 rows; wrote {written} {output}" in err
    assert output.read_text(encoding="utf-8") == ("" if output_name.endswith(".jsonl") else "index\tprediction\n")
    assert out == ""  # no metrics of nothing


def test_truncate_cuts_long_rows_as_fairseq_does(models, tmp_path, capsys):
    long = "word " * 100
    path = tmp_path / "in.txt"
    path.write_text(f"{long}\n")
    code, _, err = run(capsys, models["nli"], "--input", path, "--output", tmp_path / "p.tsv", "--truncate")
    assert code == 0, err
    hub = roberta_ext.from_pretrained(str(models["nli"]))
    tokens = hub.encode(long.strip())[: hub.max_positions()]
    expected = hub.predict("sentence_classification_head", tokens).argmax().item()
    assert read_tsv(tmp_path / "p.tsv")[1] == [["0", ["a", "b", "c"][expected]]]


def test_bfloat16_and_threads_options(models, tmp_path, capsys):
    rows = pairs(12, seed=9)
    path = write_glue(tmp_path / "in.tsv", None, [list(row) for row in rows])
    output = tmp_path / "p.tsv"
    code, _, err = run(
        capsys, models["nli"], "--input", path, "--columns", "0,1", "--output", output, "--dtype", "bfloat16",
        "--threads", "1", "--device", "cpu", "--probabilities",
    )  # fmt: skip
    assert code == 0, err
    assert "on cpu, bfloat16" in err
    probabilities = torch.tensor([[float(p) for p in row[2:]] for row in read_tsv(output)[1]])
    expected = reference(models["nli"], rows).softmax(-1)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(12), atol=1e-5, rtol=0)
    torch.testing.assert_close(probabilities, expected, atol=0.05, rtol=0)  # bf16: about 3 significant digits


def test_int8_predicts_with_the_int8_hubs_logits_on_the_cpu(models, tmp_path, capsys):
    """``--dtype int8`` is ``from_pretrained(..., dtype="int8")``, on the CPU without --device."""
    rows = pairs(12, seed=10)
    path = write_glue(tmp_path / "in.tsv", None, [list(row) for row in rows])
    output = tmp_path / "p.tsv"
    code, _, err = run(
        capsys, models["nli"], "--input", path, "--columns", "0,1", "--output", output, "--dtype", "int8",
        "--probabilities",
    )  # fmt: skip
    assert code == 0, err
    assert "on cpu, int8" in err
    probabilities = torch.tensor([[float(p) for p in row[2:]] for row in read_tsv(output)[1]])
    int8 = roberta_ext.from_pretrained(str(models["nli"]), dtype="int8")
    with torch.no_grad():
        expected = torch.cat([int8.predict("sentence_classification_head", int8.encode(*row)) for row in rows]).exp()
    torch.testing.assert_close(probabilities, expected, atol=1e-4, rtol=0)  # written with 4+ digits
    torch.testing.assert_close(probabilities, reference(models["nli"], rows).softmax(-1), atol=0.05, rtol=0)


def test_help(capsys):
    with pytest.raises(SystemExit) as exit_:
        predict_main(["--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    for option in (
        "--glue-task",
        "--columns",
        "--fields",
        "--probabilities",
        "--max-batch-tokens",
        "--dtype",
        "--head",
    ):
        assert option in help_text


def test_runs_where_fairseq_cannot_be_imported(models, tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("The dog sleeps.\n")
    run_without_fairseq(
        "import sys\nfrom roberta_ext.cli import main\n"
        "code = main(['predict', sys.argv[1], '--input', sys.argv[2], '--output', sys.argv[3]])\n"
        "assert code == 0 and 'fairseq' not in sys.modules\n",
        str(models["nli"]),
        str(path),
        str(tmp_path / "p.tsv"),
    )
    assert read_tsv(tmp_path / "p.tsv")[0] == ["index", "prediction"]
