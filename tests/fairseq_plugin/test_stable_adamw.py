"""StableAdamW (``--optimizer roberta_ext_stable_adamw``): the update rule of the paper written out
step by step, torch's AdamW wherever no update is clipped, the groups of ``--no-decay-bias-and-norm``
and fairseq's half-precision wrappers. Its state through a fairseq checkpoint (a run resumed mid-way
ends where an uninterrupted one does) is tested in ``test_wsd_schedule.py``, with the schedule.

torch-optimi's ``StableAdamW`` (0.3.3, what answerdotai/ModernBERT trains with) is not a peer installed
here; compared by hand over 30 steps with two spikes, the two agreed to 3e-6 (relative, float32).
"""

from __future__ import annotations

import io
import math
import re

import pytest
import torch

from tests.peers import require

require("fairseq", "the optimizer is a fairseq component")
omegaconf = require("omegaconf", "fairseq's configs")

from fairseq import optim  # noqa: E402
from fairseq.dataclass.configs import FairseqConfig  # noqa: E402

from roberta_ext.fairseq_plugin.optim import (  # noqa: E402
    FairseqStableAdamW,
    StableAdamW,
    StableAdamWConfig,
    decay_groups,
    parse_betas,
)
from roberta_ext.families import preset  # noqa: E402
from roberta_ext.modeling import RobertaModel  # noqa: E402

SHAPES = [(6, 5), (5,), (3, 2, 4)]


def gradients(steps: int, *, spikes: tuple[int, ...] = (), seed: int = 0) -> list[list[torch.Tensor]]:
    """Random float64 gradients per step for :data:`SHAPES` (one entry of the first tensor always 0),
    50 times larger at the ``spikes`` steps (1-based)."""
    generator = torch.Generator().manual_seed(seed)
    steps_grads = []
    for step in range(1, steps + 1):
        grads = [torch.randn(shape, generator=generator, dtype=torch.float64) for shape in SHAPES]
        grads[0][0, 0] = 0.0
        steps_grads.append([g * 50.0 if step in spikes else g for g in grads])
    return steps_grads


def paper_update_rule(weights, steps_grads, *, lr, betas, eps, weight_decay, max_lr=None):
    """Wortsman et al. (2023), StableAdamW, as the paper writes it, in float64: Adam's moments with
    their bias corrections, ``RMS = sqrt(mean(g^2 / max(v_hat, eps^2)))``, the learning rate
    ``lr / max(1, RMS)`` for the step and the decoupled weight decay (``max_lr``: divided by it, as
    optimi's ``decouple_lr``). Returns the weights and each step's RMS per tensor."""
    beta1, beta2 = betas
    weights = [w.clone() for w in weights]
    first = [torch.zeros_like(w) for w in weights]
    second = [torch.zeros_like(w) for w in weights]
    rms_seen = []
    for t, grads in enumerate(steps_grads, start=1):
        rms_step = []
        for i, g in enumerate(grads):
            first[i] = beta1 * first[i] + (1 - beta1) * g
            second[i] = beta2 * second[i] + (1 - beta2) * g * g
            m_hat = first[i] / (1 - beta1**t)
            v_hat = second[i] / (1 - beta2**t)
            rms = math.sqrt(float((g * g / torch.clamp(v_hat, min=eps**2)).mean()))
            eta = lr / max(1.0, rms)
            decay = eta * weight_decay / max_lr if max_lr else eta * weight_decay
            weights[i] = weights[i] - decay * weights[i] - eta * m_hat / (v_hat.sqrt() + eps)
            rms_step.append(rms)
        rms_seen.append(rms_step)
    return weights, rms_seen


SETTINGS = [
    dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-6, weight_decay=0.0),
    dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.1),
    dict(lr=8e-4, betas=(0.9, 0.98), eps=1e-6, weight_decay=1e-5, decouple_lr=True),  # ModernBERT's
    dict(lr=4e-3, betas=(0.8, 0.95), eps=1e-8, weight_decay=1e-2, decouple_lr=True, max_lr=1e-2),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_papers_update_rule_step_by_step(settings, dtype):
    steps_grads = gradients(9, spikes=(4, 7))
    start = [torch.randn(shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64) for shape in SHAPES]
    params = [torch.nn.Parameter(w.to(dtype, copy=True)) for w in start]
    optimizer = StableAdamW(params, **settings)
    for grads in steps_grads:
        for param, grad in zip(params, grads):
            param.grad = grad.to(dtype)
        optimizer.step()
    max_lr = settings.get("max_lr", settings["lr"]) if settings.get("decouple_lr") else None
    rule = {k: v for k, v in settings.items() if k not in ("decouple_lr", "max_lr")}
    expected, rms_seen = paper_update_rule(start, steps_grads, max_lr=max_lr, **rule)
    # Both branches ran: the spikes were clipped (RMS > 1), the steps after them were not.
    assert all(rms > 1.5 for rms in rms_seen[3]) and all(rms < 1 for rms in rms_seen[4])
    tolerance = 1e-12 if dtype == torch.float64 else 2e-6
    for param, want in zip(params, expected):
        torch.testing.assert_close(param.detach().double(), want, rtol=tolerance, atol=tolerance)


def test_without_clipping_it_is_torchs_adamw():
    """Gradients that shrink every step keep ``g^2 / v_hat`` below 1: no update is clipped, and
    StableAdamW is AdamW step for step (with its decoupled weight decay)."""
    torch.manual_seed(0)
    start = [torch.randn(shape) for shape in SHAPES]
    directions = [torch.randn(shape) for shape in SHAPES]
    ours = [torch.nn.Parameter(w.clone()) for w in start]
    peers = [torch.nn.Parameter(w.clone()) for w in start]
    settings = dict(lr=1e-2, betas=(0.9, 0.98), eps=1e-6, weight_decay=0.05)
    optimizers = StableAdamW(ours, **settings), torch.optim.AdamW(peers, **settings)
    for step in range(12):
        for params in (ours, peers):
            for param, direction in zip(params, directions):
                param.grad = direction * 0.8**step
        for optimizer in optimizers:
            optimizer.step()
    for mine, peer in zip(ours, peers):
        torch.testing.assert_close(mine, peer, rtol=1e-6, atol=1e-7)
    assert not torch.equal(ours[0], start[0])


# ------------------------------------------------------------------ through fairseq


def fairseq_config(**optimizer_options) -> omegaconf.DictConfig:
    """fairseq's whole config with this optimizer, as fairseq-train builds it from its flags."""
    cfg = omegaconf.OmegaConf.structured(FairseqConfig)
    options = StableAdamWConfig(**optimizer_options)
    options._name = "roberta_ext_stable_adamw"  # the registry's choice, as fairseq's --optimizer sets it
    cfg.optimizer = omegaconf.OmegaConf.structured(options)
    cfg.optimization.lr = [0.01]
    return cfg


@pytest.mark.parametrize("family", ["roberta", "bert", "electra", "modernbert"])
def test_the_no_decay_group_is_the_biases_and_norms(family):
    """fairseq hands the optimizer tensors without names: the rule "one dimension" picks exactly
    the biases and the norms' tensors of every family's model (with its LM head)."""
    model = RobertaModel(preset(f"{family}-tiny"))
    names = {id(p): name for name, p in model.named_parameters()}
    decayed, kept = (group["params"] for group in decay_groups(list(model.parameters()), 0.1))
    kept_names = sorted(names[id(p)] for p in kept)
    assert kept_names == sorted(n for n in names.values() if n.endswith("bias") or "norm" in n), kept_names
    assert not [names[id(p)] for p in decayed if "norm" in names[id(p)] or names[id(p)].endswith("bias")]


@pytest.mark.parametrize("no_decay", [True, False])
def test_no_decay_bias_and_norm_from_fairseqs_config(no_decay):
    """Built by fairseq's registry from its config: with zero gradients only the weight decay moves
    the weights, by (1 - lr * weight_decay) per step, and not those of the no-decay group."""
    model = RobertaModel(preset("modernbert-tiny"))
    params = list(model.parameters())
    start = [p.detach().clone() for p in params]
    cfg = fairseq_config(weight_decay=0.1, no_decay_bias_and_norm=no_decay, adam_betas="(0.9,0.98)")
    optimizer = optim.build_optimizer(cfg.optimizer, params)
    assert isinstance(optimizer, FairseqStableAdamW)
    assert [g["betas"] for g in optimizer.param_groups] == [(0.9, 0.98)] * (2 if no_decay else 1)
    for _ in range(3):
        for p in params:
            p.grad = torch.zeros_like(p)
        optimizer.step()
    for param, before in zip(params, start):
        factor = 1.0 if (no_decay and param.dim() < 2) else (1 - 0.01 * 0.1) ** 3
        torch.testing.assert_close(param.detach(), before * factor)


def test_a_checkpoint_of_other_groups_names_the_option():
    model = torch.nn.Linear(3, 2)
    with_groups = optim.build_optimizer(fairseq_config(no_decay_bias_and_norm=True).optimizer, list(model.parameters()))
    one_group = optim.build_optimizer(fairseq_config().optimizer, list(model.parameters()))
    with pytest.raises(ValueError, match="--no-decay-bias-and-norm differs .* --reset-optimizer"):
        one_group.load_state_dict(with_groups.state_dict())


def test_adam_betas_are_read_not_evaluated():
    assert parse_betas("(0.9, 0.98)") == (0.9, 0.98)
    with pytest.raises(ValueError, match="--adam-betas .*__import__.* is not two numbers"):
        parse_betas("__import__('os').getcwd()")
    with pytest.raises(ValueError, match="not two numbers"):
        parse_betas("(0.9,)")


def half_step(optimizer, params: list[torch.Tensor], xs: list[torch.Tensor]) -> None:
    """One step of fairseq's wrapper: a loss whose gradient is ``x`` for each weight, scaled by the
    wrapper's loss scaler, then the step (which unscales)."""
    optimizer.zero_grad()
    optimizer.backward(sum((p.float() * x).sum() for p, x in zip(params, xs)))
    optimizer.step()


def reference(start: list[torch.Tensor], xs_per_step: list[list[torch.Tensor]], **settings) -> list[torch.Tensor]:
    params = [torch.nn.Parameter(w.float()) for w in start]
    optimizer = StableAdamW(params, **settings)
    for xs in xs_per_step:
        for param, x in zip(params, xs):
            param.grad = x.clone()
        optimizer.step()
    return [p.detach() for p in params]


def half_setup(dtype: torch.dtype):
    """fp16/bf16 weights and gradients of few bits, exact in half precision and under loss scaling."""
    generator = torch.Generator().manual_seed(0)
    start = [torch.randn(shape, generator=generator).to(dtype) for shape in SHAPES]
    xs_per_step = [[(torch.randn(s, generator=generator) * 8).round() / 8 for s in SHAPES] for _ in range(3)]
    return start, xs_per_step


def test_fp16_master_weights_no_flatten():
    """``--fp16 --fp16-no-flatten-grads``: fairseq's float32 master copy is stepped by StableAdamW."""
    start, xs_per_step = half_setup(torch.float16)
    params = [torch.nn.Parameter(w.clone()) for w in start]
    cfg = fairseq_config(weight_decay=0.01)
    cfg.common.fp16, cfg.common.fp16_no_flatten_grads = True, True
    optimizer = optim.FP16Optimizer.build_optimizer(cfg, params)
    for xs in xs_per_step:
        half_step(optimizer, params, xs)
    for param, want in zip(params, reference(start, xs_per_step, lr=0.01, weight_decay=0.01)):
        torch.testing.assert_close(param.detach(), want.half())


def test_fp16_flat_master_weights_are_refused_by_fairseq(monkeypatch):
    """Plain ``--fp16`` flattens every weight into one tensor, which would clip all updates as one:
    fairseq refuses, naming ``--fp16-no-flatten-grads``. (fairseq puts the flat copy on the current
    CUDA device, which a CPU-only test fakes.)"""
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    cfg = fairseq_config()
    cfg.common.fp16 = True
    params = [torch.nn.Parameter(torch.zeros(3, dtype=torch.float16))]
    with pytest.raises(RuntimeError, match="please set --fp16-no-flatten-grads"):
        optim.FP16Optimizer.build_optimizer(cfg, params)


def through_a_file(state: dict) -> dict:
    """``state`` written and read back as a checkpoint is (tensors, ints, tuples: torch's safe loader)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_memory_efficient_half_weights_keep_float32_moments_across_a_checkpoint(dtype):
    """``--memory-efficient-fp16`` (and bf16): the half-precision weights are stepped in float32 and
    their moments stay float32, also when the wrapper's state is saved and loaded again; the run
    then continues as if it had not stopped."""
    start, xs_per_step = half_setup(dtype)
    cfg = fairseq_config(weight_decay=0.01)
    cfg.common.fp16, cfg.common.memory_efficient_fp16 = dtype == torch.float16, dtype == torch.float16
    cfg.common.bf16, cfg.common.memory_efficient_bf16 = dtype == torch.bfloat16, dtype == torch.bfloat16
    params = [torch.nn.Parameter(w.clone()) for w in start]
    optimizer = optim.MemoryEfficientFP16Optimizer.build_optimizer(cfg, params)
    for xs in xs_per_step[:2]:
        half_step(optimizer, params, xs)
    want = reference(start, xs_per_step[:2], lr=0.01, weight_decay=0.01)
    for param, expected in zip(params, want):
        torch.testing.assert_close(param.detach(), expected.to(dtype))
    saved = through_a_file(optimizer.state_dict())

    resumed_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = optim.MemoryEfficientFP16Optimizer.build_optimizer(cfg, resumed_params)
    resumed.load_state_dict(saved)
    for old, new in zip(params, resumed_params):
        for name in ("exp_avg", "exp_avg_sq"):
            moment = resumed.optimizer.state[new][name]
            assert moment.dtype == torch.float32
            assert torch.equal(moment, optimizer.optimizer.state[old][name])
        assert resumed.optimizer.state[new]["step"] == 2
    half_step(optimizer, params, xs_per_step[2])
    half_step(resumed, resumed_params, xs_per_step[2])
    for old, new in zip(params, resumed_params):
        assert torch.equal(old, new)


def test_half_weights_keep_float32_moments_through_torchs_loading():
    """Outside fairseq's wrappers (whose memory-efficient loader restores the state itself), torch's
    ``load_state_dict`` casts the state to each weight's dtype: StableAdamW's keeps the moments float32."""
    generator = torch.Generator().manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(shape, generator=generator).to(torch.bfloat16)) for shape in SHAPES]
    optimizer = StableAdamW(params, lr=0.01)
    for _ in range(2):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator).to(torch.bfloat16)
        optimizer.step()
    saved = through_a_file(optimizer.state_dict())
    resumed = StableAdamW([torch.nn.Parameter(p.detach().clone()) for p in params], lr=0.01)
    resumed.load_state_dict(saved)
    for old, new in zip(params, resumed.param_groups[0]["params"]):
        for name in ("exp_avg", "exp_avg_sq"):
            assert resumed.state[new][name].dtype == torch.float32
            assert torch.equal(resumed.state[new][name], optimizer.state[old][name])


# ------------------------------------------------------------------ its options, their bounds and its loading


def one_step(optimizer: StableAdamW, weight: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``weight`` after one step of ``optimizer`` with the gradient ``grad``."""
    weight.grad = grad
    optimizer.step()
    return weight.detach()


def test_the_default_weight_decay_is_torchs_adamws():
    """With a zero gradient the moments stay zero and only the weight decay moves the weight."""
    ours, peer = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(3))
    peer_optimizer = torch.optim.AdamW([peer], lr=0.1)
    peer.grad = torch.zeros(3)
    peer_optimizer.step()
    assert torch.equal(one_step(StableAdamW([ours], lr=0.1), ours, torch.zeros(3)), peer.detach())
    torch.testing.assert_close(ours.detach(), torch.full((3,), 1 - 0.1 * 1e-2))


def test_a_learning_rate_of_zero_is_taken_and_leaves_the_weights():
    weight = torch.nn.Parameter(torch.ones(3))
    optimizer = StableAdamW([weight], lr=0.0)
    assert torch.equal(one_step(optimizer, weight, torch.tensor([1.0, -2.0, 3.0])), torch.ones(3))


def test_betas_of_zero_are_taken_and_make_the_step_the_gradients_sign():
    """betas (0, 0): the moments are the last gradient and its square, ``RMS = 1``: ``lr * sign(g)``."""
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = StableAdamW([weight], lr=0.1, betas=(0.0, 0.0), weight_decay=0.0)
    for grad in (torch.tensor([2.0, -0.5]), torch.tensor([-4.0, -1.0])):
        one_step(optimizer, weight, grad)
    torch.testing.assert_close(weight.detach(), torch.tensor([1.0, 1.2]))


def test_an_eps_of_zero_is_taken():
    weight = torch.nn.Parameter(torch.ones(2))
    optimizer = StableAdamW([weight], lr=0.1, eps=0.0, weight_decay=0.0)
    torch.testing.assert_close(one_step(optimizer, weight, torch.tensor([3.0, -0.25])), torch.tensor([0.9, 1.1]))


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(lr=-1.0), "StableAdamW: the learning rate must be >= 0, got -1.0"),
        (dict(lr=0.1, betas=(0.9,)), "StableAdamW: betas must be two numbers in [0, 1), got (0.9,)"),
        (dict(lr=0.1, betas=(0.9, 0.9, 0.9)), "StableAdamW: betas must be two numbers in [0, 1), got (0.9, 0.9, 0.9)"),
        (dict(lr=0.1, betas=[0.9, 1.0]), "StableAdamW: betas must be two numbers in [0, 1), got (0.9, 1.0)"),
        (dict(lr=0.1, betas=(1.0, 0.99)), "StableAdamW: betas must be two numbers in [0, 1), got (1.0, 0.99)"),
        (dict(lr=0.1, betas=(-0.1, 0.99)), "StableAdamW: betas must be two numbers in [0, 1), got (-0.1, 0.99)"),
        (dict(lr=0.1, eps=-1e-6), "StableAdamW: eps and weight_decay must be >= 0, got eps=-1e-06, weight_decay=0.01"),
        (
            dict(lr=0.1, weight_decay=-0.1),
            "StableAdamW: eps and weight_decay must be >= 0, got eps=1e-06, weight_decay=-0.1",
        ),
        (
            dict(lr=0.1, decouple_lr=True, max_lr=0.0),
            "StableAdamW: decouple_lr needs a max_lr > 0 (the peak learning rate), got 0.0",
        ),
        (
            dict(lr=0.0, decouple_lr=True),
            "StableAdamW: decouple_lr needs a max_lr > 0 (the peak learning rate), got 0.0",
        ),
    ],
)
def test_options_out_of_bounds_are_refused_with_their_values(settings, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        StableAdamW([torch.nn.Parameter(torch.ones(2))], **settings)


def trained(params: list[torch.nn.Parameter], *, steps: int = 2) -> StableAdamW:
    """A StableAdamW after ``steps`` steps of the parameters that have a gradient (those of more than
    one element; the others keep no state)."""
    generator = torch.Generator().manual_seed(0)
    optimizer = StableAdamW(params, lr=0.01)
    for _ in range(steps):
        for param in params:
            param.grad = torch.randn(param.shape, generator=generator).to(param.dtype) if param.numel() > 1 else None
        optimizer.step()
    return optimizer


def test_a_parameter_without_state_in_the_checkpoint_is_loaded_without_state():
    params = [torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(1))]
    optimizer = trained(params)
    resumed_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = StableAdamW(resumed_params, lr=0.01)
    resumed.load_state_dict(through_a_file(optimizer.state_dict()))
    assert torch.equal(resumed.state[resumed_params[0]]["exp_avg"], optimizer.state[params[0]]["exp_avg"])
    assert not resumed.state[resumed_params[1]]


def test_moments_saved_in_another_dtype_are_loaded_in_the_compute_dtype():
    """A checkpoint of bf16 weights whose moments are bf16 (as torch's AdamW keeps them): loaded as
    float32, the dtype StableAdamW steps bf16 weights in."""
    params = [torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))]
    saved = trained(params).state_dict()
    for name in ("exp_avg", "exp_avg_sq"):
        saved["state"][0][name] = saved["state"][0][name].to(torch.bfloat16)
    resumed_params = [torch.nn.Parameter(params[0].detach().clone())]
    resumed = StableAdamW(resumed_params, lr=0.01)
    resumed.load_state_dict(saved)
    for name in ("exp_avg", "exp_avg_sq"):
        moment = resumed.state[resumed_params[0]][name]
        assert moment.dtype == torch.float32
        assert torch.equal(moment, saved["state"][0][name].float())


def test_moments_are_loaded_onto_the_parameters_device():
    """A checkpoint read to the CPU, loaded for weights on another device (``meta`` here, as any
    other): the moments go where the weights are."""
    saved = trained([torch.nn.Parameter(torch.ones(3))]).state_dict()
    resumed_params = [torch.nn.Parameter(torch.ones(3, device="meta"))]
    resumed = StableAdamW(resumed_params, lr=0.01)
    resumed.load_state_dict(saved)
    for name in ("exp_avg", "exp_avg_sq"):
        assert resumed.state[resumed_params[0]][name].device == torch.device("meta")


def test_betas_as_hydras_list_are_read_with_their_interpolations_resolved():
    assert parse_betas(omegaconf.OmegaConf.create([0.9, 0.98])) == (0.9, 0.98)
    config = omegaconf.OmegaConf.create({"b2": 0.95, "betas": [0.9, "${b2}"]})  # a config not yet resolved
    assert parse_betas(config.betas) == (0.9, 0.95)


def test_betas_as_hydras_list_with_a_missing_value_are_refused_naming_the_option():
    betas = omegaconf.OmegaConf.create([0.9, "???"])
    message = "--adam-betas [0.9, '???'] is not two numbers such as '(0.9,0.98)'"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        parse_betas(betas)


@pytest.mark.parametrize(
    "no_decay, weight_decay, overrides, weight_decays, lr",
    [
        (True, 0.1, None, [0.1, 0.0], 0.01),
        (True, 0.1, {"weight_decay": 0.2}, [0.2, 0.0], 0.01),
        (True, 0.1, {"lr": 0.5}, [0.1, 0.0], 0.5),
        (False, 0.0, {"weight_decay": 0.2}, [0.2], 0.01),
        (False, 0.1, {"weight_decay": 0.0, "lr": 0.5}, [0.0], 0.5),
    ],
)
def test_a_checkpoint_loaded_through_fairseq_takes_its_overrides_and_keeps_the_no_decay_group(
    no_decay, weight_decay, overrides, weight_decays, lr
):
    """fairseq's ``--optimizer-overrides`` apply to every group, except that the group of
    ``--no-decay-bias-and-norm`` stays without weight decay; without the option, the one group
    takes them whatever its weight decay was."""
    model = torch.nn.Linear(3, 2)
    cfg = fairseq_config(weight_decay=weight_decay, no_decay_bias_and_norm=no_decay)
    saved = optim.build_optimizer(cfg.optimizer, list(model.parameters())).state_dict()
    resumed = optim.build_optimizer(cfg.optimizer, list(model.parameters()))
    resumed.load_state_dict(saved, overrides)
    assert [group["weight_decay"] for group in resumed.param_groups] == weight_decays
    assert [group["lr"] for group in resumed.param_groups] == [lr] * len(weight_decays)
