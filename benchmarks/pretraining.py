"""ModernBERT pretraining steps: ours against transformers' ``ModernBertForMaskedLM``, as a Trainer runs it.

Both sides train the same model on the same documents with the same masked tokens (issue 35):

  transformers  ``ModernBertForMaskedLM`` (its default sdpa attention), one document per row, each
                batch padded to its longest row with an attention mask (``DataCollatorForLanguageModeling``
                with dynamic padding, what a Trainer user runs), the loss from ``labels``, ``AdamW``;
  ours          our ``RobertaModel`` of the ModernBERT family loaded from transformers' initial weights
                (``load_transformers``), the same padded batches, on which the encoder runs the layers
                on the real tokens only (packed; local layers attend block by block inside their
                window), the LM head on the masked tokens only (as the plugin's ``roberta_ext_mlm``
                criterion), fairseq's summed cross-entropy over the masked tokens divided by their count,
                and the recipe's ``StableAdamW`` (the plugin's optimizer).

Documents (``--texts``): the standard library's docstrings (``benchmarks/texts.py``'s ``mixed`` set:
a few tokens to thousands, so that most of a padded batch is padding) or its ``long`` set (paragraphs
of 350-600 tokens: little padding, where the local windows and the LM head on the masked tokens are
what is left to gain), tokenized by a byte-level BPE learned from them in ModernBERT's
``tokenizer.json`` layout (``benchmarks.embed.modernbert_tokenizer``), cut at ``--max-tokens``, in
a seeded random order, ``--batch`` documents a step. 30% of each document's tokens are masked
(80% ``[MASK]``, 10% a random token, 10% kept), drawn once and given to both sides.

Before timing, the first step's loss of the two sides is checked equal (dropout is 0 in
ModernBERT). Each call runs ``--steps`` training steps; the calls alternate (ours, transformers,
...) and the medians are compared. Words/s counts real tokens. The matmul share is the training
FLOPs on the real tokens (three times the forward products of the layers — attention within the
window for local layers — and of the LM head on the masked tokens) over the time, divided by the
rate of a 1024^3 fp32 matmul timed in the same run.

    .venv/bin/python -m benchmarks.pretraining                      # 6 layers of base width, 2 threads
    .venv/bin/python -m benchmarks.pretraining --layers 2 --width 256 --steps 2   # a smoke run

Target (issue 35): ours >= 1.5x transformers' words/s, equal loss on the first step.
"""

from __future__ import annotations

import argparse
import datetime
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.embed import layer_flops, modernbert_config, modernbert_tokenizer  # noqa: E402
from benchmarks.run import RESULTS, Row, Section, alternate, fp32_matmul_rate, progress, write_results  # noqa: E402
from benchmarks.texts import text_set  # noqa: E402

MASK_PROB = 0.3
"""ModernBERT's masking rate."""


@dataclass(frozen=True)
class Batch:
    """One step's documents, padded: (B, T) ids, the attention mask, the masked ids and the targets."""

    tokens: torch.Tensor  # (B, T) the documents' ids, padded with [PAD]
    attention_mask: torch.Tensor  # (B, T) 1 on real tokens
    inputs: torch.Tensor  # (B, T) ``tokens`` with the masked positions replaced
    labels: torch.Tensor  # (B, T) the original id where masked, -100 elsewhere

    @property
    def real_tokens(self) -> int:
        return int(self.attention_mask.sum())


def mask_batch(
    docs: list[list[int]], pad: int, mask: int, specials: set[int], vocab: int, generator: torch.Generator
) -> Batch:
    """Pad ``docs`` into one batch and mask 30% of each document's ordinary tokens, 80/10/10."""
    longest = max(len(d) for d in docs)
    tokens = torch.full((len(docs), longest), pad, dtype=torch.long)
    for row, doc in enumerate(docs):
        tokens[row, : len(doc)] = torch.tensor(doc)
    real = tokens.ne(pad)
    maskable = real & ~torch.isin(tokens, torch.tensor(sorted(specials)))
    chosen = maskable & (torch.rand(tokens.shape, generator=generator) < MASK_PROB)
    draw = torch.rand(tokens.shape, generator=generator)
    inputs = tokens.clone()
    inputs[chosen & (draw < 0.8)] = mask
    randomized = chosen & (draw >= 0.8) & (draw < 0.9)
    inputs[randomized] = torch.randint(len(specials), vocab, (int(randomized.sum()),), generator=generator)
    labels = torch.where(chosen, tokens, torch.full_like(tokens, -100))
    return Batch(tokens, real.long(), inputs, labels)


def documents(tokenizer: Any, texts: list[str], max_tokens: int, count: int, seed: int) -> list[list[int]]:
    """``count`` of ``texts`` in a seeded random order, tokenized with ``[CLS]``/``[SEP]``, cut at ``max_tokens``."""
    order = torch.randperm(len(texts), generator=torch.Generator().manual_seed(seed)).tolist()[:count]
    encoded = tokenizer([texts[i] for i in order], truncation=True, max_length=max_tokens)["input_ids"]
    return [list(ids) for ids in encoded]


def build_models(folder: Path, tokenizer: Any, layers: int, width: int) -> tuple[Any, Any]:
    """transformers' ``ModernBertForMaskedLM`` (random weights, saved to ``folder``) and ours
    loaded from that folder, both in training mode."""
    import transformers

    from roberta_ext.checkpoints.transformers import load_transformers

    torch.manual_seed(0)
    theirs = transformers.ModernBertForMaskedLM(modernbert_config(tokenizer, layers, width))
    theirs.save_pretrained(folder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = load_transformers(folder).model
    return ours.train(), theirs.train()


def our_loss(model: Any, batch: Batch) -> torch.Tensor:
    """The plugin's masked-LM loss (``roberta_ext_mlm``): the head on the masked tokens only,
    the summed cross-entropy divided by their count (fairseq's gradient normalisation)."""
    masked = batch.labels.ne(-100)
    logits = model(batch.inputs, masked_tokens=masked)[0]  # (N, V)
    return F.cross_entropy(logits.float(), batch.labels[masked], reduction="sum") / int(masked.sum())


def their_loss(model: Any, batch: Batch) -> torch.Tensor:
    return model(input_ids=batch.inputs, attention_mask=batch.attention_mask, labels=batch.labels).loss


def trainer(model: Any, optimizer: torch.optim.Optimizer, loss_of: Any, batches: list[Batch]) -> Any:
    """A call that runs one training step per batch (forward, backward, optimizer step)."""

    def train() -> float:
        total = 0.0
        for batch in batches:
            loss = loss_of(model, batch)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            total += float(loss)
        return total

    return train


def training_flops(batches: list[Batch], layers: int, width: int, vocab: int) -> float:
    """Three times the forward products on the real tokens: the layers (attention within the
    window for local layers) and the LM head (dense + decoder) on the masked tokens."""
    lengths = [int(n) for batch in batches for n in batch.attention_mask.sum(dim=1)]
    masked = sum(int(batch.labels.ne(-100).sum()) for batch in batches)
    head = masked * 2 * (width * width + width * vocab)
    return 3 * (layer_flops("modernbert", layers, width)(lengths) + head)


def run(args: argparse.Namespace) -> Section:
    from roberta_ext.fairseq_plugin.optim import StableAdamW

    torch.set_num_threads(args.threads)
    progress("learning the BPE from the docstrings")
    tokenizer = modernbert_tokenizer(text_set("mixed"))
    texts = text_set(args.texts)
    docs = documents(tokenizer, texts, args.max_tokens, min(len(texts), args.batch * args.steps), args.seed)
    pad, mask = tokenizer.pad_token_id, tokenizer.mask_token_id
    specials = {tokenizer.convert_tokens_to_ids(t) for t in tokenizer.all_special_tokens}
    generator = torch.Generator().manual_seed(args.seed)
    vocab = len(tokenizer)
    batches = [
        mask_batch(docs[i : i + args.batch], pad, mask, specials, vocab, generator)
        for i in range(0, len(docs), args.batch)
    ]
    with tempfile.TemporaryDirectory(prefix="roberta_ext_pretraining_bench_") as tmp:
        ours, theirs = build_models(Path(tmp), tokenizer, args.layers, args.width)
    first = {"ours": float(our_loss(ours, batches[0])), "transformers": float(their_loss(theirs, batches[0]))}
    difference = abs(first["ours"] - first["transformers"])
    progress(f"first-step loss: ours {first['ours']:.6f}, transformers {first['transformers']:.6f}")
    if difference > 1e-4 * max(1.0, abs(first["transformers"])):
        raise AssertionError(f"the first step's losses differ by {difference}: not the same computation")
    ours.zero_grad(set_to_none=True)
    theirs.zero_grad(set_to_none=True)
    contenders = {
        "ours": trainer(ours, StableAdamW(ours.parameters(), lr=8e-4, weight_decay=1e-5), our_loss, batches),
        "transformers": trainer(
            theirs, torch.optim.AdamW(theirs.parameters(), lr=8e-4, weight_decay=1e-5), their_loss, batches
        ),
    }
    progress(f"timing {args.steps} steps of {args.batch} documents, {args.repeats} rounds")
    seconds = alternate(contenders, args.repeats)
    tokens = sum(batch.real_tokens for batch in batches)
    padded = sum(batch.tokens.numel() for batch in batches)
    rate = fp32_matmul_rate()
    work = training_flops(batches, args.layers, args.width, vocab)
    words = {name: tokens / s for name, s in seconds.items()}
    shares = {name: work / s / rate for name, s in seconds.items()}
    ratio = seconds["transformers"] / seconds["ours"]
    section = Section()
    section.rows.append(
        Row(
            f"ModernBERT pretraining step, {args.layers} x {args.width}, {args.texts} texts, {args.batch} a step "
            f"(up to "
            f"{args.max_tokens} tokens; {tokens} real tokens, {padded} padded), fp32, {args.threads} threads: words/s",
            f"{words['ours']:.0f} words/s, {100 * shares['ours']:.0f}% of the matmul rate ({rate / 1e9:.0f} GFLOP/s)",
            f"transformers `ModernBertForMaskedLM` + AdamW {words['transformers']:.0f} words/s, "
            f"{100 * shares['transformers']:.0f}%: **{ratio:.2f}x**",
            ">= 1.5x, equal first-step loss",
            ratio >= 1.5,
        )
    )
    section.data = {
        "layers": args.layers,
        "width": args.width,
        "batch": args.batch,
        "steps": args.steps,
        "texts": args.texts,
        "max_tokens": args.max_tokens,
        "real_tokens": tokens,
        "padded_tokens": padded,
        "first_step_loss": first,
        "seconds": seconds,
        "words_per_second": words,
        "fp32_matmul_gflops": rate / 1e9,
        "matmul_shares": shares,
        "training_flops": work,
    }
    return section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.pretraining",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--layers", type=int, default=6, help="layers (default: %(default)s)")
    parser.add_argument(
        "--width", type=int, default=768, help="hidden size; heads width/64, GeGLU 1.5x (default: %(default)s)"
    )
    parser.add_argument("--batch", type=int, default=16, help="documents a step (default: %(default)s)")
    parser.add_argument("--steps", type=int, default=4, help="training steps a timed call (default: %(default)s)")
    parser.add_argument("--max-tokens", type=int, default=1024, help="documents cut at (default: %(default)s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default: %(default)s)")
    parser.add_argument(
        "--texts",
        choices=("mixed", "long"),
        default="mixed",
        help="documents: whole docstrings (a few tokens to thousands) or paragraphs of 350-600 tokens "
        "(default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=0, help="documents' order and masks (default: %(default)s)")
    parser.add_argument(
        "--out", type=Path, help="JSON results (default: benchmarks/results/scratch-pretraining-DATE.json)"
    )
    args = parser.parse_args(argv)
    today = datetime.date.today().isoformat()
    started = time.perf_counter()
    section = run(args)
    out = args.out or RESULTS / f"scratch-pretraining-{today}.json"
    options = {name: value for name, value in vars(args).items() if name != "out"}
    write_results(out, {"pretraining": section}, date=today, seconds=time.perf_counter() - started, **options)
    print(f"\nresults: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
