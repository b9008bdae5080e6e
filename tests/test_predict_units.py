"""``predict_rows`` and ``predict_file`` without fine-tuning: a stand-in model whose logits for each
text are set by the test (so every written byte, probability and metric is known exactly), and a
tiny random hub with heads and a fairseq ``label/dict.txt``, whose rows must equal the hub's own
``predict`` one row at a time. (``tests/test_predict.py`` runs ``roberta-ext predict`` on models
fine-tuned by fairseq: minutes a pass.)"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

import roberta_ext
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
from roberta_ext.metrics import METRICS
from roberta_ext.modeling import EncoderOutput
from roberta_ext.tokenizers import GPT2BPE, Dictionary, FairseqGPT2Tokenizer
from tests.peers import require
from tests.test_predict import make_classifier

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


@pytest.fixture(scope="module")
def hub(tmp_path_factory, bpe_files):
    """A tiny random model with two heads; ``label/dict.txt`` is ``pos``, ``neg``, ``mid`` and a madeupword."""
    folder = tmp_path_factory.mktemp("predict_units") / "model"
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


# ------------------------------------------------------------------------------------- choose_head


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


# ------------------------------------------------------------------------------------- regression


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


# ------------------------------------------------------------------------------------- metrics


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


# ------------------------------------------------------------------------------------- stats, progress


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
