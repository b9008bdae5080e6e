"""StableAdamW as a fairseq optimizer: ``--optimizer roberta_ext_stable_adamw``, ModernBERT's optimizer.

StableAdamW (Wortsman et al., "Stable and low-precision training for large-scale vision-language
models", 2023) is AdamW whose learning rate is divided, per tensor and per step, by
``max(1, RMS(g² / v̂))``: Adafactor's update clipping, which takes the place of gradient clipping
(ModernBERT trains with it and ``--clip-norm 0``). ``v̂`` is the bias-corrected second moment; a
gradient much larger than the history ``v̂`` holds makes the ratio large, and that tensor's step
smaller. Written as torch-optimi's ``StableAdamW`` (what answerdotai/ModernBERT trains with)
computes it: the moments through Adafactor's debiased betas, so that they *are* the
bias-corrected ``m̂`` and ``v̂``; ``g² / max(v̂, eps²)`` in the RMS; the clipped learning rate in
the weight decay too (``--decouple-lr``: ``1 - lr / max_lr * weight_decay``, optimi's
``decouple_lr``).

fairseq's side: the options are ``FairseqAdam``'s where they mean the same (``--adam-betas``,
``--adam-eps``, ``--weight-decay``), with StableAdamW's defaults; ``--no-decay-bias-and-norm``
puts biases and norm weights (every tensor of one dimension) in a group without weight decay, as
ModernBERT's ``filter_bias_norm_wd``. The clipping is per tensor, so fairseq's flat fp32 copy
(``--fp16`` without ``--fp16-no-flatten-grads``) is refused by fairseq itself (the optimizer does
not support flat parameters); ``--memory-efficient-fp16`` (and ``--memory-efficient-bf16``) step
the half-precision weights through a float32 copy, with the moments kept in float32, also across
a checkpoint.

>>> import torch
>>> weight = torch.nn.Parameter(torch.ones(4))
>>> optimizer = StableAdamW([weight], lr=0.1, weight_decay=0.0)
>>> weight.grad = torch.tensor([1.0, -1.0, 2.0, 0.0])
>>> optimizer.step()
>>> weight.detach()  # the first step of Adam: lr * sign(g), where g is not zero
tensor([0.9000, 1.1000, 0.9000, 1.0000])
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import ast
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.optim import FairseqOptimizer, register_optimizer
from omegaconf import II, OmegaConf

MOMENTS = ("exp_avg", "exp_avg_sq")
"""The state kept per tensor besides its step count, in :func:`compute_dtype`."""


def debiased_beta(beta: float, step: int) -> float:
    """Adafactor's debiased ``beta`` at ``step`` (1 for the first): a moving average updated
    with it, ``m = b m + (1 - b) g``, equals Adam's bias-corrected ``m / (1 - beta**step)``.

    >>> abs(debiased_beta(0.9, 1)), round(debiased_beta(0.9, 2), 6)   # step 1: the gradient itself
    (0.0, 0.473684)
    """
    return (beta**step - beta) / (beta**step - 1)


def stable_adamw_step(
    weight: torch.Tensor,
    grad: torch.Tensor,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    *,
    step: int,
    lr: float,
    betas: tuple[float, float],
    eps: float,
    weight_decay: float,
    max_lr: Optional[float] = None,
) -> torch.Tensor:
    """One StableAdamW step of one tensor, in place: the moments (``m̂``, ``v̂``, of ``weight``'s
    dtype) move to ``grad`` and ``weight`` takes the step. ``max_lr`` set: fully decoupled weight decay
    (``1 - lr / max_lr * weight_decay``). Returns ``RMS(g² / v̂)`` (a 0-d tensor; no host sync).

    >>> w, g = torch.zeros(2), torch.tensor([3.0, -4.0])
    >>> m, v = torch.zeros(2), torch.zeros(2)
    >>> stable_adamw_step(w, g, m, v, step=1, lr=0.5, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.0)
    tensor(1.)
    >>> w
    tensor([-0.5000,  0.5000])
    """
    beta1, beta2 = betas
    beta1_hat, beta2_hat = debiased_beta(beta1, step), debiased_beta(beta2, step)
    exp_avg.lerp_(grad, 1 - beta1_hat)  # m̂ = b1 m̂ + (1 - b1) g
    exp_avg_sq.mul_(beta2_hat).addcmul_(grad, grad, value=1 - beta2_hat)  # v̂ = b2 v̂ + (1 - b2) g²
    rms = grad.square().div_(exp_avg_sq.clamp(min=eps * eps)).mean().sqrt()
    step_lr = lr / rms.clamp(min=1.0)  # the per-tensor learning rate (0-d)
    if weight_decay:
        weight.mul_(1 - step_lr * (weight_decay / max_lr if max_lr else weight_decay))
    weight.sub_(exp_avg / exp_avg_sq.sqrt().add_(eps) * step_lr)
    return rms


HALF_DTYPES = (torch.float16, torch.bfloat16)


def compute_dtype(param: torch.Tensor) -> torch.dtype:
    """The dtype a parameter's step and moments are computed in: float32 for half-precision
    weights (fairseq's ``--memory-efficient-fp16``/``-bf16``), the weight's own otherwise."""
    return torch.float32 if param.dtype in HALF_DTYPES else param.dtype


class StableAdamW(torch.optim.Optimizer):
    """StableAdamW over ``params`` (see the module's docstring); a drop-in for ``torch.optim.AdamW``
    that needs no gradient clipping. Half-precision weights (float16, bfloat16) are stepped in float32
    and written back, and their moments stay float32 (also through :meth:`load_state_dict`).

    >>> layer = torch.nn.Linear(3, 2)
    >>> optimizer = StableAdamW(layer.parameters(), lr=1e-3, betas=(0.9, 0.98), weight_decay=1e-5)
    >>> layer(torch.ones(1, 3)).sum().backward()
    >>> optimizer.step()
    >>> sorted(optimizer.state[layer.weight])
    ['exp_avg', 'exp_avg_sq', 'step']
    """

    def __init__(
        self,
        params: Iterable[Any],
        *,
        lr: float,
        betas: tuple[float, float] = (0.9, 0.99),
        eps: float = 1e-6,
        weight_decay: float = 1e-2,
        decouple_lr: bool = False,
        max_lr: Optional[float] = None,
    ) -> None:
        if lr < 0:
            raise ValueError(f"StableAdamW: the learning rate must be >= 0, got {lr}")
        if len(betas) != 2 or not all(0.0 <= beta < 1.0 for beta in betas):
            raise ValueError(f"StableAdamW: betas must be two numbers in [0, 1), got {tuple(betas)}")
        if eps < 0 or weight_decay < 0:
            raise ValueError(
                f"StableAdamW: eps and weight_decay must be >= 0, got eps={eps}, weight_decay={weight_decay}"
            )
        if decouple_lr:
            max_lr = lr if max_lr is None else max_lr
            if max_lr <= 0:
                raise ValueError(f"StableAdamW: decouple_lr needs a max_lr > 0 (the peak learning rate), got {max_lr}")
        defaults = dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, decouple_lr=decouple_lr, max_lr=max_lr
        )
        super().__init__(params, defaults)

    @property
    def supports_memory_efficient_fp16(self) -> bool:
        """fairseq's ``--memory-efficient-fp16``: half-precision weights are stepped in float32."""
        return True

    @property
    def supports_flat_params(self) -> bool:
        """No: the learning rate is clipped per tensor, so one flat tensor would clip them all at once."""
        return False

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One step of every parameter that has a gradient; returns ``closure()``'s loss, if given."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for param in group["params"]:
                if param.grad is None:
                    continue
                if param.grad.is_sparse:
                    raise ValueError(
                        f"StableAdamW does not take sparse gradients (a parameter of shape {tuple(param.shape)})"
                    )
                state = self.state[param]
                dtype = compute_dtype(param)
                if not state:
                    state["step"] = 0
                    for name in MOMENTS:
                        state[name] = torch.zeros_like(param, dtype=dtype, memory_format=torch.preserve_format)
                state["step"] += 1
                weight = param if param.dtype == dtype else param.to(dtype)
                stable_adamw_step(
                    weight,
                    param.grad.to(dtype),
                    state["exp_avg"],
                    state["exp_avg_sq"],
                    step=state["step"],
                    lr=group["lr"],
                    betas=group["betas"],
                    eps=group["eps"],
                    weight_decay=group["weight_decay"],
                    max_lr=group["max_lr"] if group["decouple_lr"] else None,
                )
                if weight is not param:
                    param.copy_(weight)
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loading, which casts the moments to each parameter's dtype, then the moments
        of ``state_dict`` again in :func:`compute_dtype`: bf16 or fp16 weights keep float32
        moments across a checkpoint, as they had before it."""
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        ids = (i for group in state_dict["param_groups"] for i in group["params"])
        params = (p for group in self.param_groups for p in group["params"])
        for param_id, param in zip(ids, params):
            for name in MOMENTS:
                value = saved.get(param_id, {}).get(name)
                if isinstance(value, torch.Tensor):
                    self.state[param][name] = value.to(device=param.device, dtype=compute_dtype(param))


def parse_betas(betas: Any) -> tuple[float, float]:
    """``--adam-betas`` as fairseq's Adam takes it: a string such as ``'(0.9,0.98)'`` (read as a
    literal, never evaluated as code), a tuple or list, or hydra's list.

    >>> parse_betas("(0.9, 0.98)"), parse_betas([0.9, 0.99])
    ((0.9, 0.98), (0.9, 0.99))
    """
    value = betas
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError) as error:
            raise ValueError(f"--adam-betas {betas!r} is not two numbers such as '(0.9,0.98)'") from error
    elif OmegaConf.is_config(value):
        value = OmegaConf.to_container(value, resolve=True)  # a list with ${...} in it holds numbers too
    if not isinstance(value, Sequence) or len(value) != 2 or not all(isinstance(b, (int, float)) for b in value):
        raise ValueError(f"--adam-betas {betas!r} is not two numbers such as '(0.9,0.98)'")
    return float(value[0]), float(value[1])


def decay_groups(params: Sequence[torch.Tensor], weight_decay: float) -> list[dict[str, Any]]:
    """``params`` in two groups: tensors of two or more dimensions (matrices, embeddings) with
    ``weight_decay``, and those of one (biases, norm weights and biases, the LM output bias)
    without; an empty group is left out. ModernBERT's ``filter_bias_norm_wd`` (optimi's
    ``param_groups_weight_decay``) decides by the same rule. fairseq hands the optimizer tensors
    without names, and in our models the tensors of one dimension are exactly those.

    >>> layer = torch.nn.Linear(3, 2)
    >>> [(len(g["params"]), g["weight_decay"]) for g in decay_groups(list(layer.parameters()), 0.01)]
    [(1, 0.01), (1, 0.0)]
    """
    decayed = [p for p in params if p.dim() >= 2]
    kept = [p for p in params if p.dim() < 2]
    groups = [{"params": decayed, "weight_decay": weight_decay}, {"params": kept, "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


@dataclass
class StableAdamWConfig(FairseqDataclass):
    """StableAdamW's options under the names of fairseq's Adam where they mean the same."""

    adam_betas: Any = field(
        default="(0.9, 0.99)", metadata={"help": "betas of the moving averages of g and g^2 (StableAdamW's default)"}
    )
    adam_eps: float = field(default=1e-6, metadata={"help": "epsilon of the denominator and of the RMS (its square)"})
    weight_decay: float = field(default=0.01, metadata={"help": "weight decay (decoupled, scaled by the clipped lr)"})
    decouple_lr: bool = field(
        default=False,
        metadata={
            "help": "fully decoupled weight decay (optimi's decouple_lr): each step decays by lr / max_lr * "
            "weight_decay, so --weight-decay is the decay per step at the peak learning rate (ModernBERT: 1e-5)"
        },
    )
    max_lr: Optional[float] = field(
        default=None, metadata={"help": "the peak learning rate of --decouple-lr; default: the largest --lr"}
    )
    no_decay_bias_and_norm: bool = field(
        default=False,
        metadata={"help": "no weight decay on biases and norm weights (every tensor of one dimension), as ModernBERT"},
    )
    lr: list[float] = II("optimization.lr")


@register_optimizer("roberta_ext_stable_adamw", dataclass=StableAdamWConfig)
class FairseqStableAdamW(FairseqOptimizer):
    """fairseq's view of :class:`StableAdamW`: built from ``--adam-betas``, ``--adam-eps``,
    ``--weight-decay``, ``--decouple-lr``, ``--max-lr``, ``--no-decay-bias-and-norm`` and ``--lr``."""

    def __init__(self, cfg: StableAdamWConfig, params: Sequence[torch.Tensor]) -> None:
        super().__init__(cfg)
        params = list(params)
        groups = decay_groups(params, cfg.weight_decay) if cfg.no_decay_bias_and_norm else params
        self._optimizer = StableAdamW(groups, **self.optimizer_config)

    @property
    def optimizer_config(self) -> dict[str, Any]:
        """The options that override a checkpoint's on resume (fairseq's contract); weight decay
        is left to each group (:meth:`load_state_dict`)."""
        lrs = list(self.cfg.lr) if isinstance(self.cfg.lr, Iterable) else [self.cfg.lr]
        return {
            "lr": lrs[0],
            "betas": parse_betas(self.cfg.adam_betas),
            "eps": self.cfg.adam_eps,
            "weight_decay": self.cfg.weight_decay,
            "decouple_lr": self.cfg.decouple_lr,
            "max_lr": self.cfg.max_lr if self.cfg.max_lr is not None else max(lrs),
        }

    def load_state_dict(self, state_dict: dict[str, Any], optimizer_overrides: Optional[dict[str, Any]] = None) -> None:
        """fairseq's loading, with a message naming the option when the checkpoint's groups are not
        these (``--no-decay-bias-and-norm`` changed), and the no-decay group kept without decay
        when the overrides set a weight decay."""
        saved, ours = len(state_dict["param_groups"]), len(self.optimizer.param_groups)
        if saved != ours:
            raise ValueError(
                f"the checkpoint's optimizer state has {saved} parameter group(s) and this StableAdamW {ours}: "
                "--no-decay-bias-and-norm differs from the run that wrote it; keep it as it was, or pass "
                "--reset-optimizer"
            )
        without_decay = [group["weight_decay"] == 0.0 for group in self.optimizer.param_groups]
        super().load_state_dict(state_dict, optimizer_overrides)
        for group, kept in zip(self.optimizer.param_groups, without_decay):
            if kept and self.cfg.no_decay_bias_and_norm:
                group["weight_decay"] = 0.0


__all__ = [
    "FairseqStableAdamW",
    "StableAdamW",
    "StableAdamWConfig",
    "debiased_beta",
    "decay_groups",
    "stable_adamw_step",
]
