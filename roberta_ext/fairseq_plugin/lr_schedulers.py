"""The warmup-stable-decay learning rate schedule as a fairseq scheduler:
``--lr-scheduler roberta_ext_warmup_stable_decay``, ModernBERT's trapezoidal schedule.

A linear warmup to ``--lr`` over the first ``--warmup-updates``, the constant ``--lr``, then a
decay over the last ``--decay-updates`` before ``--total-num-update`` to ``--final-lr-scale`` times
``--lr``: ``1 - sqrt`` (``one_minus_sqrt``, the default: Hägele et al., 2024, as ModernBERT) or
``linear``. Counted in updates (``u``, 1 for the first), as fairseq's ``polynomial_decay`` is,
with its option names:

- update ``u <= W``: ``lr * u / W`` (the first update at ``lr / W``, the W-th at ``lr``);
- ``W < u <= T - D``: ``lr``;
- ``T - D < u <= T``: ``lr * (f + (1 - f) * (1 - sqrt(p)))`` with ``p = (u - T + D) / D``
  (linear: ``1 - p`` in place of ``1 - sqrt(p)``);
- ``u > T``: ``lr * f``

(``W`` warmup, ``D`` decay, ``T`` total updates, ``f`` the final scale; the last update runs at
``lr * f``.) The rate is a function of the update count alone: fairseq sets it after every update
and again when it resumes a checkpoint, so a resumed run continues the schedule exactly.
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.optim.lr_scheduler import FairseqLRScheduler, register_lr_scheduler
from omegaconf import II

DECAY_SHAPES = ("one_minus_sqrt", "linear")
"""How the rate falls over the decay updates: ``1 - sqrt(p)`` or ``1 - p`` of the way to the final rate."""


def warmup_stable_decay(
    update: int,
    *,
    lr: float,
    warmup_updates: int,
    total_num_update: int,
    decay_updates: int,
    final_lr_scale: float = 0.0,
    decay_shape: str = "one_minus_sqrt",
) -> float:
    """The learning rate of update ``update`` (1 for the first) under the schedule of the module's
    table. The arguments are checked by :func:`check_schedule`.

    >>> [round(warmup_stable_decay(u, lr=1.0, warmup_updates=2, total_num_update=8, decay_updates=4), 3)
    ...  for u in range(1, 10)]
    [0.5, 1.0, 1.0, 1.0, 0.5, 0.293, 0.134, 0.0, 0.0]
    """
    if update <= warmup_updates:
        return lr * update / warmup_updates
    decay_start = total_num_update - decay_updates
    if update <= decay_start:
        return lr
    if update > total_num_update:
        return lr * final_lr_scale
    progress = (update - decay_start) / decay_updates  # in (0, 1]: here decay_updates > 0
    remaining = 1.0 - math.sqrt(progress) if decay_shape == "one_minus_sqrt" else 1.0 - progress
    return lr * (final_lr_scale + (1.0 - final_lr_scale) * remaining)


def check_schedule(
    *,
    lr: float,
    warmup_updates: int,
    total_num_update: int,
    decay_updates: int,
    final_lr_scale: float,
    decay_shape: str,
) -> None:
    """Raise ``ValueError`` naming the option when the schedule cannot be run: no total (neither
    ``--total-num-update`` nor ``--max-update``), warmup and decay longer than the run, a final
    scale outside [0, 1], an unknown shape."""
    if total_num_update <= 0:
        raise ValueError(
            f"--lr-scheduler roberta_ext_warmup_stable_decay needs the length of the run: --total-num-update "
            f"(default: --max-update) is {total_num_update}"
        )
    if warmup_updates < 0 or decay_updates < 0:
        raise ValueError(f"--warmup-updates {warmup_updates} and --decay-updates {decay_updates} must be >= 0")
    if warmup_updates + decay_updates > total_num_update:
        raise ValueError(
            f"--warmup-updates {warmup_updates} + --decay-updates {decay_updates} is more than --total-num-update "
            f"{total_num_update}: shorten them or lengthen the run"
        )
    if not 0.0 <= final_lr_scale <= 1.0:
        raise ValueError(f"--final-lr-scale {final_lr_scale} is not in [0, 1] (a fraction of --lr {lr})")
    if decay_shape not in DECAY_SHAPES:
        raise ValueError(f"--decay-shape {decay_shape!r} is not one of {', '.join(DECAY_SHAPES)}")


@dataclass
class WarmupStableDecayConfig(FairseqDataclass):
    """The options of :class:`WarmupStableDecaySchedule`, named as fairseq's schedulers name theirs."""

    warmup_updates: int = field(
        default=0, metadata={"help": "warm the learning rate up linearly over the first N updates"}
    )
    total_num_update: Optional[int] = field(
        default=None,
        metadata={"help": "the length of the run in updates: the decay ends here; default: --max-update"},
    )
    decay_updates: Optional[int] = field(
        default=None,
        metadata={"help": "decay over the last N updates before --total-num-update; default: a tenth of them"},
    )
    final_lr_scale: float = field(default=0.0, metadata={"help": "the rate at the end, as a fraction of --lr"})
    decay_shape: ChoiceEnum(DECAY_SHAPES) = field(  # type: ignore[valid-type]
        default="one_minus_sqrt", metadata={"help": "1 - sqrt(p) (ModernBERT) or linear 1 - p"}
    )
    lr: list[float] = II("optimization.lr")
    # No help: not a flag of its own. An interpolated default of a flag (fairseq's way for
    # polynomial_decay's --total-num-update) is lost by fairseq-train's argparse, which then asks
    # for the flag; a default of None read beside --max-update works from flags and hydra keys alike.
    max_update: int = II("optimization.max_update")


@register_lr_scheduler("roberta_ext_warmup_stable_decay", dataclass=WarmupStableDecayConfig)
class WarmupStableDecaySchedule(FairseqLRScheduler):
    """Warmup, constant, then ``1 - sqrt`` or linear decay (see the module's table)."""

    def __init__(self, cfg: WarmupStableDecayConfig, optimizer: Any) -> None:
        super().__init__(cfg, optimizer)
        lrs = list(cfg.lr) if isinstance(cfg.lr, Iterable) else [cfg.lr]
        if len(lrs) != 1:
            raise ValueError(
                f"--lr-scheduler roberta_ext_warmup_stable_decay takes one --lr (its peak), got {lrs}; a rate per "
                "epoch is --lr-scheduler fixed's"
            )
        total = int(cfg.total_num_update if cfg.total_num_update is not None else cfg.max_update)
        self.schedule: dict[str, Any] = dict(
            lr=float(lrs[0]),
            warmup_updates=int(cfg.warmup_updates),
            total_num_update=total,
            decay_updates=int(cfg.decay_updates) if cfg.decay_updates is not None else total // 10,
            final_lr_scale=float(cfg.final_lr_scale),
            decay_shape=str(cfg.decay_shape),
        )
        check_schedule(**self.schedule)
        self.optimizer.set_lr(warmup_stable_decay(1, **self.schedule))

    def step_update(self, num_updates: int) -> float:
        """After ``num_updates`` updates: the rate of the next one."""
        self.optimizer.set_lr(warmup_stable_decay(num_updates + 1, **self.schedule))
        return self.optimizer.get_lr()


__all__ = [
    "DECAY_SHAPES",
    "WarmupStableDecayConfig",
    "WarmupStableDecaySchedule",
    "check_schedule",
    "warmup_stable_decay",
]
