"""ModernBERT's forward pass: ours (``EncoderModel`` of the ``modernbert-base`` preset, local layers
blockwise, padding-free) against transformers' ``ModernBertModel`` (sdpa, its attention mask), one
process, the same shapes, random weights (speed does not depend on their values), fp32.

Three text mixes, as docs/benchmarks.md asks of every comparison: one text of 4096 tokens (long),
a padded batch of 32 texts of 16..512 tokens (mixed), 32 texts of 64 tokens (short, alike). Each
is timed after a warm-up, best of ``--repeats``; the ratio is transformers' time over ours.
Run: ``python benchmarks/modernbert.py [--layers 6] [--threads 2] [--repeats 3]``.

Figures (2026-11-28, 2-core CPU, 2 threads): with 6 layers, one 4096-token text 6.1 s against
transformers' 11.5 s (1.9x; the machine shared with other jobs); with ``--layers 2 --repeats 1``
(one global, one local layer): long 1.56x, mixed 1.79x, short 1.43x. Targets (issue 34): 2x long,
1.5x a padded batch.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
from transformers import ModernBertConfig, ModernBertModel

from roberta_ext.families import preset
from roberta_ext.modeling import EncoderModel


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """Seconds of the fastest of ``repeats`` runs, after one warm-up."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def batches(generator: torch.Generator) -> dict[str, list[int]]:
    """Each mix's text lengths."""
    mixed = torch.randint(16, 513, (32,), generator=generator).tolist()
    return {"long (1 x 4096)": [4096], "mixed (32 x 16..512)": mixed, "short (32 x 64)": [64] * 32}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cfg = preset("modernbert-base", encoder_layers=args.layers)
    ours = EncoderModel(cfg).eval()
    theirs = ModernBertModel(
        ModernBertConfig(
            vocab_size=cfg.vocab_size,
            hidden_size=cfg.encoder_embed_dim,
            intermediate_size=cfg.encoder_ffn_embed_dim,
            num_hidden_layers=args.layers,
            num_attention_heads=cfg.encoder_attention_heads,
            local_attention=cfg.local_attention,
            global_attn_every_n_layers=cfg.global_attn_every_n_layers,
            max_position_embeddings=8192,
            pad_token_id=cfg.padding_idx,
        )
    ).eval()
    generator = torch.Generator().manual_seed(0)
    pad = cfg.padding_idx
    for name, lengths in batches(generator).items():
        ids = torch.full((len(lengths), max(lengths)), pad)
        for row, length in enumerate(lengths):
            ids[row, :length] = torch.randint(pad + 1, cfg.vocab_size, (length,), generator=generator)
        mask = ids.ne(pad).long()
        with torch.inference_mode():
            mine = best_of(args.repeats, lambda ids=ids: ours.features(ids))
            peer = best_of(args.repeats, lambda ids=ids, mask=mask: theirs(input_ids=ids, attention_mask=mask))
        print(f"{name:22} ours {mine * 1000:8.0f} ms   transformers {peer * 1000:8.0f} ms   {peer / mine:5.2f}x")


if __name__ == "__main__":
    main()
