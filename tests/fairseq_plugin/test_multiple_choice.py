"""Multiple choice: ``--task roberta_ext_multiple_choice`` / ``roberta_ext_commonsense_qa`` and
``--criterion roberta_ext_multiple_choice`` against fairseq's ``sentence_ranking`` and its
``commonsense_qa`` example task.

* Peers: on the same data our task gives fairseq's ``sentence_ranking`` batches tensor for tensor
  (``net_input1..N``, target, order), and our model and criterion on those batches give the
  loss and logits of fairseq's ``roberta`` with the same weights; ``roberta_ext_commonsense_qa``
  gives the batches of fairseq's ``commonsense_qa`` task (loaded from fairseq's examples).
* Training: a 2-layer model learns a made-up task (the right choice names the thing the context
  names; chance is 25%) and logs ``accuracy``.
* The tutorials: README.race.md's ``fairseq-train`` command with fairseq's names swapped for ours
  (small sizes appended, ``--fp16`` left out on CPU) from a small pretrained checkpoint, then its
  ``fairseq-validate --save-predictions``, which scores every example (fairseq 0.12 drops the
  last one at ``--batch-size 1``: fairseq#5036); commonsense_qa/README.md's command, swapped.
* Errors: a label out of range, a missing column, a wrong criterion, bad CommonsenseQA lines.
* Unit-level, without a training run (the mutation runs' selection, ``scripts/mutation/modules.toml``): both
  tasks set up with fairseq's ``setup_task`` on tiny data the tests write (binarized columns of the
  60-symbol dictionary of test_models, CommonsenseQA lines of its words), their batches against the
  layouts the module documents, the full messages of every refusal, and the criterion's loss, log and
  predictions file against fairseq's ``sentence_ranking`` criterion on the same model and batch.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import math
import random
import shlex
from pathlib import Path

import pytest
import torch

from tests.peers import require, require_installed

require("fairseq", "the tests run fairseq-train and compare with fairseq's tasks")

import numpy as np
from fairseq.criterions.sentence_ranking import SentenceRankingCriterion  # (after the peer check)
from fairseq.data import Dictionary, data_utils
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder
from fairseq.logging import metrics

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the tasks)
from roberta_ext.cli.corpus import prepare_multiple_choice_main
from roberta_ext.fairseq_plugin.datasets import EveryExampleDataset
from roberta_ext.fairseq_plugin.multiple_choice import (
    MultipleChoiceDataError,
    RobertaExtCommonsenseQATask,
    RobertaExtMultipleChoiceCriterion,
    RobertaExtMultipleChoiceTask,
    read_labels,
)
from tests.fairseq_plugin.test_models import dictionary
from tests.fairseq_plugin.test_sentence_pairs import model_options
from tests.fairseq_plugin.tools import USER_DIR, log_records, run

THINGS = "apple river stone cloud tiger piano green house candle silver window garden".split()
TINY = "--encoder-layers 2 --encoder-embed-dim 64 --encoder-ffn-embed-dim 128 --encoder-attention-heads 4"
ON_CPU = "--cpu --num-workers 0 --seed 1"


def choice_rows(count: int, seed: int, num_choices: int = 4) -> list[dict]:
    """SWAG-style rows: the context names a thing; the right choice names the same thing."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        things = rng.sample(THINGS, num_choices)
        label = rng.randrange(num_choices)
        rows.append(
            {
                "context": f"Yesterday I saw the {things[label]} near the road.",
                "choices": [f"It was a {thing}." for thing in things],
                "label": label,
            }
        )
    return rows


def cqa_rows(count: int, seed: int, *, answers: bool = True) -> list[dict]:
    """CommonsenseQA-style rows of the same made-up task, five choices."""
    rows = []
    for index, row in enumerate(choice_rows(count, seed, num_choices=5)):
        thing = row["choices"][row["label"]].split()[-1].rstrip(".")
        choices = [{"label": "ABCDE"[i], "text": c.split()[-1].rstrip(".")} for i, c in enumerate(row["choices"])]
        cqa = {"id": f"q{seed}-{index}", "question": {"question_concept": thing, "choices": choices}}
        cqa["question"]["stem"] = f"Which thing did I see near the {thing} road?"
        if answers:
            cqa["answerKey"] = "ABCDE"[row["label"]]
        rows.append(cqa)
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def prepare(root: Path, bpe_files, rows: dict[str, list[dict]], name: str = "mc-bin") -> Path:
    """``roberta-ext prepare-multiple-choice`` of ``rows`` (split -> JSONL rows) into ``root/name``."""
    args = ["--encoder-json", str(bpe_files.encoder_json), "--vocab-bpe", str(bpe_files.vocab_bpe)]
    args += ["--dict", str(bpe_files.dict_txt), "--output-dir", str(root / name)]
    for split, split_rows in rows.items():
        args += [f"--{split}", str(write_jsonl(root / f"{split}.jsonl", split_rows))]
    assert prepare_multiple_choice_main(args) == 0
    return root / name


@pytest.fixture(scope="module")
def mc_data(tmp_path_factory, bpe_files) -> dict:
    root = tmp_path_factory.mktemp("multiple_choice")
    rows = {"train": choice_rows(400, 1), "valid": choice_rows(100, 2)}
    return {"root": root, "rows": rows, "data": prepare(root, bpe_files, rows)}


def task_args(data: Path, task: str, criterion: str, arch: str, extra: str = "") -> object:
    from fairseq import options

    argv = [str(data), "--user-dir", USER_DIR, "--task", task, "--criterion", criterion, "--arch", arch]
    argv += shlex.split(f"{TINY} --max-positions 64 --num-classes 4 {extra}")
    return options.parse_args_and_arch(options.get_training_parser(), argv)


# ------------------------------------------------------------------------------- the peers


def test_batches_loss_and_logits_equal_fairseqs_sentence_ranking(mc_data):
    from fairseq import tasks

    options = "--init-token 0 --separator-token 2 --max-option-length 8 --shorten-method truncate --max-positions 28"
    ours_args = task_args(
        mc_data["data"], "roberta_ext_multiple_choice", "roberta_ext_multiple_choice", "roberta_ext_base", options
    )
    theirs_args = task_args(mc_data["data"], "sentence_ranking", "sentence_ranking", "roberta_base", options)
    ours, theirs = tasks.setup_task(ours_args), tasks.setup_task(theirs_args)
    assert ours.mask_idx == theirs.source_dictionary.index("<mask>")
    for task in (ours, theirs):
        task.load_dataset("valid")
    mine, fairseqs = ours.dataset("valid"), theirs.dataset("valid")
    assert mine.ordered_indices().tolist() == fairseqs.ordered_indices().tolist()
    batch = mine.ordered_indices()[:16].tolist()
    sample, reference = mine.collater([mine[i] for i in batch]), fairseqs.collater([fairseqs[i] for i in batch])
    for key in ("id", "target"):
        assert torch.equal(sample[key], reference[key])
    for choice in range(1, 5):
        for key in ("src_tokens", "src_lengths"):
            assert torch.equal(sample[f"net_input{choice}"][key], reference[f"net_input{choice}"][key])
    # The options cut: the choice to 8 tokens (<s> included), the whole to 28.
    tokens = sample["net_input1"]["src_tokens"]
    assert tokens.size(1) <= 28 and tokens[:, 0].eq(0).all()

    torch.manual_seed(0)
    fairseq_model = theirs.build_model(theirs_args).eval()
    model = ours.build_model(ours_args).eval()
    model.load_state_dict(fairseq_model.state_dict())
    with torch.no_grad():
        loss, size, log = ours.build_criterion(ours_args)(model, sample)
        fairseq_loss, fairseq_size, fairseq_log = theirs.build_criterion(theirs_args)(fairseq_model, reference)
        for choice in range(1, 5):
            net_input = sample[f"net_input{choice}"]
            logits = model(**net_input, classification_head_name="sentence_classification_head")[0]
            expected = fairseq_model(**net_input, classification_head_name="sentence_classification_head")[0]
            torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss, fairseq_loss, rtol=1e-5, atol=1e-5)
    assert size == fairseq_size == 16 and int(log["ncorrect"]) == int(fairseq_log["ncorrect"])


def fairseq_commonsense_qa_task():
    """fairseq's ``commonsense_qa`` example task (``examples/roberta/commonsense_qa``), imported
    from the installed fairseq as ``--user-dir`` would."""
    spec = require_installed("fairseq", "the reference is fairseq's example task")
    path = Path(next(iter(spec.submodule_search_locations or []))) / "examples/roberta/commonsense_qa"
    module_spec = importlib.util.spec_from_file_location(
        "fairseq_examples_commonsense_qa_task", path / "commonsense_qa_task.py"
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.CommonsenseQATask


def test_commonsense_qa_batches_equal_fairseqs_example_task(tmp_path, bpe_files):
    from fairseq import tasks

    (tmp_path / "dict.txt").write_bytes(bpe_files.dict_txt.read_bytes())
    write_jsonl(tmp_path / "valid.jsonl", cqa_rows(30, 3))
    fairseq_commonsense_qa_task()
    bpe = f"--bpe gpt2 --gpt2-encoder-json {bpe_files.encoder_json} --gpt2-vocab-bpe {bpe_files.vocab_bpe}"
    options = f"--init-token 0 {bpe} --num-classes 5"
    ours_args = task_args(
        tmp_path, "roberta_ext_commonsense_qa", "roberta_ext_multiple_choice", "roberta_ext_base", options
    )
    theirs_args = task_args(tmp_path, "commonsense_qa", "sentence_ranking", "roberta_base", options)
    ours, theirs = tasks.setup_task(ours_args), tasks.setup_task(theirs_args)
    for task in (ours, theirs):
        task.load_dataset("valid")
    mine, fairseqs = ours.dataset("valid"), theirs.dataset("valid")
    assert len(mine) == len(fairseqs) == 30
    assert mine.ordered_indices().tolist() == fairseqs.ordered_indices().tolist()
    batch = list(range(30))
    sample, reference = mine.collater([mine[i] for i in batch]), fairseqs.collater([fairseqs[i] for i in batch])
    assert torch.equal(sample["target"], reference["target"])
    for choice in range(1, 6):
        assert torch.equal(sample[f"net_input{choice}"]["src_tokens"], reference[f"net_input{choice}"]["src_tokens"])
    assert ours.mask_idx == theirs.mask
    # <s> Q: ... </s> A: ... </s>: the question first, one </s> between.
    row = sample["net_input1"]["src_tokens"][0]
    assert row[0] == 0 and int(row.eq(2).sum()) == 2


# ------------------------------------------------------------------------------ training


def test_training_learns_the_task_and_logs_accuracy(mc_data):
    log = run(
        "fairseq-train",
        str(mc_data["data"]),
        *shlex.split(
            f"--user-dir {USER_DIR} --task roberta_ext_multiple_choice --criterion roberta_ext_multiple_choice "
            f"--arch roberta_ext_base {TINY} --max-positions 64 --num-classes 4 --init-token 0 --separator-token 2 "
            "--max-option-length 32 --shorten-method truncate --dropout 0 --attention-dropout 0 "
            "--optimizer adam --adam-betas (0.9,0.98) --lr 2e-3 --batch-size 16 --max-update 150 "
            f"--best-checkpoint-metric accuracy --maximize-best-checkpoint-metric {ON_CPU} --log-format json "
            f"--log-interval 25 --no-save --save-dir {mc_data['root'] / 'learn'}"
        ),
    )
    train, valid = log_records(log, "train_inner"), log_records(log, "valid")
    accuracies = [float(record["valid_accuracy"]) for record in valid]
    print("loss", [record["loss"] for record in train], "valid accuracy", accuracies)
    assert float(train[-1]["loss"]) < 1.0  # bits; chance is log2(4) = 2
    assert max(accuracies) >= 75, accuracies  # chance: 25
    assert all(float(record["valid_bsz"]) > 0 for record in valid)


@pytest.fixture(scope="module")
def pretrained(mc_data) -> Path:
    """A small masked-LM checkpoint (a few updates on the contexts), what --restore-file loads."""
    save_dir = mc_data["root"] / "pretrained"
    run(
        "fairseq-train",
        str(mc_data["data"] / "input0"),
        *shlex.split(
            f"--user-dir {USER_DIR} --task roberta_ext_mlm --criterion roberta_ext_mlm --arch roberta_ext_base "
            f"{TINY} --tokens-per-sample 64 --optimizer adam --lr 1e-3 --batch-size 16 --max-update 3 {ON_CPU} "
            f"--save-dir {save_dir}"
        ),
    )
    return save_dir / "checkpoint_last.pt"


# README.race.md's fine-tuning command, fairseq's names swapped for ours (variables expanded).
RACE_TRAIN = (
    "--ddp-backend=legacy_ddp --restore-file {restore} --reset-optimizer --reset-dataloader --reset-meters "
    "--best-checkpoint-metric accuracy --maximize-best-checkpoint-metric --task roberta_ext_multiple_choice "
    "--num-classes 4 --init-token 0 --separator-token 2 --max-option-length 128 --max-positions 512 "
    '--shorten-method "truncate" --arch roberta_ext_large --dropout 0.1 --attention-dropout 0.1 --weight-decay 0.01 '
    "--criterion roberta_ext_multiple_choice --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-06 "
    "--clip-norm 0.0 --lr-scheduler fixed --lr 1e-05 --fp16-init-scale 4 --threshold-loss-scale 1 "
    "--fp16-scale-window 128 --batch-size 1 --required-batch-size-multiple 1 --update-freq 8 --max-epoch 5"
)
# What makes it small: a 2 x 64 model restored from the small pretrained checkpoint, 10 updates on
# CPU (fairseq's --fp16 needs CUDA). fairseq's argparse keeps the last of a repeated option.
RACE_SMALL = f"--arch roberta_ext_base {TINY} --max-positions 64 --max-option-length 16 --max-update 10 {ON_CPU}"


def test_race_readme_commands_swapped_run(mc_data, pretrained):
    save_dir = mc_data["root"] / "race"
    command = RACE_TRAIN.format(restore=pretrained) + f" --user-dir {USER_DIR} {RACE_SMALL} --save-dir {save_dir}"
    log = run("fairseq-train", str(mc_data["data"]), *shlex.split(command + " --log-format json"))
    valid = log_records(log, "valid")
    assert len(valid) == 1 and "valid_accuracy" in valid[0]
    assert "loading head 'sentence_classification_head'" not in log  # the MLM checkpoint has none: fresh

    # README.race.md's evaluation, swapped: every example is scored.
    predictions = mc_data["root"] / "preds.tsv"
    log = run(
        "fairseq-validate",
        str(mc_data["data"]),
        *shlex.split(
            f"--valid-subset valid --path {save_dir / 'checkpoint_best.pt'} --batch-size 1 "
            "--task roberta_ext_multiple_choice --criterion roberta_ext_multiple_choice "
            f"--save-predictions {predictions} --user-dir {USER_DIR} --cpu"
        ),
    )
    rows = [line.split("\t") for line in predictions.read_text().splitlines()]
    assert sorted(int(row[0]) for row in rows) == list(range(100))
    labels = [row["label"] for row in mc_data["rows"]["valid"]]
    assert all(int(label) == labels[int(index)] for index, _, label in rows)
    correct = sum(prediction == label for _, prediction, label in rows)
    assert f"accuracy {correct:g} " in log or f"accuracy {correct:.1f} " in log, log[-500:]


def test_commonsense_qa_readme_command_swapped_runs(tmp_path, bpe_files, pretrained):
    data = tmp_path / "CommonsenseQA"
    data.mkdir()
    (data / "dict.txt").write_bytes(bpe_files.dict_txt.read_bytes())
    write_jsonl(data / "train.jsonl", cqa_rows(64, 1))
    write_jsonl(data / "valid.jsonl", cqa_rows(20, 2))
    write_jsonl(data / "test.jsonl", cqa_rows(10, 3, answers=False))
    command = (
        f"--ddp-backend=legacy_ddp {data} --user-dir {USER_DIR} --restore-file {pretrained} "
        "--reset-optimizer --reset-dataloader --reset-meters --no-epoch-checkpoints --no-last-checkpoints "
        "--no-save-optimizer-state --best-checkpoint-metric accuracy --maximize-best-checkpoint-metric "
        "--task roberta_ext_commonsense_qa --init-token 0 --bpe gpt2 --arch roberta_ext_large --max-positions 512 "
        "--dropout 0.1 --attention-dropout 0.1 --weight-decay 0.01 --criterion roberta_ext_multiple_choice "
        "--num-classes 5 --optimizer adam --adam-betas '(0.9, 0.98)' --adam-eps 1e-06 --clip-norm 0.0 "
        "--lr-scheduler polynomial_decay --lr 1e-05 --warmup-updates 150 --total-num-update 3000 --batch-size 16 "
        "--max-update 3000 --log-format simple --log-interval 25 --seed 1"
    )
    small = (
        f"--gpt2-encoder-json {bpe_files.encoder_json} --gpt2-vocab-bpe {bpe_files.vocab_bpe} --arch roberta_ext_base "
        f"{TINY} --max-positions 64 --max-update 8 --warmup-updates 2 --total-num-update 8 {ON_CPU} "
        f"--save-dir {tmp_path / 'checkpoints'}"
    )
    log = run("fairseq-train", *shlex.split(f"{command} {small}"))
    assert "valid on 'valid' subset" in log and "| accuracy " in log
    assert (tmp_path / "checkpoints" / "checkpoint_best.pt").is_file()


# -------------------------------------------------------------------------------- errors


def test_read_labels_names_file_and_line(tmp_path):
    path = tmp_path / "valid.label"
    path.write_text("0\n3\n4\n")
    with pytest.raises(MultipleChoiceDataError, match=r"valid.label:3: label 4 is out of range for --num-classes 4"):
        read_labels(str(path), 4)
    path.write_text("0\nB\n")
    with pytest.raises(MultipleChoiceDataError, match=r"valid.label:2: expected the index"):
        read_labels(str(path), 4)


def test_the_task_refuses_bad_data_and_options(mc_data, tmp_path):
    import shutil

    from fairseq import tasks

    data = tmp_path / "mc-bin"
    shutil.copytree(mc_data["data"], data)
    with pytest.raises(ValueError, match="needs --criterion roberta_ext_multiple_choice"):
        tasks.setup_task(
            task_args(data, "roberta_ext_multiple_choice", "cross_entropy", "roberta_ext_base", "--init-token 0")
        )
    args = task_args(data, "roberta_ext_multiple_choice", "roberta_ext_multiple_choice", "roberta_ext_base")
    task = tasks.setup_task(args)
    (data / "label" / "valid.label").write_text("1\n" * 99 + "7\n")
    with pytest.raises(MultipleChoiceDataError, match=r"label/valid.label:100: label 7 is out of range"):
        task.load_dataset("valid")
    (data / "label" / "valid.label").write_text("1\n" * 99)
    with pytest.raises(
        MultipleChoiceDataError, match=r"the columns of valid differ in length \(input0 100, .*label 99"
    ):
        task.load_dataset("valid")
    (data / "input3" / "valid.bin").unlink()
    (data / "input3" / "valid.idx").unlink()
    with pytest.raises(FileNotFoundError, match=r"input3/valid.bin/.idx"):
        task.load_dataset("valid")
    args.num_classes = 3  # the data has four choices
    with pytest.raises(MultipleChoiceDataError, match=r"input4 exists: the data has more than --num-classes 3"):
        task.load_dataset("train")


def test_the_commonsense_qa_task_names_bad_lines(tmp_path, bpe_files):
    from fairseq import tasks

    (tmp_path / "dict.txt").write_bytes(bpe_files.dict_txt.read_bytes())
    bpe = f"--bpe gpt2 --gpt2-encoder-json {bpe_files.encoder_json} --gpt2-vocab-bpe {bpe_files.vocab_bpe}"
    args = task_args(
        tmp_path,
        "roberta_ext_commonsense_qa",
        "roberta_ext_multiple_choice",
        "roberta_ext_base",
        f"{bpe} --num-classes 5",
    )
    task = tasks.setup_task(args)
    good = cqa_rows(3, 1)
    cases = [
        ('{"question": ', "valid.jsonl:4: not a CommonsenseQA example"),
        (json.dumps({**good[0], "answerKey": "F"}), "valid.jsonl:4: answerKey 'F' is not one of the letters of 5"),
        (json.dumps(cqa_rows(1, 2, answers=False)[0]), "valid.jsonl:4: some examples of the file have an answerKey"),
        (json.dumps({**good[0], "question": {"stem": "?", "choices": []}}), "valid.jsonl:4: 0 choices, but --num"),
    ]
    for line, message in cases:
        write_jsonl(tmp_path / "valid.jsonl", good)
        with open(tmp_path / "valid.jsonl", "a") as out:
            out.write(line + "\n")
        with pytest.raises(MultipleChoiceDataError, match=message):
            task.load_dataset("valid")


# ------------------------------------------------------ unit level: roberta_ext_multiple_choice

LOGGER = "roberta_ext.fairseq_plugin.multiple_choice"
TASK, CQA_TASK, CRITERION = "roberta_ext_multiple_choice", "roberta_ext_commonsense_qa", "roberta_ext_multiple_choice"
HEAD = "sentence_classification_head"
BOS, PAD, EOS = 0, 1, 2
# Five examples of three choices (token ids of the 60-symbol dictionary of test_models, </s> excluded):
# the contexts, then each choice column; the choices' lengths differ so that each column has its width.
CONTEXTS = [[4, 5, 6, 7], [8, 9], [10, 11, 12], [13, 14, 15, 16, 17], [18, 19, 20]]
CHOICES = [
    [[21], [22, 23], [24], [25, 26, 27], [28]],
    [[29, 30], [31], [32, 33, 34], [35], [36, 37]],
    [[38], [39], [40, 41], [42, 43, 44, 45, 46, 47], [48]],
]
LABELS = [2, 0, 1, 2, 1]


def write_column(folder: Path, split: str, rows: list[list[int]]) -> None:
    """``split``.bin/.idx of ``folder`` as fairseq-preprocess writes them: each row ends in ``</s>``."""
    folder.mkdir(parents=True, exist_ok=True)
    builder = MMapIndexedDatasetBuilder(str(folder / f"{split}.bin"), dtype=np.int32)
    for row in rows:
        builder.add_item(torch.tensor([*row, EOS], dtype=torch.int32))
    builder.finalize(str(folder / f"{split}.idx"))


def mc_dir(folder: Path, split: str = "valid", columns=None, labels: list[int] | None = LABELS) -> Path:
    """The layout of roberta-ext prepare-multiple-choice: input0/ (the contexts and dict.txt),
    input1/ ... input3/ (the choices), label/ (unless ``labels`` is None)."""
    for column, rows in enumerate(columns or [CONTEXTS, *CHOICES]):
        write_column(folder / f"input{column}", split, rows)
    dictionary().save(str(folder / "input0" / "dict.txt"))
    if labels is not None:
        (folder / "label").mkdir(exist_ok=True)
        (folder / "label" / f"{split}.label").write_text("".join(f"{label}\n" for label in labels))
    return folder


def mc_task(data: Path, extra: str = "", criterion: str = CRITERION):
    """``(task, args)``: the task set up as fairseq-train sets it up, with three choices."""
    from fairseq import tasks

    args = task_args(data, TASK, criterion, "roberta_ext_base", f"--num-classes 3 {extra}")
    return tasks.setup_task(args), args


def whole_batch(task, split: str = "valid") -> dict:
    dataset = task.dataset(split)
    return dataset.collater([dataset[i] for i in range(len(dataset))])


def test_setup_reads_input0s_dictionary_and_adds_the_mask(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task, _ = mc_task(mc_dir(tmp_path))
    assert isinstance(task, RobertaExtMultipleChoiceTask)
    assert len(task.source_dictionary) == 61 and task.source_dictionary is task.target_dictionary
    assert task.mask_idx == 60 and task.source_dictionary[task.mask_idx] == "<mask>"
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == ["[input] dictionary: 61 types"]
    # fairseq's own criterion reads these batches too.
    assert isinstance(mc_task(tmp_path, criterion="sentence_ranking")[0], RobertaExtMultipleChoiceTask)


@pytest.mark.parametrize("task_class", [RobertaExtMultipleChoiceTask, RobertaExtCommonsenseQATask])
@pytest.mark.parametrize("criterion", ["cross_entropy", None])
def test_both_tasks_refuse_other_criteria_in_full(task_class, criterion):
    args = argparse.Namespace(data="unused", num_classes=3)
    if criterion is not None:
        args.criterion = criterion
    name = TASK if task_class is RobertaExtMultipleChoiceTask else CQA_TASK
    with pytest.raises(ValueError) as error:
        task_class.setup_task(args)
    assert str(error.value) == (
        f"--task {name} needs --criterion roberta_ext_multiple_choice (or fairseq's sentence_ranking), not {criterion}"
    )


@pytest.mark.parametrize("task_class", [RobertaExtMultipleChoiceTask, RobertaExtCommonsenseQATask])
@pytest.mark.parametrize("num_classes", ["missing", None, 0, -1, "3", 2.0])
def test_both_tasks_need_a_number_of_choices(tmp_path, task_class, num_classes):
    args = argparse.Namespace(data=str(tmp_path), criterion=CRITERION)
    if num_classes != "missing":
        args.num_classes = num_classes
    with pytest.raises(ValueError) as error:
        task_class.setup_task(args)
    shown = None if num_classes == "missing" else num_classes
    assert str(error.value) == f"--num-classes N (the number of choices per example) is required, got {shown}"


def test_one_choice_is_enough_and_the_number_is_checked_again_when_loading(tmp_path):
    data = mc_dir(tmp_path, columns=[CONTEXTS, CHOICES[0]], labels=[0] * 5)
    task, args = mc_task(data, "--num-classes 1")
    task.load_dataset("valid")
    assert len(task.dataset("valid")) == 5
    args.num_classes = 0
    with pytest.raises(ValueError, match=r"^--num-classes N \(the number of choices per example\) is required, got 0$"):
        task.load_dataset("valid")


def test_a_folder_without_the_dictionary_says_what_it_needs(tmp_path):
    from fairseq import tasks

    with pytest.raises(FileNotFoundError) as error:
        tasks.setup_task(task_args(tmp_path, TASK, CRITERION, "roberta_ext_base", "--num-classes 3"))
    assert str(error.value) == (
        f"--task {TASK}: {tmp_path / 'input0' / 'dict.txt'} does not exist; its data folder needs input0/ ... "
        "input3/ and label/, as roberta-ext prepare-multiple-choice writes them"
    )
    args = argparse.Namespace(data=str(tmp_path), criterion=CRITERION, num_classes=5)
    with pytest.raises(FileNotFoundError) as error:
        RobertaExtCommonsenseQATask.setup_task(args)
    assert str(error.value) == (
        f"--task {CQA_TASK}: {tmp_path / 'dict.txt'} does not exist; its data folder needs dict.txt and "
        "{train,valid,test}.jsonl"
    )


def test_each_candidate_is_the_choice_then_the_context(tmp_path):
    """``<s> choice </s> </s> context </s>`` with ``--init-token 0 --separator-token 2``, the labels in
    label/, every example in the batches."""
    task, _ = mc_task(mc_dir(tmp_path), "--init-token 0 --separator-token 2")
    dataset = task.load_dataset("valid")
    assert dataset is task.dataset("valid") and isinstance(dataset, EveryExampleDataset) and len(dataset) == 5
    sample = whole_batch(task)
    assert sample["id"].tolist() == list(range(5)) and sample["target"].tolist() == LABELS
    assert sample["nsentences"] == 5
    for column, choices in enumerate(CHOICES, start=1):
        rows = [[BOS, *choice, EOS, EOS, *context, EOS] for choice, context in zip(choices, CONTEXTS)]
        width = max(map(len, rows))
        expected = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
        assert torch.equal(sample[f"net_input{column}"]["src_tokens"], expected), column
        assert sample[f"net_input{column}"]["src_lengths"].tolist() == [len(row) for row in rows]
    first = [len(choice) + len(context) + 4 for choice, context in zip(CHOICES[0], CONTEXTS)]
    assert sample["ntokens"] == sum(first)
    batches = dataset.batch_by_size(np.arange(5), max_sentences=1, required_batch_size_multiple=8)
    assert sorted(int(i) for batch in batches for i in batch) == list(range(5))  # fairseq alone leaves one out


def test_the_batches_are_fairseqs_sentence_rankings_on_the_same_data(tmp_path):
    """Choices cut by ``--max-option-length``, candidates by ``--max-positions`` with ``--shorten-method
    truncate``: fairseq's ``sentence_ranking`` on the same folder gives the same order and batches."""
    from fairseq import tasks

    data = mc_dir(tmp_path)
    options = "--num-classes 3 --init-token 0 --separator-token 2 --max-option-length 3 --shorten-method truncate"
    options += " --max-positions 9"
    ours, _ = mc_task(data, options)
    theirs = tasks.setup_task(task_args(data, "sentence_ranking", "sentence_ranking", "roberta_base", options))
    for task in (ours, theirs):
        task.load_dataset("valid")
    assert ours.dataset("valid").ordered_indices().tolist() == theirs.dataset("valid").ordered_indices().tolist()
    sample, reference = whole_batch(ours), whole_batch(theirs)
    assert sorted(sample) == sorted(reference)
    for key in ("id", "target"):
        assert torch.equal(sample[key], reference[key])
    assert sample["ntokens"] == reference["ntokens"] and sample["nsentences"] == reference["nsentences"] == 5
    for column in range(1, 4):
        for key in ("src_tokens", "src_lengths"):
            assert torch.equal(sample[f"net_input{column}"][key], reference[f"net_input{column}"][key])
    # <s> and the choice cut to 3 (its </s> with it), the separator, the context cut to 9 in all
    assert sample["net_input3"]["src_tokens"][3].tolist() == [BOS, 42, 43, EOS, 13, 14, 15, 16, 17]


def test_a_split_without_labels_has_no_target(tmp_path):
    task, _ = mc_task(mc_dir(tmp_path, "test", labels=None))
    task.load_dataset("test")
    sample = whole_batch(task, "test")
    assert "target" not in sample and sample["id"].tolist() == list(range(5))


def test_columns_of_other_lengths_are_named_with_their_lengths(tmp_path):
    short = [CONTEXTS, CHOICES[0], CHOICES[1][:4], CHOICES[2]]
    task, _ = mc_task(mc_dir(tmp_path, columns=short))
    with pytest.raises(MultipleChoiceDataError) as error:
        task.load_dataset("valid")
    assert str(error.value) == (
        f"{tmp_path}: the columns of valid differ in length (input0 5, input1 5, input2 4, input3 5, label 5)"
    )
    mc_dir(tmp_path, labels=LABELS[:4])
    with pytest.raises(MultipleChoiceDataError) as error:
        task.load_dataset("valid")
    assert str(error.value) == (
        f"{tmp_path}: the columns of valid differ in length (input0 5, input1 5, input2 5, input3 5, label 4)"
    )
    (tmp_path / "label" / "valid.label").write_text("0\n1\n3\n")
    with pytest.raises(MultipleChoiceDataError) as error:
        task.load_dataset("valid")
    assert str(error.value) == (
        f"{tmp_path / 'label' / 'valid.label'}:3: label 3 is out of range for --num-classes 3 (0..2)"
    )


def test_a_missing_or_an_extra_column_is_named_in_full(tmp_path):
    task, _ = mc_task(mc_dir(tmp_path))
    write_column(tmp_path / "input4", "valid", CHOICES[0])
    with pytest.raises(MultipleChoiceDataError) as error:
        task.load_dataset("valid")
    assert (
        str(error.value) == f"{tmp_path / 'input4'} exists: the data has more than --num-classes 3 choices per example"
    )
    (tmp_path / "input4" / "valid.bin").rename(tmp_path / "input4.bin")
    (tmp_path / "input4").rename(tmp_path / "spare")
    for suffix in ("bin", "idx"):
        (tmp_path / "input2" / f"valid.{suffix}").unlink()
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("valid")
    assert str(error.value) == (
        f"dataset not found: {tmp_path / 'input2' / 'valid'}.bin/.idx (input0/ is the context, input1/ ... "
        "input3/ the 3 choices of --num-classes)"
    )


def test_raw_text_data_are_read_with_the_dictionary(tmp_path):
    """``--dataset-impl raw``: each column a text file of words, as the binarized columns hold them."""
    binarized, _ = mc_task(mc_dir(tmp_path / "bin"), "--init-token 0 --separator-token 2")
    binarized.load_dataset("valid")
    raw = tmp_path / "raw"
    symbols = dictionary()
    for column, rows in enumerate([CONTEXTS, *CHOICES]):
        (raw / f"input{column}").mkdir(parents=True)
        (raw / f"input{column}" / "valid").write_text("".join(symbols.string(torch.tensor(r)) + "\n" for r in rows))
    symbols.save(str(raw / "input0" / "dict.txt"))
    (raw / "label").mkdir()
    (raw / "label" / "valid.label").write_text("".join(f"{label}\n" for label in LABELS))
    task, _ = mc_task(raw, "--init-token 0 --separator-token 2 --dataset-impl raw")
    task.load_dataset("valid")
    sample, expected = whole_batch(task), whole_batch(binarized)
    for column in range(1, 4):
        assert torch.equal(sample[f"net_input{column}"]["src_tokens"], expected[f"net_input{column}"]["src_tokens"])
    assert torch.equal(sample["target"], expected["target"])


def test_a_missing_column_is_named_even_where_the_options_lack_dataset_impl(tmp_path):
    """Options built by hand (not by fairseq's parser) may lack ``dataset_impl``: the checks infer the
    format, and the missing column is named before fairseq's own loading reads the option."""
    task, args = mc_task(mc_dir(tmp_path))
    del args.dataset_impl
    for suffix in ("bin", "idx"):
        (tmp_path / "input3" / f"valid.{suffix}").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"^dataset not found: .*input3/valid\.bin/\.idx \(input0/ is the context"
    ):
        task.load_dataset("valid")


def test_the_checks_read_the_format_of_dataset_impl_as_fairseq_does(tmp_path):
    """``--dataset-impl mmap`` reads the binarized columns even where a raw text file of the split lies
    beside them (which fairseq would infer first): the checks see what fairseq loads."""
    data = mc_dir(tmp_path)
    symbols = dictionary()
    (data / "input2" / "valid").write_text("".join(symbols.string(torch.tensor(r)) + "\n" for r in CHOICES[1][:4]))
    task, _ = mc_task(data, "--dataset-impl mmap")
    task.load_dataset("valid")
    assert len(task.dataset("valid")) == 5
    assert whole_batch(task)["net_input2"]["src_lengths"].tolist() == [
        len(c) + 1 + len(x) + 1 for c, x in zip(CHOICES[1], CONTEXTS)
    ]


def test_shards_of_a_split_are_combined_when_asked(tmp_path):
    """valid and valid1 of each column, the labels of both in label/valid.label."""
    for column, rows in enumerate([CONTEXTS, *CHOICES]):
        write_column(tmp_path / f"input{column}", "valid", rows[:3])
        write_column(tmp_path / f"input{column}", "valid1", rows[3:])
    dictionary().save(str(tmp_path / "input0" / "dict.txt"))
    (tmp_path / "label").mkdir()
    (tmp_path / "label" / "valid.label").write_text("".join(f"{label}\n" for label in LABELS))
    task, _ = mc_task(tmp_path, "--init-token 0 --separator-token 2")
    task.load_dataset("valid", combine=True)
    sample = whole_batch(task)
    assert sample["id"].tolist() == list(range(5)) and sample["target"].tolist() == LABELS
    assert sample["net_input3"]["src_tokens"][3, : len(CHOICES[2][3]) + 2].tolist() == [BOS, *CHOICES[2][3], EOS]
    with pytest.raises(MultipleChoiceDataError, match=r"differ in length \(input0 3, .*label 5\)$"):
        task.load_dataset("valid")


@pytest.mark.parametrize(
    ("text", "labels"),
    [("0\n2\n", [0, 2]), (" 1 \n0\n", [1, 0]), ("", [])],
    ids=["plain", "spaces", "empty"],
)
def test_read_labels_reads_one_index_a_line(tmp_path, text, labels):
    path = tmp_path / "valid.label"
    path.write_text(text)
    assert read_labels(str(path), 3) == labels


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0\n-1\n", "label -1 is out of range for --num-classes 3 (0..2)"),
        ("0\n3\n", "label 3 is out of range for --num-classes 3 (0..2)"),
        ("0\nB \n", "expected the index of the right choice, got 'B'"),
        ("0\n\n", "expected the index of the right choice, got ''"),
    ],
    ids=["negative", "too-large", "letter", "empty-line"],
)
def test_read_labels_names_the_file_the_line_and_the_problem(tmp_path, text, problem):
    path = tmp_path / "valid.label"
    path.write_text(text)
    with pytest.raises(MultipleChoiceDataError) as error:
        read_labels(str(path), 3)
    assert str(error.value) == f"{path}:2: {problem}"
    assert isinstance(error.value, ValueError) and error.value.__cause__ is None


# ------------------------------------------------------- unit level: roberta_ext_commonsense_qa


def cqa_symbols() -> Dictionary:
    """The 60 symbols of test_models and the prefixes of the layout: ``Q:`` 60, ``A:`` 61."""
    symbols = dictionary()
    symbols.add_symbol("Q:")
    symbols.add_symbol("A:")
    return symbols


def cqa_line(stem: str, texts: list[str], key: object = None) -> str:
    example: dict = {
        "question": {"stem": stem, "choices": [{"label": "ABCDE"[i], "text": t} for i, t in enumerate(texts)]}
    }
    if key is not None:
        example["answerKey"] = key
    return json.dumps(example)


# Three examples of three choices, words of the dictionary (w0 is 4): no BPE, words are the tokens.
CQA_LINES = [
    cqa_line("w0 w1", ["w2", "w3 w4", "w5"], "C"),
    cqa_line("w6", ["w7 w8 w9", "w10", "w11"], "A"),
    cqa_line("w12 w13 w14", ["w15", "w16", "w17 w18"], "B"),
]
Q, A = 60, 61


def cqa_dir(folder: Path, lines: list[str] = CQA_LINES, split: str = "valid") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cqa_symbols().save(str(folder / "dict.txt"))
    (folder / f"{split}.jsonl").write_text("".join(line + "\n" for line in lines))
    return folder


def cqa_task(data: Path, **options: object) -> RobertaExtCommonsenseQATask:
    args = argparse.Namespace(data=str(data), criterion=CRITERION, num_classes=3, init_token=0, seed=1)
    return RobertaExtCommonsenseQATask.setup_task(argparse.Namespace(**{**vars(args), **options}))


def test_the_commonsense_qa_options_are_fairseqs_example_tasks():
    parser = argparse.ArgumentParser()
    RobertaExtCommonsenseQATask.add_args(parser)
    assert vars(parser.parse_args(["DATA"])) == {"data": "DATA", "init_token": None, "num_classes": 5}
    assert vars(parser.parse_args(["DATA", "--init-token", "0", "--num-classes", "3"])) == {
        "data": "DATA",
        "init_token": 0,
        "num_classes": 3,
    }
    helps = {action.dest: (action.metavar, action.help) for action in parser._actions if action.dest != "help"}
    assert helps == {
        "data": ("DIR", "path to data directory; we load <split>.jsonl"),
        "init_token": (None, "add token at the beginning of each batch item"),
        "num_classes": (None, None),
    }


def test_commonsense_qa_setup_reads_the_dictionary_and_adds_the_mask(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task = cqa_task(cqa_dir(tmp_path))
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == ["dictionary: 62 types"]
    assert task.mask_idx == 62 and len(task.dictionary) == 63 and task.dictionary[62] == "<mask>"
    assert task.source_dictionary is task.dictionary and task.target_dictionary is task.dictionary
    assert task.bpe is None
    assert task.max_positions() is None  # fairseq's task has none
    assert cqa_task(tmp_path, max_positions=40).max_positions() == 40


def test_commonsense_qa_candidates_are_the_question_then_the_choice(tmp_path, caplog):
    data = cqa_dir(tmp_path)
    task = cqa_task(data)
    examples, labels = task.read_examples(str(data / "valid.jsonl"))
    assert labels == [2, 0, 1]
    assert [[t.tolist() for t in example] for example in examples][0] == [
        [BOS, Q, 4, 5, EOS, A, 6, EOS],
        [BOS, Q, 4, 5, EOS, A, 7, 8, EOS],
        [BOS, Q, 4, 5, EOS, A, 9, EOS],
    ]
    assert all(t.dtype == torch.long for example in examples for t in example)
    examples, _ = cqa_task(data, init_token=None).read_examples(str(data / "valid.jsonl"))
    assert examples[0][0].tolist() == [Q, 4, 5, EOS, A, 6, EOS]  # no <s> without --init-token

    with caplog.at_level(logging.INFO, logger=LOGGER):
        dataset = task.load_dataset("valid")
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"loaded valid with 3 examples from {data / 'valid.jsonl'}"
    ]
    assert dataset is task.dataset("valid") and isinstance(dataset, EveryExampleDataset)
    sample = whole_batch(task)
    assert sample["id"].tolist() == [0, 1, 2] and sample["target"].tolist() == [2, 0, 1]
    assert sample["nsentences"] == 3
    questions = [[4, 5], [10], [16, 17, 18]]
    choices = [[[6], [7, 8], [9]], [[11, 12, 13], [14], [15]], [[19], [20], [21, 22]]]
    candidates = [[[BOS, Q, *q, EOS, A, *c, EOS] for c in cs] for q, cs in zip(questions, choices)]
    for column in range(3):
        rows = [example[column] for example in candidates]
        width = max(map(len, rows))
        expected = torch.tensor([row + [PAD] * (width - len(row)) for row in rows])
        assert torch.equal(sample[f"net_input{column + 1}"]["src_tokens"], expected), column
        # (a list, as in fairseq's example task: its ListDataset collates to one)
        assert list(map(int, sample[f"net_input{column + 1}"]["src_lengths"])) == [len(row) for row in rows]
    assert sample["ntokens"] == sum(len(example[0]) for example in candidates)
    # The size of an example is that of its longest candidate; the order is fairseq's shuffle by --seed.
    assert [dataset.size(i) for i in range(3)] == [max(map(len, example)) for example in candidates] == [9, 9, 10]
    for seed in (1, 2, 3):
        with data_utils.numpy_seed(seed):
            shuffle = np.random.permutation(3)
        assert (
            cqa_task(data, seed=seed).load_dataset("valid").ordered_indices().tolist() == np.argsort(shuffle).tolist()
        )
    batches = dataset.batch_by_size(np.arange(3), max_sentences=1, required_batch_size_multiple=8)
    assert sorted(int(i) for batch in batches for i in batch) == [0, 1, 2]


def test_commonsense_qa_words_outside_the_dictionary_are_unknown(tmp_path):
    data = cqa_dir(tmp_path, [cqa_line("w0 zebra", ["w1", "okapi", "w3"], "A")])
    task = cqa_task(data)
    examples, _ = task.read_examples(str(data / "valid.jsonl"))
    unk = task.dictionary.unk()
    assert examples[0][1].tolist() == [BOS, Q, 4, unk, EOS, A, unk, EOS]
    assert len(task.dictionary) == 63 and task.dictionary.index("zebra") == unk  # the dictionary is the model's


def test_commonsense_qa_reads_a_named_file_and_names_a_missing_one(tmp_path):
    data = cqa_dir(tmp_path)
    other = tmp_path / "elsewhere.jsonl"
    other.write_text(CQA_LINES[1] + "\n")
    task = cqa_task(data)
    assert len(task.load_dataset("valid", data_path=str(other))) == 1
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("test")
    assert str(error.value) == f"Cannot find data: {data / 'test.jsonl'}"


def test_commonsense_qa_without_answer_keys_has_no_target(tmp_path):
    lines = [cqa_line("w0", ["w1", "w2", "w3"]), cqa_line("w4", ["w5", "w6", "w7"])]
    task = cqa_task(cqa_dir(tmp_path, lines, "test"))
    assert task.read_examples(str(tmp_path / "test.jsonl"))[1] == []
    task.load_dataset("test")
    assert "target" not in whole_batch(task, "test")


@pytest.mark.parametrize(("key", "label"), [("A", 0), ("C", 2)], ids=["first", "last"])
def test_commonsense_qa_answer_keys_are_the_letters_of_the_choices(tmp_path, key, label):
    task = cqa_task(cqa_dir(tmp_path, [cqa_line("w0", ["w1", "w2", "w3"], key)]))
    assert task.read_examples(str(tmp_path / "valid.jsonl"))[1] == [label]


def json_error(text: str) -> str:
    try:
        json.loads(text)
    except ValueError as error:
        return str(error)
    raise AssertionError(text)


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("{", f"not a CommonsenseQA example ({json_error('{')})"),
        ("", f"not a CommonsenseQA example ({json_error('')})"),
        ('{"question": {"choices": []}}', "not a CommonsenseQA example (missing field 'stem')"),
        ('{"question": 5}', "not a CommonsenseQA example ('int' object is not subscriptable)"),
        (
            '{"question": {"stem": "w0", "choices": [{"label": "A"}]}}',
            "not a CommonsenseQA example (missing field 'text')",
        ),
        (cqa_line("w0", ["w1", "w2"], "A"), "2 choices, but --num-classes is 3"),
        (cqa_line("w0", ["w1", "w2", "w3"], "D"), "answerKey 'D' is not one of the letters of 3 choices"),
        (cqa_line("w0", ["w1", "w2", "w3"], "@"), "answerKey '@' is not one of the letters of 3 choices"),
        (cqa_line("w0", ["w1", "w2", "w3"], "a"), "answerKey 'a' is not one of the letters of 3 choices"),
        (cqa_line("w0", ["w1", "w2", "w3"], "AB"), "answerKey 'AB' is not one of the letters of 3 choices"),
        (cqa_line("w0", ["w1", "w2", "w3"], 1), "answerKey 1 is not one of the letters of 3 choices"),
        (cqa_line("w0", ["w1", "w2", "w3"]), "some examples of the file have an answerKey, others not"),
    ],
    ids=["json", "empty", "no-stem", "not-an-object", "no-text", "choices", "D", "at", "lower", "two", "int", "no-key"],
)
def test_commonsense_qa_names_the_line_and_its_problem_in_full(tmp_path, line, problem):
    data = cqa_dir(tmp_path, [CQA_LINES[0], line])
    with pytest.raises(MultipleChoiceDataError) as error:
        cqa_task(data).load_dataset("valid")
    assert str(error.value) == f"{data / 'valid.jsonl'}:2: {problem}"
    assert error.value.__cause__ is None


def test_commonsense_qa_refuses_a_key_after_lines_without(tmp_path):
    lines = [cqa_line("w0", ["w1", "w2", "w3"]), cqa_line("w0", ["w1", "w2", "w3"], "A")]
    data = cqa_dir(tmp_path, lines)
    with pytest.raises(MultipleChoiceDataError) as error:
        cqa_task(data).load_dataset("valid")
    assert str(error.value) == f"{data / 'valid.jsonl'}:2: some examples of the file have an answerKey, others not"


def test_the_commonsense_qa_model_has_a_one_score_head(tmp_path):
    task = cqa_task(cqa_dir(tmp_path))
    model = task.build_model(model_options("roberta"))
    assert sorted(model.classification_heads) == [HEAD]
    assert model.classification_heads[HEAD].out_proj.out_features == 1


def test_the_commonsense_qa_model_is_built_from_a_checkpoints_options_as_fairseq_builds_it(tmp_path):
    """``from_checkpoint`` reaches fairseq's ``build_model``: a checkpoint's model options that the model no
    longer has are dropped (as fairseq's ``load_model_ensemble_and_task`` asks), and refused otherwise, as
    fairseq refuses them."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError

    task = cqa_task(cqa_dir(tmp_path))
    sizes = {"encoder_layers": 1, "encoder_embed_dim": 16, "encoder_ffn_embed_dim": 32, "encoder_attention_heads": 2}
    stale = {"_name": "roberta_ext", **sizes, "max_positions": 64, "an_option_of_older_versions": 1}
    model = task.build_model(OmegaConf.create(stale), from_checkpoint=True)
    with pytest.raises(ConfigKeyError, match="Key 'an_option_of_older_versions' not in 'RobertaExtConfig'"):
        task.build_model(OmegaConf.create(stale))
    assert model.classification_heads[HEAD].out_proj.out_features == 1


# ------------------------------------------------------------------- unit level: the criterion


def task_model_batch(tmp_path: Path, extra: str = "", labels: list[int] | None = LABELS):
    """The multiple-choice task (``--init-token 0 --separator-token 2``), its model (eval mode: no
    dropout) and a batch of its five examples, whose three columns have three widths."""
    task, args = mc_task(mc_dir(tmp_path, labels=labels), f"--init-token 0 --separator-token 2 {extra}")
    task.load_dataset("valid")
    torch.manual_seed(0)
    model = task.build_model(args).eval()
    sample = whole_batch(task)
    assert len({sample[f"net_input{i}"]["src_tokens"].size(1) for i in (1, 2, 3)}) == 3
    return task, args, model, sample


def fairseqs(task, predictions: Path | None = None) -> SentenceRankingCriterion:
    return SentenceRankingCriterion(task, HEAD, None if predictions is None else str(predictions), 3)


def test_the_loss_and_log_are_fairseqs_sentence_rankings(tmp_path):
    task, args, model, sample = task_model_batch(tmp_path)
    criterion = task.build_criterion(args)
    assert isinstance(criterion, RobertaExtMultipleChoiceCriterion)
    loss, size, log = criterion(model, sample)
    expected, expected_size, expected_log = fairseqs(task)(model, sample)
    torch.testing.assert_close(loss, expected)
    assert loss.requires_grad and loss.dtype == torch.float32
    assert size == expected_size == 5
    assert sorted(log) == sorted(expected_log) == ["loss", "ncorrect", "nsentences", "ntokens", "sample_size"]
    torch.testing.assert_close(log["loss"], expected_log["loss"])
    assert not log["loss"].requires_grad
    assert (log["ntokens"], log["nsentences"], log["sample_size"]) == (sample["ntokens"], 5, 5)
    assert int(log["ncorrect"]) == int(expected_log["ncorrect"])
    # The loss is the summed cross-entropy of the softmax over each example's three scores.
    with torch.no_grad():
        scores = torch.cat([model(**sample[f"net_input{i}"], classification_head_name=HEAD)[0] for i in (1, 2, 3)], 1)
    torch.testing.assert_close(
        loss.detach(), torch.nn.functional.cross_entropy(scores, sample["target"], reduction="sum")
    )
    assert int(log["ncorrect"]) == int(scores.argmax(1).eq(sample["target"]).sum())


def test_one_choice_gives_fairseqs_zero_loss_and_every_example_right(tmp_path):
    task, args = mc_task(mc_dir(tmp_path, columns=[CONTEXTS, CHOICES[0]], labels=[0] * 5), "--num-classes 1")
    task.load_dataset("valid")
    torch.manual_seed(0)
    model = task.build_model(args).eval()
    sample = whole_batch(task)
    loss, size, log = task.build_criterion(args)(model, sample)
    expected, expected_size, expected_log = SentenceRankingCriterion(task, HEAD, None, 1)(model, sample)
    assert float(loss) == float(expected) == 0.0 and size == expected_size == 5
    assert int(log["ncorrect"]) == int(expected_log["ncorrect"]) == 5


def test_the_loss_is_float32_whatever_the_models_precision(tmp_path):
    task, args, model, sample = task_model_batch(tmp_path)
    model = model.double()
    loss, _, _ = task.build_criterion(args)(model, sample)
    expected, _, _ = fairseqs(task)(model, sample)
    assert loss.dtype == expected.dtype == torch.float32
    torch.testing.assert_close(loss, expected)


def test_a_batch_without_targets_has_a_zero_loss_that_backpropagates(tmp_path):
    task, args, model, sample = task_model_batch(tmp_path, labels=None)
    loss, size, log = task.build_criterion(args)(model, sample)
    assert float(loss) == 0.0 and loss.requires_grad and size == 5
    assert sorted(log) == ["loss", "nsentences", "ntokens", "sample_size"]
    assert float(log["loss"]) == 0.0 and (log["nsentences"], log["sample_size"]) == (5, 5)


@pytest.mark.parametrize("labels", [LABELS, None], ids=["labelled", "unlabelled"])
def test_the_predictions_file_is_fairseqs_and_on_disk_after_each_batch(tmp_path, labels):
    task, args, model, sample = task_model_batch(tmp_path, f"--save-predictions {tmp_path / 'ours.tsv'}", labels)
    ours = task.build_criterion(args)
    theirs = fairseqs(task, tmp_path / "fairseqs.tsv")
    with torch.no_grad():
        ours(model, sample)
        theirs(model, sample)
    theirs.prediction_h.close()  # fairseq's is on disk once closed; ours already
    written = (tmp_path / "ours.tsv").read_text()
    assert written == (tmp_path / "fairseqs.tsv").read_text()
    assert len(written.splitlines()) == 5 and all(
        len(row.split("\t")) == (3 if labels else 2) for row in written.splitlines()
    )
    assert [int(row.split("\t")[0]) for row in written.splitlines()] == list(range(5))


def test_a_model_without_the_ranking_head_is_refused_with_its_heads(tmp_path):
    task, args, model, sample = task_model_batch(tmp_path)
    args.ranking_head_name = "other"
    with pytest.raises(KeyError) as error:
        task.build_criterion(args)(model, sample)
    assert error.value.args[0] == (
        f"the model has no classification head 'other' (heads: ['{HEAD}']); check --ranking-head-name"
    )
    with pytest.raises(KeyError) as error:
        task.build_criterion(args)(object(), sample)
    assert error.value.args[0] == "the model has no classification head 'other' (heads: []); check --ranking-head-name"


def reduced(logs: list[dict]) -> dict:
    with metrics.aggregate(new_root=True) as agg:
        RobertaExtMultipleChoiceCriterion.reduce_metrics(logs)
    return agg.get_smoothed_values()


def test_the_logged_metrics_follow_sentence_rankings_formulas():
    logs = [
        {"loss": torch.tensor(3.5), "ntokens": 40, "nsentences": 4, "sample_size": 4, "ncorrect": torch.tensor(3)},
        {"loss": torch.tensor(1.25), "ntokens": 12, "nsentences": 2, "sample_size": 2, "ncorrect": torch.tensor(0)},
    ]
    stats = reduced(logs)
    bits = math.log(2)
    assert stats["loss"] == round(4.75 / 6 / bits, 3)  # bits per example
    assert stats["nll_loss"] == round(4.75 / 52 / bits, 3)  # per token
    assert stats["accuracy"] == round(100 * 3 / 6, 1)
    assert "accuracy" not in reduced([{k: v for k, v in log.items() if k != "ncorrect"} for log in logs])
    assert RobertaExtMultipleChoiceCriterion.logging_outputs_can_be_summed() is True
