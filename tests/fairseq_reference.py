"""Build fairseq RoBERTa checkpoints and record fairseq's own hub outputs on them.

Run as a separate process from the repository root (``python -m tests.fairseq_reference OUT_DIR``;
as a module, because a script's folder on ``sys.path`` would let tests/tokenizers shadow HF
``tokenizers``) by the
``fairseq_reference`` fixture, so that the test process itself never imports fairseq:
our side is tested with fairseq, omegaconf and hydra blocked from import.

Every checkpoint is built by fairseq itself (``options.parse_args_and_arch`` ->
``task.build_model``) with random weights, saved in one of the layouts users hold, and
loaded back through ``fairseq.models.roberta.RobertaModel.from_pretrained``. The recorded
outputs of that hub are the golden values the tests compare against.

Layouts: ``modern`` (``cfg`` dict, fairseq 0.12 trainer), ``legacy_args`` (``args``
Namespace only), ``release2019`` (``decoder.`` keys, ``emb_layer_norm``, fused
``in_proj``, legacy non-zip serialisation, an ``mnli`` head), ``dictconfig`` (``cfg`` as an
omegaconf DictConfig, fairseq 0.10), ``preln`` (``--encoder-normalize-before``), ``deep24``
(24 layers, for the 25 hidden states), ``finetuned`` (sentence-prediction data layout with
``input0/`` and ``label/``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch

from tests.bpe_fixtures import build_bpe_files
from tests.reference_texts import FILL_MASK_INPUTS, PAIRS, TEXTS

SMALL = ["--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64", "--encoder-attention-heads", "4"]
LAYOUTS = {
    "modern": dict(extra=["--encoder-layers", "2", *SMALL], seed=1, head=("sentiment", 3)),
    "legacy_args": dict(extra=["--encoder-layers", "2", *SMALL], seed=2, head=None),
    "release2019": dict(extra=["--encoder-layers", "3", *SMALL], seed=3, head=("mnli", 3)),
    "dictconfig": dict(extra=["--encoder-layers", "2", *SMALL], seed=4, head=None),
    "preln": dict(extra=["--encoder-layers", "2", "--encoder-normalize-before", *SMALL], seed=5, head=None),
    "deep24": dict(
        extra=[
            "--encoder-layers",
            "24",
            "--encoder-embed-dim",
            "16",
            "--encoder-ffn-embed-dim",
            "32",
            "--encoder-attention-heads",
            "2",
        ],
        seed=6,
        head=None,
    ),
    "finetuned": dict(extra=["--encoder-layers", "2", *SMALL], seed=7, head=("sentence_classification_head", 2)),
}
LABELS = ["negative", "positive"]


def build(layout: str, spec: dict, out: Path, bpe: tuple[Path, Path, Path]) -> Path:
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from omegaconf import OmegaConf

    encoder_json, vocab_bpe, dict_txt = bpe
    model_dir = out / layout
    data_dir = model_dir / "input0" if layout == "finetuned" else model_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "dict.txt").write_bytes(dict_txt.read_bytes())
    task_name = "masked_lm"
    if layout == "finetuned":
        (model_dir / "label").mkdir(exist_ok=True)
        (model_dir / "label" / "dict.txt").write_text("".join(f"{label} 10\n" for label in LABELS))
        task_name = "sentence_prediction"
    torch.manual_seed(spec["seed"])
    argv = [str(model_dir), "--task", task_name, "--arch", "roberta_base", "--max-positions", "64", *spec["extra"]]
    if task_name == "sentence_prediction":
        argv += ["--num-classes", str(len(LABELS)), "--criterion", "sentence_prediction"]
    else:
        argv += ["--tokens-per-sample", "64"]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    model = task.build_model(cfg.model)
    if spec["head"]:
        model.register_classification_head(spec["head"][0], num_classes=spec["head"][1])
    with torch.no_grad():
        # Random weights at BERT's init give nearly uniform LM probabilities; spread them so
        # that fill_mask's ranking is well defined, and keep special symbols out of the top.
        lm_bias = model.encoder.lm_head.bias
        lm_bias.normal_(0.0, 3.0)
        lm_bias[: task.source_dictionary.nspecial] = -30.0
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)

    state_dict = model.state_dict()
    if layout == "release2019":
        state_dict = to_2019_layout(state_dict)
    cfg_container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    # What fairseq's trainer writes besides the weights (numpy scalars included).
    training_state = {
        "optimizer_history": [
            {
                "criterion_name": "MaskedLmLoss",
                "optimizer_name": "FairseqAdam",
                "lr_scheduler_state": {"best": np.float64(2.5)},
                "num_updates": 10,
            }
        ],
        "extra_state": {
            "train_iterator": {"epoch": 1, "iterations_in_epoch": 10},
            "best": np.float64(2.5),
            "previous_training_time": 1.5,
        },
    }
    if layout in ("legacy_args", "release2019"):
        state = {"args": args, "model": state_dict, **training_state}
    elif layout == "dictconfig":
        cfg_container["model"] = vars(cfg_container["model"])
        state = {"args": None, "cfg": OmegaConf.create(cfg_container), "model": state_dict, **training_state}
    else:
        state = {"args": None, "cfg": cfg_container, "model": state_dict, **training_state}
    torch.save(state, model_dir / "model.pt", _use_new_zipfile_serialization=layout != "release2019")
    return model_dir


def to_2019_layout(state_dict: dict) -> dict:
    """The key layout of the 2019 released RoBERTa files: ``decoder.``, ``emb_layer_norm``,
    q, k and v stacked (in that order) into ``in_proj_weight``/``in_proj_bias``."""
    old = {}
    for key, tensor in state_dict.items():
        if key.endswith(".version") or ".self_attn.k_proj." in key or ".self_attn.v_proj." in key:
            continue
        if ".self_attn.q_proj." in key:
            tensor = torch.cat([state_dict[key.replace("q_proj", name)] for name in ("q_proj", "k_proj", "v_proj")])
            key = key.replace("q_proj.", "in_proj_")
        old[key.replace("encoder.", "decoder.", 1).replace(".layernorm_embedding.", ".emb_layer_norm.")] = tensor
    return old


def record(model_dir: Path, encoder_json: Path, vocab_bpe: Path, impl: str) -> dict:
    """Call every hub method on the model in ``model_dir`` with ``impl`` ("fairseq" or "ours")."""
    if impl == "fairseq":
        from fairseq.models.roberta import RobertaModel

        from_pretrained = RobertaModel.from_pretrained
    else:
        from roberta_ext import from_pretrained
    hub = from_pretrained(
        str(model_dir), "model.pt", ".", gpt2_encoder_json=str(encoder_json), gpt2_vocab_bpe=str(vocab_bpe)
    )
    hub.eval()
    ref: dict = {"encode": [], "decode": [], "features": [], "pairs": [], "pairs_no_sep": [], "fill_mask": []}
    with torch.no_grad():
        for text in TEXTS:
            tokens = hub.encode(text)
            ref["encode"].append(tokens.tolist())
            ref["decode"].append(hub.decode(tokens))
        for a, b in PAIRS:
            ref["pairs"].append(hub.encode(a, b).tolist())
            ref["pairs_no_sep"].append(hub.encode(a, b, no_separator=True).tolist())
            both = hub.encode(a, b)
            ref.setdefault("decode_pairs", []).append(hub.decode(both))
        sample = [hub.encode(t) for t in TEXTS[:6]]
        for tokens in sample:
            ref["features"].append(hub.extract_features(tokens).squeeze(0))
        ref["all_hiddens"] = [h.squeeze(0) for h in hub.extract_features(sample[1], return_all_hiddens=True)]
        padded = torch.nn.utils.rnn.pad_sequence(
            sample, batch_first=True, padding_value=hub.task.source_dictionary.pad()
        )
        ref["padded_tokens"] = padded
        ref["padded_features"] = hub.extract_features(padded)
        heads = list(hub.model.classification_heads)
        ref["heads"] = heads
        ref["predict"] = {h: hub.predict(h, padded) for h in heads}
        ref["predict_logits"] = {h: hub.predict(h, padded, return_logits=True) for h in heads}
        # fairseq's sentence_prediction task has no mask_idx, so its hub cannot fill_mask.
        if not (model_dir / "input0").is_dir():
            ref["fill_mask"] = [hub.fill_mask(masked, topk=3) for masked in FILL_MASK_INPUTS]
        ref["num_layers"] = len(hub.model.encoder.sentence_encoder.layers)
    return ref


def main() -> None:
    # The files are made by this script; loading them with fairseq's own torch.load call (which
    # torch 2.13 restricts to weights) is safe here and is the reference path. Set in main, not
    # at import: tests import LAYOUTS, and their process must keep torch's strict default.
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--impl",
        choices=["fairseq", "ours"],
        default="fairseq",
        help="fairseq: build the checkpoints and record fairseq's outputs; "
        "ours: record our hub's outputs on checkpoints built before",
    )
    args = parser.parse_args()
    out: Path = args.out_dir
    if args.impl == "fairseq":
        out.mkdir(parents=True, exist_ok=True)
        bpe = build_bpe_files(out / "bpe")
        manifest = {"encoder_json": str(bpe[0]), "vocab_bpe": str(bpe[1]), "models": {}}
        for name, spec in LAYOUTS.items():
            manifest["models"][name] = str(build(name, spec, out, bpe))
        (out / "manifest.json").write_text(json.dumps(manifest))
    manifest = json.loads((out / "manifest.json").read_text())
    for model_dir in manifest["models"].values():
        outputs = record(Path(model_dir), Path(manifest["encoder_json"]), Path(manifest["vocab_bpe"]), args.impl)
        torch.save(outputs, Path(model_dir) / f"outputs_{args.impl}.pt")


if __name__ == "__main__":
    main()
