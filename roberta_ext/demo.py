"""The embedded-default demo: build everything from the Python standard library, then use it
through torch.hub exactly as a user would use a released RoBERTa.

1. a corpus: the docstrings of the standard library's modules (read with ``ast``, never imported);
2. a GPT-2-format byte-level BPE learned from it, and a fairseq ``dict.txt``;
3. a small RoBERTa, pretrained with masked-LM for a short while in plain PyTorch;
4. a fairseq-layout checkpoint folder (``model.pt``, ``dict.txt``, ``encoder.json``, ``vocab.bpe``);
5. ``torch.hub.load(REPO, "roberta", FOLDER, source="local")`` and every hub method on it.

Nothing is downloaded and nothing needs fairseq. ``python -m roberta_ext demo --help``.
"""

from __future__ import annotations

import argparse
import ast
import math
import random
import sys
import sysconfig
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .checkpoints import save_roberta_checkpoint
from .data.masking import mask_tokens
from .modeling import EncoderConfig, RobertaModel
from .tokenizers.bpe_trainer import count_words, train_bpe, write_bpe_files
from .tokenizers.dictionary import Dictionary
from .tokenizers.gpt2_bpe import GPT2BPE

REPO = Path(__file__).resolve().parent.parent


def stdlib_docstrings() -> list[str]:
    """Docstrings of every module, class and function in the standard library's top-level
    ``.py`` files, in a fixed order. Read with ``ast``: no module is imported or run."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    docs = []
    for path in sorted(stdlib.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 40:
                    docs.append(" ".join(doc.split()))
    if not docs:
        raise RuntimeError(f"found no docstrings under {stdlib}: is the standard library's source installed?")
    return docs


def build_dictionary(bpe: GPT2BPE, texts: list[str]) -> Dictionary:
    """fairseq's ``dict.txt`` for ``texts``: GPT-2 ids as symbols, most frequent first."""
    counts = Counter(i for text in texts for i in bpe.encode(text))
    dictionary = Dictionary()
    for token_id, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        dictionary.add_symbol(str(token_id), n=count)
    return dictionary


def pack_blocks(sequences: list[list[int]], block: int, bos: int, eos: int) -> torch.Tensor:
    """Concatenate sentences (each ending in ``</s>``) and cut ``<s>`` + ``block - 1`` token rows."""
    stream = [i for seq in sequences for i in (*seq, eos)]
    width = block - 1
    rows = [[bos, *stream[s : s + width]] for s in range(0, len(stream) - width + 1, width)]
    return torch.tensor(rows, dtype=torch.long)


def pretrain(model: RobertaModel, train: torch.Tensor, valid: torch.Tensor, dictionary: Dictionary, args) -> dict:
    """Masked-LM pretraining in plain PyTorch; returns validation loss and perplexity."""
    mask_idx = dictionary.index("<mask>")
    specials = torch.tensor([dictionary.bos(), dictionary.pad(), dictionary.eos(), dictionary.unk()])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, args.steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: min((s + 1) / warmup, max(0.0, (args.steps - s) / (args.steps - warmup)))
    )
    generator = torch.Generator().manual_seed(args.seed)
    model.train()
    bar = tqdm(range(args.steps), desc="pretraining (masked LM)", unit="step", mininterval=2.0)
    for step in bar:
        rows = torch.randint(0, train.size(0), (args.batch_size,), generator=generator)
        inputs, targets = mask_tokens(train[rows], mask_idx=mask_idx, vocab_size=len(dictionary),
                                      special_ids=specials, generator=generator)
        masked = targets.ne(-100)
        logits, _ = model(inputs, masked_tokens=masked)
        loss = F.cross_entropy(logits, targets[masked])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 10 == 0:
            bar.set_postfix(loss=f"{loss.item() / math.log(2):.2f} bits")
    model.eval()
    generator.manual_seed(args.seed + 1)
    total, count = 0.0, 0
    with torch.no_grad():
        for start in range(0, valid.size(0), args.batch_size):
            inputs, targets = mask_tokens(valid[start : start + args.batch_size], mask_idx=mask_idx,
                                          vocab_size=len(dictionary), special_ids=specials, generator=generator)
            masked = targets.ne(-100)
            logits, _ = model(inputs, masked_tokens=masked)
            total += F.cross_entropy(logits, targets[masked], reduction="sum").item()
            count += int(masked.sum())
    return {"valid_loss_nats": total / count, "valid_ppl": math.exp(total / count)}


def unigram_perplexity(train: torch.Tensor, valid: torch.Tensor, vocab_size: int, specials: int = 4) -> float:
    """Perplexity of predicting validation tokens from training-set token frequencies alone."""
    counts = torch.bincount(train[train >= specials].flatten(), minlength=vocab_size).double() + 1.0
    log_probs = (counts / counts.sum()).log()
    tokens = valid[valid >= specials].flatten()
    return math.exp(-log_probs[tokens].mean().item())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="roberta-ext demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("demo_out"), help="folder for the model (default: demo_out)")
    parser.add_argument("--merges", type=int, default=3000, help="BPE merges to learn (default: 3000)")
    parser.add_argument("--steps", type=int, default=400, help="pretraining steps (default: 400)")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--block", type=int, default=64, help="tokens per training row (default: 64)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.time()
    torch.manual_seed(args.seed)
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)

    print("1. corpus: docstrings of the Python standard library")
    docs = stdlib_docstrings()
    random.Random(args.seed).shuffle(docs)
    held_out = max(20, len(docs) // 20)
    train_docs, valid_docs = docs[held_out:], docs[:held_out]
    print(f"   {len(docs)} docstrings, {sum(map(len, docs)) / 1e6:.2f} MB; {held_out} held out")

    print("2. tokenizer: a GPT-2-format byte-level BPE and fairseq's dict.txt")
    encoder, merges = train_bpe(count_words(train_docs), args.merges, progress=True)
    write_bpe_files(encoder, merges, out / "encoder.json", out / "vocab.bpe")
    bpe = GPT2BPE.from_files(out / "encoder.json", out / "vocab.bpe")
    dictionary = build_dictionary(bpe, train_docs)
    dictionary.save(out / "dict.txt")
    dictionary.add_symbol("<mask>")  # as fairseq's masked_lm task does after loading
    print(f"   {len(merges)} merges, {len(dictionary)} dictionary entries (specials and <mask> included)")

    print("3. pretraining a small RoBERTa")
    cfg = EncoderConfig(vocab_size=len(dictionary), encoder_layers=args.layers, encoder_embed_dim=args.dim,
                        encoder_ffn_embed_dim=4 * args.dim, encoder_attention_heads=max(1, args.dim // 32),
                        max_positions=args.block, dropout=0.1, attention_dropout=0.1)
    model = RobertaModel(cfg)
    encode = lambda texts: [dictionary.encode_line(" ".join(map(str, bpe.encode(t))), append_eos=False) for t in texts]  # noqa: E731
    train = pack_blocks(encode(train_docs), args.block, dictionary.bos(), dictionary.eos())
    valid = pack_blocks(encode(valid_docs), args.block, dictionary.bos(), dictionary.eos())
    print(f"   {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters; "
          f"{train.size(0)} training rows of {args.block} tokens")
    metrics = pretrain(model, train, valid, dictionary, args)
    unigram = unigram_perplexity(train, valid, len(dictionary))
    print(f"   validation perplexity {metrics['valid_ppl']:.1f} (masked LM) vs {unigram:.1f} (unigram baseline)")
    print("   (a short run on 2 CPU cores: the model has only begun to use context; --steps trains longer)")

    print("4. saving a fairseq-layout checkpoint folder")
    save_roberta_checkpoint(model, out / "model.pt")
    print(f"   {out}/model.pt, dict.txt, encoder.json, vocab.bpe")

    print("5. loading it with torch.hub.load(..., source='local')")
    if (REPO / "hubconf.py").is_file():
        roberta = torch.hub.load(str(REPO), "roberta", str(out), source="local", trust_repo=True)
    else:  # an installed package without the repository's hubconf.py
        from . import from_pretrained

        roberta = from_pretrained(str(out))
    sentence = "Return the number of items in a sequence."
    tokens = roberta.encode(sentence)
    print(f"   encode({sentence!r}) -> {tokens.tolist()}")
    print(f"   decode(...) == input: {roberta.decode(tokens) == sentence}")
    print(f"   extract_features: {tuple(roberta.extract_features(tokens).shape)}; "
          f"return_all_hiddens: {len(roberta.extract_features(tokens, return_all_hiddens=True))} tensors")
    for masked in ["Return the number of <mask> in a sequence.", "Raise a <mask> if the file does not exist."]:
        filled = roberta.fill_mask(masked, topk=3)
        print(f"   fill_mask({masked!r}):")
        for text, prob, token in filled:
            print(f"      {prob:6.3f}  {token!r:14} {text}")
    roberta.register_classification_head("demo_task", num_classes=3)
    print(f"   predict('demo_task', ...) -> log-probabilities of shape {tuple(roberta.predict('demo_task', tokens).shape)}")
    print(f"done in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
