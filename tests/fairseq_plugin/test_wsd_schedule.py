"""The warmup-stable-decay schedule (``--lr-scheduler roberta_ext_warmup_stable_decay``) against its
formula at every update, and a tiny ModernBERT trained with the recipe (StableAdamW and the
schedule): the hydra config ``modernbert_base.yaml`` run whole, and ``fairseq-train`` with the same
options as flags, stopped mid-decay and resumed, which ends exactly where the config's run does (the
rate and the loss at every update, the weights and the optimizer's state)."""

from __future__ import annotations

import dataclasses
import math
import random
import re
from pathlib import Path

import pytest
import torch

from tests.peers import require

require("fairseq", "the schedule is a fairseq component")
omegaconf = require("omegaconf", "fairseq's configs")

from fairseq.checkpoint_utils import load_checkpoint_to_cpu  # noqa: E402
from fairseq.dataclass.configs import FairseqConfig  # noqa: E402

import roberta_ext.fairseq_plugin  # noqa: E402,F401  (its loader reads fairseq's checkpoints under torch 2.13)
from roberta_ext.fairseq_plugin.lr_schedulers import (  # noqa: E402
    WarmupStableDecayConfig,
    WarmupStableDecaySchedule,
    check_schedule,
)
from roberta_ext.fairseq_plugin.optim import FairseqStableAdamW, StableAdamWConfig  # noqa: E402
from roberta_ext.families import get_family  # noqa: E402
from roberta_ext.modeling import EncoderConfig  # noqa: E402
from roberta_ext.modeling.config import FAIRSEQ_NAMES  # noqa: E402
from tests.fairseq_plugin.tools import USER_DIR, log_records, preprocess, run  # noqa: E402


def formula(n: int, *, lr, warmup, total, decay, final=0.0, shape="one_minus_sqrt") -> float:
    """The rate fairseq sets after ``n`` updates (that of update n + 1), written from the schedule's
    definition phase by phase: linear warmup to ``lr`` at update ``warmup``, ``lr`` until ``decay``
    updates are left, then down to ``final * lr`` at update ``total``, and there after it."""
    update = n + 1
    if update > total:
        return final * lr
    if update <= warmup:
        return lr * update / warmup
    left = total - update  # updates after this one
    if left >= decay:
        return lr
    done = (decay - left) / decay  # 1/decay for the first decayed update, 1 for the last
    fall = math.sqrt(done) if shape == "one_minus_sqrt" else done
    return lr * (1 - fall) + final * lr * fall


def schedule(*, lr=(1e-3,), max_update: int = 0, **options) -> WarmupStableDecaySchedule:
    """The scheduler built from fairseq's config (``--lr``, ``--max-update`` and its own options),
    over StableAdamW."""
    cfg = omegaconf.OmegaConf.structured(FairseqConfig)
    cfg.optimization.lr, cfg.optimization.max_update = list(lr), max_update
    cfg.optimizer = omegaconf.OmegaConf.structured(StableAdamWConfig())
    cfg.lr_scheduler = omegaconf.OmegaConf.structured(WarmupStableDecayConfig(**options))
    optimizer = FairseqStableAdamW(cfg.optimizer, [torch.nn.Parameter(torch.zeros(1))])
    return WarmupStableDecaySchedule(cfg.lr_scheduler, optimizer)


CASES = [
    dict(warmup_updates=3, decay_updates=5, max_update=12),
    dict(warmup_updates=4, decay_updates=6, total_num_update=20, final_lr_scale=0.1, decay_shape="linear"),
    dict(warmup_updates=0, decay_updates=4, total_num_update=9, final_lr_scale=0.25),
    dict(warmup_updates=5, decay_updates=0, total_num_update=8),
    dict(warmup_updates=2, decay_updates=8, total_num_update=10, lr=[8e-4]),  # no constant phase
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_the_rate_is_the_formula_at_every_update(case):
    scheduler = schedule(**dict(case))
    total = case.get("total_num_update", case.get("max_update"))
    expected = dict(
        lr=case.get("lr", [1e-3])[0],
        warmup=case["warmup_updates"],
        total=total,
        decay=case["decay_updates"],
        final=case.get("final_lr_scale", 0.0),
        shape=case.get("decay_shape", "one_minus_sqrt"),
    )
    assert scheduler.optimizer.get_lr() == pytest.approx(formula(0, **expected), rel=1e-12)  # before update 1
    for n in range(total + 3):
        assert scheduler.step_update(n) == pytest.approx(formula(n, **expected), rel=1e-12, abs=1e-15), n


def test_decay_updates_default_to_a_tenth_of_the_run():
    scheduler = schedule(warmup_updates=2, total_num_update=50)
    assert [scheduler.step_update(n) for n in (44, 45, 49)] == pytest.approx(
        [formula(n, lr=1e-3, warmup=2, total=50, decay=5) for n in (44, 45, 49)]
    )
    assert scheduler.step_update(44) == 1e-3 and scheduler.step_update(45) < 1e-3


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(warmup_updates=2), "needs the length of the run: --total-num-update .* is 0"),
        (dict(warmup_updates=6, decay_updates=5, total_num_update=10), r"--warmup-updates 6 \+ --decay-updates 5"),
        (dict(total_num_update=10, final_lr_scale=1.5), "--final-lr-scale 1.5 is not in"),
        (dict(total_num_update=10, lr=(1e-3, 1e-4)), "takes one --lr"),
    ],
)
def test_impossible_schedules_name_the_option(options, message):
    with pytest.raises(ValueError, match=message):
        schedule(**options)


def test_a_tenth_of_the_run_is_rounded_down_to_whole_updates():
    scheduler = schedule(warmup_updates=2, total_num_update=55)  # decay over the last 5 updates, not 5.5
    assert [scheduler.step_update(n) for n in (49, 50, 54)] == pytest.approx(
        [formula(n, lr=1e-3, warmup=2, total=55, decay=5) for n in (49, 50, 54)]
    )
    assert scheduler.schedule["decay_updates"] == 5 and scheduler.step_update(49) == 1e-3


def test_the_ends_of_each_range_are_accepted():
    assert schedule(total_num_update=1).step_update(0) == 1e-3  # a run of one update, at the peak
    held = schedule(warmup_updates=2, decay_updates=3, total_num_update=10, final_lr_scale=1.0)
    assert [held.step_update(n) for n in range(2, 12)] == [1e-3] * 10  # a final scale of 1: no decay


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            dict(warmup_updates=-1),
            "--warmup-updates -1 and --decay-updates 2 must be >= 0",
        ),
        (
            dict(decay_updates=-2),
            "--warmup-updates 1 and --decay-updates -2 must be >= 0",
        ),
        (dict(decay_shape="cosine"), "--decay-shape 'cosine' is not one of one_minus_sqrt, linear"),
    ],
)
def test_check_schedule_refuses_in_full(changes, message):
    options = dict(lr=1e-3, warmup_updates=1, total_num_update=10, decay_updates=2, final_lr_scale=0.0)
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        check_schedule(**{**options, "decay_shape": "linear", **changes})


def test_a_float_lr_is_the_peak_and_a_list_of_two_is_refused_in_full():
    """fairseq's configs hold --lr as a list; a config built by hand may hold a float."""
    optimizer = schedule(total_num_update=4).optimizer
    scheduler = WarmupStableDecaySchedule(WarmupStableDecayConfig(lr=2e-3, total_num_update=4, max_update=4), optimizer)
    assert scheduler.step_update(0) == 2e-3
    message = (
        "--lr-scheduler roberta_ext_warmup_stable_decay takes one --lr (its peak), got [0.001, 0.0001]; a rate per "
        "epoch is --lr-scheduler fixed's"
    )
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        schedule(total_num_update=10, lr=(1e-3, 1e-4))


# ------------------------------------------------------------------ fairseq-train with the recipe


def fairseq(script: str, *args: str, cwd: Path) -> str:
    """``fairseq-train`` or ``fairseq-hydra-train`` with ``args`` (:func:`tools.run`); its output."""
    return run(script, *args, cwd=cwd)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("wsd")
    rng = random.Random(0)
    words = [f"w{n}" for n in range(60)]
    sentences = [" ".join(rng.choices(words, k=rng.randint(4, 20))) for _ in range(1100)]
    (root / "train.txt").write_text("".join(s + "\n" for s in sentences[:1000]), encoding="utf-8")
    (root / "valid.txt").write_text("".join(s + "\n" for s in sentences[1000:]), encoding="utf-8")
    preprocess(root / "data-bin", root / "train.txt", root / "valid.txt")
    return root


LR, WARMUP, DECAY, TOTAL = 1e-3, 2, 4, 8
RECIPE = (
    "--task roberta_ext_mlm --criterion roberta_ext_mlm --arch modernbert_ext_base --mask-prob 0.3 "
    "--encoder-layers 2 --encoder-embed-dim 32 --encoder-ffn-embed-dim 48 --encoder-attention-heads 4 "
    "--tokens-per-sample 32 --sample-break-mode complete --pack-documents --rotary-theta 10000 --batch-size 8 "
    "--optimizer roberta_ext_stable_adamw --adam-betas (0.9,0.98) --adam-eps 1e-06 --weight-decay 1e-05 "
    "--decouple-lr --no-decay-bias-and-norm --clip-norm 0 "
    f"--lr {LR} --lr-scheduler roberta_ext_warmup_stable_decay --warmup-updates {WARMUP} "
    f"--decay-updates {DECAY} --total-num-update {TOTAL} "
    "--cpu --num-workers 0 --log-format json --log-interval 1 --disable-validation --no-epoch-checkpoints"
).split()


def train(folder: Path, save_dir: str, max_update: int) -> str:
    return fairseq(
        "fairseq-train", "data-bin", "--user-dir", USER_DIR, *RECIPE, "--max-update", str(max_update),
        "--save-dir", save_dir, cwd=folder,
    )  # fmt: skip


def by_update(log: str) -> dict[int, dict]:
    return {int(r["num_updates"]): r for r in log_records(log)}


CONFIG = Path(USER_DIR) / "config" / "pretraining" / "modernbert_base.yaml"


@pytest.fixture(scope="module")
def uninterrupted(folder: Path) -> dict[int, dict]:
    """fairseq-hydra-train with the recipe's config, sized as :data:`RECIPE` by overrides that need
    no '++', the whole run at once."""
    log = fairseq(
        "fairseq-hydra-train", "--config-dir", str(CONFIG.parent), "--config-name", "modernbert_base",
        "task.data=data-bin", f"common.user_dir={USER_DIR}", "checkpoint.save_dir=whole",
        "common.cpu=true", "common.log_interval=1", "dataset.num_workers=0", "dataset.batch_size=8",
        "dataset.disable_validation=true", "optimization.update_freq=[1]", f"optimization.max_update={TOTAL}",
        f"optimization.lr=[{LR}]", f"lr_scheduler.warmup_updates={WARMUP}", f"lr_scheduler.decay_updates={DECAY}",
        "task.tokens_per_sample=32", "model.max_positions=32", "model.encoder_layers=2", "model.encoder_embed_dim=32",
        "model.encoder_ffn_embed_dim=48", "model.encoder_attention_heads=4", "model.bf16_autocast=false",
        cwd=folder,
    )  # fmt: skip
    return by_update(log)


def test_the_logged_rate_is_the_formula_at_every_update(uninterrupted):
    assert sorted(uninterrupted) == list(range(1, TOTAL + 1))
    for n, record in uninterrupted.items():  # fairseq logs the rate it set after update n
        want = formula(n, lr=LR, warmup=WARMUP, total=TOTAL, decay=DECAY)
        assert float(record["lr"]) == pytest.approx(want, rel=1e-5, abs=1e-12), n


def test_resumed_mid_decay_the_run_continues_exactly(folder: Path, uninterrupted):
    """fairseq-train with the recipe's flags, stopped after update 6 (two of the four decay updates
    done) and started again: the rate, the losses, and at the end the weights and StableAdamW's
    state (moments and step counts, through fairseq's checkpoint) are those of the config's
    uninterrupted run: the flags and the hydra keys are the same options, and resuming loses nothing."""
    first = by_update(train(folder, "stopped", 6))
    resumed_log = train(folder, "stopped", TOTAL)
    assert "Loaded checkpoint stopped/checkpoint_last.pt (epoch 1 @ 6 updates)" in resumed_log
    resumed = by_update(resumed_log)
    assert sorted(first) == [1, 2, 3, 4, 5, 6] and sorted(resumed) == [7, 8]
    for n, record in {**first, **resumed}.items():
        assert (record["lr"], record["loss"]) == (uninterrupted[n]["lr"], uninterrupted[n]["loss"]), n

    whole, stopped = (load_checkpoint_to_cpu(str(folder / d / "checkpoint_last.pt")) for d in ("whole", "stopped"))
    assert whole["model"].keys() == stopped["model"].keys()
    for key, tensor in whole["model"].items():
        assert torch.equal(tensor, stopped["model"][key]), key
    states = [c["last_optimizer_state"] for c in (whole, stopped)]
    assert states[0]["param_groups"] == states[1]["param_groups"]
    assert [g["weight_decay"] for g in states[0]["param_groups"]] == [1e-5, 0.0]  # --no-decay-bias-and-norm
    for index, state in states[0]["state"].items():
        resumed_state = states[1]["state"][index]
        assert state["step"] == resumed_state["step"] == TOTAL
        for name in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(state[name], resumed_state[name]), (index, name)


# ------------------------------------------------------------------ the recipe's hydra config


def test_the_config_is_the_recipe_with_the_presets_model():
    config = omegaconf.OmegaConf.to_container(omegaconf.OmegaConf.load(CONFIG))
    preset = get_family("modernbert").preset("base")
    options = {
        FAIRSEQ_NAMES[f.name]: getattr(preset, f.name)
        for f in dataclasses.fields(EncoderConfig)
        if f.metadata["plugin"]
    }
    # The first phase's global theta is 10,000; the extension raises it to the preset's 160,000.
    assert config["model"] == {"_name": "roberta_ext", **options, "rotary_theta": 10000.0, "bf16_autocast": True}
    assert preset.rotary_theta == 160000.0
    assert config["task"] == {
        "_name": "roberta_ext_mlm", "data": "???", "sample_break_mode": "complete", "pack_documents": True,
        "tokens_per_sample": 1024, "mask_prob": 0.3,
    }  # fmt: skip
    extend = omegaconf.OmegaConf.to_container(omegaconf.OmegaConf.load(CONFIG.with_name("modernbert_base_extend.yaml")))
    assert extend["model"] == {**config["model"], "rotary_theta": 160000.0}
    assert extend["task"] == {**config["task"], "tokens_per_sample": 8192}
    assert extend["optimizer"] == config["optimizer"] and extend["criterion"] == config["criterion"]
    assert {k: v for k, v in extend["checkpoint"].items() if k.startswith("reset_")} == dict.fromkeys(
        ("reset_optimizer", "reset_lr_scheduler", "reset_dataloader", "reset_meters"), True
    )
    assert config["optimizer"]["_name"] == "roberta_ext_stable_adamw"
    assert config["lr_scheduler"]["_name"] == "roberta_ext_warmup_stable_decay"
    assert config["optimization"]["clip_norm"] == 0 and config["optimization"]["lr"] == [0.0008]
    # Every option of the optimizer and the scheduler is listed: overrides need no '++'.
    for section, options_class in (("optimizer", StableAdamWConfig), ("lr_scheduler", WarmupStableDecayConfig)):
        names = {f.name for f in dataclasses.fields(options_class) if f.name not in ("_name", "lr", "max_update")}
        assert names == set(config[section]) - {"_name"}, section
