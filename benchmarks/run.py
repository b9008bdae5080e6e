"""Every speed figure of issue 4 in one run: roberta_ext against fairseq, transformers and tiktoken.

Sections (``--only`` picks some; the default runs all, in this order):

  machine   fp32 and bf16 matmul GFLOP/s (torch.mm), torch threads, CPU model and flags
  tokenize  text -> tensor of fairseq ids, per line and per batch, against fairseq's hub;
            raw GPT-2 BPE against tiktoken and HF ``tokenizers``, single thread, same vocabulary
  features  ``extract_features`` at base shape (12 x 768, vocabulary 50265) against fairseq's hub
            and transformers' ``RobertaModel`` (SDPA), same weights; a full and a padded batch; bf16
  train     ``fairseq-train`` words/s: ``--arch roberta_ext_base`` against fairseq's ``roberta_base``
            at the same small config; masking's share of a training step
  load      a 24 x 1024 checkpoint: load time and peak RSS, ours against fairseq's loader

Every contender gets the same weights and the same text. Contenders are timed in turns (ours,
peer, ours, peer, ...) after one untimed warm-up call each, and the median is reported, so that
load from other processes on the machine falls on all of them alike. A ratio is peer time / our
time: above 1 we are faster. Everything is built here (vocabulary, text, models, data); nothing
is downloaded. The printed table is Markdown, ready for ``docs/benchmarks.md``.

    .venv/bin/python -m benchmarks.run                 # all sections, ~10 minutes on 2 cores
    .venv/bin/python -m benchmarks.run --quick         # everything shrunk: a ~2 minute smoke run
    .venv/bin/python -m benchmarks.run --only tokenize features
"""

from __future__ import annotations

import os

# HF tokenizers parallelises with rayon; its pool size is read once, when the library is first
# imported (by us or by transformers), so the single-thread setting must come before any import.
os.environ["RAYON_RS_NUM_CPUS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

import argparse  # noqa: E402
import copy  # noqa: E402
import datetime  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import sysconfig  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable, Mapping, Sequence  # noqa: E402
from dataclasses import asdict, dataclass, field  # noqa: E402
from functools import cached_property  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

# Only the standard library and torch are imported at the top: the loading section starts fresh
# processes through this module, and their baseline memory must be that of torch alone.

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RESULTS = REPO / "benchmarks" / "results"
SECTIONS = ("machine", "tokenize", "features", "train", "load")
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


FULL = Scale(repeats=5, matmul_sizes=(1024, 2048), text_bytes=1_000_000, batch_lines=32, feature_layers=12,
             train_shape=(4, 256), train_updates=40, train_log_interval=5, train_runs=2, load_layers=24,
             load_repeats=2)
QUICK = Scale(repeats=2, matmul_sizes=(1024,), text_bytes=100_000, batch_lines=32, feature_layers=2,
              train_shape=(2, 128), train_updates=12, train_log_interval=4, train_runs=1, load_layers=2,
              load_repeats=1)


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
    rows: list[Row] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:6.1f} s] {message}", flush=True)


def alternate(contenders: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median seconds per call of each contender, called in turns: one untimed warm-up call each,
    then ``repeats`` rounds of one call each (a, b, c, a, b, c, ...)."""
    for call in contenders.values():
        call()
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, call in contenders.items():
            start = time.perf_counter()
            call()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def ratio(peer: float, ours: float) -> str:
    return f"{peer / ours:.2f}x"


def mb_per_s(megabytes: float, seconds: float) -> str:
    return f"{megabytes / seconds:.2f} MB/s"


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms" if seconds >= 0.1 else f"{seconds * 1e3:.1f} ms"


def cpu_snapshot() -> tuple[float, float, float]:
    """(wall seconds, busy CPU seconds of the whole machine, CPU seconds of this process and its
    finished children)."""
    user, nice, system, _idle, _iowait, irq, softirq = map(int, Path("/proc/stat").read_text().split()[1:8])
    own = os.times()
    return (time.monotonic(), (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK"),
            own.user + own.system + own.children_user + own.children_system)


def others_share(start: tuple[float, float, float], end: tuple[float, float, float]) -> float:
    """Share of the machine's CPUs that other processes used between two snapshots."""
    wall, busy, own = (b - a for a, b in zip(start, end))
    return max(0.0, (busy - own) / (wall * (os.cpu_count() or 1)))


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
        self.fp32_gflops = 0.0  # set by the machine section, which runs before the features

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
        code = (line for path in sorted(stdlib.glob("*/*.py"))
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip())
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
        argv += ["--bpe", "gpt2", "--gpt2-encoder-json", str(vocabulary.encoder_json),
                 "--gpt2-vocab-bpe", str(vocabulary.vocab_bpe)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(), argv))
        task = tasks.setup_task(cfg.task)
        return RobertaHubInterface(cfg, task, task.build_model(cfg.model)).eval()


def encoder_args(layers: int, width: int) -> list[str]:
    """fairseq's model options for a post-LN encoder of this shape (FFN 4x, 64-wide heads)."""
    return ["--encoder-layers", str(layers), "--encoder-embed-dim", str(width),
            "--encoder-ffn-embed-dim", str(4 * width), "--encoder-attention-heads", str(max(1, width // 64))]


# -------------------------------------------------------------------------------- machine


def bench_machine(scale: Scale, _: Workspace) -> Section:
    """Matmul rates (the yardstick for the encoder's GFLOP/s), threads, CPU model and flags."""
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
        "matmul_gflops": {},
    }
    for dtype in (torch.float32, torch.bfloat16):
        for n in scale.matmul_sizes:
            a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
            out = torch.empty(n, n, dtype=dtype)
            seconds = alternate({"mm": lambda: torch.mm(a, b, out=out)}, max(scale.repeats, 5))["mm"]
            data["matmul_gflops"][f"{str(dtype).removeprefix('torch.')}_{n}"] = 2 * n**3 / seconds / 1e9
    data["fp32_gflops"] = max(v for k, v in data["matmul_gflops"].items() if k.startswith("float32"))
    data["bf16_gflops"] = max(v for k, v in data["matmul_gflops"].items() if k.startswith("bfloat16"))
    progress(f"matmul: fp32 {data['fp32_gflops']:.0f} GFLOP/s, bf16 {data['bf16_gflops']:.0f} GFLOP/s")
    n = max(scale.matmul_sizes)
    flag_text = ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in data["flags"].items())
    rows = [
        Row("CPU", f"{data['cpu']}, {data['logical_cpus']} logical CPUs, torch {data['torch']} "
                   f"with {data['torch_threads']} threads ({data['cpu_capability']}); {flag_text}"),
        Row(f"fp32 matmul {n}^3", f"{data['matmul_gflops'][f'float32_{n}']:.0f} GFLOP/s"),
        Row(f"bf16 matmul {n}^3", f"{data['matmul_gflops'][f'bfloat16_{n}']:.0f} GFLOP/s"),
    ]
    return Section(rows, data)


# ------------------------------------------------------------------------------- tokenize


def bench_tokenize(scale: Scale, ws: Workspace) -> Section:
    """Ours against fairseq's hub (``encode``, batch encode) and against tiktoken and HF
    ``tokenizers`` (raw BPE to GPT-2 ids), on ``ws.lines``."""
    import tiktoken
    from fairseq.data.data_utils import collate_tokens
    from tokenizers import ByteLevelBPETokenizer

    import roberta_ext
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.modeling import EncoderConfig, RobertaModel
    from roberta_ext.tokenizers import GPT2BPE
    from roberta_ext.tokenizers.gpt2_bpe import GPT2_SPLIT_PATTERN, bytes_to_unicode

    vocab, lines, megabytes = ws.vocabulary, ws.lines, ws.megabytes
    progress(f"tokenize: {megabytes:.2f} MB in {len(lines)} lines")
    # Ours as users get it: roberta_ext.from_pretrained on a model folder (a tiny model: only the
    # tokenizer is used here); fairseq's RobertaHubInterface on the same dictionary and BPE files.
    model_dir = ws.root / "tokenize_model"
    model_dir.mkdir()
    for path in (vocab.encoder_json, vocab.vocab_bpe, vocab.dict_txt):
        shutil.copy(path, model_dir / path.name)
    vocab_size = len(dictionary_symbols(vocab.dict_txt)) + 5
    save_roberta_checkpoint(RobertaModel(EncoderConfig.preset("tiny", vocab_size=vocab_size)), model_dir / "model.pt")
    ours = roberta_ext.from_pretrained(model_dir)
    theirs = fairseq_hub(vocab.folder, ["--arch", "roberta_base", *encoder_args(1, 64)], vocab)

    ours_ids = [ours.encode(line) for line in lines]
    identical = all(torch.equal(a, theirs.encode(line)) for a, line in zip(ours_ids, lines))
    per_line = alternate({"ours": lambda: [ours.encode(line) for line in lines],
                          "fairseq": lambda: [theirs.encode(line) for line in lines]}, scale.repeats)
    progress(f"encode: ours {mb_per_s(megabytes, per_line['ours'])}, fairseq {mb_per_s(megabytes, per_line['fairseq'])}")

    batches = [lines[i:i + scale.batch_lines] for i in range(0, len(lines), scale.batch_lines)]
    batch_identical = all(torch.equal(ours.encode_batch(b)[0], collate_tokens([theirs.encode(s) for s in b], PAD))
                          for b in batches)
    # fairseq has no batch encode; its README pads a list of encode() results with collate_tokens.
    batched = alternate({"ours": lambda: [ours.encode_batch(b) for b in batches],
                         "fairseq": lambda: [collate_tokens([theirs.encode(s) for s in b], PAD) for b in batches]},
                        scale.repeats)
    progress(f"batch encode: ours {mb_per_s(megabytes, batched['ours'])}, "
             f"fairseq {mb_per_s(megabytes, batched['fairseq'])}")

    # Raw BPE, text -> GPT-2 ids, one thread each, on the same encoder.json / vocab.bpe.
    bpe = GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe)  # a fresh instance: its own cache
    byte_of = {symbol: byte for byte, symbol in bytes_to_unicode().items()}
    encoder = json.loads(vocab.encoder_json.read_text(encoding="utf-8"))
    tik = tiktoken.Encoding("roberta_ext_bench", pat_str=GPT2_SPLIT_PATTERN, special_tokens={},
                            mergeable_ranks={bytes(byte_of[c] for c in token): i for token, i in encoder.items()})
    hf = ByteLevelBPETokenizer(str(vocab.encoder_json), str(vocab.vocab_bpe), add_prefix_space=False)
    raw = alternate({"ours": lambda: [bpe.encode(line) for line in lines],
                     "tiktoken": lambda: [tik.encode_ordinary(line) for line in lines],
                     # encode_batch is HF's fastest path; with RAYON_RS_NUM_CPUS=1 it uses one thread.
                     "hf_tokenizers": lambda: hf.encode_batch(lines, add_special_tokens=False)}, scale.repeats)
    progress("raw BPE: " + ", ".join(f"{k} {mb_per_s(megabytes, v)}" for k, v in raw.items()))
    reference = [bpe.encode(line) for line in lines]
    disagree = {
        "tiktoken": [i for i, (a, line) in enumerate(zip(reference, lines)) if a != tik.encode_ordinary(line)],
        "hf_tokenizers": [i for i, (a, e) in enumerate(zip(reference, hf.encode_batch(lines, add_special_tokens=False)))
                          if a != e.ids],
    }

    def rates(timings: dict[str, float]) -> dict[str, float]:
        return {name: megabytes / seconds for name, seconds in timings.items()}

    data = {
        "megabytes": megabytes, "lines": len(lines), "batch_lines": scale.batch_lines,
        "encode_mb_s": rates(per_line), "encode_ids_identical": identical,
        "batch_encode_mb_s": rates(batched), "batch_ids_identical": batch_identical,
        "raw_bpe_mb_s": rates(raw),
        "raw_bpe_lines_differing": {k: len(v) for k, v in disagree.items()},
        "raw_bpe_first_differing_line": {k: lines[v[0]][:200] if v else None for k, v in disagree.items()},
    }
    encode_ratio = per_line["fairseq"] / per_line["ours"]
    batch_ratio = batched["fairseq"] / batched["ours"]
    tik_ratio = raw["tiktoken"] / raw["ours"]
    rows = [
        Row("`encode`: text -> tensor of fairseq ids, per line",
            mb_per_s(megabytes, per_line["ours"]) + (", ids identical" if identical else ", IDS DIFFER"),
            f"fairseq hub {mb_per_s(megabytes, per_line['fairseq'])}: **{ratio(per_line['fairseq'], per_line['ours'])}**",
            ">= 3x fairseq, ids identical", encode_ratio >= 3 and identical),
        Row(f"batch encode: {scale.batch_lines} lines -> padded tensor",
            mb_per_s(megabytes, batched["ours"]) + (", ids identical" if batch_identical else ", IDS DIFFER"),
            f"fairseq encode + collate_tokens {mb_per_s(megabytes, batched['fairseq'])}: "
            f"**{ratio(batched['fairseq'], batched['ours'])}**",
            ">= 5x fairseq", batch_ratio >= 5 and batch_identical),
        Row("raw BPE: text -> GPT-2 ids, 1 thread", mb_per_s(megabytes, raw["ours"]),
            f"tiktoken {mb_per_s(megabytes, raw['tiktoken'])}: **{ratio(raw['tiktoken'], raw['ours'])}**; "
            f"HF tokenizers {mb_per_s(megabytes, raw['hf_tokenizers'])}: {ratio(raw['hf_tokenizers'], raw['ours'])}",
            ">= 0.9x tiktoken", tik_ratio >= 0.9),
        Row("lines whose ids differ from ours", "-",
            f"tiktoken {len(disagree['tiktoken'])} of {len(lines)} "
            f"({100 * len(disagree['tiktoken']) / len(lines):.2f}%); HF tokenizers {len(disagree['hf_tokenizers'])}"),
    ]
    return Section(rows, data)


# ------------------------------------------------------------------------------- features

# fairseq (and our) key pattern -> transformers RobertaModel key. Keys that match none (the LM
# head, the format version) have no counterpart in RobertaModel and are left out.
HF_KEY_MAP: list[tuple[str, str]] = [
    (r"^encoder\.sentence_encoder\.embed_tokens\.", "embeddings.word_embeddings."),
    (r"^encoder\.sentence_encoder\.embed_positions\.", "embeddings.position_embeddings."),
    (r"^encoder\.sentence_encoder\.layernorm_embedding\.", "embeddings.LayerNorm."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.self_attn\.q_proj\.", r"encoder.layer.\1.attention.self.query."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.self_attn\.k_proj\.", r"encoder.layer.\1.attention.self.key."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.self_attn\.v_proj\.", r"encoder.layer.\1.attention.self.value."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.self_attn\.out_proj\.", r"encoder.layer.\1.attention.output.dense."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.self_attn_layer_norm\.", r"encoder.layer.\1.attention.output.LayerNorm."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.fc1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.fc2\.", r"encoder.layer.\1.output.dense."),
    (r"^encoder\.sentence_encoder\.layers\.(\d+)\.final_layer_norm\.", r"encoder.layer.\1.output.LayerNorm."),
]


def transformers_roberta(state_dict: Mapping[str, torch.Tensor], layers: int) -> Any:
    """transformers' ``RobertaModel`` (SDPA attention, no pooler) holding a base-width fairseq
    state dict, loaded strictly. ``token_type_embeddings`` is a single zero row (RoBERTa has
    no segments)."""
    from transformers import RobertaConfig, RobertaModel as HFRobertaModel

    config = RobertaConfig(vocab_size=BASE_VOCAB, hidden_size=768, num_hidden_layers=layers, num_attention_heads=12,
                           intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1, pad_token_id=PAD,
                           layer_norm_eps=1e-5, hidden_act="gelu", attn_implementation="sdpa")
    converted = {}
    for key, tensor in state_dict.items():
        for pattern, replacement in HF_KEY_MAP:
            if re.match(pattern, key):
                converted[re.sub(pattern, replacement, key)] = tensor
                break
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
    """``extract_features`` of ours, fairseq's hub and transformers on identical weights."""
    from roberta_ext.hub import RobertaHubInterface
    from roberta_ext.modeling import EncoderConfig, RobertaModel
    from roberta_ext.modeling.encoder import init_bert_params
    from roberta_ext.tokenizers import Dictionary, FairseqGPT2Tokenizer, GPT2BPE

    layers = scale.feature_layers
    vocab = ws.vocabulary
    folder = padded_dictionary(ws.root / "features_dict", dictionary_symbols(vocab.dict_txt), BASE_VOCAB)
    progress(f"features: building three {layers} x 768 models with the same weights")
    torch.manual_seed(0)
    model = RobertaModel(EncoderConfig.preset("base", encoder_layers=layers))
    model.apply(init_bert_params)
    dictionary = Dictionary.load(folder / "dict.txt")
    dictionary.add_symbol("<mask>")
    ours = RobertaHubInterface(model, FairseqGPT2Tokenizer(GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe),
                                                           dictionary)).eval()
    theirs = fairseq_hub(folder, ["--arch", "roberta_base", "--encoder-layers", str(layers)])
    theirs.model.load_state_dict(model.state_dict(), strict=True)
    hf = transformers_roberta(model.state_dict(), layers)

    generator = torch.Generator().manual_seed(0)
    inputs = {
        "full": random_batch([128] * 8, generator),
        "padded": random_batch([16 * (i + 1) for i in range(8)], generator),  # 16, 32, ..., 128
    }
    contenders = {
        "ours": lambda tokens: ours.extract_features(tokens),
        "fairseq": lambda tokens: theirs.extract_features(tokens),
        "transformers": lambda tokens: hf(input_ids=tokens, attention_mask=tokens.ne(PAD)).last_hidden_state,
    }
    fp32_rate = ws.fp32_gflops
    data: dict[str, Any] = {"layers": layers, "fp32_matmul_gflops": fp32_rate}
    rows = []
    with torch.no_grad():
        for name, tokens in inputs.items():
            real = tokens.ne(PAD)
            lengths = real.sum(dim=1).tolist()
            reference = contenders["ours"](tokens)[real]
            max_diff = {peer: float((call(tokens)[real] - reference).abs().max())
                        for peer, call in contenders.items() if peer != "ours"}
            if max(max_diff.values()) > 1e-3:
                raise AssertionError(f"features of the {name} batch disagree with ours: max |diff| {max_diff}")
            progress(f"{name} batch {tuple(tokens.shape)}, {sum(lengths)} real tokens: features agree "
                     f"(max |diff| {max(max_diff.values()):.1e}); timing")
            timings = alternate({peer: (lambda call=call: call(tokens)) for peer, call in contenders.items()},
                                scale.repeats)
            gflops = encoder_flops(lengths, layers) / timings["ours"] / 1e9
            data[name] = {"shape": list(tokens.shape), "real_tokens": sum(lengths), "seconds": timings,
                          "max_abs_diff": max_diff, "ours_gflops": gflops,
                          "ours_fraction_of_fp32_matmul": gflops / fp32_rate}
            progress(f"{name}: " + ", ".join(f"{k} {ms(v)}" for k, v in timings.items()))
            peers = " · ".join(f"{peer} {ms(timings[peer])}: **{ratio(timings[peer], timings['ours'])}**"
                               for peer in ("fairseq", "transformers"))
            shape = "8 x 128" if name == "full" else "8 rows, lengths 16..128"
            if name == "full":
                rows.append(Row(f"`extract_features` fp32, full batch {shape}", ms(timings["ours"]), peers,
                                ">= 1.0x fairseq and transformers",
                                min(timings["fairseq"], timings["transformers"]) >= timings["ours"]))
                rows.append(Row("achieved GFLOP/s, full batch",
                                f"{gflops:.0f} GFLOP/s = {100 * gflops / fp32_rate:.0f}% of fp32 matmul",
                                target=">= 85% of fp32 matmul", met=gflops / fp32_rate >= 0.85))
            else:
                rows.append(Row(f"`extract_features` fp32, padded batch ({shape})",
                                f"{ms(timings['ours'])} ({gflops:.0f} GFLOP/s on real tokens)", peers,
                                ">= 1.5x fairseq", timings["fairseq"] / timings["ours"] >= 1.5))

        tokens = inputs["full"]
        fp32_features = ours.extract_features(tokens)
        ours_bf16 = copy.deepcopy(ours).to(torch.bfloat16)
        cosine = torch.nn.functional.cosine_similarity(ours_bf16.extract_features(tokens).float(), fp32_features, dim=-1)
        progress(f"bf16: cosine to fp32 mean {float(cosine.mean()):.5f}, min {float(cosine.min()):.5f}; timing")
        timings = alternate({"fp32": lambda: ours.extract_features(tokens),
                             "bf16": lambda: ours_bf16.extract_features(tokens)}, scale.repeats)
    speedup = timings["fp32"] / timings["bf16"]
    data["bf16"] = {"seconds": timings, "speedup": speedup, "cosine_mean": float(cosine.mean()),
                    "cosine_min": float(cosine.min())}
    rows.append(Row("bf16 (`.to(torch.bfloat16)`), full batch",
                    f"{ms(timings['bf16'])}; cosine to fp32 mean {float(cosine.mean()):.4f}, min {float(cosine.min()):.4f}",
                    f"ours fp32 {ms(timings['fp32'])}: **{speedup:.2f}x**", ">= 1.8x our fp32, cosine >= 0.999",
                    speedup >= 1.8 and float(cosine.mean()) >= 0.999))
    return Section(rows, data)


# ---------------------------------------------------------------------------------- train


def fairseq_env() -> dict[str, str]:
    # --user-dir imports roberta_ext from this repository.
    return {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            "PYTHONWARNINGS": "ignore"}


def run_command(argv: Sequence[str]) -> str:
    """Run a command; its output, or an error with the output's tail."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=fairseq_env(),
                            cwd=REPO)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-25:])
        raise RuntimeError(f"{Path(argv[0]).name} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def train_inner_records(log: str) -> list[dict[str, float]]:
    """The ``train_inner`` JSON records of a ``fairseq-train --log-format json`` log."""
    records = []
    for line in log.splitlines():
        if "| train_inner |" in line and "{" in line:
            record = json.loads(line[line.index("{"):])
            records.append({k: float(v) for k, v in record.items() if k in ("wps", "ups", "wpb", "num_updates")})
    return records


def bench_train(scale: Scale, ws: Workspace) -> Section:
    """fairseq-train words/s: our plugin's model, task and criterion against fairseq's masked_lm."""
    from roberta_ext.data.masking import BatchMasker, MaskingConfig
    from roberta_ext.tokenizers import GPT2BPE

    vocab = ws.vocabulary
    data = ws.root / "train_data"
    bpe = GPT2BPE.from_files(vocab.encoder_json, vocab.vocab_bpe)
    text = ws.root / "train_text"
    text.mkdir()
    split = len(ws.lines) * 9 // 10
    for name, part in (("train", ws.lines[:split]), ("valid", ws.lines[split:])):
        (text / f"{name}.bpe").write_text("".join(bpe.encode_fairseq_string(line) + "\n" for line in part))
    progress("train: fairseq-preprocess")
    run_command([str(BIN / "fairseq-preprocess"), "--only-source", "--srcdict", str(vocab.dict_txt),
                 "--trainpref", str(text / "train.bpe"), "--validpref", str(text / "valid.bpe"),
                 "--destdir", str(data), "--workers", "1"])

    layers, width = scale.train_shape
    batch, block = 16, 128
    common = [str(BIN / "fairseq-train"), str(data), "--cpu", "--num-workers", "0", "--seed", "1",
              "--log-format", "json", "--log-interval", str(scale.train_log_interval), "--no-save",
              "--disable-validation", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--lr", "1e-4",
              "--lr-scheduler", "polynomial_decay", "--warmup-updates", "5",
              "--total-num-update", str(scale.train_updates), "--max-update", str(scale.train_updates),
              "--tokens-per-sample", str(block), "--sample-break-mode", "none", "--batch-size", str(batch),
              "--max-positions", str(block), *encoder_args(layers, width)]
    commands = {
        "ours": [*common, "--user-dir", str(REPO / "roberta_ext"), "--arch", "roberta_ext_base",
                 "--task", "roberta_ext_mlm", "--criterion", "roberta_ext_mlm"],
        "fairseq": [*common, "--arch", "roberta_base", "--task", "masked_lm", "--criterion", "masked_lm"],
    }
    records: dict[str, list[dict[str, float]]] = {name: [] for name in commands}
    for run in range(scale.train_runs):
        for name, argv in commands.items():
            progress(f"train: {name}, run {run + 1} of {scale.train_runs} ({scale.train_updates} updates)")
            # The first logged interval holds start-up (first batches, allocator warm-up): dropped.
            records[name] += train_inner_records(run_command(argv))[1:]
    wps = {name: statistics.median(r["wps"] for r in recs) for name, recs in records.items()}
    step_s = {name: statistics.median(r["wpb"] / r["wps"] for r in recs) for name, recs in records.items()}
    progress(f"train: ours {wps['ours']:.0f} wps, fairseq {wps['fairseq']:.0f} wps")

    # Masking as the plugin's collater runs it: one BatchMasker call on a (batch, block) batch.
    vocab_size = len(dictionary_symbols(vocab.dict_txt)) + 5
    generator = torch.Generator().manual_seed(0)
    tokens = torch.randint(4, vocab_size - 1, (batch, block), generator=generator)
    tokens[:, 0] = 0
    masker = BatchMasker(MaskingConfig(), vocab_size=vocab_size, mask_idx=vocab_size - 1, pad_idx=PAD,
                         special_ids=[0, 1, 2, 3, vocab_size - 1])
    epochs = iter(range(10**9))
    masking_s = alternate({"mask": lambda: masker(tokens, torch.arange(batch), next(epochs))},
                          max(50, scale.repeats))["mask"]
    share = masking_s / step_s["ours"]
    config = f"{layers} x {width}, {batch} x {block} tokens, {scale.train_updates} updates"
    section_data = {"config": config, "runs": scale.train_runs, "wps": wps, "step_seconds": step_s,
                    "records": len(records["ours"]), "masking_seconds": masking_s, "masking_share": share}
    rows = [
        Row(f"`fairseq-train` words/s ({config})", f"{wps['ours']:.0f} wps",
            f"fairseq `roberta_base` + `masked_lm` {wps['fairseq']:.0f} wps: **{wps['ours'] / wps['fairseq']:.2f}x**",
            ">= 1.1x fairseq", wps["ours"] / wps["fairseq"] >= 1.1),
        Row("masking share of a training step", f"{ms(masking_s)} of {ms(step_s['ours'])} = {100 * share:.2f}%",
            target="< 5%", met=share < 0.05),
    ]
    return Section(rows, section_data)


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
        import roberta_ext.fairseq_plugin  # noqa: F401  (lets fairseq's loader read under torch 2.13)
        from fairseq import checkpoint_utils

        upgrade = checkpoint_utils._upgrade_state_dict

        def upgrade_empty_history(state: dict[str, Any]) -> dict[str, Any]:
            # save_roberta_checkpoint writes optimizer_history=[], on which fairseq's upgrade step
            # raises IndexError; give it the one entry fairseq's trainer writes. Costs nothing.
            state["optimizer_history"] = state["optimizer_history"] or [
                {"optimizer_name": None, "lr_scheduler_state": {}, "num_updates": 0}]
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
    print(json.dumps({"seconds": seconds, "peak_after_imports": rss_after_imports,
                      "peak_after_load": peak_after_load, "peak_after_use": peak_rss_bytes()}))


def bench_load(scale: Scale, ws: Workspace) -> Section:
    """Load a large-shaped checkpoint in fresh processes: ours, and fairseq's own loader."""
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.modeling import EncoderConfig, RobertaModel

    layers = scale.load_layers
    path = ws.root / "large.pt"
    dict_dir = padded_dictionary(ws.root / "load_dict", [], BASE_VOCAB)
    progress(f"load: writing a {layers} x 1024 checkpoint (vocabulary {BASE_VOCAB})")
    torch.manual_seed(0)
    try:
        save_roberta_checkpoint(RobertaModel(EncoderConfig.preset("large", encoder_layers=layers)), path)
        size = path.stat().st_size

        def worker(kind: str) -> dict[str, float]:
            argv = [sys.executable, "-m", "benchmarks.run", "--load-worker", kind, str(path), str(dict_dir), str(layers)]
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
        return {"seconds": statistics.median(r["seconds"] for r in runs),
                "peak_rss_load": max(r["peak_after_load"] for r in runs) - baseline,
                "peak_rss_use": max(r["peak_after_use"] for r in runs) - baseline,
                "imports_rss": max(r["peak_after_imports"] for r in runs) - baseline}

    data = {"file_bytes": size, "layers": layers, "baseline_rss": baseline,
            **{kind: summary(runs) for kind, runs in results.items()}}
    ours, theirs = data["ours"], data["fairseq"]
    progress(f"load: ours {ours['seconds']:.1f} s, fairseq {theirs['seconds']:.1f} s")

    def memory(m: dict[str, float]) -> str:
        return (f"peak RSS {m['peak_rss_load'] / size:.2f}x the file after loading, "
                f"{m['peak_rss_use'] / size:.2f}x after reading every weight")

    rows = [Row(f"load a {layers} x 1024 checkpoint ({size / 1e9:.2f} GB)", f"{ours['seconds']:.2f} s; {memory(ours)}",
                f"fairseq `load_checkpoint_to_cpu` + build + `load_state_dict` {theirs['seconds']:.2f} s: "
                f"**{ratio(theirs['seconds'], ours['seconds'])}**; {memory(theirs)}",
                "peak RSS <= 1.3x file", max(ours["peak_rss_load"], ours["peak_rss_use"]) <= 1.3 * size)]
    return Section(rows, data)


# ----------------------------------------------------------------------------------- main

BENCHMARKS: dict[str, Callable[[Scale, Workspace], Section]] = {
    "machine": bench_machine, "tokenize": bench_tokenize, "features": bench_features,
    "train": bench_train, "load": bench_load,
}


def table(sections: Mapping[str, Section]) -> str:
    """The results as a Markdown table."""
    lines = ["| section | measure | ours | peers (ratio = peer time / our time) | target | status |",
             "| --- | --- | --- | --- | --- | --- |"]
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shrink everything: a ~2 minute smoke run")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION",
                        help=f"run only these sections, of: {', '.join(SECTIONS)}")
    parser.add_argument("--out", type=Path, help="JSON results file (default: benchmarks/results/cpu-DATE.json for a "
                                                 "full run of every section, else benchmarks/results/scratch-DATE.json, "
                                                 "which git ignores)")
    parser.add_argument("--load-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.load_worker:
        kind, path, dict_dir, layers = args.load_worker
        load_worker(kind, path, dict_dir, int(layers))
        return 0

    scale = QUICK if args.quick else FULL
    chosen = [s for s in SECTIONS if not args.only or s in args.only]
    today = datetime.date.today().isoformat()
    complete = not args.quick and len(chosen) == len(SECTIONS)
    out = args.out or RESULTS / f"{'cpu' if complete else 'scratch'}-{today}.json"
    sections: dict[str, Section] = {}
    with tempfile.TemporaryDirectory(prefix="roberta_ext_bench_") as tmp:
        ws = Workspace(scale, Path(tmp))
        # The encoder's GFLOP/s are judged against this machine's matmul rate, measured first.
        if "features" in chosen and "machine" not in chosen:
            chosen.insert(0, "machine")
        for name in chosen:
            progress(f"== {name}")
            before = cpu_snapshot()
            sections[name] = BENCHMARKS[name](scale, ws)
            # Other work on the machine skews every figure: the record says how much there was.
            share = sections[name].data["cpu_share_of_other_processes"] = others_share(before, cpu_snapshot())
            progress(f"{name} done; other processes used {100 * share:.0f}% of the CPUs meanwhile"
                     + (" (figures are noisy)" if share > 0.1 else ""))
            if name == "machine":
                ws.fp32_gflops = sections[name].data["fp32_gflops"]
    payload = {
        "date": today, "quick": args.quick, "scale": asdict(scale), "seconds": time.perf_counter() - _STARTED,
        "sections": {name: section.data for name, section in sections.items()},
        "table": [{"section": name, **asdict(row)} for name, section in sections.items() for row in section.rows],
    }
    write_json(out, payload)
    print()
    print(table(sections))
    print(f"\n{len(chosen)} sections in {payload['seconds'] / 60:.1f} min; results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
