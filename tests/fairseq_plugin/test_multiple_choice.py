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
"""

from __future__ import annotations

import importlib.util
import json
import random
import shlex
from pathlib import Path

import pytest
import torch

from tests.peers import require, require_installed

require("fairseq", "the tests run fairseq-train and compare with fairseq's tasks")

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the tasks)
from roberta_ext.cli.corpus import prepare_multiple_choice_main
from roberta_ext.fairseq_plugin.multiple_choice import MultipleChoiceDataError, read_labels
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
