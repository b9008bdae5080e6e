"""The quickstart: fairseq's RoBERTa workflow end to end, on data every Python installation carries.

1. corpus      the docstrings of the standard library, labelled "class" or "function" (read with
               ``ast``; nothing is imported or run), split into train / valid / test;
2. tokenizer   ``roberta-ext train-bpe`` learns a GPT-2-format byte-level BPE and ``dict.txt``;
               ``roberta-ext bpe-encode`` applies it;
3. binarize    ``fairseq-preprocess``;
4. pretrain    ``fairseq-train --user-dir roberta_ext --task roberta_ext_mlm`` (a small RoBERTa; with
               ``--family modernbert`` a small ModernBERT on its recipe: 30% masking, StableAdamW,
               warmup-stable-decay);
5. fine-tune   ``fairseq-train --task roberta_ext_classification --restore-file ...``: is this the
               docstring of a class or of a function?
6. use         both checkpoints through ``torch.hub.load(..., source="local")``: encode/decode,
               features, validation perplexity, masked-token top-1/top-5 accuracy on the
               held-out docstrings and on content-word probes (``fill_mask``), each next to a
               unigram baseline, and the classifier's held-out accuracy.

Every step is a command a user would type; each is printed before it runs. Nothing is
downloaded. The defaults take about 7 minutes on 2 idle CPU cores; the options scale it up.
"""

from __future__ import annotations

import ast
import json
import math
import os
import random
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from .data.masking import BatchMasker, MaskingConfig
from .data.word_starts import gpt2_word_starts
from .families import get_family

REPO = Path(__file__).resolve().parent.parent
PACKAGE = Path(__file__).resolve().parent
BIN = Path(sys.executable).parent


def stdlib_docstrings(min_chars: int = 40) -> list[tuple[str, str]]:
    """``(docstring, kind)`` for every module, class and function docstring of the standard
    library's top-level ``.py`` files, whitespace-normalised, in a fixed order. ``kind`` is
    ``"module"``, ``"class"`` or ``"function"``. Read with ``ast``: no module is imported.

    >>> docs = stdlib_docstrings()
    >>> sorted({kind for _, kind in docs})
    ['class', 'function', 'module']
    """
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    kinds: dict[type[ast.AST], str] = {
        ast.Module: "module",
        ast.ClassDef: "class",
        ast.FunctionDef: "function",
        ast.AsyncFunctionDef: "function",
    }
    docs: list[tuple[str, str]] = []
    for path in sorted(stdlib.glob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc and len(doc) >= min_chars:
                    docs.append((" ".join(doc.split()), kinds[type(node)]))
    if not docs:
        raise RuntimeError(f"no docstrings found under {stdlib}: is the standard library's source installed?")
    return docs


class Runner:
    """Runs the workflow's commands, printing each one and its timing."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started = time.time()

    def __call__(self, name: str, argv: list[str], *, stream: bool = False) -> str:
        print(f"\n$ {' '.join(shlex.quote(a) for a in argv)}", flush=True)
        log_path = self.log_dir / f"{name}.log"
        begun = time.time()
        with open(log_path, "w", encoding="utf-8") as log:
            process = subprocess.Popen(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO, env=_env()
            )
            assert process.stdout is not None
            for line in process.stdout:
                log.write(line)
                if stream and _is_progress(line):
                    print("   " + _short(line), flush=True)
            process.wait()
        if process.returncode != 0:
            tail = log_path.read_text(encoding="utf-8").splitlines()[-30:]
            raise SystemExit(
                f"step {name!r} failed (exit {process.returncode}); last lines of {log_path}:\n" + "\n".join(tail)
            )
        print(f"   done in {time.time() - begun:.0f} s (log: {log_path})", flush=True)
        return log_path.read_text(encoding="utf-8")


def _env() -> dict[str, str]:
    # fairseq's --user-dir imports roberta_ext from the repository, so the same code runs everywhere.
    return {
        **os.environ,
        "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "PYTHONWARNINGS": "ignore",
    }


def _is_progress(line: str) -> bool:
    return ("| train_inner |" in line or "| valid |" in line or "| train |" in line) and "{" in line


def _short(line: str) -> str:
    """One fairseq JSON log line as a few readable numbers."""
    record = json.loads(line[line.index("{") :])
    keep = [k for k in record if k.endswith(("epoch", "num_updates", "loss", "ppl", "accuracy", "wps"))]
    kind = line.split("|")[2].strip()
    names = {k: k.removeprefix("valid_").removeprefix("train_") for k in keep}
    return f"{kind:12} " + "  ".join(f"{names[k]}={record[k]}" for k in keep)


def balanced(rows: list[tuple[str, str]], seed: int) -> list[tuple[str, str]]:
    """As many rows of each label as the rarest label has, shuffled."""
    by_label: dict[str, list[tuple[str, str]]] = {}
    for row in rows:
        by_label.setdefault(row[1], []).append(row)
    n = min(len(group) for group in by_label.values())
    picked = [row for group in by_label.values() for row in group[:n]]
    random.Random(seed).shuffle(picked)
    return picked


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def unigram_perplexity(train_bpe: Path, valid_bpe: Path) -> float:
    """Perplexity of the validation tokens under add-one-smoothed training-token frequencies:
    what a model that ignores context achieves."""
    counts = Counter(tok for line in train_bpe.read_text().split("\n") for tok in line.split())
    total, vocab = sum(counts.values()), len(counts) + 1
    tokens = [tok for line in valid_bpe.read_text().split("\n") for tok in line.split()]
    nll = -sum(math.log((counts.get(t, 0) + 1) / (total + vocab)) for t in tokens) / len(tokens)
    return math.exp(nll)


def last_valid(log: str, key: str) -> float | None:
    """The last value of ``valid_<key>`` in a fairseq JSON log."""
    value = None
    for line in log.splitlines():
        if "| valid |" in line and "{" in line:
            record = json.loads(line[line.index("{") :])
            value = float(record.get(f"valid_{key}", value or "nan"))
    return value


STOP_WORDS = frozenset(
    """a about above after again against all also an and any are as at be because been before being
    below between both but by can could did do does doing down during each either else for from
    further had has have having he her here hers him his how i if in into is it its itself just may me
    might more most must my no nor not now of off on once only or other our ours out over own same she
    should since so some such than that the their theirs them then there these they this those through
    thus to too under until up upon very via was we were what when where whether which while who whom
    whose why will with would yet you your""".split()
)
"""English function words: a probe whose answer is one of these shows little of what a model
learned (an untrained guess of `` the`` is often right)."""

PROBES = 500
"""Content-word probes drawn from the held-out docstrings."""
SHOWN_HITS, SHOWN_MISSES = 3, 2
"""Probes printed: the first ones with the answer in the model's top 5, and the first ones without."""


def content_word(word: str) -> bool:
    """Whether ``word`` is a content word worth a probe: letters only, three or more, not a stop word.

    >>> [w for w in ("Return", "the", "file", "x", "utf8") if content_word(w)]
    ['Return', 'file']
    """
    return word.isalpha() and len(word) >= 3 and word.lower() not in STOP_WORDS


class TextEncoder(Protocol):
    """What the probes take from a hub's tokenizer: text to dictionary indices."""

    def encode(self, text: str) -> list[int]: ...


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One held-out sentence with one content word masked, ready for the model."""

    masked: str
    """The sentence with ``<mask>`` in place of the word (what ``fill_mask`` takes)."""
    answer: int
    """Dictionary index of the word, with its leading space: a single token."""
    ids: list[int]
    """``<s> left <mask> right </s>``, as ``fill_mask`` encodes ``masked``."""


def held_out_probes(
    texts: list[str],
    tokenizer: TextEncoder,
    *,
    bos: int,
    eos: int,
    mask: int,
    count: int,
    seed: int,
    max_tokens: int | None = None,
) -> list[Probe]:
    """Up to ``count`` probes, one per sentence of ``texts`` (sentences of 6 to 25 words, in
    order, of at most ``max_tokens`` tokens: the model's positions), each masking a content word
    that is a single token, chosen at random with ``seed`` among the sentence's such words (never
    the first word, which has no leading space). The choice ignores the model: these are the
    probes, successes and failures alike."""
    rng = random.Random(seed)
    probes: list[Probe] = []
    for text in texts:
        for sentence in text.split(". "):
            words = sentence.split()
            if not 6 <= len(words) <= 25:
                continue
            candidates = [
                (i, pieces[0])
                for i, word in enumerate(words[1:], start=1)
                if content_word(word) and len(pieces := tokenizer.encode(f" {word}")) == 1
            ]
            if not candidates:
                continue
            i, answer = rng.choice(candidates)
            left, right = " ".join(words[:i]), "".join(f" {word}" for word in words[i + 1 :])
            ids = [bos, *tokenizer.encode(left), mask, *tokenizer.encode(right), eos]
            if max_tokens is not None and len(ids) > max_tokens:  # a small BPE cuts 25 words into many tokens
                continue
            probes.append(Probe(masked=f"{left} <mask>{right}", answer=answer, ids=ids))
            if len(probes) == count:
                return probes
    return probes


def top_k_hits(logits: torch.Tensor, targets: torch.Tensor, k: int) -> torch.Tensor:
    """Bool (N,): is each target among the ``k`` highest of its row of ``logits`` (N, V)?

    >>> top_k_hits(torch.tensor([[0.1, 0.5, 0.4], [0.9, 0.0, 0.1]]), torch.tensor([2, 2]), 2).tolist()
    [True, True]
    """
    return logits.topk(k, dim=-1).indices.eq(targets[:, None]).any(dim=-1)


def masked_predictions(roberta: Any, rows: list[list[int]]) -> torch.Tensor:
    """The hub model's logits (N, V) at the ``<mask>`` positions of ``rows`` (encoded, with
    ``<s>`` and ``</s>``), in row order, in batches of 64."""
    mask_index = roberta.task.mask_idx
    out = []
    with roberta.model.inference():
        for start in range(0, len(rows), 64):
            tokens, _ = roberta.collate(rows[start : start + 64])
            features = roberta.extract_features(tokens)
            out.append(roberta.model.lm_logits(features, tokens.eq(mask_index)))
    return torch.cat(out)


def unigram_counts(train_bpe: Path, dictionary: Any) -> Counter[int]:
    """How often each dictionary index occurs in the training tokens: the unigram baseline,
    which guesses the most frequent whatever the context."""
    counts = Counter(tok for line in train_bpe.read_text().split("\n") for tok in line.split())
    return Counter({dictionary.index(symbol): count for symbol, count in counts.items()})


@dataclass(frozen=True, kw_only=True)
class Accuracies:
    """Top-1 and top-5 accuracy of the model and of the unigram baseline over ``count`` targets."""

    count: int
    model: tuple[float, float]
    unigram: tuple[float, float]
    perplexity: tuple[float, float] = (math.nan, math.nan)
    """The model's and the unigram baseline's (add-one smoothed) perplexity of the targets."""

    def line(self) -> str:
        (m1, m5), (u1, u5) = self.model, self.unigram
        return f"top-1 {m1:.3f}, top-5 {m5:.3f}   (unigram baseline: top-1 {u1:.3f}, top-5 {u5:.3f})"


def accuracies(
    logits: torch.Tensor, targets: torch.Tensor, ranking: list[int], counts: Counter[int] | None = None
) -> Accuracies:
    """The model's top-1/top-5 accuracy from ``logits`` (N, V) and the baseline's, which always
    guesses the first 1 or 5 of ``ranking``; with the training ``counts``, both perplexities."""
    guesses = torch.tensor(ranking[:5], dtype=torch.long)
    baseline = [float(torch.isin(targets, guesses[:k]).float().mean()) for k in (1, 5)]
    model = [float(top_k_hits(logits, targets, k).float().mean()) for k in (1, 5)]
    perplexity = (math.nan, math.nan)
    if counts is not None:
        total, kinds = sum(counts.values()), len(counts) + 1  # as unigram_perplexity smooths
        unigram_nll = -sum(math.log((counts[t] + 1) / (total + kinds)) for t in targets.tolist()) / len(targets)
        model_nll = float(torch.nn.functional.cross_entropy(logits.float(), targets))
        perplexity = (math.exp(model_nll), math.exp(unigram_nll))
    return Accuracies(
        count=len(targets), model=(model[0], model[1]), unigram=(baseline[0], baseline[1]), perplexity=perplexity
    )


def masked_token_accuracies(
    roberta: Any, texts: list[str], *, word_starts: torch.Tensor, counts: Counter[int], seed: int
) -> Accuracies:
    """Pretraining's own test on held-out ``texts``: 15% of each text's words masked (whole words,
    every chosen token replaced by ``<mask>``, drawn by the library's masker from ``seed``), each
    masked token predicted from the rest; texts cut to the model's positions."""
    dictionary, limit = roberta.dictionary, roberta.max_positions()
    rows = [roberta.encode(text).tolist() for text in texts]
    rows = [ids if len(ids) <= limit else [*ids[: limit - 1], dictionary.eos()] for ids in rows]
    specials = [*range(dictionary.nspecial), roberta.task.mask_idx]
    specials += [i for i, symbol in enumerate(dictionary.symbols) if symbol.startswith("madeupword")]
    masker = BatchMasker(
        MaskingConfig(leave_unmasked_prob=0.0, random_token_prob=0.0, mask_whole_words=True),
        vocab_size=len(dictionary),
        mask_idx=roberta.task.mask_idx,
        pad_idx=dictionary.pad(),
        special_ids=specials,
        word_starts=word_starts,
        seed=seed,
    )
    tokens, _ = roberta.collate(rows)
    masked, targets = masker(tokens, torch.arange(len(rows)), epoch=1)
    chosen = targets.ne(dictionary.pad())
    masked_rows = [row[: len(ids)].tolist() for row, ids in zip(masked, rows)]
    ranking = [index for index, _ in counts.most_common()]
    return accuracies(masked_predictions(roberta, masked_rows), targets[chosen], ranking, counts)


def print_probes(roberta: Any, probes: list[Probe], hits: list[bool]) -> None:
    """How many probes have their answer in the model's top 5 (``hits``); then the first few
    that do and the first few that do not, each with ``fill_mask``'s top 5."""
    found = [p for p, hit in zip(probes, hits, strict=True) if hit][:SHOWN_HITS]
    missed = [p for p, hit in zip(probes, hits, strict=True) if not hit][:SHOWN_MISSES]
    print(
        f"   {sum(hits)} of {len(probes)} probes have the answer in the model's top 5; here the first {len(found)} "
        f"of them and the first {len(missed)} of the others, with fill_mask's top 5:"
    )
    for probe in found + missed:
        answer = roberta.tokenizer.token_text(probe.answer)
        print(f"      {probe.masked!r}   answer {answer!r}")
        fillings = roberta.fill_mask(probe.masked, topk=5)
        print("        " + "  ".join(f"{prob:.3f} {token!r}" for _, prob, token in fillings))


def show_what_it_learned(
    roberta: Any, held_out: list[str], *, train_bpe: Path, encoder_json: Path, vocab_bpe: Path, seed: int
) -> None:
    """Print the pretrained model's masked-token accuracy on ``held_out`` texts that no step has
    seen, then on content-word probes from them, each next to a unigram baseline (the most
    frequent training tokens, whatever the context), then a few probes, hits and misses."""
    counts = unigram_counts(train_bpe, roberta.dictionary)
    word_starts = gpt2_word_starts(roberta.dictionary, str(encoder_json), str(vocab_bpe))
    tokens_result = masked_token_accuracies(roberta, held_out, word_starts=word_starts, counts=counts, seed=seed)
    model_ppl, unigram_ppl = tokens_result.perplexity
    print(
        f"   masked tokens of the held-out test docstrings ({tokens_result.count}; 15% of the words, every one "
        f"replaced by <mask>):\n      {tokens_result.line()}\n"
        f"      perplexity {model_ppl:.1f}   (unigram baseline: {unigram_ppl:.1f}; the validation perplexity above "
        "also counts the 10% of targets that pretraining leaves in place)"
    )
    d = roberta.dictionary
    probes = held_out_probes(
        held_out,
        roberta.tokenizer,
        bos=d.bos(),
        eos=d.eos(),
        mask=roberta.task.mask_idx,
        count=PROBES,
        seed=seed,
        max_tokens=roberta.max_positions(),
    )
    logits = masked_predictions(roberta, [p.ids for p in probes])
    answers = torch.tensor([p.answer for p in probes])
    token_texts = {i: roberta.tokenizer.token_text(i) for i in counts}
    content_ranking = [
        i for i, _ in counts.most_common() if token_texts[i][:1] == " " and content_word(token_texts[i][1:])
    ]
    probes_result = accuracies(logits, answers, content_ranking)
    print(
        f"   content-word probes: a word that is not a stop word masked in each of {probes_result.count} held-out "
        f"sentences:\n      {probes_result.line()}"
    )
    print_probes(roberta, probes, top_k_hits(logits, answers, 5).tolist())


@dataclass(frozen=True, kw_only=True)
class Options:
    """The quickstart's sizes (``roberta-ext quickstart``'s options; the defaults take about 7
    minutes on 2 idle CPU cores)."""

    out: Path = Path("quickstart_out")
    """Working folder (replaced when it exists)."""
    family: str = "roberta"
    """The model pretrained and fine-tuned: one of :data:`FAMILIES`."""
    merges: int = 3000
    """BPE merges to learn."""
    layers: int = 4
    """Encoder layers."""
    dim: int = 128
    """Model width; heads = dim / 32; the FFN is 4x (RoBERTa) or a GeGLU of 1.5x (ModernBERT)."""
    tokens_per_sample: int = 128
    """Pretraining block length."""
    pretrain_updates: int = 800
    finetune_updates: int = 200
    batch_size: int = 32
    """Sentences per batch."""
    lr: float = 1e-3
    """Peak pretraining learning rate."""
    workers: int = 2
    """Processes for bpe-encode and fairseq-preprocess."""
    seed: int = 1
    """Seed of the train/valid/test split, of the label balancing, of both fairseq-train runs and
    of the held-out masks and probes."""
    progress: bool = False
    """Print fairseq-train's progress lines as they come (else each step's summary only)."""


FAMILIES = ("roberta", "modernbert")
"""The families the quickstart trains (``--family``): each takes its own preset's structure
and its own pretraining recipe (``Family.pretraining_recipe``) from the family registry."""

ROBERTA_OPTIMIZATION = (
    *("--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-6", "--clip-norm", "1.0"),
    *("--weight-decay", "0.01", "--lr-scheduler", "polynomial_decay"),
)
"""fairseq's RoBERTa optimizer and schedule: Adam, gradient clipping, polynomial decay."""


def model_options(options: Options) -> list[str]:
    """``fairseq-train``'s model flags of the quickstart's small model, the same for pretraining
    and fine-tuning: ``<family>_ext_base`` cut to ``layers`` x ``dim``, with its preset's FFN
    ratio (RoBERTa 4x, ModernBERT's GeGLU 1.5x) and, for a family with local layers, a window of a
    quarter of a row, so that the local layers see less than a row.

    >>> model_options(Options(family="modernbert"))[:2], model_options(Options())[-1]
    (['--arch', 'modernbert_ext_base'], '128')
    """
    if options.family not in FAMILIES:
        raise ValueError(f"quickstart family {options.family!r}: choose one of {', '.join(FAMILIES)}")
    base = get_family(options.family).preset("base")
    ffn = options.dim * base.encoder_ffn_embed_dim // base.encoder_embed_dim
    flags = ["--arch", f"{options.family}_ext_base", "--encoder-layers", str(options.layers)]
    flags += ["--encoder-embed-dim", str(options.dim), "--encoder-ffn-embed-dim", str(ffn)]
    flags += ["--encoder-attention-heads", str(max(1, options.dim // 32))]
    if base.local_attention is not None:
        flags += ["--local-attention", str(max(2, options.tokens_per_sample // 4))]
    return [*flags, "--max-positions", str(options.tokens_per_sample)]


def pretraining_recipe(options: Options) -> list[str]:
    """``fairseq-train``'s optimizer, schedule and masking flags of the pretraining step: the
    family's own recipe (ModernBERT's: 30% masking, StableAdamW, a warmup-stable-decay schedule,
    decaying here over the last fifth of the run), else fairseq's RoBERTa recipe (Adam,
    polynomial decay, 15% masking).

    >>> pretraining_recipe(Options(family="modernbert"))[:2]
    ['--optimizer', 'roberta_ext_stable_adamw']
    """
    recipe = get_family(options.family).pretraining_recipe
    if recipe is None:
        return list(ROBERTA_OPTIMIZATION)
    flags = list(recipe)
    if "roberta_ext_warmup_stable_decay" in flags:
        flags += ["--decay-updates", str(max(1, options.pretrain_updates // 5))]
    return flags


def run(options: Options) -> int:
    """Run the quickstart's six steps, printing each command before it runs; 0 when all did."""
    out: Path = options.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    for sub in ("corpus", "logs"):
        (out / sub).mkdir(parents=True)
    run = Runner(out / "logs")
    started = time.time()
    roberta_ext_cli = [sys.executable, "-m", "roberta_ext"]

    print("1. corpus: docstrings of the Python standard library")
    docs = stdlib_docstrings()
    random.Random(options.seed).shuffle(docs)
    n_held = max(100, len(docs) // 10)
    splits = {"test": docs[:n_held], "valid": docs[n_held : 2 * n_held], "train": docs[2 * n_held :]}
    # The fine-tuning task: class or function docstring? Balanced, so that chance is 50%.
    labelled = {split: balanced([d for d in rows if d[1] != "module"], options.seed) for split, rows in splits.items()}
    corpus = out / "corpus"
    for split, rows in splits.items():
        write_lines(corpus / f"{split}.txt", [text for text, _ in rows])
        write_lines(corpus / f"cls.{split}.txt", [text for text, _ in labelled[split]])
        write_lines(corpus / f"cls.{split}.label", [kind for _, kind in labelled[split]])
    print(
        f"   {len(docs)} docstrings for pretraining ({', '.join(f'{len(r)} {s}' for s, r in splits.items())}); "
        f"class-vs-function task: {', '.join(f'{len(r)} {s}' for s, r in labelled.items())}"
    )

    print("\n2. tokenizer: a GPT-2-format byte-level BPE learned from the training split")
    bpe_dir = out / "bpe"
    run(
        "train-bpe",
        [
            *roberta_ext_cli,
            "train-bpe",
            "--inputs",
            str(corpus / "train.txt"),
            "--output-dir",
            str(bpe_dir),
            "--num-merges",
            str(options.merges),
        ],
    )
    encoder_json, vocab_bpe, dict_txt = bpe_dir / "encoder.json", bpe_dir / "vocab.bpe", bpe_dir / "dict.txt"
    for name in [*splits, *(f"cls.{split}" for split in splits)]:
        run(
            f"bpe-encode-{name}",
            [
                *roberta_ext_cli,
                "bpe-encode",
                "--encoder-json",
                str(encoder_json),
                "--vocab-bpe",
                str(vocab_bpe),
                "--inputs",
                str(corpus / f"{name}.txt"),
                "--outputs",
                str(corpus / f"{name}.bpe"),
                "--keep-empty",
                "--workers",
                str(options.workers),
            ],
        )

    print("\n3. binarize with fairseq-preprocess")
    data = out / "data-bin"
    run(
        "preprocess",
        [
            str(BIN / "fairseq-preprocess"),
            "--only-source",
            "--srcdict",
            str(dict_txt),
            "--trainpref",
            str(corpus / "train.bpe"),
            "--validpref",
            str(corpus / "valid.bpe"),
            "--testpref",
            str(corpus / "test.bpe"),
            "--destdir",
            str(data),
            "--workers",
            str(options.workers),
        ],
    )
    cls_data = out / "cls-bin"
    run(
        "preprocess-input0",
        [
            str(BIN / "fairseq-preprocess"),
            "--only-source",
            "--srcdict",
            str(dict_txt),
            "--trainpref",
            str(corpus / "cls.train.bpe"),
            "--validpref",
            str(corpus / "cls.valid.bpe"),
            "--destdir",
            str(cls_data / "input0"),
            "--workers",
            str(options.workers),
        ],
    )
    run(
        "preprocess-label",
        [
            str(BIN / "fairseq-preprocess"),
            "--only-source",
            "--trainpref",
            str(corpus / "cls.train.label"),
            "--validpref",
            str(corpus / "cls.valid.label"),
            "--destdir",
            str(cls_data / "label"),
            "--workers",
            "1",
        ],
    )

    model = model_options(options)
    common = [
        "--user-dir",
        str(PACKAGE),
        "--cpu",
        "--num-workers",
        "0",
        "--seed",
        str(options.seed),
        "--log-format",
        "json",
        "--log-interval",
        "50",
        "--no-epoch-checkpoints",
    ]
    print(f"\n4. pretrain a small {options.family} model (masked LM, whole-word masking)")
    pretrain_dir = out / "pretrain"
    for f in (encoder_json, vocab_bpe):  # whole-word masking reads word starts from the BPE files
        shutil.copy(f, data / f.name)
    pretrain_log = run(
        "pretrain",
        [
            str(BIN / "fairseq-train"),
            str(data),
            "--task",
            "roberta_ext_mlm",
            "--criterion",
            "roberta_ext_mlm",
            *model,
            *common,
            *pretraining_recipe(options),
            "--tokens-per-sample",
            str(options.tokens_per_sample),
            "--sample-break-mode",
            "none",
            "--mask-whole-words",
            "--batch-size",
            str(options.batch_size),
            "--lr",
            str(options.lr),
            "--warmup-updates",
            str(max(1, options.pretrain_updates // 10)),
            "--total-num-update",
            str(options.pretrain_updates),
            "--max-update",
            str(options.pretrain_updates),
            "--validate-interval",
            "1000",
            "--save-interval",
            "1000",
            "--validate-interval-updates",
            str(max(1, options.pretrain_updates // 4)),
            "--save-interval-updates",
            str(max(1, options.pretrain_updates // 4)),
            "--keep-interval-updates",
            "1",
            "--save-dir",
            str(pretrain_dir),
        ],
        stream=options.progress,
    )

    print("\n5. fine-tune: is a docstring a class's or a function's?")
    finetune_dir = out / "finetune"
    finetune_log = run(
        "finetune",
        [
            str(BIN / "fairseq-train"),
            str(cls_data),
            "--task",
            "roberta_ext_classification",
            "--criterion",
            "roberta_ext_classification",
            *model,
            *common,
            *ROBERTA_OPTIMIZATION,  # fine-tuning: fairseq's RoBERTa recipe for both families
            "--num-classes",
            "2",
            "--init-token",
            "0",
            "--separator-token",
            "2",
            "--shorten-method",
            "truncate",
            "--batch-size",
            str(options.batch_size),
            "--lr",
            "5e-4",
            "--warmup-updates",
            str(max(1, options.finetune_updates // 10)),
            "--total-num-update",
            str(options.finetune_updates),
            "--max-update",
            str(options.finetune_updates),
            "--restore-file",
            str(pretrain_dir / "checkpoint_last.pt"),
            "--reset-optimizer",
            "--reset-dataloader",
            "--reset-meters",
            "--best-checkpoint-metric",
            "accuracy",
            "--maximize-best-checkpoint-metric",
            "--save-dir",
            str(finetune_dir),
        ],
        stream=options.progress,
    )

    # A model folder like the released ones: checkpoint + dictionary + BPE files side by side.
    for folder in (pretrain_dir, finetune_dir):
        for f in (encoder_json, vocab_bpe):
            shutil.copy(f, folder / f.name)
    shutil.copy(dict_txt, pretrain_dir / "dict.txt")
    shutil.copytree(cls_data / "input0", finetune_dir / "input0", dirs_exist_ok=True)
    shutil.copytree(cls_data / "label", finetune_dir / "label", dirs_exist_ok=True)

    print("\n6. use both checkpoints through torch.hub.load(..., source='local')")
    roberta = torch.hub.load(
        str(REPO), "roberta", str(pretrain_dir), checkpoint_file="checkpoint_best.pt", source="local", trust_repo=True
    )
    sentence = "Return the number of items in the sequence."
    tokens = roberta.encode(sentence)
    print(f"   encode({sentence!r})\n      -> {tokens.tolist()}")
    print(f"   decode(...) == the sentence: {roberta.decode(tokens) == sentence}")
    print(
        f"   extract_features -> {tuple(roberta.extract_features(tokens).shape)}; return_all_hiddens -> "
        f"{len(roberta.extract_features(tokens, return_all_hiddens=True))} tensors "
        f"(embeddings + {options.layers} layers)"
    )

    valid_bits = last_valid(pretrain_log, "loss")
    unigram = unigram_perplexity(corpus / "train.bpe", corpus / "valid.bpe")
    if valid_bits is not None:
        print(
            f"   validation perplexity of masked tokens: {2**valid_bits:.1f}   "
            f"(unigram baseline, no context: {unigram:.1f})"
        )
    bpe = {"train_bpe": corpus / "train.bpe", "encoder_json": encoder_json, "vocab_bpe": vocab_bpe}
    show_what_it_learned(roberta, [text for text, _ in splits["test"]], **bpe, seed=options.seed)

    classifier = torch.hub.load(
        str(REPO), "roberta", str(finetune_dir), checkpoint_file="checkpoint_best.pt", source="local", trust_repo=True
    )
    test_rows = labelled["test"]
    correct = 0
    with torch.no_grad():
        for start in range(0, len(test_rows), 64):
            chunk = test_rows[start : start + 64]
            # Cut long docstrings as --shorten-method truncate did in training.
            tokens, _ = classifier.collate([classifier.encode(text)[: classifier.max_positions()] for text, _ in chunk])
            predicted = classifier.predict_label("sentence_classification_head", tokens)
            correct += sum(p == kind for p, (_, kind) in zip(predicted, chunk))
    majority = max(Counter(kind for _, kind in test_rows).values()) / len(test_rows)
    print(
        f"   held-out accuracy (class vs function, {len(test_rows)} docstrings): {correct / len(test_rows):.3f}   "
        f"(majority class: {majority:.3f}; validation accuracy in training: {last_valid(finetune_log, 'accuracy')})"
    )
    print(f"\nquickstart finished in {(time.time() - started) / 60:.1f} min; everything is in {out}")
    return 0
