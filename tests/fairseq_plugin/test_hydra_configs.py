"""The hydra configs of ``roberta_ext/config/``: fairseq's own ``examples/roberta/config`` with the
plugin's names, the model options of the families' presets, and ``fairseq-hydra-train`` runs that
start from another folder with relative paths, take overrides without ``++``, resume, and
fine-tune with a GLUE config from the pretrained checkpoint."""

from __future__ import annotations

import dataclasses
import random
import re
from pathlib import Path

import pytest

from tests.peers import require

fairseq = require("fairseq", "the configs are fairseq-hydra-train's")
omegaconf = require("omegaconf", "fairseq's configs are omegaconf YAML")

from roberta_ext.families import get_family
from roberta_ext.modeling import EncoderConfig
from roberta_ext.modeling.config import FAIRSEQ_NAMES
from tests.fairseq_plugin.tools import USER_DIR, log_records, preprocess, run

OURS = Path(USER_DIR) / "config"
FAIRSEQ = Path(fairseq.__file__).parent / "examples" / "roberta" / "config"
# file -> (family, size, model, task and criterion, extra task options, extra model options)
PRETRAINING = {
    "base": ("roberta", "base", "roberta_ext", "roberta_ext_mlm", {}, {}),
    "large": ("roberta", "large", "roberta_ext", "roberta_ext_mlm", {}, {}),
    "bert_base": ("bert", "base", "roberta_ext", "roberta_ext_sentence_pair_mlm", {"sentence_objective": "nsp"}, {}),
    "albert_base": (
        "albert",
        "base",
        "roberta_ext",
        "roberta_ext_sentence_pair_mlm",
        {"sentence_objective": "sop"},
        {},
    ),
    "electra_base": ("electra", "base", "electra_ext", "roberta_ext_electra", {}, {"generator_fraction": 1 / 3}),
    "spanbert_base": ("spanbert", "base", "spanbert_ext", "roberta_ext_spanbert", {}, {}),
}
GLUE = ["cola", "mnli", "mrpc", "qnli", "qqp", "rte", "sst_2", "sts_b"]


def load(path: Path) -> dict:
    return omegaconf.OmegaConf.to_container(omegaconf.OmegaConf.load(path))


@pytest.mark.parametrize("name", sorted(PRETRAINING))
def test_pretraining_config_is_fairseqs_with_the_presets_model(name):
    family, size, model_name, task, extra_task, extra_model = PRETRAINING[name]
    ours, theirs = load(OURS / "pretraining" / f"{name}.yaml"), load(FAIRSEQ / "pretraining" / "base.yaml")
    assert ours.pop("hydra") == {"job": {"chdir": False}}
    preset = get_family(family).preset(size)
    options = {
        FAIRSEQ_NAMES[f.name]: getattr(preset, f.name)
        for f in dataclasses.fields(EncoderConfig)
        if f.metadata["plugin"]
    }
    assert ours.pop("model") == {"_name": model_name, **options, **extra_model}
    theirs.pop("model")
    theirs["task"].update(_name=task, **extra_task)
    if task == "roberta_ext_sentence_pair_mlm":  # it builds its own sentence pairs: no sample_break_mode
        del theirs["task"]["sample_break_mode"]
    theirs["criterion"] = task
    assert ours == theirs


@pytest.mark.parametrize("name", GLUE)
def test_glue_config_is_fairseqs_with_our_names(name):
    ours, theirs = load(OURS / "finetuning" / f"{name}.yaml"), load(FAIRSEQ / "finetuning" / f"{name}.yaml")
    assert ours.pop("hydra") == {"job": {"chdir": False}}
    assert theirs["task"]["_name"] == theirs["criterion"]["_name"] == "sentence_prediction"
    assert theirs["model"]["_name"] == "roberta"
    theirs["task"]["_name"] = theirs["criterion"]["_name"] = "roberta_ext_classification"
    theirs["model"]["_name"] = "roberta_ext_base"
    assert ours == theirs


WORDS = [f"w{n}" for n in range(60)]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """A user's folder: ``data-bin`` (words as tokens, fairseq-preprocess'd) and ``cls-bin``
    (does the sentence hold w0?), every sentence short enough for 32 positions."""
    root = tmp_path_factory.mktemp("hydra")
    rng = random.Random(0)
    sentences = [" ".join(rng.choices(WORDS, k=rng.randint(4, 20))) for _ in range(1200)]
    write_lines(root / "train.txt", sentences[:1000])
    write_lines(root / "valid.txt", sentences[1000:])
    dictionary = preprocess(root / "data-bin", root / "train.txt", root / "valid.txt") / "dict.txt"
    for split, rows in (("train", sentences[:1000]), ("valid", sentences[1000:])):
        write_lines(root / f"{split}.label", ["yes" if "w0" in s.split() else "no" for s in rows])
    preprocess(root / "cls-bin" / "input0", root / "train.txt", root / "valid.txt", srcdict=dictionary)
    preprocess(root / "cls-bin" / "label", root / "train.label", root / "valid.label")
    return root


SMALL = [
    "model.encoder_layers=2",
    "model.encoder_embed_dim=32",
    "model.encoder_ffn_embed_dim=64",
    "model.encoder_attention_heads=4",
    "model.max_positions=32",
]
ON_CPU = ["common.fp16=false", "common.cpu=true", "common.log_interval=1", "dataset.num_workers=0"]


def pretrain(folder: Path, max_update: int) -> str:
    return run(
        "fairseq-hydra-train",
        "--config-dir",
        str(OURS / "pretraining"),
        "--config-name",
        "base",
        "task.data=data-bin",
        f"common.user_dir={USER_DIR}",
        "checkpoint.save_dir=checkpoints",
        "task.tokens_per_sample=32",
        "dataset.batch_size=8",
        "optimization.update_freq=[2]",
        f"optimization.max_update={max_update}",
        "lr_scheduler.warmup_updates=2",
        *SMALL,
        *ON_CPU,
        cwd=folder,
    )


@pytest.fixture(scope="module")
def pretrained(folder: Path) -> str:
    return pretrain(folder, 4)


def test_pretraining_runs_from_the_users_folder_with_overrides(folder: Path, pretrained: str):
    records = log_records(pretrained)
    assert [int(r["num_updates"]) for r in records] == [1, 2, 3, 4]
    assert {int(r["bsz"]) for r in records} == {16}  # batch_size 8 x update_freq 2
    # Relative paths meant the user's folder: the data was found and the checkpoints are here.
    assert (folder / "checkpoints" / "checkpoint_last.pt").is_file()
    assert "'encoder_layers': 2" in pretrained and "'encoder_embed_dim': 32" in pretrained


def test_pretraining_resumes(folder: Path, pretrained: str):
    log = pretrain(folder, 6)
    assert "Loaded checkpoint checkpoints/checkpoint_last.pt" in log and "@ 4 updates" in log
    assert [int(r["num_updates"]) for r in log_records(log)] == [5, 6]


def test_glue_fine_tuning_from_the_pretrained_checkpoint(folder: Path, pretrained: str):
    log = run(
        "fairseq-hydra-train",
        "--config-dir",
        str(OURS / "finetuning"),
        "--config-name",
        "rte",
        "task.data=cls-bin",
        "checkpoint.restore_file=checkpoints/checkpoint_last.pt",
        "checkpoint.save_dir=checkpoints-rte",
        f"common.user_dir={USER_DIR}",
        "task.max_positions=32",
        "optimization.max_update=6",
        "optimization.max_epoch=1",
        "dataset.max_tokens=1000",
        # fairseq's GLUE configs leave the shape to the architecture (roberta_ext_base): a model of
        # another shape is given with '++', as in fairseq.
        *(f"++{option}" for option in SMALL),
        *ON_CPU,
        cwd=folder,
    )
    assert "Loaded checkpoint checkpoints/checkpoint_last.pt" in log
    valid = log_records(log, "valid")
    assert valid and "valid_accuracy" in valid[-1]
    assert (folder / "checkpoints-rte" / "checkpoint_best.pt").is_file()


def test_pretrained_at_tokens_per_sample_fine_tunes_at_that_max_positions(folder: Path):
    """fairseq's roberta takes max_positions from --tokens-per-sample: pretrain with 32, then
    fine-tune with --max-positions 32 and --restore-file, as fairseq's roberta_base does."""
    small = (
        "--encoder-layers 2 --encoder-embed-dim 32 --encoder-ffn-embed-dim 64 --encoder-attention-heads 4 --cpu "
        "--num-workers 0 --log-format json --log-interval 1 --optimizer adam --lr 1e-4 --batch-size 8"
    ).split()
    run(
        "fairseq-train",
        "data-bin",
        "--user-dir",
        USER_DIR,
        "--task",
        "roberta_ext_mlm",
        "--criterion",
        "roberta_ext_mlm",
        "--arch",
        "roberta_ext_base",
        "--tokens-per-sample",
        "32",
        "--max-update",
        "2",
        "--save-dir",
        "checkpoints-32",
        *small,
        cwd=folder,
    )
    log = run(
        "fairseq-train",
        "cls-bin",
        "--user-dir",
        USER_DIR,
        "--task",
        "roberta_ext_classification",
        "--criterion",
        "roberta_ext_classification",
        "--arch",
        "roberta_ext_base",
        "--max-positions",
        "32",
        "--num-classes",
        "2",
        "--init-token",
        "0",
        "--separator-token",
        "2",
        "--max-update",
        "2",
        "--restore-file",
        "checkpoints-32/checkpoint_last.pt",
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
        "--save-dir",
        "checkpoints-32-cls",
        *small,
        cwd=folder,
    )
    assert "Loaded checkpoint checkpoints-32/checkpoint_last.pt" in log


def test_colon_separated_shards_one_per_epoch(folder: Path):
    """fairseq's sharded corpora (fairseq#2452): task.data=shard0:shard1 reads one shard per
    epoch, in turn, and drops the previous epoch's."""
    for n, part in enumerate((slice(0, 500), slice(500, 1000))):
        lines = (folder / "train.txt").read_text(encoding="utf-8").splitlines()[part]
        write_lines(folder / f"shard{n}.txt", lines)
        preprocess(
            folder / f"shard{n}",
            folder / f"shard{n}.txt",
            folder / "valid.txt",
            srcdict=folder / "data-bin" / "dict.txt",
        )
    log = run(
        "fairseq-hydra-train",
        "--config-dir",
        str(OURS / "pretraining"),
        "--config-name",
        "base",
        "task.data=shard0:shard1",
        f"common.user_dir={USER_DIR}",
        "checkpoint.save_dir=checkpoints-shards",
        "task.tokens_per_sample=32",
        "dataset.batch_size=64",
        "optimization.max_update=100",
        "optimization.max_epoch=3",
        "optimization.update_freq=[1]",
        *SMALL,
        *ON_CPU,
        cwd=folder,
    )
    loaded = re.findall(r"loaded \d+ blocks from: (shard\d)/train", log)
    # Epochs 1, 2, 3 and the iterator fairseq prepares for epoch 4 before it checks max_epoch.
    assert loaded == ["shard0", "shard1", "shard0", "shard1"], loaded


def test_fine_tuning_a_fine_tuned_checkpoint_says_which_heads_it_keeps(folder: Path, pretrained: str):
    """A head of the file with the task's head name and shape continues from the file (fairseq
    reuses roberta.large.mnli's 'mnli' head so); another name starts fresh and the file's is
    dropped. The log says which."""
    common = [
        "task.data=cls-bin",
        f"common.user_dir={USER_DIR}",
        "task.max_positions=32",
        "optimization.max_update=1",
        "optimization.max_epoch=1",
        "dataset.max_tokens=1000",
        *(f"++{option}" for option in SMALL),
        *ON_CPU,
    ]
    first = run(
        "fairseq-hydra-train",
        "--config-dir",
        str(OURS / "finetuning"),
        "--config-name",
        "rte",
        "checkpoint.restore_file=checkpoints/checkpoint_last.pt",
        "checkpoint.save_dir=checkpoints-heads",
        *common,
        cwd=folder,
    )
    assert "head 'sentence_classification_head' is new" in first
    again = run(
        "fairseq-hydra-train",
        "--config-dir",
        str(OURS / "finetuning"),
        "--config-name",
        "rte",
        "checkpoint.restore_file=checkpoints-heads/checkpoint_last.pt",
        "checkpoint.save_dir=checkpoints-heads2",
        *common,
        cwd=folder,
    )
    assert "loading head 'sentence_classification_head' of the checkpoint" in again
    other = run(
        "fairseq-hydra-train",
        "--config-dir",
        str(OURS / "finetuning"),
        "--config-name",
        "rte",
        "checkpoint.restore_file=checkpoints-heads/checkpoint_last.pt",
        "checkpoint.save_dir=checkpoints-heads3",
        "++criterion.classification_head_name=other",
        *common,
        cwd=folder,
    )
    assert "dropping head 'sentence_classification_head'" in other and "head 'other' is new" in other


def fine_tune_rte(folder: Path, save_dir: str, *overrides: str) -> str:
    """``rte.yaml`` from the pretrained checkpoint (32 positions), one update, with ``overrides``."""
    return run(
        "fairseq-hydra-train",
        "--config-dir",
        str(OURS / "finetuning"),
        "--config-name",
        "rte",
        "task.data=cls-bin",
        "checkpoint.restore_file=checkpoints/checkpoint_last.pt",
        f"checkpoint.save_dir={save_dir}",
        f"common.user_dir={USER_DIR}",
        "optimization.max_update=1",
        "optimization.max_epoch=1",
        "dataset.max_tokens=1000",
        *overrides,
        *ON_CPU,
        cwd=folder,
    )


def test_glue_config_for_another_shape_takes_task_max_positions_and_says_so(folder: Path, pretrained: str):
    """docs/glue.md's "A model of another shape": the sizes with '++', the positions from
    task.max_positions. fairseq's sentence_prediction gives the model the task's max_positions
    (512 in the config) over ++model.max_positions, so that alone fails, with an error that
    names hydra's key, not fairseq-train's --max-positions."""
    with pytest.raises(AssertionError) as failed:
        fine_tune_rte(folder, "checkpoints-shape-wrong", *(f"++{option}" for option in SMALL))
    error = str(failed.value).rsplit("ValueError: ", 1)[-1].split("\n", 1)[0]
    assert "(514, 32) in the model" in error and "check model._name and the size overrides" in error
    assert "the checkpoint's position table is that of max_positions 32: pass task.max_positions=32" in error
    assert "--max-positions" not in error
    sizes = [f"++{option}" for option in SMALL if not option.startswith("model.max_positions=")]
    log = fine_tune_rte(folder, "checkpoints-shape", *sizes, "task.max_positions=32")
    assert "Loaded checkpoint checkpoints/checkpoint_last.pt" in log and "done training" in log


def test_fairseq_train_names_max_positions_for_a_checkpoint_of_other_positions(folder: Path, pretrained: str):
    """The same mismatch under fairseq-train, where --max-positions sets the task's and the model's."""
    argv = (
        "cls-bin --task roberta_ext_classification --criterion roberta_ext_classification --arch roberta_ext_base "
        "--encoder-layers 2 --encoder-embed-dim 32 --encoder-ffn-embed-dim 64 --encoder-attention-heads 4 "
        "--num-classes 2 --max-update 1 --batch-size 8 --cpu --num-workers 0 --save-dir checkpoints-positions "
        "--restore-file checkpoints/checkpoint_last.pt --reset-optimizer"
    ).split()
    with pytest.raises(AssertionError) as failed:
        run("fairseq-train", *argv, "--user-dir", USER_DIR, cwd=folder)
    error = str(failed.value).rsplit("ValueError: ", 1)[-1].split("\n", 1)[0]
    assert "check --arch and the size options" in error
    assert error.endswith("the checkpoint's position table is that of max_positions 32: pass --max-positions 32")
    assert "task.max_positions" not in error


MODERNBERT_SMALL = [
    "model.encoder_layers=3",
    "model.encoder_embed_dim=32",
    "model.encoder_ffn_embed_dim=48",
    "model.encoder_attention_heads=2",
    "model.local_attention=8",
    "model.bf16_autocast=false",
    "dataset.batch_size=4",
    "optimization.update_freq=[1]",
    "lr_scheduler.decay_updates=1",
]


def modernbert_phase(folder: Path, config: str, *overrides: str) -> str:
    args = ["--config-dir", str(OURS / "pretraining"), "--config-name", config, "task.data=data-bin"]
    args += [f"common.user_dir={USER_DIR}", *MODERNBERT_SMALL, *ON_CPU, *overrides]
    return run("fairseq-hydra-train", *args, cwd=folder)


def test_modernbert_context_extension_restores_the_first_phase_with_a_longer_row_and_theta(folder: Path):
    """ModernBERT's two phases from their configs: ``modernbert_base`` (rows of documents packed
    apart, global theta 10,000), then ``modernbert_base_extend`` restoring its checkpoint with
    longer rows and the global theta raised, the optimizer, schedule and counters reset."""
    first = modernbert_phase(
        folder,
        "modernbert_base",
        "checkpoint.save_dir=modernbert-1",
        "task.tokens_per_sample=32",
        "optimization.max_update=2",
        "lr_scheduler.warmup_updates=1",
    )
    assert "'pack_documents': True" in first and "'rotary_theta': 10000.0" in first
    extended = modernbert_phase(
        folder,
        "modernbert_base_extend",
        "checkpoint.save_dir=modernbert-2",
        "checkpoint.restore_file=modernbert-1/checkpoint_last.pt",
        "task.tokens_per_sample=64",
        "optimization.max_update=2",
    )
    assert "Loaded checkpoint modernbert-1/checkpoint_last.pt (epoch 1 @ 0 updates)" in extended
    assert [int(r["num_updates"]) for r in log_records(extended)] == [1, 2]  # counters reset
    saved = fairseq.checkpoint_utils.load_checkpoint_to_cpu(str(folder / "modernbert-2" / "checkpoint_last.pt"))
    assert saved["cfg"]["model"]["rotary_theta"] == 160000.0 and saved["cfg"]["task"]["tokens_per_sample"] == 64
    assert saved["cfg"]["optimizer"]["_name"] == "roberta_ext_stable_adamw"
