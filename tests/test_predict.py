"""Prediction (roberta_ext/inference/predict.py and ``roberta-ext predict``).

``predict_rows`` and ``predict_file`` on a stand-in model whose logits for each text are set by the
test (so every written byte, probability and metric is known exactly), and on a tiny random hub with
heads and a fairseq ``label/dict.txt``, whose rows must equal the hub's own ``predict`` one row at a
time. Then the command on tiny models built here (random weights, heads scaled so that classes differ
clearly), saved in fairseq's layout with a fine-tuning data folder: predictions equal the hub's one
example at a time, in input order despite length-sorted batches, for every input format; GLUE's
submission format; metrics equal sklearn's and scipy's; heads chosen or refused; bad input named by
file and line, with no output left behind."""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import math
import os
import random
import re
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import roberta_ext
from roberta_ext.checkpoints import save_roberta_checkpoint
from roberta_ext.cli.predict import main as predict_main
from roberta_ext.corpus.glue import TASKS
from roberta_ext.corpus.reading import CorpusError
from roberta_ext.corpus.rows import Row
from roberta_ext.families import preset
from roberta_ext.inference.head_outputs import HeadError
from roberta_ext.inference.inputs import ModelInputs, pair_layout
from roberta_ext.inference.predict import (
    OUTPUT_FORMATS,
    PredictStats,
    _class_names,
    choose_head,
    predict_file,
    predict_rows,
)
from roberta_ext.metrics import (
    METRICS,
    accuracy,
    compute_metrics,
    f1_score,
    matthews_corrcoef,
    pearson,
    spearman,
)
from roberta_ext.modeling import EncoderOutput, RobertaModel
from roberta_ext.tokenizers import GPT2BPE, Dictionary, FairseqGPT2Tokenizer
from tests.conftest import run_without_fairseq
from tests.peers import require

WORDS = "the a man woman dog runs sleeps quickly under bright green river city old new book reads".split()

HEAD = "sentence_classification_head"
LABELS = ["pos", "neg", "mid"]  # label/dict.txt's order (by count), not alphabetical

LOGITS = {
    ("A dog runs.",): [2.0, 0.0, 1.0],
    ("The old city sleeps.",): [0.0, 2.0, 0.0],
    ("A man reads.", "A woman reads."): [0.0, math.log(2), math.log(5)],
    ("",): [0.0, 0.0, 0.0],  # a tie: the first class wins
}
ROWS = [Row(10 + i, 2 + 2 * i, texts) for i, texts in enumerate(LOGITS)]
TSV = (
    "index\tprediction\tprob_pos\tprob_neg\tprob_mid\n"
    "0\tpos\t0.6652409\t0.090030566\t0.24472845\n"
    "1\tneg\t0.10650697\t0.786986\t0.10650697\n"
    "2\tmid\t0.125\t0.25\t0.62500006\n"
    "3\tpos\t0.33333334\t0.33333334\t0.33333334\n"
)
JSONL = (
    '{"index": 0, "prediction": "pos", "probabilities": {"pos": 0.6652409, "neg": 0.090030566, "mid": 0.24472845}}\n'
    '{"index": 1, "prediction": "neg", "probabilities": {"pos": 0.10650697, "neg": 0.786986, "mid": 0.10650697}}\n'
    '{"index": 2, "prediction": "mid", "probabilities": {"pos": 0.125, "neg": 0.25, "mid": 0.62500006}}\n'
    '{"index": 3, "prediction": "pos", "probabilities": {"pos": 0.33333334, "neg": 0.33333334, "mid": 0.33333334}}\n'
)
NO_LABELS_WARNING = (
    "warning: the model's data folder has no label/dict.txt naming its {} classes: writing class numbers\n"
)


pytestmark = pytest.mark.usefixtures("tqdm_lock_of_this_process")


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


@pytest.fixture(scope="module")
def hub(tmp_path_factory, bpe_files):
    """A tiny random model with two heads; ``label/dict.txt`` is ``pos``, ``neg``, ``mid`` and a madeupword."""
    folder = tmp_path_factory.mktemp("predict_hub") / "model"
    return roberta_ext.from_pretrained(str(make_classifier(folder, bpe_files, {HEAD: 3, "topic": 2}, LABELS)))


class StandIn:
    """A model whose logits for a row are ``logits(head, texts)``, the texts found by the row's tokens
    (``logits(head, tokens)`` for rows of other texts); ``batches`` is the number of rows of each batch."""

    def __init__(self, inputs, logits, heads: dict[str, int] | None = None, texts=()) -> None:
        self.logits = logits
        self.inputs = inputs
        self.texts = {tuple(inputs.encode(*t)[: inputs.max_positions]): t for t in texts}
        self.classification_heads = {name: SimpleNamespace(num_classes=n) for name, n in (heads or {HEAD: 3}).items()}
        self.device = torch.device("cpu")
        self.batches: list[int] = []

    def num_classes(self, head):
        return self.classification_heads[head].num_classes

    def features(self, tokens, *, segment_labels, return_all_hiddens):
        return EncoderOutput(tokens.unsqueeze(-1))  # the "features" are the tokens themselves

    def classify(self, head, features, *, padding_mask=None):
        self.batches.append(len(features))
        pad = self.inputs.dictionary.pad()
        rows = [tuple(t for t in row if t != pad) for row in features[..., 0].tolist()]
        return torch.tensor([self.logits(head, self.texts.get(row, row)) for row in rows])


def table(head: str, texts) -> list[float]:
    """``LOGITS`` for the three-class head; for a two-class ``topic`` head, the first two negated."""
    return LOGITS[texts] if head == HEAD else [-x for x in LOGITS[texts]][:2]


@pytest.fixture(scope="module")
def inputs(bpe_files) -> ModelInputs:
    """The tiny model's inputs (its BPE, RoBERTa's pair layout, 64 positions) without building a model."""
    tokenizer = FairseqGPT2Tokenizer(
        GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe), Dictionary.load(bpe_files.dict_txt)
    )
    return ModelInputs(tokenizer=tokenizer, layout=pair_layout(preset("tiny")), max_positions=64)


@pytest.fixture
def model(inputs):
    return StandIn(inputs, table, {HEAD: 3}, LOGITS)


def predicted(path) -> str:
    return path.read_text(encoding="utf-8")


# -------------------------------------------------------------------------------------- choose_head


def heads(*names: str) -> SimpleNamespace:
    return SimpleNamespace(classification_heads={name: SimpleNamespace(num_classes=2) for name in names})


def test_choose_head_takes_the_named_head_or_the_only_one():
    assert choose_head(heads("topic", "sentiment"), "topic") == "topic"
    assert choose_head(heads("topic", "sentiment"), "sentiment") == "sentiment"
    assert choose_head(heads("sentiment"), None) == "sentiment"
    assert choose_head(heads("sentiment"), "sentiment") == "sentiment"


@pytest.mark.parametrize(
    ("names", "head", "message"),
    [
        (
            ("topic", "sentiment"),
            "mood",
            "the model has no classification head 'mood'; its heads: ['sentiment', 'topic']",
        ),
        (("sentiment",), "topic", "the model has no classification head 'topic'; its heads: ['sentiment']"),
        ((), "topic", "the model has no classification head 'topic'; its heads: []"),
        ((), None, "the model has no classification head: predict needs a fine-tuned model"),
        (
            ("topic", "sentiment"),
            None,
            "the model has 2 classification heads, ['sentiment', 'topic']: choose one with --head",
        ),
        (("c", "b", "a"), None, "the model has 3 classification heads, ['a', 'b', 'c']: choose one with --head"),
    ],
)
def test_choose_head_refusals(names, head, message):
    with pytest.raises(HeadError, match=re.escape(message) + "$"):
        choose_head(heads(*names), head)


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


# ------------------------------------------------------------------------------------- predict_rows


def test_rows_equal_the_hubs_predict_one_row_at_a_time_in_input_order(hub):
    texts = [("A dog runs under the bright river.",), ("Hi",), ("A man reads.", "The new book reads quickly."), ("",)]
    texts += [(f"The {word} sleeps.", "Old city.") for word in ("dog", "woman", "green man", "river")]
    rows = [Row(i, 100 + i, t) for i, t in enumerate(texts)]
    for head in (HEAD, "topic"):
        steps: list[int] = []
        out = list(
            predict_rows(
                hub.model, hub.inputs, head, rows, max_tokens=40, batch_size=2, chunk_rows=3, progress=steps.append
            )
        )
        assert [row for row, _ in out] == rows
        with torch.no_grad():
            expected = [hub.predict(head, hub.encode(*t), return_logits=True)[0] for t in texts]
        for (_, logits), reference in zip(out, expected):
            assert logits.dtype == torch.float32 and logits.shape == reference.shape
            torch.testing.assert_close(logits, reference, atol=1e-5, rtol=0)
        assert sum(steps) == len(rows) and max(steps) <= 2


@pytest.mark.parametrize(
    ("options", "batches"),
    [
        ({"max_tokens": 15}, [2, 2, 3]),  # lengths 7, 7 | 7, 5 | 4, 3, 3
        ({"batch_size": 3}, [3, 3, 1]),
        ({"chunk_rows": 4}, [4, 3]),
        # chunk 1: lengths 3, 7, 4, 7 -> (7, 7), (4, 3); chunk 2: 7, 5, 3 -> (7, 5), (3,)
        ({"max_tokens": 15, "batch_size": 2, "chunk_rows": 4}, [2, 2, 2, 1]),
    ],
)
def test_rows_are_read_in_chunks_and_each_chunk_in_length_sorted_batches(inputs, tmp_path, options, batches):
    texts = [(" ".join(["a"] * n),) for n in (1, 5, 2, 5, 5, 3, 1)]
    rows = [Row(i, i + 1, t) for i, t in enumerate(texts)]
    model = StandIn(inputs, lambda head, t: [float(len(t[0])), 0.0], {HEAD: 2}, texts)
    steps: list[int] = []
    out = list(predict_rows(model, inputs, HEAD, rows, progress=steps.append, **options))
    assert [row for row, _ in out] == rows
    assert [logits.tolist() for _, logits in out] == [[float(len(t[0])), 0.0] for t in texts]
    assert steps == model.batches == batches
    model = StandIn(inputs, lambda head, t: [float(len(t[0])), 0.0], {HEAD: 2}, texts)
    assert predict_file(model, inputs, rows, str(tmp_path / "out.tsv"), labels=["x", "y"], **options).rows == 7
    assert model.batches == batches


@pytest.mark.parametrize("call", ["rows", "file"])
@pytest.mark.parametrize(
    ("count", "words", "batches"),
    [
        (300, 1, [256, 44]),  # batch_size=256
        (3, 2729, [2, 1]),  # max_tokens=8192: rows of 2731 tokens, 2 a batch
        (10_001, 1, [256] * 39 + [16, 1]),  # chunk_rows=10_000
    ],
)
def test_default_budget_batch_size_and_chunk(inputs, tmp_path, call, count, words, batches):
    inputs = dataclasses.replace(inputs, max_positions=4096)
    model = StandIn(inputs, lambda head, t: [0.0, 1.0], {HEAD: 2})
    rows = [Row(i, i + 1, (" ".join(["a"] * words),)) for i in range(count)]
    if call == "rows":
        assert len(list(predict_rows(model, inputs, HEAD, rows))) == count
    else:
        assert predict_file(model, inputs, rows, str(tmp_path / "out.tsv")).rows == count
    assert model.batches == batches


@pytest.mark.parametrize(("words", "length"), [(6, 8), (7, 9), (12, 14)])
def test_a_row_longer_than_the_positions_names_file_and_line_unless_truncated(inputs, words, length):
    inputs = dataclasses.replace(inputs, max_positions=8)
    text = " ".join(["a"] * words)
    model = StandIn(inputs, lambda head, t: [float(len(t))], {HEAD: 1})
    rows = [Row(0, 1, ("a",)), Row(1, 7, (text,))]
    cut = [float(min(length, 8))]
    assert [x.tolist() for _, x in predict_rows(model, inputs, HEAD, rows, truncate=True)] == [[3.0], cut]
    if length <= 8:
        assert [x.tolist() for _, x in predict_rows(model, inputs, HEAD, rows)] == [[3.0], cut]
        return
    message = (
        f"{{}}:7: {length} tokens, more than the model's 8 positions "
        "(--truncate cuts such rows, as fairseq's --shorten-method truncate)"
    )
    with pytest.raises(CorpusError, match=re.escape(message.format("input")) + "$"):
        list(predict_rows(model, inputs, HEAD, rows))
    with pytest.raises(CorpusError, match=re.escape(message.format("dev.tsv")) + "$"):
        list(predict_rows(model, inputs, HEAD, rows, where="dev.tsv"))


def test_truncated_rows_keep_their_first_tokens(inputs):
    inputs = dataclasses.replace(inputs, max_positions=5)
    text = "Green river city reads a book."
    full = inputs.encode(text)
    assert len(full) > 5
    model = StandIn(inputs, lambda head, t: [float(x) for x in t], {HEAD: 5})
    ((_, logits),) = predict_rows(model, inputs, HEAD, [Row(0, 1, (text,))], truncate=True)
    assert logits.tolist() == [float(x) for x in full[:5]]


# ------------------------------------------------------------------------------------- predict_file


def test_predict_file_refuses_long_rows_by_file_and_line_unless_truncate(inputs, tmp_path):
    inputs = dataclasses.replace(inputs, max_positions=8)
    model = StandIn(inputs, lambda head, t: [float(len(t)), 10.0], {HEAD: 2})
    rows = [Row(0, 1, ("a",)), Row(1, 3, (" ".join(["a"] * 7),))]
    output = tmp_path / "out.tsv"
    message = (
        "{}:3: 9 tokens, more than the model's 8 positions "
        "(--truncate cuts such rows, as fairseq's --shorten-method truncate)"
    )
    for where, named in [({}, "input"), ({"where": "dev.tsv"}, "dev.tsv")]:
        with pytest.raises(CorpusError, match=re.escape(message.format(named)) + "$"):
            predict_file(model, inputs, rows, str(output), labels=["short", "long"], **where)
        assert not output.exists()
    predict_file(model, inputs, rows, str(output), labels=["short", "long"], truncate=True, probabilities=True)
    assert predicted(output) == (
        "index\tprediction\tprob_short\tprob_long\n0\tlong\t0.00091105123\t0.999089\n1\tlong\t0.11920291\t0.880797\n"
    )


@pytest.mark.parametrize(("output_format", "expected"), [("tsv", TSV), ("jsonl", JSONL)])
def test_written_rows_with_probabilities(model, inputs, tmp_path, capsys, output_format, expected):
    output = tmp_path / "out"
    stats = predict_file(
        model, inputs, ROWS, str(output), labels=LABELS, output_format=output_format, probabilities=True
    )
    assert predicted(output) == expected
    assert capsys.readouterr().err == ""
    assert (stats.rows, stats.head, stats.regression, stats.labels, stats.metrics) == (4, HEAD, False, LABELS, {})


def test_written_rows_without_probabilities_tsv_by_default(model, inputs, tmp_path):
    predict_file(model, inputs, ROWS, str(tmp_path / "out.tsv"), labels=LABELS)
    assert predicted(tmp_path / "out.tsv") == "index\tprediction\n0\tpos\n1\tneg\n2\tmid\n3\tpos\n"
    predict_file(model, inputs, ROWS, str(tmp_path / "out.jsonl"), labels=LABELS, output_format="jsonl")
    assert predicted(tmp_path / "out.jsonl") == "".join(
        f'{{"index": {i}, "prediction": "{name}"}}\n' for i, name in enumerate(["pos", "neg", "mid", "pos"])
    )
    assert OUTPUT_FORMATS == ("tsv", "jsonl")


def test_label_names_are_written_as_they_are_in_utf8(inputs, tmp_path):
    model = StandIn(inputs, lambda head, t: [0.0, 1.0] if t == ("A dog runs.",) else [1.0, 0.0], {HEAD: 2}, LOGITS)
    names = ["négatif", "positif 👍"]
    predict_file(
        model, inputs, ROWS[:2], str(tmp_path / "out.jsonl"), labels=names, output_format="jsonl", probabilities=True
    )
    assert predicted(tmp_path / "out.jsonl") == (
        '{"index": 0, "prediction": "positif 👍", "probabilities": {"négatif": 0.26894143, "positif 👍": 0.7310586}}\n'
        '{"index": 1, "prediction": "négatif", "probabilities": {"négatif": 0.7310586, "positif 👍": 0.26894143}}\n'
    )
    predict_file(model, inputs, ROWS[:2], str(tmp_path / "out.tsv"), labels=names, probabilities=True)
    assert predicted(tmp_path / "out.tsv") == (
        "index\tprediction\tprob_négatif\tprob_positif 👍\n0\tpositif 👍\t0.26894143\t0.7310586\n"
        "1\tnégatif\t0.7310586\t0.26894143\n"
    )


def test_class_names_are_the_label_dictionarys_first_entries_else_numbers(capsys):
    assert _class_names(["pos", "neg", "mid", "madeupword0000"], 3) == LABELS
    assert _class_names(LABELS, 3) == LABELS
    assert _class_names(("x", "y"), 1) == ["x"]
    assert capsys.readouterr().err == ""
    for labels, classes in [(None, 2), ([], 3), (["pos", "neg"], 3)]:
        assert _class_names(labels, classes) == [str(k) for k in range(classes)]
        assert capsys.readouterr().err == NO_LABELS_WARNING.format(classes)


def test_without_label_names_classes_are_written_as_numbers(model, inputs, tmp_path, capsys):
    stats = predict_file(model, inputs, ROWS, str(tmp_path / "out.tsv"), labels=["pos", "neg"], probabilities=True)
    assert predicted(tmp_path / "out.tsv") == TSV.replace("pos", "0").replace("neg", "1").replace("mid", "2")
    assert stats.labels == ["0", "1", "2"]
    assert capsys.readouterr().err == NO_LABELS_WARNING.format(3)


def test_the_hubs_labels_map_class_k_to_the_kth_entry_of_label_dict(hub, inputs, tmp_path):
    texts = [
        (f"The {a} {b} {c}.",) for a in ("dog", "man", "old city") for b in ("runs", "sleeps") for c in ("", "quickly")
    ]
    rows = [Row(i, i + 1, t) for i, t in enumerate(texts)]
    assert hub.labels == [*LABELS, "madeupword0000"]
    assert [inputs.encode(*t) for t in texts] == [hub.inputs.encode(*t) for t in texts]  # the stand-ins' inputs
    with torch.no_grad():
        classes = [int(hub.predict(HEAD, hub.encode(*t)).argmax()) for t in texts]
    assert len(set(classes)) >= 2
    stats = predict_file(hub.model, hub.inputs, rows, str(tmp_path / "out.tsv"), labels=hub.labels, head=HEAD)
    written = [line.split("\t")[1] for line in predicted(tmp_path / "out.tsv").splitlines()[1:]]
    assert written == [LABELS[k] for k in classes] == [hub.label_name(k) for k in classes]
    assert stats.labels == LABELS


def test_the_head_is_chosen_or_refused_before_anything_is_written(inputs, tmp_path):
    model = StandIn(inputs, table, {"topic": 2, HEAD: 3}, LOGITS)
    output = tmp_path / "out.tsv"
    with pytest.raises(
        HeadError,
        match=re.escape(
            "the model has 2 classification heads, ['sentence_classification_head', 'topic']: choose one with --head"
        )
        + "$",
    ):
        predict_file(model, inputs, ROWS, str(output), labels=LABELS)
    assert not output.exists()
    stats = predict_file(model, inputs, ROWS, str(output), labels=LABELS, head="topic", probabilities=True)
    assert predicted(output) == (
        "index\tprediction\tprob_pos\tprob_neg\n0\tneg\t0.11920291\t0.880797\n1\tpos\t0.880797\t0.11920291\n"
        "2\tpos\t0.6666667\t0.33333334\n3\tpos\t0.5\t0.5\n"
    )
    assert (stats.head, stats.labels) == ("topic", ["pos", "neg"])


# --------------------------------------------------------------- the command: equality with the hub


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


# --------------------------------------------------------------------------------------- regression


def regression_model(inputs, outputs: int = 1):
    values = {("A dog runs.",): [0.5, 1.0], ("The old city sleeps.",): [-1.25, 0.0], ("",): [0.1, -0.75]}
    return StandIn(inputs, lambda head, t: values[t][:outputs], {HEAD: outputs}, values)


REGRESSION_ROWS = [Row(0, 1, ("A dog runs.",)), Row(1, 2, ("The old city sleeps.",)), Row(2, 3, ("",))]


def test_a_one_output_head_is_a_regression_head_scaled(inputs, tmp_path):
    model = regression_model(inputs)
    stats = predict_file(model, inputs, REGRESSION_ROWS, str(tmp_path / "out.tsv"), labels=LABELS, probabilities=True)
    assert predicted(tmp_path / "out.tsv") == "index\tprediction\n0\t0.5\n1\t-1.25\n2\t0.1\n"
    assert (stats.rows, stats.regression, stats.labels, stats.metrics) == (3, True, [], {})
    predict_file(model, inputs, REGRESSION_ROWS, str(tmp_path / "out.tsv"), regression_scale=5.0)
    assert predicted(tmp_path / "out.tsv") == "index\tprediction\n0\t2.5\n1\t-6.25\n2\t0.5\n"
    predict_file(
        model, inputs, REGRESSION_ROWS[:2], str(tmp_path / "out.jsonl"), regression_scale=5.0, output_format="jsonl"
    )
    assert predicted(tmp_path / "out.jsonl") == '{"index": 0, "prediction": 2.5}\n{"index": 1, "prediction": -6.25}\n'
    predict_file(model, inputs, REGRESSION_ROWS, str(tmp_path / "out.jsonl"), output_format="jsonl")
    assert predicted(tmp_path / "out.jsonl").splitlines()[2] == '{"index": 2, "prediction": 0.1}'  # float32's 0.1


def test_an_unknown_output_format_is_refused_before_anything_is_written(model, inputs, tmp_path):
    output = tmp_path / "out.csv"
    with pytest.raises(ValueError, match=r"^output_format 'csv' is not one of tsv, jsonl$"):
        predict_file(model, inputs, ROWS, str(output), labels=LABELS, output_format="csv")
    assert not output.exists()


def test_regression_of_several_outputs_writes_them_all(inputs, tmp_path):
    model = regression_model(inputs, outputs=2)
    rows = [dataclasses.replace(row, label="1 2") for row in REGRESSION_ROWS[:2]]
    stats = predict_file(model, inputs, rows, str(tmp_path / "out.tsv"), regression=True, regression_scale=2.0)
    assert predicted(tmp_path / "out.tsv") == "index\tprediction\n0\t1.0 2.0\n1\t-2.5 0.0\n"
    assert (stats.regression, stats.labels, stats.metrics) == (True, [], {})
    predict_file(
        model, inputs, rows, str(tmp_path / "out.jsonl"), regression=True, output_format="jsonl", probabilities=True
    )
    assert predicted(tmp_path / "out.jsonl") == (
        '{"index": 0, "prediction": [0.5, 1.0]}\n{"index": 1, "prediction": [-1.25, 0.0]}\n'
    )


def test_a_one_output_head_told_it_is_no_regression_head_has_one_class(inputs, tmp_path):
    model = regression_model(inputs)
    rows = [dataclasses.replace(row, label="only") for row in REGRESSION_ROWS]
    stats = predict_file(
        model, inputs, rows, str(tmp_path / "out.tsv"), labels=["only"], regression=False, probabilities=True
    )
    assert predicted(tmp_path / "out.tsv") == "index\tprediction\tprob_only\n0\tonly\t1.0\n1\tonly\t1.0\n2\tonly\t1.0\n"
    assert (stats.regression, stats.labels, stats.metrics) == (False, ["only"], {"accuracy": 1.0})


@pytest.mark.parametrize(
    ("outputs", "label", "count"),
    [(1, "high", "1"), (1, "1 2", "1"), (1, "", "1"), (1, "nan x", "1"), (2, "3", "2"), (2, "1 2 3", "2")],
)
def test_a_regression_label_that_is_not_its_outputs_numbers_is_refused_by_line(inputs, tmp_path, outputs, label, count):
    model = regression_model(inputs, outputs)
    rows = [dataclasses.replace(REGRESSION_ROWS[0], label="1" if outputs == 1 else "1 2"), Row(1, 5, ("",), label)]
    output = tmp_path / "out.tsv"
    output.write_text("before\n")
    message = f"dev.tsv:5: label {label!r} is not {count} number(s), as a regression target must be"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        predict_file(model, inputs, rows, str(output), where="dev.tsv", regression=True)
    assert predicted(output) == "before\n"


def test_regression_metrics_equal_scipys_on_the_scaled_predictions(inputs, tmp_path):
    stats_module = require("scipy.stats", "the correlations are checked against scipy")
    rng = np.random.default_rng(1)
    texts = [(f"Row {i} of the file.",) for i in range(30)]
    values = dict(zip(texts, rng.normal(0, 1, (30, 1)).astype(np.float32).tolist()))
    model = StandIn(inputs, lambda head, t: values[t], {HEAD: 1}, texts)
    gold = np.round(rng.normal(0, 5, 30), 1)
    gold[:4] = 2.5  # ties among the ranks
    rows = [Row(i, i + 1, t, f" {g} " if i % 5 else None) for i, (t, g) in enumerate(zip(texts, gold))]
    stats = predict_file(model, inputs, rows, str(tmp_path / "out.tsv"), regression_scale=5.0)
    lines = predicted(tmp_path / "out.tsv").splitlines()[1:]
    written = np.array([line.split("\t")[1] for line in lines], dtype=np.float32)
    np.testing.assert_array_equal(written, np.array([values[t][0] for t in texts], np.float32) * 5)
    written = written.astype(np.float64)
    scored = [i for i in range(30) if i % 5]
    pearson = stats_module.pearsonr(written[scored], gold[scored])[0]
    spearman = stats_module.spearmanr(written[scored], gold[scored])[0]
    assert list(stats.metrics) == ["pearson", "spearman", "pearson_and_spearman"]
    assert stats.metrics["pearson"] == pytest.approx(pearson, abs=1e-12)
    assert stats.metrics["spearman"] == pytest.approx(spearman, abs=1e-12)
    assert stats.metrics["pearson_and_spearman"] == pytest.approx((pearson + spearman) / 2, abs=1e-12)
    only = predict_file(model, inputs, rows, str(tmp_path / "out.tsv"), regression_scale=5.0, metrics=["spearman"])
    assert only.metrics == {"spearman": pytest.approx(spearman, abs=1e-12)}


# ------------------------------------------------------------------------------------------ metrics


def scored_model(inputs, classes: int, count: int, seed: int):
    rng = np.random.default_rng(seed)
    texts = [(f"Row {i} of the file.",) for i in range(count)]
    values = dict(zip(texts, rng.normal(0, 1, (count, classes)).astype(np.float32).tolist()))
    model = StandIn(inputs, lambda head, t: values[t], {HEAD: classes}, texts)
    predictions = [int(np.argmax(values[t])) for t in texts]
    return model, texts, predictions, rng


@pytest.mark.parametrize(
    ("names", "positive"), [(["1", "0"], 0), (["0", "1"], 1), (["no", "yes"], 1), (["yes", "no"], 1), (["b", "1"], 1)]
)
def test_binary_metrics_equal_sklearns_with_fairseqs_positive_label(inputs, tmp_path, names, positive):
    sk = require("sklearn.metrics", "the metrics are checked against sklearn")
    model, texts, predictions, rng = scored_model(inputs, 2, 40, seed=len(names[0]) + positive)
    targets = [k if rng.random() < 0.7 else 1 - k for k in predictions]
    rows = [Row(i, i + 1, t, names[k] if i % 7 else None) for i, (t, k) in enumerate(zip(texts, targets))]
    stats = predict_file(model, inputs, rows, str(tmp_path / "out.tsv"), labels=names, metrics=["f1", "mcc"])
    scored = [i for i in range(40) if i % 7]
    p, g = [predictions[i] for i in scored], [targets[i] for i in scored]
    accuracy, f1 = sk.accuracy_score(g, p), sk.f1_score(g, p, pos_label=positive)
    assert 0 < f1 < 1 and 0 < accuracy < 1
    assert stats.metrics == {
        "accuracy": accuracy,
        "f1": pytest.approx(f1, abs=1e-12),
        "mcc": pytest.approx(sk.matthews_corrcoef(g, p), abs=1e-12),
        "acc_and_f1": pytest.approx((accuracy + f1) / 2, abs=1e-12),
    }
    assert list(stats.metrics) == ["accuracy", "f1", "mcc", "acc_and_f1"]


def test_three_class_metrics_as_asked_and_accuracy_by_default(inputs, tmp_path):
    sk = require("sklearn.metrics", "the metrics are checked against sklearn")
    model, texts, predictions, rng = scored_model(inputs, 3, 30, seed=3)
    targets = [k if rng.random() < 0.6 else int(rng.integers(3)) for k in predictions]
    rows = [Row(i, i + 1, t, LABELS[k]) for i, (t, k) in enumerate(zip(texts, targets))]
    output = str(tmp_path / "out.tsv")
    accuracy, mcc = sk.accuracy_score(targets, predictions), sk.matthews_corrcoef(targets, predictions)
    assert predict_file(model, inputs, rows, output, labels=LABELS).metrics == {"accuracy": accuracy}
    stats = predict_file(model, inputs, rows, output, labels=LABELS, metrics=["mcc", "accuracy"])
    assert stats.metrics == {"mcc": pytest.approx(mcc, abs=1e-12), "accuracy": accuracy}
    assert list(stats.metrics) == ["mcc", "accuracy"]
    assert predict_file(model, inputs, rows, output, labels=LABELS, metrics=[]).metrics == {"accuracy": accuracy}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"metrics": ["bleu"]}, f"unknown metric 'bleu'; choose from {', '.join(METRICS)}"),
        ({"metrics": ["f1"]}, "f1 is for two classes, and the head has 3"),
        ({"metrics": ["pearson"]}, "pearson is a regression metric, and the head is a classification head"),
        ({"regression": True, "metrics": ["mcc"]}, "mcc is a classification metric, and the head is a regression head"),
        ({"regression": True, "metrics": ["spearman"]}, "correlations need one regression output, and the head has 3"),
    ],
)
def test_metrics_that_do_not_fit_the_head_are_refused_before_anything_is_written(
    model, inputs, tmp_path, options, message
):
    output = tmp_path / "out.tsv"
    with pytest.raises(CorpusError, match=re.escape(message) + "$") as error:
        predict_file(model, inputs, ROWS, str(output), labels=LABELS, **options)
    assert error.value.__suppress_context__ and error.value.__cause__ is None
    assert not output.exists()


def test_a_regression_head_of_several_outputs_has_no_default_metrics(inputs, tmp_path):
    model = regression_model(inputs, outputs=2)
    rows = [dataclasses.replace(row, label="1 2") for row in REGRESSION_ROWS]
    assert predict_file(model, inputs, rows, str(tmp_path / "out.tsv"), regression=True).metrics == {}


@pytest.mark.parametrize(("where", "expected"), [({}, "input"), ({"where": "dev.tsv"}, "dev.tsv")])
def test_an_unknown_label_names_file_and_line_and_writes_nothing(model, inputs, tmp_path, where, expected):
    output = tmp_path / "out.tsv"
    output.write_text("before\n")
    rows = [dataclasses.replace(ROWS[0], label="pos"), dataclasses.replace(ROWS[1], label="Pos")]
    message = f"{expected}:4: label 'Pos' is not one of the model's labels ['pos', 'neg', 'mid'] (its label/dict.txt)"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        predict_file(model, inputs, rows, str(output), labels=LABELS, **where)
    assert predicted(output) == "before\n"
    message = f"{expected}:2: label 'pos' is not one of the model's labels ['0', '1', '2'] (its label/dict.txt)"
    with pytest.raises(CorpusError, match=re.escape(message) + "$"):
        predict_file(model, inputs, rows, str(output), **where)


def test_the_commands_binary_metrics_equal_sklearns_with_fairseqs_positive_label(models, tmp_path, capsys):
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


# ---------------------------------------------------------------------------------- stats, progress


def test_stats_defaults():
    assert PredictStats() == PredictStats(rows=0, head="", regression=False, labels=[], metrics={}, seconds=0.0)
    stats = PredictStats()
    assert (stats.rows, stats.head, stats.regression, stats.labels, stats.metrics, stats.seconds) == (
        0,
        "",
        False,
        [],
        {},
        0.0,
    )
    stats.labels.append("x")
    stats.metrics["x"] = 1.0
    assert PredictStats().labels == [] and PredictStats().metrics == {}


def test_seconds_are_the_calls_own_time(inputs, tmp_path):
    model = StandIn(inputs, lambda head, t: time.sleep(0.05) or LOGITS[t], {HEAD: 3}, LOGITS)
    begun = time.monotonic()
    stats = predict_file(model, inputs, ROWS, str(tmp_path / "out.tsv"), labels=LABELS, batch_size=1)
    elapsed = time.monotonic() - begun
    assert 0.2 <= stats.seconds <= elapsed


def test_an_empty_input_writes_the_header_only(model, inputs, tmp_path):
    stats = predict_file(model, inputs, [], str(tmp_path / "out.tsv"), labels=LABELS, probabilities=True)
    assert predicted(tmp_path / "out.tsv") == "index\tprediction\tprob_pos\tprob_neg\tprob_mid\n"
    assert (stats.rows, stats.metrics) == (0, {})
    predict_file(model, inputs, [], str(tmp_path / "out.jsonl"), labels=LABELS, output_format="jsonl")
    assert predicted(tmp_path / "out.jsonl") == ""


@pytest.mark.parametrize("total", [None, 4, 9])
def test_the_progress_bar_counts_rows_and_ends_at_the_rows_read(model, inputs, tmp_path, capsys, total):
    predict_file(
        model, inputs, ROWS, str(tmp_path / "out.tsv"), labels=LABELS, progress=True, total=total, batch_size=3
    )
    empty, first, *_, last = capsys.readouterr().err.split("\r")
    start = f"predict:   0%|          | 0/{total} [00:00<?, ?rows/s]" if total else "predict: 0rows [00:00, ?rows/s]"
    assert (empty, first) == ("", start)
    assert re.fullmatch(r"predict: 100%\|█+\| 4/4 \[\d\d:\d\d<\d\d:\d\d, +[\d.]+rows/s\] *\n", last), last
    predict_file(model, inputs, ROWS, str(tmp_path / "out.tsv"), labels=LABELS, total=total)
    assert capsys.readouterr().err == ""


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


# ---------------------------------------------------------------------------------------- bad input

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
