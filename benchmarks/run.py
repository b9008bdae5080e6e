"""Every speed figure of issue 4 in one run: roberta_ext against fairseq, transformers and tiktoken.

Sections (``--only`` picks some; the default runs all, in this order):

  machine   fp32 and bf16 matmul GFLOP/s (torch.mm), torch threads, CPU model and flags
  tokenize  text -> tensor of fairseq ids, per line and per batch, against fairseq's hub;
            raw GPT-2 BPE against tiktoken and HF ``tokenizers``, single thread, same vocabulary
  features  ``extract_features`` at base shape (12 x 768, vocabulary 50265) against fairseq's hub
            and transformers' ``RobertaModel`` (SDPA), same weights; a full and a padded batch; bf16
  paths     issue 14's paths: each attention strategy (masked, padded, per_sequence, nested, varlen)
            on the padded batches against ``auto`` and transformers; the compiled inference path
            (``compile=True``) against eager and transformers at 8 x 128, with its first call's cost
  train     ``fairseq-train`` words/s: ``--arch roberta_ext_base`` against fairseq's ``roberta_base``
            at the same small config, and ours with ``--bf16-autocast``; masking's share of a step
  load      a 24 x 1024 checkpoint: load time and peak RSS, ours against fairseq's loader

Every contender gets the same weights and the same text. Contenders are timed in turns (ours,
peer, ours, peer, ...) after one untimed warm-up call each, and the median is reported, so that
load from other processes on the machine falls on all of them alike. A ratio is peer time / our
time: above 1 we are faster. Everything is built here (vocabulary, text, models, data); nothing
is downloaded. The printed table is Markdown, ready for ``docs/benchmarks.md``; the JSON beside
it holds every figure, the commit measured, and how much of the CPUs other work took meanwhile
(figures taken on a busy machine are noisy: the packed padded batch suffers most).

    .venv/bin/python -m benchmarks.run                 # all sections, ~6 minutes on 2 quiet cores
    .venv/bin/python -m benchmarks.run --quick         # everything shrunk: a 1-2 minute smoke run
    .venv/bin/python -m benchmarks.run --only tokenize features
    python -m benchmarks.run --device cuda             # on an NVIDIA GPU: fp32 and bf16, SDPA

With ``--device cuda`` the same sections run on the GPU: the matmul yardstick is the GPU's
(fp32 without TF32, as torch's default, and bf16); features are measured for the batches above
and a larger one (64 x 512 full, and 64 rows of 8..512 tokens), in fp32 and in bf16 for all three
contenders; training runs at base shape (12 x 768, 32 x 512 tokens) with ``--fp16`` (fairseq
0.12's ``--bf16`` means a TPU: it sets ``--tpu``, and the trainer then asks for an XLA device), and
ours again with ``--bf16-autocast`` instead. ``paths`` times the strategies in bf16 (where the varlen
kernel runs) and fp32, and the compiled path with CUDA graphs. Every timed call ends with
``torch.cuda.synchronize()``. Tokenizing and loading stay on the CPU. The targets of issue 4 were
set for this 2-core CPU; GPU rows carry issue 14's targets where it set them.
"""

from __future__ import annotations

import os

# HF tokenizers parallelises with rayon; its pool size is read once, when the library is first
# imported (by us or by transformers), so the single-thread setting must come before any import.
os.environ["RAYON_RS_NUM_CPUS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse
import copy
import datetime
import itertools
import json
import logging
import platform
import re
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

# Only the standard library and torch are imported at the top: the loading section starts fresh
# processes through this module, and their baseline memory must be that of torch alone.

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
SECTIONS = ("machine", "tokenize", "features", "paths", "train", "load")
PAD, BASE_VOCAB = 1, 50265
# fairseq and hydra log at INFO/DEBUG on import; only their warnings belong in our output.
for _name in ("fairseq", "hydra"):
    logging.getLogger(_name).setLevel(logging.WARNING)


@dataclass(frozen=True)
class Scale:
    """How big each measurement is; ``--quick`` shrinks every one of them."""

    repeats: int  # timed calls per contender, after one warm-up call each
    matmul_sizes: tuple[int, ...]  # n of the n x n x n products
    text_bytes: int  # UTF-8 bytes of text to tokenize
    batch_lines: int  # lines per batch for the batch encode
    feature_layers: int  # 12 at base shape
    train_shape: tuple[int, int]  # (layers, width) of the training runs; FFN 4x, heads width/64
    train_updates: int
    train_log_interval: int
    train_runs: int  # fairseq-train runs per contender, alternating
    load_layers: int  # 24 for the large shape (width 1024)
    load_repeats: int
    device: str = "cpu"  # where matmuls, features and training run: "cpu" or "cuda"
    # (B, T) of each full batch; its padded twin has B rows of T/B, 2T/B, ..., T tokens
    feature_shapes: tuple[tuple[int, int], ...] = ((8, 128),)
    train_batch: tuple[int, int] = (16, 128)  # (sequences, tokens per sequence) per update
    train_precision: tuple[str, ...] = ()  # fairseq-train's flags for it: --fp16 on a GPU

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"


FULL = Scale(
    repeats=5,
    matmul_sizes=(1024, 2048),
    text_bytes=1_000_000,
    batch_lines=32,
    feature_layers=12,
    train_shape=(4, 256),
    train_updates=30,
    train_log_interval=5,
    train_runs=4,
    load_layers=24,
    load_repeats=2,
)
QUICK = Scale(
    repeats=2,
    matmul_sizes=(1024,),
    text_bytes=100_000,
    batch_lines=32,
    feature_layers=2,
    train_shape=(2, 128),
    train_updates=12,
    train_log_interval=4,
    train_runs=1,
    load_layers=2,
    load_repeats=1,
)
GPU_FULL = Scale(
    repeats=20,
    matmul_sizes=(4096, 8192),
    text_bytes=1_000_000,
    batch_lines=32,
    feature_layers=12,
    train_shape=(12, 768),
    train_updates=60,
    train_log_interval=10,
    train_runs=2,
    load_layers=24,
    load_repeats=2,
    device="cuda",
    feature_shapes=((8, 128), (64, 512)),
    train_batch=(32, 512),
    train_precision=("--fp16",),
)
GPU_QUICK = Scale(
    repeats=3,
    matmul_sizes=(4096,),
    text_bytes=100_000,
    batch_lines=32,
    feature_layers=2,
    train_shape=(2, 256),
    train_updates=20,
    train_log_interval=5,
    train_runs=1,
    load_layers=2,
    load_repeats=1,
    device="cuda",
    feature_shapes=((8, 128), (64, 512)),
    train_batch=(16, 256),
    train_precision=("--fp16",),
)


# ------------------------------------------------------------------------------ results


@dataclass
class Row:
    """One line of the table: our figure, the peers' figures with ratios, and the target."""

    measure: str
    ours: str
    peers: str = ""
    target: str = ""
    met: bool | None = None  # None: no target, only reported


@dataclass
class Section:
    """What a benchmark returns: its rows of the table, and every figure for the JSON."""

    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f} s] {message}", flush=True)


def alternate(contenders: Mapping[str, Callable[[], object]], repeats: int, device: str = "cpu") -> dict[str, float]:
    """Median seconds per call of each contender, called in turns: one untimed warm-up call each,
    then ``repeats`` rounds of one call each (a, b, c, a, b, c, ...). On ``cuda`` every call is
    followed by a synchronize, so that it is timed to the end of its kernels."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for call in contenders.values():
        call()
    sync()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, call in contenders.items():
            start = time.perf_counter()
            call()
            sync()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def ratio(peer: float, ours: float) -> str:
    return f"{peer / ours:.2f}x"


def mb_per_s(megabytes: float, seconds: float) -> str:
    return f"{megabytes / seconds:.2f} MB/s"


def rates(megabytes: float, timings: Mapping[str, float]) -> dict[str, float]:
    return {name: megabytes / seconds for name, seconds in timings.items()}


def versus(
    label: str, timings: Mapping[str, float], peer: str, show: Callable[[float], str], *, bold: bool = True
) -> str:
    """A peer's cell: ``label figure: ratio``, the ratio being the peer's time over ours."""
    mark = "**" if bold else ""
    return f"{label} {show(timings[peer])}: {mark}{ratio(timings[peer], timings['ours'])}{mark}"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.1 else f"{seconds * 1e3:.1f} ms"


def cpu_snapshot() -> tuple[float, float, float, float]:
    """(wall seconds, busy CPU seconds of the whole machine, CPU seconds of this process and its
    finished children, CPU seconds a virtual machine's host took away: "steal")."""
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, Path("/proc/stat").read_text().split()[1:9])
    own = os.times()
    tick = os.sysconf("SC_CLK_TCK")
    return (
        time.monotonic(),
        (user + nice + system + irq + softirq) / tick,
        own.user + own.system + own.children_user + own.children_system,
        steal / tick,
    )


def contention(start: tuple[float, ...], end: tuple[float, ...]) -> dict[str, float]:
    """Shares of the machine's CPUs used by other processes, and stolen by the host, between two
    snapshots: how much other work could have skewed the figures taken in between."""
    wall, busy, own, steal = (b - a for a, b in zip(start, end))
    cpus = wall * (os.cpu_count() or 1)
    return {"other_processes": max(0.0, (busy - own) / cpus), "host_steal": steal / cpus}


# ---------------------------------------------------------------------- shared resources


@dataclass(frozen=True)
class Vocabulary:
    """A GPT-2-format BPE and the fairseq ``dict.txt`` listing its ids."""

    encoder_json: Path
    vocab_bpe: Path
    dict_txt: Path

    @property
    def folder(self) -> Path:
        return self.dict_txt.parent


class Workspace:
    """A temporary folder and what several sections share, each built on first use."""

    def __init__(self, scale: Scale, root: Path) -> None:
        self.scale = scale
        self.root = root

    @cached_property
    def vocabulary(self) -> Vocabulary:
        """~30k merges learned by HF ``tokenizers`` (fast) from the standard library's source."""
        from tokenizers import ByteLevelBPETokenizer

        progress("learning a 30k-merge byte-level BPE from the standard library's source")
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        files = sorted(stdlib.glob("*.py")) + sorted(stdlib.glob("*/*.py"))
        corpus = [path.read_text(encoding="utf-8", errors="replace") for path in files]
        trainer = ByteLevelBPETokenizer(add_prefix_space=False)
        trainer.train_from_iterator(corpus, vocab_size=30_256, min_frequency=2, show_progress=False)
        model = json.loads(trainer.to_str())["model"]
        merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
        folder = self.root / "vocabulary"
        folder.mkdir()
        vocabulary = Vocabulary(folder / "encoder.json", folder / "vocab.bpe", folder / "dict.txt")
        vocabulary.encoder_json.write_text(json.dumps(model["vocab"], ensure_ascii=False), encoding="utf-8")
        vocabulary.vocab_bpe.write_text("#version: 0.2\n" + "".join(f"{m}\n" for m in merges), encoding="utf-8")
        write_dictionary(vocabulary.dict_txt, [str(i) for i in sorted(model["vocab"].values())])
        progress(f"vocabulary: {len(model['vocab'])} tokens, {len(merges)} merges")
        return vocabulary

    @cached_property
    def lines(self) -> list[str]:
        """About ``scale.text_bytes`` of text, one entry per line: the standard library's docstrings
        (English prose, one per line), then non-blank lines of its sub-packages' source code."""
        from roberta_ext.quickstart import stdlib_docstrings

        budget = self.scale.text_bytes
        lines: list[str] = []
        stdlib = Path(sysconfig.get_paths()["stdlib"])
        code = (
            line
            for path in sorted(stdlib.glob("*/*.py"))
            for line in path.read_text(encoding="utf-8", errors="replace").splitlines()
            if line.strip()
        )
        for line in itertools.chain((doc for doc, _ in stdlib_docstrings()), code):
            if budget <= 0:
                break
            lines.append(line)
            budget -= len(line.encode("utf-8"))
        return lines

    @cached_property
    def megabytes(self) -> float:
        return sum(len(line.encode("utf-8")) for line in self.lines) / 1e6


def write_dictionary(path: Path, symbols: Sequence[str]) -> Path:
    """A fairseq ``dict.txt``: one ``symbol count`` line per symbol."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{symbol} 1\n" for symbol in symbols), encoding="utf-8")
    return path


def padded_dictionary(folder: Path, symbols: Sequence[str], vocab_size: int) -> Path:
    """``folder/dict.txt`` with ``symbols`` and ``madeupword`` fillers (as in the released RoBERTa
    dictionaries), such that the 4 specials, the symbols and ``<mask>`` make ``vocab_size``."""
    fillers = [f"madeupword{i:05d}" for i in range(vocab_size - 5 - len(symbols))]
    write_dictionary(folder / "dict.txt", [*symbols, *fillers])
    return folder


def dictionary_symbols(dict_txt: Path) -> list[str]:
    return [line.split()[0] for line in dict_txt.read_text(encoding="utf-8").splitlines()]


def fairseq_hub(data_dir: Path, model_args: Sequence[str], vocabulary: Vocabulary | None = None) -> Any:
    """fairseq's own RoBERTa with its hub interface, in eval mode: the model built (random weights)
    as ``fairseq-train --task masked_lm`` builds it, on the ``dict.txt`` in ``data_dir``."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models.roberta import RobertaHubInterface

    argv = [str(data_dir), "--task", "masked_lm", "--max-positions", "512", "--tokens-per-sample", "512", *model_args]
    if vocabulary is not None:
        argv += [
            "--bpe",
            "gpt2",
            "--gpt2-encoder-json",
            str(vocabulary.encoder_json),
            "--gpt2-vocab-bpe",
            str(vocabulary.vocab_bpe),
        ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
        task = tasks.setup_task(cfg.task)
        return RobertaHubInterface(cfg, task, task.build_model(cfg.model)).eval()


def encoder_args(layers: int, width: int) -> list[str]:
    """fairseq's model options for a post-LN encoder of this shape (FFN 4x, 64-wide heads)."""
    return [
        "--encoder-layers",
        str(layers),
        "--encoder-embed-dim",
        str(width),
        "--encoder-ffn-embed-dim",
        str(4 * width),
        "--encoder-attention-heads",
        str(max(1, width // 64)),
    ]


# -------------------------------------------------------------------------------- machine


def matmul(n: int, dtype: torch.dtype, device: str = "cpu") -> tuple[Callable[[], object], float]:
    """A call multiplying two n x n matrices of ``dtype`` (into a preallocated output), and its FLOPs."""
    a, b = (torch.randn(n, n).to(device=device, dtype=dtype) for _ in range(2))
    out = torch.empty(n, n, dtype=dtype, device=device)
    return (lambda: torch.mm(a, b, out=out)), 2.0 * n**3


def fp32_matmul_rate(n: int = 1024, repeats: int = 5) -> float:
    """FLOP/s of an n x n fp32 product on the CPU at this process's torch threads (median of
    ``repeats``): the limit the matmul shares of the benchmarks divide by."""
    multiply, flops = matmul(n, torch.float32)
    return flops / alternate({"matmul": multiply}, repeats)["matmul"]


def gpu_description() -> dict[str, Any]:
    """The GPU, as torch sees it."""
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "gpu_memory_gib": props.total_memory / 2**30,
        "multiprocessors": props.multi_processor_count,
        "cuda": torch.version.cuda,
        "tf32_matmul": torch.backends.cuda.matmul.allow_tf32,
    }


def bench_machine(scale: Scale, _: Workspace) -> Section:
    """Matmul rates (the yardstick for the encoder's GFLOP/s), threads, CPU model and flags; with
    ``--device cuda``, the GPU and its matmul rates."""
    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
    flag_line = re.search(r"^flags\s*:\s*(.+)$", cpuinfo, re.M)
    flags = set(flag_line.group(1).split()) if flag_line else set()
    data: dict[str, Any] = {
        "cpu": model.group(1) if model else platform.processor(),
        "logical_cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "flags": {f: f in flags for f in ("avx512f", "avx512_bf16", "amx_tile", "amx_bf16")},
        "python": platform.python_version(),
        "device": scale.device,
        **(gpu_description() if scale.cuda else {}),
        "matmul_gflops": {},
    }
    for dtype in (torch.float32, torch.bfloat16):
        for n in scale.matmul_sizes:
            call, flops = matmul(n, dtype, scale.device)
            seconds = alternate({"mm": call}, 10, scale.device)["mm"]
            data["matmul_gflops"][f"{str(dtype).removeprefix('torch.')}_{n}"] = flops / seconds / 1e9
    data["fp32_gflops"] = max(v for k, v in data["matmul_gflops"].items() if k.startswith("float32"))
    data["bf16_gflops"] = max(v for k, v in data["matmul_gflops"].items() if k.startswith("bfloat16"))
    progress(f"matmul: fp32 {data['fp32_gflops']:.0f} GFLOP/s, bf16 {data['bf16_gflops']:.0f} GFLOP/s")
    n = max(scale.matmul_sizes)
    flag_text = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in data["flags"].items())
    rows = [
        Row(
            "CPU",
            f"{data['cpu']}, {data['logical_cpus']} logical CPUs, torch {data['torch']} "
            f"with {data['torch_threads']} threads ({data['cpu_capability']}); {flag_text}",
        ),
    ]
    if scale.cuda:
        rows.append(
            Row(
                "GPU",
                f"{data['gpu']}, {data['gpu_memory_gib']:.0f} GiB, {data['multiprocessors']} SMs, "
                f"CUDA {data['cuda']}; fp32 matmuls {'with' if data['tf32_matmul'] else 'without'} TF32",
            )
        )
    rows += [
        Row(f"fp32 matmul {n}^3", f"{data['matmul_gflops'][f'float32_{n}']:.0f} GFLOP/s"),
        Row(f"bf16 matmul {n}^3", f"{data['matmul_gflops'][f'bfloat16_{n}']:.0f} GFLOP/s"),
    ]
    return Section(rows, data)


# ------------------------------------------------------------------------------- tokenize


def bench_tokenize(scale: Scale, ws: Workspace) -> Section:
    """Text to ids on ``ws.lines``: our hub against fairseq's, then raw BPE against tiktoken and HF."""
    progress(f"tokenize: {ws.megabytes:.2f} MB in {len(ws.lines)} lines")
    hub, raw = tokenize_with_hubs(scale, ws), tokenize_raw_bpe(scale, ws)
    return Section(hub.rows + raw.rows, {"megabytes": ws.megabytes, "lines": len(ws.lines), **hub.data, **raw.data})


def tokenize_with_hubs(scale: Scale, ws: Workspace) -> Section:
    """``encode`` per line, and a padded batch per ``scale.batch_lines`` lines: ours as users get it
    (``roberta_ext.from_pretrained`` on a model folder; the model is tiny, only the tokenizer is
    used), fairseq's ``RobertaHubInterface`` on the same dictionary and BPE files."""
    from fairseq.data.data_utils import collate_tokens

    import roberta_ext
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    vocab, lines, megabytes = ws.vocabulary, ws.lines, ws.megabytes
    model_dir = ws.root / "tokenize_model"
    model_dir.mkdir()
    for path in (vocab.encoder_json, vocab.vocab_bpe, vocab.dict_txt):
        shutil.copy(path, model_dir / path.name)
    vocab_size = len(dictionary_symbols(vocab.dict_txt)) + 5
    save_roberta_checkpoint(RobertaModel(preset("tiny", vocab_size=vocab_size)), model_dir / "model.pt")
    ours = roberta_ext.from_pretrained(model_dir)
    theirs = fairseq_hub(vocab.folder, ["--arch", "roberta_base", *encoder_args(1, 64)], vocab)
    batches = [lines[i : i + scale.batch_lines] for i in range(0, len(lines), scale.batch_lines)]
    shown = partial(mb_per_s, megabytes)

    def fairseq_batch(batch: list[str]) -> torch.Tensor:
        # fairseq has no batch encode; its README pads a list of encode() results with collate_tokens.
        return collate_tokens([theirs.encode(line) for line in batch], PAD)

    identical = all(torch.equal(ours.encode(line), theirs.encode(line)) for line in lines)
    batch_identical = all(torch.equal(ours.encode_batch(b)[0], fairseq_batch(b)) for b in batches)
    per_line = alternate(
        {
            "ours": lambda: [ours.encode(line) for line in lines],
            "fairseq": lambda: [theirs.encode(line) for line in lines],
        },
        scale.repeats,
    )
    progress("encode: " + ", ".join(f"{k} {shown(v)}" for k, v in per_line.items()))
    batched = alternate(
        {
            "ours": lambda: [ours.encode_batch(b) for b in batches],
            "fairseq": lambda: [fairseq_batch(b) for b in batches],
        },
        scale.repeats,
    )
    progress("batch encode: " + ", ".join(f"{k} {shown(v)}" for k, v in batched.items()))

    def same(equal: bool) -> str:
        return ", ids identical" if equal else ", IDS DIFFER"

    rows = [
        Row(
            "`encode`: text -> tensor of fairseq ids, per line",
            shown(per_line["ours"]) + same(identical),
            versus("fairseq hub", per_line, "fairseq", shown),
            ">= 3x fairseq, ids identical",
            per_line["fairseq"] / per_line["ours"] >= 3 and identical,
        ),
        Row(
            f"batch encode: {scale.batch_lines} lines -> padded tensor",
            shown(batched["ours"]) + same(batch_identical),
            versus("fairseq encode + collate_tokens", batched, "fairseq", shown),
            ">= 5x fairseq",
            batched["fairseq"] / batched["ours"] >= 5 and batch_identical,
        ),
    ]
    data = {
        "batch_lines": scale.batch_lines,
        "encode_mb_s": rates(megabytes, per_line),
        "encode_ids_identical": identical,
        "batch_encode_mb_s": rates(megabytes, batched),
        "batch_ids_identical": batch_identical,
    }
    return Section(rows, data)


def tokenize_raw_bpe(scale: Scale, ws: Workspace) -> Section:
    """Text -> GPT-2 ids on one thread each, from the same ``encoder.json``/``vocab.bpe``: our
    ``GPT2BPE``, tiktoken (ranks = the ids of ``encoder.json``) and HF's byte-level BPE. Also counts
    the lines on which a peer's ids differ from ours: tiktoken merges by the rank of the merged
    token, GPT-2 by the rank of the pair, which disagree in rare cases."""
    import tiktoken
    from tokenizers import ByteLevelBPETokenizer

    from roberta_ext.tokenizers import GPT2BPE
    from roberta_ext.tokenizers.gpt2_bpe import GPT2_SPLIT_PATTERN, bytes_to_unicode

    vocab, lines, megabytes = ws.vocabulary, ws.lines, ws.megabytes
    bpe = GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe)
    byte_of = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    encoder = json.loads(vocab.encoder_json.read_text(encoding="utf-8"))
    tik = tiktoken.Encoding(
        "roberta_ext_bench",
        pat_str=GPT2_SPLIT_PATTERN,
        special_tokens={},
        mergeable_ranks={bytes(byte_of[c] for c in token): i for token, i in encoder.items()},
    )
    hf = ByteLevelBPETokenizer(str(vocab.encoder_json), str(vocab.vocab_bpe), add_prefix_space=False)
    encoders: dict[str, Callable[[], list[list[int]]]] = {
        "ours": lambda: [bpe.encode(line) for line in lines],
        "tiktoken": lambda: [tik.encode_ordinary(line) for line in lines],
        # encode_batch is HF's fastest path; with RAYON_RS_NUM_CPUS=1 it runs on one thread.
        "hf_tokenizers": lambda: [e.ids for e in hf.encode_batch(lines, add_special_tokens=False)],
    }
    ids = {name: encode() for name, encode in encoders.items()}
    differing = {
        name: [i for i, (a, b) in enumerate(zip(ids["ours"], ids[name])) if a != b]
        for name in ("tiktoken", "hf_tokenizers")
    }
    timings = alternate(encoders, scale.repeats)
    shown = partial(mb_per_s, megabytes)
    progress("raw BPE: " + ", ".join(f"{k} {shown(v)}" for k, v in timings.items()))
    rows = [
        Row(
            "raw BPE: text -> GPT-2 ids, 1 thread",
            shown(timings["ours"]),
            f"{versus('tiktoken', timings, 'tiktoken', shown)}; "
            f"{versus('HF tokenizers', timings, 'hf_tokenizers', shown, bold=False)}",
            ">= 0.9x tiktoken",
            timings["tiktoken"] / timings["ours"] >= 0.9,
        ),
        Row(
            "lines whose ids differ from ours",
            "-",
            "; ".join(
                f"{name} {len(d)} of {len(lines)} ({100 * len(d) / len(lines):.2f}%)" for name, d in differing.items()
            ),
        ),
    ]
    data = {
        "raw_bpe_mb_s": rates(megabytes, timings),
        "raw_bpe_lines_differing": {name: len(d) for name, d in differing.items()},
        "raw_bpe_first_differing_line": {name: lines[d[0]][:200] if d else None for name, d in differing.items()},
    }
    return Section(rows, data)


# ------------------------------------------------------------------------------- features


def transformers_roberta(state_dict: Mapping[str, torch.Tensor], layers: int) -> Any:
    """transformers' ``RobertaModel`` (SDPA attention, no pooler) holding a base-width fairseq
    state dict, loaded strictly. ``token_type_embeddings`` is a single zero row (RoBERTa has
    no segments)."""
    from transformers import RobertaConfig
    from transformers import RobertaModel as HFRobertaModel

    from roberta_ext.checkpoints.transformers import key_map
    from roberta_ext.families import preset

    config = RobertaConfig(
        vocab_size=BASE_VOCAB,
        hidden_size=768,
        num_hidden_layers=layers,
        num_attention_heads=12,
        intermediate_size=3072,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=PAD,
        layer_norm_eps=1e-5,
        hidden_act="gelu",
        attn_implementation="sdpa",
    )
    # Our names -> a bare RobertaModel's, from the roberta family's own key table (the LM head has none).
    names = key_map(preset("base", encoder_layers=layers), "RobertaModel", base_prefix="")
    converted = {names[key]: tensor for key, tensor in state_dict.items() if key in names}
    converted["embeddings.token_type_embeddings.weight"] = torch.zeros(1, 768)
    model = HFRobertaModel(config, add_pooling_layer=False)
    model.load_state_dict(converted, strict=True)
    return model.eval()


def random_batch(lengths: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """``<s> ids </s>`` rows of the given lengths, right-padded: (B, max(lengths))."""
    tokens = torch.full((len(lengths), max(lengths)), PAD, dtype=torch.long)
    for row, length in enumerate(lengths):
        tokens[row, :length] = torch.randint(4, BASE_VOCAB - 1, (length,), generator=generator)
        tokens[row, 0], tokens[row, length - 1] = 0, 2
    return tokens


def encoder_flops(lengths: Sequence[int], layers: int, width: int = 768, ffn: int = 3072) -> float:
    """FLOPs of the layer stack on the real tokens: per token and layer, the four projections and
    the FFN (2 * (4 C^2 + 2 C F)) and attention scores and sums over its own sequence (4 T C)."""
    return sum(length * layers * (2 * (4 * width**2 + 2 * width * ffn) + 4 * length * width) for length in lengths)


def bench_features(scale: Scale, ws: Workspace) -> Section:
    """``extract_features`` of ours, fairseq's hub and transformers on identical weights: for each
    of ``scale.feature_shapes`` a full batch and a padded one, then bf16. On the CPU, ours in bf16
    against ours in fp32 (the issue's bf16 option); on a GPU, all three contenders in bf16."""
    contenders = feature_contenders(scale.feature_layers, ws, scale.device)
    generator = torch.Generator().manual_seed(0)
    targets = not scale.cuda  # the targets were set for the 2-core CPU
    batches: dict[str, tuple[str, torch.Tensor]] = {}  # "8x128/full" -> (label, tokens)
    for batch, length in scale.feature_shapes:
        padded_lengths = [length * (i + 1) // batch for i in range(batch)]
        batches[f"{batch}x{length}/full"] = (
            f"full batch {batch} x {length}",
            random_batch([length] * batch, generator).to(scale.device),
        )
        batches[f"{batch}x{length}/padded"] = (
            f"padded batch ({batch} rows, lengths {padded_lengths[0]}..{length})",
            random_batch(padded_lengths, generator).to(scale.device),
        )
    runs = {key: features_on(label, tokens, contenders, scale) for key, (label, tokens) in batches.items()}

    def peers(timings: Mapping[str, float]) -> str:
        return " · ".join(versus(peer, timings, peer, ms) for peer in ("fairseq", "transformers"))

    rows: list[Row] = []
    for batch, length in scale.feature_shapes:
        full, padded = runs[f"{batch}x{length}/full"], runs[f"{batch}x{length}/padded"]
        full_s, padded_s = full["seconds"], padded["seconds"]
        rows += [
            Row(
                f"`extract_features` fp32, {batches[f'{batch}x{length}/full'][0]}",
                ms(full_s["ours"]),
                peers(full_s),
                ">= 1.0x fairseq and transformers" if targets else "",
                min(full_s["fairseq"], full_s["transformers"]) >= full_s["ours"] if targets else None,
            ),
            Row(
                f"achieved GFLOP/s, full batch {batch} x {length}",
                f"{full['ours_gflops']:.0f} GFLOP/s = {100 * full['ours_fraction_of_fp32_matmul']:.0f}% of fp32 matmul "
                f"({full['fp32_matmul_gflops']:.0f} GFLOP/s, timed in the same rounds)",
                target=">= 85% of fp32 matmul" if targets else "",
                met=full["ours_fraction_of_fp32_matmul"] >= 0.85 if targets else None,
            ),
            Row(
                f"`extract_features` fp32, {batches[f'{batch}x{length}/padded'][0]}",
                f"{ms(padded_s['ours'])} ({padded['ours_gflops']:.0f} GFLOP/s on real tokens)",
                peers(padded_s),
                ">= 1.5x fairseq" if targets else "",
                padded_s["fairseq"] / padded_s["ours"] >= 1.5 if targets else None,
            ),
        ]
    data: dict[str, Any] = {"layers": scale.feature_layers, "device": scale.device, "fp32": runs}
    if not scale.cuda:
        first = next(iter(batches.values()))[1]
        bf16 = features_bf16(contenders.models["ours"], first, scale)
        data["bf16"] = bf16.data
        return Section(rows + bf16.rows, data)

    # GPU: every contender in bf16 (cast in place, after the fp32 runs), checked against our fp32.
    with torch.no_grad():
        references = {key: contenders["ours"](tokens)[tokens.ne(PAD)] for key, (_, tokens) in batches.items()}
    for model in contenders.models.values():
        model.to(torch.bfloat16)
    data["bf16"] = {}
    for key, (label, tokens) in batches.items():
        run = data["bf16"][key] = features_on(label, tokens, contenders, scale, reference=references.pop(key))
        speedup = runs[key]["seconds"]["ours"] / run["seconds"]["ours"]
        rows.append(
            Row(
                f"`extract_features` bf16, {label}",
                f"{ms(run['seconds']['ours'])} ({speedup:.2f}x our fp32, "
                f"{100 * run['ours_fraction_of_bf16_matmul']:.0f}% of bf16 matmul); "
                f"min cosine to fp32 {run['cosine_min']:.4f}",
                peers(run["seconds"]),
            )
        )
    return Section(rows, data)


class FeatureContenders(dict):
    """name -> tokens -> last-layer features (B, T, C), and ``models``: name -> the module that
    holds each contender's weights (cast together for the bf16 runs)."""

    def __init__(self, models: Mapping[str, torch.nn.Module]) -> None:
        super().__init__()
        self.models = dict(models)
        self["ours"] = self.models["ours"].extract_features
        self["fairseq"] = self.models["fairseq"].extract_features
        hf = self.models["transformers"]
        self["transformers"] = lambda tokens: hf(input_ids=tokens, attention_mask=tokens.ne(PAD)).last_hidden_state


def feature_contenders(layers: int, ws: Workspace, device: str = "cpu") -> FeatureContenders:
    """tokens -> last-layer features (B, T, C) for ours (our hub), fairseq's hub and transformers,
    all three holding the same random weights at base width, on ``device``."""
    from roberta_ext.families import preset
    from roberta_ext.hub import RobertaHubInterface
    from roberta_ext.modeling import RobertaModel
    from roberta_ext.tokenizers import GPT2BPE, Dictionary, FairseqGPT2Tokenizer

    vocab = ws.vocabulary
    folder = padded_dictionary(ws.root / "features_dict", dictionary_symbols(vocab.dict_txt), BASE_VOCAB)
    progress(f"features: building three {layers} x 768 models with the same weights, on {device}")
    torch.manual_seed(0)
    model = RobertaModel(preset("base", encoder_layers=layers))  # BERT's initialisation
    dictionary = Dictionary.load(folder / "dict.txt")
    dictionary.add_symbol("<mask>")
    tokenizer = FairseqGPT2Tokenizer(GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe), dictionary)
    ours = RobertaHubInterface(model, tokenizer).eval()
    theirs = fairseq_hub(folder, ["--arch", "roberta_base", "--encoder-layers", str(layers)])
    theirs.model.load_state_dict(model.state_dict(), strict=True)
    hf = transformers_roberta(model.state_dict(), layers)
    return FeatureContenders({"ours": ours.to(device), "fairseq": theirs.to(device), "transformers": hf.to(device)})


def features_on(
    label: str,
    tokens: torch.Tensor,
    contenders: Mapping[str, Callable[[torch.Tensor], torch.Tensor]],
    scale: Scale,
    reference: torch.Tensor | None = None,
) -> dict[str, Any]:
    """Check every contender's features on the real tokens against ours, then time them, in turns
    with a matmul of the features' dtype: the yardstick of our GFLOP/s, measured in the same
    rounds so that both see the same machine (its speed drifts from minute to minute).

    Without ``reference`` (fp32), every peer must agree with ours within 1e-3. With it (bf16
    contenders; ``reference`` our fp32 features on the real tokens, (N, C)), every contender's
    features must have a cosine similarity of at least 0.99 to it at every real token."""
    real = tokens.ne(PAD)
    lengths = real.sum(dim=1).tolist()
    with torch.no_grad():
        if reference is None:
            ours = contenders["ours"](tokens)[real]
            max_diff = {
                peer: float((call(tokens)[real] - ours).abs().max())
                for peer, call in contenders.items()
                if peer != "ours"
            }
            if max(max_diff.values()) > 1e-3:
                raise AssertionError(f"features of the {label} disagree with ours: max |diff| {max_diff}")
            agreement = f"max |diff| to ours {max(max_diff.values()):.1e}"
            checks: dict[str, Any] = {"max_abs_diff": max_diff}
            dtype = torch.float32
        else:
            cosine = {
                name: float(F.cosine_similarity(call(tokens)[real].float(), reference, dim=-1).min())
                for name, call in contenders.items()
            }
            if min(cosine.values()) < 0.99:
                raise AssertionError(f"bf16 features of the {label} drift from fp32: min cosine {cosine}")
            agreement = f"min cosine to our fp32 {min(cosine.values()):.4f}"
            checks = {"cosine_min_by_contender": cosine, "cosine_min": min(cosine.values())}
            dtype = torch.bfloat16
        progress(
            f"{label}: {sum(lengths)} real tokens, {str(dtype).removeprefix('torch.')} features agree "
            f"({agreement}); timing"
        )
        matmul_call, matmul_flops = matmul(4096 if scale.cuda else 2048, dtype, scale.device)
        timings = alternate(
            {**{name: partial(call, tokens) for name, call in contenders.items()}, "matmul": matmul_call},
            scale.repeats,
            scale.device,
        )
    matmul_rate = matmul_flops / timings.pop("matmul") / 1e9
    gflops = encoder_flops(lengths, scale.feature_layers) / timings["ours"] / 1e9
    progress(f"{label}: " + ", ".join(f"{name} {ms(t)}" for name, t in timings.items()))
    precision = "fp32" if reference is None else "bf16"
    return {
        "shape": list(tokens.shape),
        "real_tokens": sum(lengths),
        "dtype": str(dtype),
        "seconds": timings,
        **checks,
        "ours_gflops": gflops,
        f"{precision}_matmul_gflops": matmul_rate,
        f"ours_fraction_of_{precision}_matmul": gflops / matmul_rate,
    }


def features_bf16(ours: Any, tokens: torch.Tensor, scale: Scale) -> Section:
    """Our hub cast to bf16 against itself in fp32: speed, and cosine similarity of each token's
    features to fp32's."""
    ours_bf16 = copy.deepcopy(ours).to(torch.bfloat16)
    with torch.no_grad():
        features = ours.extract_features(tokens)
        cosine = F.cosine_similarity(ours_bf16.extract_features(tokens).float(), features, dim=-1)  # (B, T)
        progress(f"bf16: cosine to fp32 mean {float(cosine.mean()):.5f}, min {float(cosine.min()):.5f}; timing")
        timings = alternate(
            {"ours": partial(ours.extract_features, tokens), "bf16": partial(ours_bf16.extract_features, tokens)},
            scale.repeats,
            scale.device,
        )
    speedup = timings["ours"] / timings["bf16"]
    mean, low = float(cosine.mean()), float(cosine.min())
    row = Row(
        f"bf16 (`.to(torch.bfloat16)`), full batch {tokens.shape[0]} x {tokens.shape[1]}",
        f"{ms(timings['bf16'])}; cosine to fp32 mean {mean:.4f}, min {low:.4f}",
        f"ours fp32 {ms(timings['ours'])}: **{speedup:.2f}x**",
        ">= 1.8x our fp32, cosine >= 0.999",
        speedup >= 1.8 and mean >= 0.999,
    )
    return Section([row], {"seconds": timings, "speedup": speedup, "cosine_mean": mean, "cosine_min": low})


# ---------------------------------------------------------------------------------- paths

STRATEGIES = ("masked", "padded", "per_sequence", "nested", "varlen")
"""The attention strategies compared (``roberta_ext.modeling.attention.ATTENTION_STRATEGIES``
without ``auto``, which is timed as ours)."""
BF16_AUTOCAST = "ours_bf16_autocast"


def bench_paths(scale: Scale, ws: Workspace) -> Section:
    """Issue 14's code paths at base width: every attention strategy on the padded batches (fp32
    on the CPU; bf16 and fp32 on a GPU, where the varlen kernel runs), against ``auto`` and
    transformers; then the compiled inference path against eager and transformers at 8 x 128, with
    the first call's cost (compiling the bucket)."""
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    progress(f"paths: building ours and transformers ({scale.feature_layers} x 768, same weights)")
    torch.manual_seed(0)
    model = RobertaModel(preset("base", encoder_layers=scale.feature_layers)).eval()
    hf = transformers_roberta(model.state_dict(), scale.feature_layers)
    model.to(scale.device)
    hf.to(scale.device)
    generator = torch.Generator().manual_seed(0)
    rows: list[Row] = []
    data: dict[str, Any] = {"layers": scale.feature_layers, "device": scale.device, "strategies": {}, "compiled": {}}
    dtypes = (torch.bfloat16, torch.float32) if scale.cuda else (torch.float32,)
    for dtype in dtypes:
        model.to(dtype)
        hf.to(dtype)
        for batch, length in scale.feature_shapes:
            lengths = [length * (i + 1) // batch for i in range(batch)]
            tokens = random_batch(lengths, generator).to(scale.device)
            label = f"{precision_label(dtype)}, padded batch ({batch} rows, lengths {lengths[0]}..{length})"
            run = strategies_on(label, model, hf, tokens, dtype, scale)
            data["strategies"][f"{precision_label(dtype)}/{batch}x{length}"] = run
            rows.append(strategies_row(label, run, target=scale.cuda and dtype == torch.bfloat16 and batch == 64))
    for dtype in dtypes:
        model.to(dtype)
        hf.to(dtype)
        tokens = random_batch([128] * 8, generator).to(scale.device)
        run = compiled_on(f"{precision_label(dtype)}, full batch 8 x 128", model, hf, tokens, dtype, scale)
        data["compiled"][precision_label(dtype)] = run
        rows.append(compiled_row(f"{precision_label(dtype)}, full batch 8 x 128", run, scale))
    return Section(rows, data)


def precision_label(dtype: torch.dtype) -> str:
    return {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[dtype]


def features_call(model: torch.nn.Module, tokens: torch.Tensor, strategy: str | None = None) -> Callable[[], object]:
    """A call computing ``model``'s last-layer features of ``tokens`` (under ``strategy``)."""
    from roberta_ext.modeling import use_attention

    def call() -> torch.Tensor:
        with torch.no_grad(), use_attention(model, strategy or "auto"):
            return model(tokens, features_only=True)[0]

    return call


def hf_call(hf: Any, tokens: torch.Tensor) -> Callable[[], object]:
    def call() -> torch.Tensor:
        with torch.no_grad():
            return hf(input_ids=tokens, attention_mask=tokens.ne(PAD)).last_hidden_state

    return call


def agreement(features: torch.Tensor, reference: torch.Tensor, dtype: torch.dtype) -> dict[str, float]:
    """How ``features`` on the real tokens (N, C) agree with ``reference``; raises past the bounds
    the features section uses (1e-3 in fp32, a cosine of 0.99 in bf16)."""
    cosine = float(F.cosine_similarity(features.float(), reference.float(), dim=-1).min())
    max_diff = float((features.float() - reference.float()).abs().max())
    if (dtype == torch.float32 and max_diff > 1e-3) or cosine < 0.99:
        raise AssertionError(f"features disagree with the masked path: max |diff| {max_diff}, min cosine {cosine}")
    return {"max_abs_diff": max_diff, "cosine_min": cosine}


def strategies_on(
    label: str, model: Any, hf: Any, tokens: torch.Tensor, dtype: torch.dtype, scale: Scale
) -> dict[str, Any]:
    """Each attention strategy (where it runs: varlen needs CUDA and half precision) checked
    against the masked path on real tokens, then timed in turns with ``auto`` (ours),
    transformers and a matmul of ``dtype`` (the yardstick of the GFLOP/s)."""
    real = tokens.ne(PAD)
    lengths = real.sum(dim=1).tolist()
    reference = features_call(model, tokens, "masked")()[real]
    runnable = [s for s in STRATEGIES if s != "varlen" or (scale.cuda and dtype != torch.float32)]
    checks = {s: agreement(features_call(model, tokens, s)()[real], reference, dtype) for s in runnable}
    checks["transformers"] = agreement(hf_call(hf, tokens)()[real], reference, dtype)
    progress(f"paths: {label}: {', '.join(runnable)} agree with the masked path; timing")
    matmul_call, matmul_flops = matmul(4096 if scale.cuda else 2048, dtype, scale.device)
    timings = alternate(
        {
            "ours": features_call(model, tokens),
            **{s: features_call(model, tokens, s) for s in runnable},
            "transformers": hf_call(hf, tokens),
            "matmul": matmul_call,
        },
        scale.repeats,
        scale.device,
    )
    matmul_rate = matmul_flops / timings.pop("matmul") / 1e9
    flops = encoder_flops(lengths, scale.feature_layers)
    progress(f"paths: {label}: " + ", ".join(f"{name} {ms(t)}" for name, t in timings.items()))
    return {
        "shape": list(tokens.shape),
        "real_tokens": sum(lengths),
        "dtype": str(dtype),
        "seconds": timings,
        "checks": checks,
        "auto_chooses": auto_choice(model, tokens),
        "matmul_gflops": matmul_rate,
        "fraction_of_matmul": {name: flops / t / 1e9 / matmul_rate for name, t in timings.items()},
        "not_run": [s for s in STRATEGIES if s not in runnable],
    }


def auto_choice(model: Any, tokens: torch.Tensor) -> str:
    """What ``auto`` does with this batch: ``masked`` (not packed), or the packed strategy its
    first attention call takes."""
    from roberta_ext.modeling import attention

    chosen: list[str] = []
    original = attention.Packing.attention_for

    def spy(self: Any, q: torch.Tensor, dropout_p: float) -> str:
        chosen.append(original(self, q, dropout_p))
        return chosen[-1]

    attention.Packing.attention_for = spy
    try:
        features_call(model, tokens)()
    finally:
        attention.Packing.attention_for = original
    return chosen[0] if chosen else "masked"


def strategies_row(label: str, run: dict[str, Any], *, target: bool = False) -> Row:
    """The row of one padded batch; ``target``: issue 14's for the bf16 64 x 512 batch on a GPU."""
    seconds, fraction = run["seconds"], run["fraction_of_matmul"]
    cells = [
        f"{name} {ms(seconds[name])} ({100 * fraction[name]:.0f}%): {ratio(seconds[name], seconds['ours'])}"
        for name in (*STRATEGIES, "transformers")
        if name in seconds
    ]
    not_run = f"; not run here: {', '.join(run['not_run'])} (CUDA, fp16/bf16)" if run["not_run"] else ""
    return Row(
        f"attention strategies, {label}",
        f"auto ({run['auto_chooses']}) {ms(seconds['ours'])}, {100 * fraction['ours']:.0f}% of "
        f"{run['dtype'].removeprefix('torch.')} matmul on real tokens",
        " · ".join(cells) + not_run,
        ">= 1.6x transformers, >= 65% of bf16 matmul on real tokens" if target else "",
        seconds["transformers"] / seconds["ours"] >= 1.6 and fraction["ours"] >= 0.65 if target else None,
    )


def compiled_on(
    label: str, model: Any, hf: Any, tokens: torch.Tensor, dtype: torch.dtype, scale: Scale
) -> dict[str, Any]:
    """``compile_model`` (its default mode: CUDA graphs on a GPU, inductor's default on the CPU)
    against the eager path and transformers: the first call (compiling the bucket, timed), the
    agreement, then the three in turns."""
    from roberta_ext.inference.compiled import compile_model, uncompile_model

    real = tokens.ne(PAD)
    eager = features_call(model, tokens)
    reference = eager()[real]
    path = compile_model(model)
    sync = torch.cuda.synchronize if scale.cuda else (lambda: None)
    try:
        progress(f"paths: compiling {label} (first call)")
        start = time.perf_counter()
        first = features_call(model, tokens)()
        sync()
        first_call = time.perf_counter() - start
        checks = agreement(first[real], reference, dtype)
        for _ in range(3):  # CUDA graphs record on a later call than the first
            features_call(model, tokens)()
        encoder = model.encoder.sentence_encoder

        def eager_call() -> object:
            encoder.inference_forward = None
            try:
                return eager()
            finally:
                encoder.inference_forward = path

        timings = alternate(
            {"ours": features_call(model, tokens), "eager": eager_call, "transformers": hf_call(hf, tokens)},
            scale.repeats,
            scale.device,
        )
    finally:
        uncompile_model(model)
    progress(f"paths: {label}: first call {first_call:.1f} s; " + ", ".join(f"{n} {ms(t)}" for n, t in timings.items()))
    return {
        "shape": list(tokens.shape),
        "dtype": str(dtype),
        "mode": path.mode_for(tokens.device),
        "first_call_seconds": first_call,
        "compile_seconds": {str(k): v for k, v in path.compile_seconds.items()},
        "seconds": timings,
        "checks": checks,
    }


def compiled_row(label: str, run: dict[str, Any], scale: Scale) -> Row:
    seconds = run["seconds"]
    mode = run["mode"] or "default"
    target = ">= 2.5x transformers" if scale.cuda and run["dtype"] == "torch.bfloat16" else ""
    return Row(
        f"compiled inference (`compile=True`, mode {mode}), {label}",
        f"{ms(seconds['ours'])}; first call {run['first_call_seconds']:.1f} s (compiling the bucket)",
        f"{versus('eager', seconds, 'eager', ms)} · {versus('transformers', seconds, 'transformers', ms)}",
        target,
        seconds["transformers"] / seconds["ours"] >= 2.5 if target else None,
    )


# ---------------------------------------------------------------------------------- train


def fairseq_env() -> dict[str, str]:
    # --user-dir imports roberta_ext from this repository.
    return {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "PYTHONWARNINGS": "ignore",
    }


def fairseq_cli(tool: str) -> list[str]:
    """The command of a fairseq tool (``train``, ``preprocess``) run by this interpreter: the
    console scripts may live elsewhere (``pip install --target``)."""
    return [sys.executable, "-m", f"fairseq_cli.{tool}"]


def run_command(argv: Sequence[str]) -> str:
    """Run a command; its output, or an error with the output's tail."""
    result = subprocess.run(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=fairseq_env(), cwd=REPO
    )
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-25:])
        raise RuntimeError(f"{Path(argv[0]).name} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def train_inner_records(log: str) -> list[dict[str, float]]:
    """The ``train_inner`` JSON records of a ``fairseq-train --log-format json`` log."""
    records = []
    for line in log.splitlines():
        if "| train_inner |" in line and "{" in line:
            record = json.loads(line[line.index("{") :])
            records.append(
                {k: float(v) for k, v in record.items() if k in ("wps", "ups", "wpb", "num_updates", "loss")}
            )
    return records


def bench_train(scale: Scale, ws: Workspace) -> Section:
    """fairseq-train words/s: our plugin's model, task and criterion against fairseq's masked_lm at
    the same config, in alternating runs; ours again with ``--bf16-autocast`` (bf16 products under
    fairseq's float32 trainer) instead of the precision flags; and masking's share of our step."""
    data = binarized_data(ws)
    layers, width = scale.train_shape
    batch, block = scale.train_batch
    common = [
        *fairseq_cli("train"),
        str(data),
        *([] if scale.cuda else ["--cpu"]),
        "--num-workers",
        "0",
        "--seed",
        "1",
        "--log-format",
        "json",
        "--log-interval",
        str(scale.train_log_interval),
        "--no-save",
        "--disable-validation",
        "--optimizer",
        "adam",
        "--adam-betas",
        "(0.9,0.98)",
        "--lr",
        "1e-4",
        "--lr-scheduler",
        "polynomial_decay",
        "--warmup-updates",
        "5",
        "--total-num-update",
        str(scale.train_updates),
        "--max-update",
        str(scale.train_updates),
        "--tokens-per-sample",
        str(block),
        "--sample-break-mode",
        "none",
        "--batch-size",
        str(batch),
        "--max-positions",
        str(block),
        *encoder_args(layers, width),
    ]
    plugin = [
        "--user-dir",
        str(REPO / "roberta_ext"),
        "--arch",
        "roberta_ext_base",
        "--task",
        "roberta_ext_mlm",
        "--criterion",
        "roberta_ext_mlm",
    ]
    precision = list(scale.train_precision)
    commands = {
        "ours": [*common, *precision, *plugin],
        "fairseq": [*common, *precision, "--arch", "roberta_base", "--task", "masked_lm", "--criterion", "masked_lm"],
        BF16_AUTOCAST: [*common, "--bf16-autocast", *plugin],
    }
    records: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
    run_wps: dict[str, list[float]] = {name: [] for name in commands}
    last_loss: dict[str, list[float]] = {name: [] for name in commands}
    for run in range(scale.train_runs):
        for name, argv in commands.items():
            progress(f"train: {name}, run {run + 1} of {scale.train_runs} ({scale.train_updates} updates)")
            # The first logged interval holds start-up (first batches, allocator warm-up): dropped.
            every = train_inner_records(run_command(argv))
            kept = every[1:]
            records[name] += kept
            run_wps[name].append(statistics.median(r["wps"] for r in kept))
            last_loss[name].append(every[-1]["loss"])
    wps = {name: statistics.median(r["wps"] for r in recs) for name, recs in records.items()}
    step_s = {name: statistics.median(r["wpb"] / r["wps"] for r in recs) for name, recs in records.items()}
    # The machine's speed drifts over minutes: each of our runs is compared with the fairseq run
    # right after it, and the median of those ratios is the figure.
    pair_ratios = [ours / theirs for ours, theirs in zip(run_wps["ours"], run_wps["fairseq"])]
    speedup = statistics.median(pair_ratios)
    bf16_ratios = [ours / theirs for ours, theirs in zip(run_wps[BF16_AUTOCAST], run_wps["fairseq"])]
    bf16_speedup = statistics.median(bf16_ratios)
    bf16_over_ours = statistics.median(b / o for b, o in zip(run_wps[BF16_AUTOCAST], run_wps["ours"]))
    loss = {name: statistics.mean(values) for name, values in last_loss.items()}
    progress(
        f"train: ours {wps['ours']:.0f} wps, fairseq {wps['fairseq']:.0f} wps; ratio per pair of runs "
        + ", ".join(f"{r:.2f}" for r in pair_ratios)
    )
    masking_s = masking_seconds(len(dictionary_symbols(ws.vocabulary.dict_txt)) + 5, batch, block)
    share = masking_s / step_s["ours"]
    config = (
        f"{layers} x {width}, {batch} x {block} tokens, {scale.train_updates} updates"
        f"{''.join(', ' + flag for flag in scale.train_precision)}, {'GPU' if scale.cuda else 'CPU'}"
    )
    precision_name = " ".join(scale.train_precision) or "fp32"
    targets = not scale.cuda  # the targets were set for the 2-core CPU
    rows = [
        Row(
            f"`fairseq-train` words/s ({config})",
            f"{wps['ours']:.0f} wps",
            f"fairseq `roberta_base` + `masked_lm` {wps['fairseq']:.0f} wps: **{speedup:.2f}x** (median of "
            f"{len(pair_ratios)} pairs of runs: {', '.join(f'{r:.2f}' for r in pair_ratios)})",
            ">= 1.1x fairseq" if targets else "",
            speedup >= 1.1 if targets else None,
        ),
        Row(
            f"`fairseq-train --bf16-autocast` words/s (same config, {'no --fp16' if precision else 'bf16 products'})",
            f"{wps[BF16_AUTOCAST]:.0f} wps ({bf16_over_ours:.2f}x ours with {precision_name}); loss at update "
            f"{scale.train_updates}: {loss[BF16_AUTOCAST]:.3f} against ours {precision_name} {loss['ours']:.3f}, "
            f"fairseq {loss['fairseq']:.3f}",
            f"fairseq `roberta_base` with {precision_name} {wps['fairseq']:.0f} wps: **{bf16_speedup:.2f}x** "
            f"(median of {len(bf16_ratios)} pairs of runs: {', '.join(f'{r:.2f}' for r in bf16_ratios)})",
            ">= 1.8x fairseq --fp16, same loss within noise" if scale.cuda else "",
            bf16_speedup >= 1.8 and abs(loss[BF16_AUTOCAST] - loss["fairseq"]) < 0.1 if scale.cuda else None,
        ),
        Row(
            "masking share of a training step",
            f"{ms(masking_s)} of {ms(step_s['ours'])} = {100 * share:.2f}%",
            target="< 5%",
            met=share < 0.05,
        ),
    ]
    return Section(
        rows,
        {
            "config": config,
            "runs": scale.train_runs,
            "wps": wps,
            "run_wps": run_wps,
            "pair_ratios": pair_ratios,
            "speedup": speedup,
            "bf16_autocast_pair_ratios": bf16_ratios,
            "bf16_autocast_speedup": bf16_speedup,
            "bf16_autocast_over_ours": bf16_over_ours,
            "last_loss": last_loss,
            "step_seconds": step_s,
            "records": len(records["ours"]),
            "masking_seconds": masking_s,
            "masking_share": share,
        },
    )


def binarized_data(ws: Workspace) -> Path:
    """``ws.lines`` BPE-encoded (9/10 train, 1/10 valid) and binarized by ``fairseq-preprocess``."""
    from roberta_ext.tokenizers import GPT2BPE

    vocab = ws.vocabulary
    bpe = GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe)
    text, data = ws.root / "train_text", ws.root / "train_data"
    text.mkdir()
    split = len(ws.lines) * 9 // 10
    for name, part in (("train", ws.lines[:split]), ("valid", ws.lines[split:])):
        (text / f"{name}.bpe").write_text("".join(bpe.encode_fairseq_string(line) + "\n" for line in part))
    progress("train: fairseq-preprocess")
    run_command(
        [
            *fairseq_cli("preprocess"),
            "--only-source",
            "--srcdict",
            str(vocab.dict_txt),
            "--trainpref",
            str(text / "train.bpe"),
            "--validpref",
            str(text / "valid.bpe"),
            "--destdir",
            str(data),
            "--workers",
            "1",
        ]
    )
    return data


def masking_seconds(vocab_size: int, batch: int, block: int) -> float:
    """Median seconds of one ``BatchMasker`` call (default token masking, as the training runs
    use) on a full (batch, block) batch: what the plugin's collater adds to each step."""
    from roberta_ext.data.masking import BatchMasker, MaskingConfig

    tokens = torch.randint(4, vocab_size - 1, (batch, block), generator=torch.Generator().manual_seed(0))
    tokens[:, 0] = 0
    masker = BatchMasker(
        MaskingConfig(),
        vocab_size=vocab_size,
        mask_idx=vocab_size - 1,
        pad_idx=PAD,
        special_ids=[0, 1, 2, 3, vocab_size - 1],
    )
    epochs = iter(range(10**9))
    return alternate({"mask": lambda: masker(tokens, torch.arange(batch), next(epochs))}, 50)["mask"]


# ----------------------------------------------------------------------------------- load


def peak_rss_bytes() -> int:
    """This process's peak resident memory. Not ``getrusage().ru_maxrss``: Linux carries the
    parent's peak over into a child across fork/exec, so a worker started by a benchmark that
    has just written a 1.4 GB file would report at least that. ``VmHWM`` belongs to the
    process's own address space only."""
    status = Path("/proc/self/status").read_text()
    return int(re.search(r"^VmHWM:\s+(\d+) kB", status, re.M).group(1)) * 1024


def load_worker(kind: str, path: str, dict_dir: str, layers: int) -> None:
    """Body of the fresh process that ``bench_load`` starts per measurement; prints one JSON line."""
    model = None
    if kind == "ours":
        from roberta_ext.checkpoints import load_roberta_checkpoint
    elif kind == "fairseq":
        from fairseq import checkpoint_utils

        import roberta_ext.fairseq_plugin  # noqa: F401  (lets fairseq's loader read under torch 2.13)

        upgrade = checkpoint_utils._upgrade_state_dict

        def upgrade_empty_history(state: dict[str, Any]) -> dict[str, Any]:
            # save_roberta_checkpoint writes optimizer_history=[], on which fairseq's upgrade step
            # raises IndexError; give it the one entry fairseq's trainer writes. Costs nothing.
            state["optimizer_history"] = state["optimizer_history"] or [
                {"optimizer_name": None, "lr_scheduler_state": {}, "num_updates": 0}
            ]
            return upgrade(state)

        checkpoint_utils._upgrade_state_dict = upgrade_empty_history
    rss_after_imports = peak_rss_bytes()
    start = time.perf_counter()
    if kind == "ours":
        model = load_roberta_checkpoint(path).model
    elif kind == "fairseq":
        # What fairseq's from_pretrained does: read the file, build the model, copy the weights in.
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        model = fairseq_hub(Path(dict_dir), ["--arch", "roberta_large", "--encoder-layers", str(layers)]).model
        model.load_state_dict(state["model"], strict=True)
        del state
    seconds = time.perf_counter() - start
    peak_after_load = peak_rss_bytes()
    if model is not None:  # first use reads every weight (memory-mapped pages come in here)
        with torch.no_grad():
            sum(float(p.sum()) for p in model.parameters())
    print(
        json.dumps(
            {
                "seconds": seconds,
                "peak_after_imports": rss_after_imports,
                "peak_after_load": peak_after_load,
                "peak_after_use": peak_rss_bytes(),
            }
        )
    )


def bench_load(scale: Scale, ws: Workspace) -> Section:
    """Load a large-shaped checkpoint in fresh processes: ours, and fairseq's own loader."""
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel

    layers = scale.load_layers
    path = ws.root / "large.pt"
    dict_dir = padded_dictionary(ws.root / "load_dict", [], BASE_VOCAB)
    progress(f"load: writing a {layers} x 1024 checkpoint (vocabulary {BASE_VOCAB})")
    torch.manual_seed(0)
    try:
        save_roberta_checkpoint(RobertaModel(preset("large", encoder_layers=layers)), path)
        size = path.stat().st_size

        def worker(kind: str) -> dict[str, float]:
            argv = [
                sys.executable,
                "-m",
                "benchmarks.run",
                "--load-worker",
                kind,
                str(path),
                str(dict_dir),
                str(layers),
            ]
            return json.loads(run_command(argv).strip().splitlines()[-1])

        baseline = worker("baseline")["peak_after_load"]  # a process that imported torch and nothing else
        results: dict[str, list[dict[str, float]]] = {"ours": [], "fairseq": []}
        for repeat in range(scale.load_repeats):
            for kind in results:
                progress(f"load: {kind}, {repeat + 1} of {scale.load_repeats}")
                results[kind].append(worker(kind))
    finally:
        path.unlink(missing_ok=True)

    def summary(runs: list[dict[str, float]]) -> dict[str, float]:
        return {
            "seconds": statistics.median(r["seconds"] for r in runs),
            "peak_rss_load": max(r["peak_after_load"] for r in runs) - baseline,
            "peak_rss_use": max(r["peak_after_use"] for r in runs) - baseline,
            "imports_rss": max(r["peak_after_imports"] for r in runs) - baseline,
        }

    data = {
        "file_bytes": size,
        "layers": layers,
        "baseline_rss": baseline,
        **{kind: summary(runs) for kind, runs in results.items()},
    }
    ours, theirs = data["ours"], data["fairseq"]
    progress(f"load: ours {ours['seconds']:.1f} s, fairseq {theirs['seconds']:.1f} s")

    def memory(m: dict[str, float]) -> str:
        return (
            f"peak RSS {m['peak_rss_load'] / size:.2f}x the file after loading, "
            f"{m['peak_rss_use'] / size:.2f}x after reading every weight"
        )

    rows = [
        Row(
            f"load a {layers} x 1024 checkpoint ({size / 1e9:.2f} GB)",
            f"{ours['seconds']:.2f} s; {memory(ours)}",
            f"fairseq `load_checkpoint_to_cpu` + build + `load_state_dict` {theirs['seconds']:.2f} s: "
            f"**{ratio(theirs['seconds'], ours['seconds'])}**; {memory(theirs)}",
            "peak RSS <= 1.3x file",
            max(ours["peak_rss_load"], ours["peak_rss_use"]) <= 1.3 * size,
        )
    ]
    return Section(rows, data)


# ----------------------------------------------------------------------------------- main

BENCHMARKS: dict[str, Callable[[Scale, Workspace], Section]] = {
    "machine": bench_machine,
    "tokenize": bench_tokenize,
    "features": bench_features,
    "paths": bench_paths,
    "train": bench_train,
    "load": bench_load,
}


def code_version() -> dict[str, Any]:
    """The commit measured, and whether roberta_ext/ had uncommitted changes."""

    def git(*argv: str) -> str:
        return subprocess.run(["git", *argv], cwd=REPO, capture_output=True, text=True).stdout.strip()

    return {
        "commit": git("rev-parse", "HEAD") or None,
        "uncommitted_changes": bool(git("status", "--porcelain", "roberta_ext")),
    }


def table(sections: Mapping[str, Section]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| section | measure | ours | peers (ratio = peer time / our time) | target | status |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, section in sections.items():
        for row in section.rows:
            status = "" if row.met is None else ("met" if row.met else "**missed**")
            lines.append(f"| {name} | {row.measure} | {row.ours} | {row.peers} | {row.target} | {status} |")
    return "\n".join(lines)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    """Write atomically: the file appears whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def run_section(name: str, run: Callable[[], Section]) -> Section:
    """``run()``, announced, with the share of the CPUs other work took meanwhile recorded in
    its data (other work on the machine skews every figure)."""
    progress(f"== {name}")
    before = cpu_snapshot()
    section = run()
    busy = section.data["cpu_share_taken_by_others"] = contention(before, cpu_snapshot())
    progress(
        f"{name} done; meanwhile other processes used {100 * busy['other_processes']:.0f}% of the CPUs "
        f"and the host stole {100 * busy['host_steal']:.0f}%"
        + (" (figures are noisy)" if sum(busy.values()) > 0.1 else "")
    )
    return section


def write_results(out: Path, sections: Mapping[str, Section], **fields: Any) -> dict[str, Any]:
    """Write ``fields``, the code's version, every section's data and the table's rows to the
    JSON file ``out``, print the Markdown table, and return what was written."""
    payload = {
        **fields,
        **code_version(),
        "sections": {name: section.data for name, section in sections.items()},
        "table": [{"section": name, **asdict(row)} for name, section in sections.items() for row in section.rows],
    }
    write_json(out, payload)
    print()
    print(table(sections))
    return payload


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="shrink everything: a 1-2 minute smoke run")
    parser.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where matmuls, features and training run (default: cpu)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        metavar="SECTION",
        help=f"run only these sections, of: {', '.join(SECTIONS)}",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="JSON results file (default: benchmarks/results/DEVICE-DATE.json for a full run of every "
        "section, else benchmarks/results/scratch-DATE.json, which git ignores)",
    )
    parser.add_argument("--load-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load_worker:
        kind, path, dict_dir, layers = args.load_worker
        load_worker(kind, path, dict_dir, int(layers))
        return 0

    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: torch sees no CUDA device here")
    scale = {("cpu", False): FULL, ("cpu", True): QUICK, ("cuda", False): GPU_FULL, ("cuda", True): GPU_QUICK}[
        args.device, args.quick
    ]
    chosen = [s for s in SECTIONS if not args.only or s in args.only]
    today = datetime.date.today().isoformat()
    complete = not args.quick and len(chosen) == len(SECTIONS)
    out = args.out or RESULTS / f"{args.device if complete else 'scratch'}-{today}.json"
    sections: dict[str, Section] = {}
    with tempfile.TemporaryDirectory(prefix="roberta_ext_bench_") as tmp:
        ws = Workspace(scale, Path(tmp))
        for name in chosen:
            sections[name] = run_section(name, partial(BENCHMARKS[name], scale, ws))
    payload = write_results(
        out,
        sections,
        date=today,
        quick=args.quick,
        device=args.device,
        scale=asdict(scale),
        seconds=time.perf_counter() - _STARTED,
    )
    print(
        f"\n{len(chosen)} sections in {payload['seconds'] / 60:.1f} min at commit {str(payload['commit'])[:10]}"
        f"{' with uncommitted changes' if payload['uncommitted_changes'] else ''}; results: {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
