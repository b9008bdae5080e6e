"""BERT and ALBERT pretraining: ``--task roberta_ext_sentence_pair_mlm`` with next-sentence (NSP)
and sentence-order (SOP) prediction.

* The pair dataset as fairseq sees it: the pairs of :mod:`roberta_ext.data.sentence_pairs`
  (tested without fairseq in tests/data/test_sentence_pairs.py) with fairseq's dataset protocol.
* The real pipeline, as docs/bert-albert.md tells users to run it: text -> ``roberta-ext
  tokenize`` (a WordPiece vocabulary or a SentencePiece model learned by the test) ->
  ``fairseq-preprocess`` (an empty line between documents) -> ``fairseq-train --user-dir``
  with ``bert_ext_base`` + NSP and ``albert_ext_base`` + SOP, shrunk to 2 layers x 32, whose
  MLM and sentence losses fall; the BERT checkpoint then loads in the hub with its NSP head.

The corpora are synthetic, made so that a 2-layer model learns the sentence task within
~100-150 updates: each document has one of three topics (NSP: is B on A's topic?), and a
document opens with a short title (SOP: which segment holds it?). Measured while writing these
tests: with BERT's initialisation (weights of std 0.02) the sentence losses of such tiny models
stay at 1 bit for the first 50-100 updates, longer at learning rates below 1e-2 or alongside
the MLM loss than alone, hence a learning rate of 1e-2 and 120-160 updates.
Every run uses one thread (``OMP_NUM_THREADS=1``): faster on a shared 2-core machine, and
deterministic.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.peers import require

require("fairseq", "the tests run fairseq-preprocess and fairseq-train")

from roberta_ext.checkpoints.safe_load import load_checkpoint_file
from roberta_ext.cli.corpus import tokenize_main
from roberta_ext.data.sentence_pairs import SentencePairs
from roberta_ext.fairseq_plugin.sentence_pairs import SentencePairDataset
from tests.data.test_sentence_pairs import Sentences, make_docs
from tests.fairseq_plugin.tools import USER_DIR, log_records, run

MODEL = [
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--max-positions",
    "32",
]
COMMON = [
    "--user-dir",
    USER_DIR,
    "--cpu",
    "--num-workers",
    "0",
    "--seed",
    "1",
    "--log-format",
    "json",
    "--log-interval",
    "10",
    "--no-epoch-checkpoints",
    "--optimizer",
    "adam",
    "--adam-betas",
    "(0.9,0.98)",
    "--disable-validation",
]
PRETRAIN = [
    *MODEL,
    *COMMON,
    "--tokens-per-sample",
    "32",
    "--batch-size",
    "32",
    "--lr",
    "1e-2",
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "20",
]
BOS, PAD, EOS = 0, 1, 2


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def falls(records: list[dict], key: str, by: float) -> None:
    values = [float(r[key]) for r in records]
    print(key, values)  # shown by pytest -s, and with a failure
    assert len(values) >= 6, values
    assert mean(values[-3:]) < mean(values[:3]) - by, (key, values)


# ------------------------------------------------------------------------ the pair dataset


def test_the_fairseq_dataset_is_the_pure_one_with_fairseqs_protocol():
    sentences = Sentences(make_docs(60))
    options = dict(objective="nsp", tokens_per_sample=40, bos=BOS, eos=EOS, pad=PAD, masker=None, seed=3)
    pure = SentencePairs(sentences, sentences.sizes, **options)
    dataset = SentencePairDataset(sentences, sentences.sizes, **options)
    for epoch in (1, 2):
        pure.set_epoch(epoch)
        dataset.set_epoch(epoch)
        for index in range(len(dataset)):
            x, y = pure[index], dataset[index]
            assert torch.equal(x["source"], y["source"]) and x["label"] == y["label"]
        samples = [dataset[i] for i in range(8)]
        assert torch.equal(
            dataset.collater(samples)["net_input"]["src_tokens"], pure.collater(samples)["net_input"]["src_tokens"]
        )
    assert np.array_equal(dataset.sizes, pure.sizes) and dataset.num_tokens(5) == pure.sizes[5]
    order = dataset.ordered_indices()  # SizedDataset's: shuffled per seed and epoch, then sorted by size
    assert sorted(order.tolist()) == list(range(len(dataset))) and np.all(np.diff(dataset.sizes[order]) >= 0)
    assert dataset.can_reuse_epoch_itr_across_epochs


# ------------------------------------------------------------------ the real pipeline


TOPICS = ("apple", "river", "stone")


def nsp_corpus(num_docs: int, seed: int) -> list[str]:
    """Documents of 2-5 sentences on one of three topics; a marker opens each sentence."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_docs):
        topic = rng.choice(TOPICS)
        for i in range(rng.randint(2, 5)):
            words = [topic + ("s" if rng.random() < 0.3 else "") for _ in range(rng.randint(3, 5))]
            lines.append(" ".join([f"p{i}", *words, "."]))
        lines.append("")  # the document break
    return lines


def sop_corpus(num_docs: int, seed: int) -> list[str]:
    """Documents that open with a two-word title, then one or two longer sentences."""
    rng = random.Random(seed)
    lines = []
    for _ in range(num_docs):
        topic = rng.choice(TOPICS)
        lines.append(f"title {topic}")
        for i in range(rng.randint(1, 2)):
            words = [topic + ("s" if rng.random() < 0.3 else "") for _ in range(rng.randint(5, 8))]
            lines.append(" ".join([f"p{i + 1}", *words, "."]))
        lines.append("")
    return lines


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> dict:
    """Text -> tokenizer -> ``roberta-ext tokenize`` -> ``fairseq-preprocess``, for BERT and ALBERT."""
    from roberta_ext.tokenizers.sentencepiece_tokenizer import train_sentencepiece
    from roberta_ext.tokenizers.wordpiece import BERT_SPECIAL_TOKENS, write_vocab

    root = tmp_path_factory.mktemp("families")
    out = {"root": root}
    for name, make in (("bert", nsp_corpus), ("albert", sop_corpus)):
        train, valid = make(400, 1), make(30, 2)
        write_lines(root / f"{name}.train.txt", train)
        write_lines(root / f"{name}.valid.txt", valid)
        if name == "bert":  # a small hand-made vocabulary: "apples" is "apple ##s"
            model = root / "vocab.txt"
            write_vocab([*BERT_SPECIAL_TOKENS, *TOPICS, "##s", ".", "title", *(f"p{i}" for i in range(6))], model)
            kind = "wordpiece"
        else:
            model = train_sentencepiece(
                [line for line in train if line], root / "spiece", vocab_size=40, hard_vocab_limit=False
            )
            kind = "sentencepiece"
        assert (
            tokenize_main(
                [
                    "--tokenizer",
                    kind,
                    "--model",
                    str(model),
                    "--no-progress",
                    "--inputs",
                    str(root / f"{name}.train.txt"),
                    str(root / f"{name}.valid.txt"),
                    "--outputs",
                    str(root / f"{name}.train.tok"),
                    str(root / f"{name}.valid.tok"),
                ]
            )
            == 0
        )
        run(
            "fairseq-preprocess",
            "--only-source",
            "--trainpref",
            str(root / f"{name}.train.tok"),
            "--validpref",
            str(root / f"{name}.valid.tok"),
            "--destdir",
            str(root / f"{name}-bin"),
            "--workers",
            "1",
        )
        out[name] = {"model": model, "data": root / f"{name}-bin"}
    return out


def test_tokenized_corpus_keeps_documents_apart(corpora):
    from fairseq.data import Dictionary, data_utils

    root = corpora["root"]
    text = (root / "bert.train.txt").read_text().splitlines()
    tokens = (root / "bert.train.tok").read_text().splitlines()
    assert len(tokens) == len(text)
    assert [i for i, line in enumerate(tokens) if not line] == [i for i, line in enumerate(text) if not line]
    assert any("##" in line for line in tokens)  # "apples" -> "apple ##s": real word pieces
    assert any("▁" in line for line in (root / "albert.train.tok").read_text().splitlines())
    data = corpora["bert"]["data"]
    sentences = data_utils.load_indexed_dataset(str(data / "train"), Dictionary.load(str(data / "dict.txt")))
    breaks = np.flatnonzero(sentences.sizes == 1)  # an empty line binarizes to a lone </s>
    assert len(breaks) == 400 and all(sentences[int(i)].tolist() == [EOS] for i in breaks)


@pytest.fixture(scope="module")
def bert_pretrained(corpora) -> dict:
    save_dir = corpora["root"] / "bert-ckpt"
    log = run(
        "fairseq-train",
        str(corpora["bert"]["data"]),
        "--task",
        "roberta_ext_sentence_pair_mlm",
        "--criterion",
        "roberta_ext_sentence_pair_mlm",
        "--sentence-objective",
        "nsp",
        "--arch",
        "bert_ext_base",
        *PRETRAIN,
        "--dropout",
        "0",
        "--attention-dropout",
        "0",
        "--mask-whole-words",
        "--word-boundaries",
        "wordpiece",
        "--max-update",
        "160",
        "--save-dir",
        str(save_dir),
    )
    return {"log": log, "save_dir": save_dir}


def test_bert_pretrains_with_next_sentence_prediction(corpora, bert_pretrained):
    import roberta_ext

    records = log_records(bert_pretrained["log"])
    falls(records, "mlm_loss", by=0.5)
    falls(records, "sentence_loss", by=0.1)
    assert float(records[-1]["sentence_accuracy"]) > 60, records[-1]

    hub = roberta_ext.from_pretrained(
        str(bert_pretrained["save_dir"]),
        "checkpoint_last.pt",
        str(corpora["bert"]["data"]),
        bpe="bert",
        bpe_vocab_file=str(corpora["bert"]["model"]),
    )
    assert "next_sentence" in hub.model.classification_heads
    pair = hub.encode("p0 apple apple apple .", "p1 apple apples apple .")
    assert hub.predict("next_sentence", pair).shape == (1, 2)


def test_bert_checkpoint_fine_tunes_a_tagger(corpora, bert_pretrained):
    """The documented path: prepare-tagging with the pretraining dictionary, then fine-tuning
    from the pretrained checkpoint (its NSP head is dropped, the token head is new)."""
    from roberta_ext.cli.corpus import prepare_tagging_main

    root = corpora["root"]
    sentences = [line.split() for line in nsp_corpus(60, 5) if line]

    def tag(word):
        return "MARK" if word.startswith("p") else "O" if word == "." else "TOPIC"

    (root / "tags.conll").write_text("".join("".join(f"{w}\t{tag(w)}\n" for w in s) + "\n" for s in sentences))
    assert (
        prepare_tagging_main(
            [
                "--tokenizer",
                "wordpiece",
                "--model",
                str(corpora["bert"]["model"]),
                "--dict",
                str(corpora["bert"]["data"] / "dict.txt"),
                "--train",
                str(root / "tags.conll"),
                "--valid",
                str(root / "tags.conll"),
                "--output-dir",
                str(root / "tags-bin"),
            ]
        )
        == 0
    )
    log = run(
        "fairseq-train",
        str(root / "tags-bin"),
        "--task",
        "roberta_ext_token_classification",
        "--criterion",
        "roberta_ext_token_classification",
        "--arch",
        "bert_ext_base",
        *MODEL,
        *COMMON,
        "--batch-size",
        "16",
        "--lr",
        "1e-3",
        "--max-update",
        "10",
        "--log-interval",
        "5",
        "--save-dir",
        str(root / "tags-ckpt"),
        "--restore-file",
        str(bert_pretrained["save_dir"] / "checkpoint_last.pt"),
        "--reset-optimizer",
        "--reset-dataloader",
        "--reset-meters",
    )
    assert "loaded checkpoint" in log.lower() and "dropping head 'next_sentence'" in log, log[-3000:]
    assert log_records(log) and "accuracy" in log_records(log)[-1], log[-3000:]


def test_albert_pretrains_with_sentence_order_prediction(corpora):
    log = run(
        "fairseq-train",
        str(corpora["albert"]["data"]),
        "--task",
        "roberta_ext_sentence_pair_mlm",
        "--criterion",
        "roberta_ext_sentence_pair_mlm",
        "--sentence-objective",
        "sop",
        "--arch",
        "albert_ext_base",
        *PRETRAIN,
        "--embedding-size",
        "16",
        "--mask-whole-words",
        "--word-boundaries",
        "sentencepiece",
        "--max-update",
        "120",
        "--save-dir",
        str(corpora["root"] / "albert-ckpt"),
    )
    records = log_records(log)
    falls(records, "mlm_loss", by=0.5)
    falls(records, "sentence_loss", by=0.15)
    assert float(records[-1]["sentence_accuracy"]) > 65, records[-1]


def test_mlm_only_with_segments(corpora):
    save_dir = corpora["root"] / "none-ckpt"
    log = run(
        "fairseq-train",
        str(corpora["bert"]["data"]),
        "--task",
        "roberta_ext_sentence_pair_mlm",
        "--criterion",
        "roberta_ext_sentence_pair_mlm",
        "--sentence-objective",
        "none",
        "--arch",
        "bert_ext_base",
        *PRETRAIN,
        "--max-update",
        "10",
        "--save-dir",
        str(save_dir),
    )
    records = log_records(log)
    assert records and all("sentence_loss" not in r and "mlm_loss" in r for r in records), records
    state = load_checkpoint_file(save_dir / "checkpoint_last.pt")["model"]
    assert not any(key.startswith("classification_heads.") for key in state)
