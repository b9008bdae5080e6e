"""Sentence-embedding speed: ``hub.embed`` and ``roberta-ext embed`` against sentence-transformers.

Sections (``--only`` picks some; the default runs both):

  encode  ``hub.embed(texts)`` against ``SentenceTransformer.encode(texts)`` (its default batch of
          32) and onnxruntime (the ONNX file ``roberta-ext export --pooling model`` writes, fed as
          sentence-transformers feeds a model: sorted by length, batches of 32 padded to their
          longest row, tokenized by the folder's transformers tokenizer), sentences/s with
          tokenizing included, on the same weights and each of the three text sets of
          ``benchmarks/texts.py`` (short one-sentence lines, mixed-length docstrings, long
          paragraphs past ``max_seq_length``): a 6-layer 384-wide BERT (MiniLM's shape), a
          base-shaped RoBERTa (12 x 768) and a 6-layer ModernBERT of base width (GeGLU 1152,
          window 128, ``max_seq_length`` 8192), in fp32, with the share of the fp32 matmul rate that
          ``embed`` reaches on the real tokens; and ``embed`` in bf16 (the models cast with
          ``.to(torch.bfloat16)``) against sentence-transformers in bf16 on the mixed set
  cli     ``roberta-ext embed`` over a 100,000-line file (one docstring sentence per line) with the
          BERT: sustained rows/s against in-process ``hub.embed`` on the file's first lines, and
          the command's memory (RSS) sampled through the run

Every model is built here with transformers (random weights; WordPiece and byte-level BPE
vocabularies learned with HF ``tokenizers`` from the standard library), saved as a
sentence-transformers folder (Transformer + mean Pooling + Normalize) by sentence-transformers
itself, and loaded from that folder by both contenders; before timing, the embeddings are
checked equal (within 1e-4 in fp32; onnxruntime's too). Contenders are timed in turns after a
warm-up call each and the median is reported (see ``benchmarks/run.py``); a ratio is the peer's
time over ours: above 1 we are faster. The matmul share is the FLOPs of the layer stack on the
real tokens (``benchmarks.run.encoder_flops``: projections, feed-forward, attention over each
text's own tokens) over ``embed``'s time, divided by the rate of a 1024^3 fp32 matmul timed just
before. Targets (issue 23): >= 1.5x sentence-transformers and >= 1.2x onnxruntime fp32 on every
text set, >= 75% of the matmul rate on the base shape; the command within 10% of in-process
``embed``, memory flat. Issue 34 asks the same 1.5x of the ModernBERT folder.

    .venv/bin/python -m benchmarks.embed               # ~25 minutes on 2 quiet cores
    .venv/bin/python -m benchmarks.embed --quick       # small shapes, 10k lines: ~2 minutes
    .venv/bin/python -m benchmarks.embed --only encode --threads 1
"""

from __future__ import annotations

import os

# Saved before benchmarks.run, which makes HF tokenizers single-threaded for its own tokenizer
# race: here sentence-transformers tokenizes as its users get it (HF's default parallelism).
_TOKENIZER_ENV = {name: os.environ.get(name) for name in ("RAYON_RS_NUM_CPUS", "TOKENIZERS_PARALLELISM")}

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from dataclasses import asdict, dataclass, replace  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402

from benchmarks.run import (  # noqa: E402
    RESULTS,
    Row,
    Section,
    alternate,
    encoder_flops,
    fp32_matmul_rate,
    progress,
    run_section,
    write_results,
)
from benchmarks.texts import TEXT_SETS, text_set  # noqa: E402
from benchmarks.texts import docstrings as text_docstrings  # noqa: E402

for _name, _value in _TOKENIZER_ENV.items():
    if _value is None:
        os.environ.pop(_name, None)
    else:
        os.environ[_name] = _value

REPO = Path(__file__).resolve().parents[1]
SECTIONS = ("encode", "cli")


@dataclass(frozen=True)
class Scale:
    texts: dict[str, int]  # texts per timed call, per text set (the base shape takes half)
    repeats: int
    bert: tuple[int, int]  # (layers, width) of the MiniLM-shaped BERT
    roberta: tuple[int, int]  # (layers, width) of the base-shaped RoBERTa
    modernbert: tuple[int, int]  # (layers, width) of the ModernBERT (base width: GeGLU 1.5x, window 128)
    cli_lines: int
    cli_reference_lines: int  # lines embedded in process for the reference rate
    cli_chunk_rows: int
    models: tuple[str, ...] = ("bert", "roberta", "modernbert")


FULL = Scale(
    texts={"short": 1000, "mixed": 300, "long": 50},  # about 20k real tokens each
    repeats=3,
    bert=(6, 384),
    roberta=(12, 768),
    modernbert=(6, 768),
    cli_lines=100_000,
    cli_reference_lines=20_000,
    cli_chunk_rows=8192,  # the command's default
)
QUICK = Scale(
    texts={"short": 200, "mixed": 60, "long": 10},
    repeats=2,
    bert=(2, 128),
    roberta=(2, 256),
    modernbert=(2, 256),
    cli_lines=10_000,
    cli_reference_lines=2_000,
    cli_chunk_rows=1000,
)


# ------------------------------------------------------------------------------ models


def docstrings() -> list[str]:
    return list(text_docstrings())


def sentences() -> list[str]:
    """Docstring sentences, one per entry: the ``cli`` section's lines."""
    return [s.strip() for doc in docstrings() for s in doc.split(". ") if s.strip()]


def st_folder(root: Path, family: str, layers: int, width: int, texts: list[str]) -> Path:
    """A sentence-transformers folder saved by sentence-transformers: a random transformers
    model of this shape, its tokenizer learned from ``texts``, mean pooling, normalisation."""
    import transformers
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    hf_dir = root / f"{family}-hf"
    hf_dir.mkdir(parents=True)
    torch.manual_seed(0)
    shape = dict(
        hidden_size=width,
        num_hidden_layers=layers,
        num_attention_heads=max(1, width // 64),
        intermediate_size=4 * width,
    )
    if family == "bert":
        from tokenizers import BertWordPieceTokenizer

        trainer = BertWordPieceTokenizer(lowercase=True)
        trainer.train_from_iterator(texts, vocab_size=30522, show_progress=False)
        trainer.save_model(str(hf_dir))
        tokenizer = transformers.BertTokenizer(str(hf_dir / "vocab.txt"), do_lower_case=True)
        config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, max_position_embeddings=512, **shape)
        transformers.BertModel(config).eval().save_pretrained(hf_dir)
        max_seq_length = 256
    elif family == "roberta":
        from tokenizers import ByteLevelBPETokenizer

        trainer = ByteLevelBPETokenizer(add_prefix_space=False)
        trainer.train_from_iterator(
            texts, vocab_size=50265, special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"], show_progress=False
        )
        trainer.save_model(str(hf_dir))
        tokenizer = transformers.RobertaTokenizer(str(hf_dir / "vocab.json"), str(hf_dir / "merges.txt"))
        config = transformers.RobertaConfig(
            vocab_size=len(tokenizer), max_position_embeddings=514, type_vocab_size=1, pad_token_id=1, **shape
        )
        transformers.RobertaModel(config, add_pooling_layer=False).eval().save_pretrained(hf_dir)
        max_seq_length = 512
    else:
        tokenizer = modernbert_tokenizer(texts)
        transformers.ModernBertModel(modernbert_config(tokenizer, layers, width)).eval().save_pretrained(hf_dir)
        max_seq_length = 8192  # modernbert-embed-base's and gte-modernbert-base's: long texts run whole
    tokenizer.save_pretrained(hf_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        transformer = Transformer(str(hf_dir), max_seq_length=max_seq_length)
        pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode="mean")
        folder = root / f"{family}-st"
        SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu").save(str(folder))
    return folder


MODERNBERT_WINDOW = 128
"""``local_attention`` of the benchmark's ModernBERT, as ModernBERT-base's: a local layer's tokens see
64 tokens either side."""

MODERNBERT_IDS = {
    "pad_token_id": "[PAD]",
    "cls_token_id": "[CLS]",
    "sep_token_id": "[SEP]",
    "bos_token_id": "[CLS]",
    "eos_token_id": "[SEP]",
}


def modernbert_tokenizer(texts: list[str]) -> Any:
    """A byte-level BPE learned from ``texts`` in ModernBERT's ``tokenizer.json`` layout (NFC, GPT-2's
    byte-level pre-tokenizer, ``[CLS] $A [SEP]`` template), as transformers' fast tokenizer."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    library = Tokenizer(models.BPE())
    library.normalizer = normalizers.NFC()
    library.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    library.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=50280,
        special_tokens=["<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    library.train_from_iterator(texts, trainer)
    cls, sep = library.token_to_id("[CLS]"), library.token_to_id("[SEP]")
    library.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=library,
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        unk_token="[UNK]",
        mask_token="[MASK]",
    )


def modernbert_config(tokenizer: Any, layers: int, width: int) -> Any:
    """transformers' ``ModernBertConfig`` of ``layers`` x ``width`` with ModernBERT-base's structure
    (heads of 64, GeGLU 1.5x the width, a global layer every third, the window of
    :data:`MODERNBERT_WINDOW`, 8192 positions) and ``tokenizer``'s special ids."""
    import transformers

    return transformers.ModernBertConfig(
        vocab_size=-(-len(tokenizer) // 64) * 64,  # rows padded to a multiple of 64, as ModernBERT's
        hidden_size=width,
        num_hidden_layers=layers,
        num_attention_heads=max(1, width // 64),
        intermediate_size=3 * width // 2,
        local_attention=MODERNBERT_WINDOW,
        global_attn_every_n_layers=3,
        max_position_embeddings=8192,
        **{name: tokenizer.convert_tokens_to_ids(token) for name, token in MODERNBERT_IDS.items()},
    )


def layer_flops(family: str, layers: int, width: int) -> Any:
    """``lengths -> FLOPs`` of the family's layer stack on the real tokens (see
    :func:`benchmarks.run.encoder_flops`). ModernBERT: fused q/k/v and output (4 C^2), GeGLU's
    ``Wi`` (C x 2F) and ``Wo`` (F x C) with F = 1.5 C, and attention over the whole text in every
    third layer, over at most ``MODERNBERT_WINDOW + 1`` keys in the others."""
    if family != "modernbert":
        return lambda lengths: encoder_flops(lengths, layers, width, 4 * width)
    ffn = 3 * width // 2
    global_layers = len(range(0, layers, 3))

    def flops(lengths: list[int]) -> float:
        per_token = 2 * (4 * width**2 + 3 * width * ffn)
        attended = (global_layers * t + (layers - global_layers) * min(t, MODERNBERT_WINDOW + 1) for t in lengths)
        return sum(t * layers * per_token for t in lengths) + sum(4 * width * t * k for t, k in zip(lengths, attended))

    return flops


def load_both(folder: Path, dtype: torch.dtype) -> tuple[Any, Any]:
    from sentence_transformers import SentenceTransformer

    import roberta_ext

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = roberta_ext.from_pretrained(str(folder), dtype=dtype)
        theirs = SentenceTransformer(str(folder), device="cpu").eval().to(dtype)
    return ours, theirs


# ------------------------------------------------------------------------------ sections


def bench_encode(scale: Scale, root: Path) -> Section:
    section = Section()
    docs = docstrings()
    shapes = {"bert": scale.bert, "roberta": scale.roberta, "modernbert": scale.modernbert}
    for family, (layers, width) in shapes.items():
        if family not in scale.models:
            continue
        progress(f"building a {layers} x {width} {family} sentence-transformers folder")
        folder = st_folder(root, family, layers, width, docs)
        share = 1 if family == "bert" else 2  # base width costs 4-8x per token: half the texts
        work = layer_flops(family, layers, width)
        ours, theirs = load_both(folder, torch.float32)
        onnx = OnnxEmbedder.export(ours, folder, root / f"{family}.onnx")
        for text_name in TEXT_SETS:
            texts = text_set(text_name, max(1, scale.texts[text_name] // share))
            contenders = {
                "ours": lambda ours=ours, texts=texts: ours.embed(texts),
                "sentence-transformers": lambda theirs=theirs, texts=texts: theirs.encode(texts),  # its batch of 32
                "onnxruntime": lambda onnx=onnx, texts=texts: onnx.embed(texts),
            }
            label = f"{family} fp32 {text_name}"
            run = encode_run(ours, contenders, texts, (layers, width), work, scale.repeats, label)
            section.data[f"{family}_fp32_{text_name}"] = run
            section.rows.append(encode_row(run, f"{layers} x {width} {family}", text_name, base=family == "roberta"))
            progress(f"{family} fp32 {text_name}: {section.rows[-1].ours} | {section.rows[-1].peers}")
        del ours, theirs, onnx
        ours, theirs = load_both(folder, torch.bfloat16)
        texts = text_set("mixed", max(1, scale.texts["mixed"] // share))
        contenders = {
            "ours": lambda ours=ours, texts=texts: ours.embed(texts),
            "sentence-transformers": lambda theirs=theirs, texts=texts: theirs.encode(texts),
        }
        run = encode_run(ours, contenders, texts, (layers, width), work, scale.repeats, f"{family} bf16 mixed")
        section.data[f"{family}_bf16_mixed"] = run
        section.rows.append(encode_row(run, f"{layers} x {width} {family}", "mixed", bf16=True))
        progress(f"{family} bf16 mixed: {section.rows[-1].ours} | {section.rows[-1].peers}")
        del ours, theirs
    return section


class OnnxEmbedder:
    """onnxruntime on the file ``roberta-ext export --pooling model`` writes, fed as
    sentence-transformers feeds a model: texts sorted by length (characters), batches of 32,
    each tokenized by the folder's transformers tokenizer and padded to its longest row."""

    def __init__(self, path: Path, folder: Path, max_length: int, dimension: int) -> None:
        import onnxruntime
        import transformers

        options = onnxruntime.SessionOptions()
        if "OMP_NUM_THREADS" in os.environ:  # --threads: the same number as torch's
            options.intra_op_num_threads = int(os.environ["OMP_NUM_THREADS"])
        self.session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(str(folder))
        self.max_length = max_length
        self.dimension = dimension

    @classmethod
    def export(cls, hub: Any, folder: Path, path: Path) -> OnnxEmbedder:
        from roberta_ext.export import to_onnx

        to_onnx(hub, path, pooling="model")
        max_length = hub.sentence_embedding.max_length or hub.inputs.max_positions
        return cls(path, folder, max_length, hub.model.cfg.encoder_embed_dim)

    def embed(self, texts: list[str], batch_size: int = 32) -> Any:
        import numpy as np

        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            encoded = self.tokenizer(
                [texts[i] for i in batch],
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="np",
            )
            feed = {name: encoded[name].astype(np.int64) for name in ("input_ids", "attention_mask")}
            out[batch] = self.session.run(None, feed)[0]
        return out


def encode_run(
    ours: Any,
    contenders: dict[str, Any],
    texts: list[str],
    shape: tuple[int, int],
    layer_work: Any,
    repeats: int,
    label: str,
) -> dict[str, Any]:
    """Check every contender's embeddings against ``embed``'s, then time them in turns; with the
    real and sentence-transformers-padded token counts and ``embed``'s share of the matmul rate."""
    mine = ours.embed(texts).float()
    agreement = {}
    for name, call in contenders.items():
        if name != "ours":
            theirs = torch.as_tensor(call()).float()
            agreement[name] = {
                "max_abs_difference": float((mine - theirs).abs().max()),
                "min_cosine": float(torch.nn.functional.cosine_similarity(mine, theirs).min()),
            }
    fp32 = next(ours.model.parameters()).dtype == torch.float32
    for name, measured in agreement.items():
        if fp32 and measured["max_abs_difference"] > 1e-4:
            raise AssertionError(f"{label}: embeddings differ from {name}'s by {measured['max_abs_difference']}")
    progress(f"{label}: timing {len(texts)} texts, {repeats} rounds")
    timings = alternate(contenders, repeats)
    rate = fp32_matmul_rate()
    lengths, padded = token_counts(ours, texts)
    work = layer_work(lengths)
    return {
        "shape": list(shape),
        "texts": len(texts),
        "tokens": sum(lengths),
        "sentence_transformers_padded_tokens": padded,
        "seconds": timings,
        "sentences_per_second": {name: len(texts) / seconds for name, seconds in timings.items()},
        "agreement": agreement,
        "layer_flops": work,
        "fp32_matmul_gflops": rate / 1e9,
        "matmul_share": work / timings["ours"] / rate if fp32 else None,
        # The same real-token FLOPs over each contender's time: how close each comes to the limit.
        "matmul_shares": {name: work / seconds / rate for name, seconds in timings.items()} if fp32 else None,
    }


def encode_row(run: dict[str, Any], shape: str, text_name: str, *, base: bool = False, bf16: bool = False) -> Row:
    seconds, rates = run["seconds"], run["sentences_per_second"]
    st_ratio = seconds["sentence-transformers"] / seconds["ours"]
    shares = run["matmul_shares"] or {}

    def share(name: str) -> str:
        return f" ({100 * shares[name]:.0f}% of the rate)" if name in shares else ""

    peers = [
        f"sentence-transformers {rates['sentence-transformers']:.1f}/s{share('sentence-transformers')}: "
        f"**{st_ratio:.2f}x**"
    ]
    targets = [">= 1.5x sentence-transformers"]
    met = st_ratio >= 1.5
    if "onnxruntime" in seconds:
        ort_ratio = seconds["onnxruntime"] / seconds["ours"]
        peers.append(f"onnxruntime {rates['onnxruntime']:.1f}/s{share('onnxruntime')}: **{ort_ratio:.2f}x**")
        targets.append(">= 1.2x onnxruntime")
        met = met and ort_ratio >= 1.2
    ours = f"{rates['ours']:.1f}/s"
    if run["matmul_share"] is not None:
        ours += f", {100 * run['matmul_share']:.0f}% of the matmul rate ({run['fp32_matmul_gflops']:.0f} GFLOP/s)"
        if base:
            targets.append(">= 75% of the matmul rate")
            met = met and run["matmul_share"] >= 0.75
    tokens, padded = run["tokens"], run["sentence_transformers_padded_tokens"]
    ours += f"; {run['texts']} texts, {tokens} tokens (`encode` pads to {padded}, +{100 * (padded / tokens - 1):.0f}%)"
    precision = "bf16" if bf16 else "fp32"
    return Row(
        f"`embed` {precision}, {shape}, {text_name} texts: sentences/s, tokenizing included",
        ours,
        "; ".join(peers),
        ", ".join(targets) if not bf16 else "",
        met if not bf16 else None,
    )


def token_counts(hub: Any, texts: list[str], batch_size: int = 32) -> tuple[list[int], int]:
    """Real tokens of each text, and the tokens sentence-transformers' ``encode`` computes on:
    it sorts by characters (its proxy for tokens) and pads each batch to its longest row."""
    from roberta_ext.embedding import Embedder

    embedder = Embedder.for_hub(hub)
    lengths = [len(embedder.encode(text)) for text in texts]
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    padded = sum(
        len(batch) * max(lengths[i] for i in batch)
        for batch in (order[start : start + batch_size] for start in range(0, len(order), batch_size))
    )
    return lengths, padded


def rss_bytes(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def bench_cli(scale: Scale, root: Path) -> Section:
    section = Section()
    lines = sentences()
    lines = [lines[i % len(lines)] for i in range(scale.cli_lines)]
    source = root / "lines.txt"
    source.write_text("".join(line.replace("\n", " ") + "\n" for line in lines), encoding="utf-8")
    folder = root / "bert-st"
    if not folder.exists():
        folder = st_folder(root, "bert", *scale.bert, docstrings())
    ours, _ = load_both(folder, torch.float32)
    reference = lines[: scale.cli_reference_lines]
    ours.embed(reference[:200])  # warm-up
    progress(f"in-process embed of {len(reference)} lines")
    started = time.perf_counter()
    ours.embed(reference)
    in_process = len(reference) / (time.perf_counter() - started)
    del ours

    output = root / "out.npy"
    parts = output.with_name(output.name + ".parts")
    command = [sys.executable, "-m", "roberta_ext", "embed", str(folder), "--input", str(source)]
    command += ["--output", str(output), "--chunk-rows", str(scale.cli_chunk_rows)]
    progress(f"roberta-ext embed over {len(lines)} lines")
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[tuple[float, int]] = []
    finished: dict[str, tuple[float, int]] = {}  # part -> (when it appeared, its rows)
    while process.poll() is None:
        now = time.perf_counter() - started
        rss = rss_bytes(process.pid)
        if rss is not None:
            samples.append((now, rss))
        for record in parts.glob("0*.json") if parts.is_dir() else []:
            if record.name not in finished:
                with contextlib.suppress(OSError, ValueError):
                    finished[record.name] = (now, json.loads(record.read_text())["rows"])
        time.sleep(0.25)
    _, stderr = process.communicate()
    wall = time.perf_counter() - started
    if process.returncode != 0:
        raise RuntimeError(f"roberta-ext embed failed ({process.returncode}):\n{stderr[-3000:]}")
    # Sustained: the rows of every part after the first, over the time between the first and the last.
    times = sorted(finished.values())
    sustained = sum(rows for _, rows in times[1:]) / (times[-1][0] - times[0][0])
    # Memory: the highest RSS while each chunk was embedded. Each chunk's batches grow the heap
    # (glibc keeps what torch frees for reuse, fragmented); the command hands it back after each
    # chunk. Flat: the peaks of the last third of the chunks are no higher than the first third's.
    bounds = [0.0, *(t for t, _ in times)]
    peaks = [max((rss for t, rss in samples if start < t <= end), default=0) for start, end in zip(bounds, bounds[1:])]
    third = max(1, len(peaks) // 3)
    growth = max(peaks[-third:]) / max(peaks[:third])
    mb = 1 / 2**20
    section.rows.append(
        Row(
            f"`roberta-ext embed` {len(lines):,} lines, {scale.bert[0]} x {scale.bert[1]} BERT: sustained rows/s",
            f"{sustained:.0f} rows/s over chunks 2-{len(times)} ({len(lines) / wall:.0f} rows/s from start-up to "
            f"the assembled file, {wall:.0f} s)",
            f"in-process `embed` of {len(reference):,} lines {in_process:.0f} rows/s: {sustained / in_process:.2f}x",
            ">= 0.9x in-process",
            sustained >= 0.9 * in_process,
        )
    )
    section.rows.append(
        Row(
            "`roberta-ext embed` memory: peak RSS while each chunk was embedded",
            f"{', '.join(f'{p * mb:.0f}' for p in peaks)} MB; last third / first third {growth:.2f}",
            "",
            "flat (last third's peak <= 1.1x the first third's)",
            growth <= 1.1,
        )
    )
    for row in section.rows:
        progress(f"{row.measure}: {row.ours} | {row.peers}")
    section.data["cli"] = {
        "lines": len(lines),
        "chunk_rows": scale.cli_chunk_rows,
        "sustained_rows_per_second": sustained,
        "wall_seconds": wall,
        "in_process_rows_per_second": in_process,
        "in_process_lines": len(reference),
        "parts": times,
        "rss_samples": samples,
        "chunk_peak_rss": peaks,
        "stderr_tail": stderr[-500:],
    }
    return section


BENCHMARKS = {"encode": bench_encode, "cli": bench_cli}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.embed", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small shapes and a 10k-line file: a smoke run")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, metavar="SECTION", help=f"of: {', '.join(SECTIONS)}")
    parser.add_argument("--threads", type=int, help="torch threads (default: torch's, one per core)")
    parser.add_argument(
        "--texts",
        type=int,
        metavar="N",
        help="texts per timed call in every text set (default: short 1000, mixed 300, long 50; half for the base "
        "shape; --quick a fifth)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=("bert", "roberta", "modernbert"),
        help="the encode section's models (default: all three)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="JSON results (default: benchmarks/results/embed-cpu-DATE.json for a full run of both sections, else "
        "benchmarks/results/scratch-embed-DATE.json, which git ignores)",
    )
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the cli section's process too
    scale = QUICK if args.quick else FULL
    if args.texts:
        scale = replace(scale, texts=dict.fromkeys(TEXT_SETS, args.texts))
    if args.models:
        scale = replace(scale, models=tuple(args.models))
    chosen = [s for s in SECTIONS if not args.only or s in args.only]
    today = datetime.date.today().isoformat()
    complete = not args.quick and len(chosen) == len(SECTIONS) and scale == FULL
    out = args.out or RESULTS / (f"embed-cpu-{today}.json" if complete else f"scratch-embed-{today}.json")
    sections: dict[str, Section] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="roberta_ext_embed_bench_") as tmp:
        for name in chosen:
            sections[name] = run_section(name, partial(BENCHMARKS[name], scale, Path(tmp)))
    write_results(
        out,
        sections,
        date=today,
        quick=args.quick,
        threads=torch.get_num_threads(),
        scale=asdict(scale),
        seconds=time.perf_counter() - started,
    )
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
