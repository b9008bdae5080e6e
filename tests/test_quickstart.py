"""The README's main job, scaled down: every step runs and the report comes out; and the held-out
probes it shows are content words, drawn without looking at the model."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from collections import Counter

import pytest
import torch

import roberta_ext
from roberta_ext import quickstart
from roberta_ext.cli.quickstart import build_parser
from roberta_ext.quickstart import PROBES, STOP_WORDS, Probe, accuracies, content_word, held_out_probes
from roberta_ext.tokenizers import FairseqGPT2Tokenizer
from tests import forkserver
from tests.conftest import REPO
from tests.peers import require_installed

ACCURACY = r"top-1 ([\d.]+), top-5 ([\d.]+)   \(unigram baseline: top-1 ([\d.]+), top-5 ([\d.]+)\)"


def test_quickstart_runs_end_to_end_briefly_trained(quickstart_out):
    """The default shapes and vocabulary, 8 + 4 updates (the session's ``quickstart_out``
    fixture, which docs/ runs its examples on too; it needs fairseq, the ``--help`` test does not)."""
    report = (quickstart_out / "report.txt").read_text(encoding="utf-8")
    assert "decode(...) == the sentence: True" in report
    assert "return_all_hiddens -> 5 tensors" in report  # 4 layers + the embeddings
    assert re.search(
        r"validation perplexity of masked tokens: [\d.]+ +\(unigram baseline, no context: [\d.]+\)", report
    )
    tokens = re.search(
        r"masked tokens of the held-out test docstrings \((\d+); 15% of the words, every one replaced by <mask>\):\n +"
        + ACCURACY
        + r"\n +perplexity ([\d.]+) +\(unigram baseline: ([\d.]+); ",
        report,
    )
    assert tokens and int(tokens[1]) > 1000, report
    assert all(0.0 <= float(value) <= 1.0 for value in tokens.groups()[1:5])
    assert float(tokens[7]) > 1.0 and float(tokens[6]) > 1.0
    probes = re.search(
        r"content-word probes: a word that is not a stop word masked in each of (\d+) held-out sentences:\n +"
        + ACCURACY,
        report,
    )
    assert probes and int(probes[1]) == PROBES, report
    # The count of hits agrees with the top-5 accuracy; misses are shown as well as hits.
    shown = re.search(
        rf"(\d+) of {PROBES} probes have the answer in the model's top 5; here the first (\d+) of them and the first "
        r"(\d+) of the others, with fill_mask's top 5:\n",
        report,
    )
    assert shown, report
    hits, first_hits, first_misses = map(int, shown.groups())
    assert hits / PROBES == pytest.approx(float(probes[3]), abs=0.0005)
    assert (first_hits, first_misses) == (min(3, hits), min(2, PROBES - hits))
    lines = report[shown.end() :].splitlines()[: 2 * (first_hits + first_misses)]
    for masked, fillings in zip(lines[::2], lines[1::2], strict=True):
        assert re.fullmatch(r"""      (['"]).*<mask>.*\1   answer ' [A-Za-z]+'""", masked), masked  # repr()s
        assert len(re.findall(r"\d\.\d{3} '", fillings)) == 5, fillings
    assert re.search(r"held-out accuracy \(class vs function, \d+ docstrings\): [\d.]+", report)
    for folder in ("pretrain", "finetune"):
        assert (quickstart_out / folder / "checkpoint_best.pt").is_file()


TEXTS = [
    "Return the number of items in the sequence. The sequence is not changed. Raise ValueError if the file is empty",
    "Open the file and read all of its lines into a list of strings",
    "Too short. It is what it is and it was what it was",  # no content word: no probe
]


@pytest.fixture(scope="module")
def tokenizer(bpe_files) -> FairseqGPT2Tokenizer:
    return FairseqGPT2Tokenizer.from_files(*bpe_files)


def probes_of(tokenizer: FairseqGPT2Tokenizer, *, count: int = 10, seed: int = 1) -> list[Probe]:
    d = tokenizer.dictionary
    return held_out_probes(TEXTS, tokenizer, bos=d.bos(), eos=d.eos(), mask=99, count=count, seed=seed)


def test_a_probe_masks_one_content_word_of_a_held_out_sentence_as_fill_mask_encodes_it(tokenizer):
    """One probe per sentence of 6 to 25 words; its answer a content word (never a stop word) of
    one token; its ids those of the whole sentence with that token masked, as fill_mask encodes it."""
    probes = probes_of(tokenizer)
    sentences = [s for text in TEXTS for s in text.split(". ") if 6 <= len(s.split()) <= 25 and content_words(s)]
    assert len(probes) == len(sentences) == 3
    d = tokenizer.dictionary
    for probe, sentence in zip(probes, sentences, strict=True):
        answer = tokenizer.token_text(probe.answer)
        assert answer.startswith(" ") and content_word(answer[1:]) and answer[1:].lower() not in STOP_WORDS
        assert probe.masked.replace(" <mask>", answer) == sentence
        whole = [d.bos(), *tokenizer.encode(sentence), d.eos()]
        assert probe.ids == [99 if i == probe.ids.index(99) else index for i, index in enumerate(whole)]
        assert whole[probe.ids.index(99)] == probe.answer


def content_words(sentence: str) -> list[str]:
    return [w for w in sentence.split()[1:] if content_word(w)]


def test_probes_are_drawn_by_the_seed_alone(tokenizer):
    assert probes_of(tokenizer, seed=1) == probes_of(tokenizer, seed=1)
    assert probes_of(tokenizer, count=2) == probes_of(tokenizer)[:2]
    draws = {tuple(p.answer for p in probes_of(tokenizer, seed=seed)) for seed in range(20)}
    assert len(draws) > 1  # the word is drawn, not always the first or the longest


def test_accuracies_count_the_models_and_the_unigram_baselines_top_k_and_perplexity():
    # Targets 3, 1, 4; the model ranks 3 first in row 0, 1 second in row 1, 4 last in row 2.
    logits = torch.tensor(
        [
            [0.0, 1.0, 2.0, 9.0, 3.0, 4.0, 5.0],
            [0.0, 8.0, 9.0, 1.0, 2.0, 3.0, 4.0],
            [6.0, 5.0, 4.0, 3.0, 0.0, 2.0, 1.0],
        ]
    )
    targets = torch.tensor([3, 1, 4])
    counts = Counter({1: 6, 2: 5, 5: 4, 6: 3, 0: 2, 3: 1})  # 4 never seen in training
    result = accuracies(logits, targets, ranking=[1, 2, 5, 6, 0, 3, 4], counts=counts)
    assert result.count == 3
    assert result.model == pytest.approx((1 / 3, 2 / 3))
    assert result.unigram == pytest.approx((1 / 3, 1 / 3))  # it guesses 1, then 1 2 5 6 0
    assert result.line() == "top-1 0.333, top-5 0.667   (unigram baseline: top-1 0.333, top-5 0.333)"
    # Perplexity: exp of the mean negative log-probability of the targets; the baseline's is
    # add-one smoothed over the 21 training tokens and 6 + 1 kinds, as unigram_perplexity's.
    model = math.exp(-sum(float(logits[i].log_softmax(-1)[t]) for i, t in enumerate(targets.tolist())) / 3)
    unigram = math.exp(-(math.log(2 / 28) + math.log(7 / 28) + math.log(1 / 28)) / 3)
    assert result.perplexity == pytest.approx((model, unigram), rel=1e-6)
    assert all(math.isnan(value) for value in accuracies(logits, targets, ranking=[1]).perplexity)  # no counts


def test_quickstart_help():
    result = subprocess.run(
        [sys.executable, "-m", "roberta_ext", "quickstart", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "--pretrain-updates" in result.stdout


def test_every_option_has_help():
    """``--help`` explains every option (``--seed`` once had no text)."""
    parser = build_parser()
    assert [action.option_strings for action in parser._actions if not action.help] == []
    assert re.search(r"--seed \w+\s+seed of the train/valid/test split", parser.format_help())


def test_a_sentence_longer_than_the_models_positions_gives_no_probe(tokenizer):
    """A small BPE can cut a 25-word sentence into more tokens than the model has positions: that
    sentence gives no probe (the model could not read it), the others still do."""
    d = tokenizer.dictionary
    lengths = [len(p.ids) for p in probes_of(tokenizer)]
    shorter = held_out_probes(
        TEXTS, tokenizer, bos=d.bos(), eos=d.eos(), mask=99, count=10, seed=1, max_tokens=max(lengths) - 1
    )
    assert [len(p.ids) for p in shorter] == [n for n in lengths if n < max(lengths)]


def test_the_modernbert_quickstart_pretrains_fine_tunes_and_loads_in_the_hub(tmp_path, monkeypatch, capsys):
    """``--family modernbert`` end to end at small shapes: fairseq-train takes the recipe's flags
    (30% masking, StableAdamW, the warmup-stable-decay schedule, the family's window), and both
    checkpoints load through torch.hub. fairseq's scripts run from the tests' fork server."""
    require_installed("fairseq", "the quickstart trains with fairseq-train")
    monkeypatch.setattr(quickstart, "BIN", forkserver.shim_dir())
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    options = quickstart.Options(
        family="modernbert",
        out=tmp_path / "qs",
        merges=300,
        layers=3,
        dim=32,
        pretrain_updates=6,
        finetune_updates=3,
        workers=1,
    )
    assert quickstart.run(options) == 0
    report = capsys.readouterr().out
    assert "4. pretrain a small modernbert model" in report and "return_all_hiddens -> 4 tensors" in report
    pretrain = (tmp_path / "qs" / "logs" / "pretrain.log").read_text(encoding="utf-8")
    assert "'mask_prob': 0.3" in pretrain and "'local_attention': 32" in pretrain
    assert "'optimizer': {'_name': 'roberta_ext_stable_adamw'" in pretrain and "'decouple_lr': True" in pretrain
    assert "'lr_scheduler': {'_name': 'roberta_ext_warmup_stable_decay'" in pretrain
    hub = roberta_ext.from_pretrained(str(tmp_path / "qs" / "finetune"), "checkpoint_best.pt")
    assert hub.model.cfg.family == "modernbert" and "sentence_classification_head" in hub.model.classification_heads
