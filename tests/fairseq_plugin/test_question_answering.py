"""``--task roberta_ext_extractive_qa`` and ``--criterion roberta_ext_extractive_qa`` without a training
run: the task set up from a tiny SQuAD-like folder the tests write (the trained GPT-2 BPE of
tests/bpe_fixtures.py, its dict.txt, a JSON file per split), its windows (those of
:func:`roberta_ext.inference.qa.prepare_windows` with the task's options), its batches in each family's
pair layout (as :func:`~roberta_ext.inference.qa.collate_windows` makes them), the model's token head,
and the loss against the cross-entropy of the start and end labels over each window's candidates, with
the metrics it logs against the formulas it documents."""

from __future__ import annotations

import argparse
import json
import logging
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tests.peers import require

require("fairseq", "the task and criterion are fairseq's")

from fairseq.criterions import CRITERION_REGISTRY  # (after the peer check)
from fairseq.logging import metrics
from fairseq.tasks import TASK_REGISTRY

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the models, tasks and criteria)
from roberta_ext.fairseq_plugin.question_answering import (
    ExtractiveQAConfig,
    ExtractiveQACriterion,
    ExtractiveQALossConfig,
    ExtractiveQATask,
    QAWindowDataset,
)
from roberta_ext.inference import qa
from tests.bpe_fixtures import build_bpe_files
from tests.fairseq_plugin.test_sentence_pairs import checkpoint_options, model_options, refuses_stale

LOGGER = "roberta_ext.fairseq_plugin.question_answering"

EXAMPLES = [
    {
        "question": "Who founded Quelm?",
        "context": "Quelm was founded by Ada Lovelace in 1901, on the river.",
        "answers": [{"text": "Ada Lovelace", "answer_start": 21}],
    },
    {"question": "What is blue?", "context": "Nothing here is of that colour at all.", "answers": []},
    {
        "question": "When?",
        "context": "In 1901 the town was built.",
        "answers": [{"text": "1901", "answer_start": 3}],
    },
]
# Small windows: 16 positions, questions cut to 4 tokens, windows 3 context tokens apart.
OPTIONS = {"max_positions": 16, "doc_stride": 3, "max_question_tokens": 4}


def squad_dir(folder: Path, splits=("train", "valid")) -> Path:
    """dict.txt, encoder.json and vocab.bpe, and a SQuAD-like JSON file per split."""
    build_bpe_files(folder)
    for split in splits:
        (folder / f"{split}.json").write_text(json.dumps(EXAMPLES), "utf-8")
    return folder


def qa_task(data: Path | str, **options: object) -> ExtractiveQATask:
    """The task set up as fairseq-train does (``--seed`` 1 unless given)."""
    return ExtractiveQATask.setup_task(ExtractiveQAConfig(data=str(data), **{"seed": 1, **options}))


def test_the_options_default_to_berts_squad_recipe():
    cfg = ExtractiveQAConfig()
    assert (cfg.max_positions, cfg.doc_stride, cfg.max_question_tokens, cfg.qa_head_name) == (512, None, 64, "qa")
    assert cfg.bpe_encoder_json is None and cfg.bpe_vocab is None
    assert TASK_REGISTRY["roberta_ext_extractive_qa"] is ExtractiveQATask
    assert CRITERION_REGISTRY["roberta_ext_extractive_qa"] is ExtractiveQACriterion


def test_setup_reads_the_dictionary_and_tokenizer_of_the_first_directory(tmp_path):
    data = squad_dir(tmp_path / "squad")
    other = tmp_path / "other"
    other.mkdir()
    task = qa_task(f"{data}:{other}", max_positions=40)
    size = len(task.dictionary)
    assert task.mask_idx == size - 1 and task.dictionary[task.mask_idx] == "<mask>"
    assert len(task.tokenizer.dictionary) == size
    assert task.tokenizer.encode(EXAMPLES[0]["question"]) == qa.load_tokenizer(data).encode(EXAMPLES[0]["question"])
    assert task.source_dictionary is task.dictionary and task.target_dictionary is task.dictionary
    assert task.max_positions() == 40


def test_the_bpe_files_may_be_named(tmp_path):
    files = build_bpe_files(tmp_path / "bpe")
    data = tmp_path / "squad"
    data.mkdir()
    (data / "dict.txt").write_bytes(files.dict_txt.read_bytes())
    with pytest.raises(FileNotFoundError):  # neither in DATA nor named
        qa_task(data)
    task = qa_task(data, bpe_encoder_json=str(files.encoder_json), bpe_vocab=str(files.vocab_bpe))
    text = EXAMPLES[0]["context"]
    assert task.tokenizer.encode(text) == qa.load_tokenizer(
        data, **{"encoder_json": str(files.encoder_json), "vocab_bpe": str(files.vocab_bpe)}
    ).encode(text)
    # One named, the other from DATA.
    (data / "vocab.bpe").write_bytes(files.vocab_bpe.read_bytes())
    assert qa_task(data, bpe_encoder_json=str(files.encoder_json)).tokenizer.encode(text) == task.tokenizer.encode(text)
    (data / "vocab.bpe").unlink()
    (data / "encoder.json").write_bytes(files.encoder_json.read_bytes())
    assert qa_task(data, bpe_vocab=str(files.vocab_bpe)).tokenizer.encode(text) == task.tokenizer.encode(text)


def test_a_folder_without_the_dictionary_says_what_it_needs(tmp_path):
    data = squad_dir(tmp_path)
    (data / "dict.txt").unlink()
    with pytest.raises(FileNotFoundError) as error:
        qa_task(data)
    assert str(error.value) == (
        f"--task roberta_ext_extractive_qa: {data / 'dict.txt'} does not exist; its data folder needs "
        "the pretrained model's dict.txt and SPLIT.json files"
    )


def test_a_dictionary_the_tokenizer_reads_otherwise_is_refused(tmp_path):
    data = squad_dir(tmp_path)
    # fairseq keeps a "<mask>" row of dict.txt as a symbol, so both dictionaries end with it and
    # the tokenizer's is not the task's plus the <mask> it appends.
    with open(data / "dict.txt", "a", encoding="utf-8") as out:
        out.write("<mask> 1\n")
    with pytest.raises(ValueError) as error:
        qa_task(data)
    assert str(error.value) == f"{str(data / 'dict.txt')!r} reads differently for fairseq and for the tokenizer"


def test_the_layout_is_known_once_the_model_is_built(tmp_path):
    task = qa_task(squad_dir(tmp_path), **OPTIONS)
    with pytest.raises(RuntimeError) as error:
        _ = task.layout
    assert str(error.value) == "the pair layout is known once the model is built (task.build_model)"


@pytest.mark.parametrize(
    ("family", "layout"),
    [
        ("roberta", qa.PairLayout(double_separator=True, segments=False)),
        ("bert", qa.PairLayout(double_separator=False, segments=True)),
    ],
)
@pytest.mark.parametrize("head", [None, "squad"])
def test_the_model_gets_a_start_end_head_and_the_task_its_layout(tmp_path, caplog, family, layout, head):
    task = qa_task(squad_dir(tmp_path), **OPTIONS, **({} if head is None else {"qa_head_name": head}))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        model = task.build_model(model_options(family))
    name = head or "qa"
    assert sorted(model.token_heads) == [name] and model.token_heads[name].num_classes == 2
    assert task.layout == layout == qa.pair_layout(model.cfg)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [f"QA head {name!r}; pair layout: {layout}"]


def test_a_model_without_token_heads_is_refused(tmp_path):
    task = qa_task(squad_dir(tmp_path), **OPTIONS)
    fairseqs = argparse.Namespace(
        arch="roberta_base",
        encoder_layers=1,
        encoder_embed_dim=16,
        encoder_ffn_embed_dim=32,
        encoder_attention_heads=2,
        max_positions=64,
    )
    with pytest.raises(TypeError) as error:
        task.build_model(fairseqs)
    assert str(error.value) == (
        "--task roberta_ext_extractive_qa needs a model of this plugin (token heads); got RobertaModel"
    )


def loaded(tmp_path: Path, family: str = "bert", split: str = "train", **options: object):
    data = squad_dir(tmp_path)
    task = qa_task(data, **{**OPTIONS, **options})
    torch.manual_seed(0)
    model = task.build_model(model_options(family)).eval()
    task.load_dataset(split)
    return task, model, task.dataset(split)


def test_the_model_is_built_from_a_checkpoints_options_as_fairseq_builds_it(tmp_path):
    task = qa_task(squad_dir(tmp_path), **OPTIONS)
    model = task.build_model(checkpoint_options(), from_checkpoint=True)
    assert sorted(model.token_heads) == ["qa"] and task.layout == qa.pair_layout(model.cfg)
    refuses_stale(task)


def test_the_windows_are_the_examples_cut_with_the_tasks_options(tmp_path, caplog):
    data = squad_dir(tmp_path)
    task = qa_task(data, **OPTIONS, seed=5)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task.load_dataset("valid")
    dataset = task.dataset("valid")
    expected = qa.prepare_windows(
        qa.load_examples(data / "valid.json"), task.tokenizer.encode, max_positions=16, stride=3, max_question_tokens=4
    )
    assert type(dataset) is QAWindowDataset and dataset.windows == expected
    answered = sum(w.start >= 0 for w in expected)
    assert 0 < answered < len(expected)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"valid: 3 questions -> {len(expected)} windows ({answered} holding the answer)"
    ]
    assert dataset.sizes.tolist() == [len(w) for w in expected] and dataset.sizes.dtype == "int64"
    assert [dataset[i] for i in (0, 4)] == [{"id": 0, "window": expected[0]}, {"id": 4, "window": expected[4]}]
    assert dataset.seed == 5 and not dataset.can_reuse_epoch_itr_across_epochs
    # Other options, other windows: each option reaches prepare_windows.
    for change in ({"max_positions": 18}, {"doc_stride": 2}, {"max_question_tokens": 3}, {"doc_stride": None}):
        other = qa_task(data, **{**OPTIONS, **change})
        other.load_dataset("valid")
        assert other.dataset("valid").windows != expected, change


def test_training_windows_are_shuffled_each_epoch_the_others_are_not(tmp_path):
    task, _, train = loaded(tmp_path, seed=3)
    task.load_dataset("valid")
    valid = task.dataset("valid")
    assert train.shuffle and not valid.shuffle
    assert len(set(train.sizes.tolist())) == 1  # windows of one size: the order is the shuffle's
    before_any_epoch = train.ordered_indices().tolist()
    orders = set()
    for epoch in (1, 2, 3):
        train.set_epoch(epoch)
        valid.set_epoch(epoch)
        assert valid.ordered_indices().tolist() == list(range(len(valid)))
        orders.add(tuple(train.ordered_indices().tolist()))
    assert len(orders) == 3
    train.set_epoch(1)
    assert train.ordered_indices().tolist() == before_any_epoch  # epoch 1 until fairseq sets one
    # The seed is --seed's.
    again = qa_task(squad_dir(tmp_path / "again"), **OPTIONS, seed=4)
    again.load_dataset("train")
    again.dataset("train").set_epoch(3)
    assert tuple(again.dataset("train").ordered_indices().tolist()) not in orders


def test_a_missing_split_is_named(tmp_path):
    data = squad_dir(tmp_path, splits=("train",))
    with pytest.raises(FileNotFoundError) as error:
        qa_task(data, **OPTIONS).load_dataset("valid")
    assert str(error.value) == f"dataset not found: valid ({data / 'valid.json'})"


@pytest.mark.parametrize("family", ["roberta", "bert"])
def test_batches_are_the_windows_collated_in_the_models_layout(tmp_path, family):
    task, _, dataset = loaded(tmp_path, family)
    indices = [3, 0, 9, 12]
    batch = dataset.collater([dataset[i] for i in indices])
    windows = [dataset.windows[i] for i in indices]
    expected = qa.collate_windows(windows, bos=0, eos=2, pad=1, layout=task.layout)
    assert sorted(batch) == ["candidates", "id", "net_input", "nsentences", "ntokens", "target"]
    assert batch["id"].tolist() == indices and batch["id"].dtype == torch.long and batch["nsentences"] == 4
    tokens = batch["net_input"]["src_tokens"]
    assert torch.equal(tokens, expected.tokens)
    assert torch.equal(batch["net_input"]["src_lengths"], expected.tokens.ne(1).sum(1))
    assert batch["ntokens"] == int(expected.tokens.ne(1).sum())
    if family == "bert":
        assert torch.equal(batch["net_input"]["segment_labels"], expected.segment_labels)
    else:
        assert sorted(batch["net_input"]) == ["src_lengths", "src_tokens"]
    assert torch.equal(batch["target"], torch.stack([expected.starts, expected.ends], dim=1))
    assert torch.equal(batch["candidates"], expected.candidates)
    assert bool(batch["target"].gt(0).any())  # the window holding the answer is in the batch
    assert dataset.collater([]) == {}


def test_a_window_shorter_than_the_others_is_padded(tmp_path):
    task, _, dataset = loaded(tmp_path, "roberta", max_positions=24)
    sizes = dataset.sizes.tolist()
    short, long = sizes.index(min(sizes)), sizes.index(max(sizes))
    assert min(sizes) < max(sizes)
    batch = dataset.collater([dataset[short], dataset[long]])
    assert batch["net_input"]["src_lengths"].tolist() == [min(sizes), max(sizes)]
    assert batch["ntokens"] == min(sizes) + max(sizes)


# --------------------------------------------------------------------------------- the criterion


def expected_loss(logits: torch.Tensor, batch: dict) -> torch.Tensor:
    """Sum over windows of the mean of the start and end cross-entropies over the window's candidates."""
    scores = logits.float().masked_fill(~batch["candidates"][..., None], float("-inf"))
    start = F.cross_entropy(scores[..., 0], batch["target"][:, 0], reduction="sum")
    end = F.cross_entropy(scores[..., 1], batch["target"][:, 1], reduction="sum")
    return (start + end) / 2


@pytest.mark.parametrize(("family", "head"), [("roberta", "qa"), ("bert", "squad")])
def test_the_loss_is_the_mean_start_and_end_cross_entropy_of_each_window(tmp_path, family, head):
    task, model, dataset = loaded(tmp_path, family, qa_head_name=head)
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    criterion = ExtractiveQACriterion(ExtractiveQALossConfig(qa_head_name=head), task)
    assert criterion.head == head
    assert criterion.task is task and criterion.padding_idx == task.dictionary.pad()  # fairseq's criterion
    loss, size, log = criterion(model, batch)
    net_input = batch["net_input"]
    logits = model.tag(head, model(**net_input, features_only=True)[0])
    torch.testing.assert_close(loss, expected_loss(logits, batch))
    assert loss.requires_grad and size == len(dataset)
    predicted = logits.masked_fill(~batch["candidates"][..., None], float("-inf")).argmax(dim=1)  # (B, 2)
    right = predicted.eq(batch["target"])
    assert sorted(log) == sorted(
        ["loss", "start_correct", "end_correct", "span_correct", "ntokens", "nsentences", "sample_size"]
    )
    torch.testing.assert_close(log["loss"], loss.detach())
    assert not log["loss"].requires_grad
    assert (log["start_correct"], log["end_correct"], log["span_correct"]) == (
        int(right[:, 0].sum()),
        int(right[:, 1].sum()),
        int(right.all(dim=1).sum()),
    )
    assert (log["ntokens"], log["nsentences"], log["sample_size"]) == (batch["ntokens"], size, size)


def test_the_counts_of_right_starts_ends_and_spans(tmp_path):
    task, model, dataset = loaded(tmp_path)
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    head = model.token_heads["qa"]
    with torch.no_grad():  # a head whose logits are all 0
        head.out_proj.weight.zero_()
        head.out_proj.bias.zero_()
    _, _, log = ExtractiveQACriterion(ExtractiveQALossConfig(qa_head_name="qa"), task)(model, batch)
    # Every logit is 0: the first candidate (position 0) wins, right in the windows without the answer.
    unanswered = int(batch["target"].eq(0).all(dim=1).sum())
    assert 0 < unanswered < len(dataset)
    assert log["start_correct"] == log["end_correct"] == log["span_correct"] == unanswered


def test_a_model_without_the_head_is_refused_with_its_heads(tmp_path):
    task, model, dataset = loaded(tmp_path, qa_head_name="squad")
    model.register_token_head("ner", 3)
    batch = dataset.collater([dataset[0]])
    with pytest.raises(KeyError) as error:
        ExtractiveQACriterion(ExtractiveQALossConfig(qa_head_name="qa"), task)(model, batch)
    assert error.value.args == ("the model has no token head 'qa' (token heads: ['ner', 'squad'])",)


# ------------------------------------------------------------------------------- the metrics


def reduced(logs: list[dict]) -> dict:
    with metrics.aggregate(new_root=True) as agg:
        ExtractiveQACriterion.reduce_metrics(logs)
    return agg.get_smoothed_values()


LOGS = [
    {"loss": torch.tensor(7.654321), "start_correct": 3, "end_correct": 2, "span_correct": 1, "sample_size": 6},
    {"loss": 2.5, "start_correct": 1, "end_correct": 1, "span_correct": 1, "sample_size": 1},
]


def test_metrics_are_bits_per_window_and_percentages_of_windows():
    stats = reduced(LOGS)
    assert stats == {
        "loss": round((7.654321 + 2.5) / 7 / math.log(2), 3),
        "start_acc": round(100 * 4 / 7, 2),
        "end_acc": round(100 * 3 / 7, 2),
        "span_acc": round(100 * 2 / 7, 2),
    }
    # One window: the values, undivided.
    assert reduced(LOGS[1:]) == {"loss": round(2.5 / math.log(2), 3), "start_acc": 100.0, "end_acc": 100.0} | {
        "span_acc": 100.0
    }
    assert reduced([{}]) == {"loss": 0.0, "start_acc": 0.0, "end_acc": 0.0, "span_acc": 0.0}


def test_metrics_weigh_each_reduction_by_its_windows():
    with metrics.aggregate(new_root=True) as agg:
        for group in (LOGS[:1], LOGS[1:]):
            with metrics.aggregate():
                ExtractiveQACriterion.reduce_metrics(group)
    grouped, whole = agg.get_smoothed_values(), reduced(LOGS)
    for key in whole:
        assert grouped[key] == pytest.approx(whole[key], abs=0.01), key


def test_qa_logs_can_be_summed_across_workers():
    assert ExtractiveQACriterion.logging_outputs_can_be_summed() is True
    summed = {key: LOGS[0][key] + LOGS[1][key] for key in LOGS[0]}
    assert reduced([summed]) == reduced(LOGS)
