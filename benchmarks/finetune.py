"""Padding-free training on fairseq's own engine: ``fairseq-train`` words/s, ours against fairseq's.

Fine-tuning (issue 23, item 3): ``fairseq-train --user-dir roberta_ext --task
roberta_ext_classification --criterion roberta_ext_classification --arch roberta_ext_base``
against fairseq's ``--task sentence_prediction --criterion sentence_prediction --arch
roberta_base``, with the same data, the same flags (the GLUE recipe's: Adam, polynomial decay,
dropout 0.1, ``--init-token 0 --separator-token 2``, ``--batch-size`` examples per update) and
the same seed, both starting from one initial checkpoint (``--restore-file ... --reset-optimizer
--reset-dataloader --reset-meters``): the two models draw their random weights in different
orders, so seeding alone does not give them the same start. fairseq's task shuffles the examples
and batches them in that order, so every batch is padded to its longest row; our encoder runs
its layers on the real tokens only (``roberta_ext.modeling.attention.Packing``). Two length
mixes, built here from the standard library's docstrings (``benchmarks/texts.py``) and a
byte-level BPE learned here (``benchmarks.run.Workspace``), binarized by ``fairseq-preprocess``:

  RTE-like  sentence pairs of 30-300 tokens: a docstring (the premise) and one sentence, from
            the same docstring (label 1) or another one (label 0)
  SST-like  single sentences of 5-60 tokens (label: whether the sentence names code)

at two shapes: ``small`` (4 x 256, FFN 1024, 4 heads) and ``base`` (12 x 768). Words/s is
fairseq's own count, real tokens (``ntokens``: padding excluded on both sides): per run, the
tokens of the logged updates after the first over their seconds (``wpb / wps`` per update, from
``--log-format json --log-interval 1``). Runs alternate (ours, fairseq, ours, ...); each of our
runs is compared with the fairseq run right after it, and the median ratio of the pairs is the
figure. The loss curves are compared update by update: with dropout (the timed runs: the two
sides draw different masks, so they agree only within dropout's noise, measured as how far
fairseq's own curve moves when dropout is switched off) and without dropout (``--dropout 0
--attention-dropout 0``: the same function of the same weights on the same batches, so the two
curves must agree to float rounding).

Pretraining: ``--sample-break-mode complete`` masked-LM (blocks of whole docstrings up to
``--tokens-per-sample``, so they end short of it and batches carry padding), ours
(``roberta_ext_mlm`` task and criterion) against fairseq's ``masked_lm``, words/s as above; then
ours again with ``--pack-documents`` (each docstring of a block attended alone, issue 35). The
two mask differently (ours in the collater), so only the last losses are shown, not compared.

Targets (issue 23): >= 1.6x fairseq's words/s on the RTE-like mix with the same loss curve, and
>= 1.5x on complete-mode pretraining. Other rows are reported without a target.

    .venv/bin/python -m benchmarks.finetune            # ~25 minutes on 2 quiet cores
    .venv/bin/python -m benchmarks.finetune --quick    # tiny shapes, one pair: ~2 minutes
    .venv/bin/python -m benchmarks.finetune --threads 1    # steadier when other work shares the CPUs

Writes a Markdown table and ``benchmarks/results/finetune-cpu-DATE.json`` (``--quick``:
``scratch-finetune-DATE.json``, which git ignores).
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.run import (
    QUICK,
    REPO,
    RESULTS,
    Row,
    Section,
    Workspace,
    bench_machine,
    dictionary_symbols,
    encoder_args,
    encoder_flops,
    fairseq_cli,
    fp32_matmul_rate,
    progress,
    run_command,
    run_section,
    write_results,
)
from benchmarks.texts import docstrings

TARGET_FINETUNE = 1.6  # RTE-like mix
TARGET_PRETRAIN = 1.5  # --sample-break-mode complete
HEAD = "sentence_classification_head"
MAX_POSITIONS = 512


@dataclass(frozen=True)
class Run:
    """One timed comparison: a shape, a batch size, updates per run and pairs of runs."""

    shape: str  # "small", "base" or "tiny"
    batch: int  # examples (fine-tuning) or blocks (pretraining) per update
    updates: int
    pairs: int


@dataclass(frozen=True)
class Plan:
    shapes: dict[str, tuple[int, int]]  # name -> (layers, width)
    finetune: dict[str, tuple[Run, ...]]  # mix -> runs
    loss_check: Run  # without dropout, on each mix
    pretrain: Run
    block: int  # --tokens-per-sample of the pretraining runs
    examples: int  # training examples per mix


FULL = Plan(
    shapes={"small": (4, 256), "base": (12, 768)},
    finetune={
        "RTE-like": (Run("small", 16, 16, 3), Run("base", 16, 5, 2)),
        "SST-like": (Run("small", 32, 16, 3), Run("base", 32, 6, 2)),
    },
    loss_check=Run("small", 16, 16, 1),
    pretrain=Run("small", 16, 12, 3),
    block=512,
    examples=2000,
)
QUICK_PLAN = Plan(
    shapes={"tiny": (2, 128)},
    finetune={"RTE-like": (Run("tiny", 16, 6, 1),), "SST-like": (Run("tiny", 32, 6, 1),)},
    loss_check=Run("tiny", 16, 6, 1),
    pretrain=Run("tiny", 16, 6, 1),
    block=256,
    examples=400,
)


# ------------------------------------------------------------------------- the hardware limit


MASK_PROB = 0.15  # --mask-prob of both pretraining tasks (fairseq's default)


def training_flops_per_token(lengths: Sequence[int], layers: int, width: int, lm_head_vocab: int = 0) -> float:
    """Matrix-product FLOPs of one training step per real token, for sequences of ``lengths``:
    three times the layer stack's forward (:func:`benchmarks.run.encoder_flops`: the forward, and
    the backward's two products per forward product), plus, for masked-LM (``lm_head_vocab``),
    the LM head's dense layer and output projection on the masked share of the tokens, three times
    too. What a padding-free step must compute: padding, dropout, softmax and the optimizer are
    the overhead the share leaves out."""
    tokens = sum(lengths)
    work = 3 * encoder_flops(lengths, layers, width, 4 * width)
    work += 3 * MASK_PROB * tokens * 2 * (width * width + width * lm_head_vocab)
    return work / tokens


def complete_blocks(lengths: Sequence[int], block: int) -> list[int]:
    """Token counts of the blocks ``--sample-break-mode complete`` makes of lines of ``lengths``
    (fairseq's TokenBlockDataset: whole lines while they fit in ``block``; a line alone when longer)
    plus the ``<s>`` ``masked_lm`` prepends to each."""
    blocks, current = [], 0
    for length in lengths:
        if current and current + length > block:
            blocks.append(current)
            current = 0
        current += length
    if current:
        blocks.append(current)
    return [size + 1 for size in blocks]


# ------------------------------------------------------------------------------------- data


@dataclass
class Mix:
    """A ``sentence_prediction`` data folder and the token counts of its training examples."""

    name: str
    folder: Path
    lengths: list[int]  # tokens per training example as the model sees it: <s> ... </s> [</s> ... </s>]

    def padding_share(self, batch: int, updates: int, seed: int = 1) -> float:
        """The share of padding in the first ``updates`` batches fairseq forms: its task shuffles
        the examples with the seed (``SortDataset(sort_order=[shuffle])``) and batches them in
        that order."""
        with _numpy_seed(seed):
            order = np.random.permutation(len(self.lengths))
        lengths = np.asarray(self.lengths)[order][: batch * updates].reshape(-1, batch)
        return float(1 - lengths.sum() / (lengths.max(axis=1) * batch).sum())


class _numpy_seed:
    """fairseq's ``data_utils.numpy_seed``, without importing fairseq into this process."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def __enter__(self) -> None:
        self.state = np.random.get_state()
        np.random.seed(self.seed)

    def __exit__(self, *exc: object) -> None:
        np.random.set_state(self.state)


def sentences_of(doc: str) -> list[str]:
    return [s.strip().rstrip(".") + "." for s in doc.split(". ") if s.strip()]


def build_mixes(ws: Workspace, examples: int) -> dict[str, Mix]:
    """The RTE-like and SST-like folders (``input0/``, ``input1/``, ``label/``, 9:1 train/valid)."""
    from roberta_ext.tokenizers import GPT2BPE

    vocab = ws.vocabulary
    bpe = GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe)
    rng = random.Random(0)
    docs = [(doc, bpe.encode_fairseq_string(doc)) for doc in docstrings()[: 6 * examples]]
    sentences = [
        (index, encoded)
        for index, (doc, _) in enumerate(docs)
        for encoded in (bpe.encode_fairseq_string(s) for s in sentences_of(doc))
    ]

    def size(encoded: str) -> int:
        return len(encoded.split())

    # RTE-like: premise = a docstring, hypothesis = a sentence of it (1) or of another (0);
    # <s> A </s> </s> B </s> holds 30..300 tokens.
    by_doc: dict[int, list[str]] = {}
    for index, encoded in sentences:
        if 4 <= size(encoded) <= 40:
            by_doc.setdefault(index, []).append(encoded)
    short = [s for group in by_doc.values() for s in group]
    pairs = []
    for index, (_, premise) in enumerate(docs):
        if index not in by_doc or size(premise) > 280:
            continue
        label = rng.random() < 0.5
        hypothesis = rng.choice(by_doc[index]) if label else rng.choice(short)
        total = size(premise) + size(hypothesis) + 4
        if 30 <= total <= 300:
            pairs.append(((premise, hypothesis), str(int(label)), total))
    # SST-like: one sentence, <s> ... </s> of 5..60 tokens.
    code_marks = ("(", "_", "`", "=")
    singles = []
    for _, encoded in sentences:
        total = size(encoded) + 2
        if 5 <= total <= 60:
            text = bpe.decode(list(map(int, encoded.split())))
            singles.append(((encoded,), str(int(any(m in text for m in code_marks))), total))
    rng.shuffle(singles)
    mixes = {}
    needed = examples + examples // 9  # 9:1 train/valid
    for name, rows in (("RTE-like", pairs), ("SST-like", singles)):
        if len(rows) < needed:
            raise RuntimeError(f"{name}: only {len(rows)} examples of {needed}")
        rows = rows[:needed]
        folder = ws.root / name
        sources = ws.root / f"{name}-text"
        sources.mkdir()
        train, valid_rows = rows[:examples], rows[examples:]
        for split, part in (("train", train), ("valid", valid_rows)):
            for column in range(len(rows[0][0])):
                (sources / f"{split}.input{column}").write_text("".join(r[0][column] + "\n" for r in part))
            (sources / f"{split}.label").write_text("".join(r[1] + "\n" for r in part))
        for column in range(len(rows[0][0])):
            preprocess(sources, f"input{column}", folder / f"input{column}", vocab.dict_txt)
        preprocess(sources, "label", folder / "label", None)
        lengths = [r[2] for r in train]
        mixes[name] = Mix(name, folder, lengths)
        progress(
            f"{name}: {len(train)} training examples, {min(lengths)}..{max(lengths)} tokens, "
            f"mean {statistics.mean(lengths):.0f}, median {statistics.median(lengths):.0f}"
        )
    return mixes


def preprocess(text: Path, column: str, destination: Path, dictionary: Path | None) -> None:
    """``fairseq-preprocess --only-source`` of ``text/{train,valid}.COLUMN`` into ``destination``."""
    run_command(
        [
            *fairseq_cli("preprocess"),
            "--only-source",
            *(["--srcdict", str(dictionary)] if dictionary else []),
            "--trainpref",
            str(text / f"train.{column}"),
            "--validpref",
            str(text / f"valid.{column}"),
            "--destdir",
            str(destination),
            "--workers",
            "1",
        ]
    )


def pretraining_data(ws: Workspace, block: int) -> tuple[Path, list[int]]:
    """Docstrings, one per line (those that fit a block with <s>), binarized: the corpus of the
    complete-mode runs, and its lines' token counts."""
    from roberta_ext.tokenizers import GPT2BPE

    vocab = ws.vocabulary
    bpe = GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe)
    lines = [bpe.encode_fairseq_string(doc) for doc in docstrings()[:8000]]
    lines = [line for line in lines if 0 < len(line.split()) <= block - 2]
    text = ws.root / "mlm-text"
    text.mkdir()
    split = len(lines) * 9 // 10
    (text / "train.input").write_text("".join(line + "\n" for line in lines[:split]))
    (text / "valid.input").write_text("".join(line + "\n" for line in lines[split:]))
    preprocess(text, "input", ws.root / "mlm", vocab.dict_txt)
    return ws.root / "mlm", [len(line.split()) + 1 for line in lines[:split]]


def initial_checkpoint(ws: Workspace, layers: int, width: int) -> Path:
    """One random initialisation, with the classification head, that both sides restore: ours
    (BERT's initialisation, as fairseq's ``roberta``), in fairseq's checkpoint layout."""
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    path = ws.root / f"init-{layers}x{width}.pt"
    if path.exists():
        return path
    # sentence_prediction's dictionary: 4 specials, dict.txt, and <mask>.
    vocab_size = 4 + len(dictionary_symbols(ws.vocabulary.dict_txt)) + 1
    torch.manual_seed(0)
    cfg = preset(
        "base",
        encoder_layers=layers,
        encoder_embed_dim=width,
        encoder_ffn_embed_dim=4 * width,
        encoder_attention_heads=max(1, width // 64),
        vocab_size=vocab_size,
        max_positions=MAX_POSITIONS,
    )
    model = RobertaModel(cfg)
    model.register_classification_head(HEAD, num_classes=2)
    save_roberta_checkpoint(model, path)
    return path


# ----------------------------------------------------------------------------------- running


def common_args(data: Path, updates: int, batch: int, save_dir: Path) -> list[str]:
    return [
        *fairseq_cli("train"),
        str(data),
        "--cpu",
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--log-format",
        "json",
        "--log-interval",
        "1",
        "--no-save",
        "--save-dir",
        str(save_dir),
        "--disable-validation",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.98)",
        "--adam-eps",
        "1e-06",
        "--lr-scheduler",
        "polynomial_decay",
        "--warmup-updates",
        "2",
        "--total-num-update",
        str(updates),
        "--max-update",
        str(updates),
        "--batch-size",
        str(batch),
        "--required-batch-size-multiple",
        "1",
    ]


PLUGIN = ["--user-dir", str(REPO / "roberta_ext"), "--arch", "roberta_ext_base"]


def finetune_commands(
    mix: Mix, init: Path, shape: tuple[int, int], run: Run, save_dir: Path, *, dropout: float
) -> dict[str, list[str]]:
    common = [
        *common_args(mix.folder, run.updates, run.batch, save_dir),
        "--lr",
        "1e-05",
        "--max-positions",
        str(MAX_POSITIONS),
        "--init-token",
        "0",
        "--separator-token",
        "2",
        "--num-classes",
        "2",
        "--dropout",
        str(dropout),
        "--attention-dropout",
        str(dropout),
        "--restore-file",
        str(init),
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
        *encoder_args(*shape),
    ]
    return {
        "ours": [*common, *PLUGIN, "--task", "roberta_ext_classification", "--criterion", "roberta_ext_classification"],
        "fairseq": [
            *common,
            "--arch",
            "roberta_base",
            "--task",
            "sentence_prediction",
            "--criterion",
            "sentence_prediction",
        ],
    }


def pretrain_commands(
    data: Path, shape: tuple[int, int], run: Run, block: int, save_dir: Path, pack: bool = False
) -> dict[str, list[str]]:
    """Ours and fairseq's complete-mode pretraining commands; ``pack``: ours with
    ``--pack-documents`` (each docstring of a block attended alone)."""
    common = [
        *common_args(data, run.updates, run.batch, save_dir),
        "--lr",
        "1e-04",
        "--tokens-per-sample",
        str(block),
        "--max-positions",
        str(block),
        "--sample-break-mode",
        "complete",
        *encoder_args(*shape),
    ]
    return {
        "ours": [
            *common,
            *PLUGIN,
            *(["--pack-documents"] if pack else []),
            "--task",
            "roberta_ext_mlm",
            "--criterion",
            "roberta_ext_mlm",
        ],
        "fairseq": [*common, "--arch", "roberta_base", "--task", "masked_lm", "--criterion", "masked_lm"],
    }


def update_records(log: str) -> list[dict[str, float]]:
    """Per-update ``train_inner`` records (``--log-interval 1``): wps, wpb, loss, num_updates."""
    import json

    records = []
    for line in log.splitlines():
        if "| train_inner |" in line and "{" in line:
            record = json.loads(line[line.index("{") :])
            records.append({k: float(record[k]) for k in ("wps", "wpb", "loss", "num_updates", "bsz")})
    return records


def words_per_second(records: Sequence[dict[str, float]]) -> float:
    """Real tokens over seconds of every update but the first (start-up: first batches, allocator)."""
    kept = records[1:]
    return sum(r["wpb"] for r in kept) / sum(r["wpb"] / r["wps"] for r in kept)


def alternate_runs(label: str, commands: dict[str, list[str]], pairs: int) -> dict[str, list[list[dict[str, float]]]]:
    """``pairs`` rounds of one run of each command, in turns; each run's per-update records."""
    runs: dict[str, list[list[dict[str, float]]]] = {name: [] for name in commands}
    for pair in range(pairs):
        for name, argv in commands.items():
            started = time.perf_counter()
            try:
                records = update_records(run_command(argv))
            except RuntimeError as error:  # a shared machine's hiccup (seen once: a failed import)
                progress(f"{label}: {name} failed, running it again: {str(error).splitlines()[-1]}")
                records = update_records(run_command(argv))
            runs[name].append(records)
            progress(
                f"{label}: {name}, run {pair + 1} of {pairs}: {words_per_second(records):.0f} words/s, "
                f"last loss {records[-1]['loss']:.3f} ({time.perf_counter() - started:.0f} s)"
            )
    return runs


def losses(records: Sequence[dict[str, float]]) -> list[float]:
    return [r["loss"] for r in records]


def max_abs_diff(a: Sequence[float], b: Sequence[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def compare(runs: dict[str, list[list[dict[str, float]]]]) -> dict[str, Any]:
    """Words/s of each run, the pairs' ratios and their median."""
    wps = {name: [words_per_second(r) for r in side] for name, side in runs.items()}
    ratios = [ours / theirs for ours, theirs in zip(wps["ours"], wps["fairseq"])]
    return {
        "words_per_second": wps,
        "median_words_per_second": {name: statistics.median(values) for name, values in wps.items()},
        "pair_ratios": ratios,
        "speedup": statistics.median(ratios),
        "loss": {name: [losses(r) for r in side] for name, side in runs.items()},
        "updates": len(runs["ours"][0]),
    }


# ---------------------------------------------------------------------------------- sections


def bench_finetune(plan: Plan, ws: Workspace) -> Section:
    mixes = build_mixes(ws, plan.examples)
    rows: list[Row] = []
    data: dict[str, Any] = {"shapes": plan.shapes, "mixes": {}}
    save_dir = ws.root / "checkpoints"
    rate = fp32_matmul_rate()
    data["fp32_matmul_gflops"] = rate / 1e9
    for name, mix in mixes.items():
        data["mixes"][name] = {
            "examples": len(mix.lengths),
            "tokens": {
                "min": min(mix.lengths),
                "max": max(mix.lengths),
                "mean": statistics.mean(mix.lengths),
                "median": statistics.median(mix.lengths),
            },
            "runs": {},
        }
        # The loss check first: without dropout the two sides compute the same function.
        check = plan.loss_check
        shape = plan.shapes[check.shape]
        init = initial_checkpoint(ws, *shape)
        exact = alternate_runs(
            f"{name} {check.shape}, no dropout",
            finetune_commands(mix, init, shape, check, save_dir, dropout=0.0),
            check.pairs,
        )
        exact_diff = max_abs_diff(losses(exact["ours"][0]), losses(exact["fairseq"][0]))
        data["mixes"][name]["loss_check_no_dropout"] = {
            "run": asdict(check),
            "loss": {side: losses(r[0]) for side, r in exact.items()},
            "max_abs_diff": exact_diff,
        }
        progress(f"{name}: without dropout, per-update losses differ by at most {exact_diff:.2e}")
        for run in plan.finetune[name]:
            shape = plan.shapes[run.shape]
            init = initial_checkpoint(ws, *shape)
            padding = mix.padding_share(run.batch, run.updates)
            label = f"{name} {run.shape} ({shape[0]} x {shape[1]}), batch {run.batch}"
            measured = compare(
                alternate_runs(label, finetune_commands(mix, init, shape, run, save_dir, dropout=0.1), run.pairs)
            )
            curve_diff = max_abs_diff(measured["loss"]["ours"][0], measured["loss"]["fairseq"][0])
            entry = {"run": asdict(run), "padding_share": padding, **measured, "loss_max_abs_diff": curve_diff}
            noise = None
            if run == check or (run.shape, run.batch, run.updates) == (check.shape, check.batch, check.updates):
                # How far dropout alone moves fairseq's own curve: the yardstick of "within noise".
                noise = max_abs_diff(measured["loss"]["fairseq"][0], losses(exact["fairseq"][0]))
                entry["dropout_noise"] = noise
            data["mixes"][name]["runs"][run.shape] = entry
            wps = measured["median_words_per_second"]
            speedup = measured["speedup"]
            per_token = training_flops_per_token(mix.lengths, *shape)
            shares = {side: words * per_token / rate for side, words in wps.items()}
            entry["matmul_share"] = {"flops_per_token": per_token, "fp32_matmul_gflops": rate / 1e9, "shares": shares}
            target = name == "RTE-like"
            loss_note = f"loss curves: max abs diff {curve_diff:.3f} bits per update with dropout"
            if noise is not None:
                loss_note += (
                    f" (dropout's own effect on fairseq's curve: {noise:.3f}); without dropout {exact_diff:.1e}"
                )
            rows.append(
                Row(
                    f"fine-tuning words/s, {name} ({mix.lengths and min(mix.lengths)}-{max(mix.lengths)} tokens, "
                    f"{100 * padding:.0f}% padding in fairseq's batches), {run.shape} {shape[0]} x {shape[1]}, "
                    f"batch {run.batch}, {run.updates} updates",
                    f"{wps['ours']:.0f} words/s, {100 * shares['ours']:.0f}% of the fp32 matmul rate; {loss_note}",
                    f"fairseq `sentence_prediction` + `roberta_base` {wps['fairseq']:.0f} words/s, "
                    f"{100 * shares['fairseq']:.0f}%: "
                    f"**{speedup:.2f}x** (median of {len(measured['pair_ratios'])} pairs: "
                    f"{', '.join(f'{r:.2f}' for r in measured['pair_ratios'])})",
                    f">= {TARGET_FINETUNE}x fairseq, same loss curve" if target else "",
                    (speedup >= TARGET_FINETUNE and exact_diff < 1e-3) if target else None,
                )
            )
    return Section(rows, data)


def bench_pretrain(plan: Plan, ws: Workspace) -> Section:
    """Complete-mode pretraining, ours against fairseq's ``masked_lm``: as fairseq computes it
    (every block one sequence), then with ``--pack-documents`` (each docstring of a block attended
    alone: another function, the one ModernBERT's recipe trains, with less attention work)."""
    data_dir, lengths = pretraining_data(ws, plan.block)
    run = plan.pretrain
    shape = plan.shapes[run.shape]
    vocab_size = 4 + len(dictionary_symbols(ws.vocabulary.dict_txt)) + 1
    rate = fp32_matmul_rate()
    rows, data = [], {"run": asdict(run), "block": plan.block, "lines": len(lengths)}
    for pack in (False, True):
        label = f"pretraining, complete{', --pack-documents' if pack else ''}, {run.shape}"
        commands = pretrain_commands(data_dir, shape, run, plan.block, ws.root / "checkpoints", pack)
        measured = compare(alternate_runs(label, commands, run.pairs))
        wps = measured["median_words_per_second"]
        speedup = measured["speedup"]
        # The work each side must do on its real tokens: attention over each block, or over each
        # docstring (+1: its share of the block's <s>) where ours packs them apart.
        sequences = {"fairseq": complete_blocks(lengths, plan.block - 1)}
        sequences["ours"] = [n + 1 for n in lengths] if pack else sequences["fairseq"]
        per_token = {
            side: training_flops_per_token(seqs, *shape, lm_head_vocab=vocab_size) for side, seqs in sequences.items()
        }
        shares = {side: words * per_token[side] / rate for side, words in wps.items()}
        measured["matmul_share"] = {"flops_per_token": per_token, "fp32_matmul_gflops": rate / 1e9, "shares": shares}
        last = {side: statistics.mean(curve[-1] for curve in curves) for side, curves in measured["loss"].items()}
        rows.append(
            Row(
                f"masked-LM pretraining words/s, `--sample-break-mode complete --tokens-per-sample {plan.block}`"
                f"{' with `--pack-documents` (ours)' if pack else ''} (docstrings, {len(lengths)} lines), "
                f"{run.shape} {shape[0]} x {shape[1]}, batch {run.batch}, {run.updates} updates",
                f"{wps['ours']:.0f} words/s, {100 * shares['ours']:.0f}% of the fp32 matmul rate "
                f"({rate / 1e9:.0f} GFLOP/s); last loss {last['ours']:.2f} "
                f"(fairseq {last['fairseq']:.2f}; masks differ)",
                f"fairseq `masked_lm` + `roberta_base` {wps['fairseq']:.0f} words/s, {100 * shares['fairseq']:.0f}% of "
                f"the rate: **{speedup:.2f}x** (median of "
                f"{len(measured['pair_ratios'])} pairs: {', '.join(f'{r:.2f}' for r in measured['pair_ratios'])})",
                f">= {TARGET_PRETRAIN}x fairseq",
                speedup >= TARGET_PRETRAIN,
            )
        )
        data["packed" if pack else "plain"] = measured
    return Section(rows, data)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.finetune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a tiny shape, one pair of short runs: a smoke run")
    parser.add_argument("--only", nargs="+", choices=("finetune", "pretrain"), help="run only these sections")
    parser.add_argument("--out", type=Path, help="JSON results file")
    parser.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="torch threads of every fairseq-train run, both sides alike (OMP_NUM_THREADS; default: torch's, "
        "all cores); 1 is steadier on a busy machine",
    )
    parser.add_argument("--keep", type=Path, metavar="DIR", help="build the data in DIR and keep it (for profiling)")
    args = parser.parse_args(argv)
    plan = QUICK_PLAN if args.quick else FULL
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the fairseq-train runs inherit it
        torch.set_num_threads(args.threads)
    today = datetime.date.today().isoformat()
    complete = not args.quick and not args.only
    out = args.out or RESULTS / (f"finetune-cpu-{today}.json" if complete else f"scratch-finetune-{today}.json")
    started = time.perf_counter()
    sections: dict[str, Section] = {}
    with tempfile.TemporaryDirectory(prefix="roberta_ext_finetune_") as tmp:
        root = Path(tmp)
        if args.keep:
            shutil.rmtree(args.keep, ignore_errors=True)
            args.keep.mkdir(parents=True)
            root = args.keep
        ws = Workspace(QUICK, root)
        sections["machine"] = run_section("machine", lambda: bench_machine(QUICK, ws))
        for name, bench in (("finetune", bench_finetune), ("pretrain", bench_pretrain)):
            if not args.only or name in args.only:
                sections[name] = run_section(name, partial(bench, plan, ws))
    write_results(
        out,
        sections,
        date=today,
        quick=args.quick,
        threads=args.threads or torch.get_num_threads(),
        seconds=time.perf_counter() - started,
    )
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
