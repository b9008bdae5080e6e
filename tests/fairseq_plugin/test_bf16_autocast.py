"""``--bf16-autocast``: the plugin's models run their forward under ``torch.autocast`` in bfloat16
while fairseq's trainer, the weights and the losses stay float32. CPU autocast supports bf16, so
all of it runs here: the matrix products run in bf16 (checked by hooks on every linear layer),
every output reaches the criterion in float32, fairseq-train trains with it to the loss curve of
the float32 run, and fairseq's own precision options are refused alongside it."""

from __future__ import annotations

import json
import random
import re
from functools import partial
from types import SimpleNamespace

import pytest
import torch

from tests.conftest import REPO
from tests.peers import require

require("fairseq", "the tests run the plugin's models and fairseq-train")

from fairseq import options  # (after the peer check)

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the models and architectures)
from roberta_ext.fairseq_plugin.electra import ElectraExtPretrainingModel
from roberta_ext.fairseq_plugin.models import RobertaExtModel
from roberta_ext.fairseq_plugin.spanbert import SpanBertExtPretrainingModel
from roberta_ext.families import electra, preset, spanbert
from roberta_ext.quickstart import stdlib_docstrings
from roberta_ext.tokenizers import GPT2BPE
from tests.fairseq_plugin import tools

PAD = 1


class LinearDtypes:
    """Forward hooks on every ``nn.Linear`` of a module: the dtypes their outputs came out in."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.dtypes: list[torch.dtype] = []
        self.handles = [
            m.register_forward_hook(lambda _m, _i, out: self.dtypes.append(out.dtype))
            for m in module.modules()
            if isinstance(m, torch.nn.Linear)
        ]

    def __enter__(self) -> LinearDtypes:
        return self

    def __exit__(self, *exc: object) -> None:
        for handle in self.handles:
            handle.remove()


def tiny(model_class=RobertaExtModel, *, bf16: bool, **kwargs):
    torch.manual_seed(0)
    cfg = preset("tiny", bf16_autocast=bf16)
    args = SimpleNamespace(generator_fraction=0.5, sbo_max_span_length=10, sbo_position_dim=None)
    return model_class(args, cfg, **kwargs).train()


def batch(lengths=(9, 4, 7)) -> torch.Tensor:
    tokens = torch.full((len(lengths), max(lengths)), PAD)
    for i, n in enumerate(lengths):
        tokens[i, :n] = torch.randint(4, 60, (n,), generator=torch.Generator().manual_seed(i))
        tokens[i, 0], tokens[i, n - 1] = 0, 2
    return tokens


def floats(value) -> list[torch.Tensor]:
    """Every floating-point tensor in a model's output (tuples, dicts, lists, dataclasses)."""
    if isinstance(value, torch.Tensor):
        return [value] if value.is_floating_point() else []
    if isinstance(value, dict):
        return [t for v in value.values() for t in floats(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in floats(v)]
    if hasattr(value, "__dataclass_fields__"):
        return [t for name in value.__dataclass_fields__ for t in floats(getattr(value, name))]
    return []


@pytest.mark.parametrize(
    "call",
    [
        {"features_only": False},  # masked-LM logits
        {"features_only": True, "return_all_hiddens": True},
        {"classification_head_name": "head"},
        {"token_head_name": "tags"},
    ],
    ids=["lm", "hiddens", "classification", "tokens"],
)
def test_products_run_in_bf16_and_outputs_reach_the_criterion_in_fp32(call):
    tokens = batch()
    outputs = {}
    for bf16 in (False, True):
        model = tiny(bf16=bf16)
        model.register_classification_head("head", num_classes=3)
        model.register_token_head("tags", num_labels=5)
        with LinearDtypes(model) as seen:
            outputs[bf16] = model(tokens, **call)
        assert seen.dtypes and set(seen.dtypes) == {torch.bfloat16 if bf16 else torch.float32}
        assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay float32
    for ours, reference in zip(floats(outputs[True]), floats(outputs[False]), strict=True):
        assert ours.dtype == torch.float32
        assert torch.nn.functional.cosine_similarity(ours.flatten(), reference.flatten(), dim=0) > 0.99


def test_gradients_reach_float32_weights():
    model = tiny(bf16=True)
    tokens = batch()
    logits, _ = model(tokens, masked_tokens=tokens.ne(PAD))
    torch.nn.functional.cross_entropy(logits, tokens[tokens.ne(PAD)]).backward()
    grad = model.encoder.sentence_encoder.layers[0].fc1.weight.grad
    assert grad is not None and grad.dtype == torch.float32 and grad.abs().sum() > 0


def test_electra_and_spanbert_pretraining_steps_run_under_autocast():
    """Their pretraining forward passes bypass ``RobertaExtModel.forward``: the autocast is on the
    model's call, so it covers them, and their outputs (dataclasses) come back float32."""
    tokens = batch()
    targets = torch.full_like(tokens, PAD)
    targets[:, 1:3] = tokens[:, 1:3]  # two masked positions per row, a span
    steps = [
        (ElectraExtPretrainingModel, {"pretraining_options": {"disallowed_ids": (PAD,)}}, electra.ElectraOutput),
        (SpanBertExtPretrainingModel, {}, spanbert.SpanBertOutput),
    ]
    for model_class, kwargs, output_class in steps:
        model = tiny(model_class, bf16=True)
        with LinearDtypes(model) as seen:
            output = model(tokens, pretraining_targets=targets, **kwargs)
        assert isinstance(output, output_class)
        assert torch.bfloat16 in seen.dtypes and torch.float32 not in seen.dtypes, model_class.__name__
        assert all(t.dtype == torch.float32 for t in floats(output)), model_class.__name__


def test_a_model_cast_by_fp16_or_amp_is_refused():
    model = tiny(bf16=True).half()
    with pytest.raises(ValueError, match="weights are torch.float16: do not combine it with --fp16"):
        model(batch())
    model = tiny(bf16=True)
    with torch.autocast("cpu", dtype=torch.float16), pytest.raises(ValueError, match="--amp"):
        model(batch())


def parse(*argv: str) -> object:
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, ["data-bin", "--user-dir", str(REPO / "roberta_ext"), "--task", "roberta_ext_mlm", *argv]
    )


@pytest.mark.parametrize("flag", ["--fp16", "--bf16", "--memory-efficient-fp16", "--amp"])
def test_fairseq_precision_options_are_refused_with_bf16_autocast(flag):
    with pytest.raises(ValueError, match=f"--bf16-autocast does not combine with .*{flag}"):
        parse("--arch", "roberta_ext_base", "--bf16-autocast", flag)
    assert parse("--arch", "roberta_ext_base", "--bf16-autocast").bf16_autocast is True
    assert parse("--arch", "roberta_ext_base", flag).bf16_autocast is False


# ------------------------------------------------------------------------------ fairseq-train

run = partial(tools.run, omp_threads=None)

TRAIN = [
    "--task",
    "roberta_ext_mlm",
    "--criterion",
    "roberta_ext_mlm",
    "--arch",
    "roberta_ext_base",
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "64",
    "--encoder-ffn-embed-dim",
    "128",
    "--encoder-attention-heads",
    "4",
    "--tokens-per-sample",
    "64",
    "--batch-size",
    "16",
    "--user-dir",
    tools.USER_DIR,
    "--cpu",
    "--num-workers",
    "0",
    "--seed",
    "1",
    "--log-format",
    "json",
    "--log-interval",
    "5",
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9,0.98)",
    "--lr",
    "1e-3",
    "--clip-norm",
    "1.0",
    "--max-update",
    "30",
    "--no-save",
    "--disable-validation",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory, bpe_files):
    root = tmp_path_factory.mktemp("bf16_autocast")
    bpe = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)
    docs = [text for text, _ in stdlib_docstrings()]
    random.Random(0).shuffle(docs)
    sentences = [s.strip().replace("\n", " ") for d in docs for s in d.split(". ") if 20 < len(s.strip()) < 160]
    encoded = [" ".join(map(str, bpe.encode(s))) for s in sentences[:1200]]
    (root / "train.bpe").write_text("".join(line + "\n" for line in encoded[100:]), encoding="utf-8")
    (root / "valid.bpe").write_text("".join(line + "\n" for line in encoded[:100]), encoding="utf-8")
    return tools.preprocess(root / "data-bin", root / "train.bpe", root / "valid.bpe", srcdict=bpe_files.dict_txt)


def test_fairseq_train_with_bf16_autocast_follows_the_float32_loss_curve(data):
    """Same seed, same batches, same masks: the bf16-autocast run's loss at every logged interval
    is within a small tolerance of the float32 run's, and both fall. (fairseq's --fp16 cannot run
    on a CPU: its optimizer asks for a CUDA device; the comparison with it is left to the GPU
    benchmark, benchmarks/run.py --device cuda.)"""
    curves = {}
    for name, extra in (("fp32", []), ("bf16_autocast", ["--bf16-autocast"])):
        log = run("fairseq-train", str(data), *TRAIN, *extra)
        assert re.search(rf"bf16_autocast[=': ]+{bool(extra)}", log), log[:3000]  # the model got the option
        curves[name] = [float(r["loss"]) for r in tools.log_records(log)]
        assert len(curves[name]) == 6, log[-3000:]
    fp32, bf16 = curves["fp32"], curves["bf16_autocast"]
    assert fp32[-1] < fp32[0] - 1.0 and bf16[-1] < bf16[0] - 1.0, curves
    # Measured: 10.921, 10.702, 10.372, 10.021, 9.724, 9.525 bits in float32; the same to 0.001 with
    # --bf16-autocast (a tiny model's bf16 logits move the loss by about 1e-4 bits per step).
    assert max(abs(a - b) for a, b in zip(fp32, bf16)) < 0.05, json.dumps(curves)
