"""BERT and ALBERT pretraining: ``--task sentence_pair_mlm`` with next-sentence (NSP) and
sentence-order (SOP) prediction.

* The pair dataset, on in-memory "sentences" whose token ids say where they come from
  (document, sentence, position): the ``<s> A </s> B </s>`` layout and segments, labels about
  50/50, reproducibility from (seed, epoch, index), fresh pairs every epoch, SOP pairs from one
  document in or out of order, NSP negatives from other documents, BERT's pair truncation,
  and the collater's masking (never ``<s>``/``</s>``, whole words).
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

pytest.importorskip("fairseq")

from roberta_ext.checkpoints.safe_load import load_checkpoint_file  # noqa: E402
from roberta_ext.data.masking import BatchMasker, MaskingConfig  # noqa: E402
from roberta_ext.fairseq_plugin.sentence_pairs import (  # noqa: E402
    SentencePairDataset,
    build_pair_chunks,
    piece_word_starts,
    truncated_lengths,
)
from roberta_ext.tokenize_corpus import tokenize_main  # noqa: E402
from tests.fairseq_plugin.tools import USER_DIR, log_records, run  # noqa: E402

MODEL = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
         "--encoder-attention-heads", "4", "--max-positions", "32"]
COMMON = ["--user-dir", USER_DIR, "--cpu", "--num-workers", "0", "--seed", "1", "--log-format", "json",
          "--log-interval", "10", "--no-epoch-checkpoints", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
          "--disable-validation"]
PRETRAIN = [*MODEL, *COMMON, "--tokens-per-sample", "32", "--batch-size", "32", "--lr", "1e-2",
            "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "20"]
BOS, PAD, EOS = 0, 1, 2


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def falls(records: list[dict], key: str, by: float) -> None:
    values = [float(r[key]) for r in records]
    print(key, values)  # shown by pytest -s, and with a failure
    assert len(values) >= 6, values
    assert mean(values[-3:]) < mean(values[:3]) - by, (key, values)


# ------------------------------------------------------------------------ the pair dataset


class Sentences:
    """A stand-in for fairseq's indexed dataset: ``</s>``-terminated rows and their sizes.
    Sentence ``s`` of document ``d`` holds the ids ``1000 * (d + 1) + 10 * s + position``."""

    def __init__(self, docs: list[list[int]]) -> None:
        """``docs[d]`` lists the token counts of document ``d``'s sentences."""
        rows: list[torch.Tensor] = []
        for d, lengths in enumerate(docs):
            if d:
                rows.append(torch.tensor([EOS]))  # an empty line: the document break
            for s, length in enumerate(lengths):
                rows.append(torch.tensor([*(1000 * (d + 1) + 10 * s + p for p in range(length)), EOS]))
        self.set_rows(rows)

    def set_rows(self, rows: list[torch.Tensor]) -> "Sentences":
        self.rows = rows
        self.sizes = np.array([len(r) for r in rows])
        return self

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)


def where(token: int) -> tuple[int, int, int]:
    """(document, sentence, position) of a token of :class:`Sentences`."""
    return token // 1000 - 1, token % 1000 // 10, token % 10


def make_docs(num_docs: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randint(1, 9) for _ in range(rng.randint(1, 6))] for _ in range(num_docs)]


def pairs(objective: str, *, seed: int = 1, tokens_per_sample: int = 40, num_docs: int = 60,
          short_seq_prob: float = 0.1) -> SentencePairDataset:
    sentences = Sentences(make_docs(num_docs))
    return SentencePairDataset(sentences, sentences.sizes, objective=objective, tokens_per_sample=tokens_per_sample,
                               bos=BOS, eos=EOS, pad=PAD, masker=None, short_seq_prob=short_seq_prob, seed=seed)


def split(source: torch.Tensor) -> tuple[list[int], list[int]]:
    """A and B of ``<s> A </s> B </s>``."""
    ids = source.tolist()
    first_eos = ids.index(EOS)
    return ids[1:first_eos], ids[first_eos + 1:-1]


@pytest.mark.parametrize("objective", ["nsp", "sop", "none"])
def test_layout_segments_and_sizes(objective):
    dataset = pairs(objective)
    assert len(dataset) > 60
    for index in range(len(dataset)):
        item = dataset[index]
        source, segments = item["source"], item["segments"]
        a, b = split(source)
        assert source[0] == BOS and source[-1] == EOS and source.tolist().count(EOS) == 2
        assert a and b and BOS not in a + b and EOS not in a + b
        assert segments.tolist() == [0] * (len(a) + 2) + [1] * (len(b) + 1)
        assert len(source) <= dataset.sizes[index] <= 40
        if objective != "nsp" or item["label"] == 0:  # NSP negatives from a short document may be shorter
            assert len(source) == dataset.sizes[index]
        if objective == "none":
            assert item["label"] == 0


def test_chunks_fill_the_budget_and_keep_documents_apart():
    docs = make_docs(50)
    sentences = Sentences(docs)
    chunks = build_pair_chunks(sentences.sizes, max_tokens=20, short_seq_prob=0.0, seed=1)
    lengths = sentences.sizes - 1
    for first, count, tokens, doc in zip(chunks.first_sentence, chunks.num_sentences, chunks.num_tokens,
                                         chunks.document):
        rows = range(first, first + count)
        assert {where(int(sentences[r][0]))[0] for r in rows} == {doc}  # one document, no break inside
        assert tokens == sum(lengths[r] for r in rows)
        last_of_doc = where(int(sentences[first + count - 1][0]))[1] == len(docs[doc]) - 1
        assert tokens >= 20 or last_of_doc  # a chunk ends at the budget or at its document's end
        assert tokens - lengths[first + count - 1] < 20  # ...and not later
    covered = sum(int(c) for c in chunks.num_sentences) + chunks.skipped_sentences
    assert covered == sum(len(d) for d in docs)  # every sentence is in one chunk or counted as skipped


@pytest.mark.parametrize("objective", ["nsp", "sop"])
def test_labels_are_balanced_and_change_with_the_epoch(objective):
    dataset = pairs(objective)
    labels = []
    items = {}
    for epoch in (1, 2, 3):
        dataset.set_epoch(epoch)
        items[epoch] = [dataset[i] for i in range(len(dataset))]
        labels += [item["label"] for item in items[epoch]]
    assert 0.4 < sum(labels) / len(labels) < 0.6
    changed = sum(not torch.equal(x["source"], y["source"]) or x["label"] != y["label"]
                  for x, y in zip(items[1], items[2]))
    assert changed > len(dataset) // 3  # new splits, labels and negatives every epoch
    assert [x["label"] for x in items[1]] != [x["label"] for x in items[2]]


def test_pairs_are_reproducible_from_seed_epoch_and_index():
    one, again, other_seed = pairs("nsp"), pairs("nsp"), pairs("nsp", seed=2)
    for dataset in (one, again, other_seed):
        dataset.set_epoch(3)
    order = list(range(len(one)))
    random.Random(0).shuffle(order)
    for index in order:  # any access order gives the same pairs
        x, y = one[index], again[index]
        assert torch.equal(x["source"], y["source"]) and x["label"] == y["label"]
    assert any(one[i]["label"] != other_seed[i]["label"] for i in range(len(one)))


def test_sop_pairs_come_from_one_document_in_or_out_of_order():
    dataset = pairs("sop")
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        for index in range(len(dataset)):
            item = dataset[index]
            a, b = split(item["source"])
            docs = {where(t)[0] for t in a + b}
            assert docs == {int(dataset.chunks.document[index])}
            first, second = (a, b) if item["label"] == 0 else (b, a)
            # Document order: every token of the first segment comes before every token of the second.
            assert max(where(t)[1:] for t in first) < min(where(t)[1:] for t in second)


def test_nsp_positives_continue_a_and_negatives_come_from_other_documents():
    dataset = pairs("nsp")
    negatives = 0
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        for index in range(len(dataset)):
            item = dataset[index]
            a, b = split(item["source"])
            doc = int(dataset.chunks.document[index])
            assert {where(t)[0] for t in a} == {doc}
            if item["label"] == 0:
                assert {where(t)[0] for t in b} == {doc}
                assert max(where(t)[1:] for t in a) < min(where(t)[1:] for t in b)
            else:
                negatives += 1
                (other,) = {where(t)[0] for t in b}  # one other document, a contiguous stretch of it
                assert other != doc
                positions = [where(t)[1:] for t in b]
                assert positions == sorted(positions)
    assert negatives > len(dataset) // 2


def test_truncation_is_berts_truncate_seq_pair():
    def reference(len_a: int, len_b: int, limit: int) -> tuple[int, int]:
        while len_a + len_b > limit:  # BERT's loop: trim the longer one, B on ties
            if len_a > len_b:
                len_a -= 1
            else:
                len_b -= 1
        return len_a, len_b

    for len_a in range(25):
        for len_b in range(25):
            for limit in range(50):
                assert truncated_lengths(len_a, len_b, limit) == reference(len_a, len_b, limit)
    dataset = pairs("nsp", tokens_per_sample=8, num_docs=30)
    assert all(len(dataset[i]["source"]) <= 8 for i in range(len(dataset)))


def test_bad_inputs_are_refused():
    one_document = Sentences([[3, 4, 5]])
    with pytest.raises(ValueError, match="at least two documents"):
        SentencePairDataset(one_document, one_document.sizes, objective="nsp", tokens_per_sample=20, bos=BOS, eos=EOS,
                            pad=PAD, masker=None)
    with pytest.raises(ValueError, match="objective"):
        SentencePairDataset(one_document, one_document.sizes, objective="mlm", tokens_per_sample=20, bos=BOS,
                            eos=EOS, pad=PAD, masker=None)
    with pytest.raises(ValueError, match="two tokens"):
        build_pair_chunks(one_document.sizes, max_tokens=1, short_seq_prob=0.0, seed=1)


def test_collater_masks_whole_words_but_never_bos_or_eos():
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for symbol in ["the", "un", "##break", "##able", "stone", "▁x"]:
        dictionary.add_symbol(symbol)
    mask = dictionary.add_symbol("<mask>")
    starts = piece_word_starts(dictionary, "wordpiece")
    assert [starts[dictionary.index(s)].item() for s in ["the", "un", "##break", "##able"]] == [True, True, False,
                                                                                                     False]
    assert piece_word_starts(dictionary, "sentencepiece")[dictionary.index("▁x")]
    assert not piece_word_starts(dictionary, "sentencepiece")[dictionary.index("stone")]

    rng = random.Random(0)
    word = [dictionary.index(s) for s in ["un", "##break", "##able"]]
    rows = []
    for _ in range(60):
        tokens = []
        for _ in range(rng.randint(2, 8)):
            tokens += word if rng.random() < 0.5 else [dictionary.index(rng.choice(["the", "stone"]))]
        rows.append(torch.tensor([*tokens, EOS]))
    blank = torch.tensor([EOS])  # two sentences per document
    sentences = Sentences([]).set_rows([r for i, row in enumerate(rows) for r in ([row, blank] if i % 2 else [row])])
    masker = BatchMasker(MaskingConfig(mask_prob=0.3, mask_whole_words=True), vocab_size=len(dictionary),
                         mask_idx=mask, pad_idx=PAD, special_ids=[*range(dictionary.nspecial), mask],
                         word_starts=starts, seed=1)
    dataset = SentencePairDataset(sentences, sentences.sizes, objective="sop", tokens_per_sample=64, bos=BOS, eos=EOS,
                                  pad=PAD, masker=masker)
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    src, target = batch["net_input"]["src_tokens"], batch["target"]
    assert set(batch) >= {"net_input", "target", "sentence_target", "ntokens", "nsentences", "id"}
    assert batch["net_input"]["segment_labels"].shape == src.shape
    specials = src.eq(BOS) | src.eq(EOS) | src.eq(PAD)
    original = torch.where(target.ne(PAD), target, src)
    assert torch.equal(specials, original.eq(BOS) | original.eq(EOS) | original.eq(PAD))  # specials untouched
    assert not target[specials].ne(PAD).any()
    assert target.ne(PAD).sum() > 20
    # Whole words: "un ##break ##able" is a target all together or not at all.
    for row_target, row in zip(target, original):
        ids = row.tolist()
        for i in range(len(ids) - 2):
            if ids[i:i + 3] == word:
                chosen = row_target[i:i + 3].ne(PAD).tolist()
                assert chosen in ([True] * 3, [False] * 3)


# ------------------------------------------------------------------ roberta-ext tokenize


def test_tokenize_keeps_lines_maps_unknowns_and_names_bad_lines(tmp_path, capsys):
    from roberta_ext.tokenizers.wordpiece import BERT_SPECIAL_TOKENS, write_vocab

    vocab = tmp_path / "vocab.txt"
    write_vocab([*BERT_SPECIAL_TOKENS, "apple", "##s", "river", "."], vocab)
    (tmp_path / "a.txt").write_bytes(b"Apples river.\n\n   \n\x07\nzebra apple\r\nriver")
    (tmp_path / "b.txt").write_bytes(b"river\nriv\xffer\n")
    args = ["--tokenizer", "wordpiece", "--model", str(vocab), "--no-progress"]
    assert tokenize_main([*args, "--inputs", str(tmp_path / "a.txt"), "--outputs", str(tmp_path / "a.tok")]) == 0
    # Empty and blank lines stay empty (document breaks); [UNK] is fairseq's <unk>; a line of
    # control characters has no token and becomes <unk>, not a document break.
    assert (tmp_path / "a.tok").read_text() == "apple ##s river .\n\n\n<unk>\n<unk> apple\nriver\n"
    assert "1 lines had text but no token" in capsys.readouterr().err
    assert tokenize_main([*args, "--inputs", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"),
                          "--outputs", str(tmp_path / "a2.tok"), str(tmp_path / "b.tok")]) == 1
    assert f"{tmp_path / 'b.txt'}:2: not valid UTF-8" in capsys.readouterr().err
    assert not (tmp_path / "a2.tok").exists() and not (tmp_path / "b.tok").exists()  # all or nothing
    with pytest.raises(SystemExit):
        tokenize_main([*args, "--inputs", str(tmp_path / "a.txt")])  # --outputs is required


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
            model = train_sentencepiece([line for line in train if line], root / "spiece", vocab_size=40,
                                        hard_vocab_limit=False)
            kind = "sentencepiece"
        assert tokenize_main(["--tokenizer", kind, "--model", str(model), "--no-progress",
                              "--inputs", str(root / f"{name}.train.txt"), str(root / f"{name}.valid.txt"),
                              "--outputs", str(root / f"{name}.train.tok"), str(root / f"{name}.valid.tok")]) == 0
        run("fairseq-preprocess", "--only-source", "--trainpref", str(root / f"{name}.train.tok"),
            "--validpref", str(root / f"{name}.valid.tok"), "--destdir", str(root / f"{name}-bin"), "--workers", "1")
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
    log = run("fairseq-train", str(corpora["bert"]["data"]), "--task", "sentence_pair_mlm",
              "--criterion", "sentence_pair_mlm", "--sentence-objective", "nsp", "--arch", "bert_ext_base", *PRETRAIN,
              "--dropout", "0", "--attention-dropout", "0", "--mask-whole-words", "--word-boundaries", "wordpiece",
              "--max-update", "160", "--save-dir", str(save_dir))
    return {"log": log, "save_dir": save_dir}


def test_bert_pretrains_with_next_sentence_prediction(corpora, bert_pretrained):
    import roberta_ext

    records = log_records(bert_pretrained["log"])
    falls(records, "mlm_loss", by=0.5)
    falls(records, "sentence_loss", by=0.1)
    assert float(records[-1]["sentence_accuracy"]) > 60, records[-1]

    hub = roberta_ext.from_pretrained(str(bert_pretrained["save_dir"]), "checkpoint_last.pt",
                                      str(corpora["bert"]["data"]), bpe="bert",
                                      bpe_vocab_file=str(corpora["bert"]["model"]))
    assert "next_sentence" in hub.model.classification_heads
    pair = hub.encode("p0 apple apple apple .", "p1 apple apples apple .")
    assert hub.predict("next_sentence", pair).shape == (1, 2)


def test_bert_checkpoint_fine_tunes_a_tagger(corpora, bert_pretrained):
    """The documented path: prepare-tagging with the pretraining dictionary, then fine-tuning
    from the pretrained checkpoint (its NSP head is dropped, the token head is new)."""
    from roberta_ext.tokenize_corpus import prepare_tagging_main

    root = corpora["root"]
    sentences = [line.split() for line in nsp_corpus(60, 5) if line]
    tag = lambda word: "MARK" if word.startswith("p") else "O" if word == "." else "TOPIC"  # noqa: E731
    (root / "tags.conll").write_text("".join("".join(f"{w}\t{tag(w)}\n" for w in s) + "\n" for s in sentences))
    assert prepare_tagging_main(["--tokenizer", "wordpiece", "--model", str(corpora["bert"]["model"]),
                                 "--dict", str(corpora["bert"]["data"] / "dict.txt"), "--train",
                                 str(root / "tags.conll"), "--valid", str(root / "tags.conll"),
                                 "--output-dir", str(root / "tags-bin")]) == 0
    log = run("fairseq-train", str(root / "tags-bin"), "--task", "token_classification", "--criterion",
              "token_classification", "--arch", "bert_ext_base", *MODEL, *COMMON, "--batch-size", "16",
              "--lr", "1e-3", "--max-update", "10", "--log-interval", "5", "--save-dir", str(root / "tags-ckpt"),
              "--restore-file", str(bert_pretrained["save_dir"] / "checkpoint_last.pt"),
              "--reset-optimizer", "--reset-dataloader", "--reset-meters")
    assert "loaded checkpoint" in log.lower() and "dropping head 'next_sentence'" in log, log[-3000:]
    assert log_records(log) and "accuracy" in log_records(log)[-1], log[-3000:]


def test_albert_pretrains_with_sentence_order_prediction(corpora):
    log = run("fairseq-train", str(corpora["albert"]["data"]), "--task", "sentence_pair_mlm",
              "--criterion", "sentence_pair_mlm", "--sentence-objective", "sop", "--arch", "albert_ext_base", *PRETRAIN,
              "--embedding-size", "16", "--mask-whole-words", "--word-boundaries", "sentencepiece",
              "--max-update", "120", "--save-dir", str(corpora["root"] / "albert-ckpt"))
    records = log_records(log)
    falls(records, "mlm_loss", by=0.5)
    falls(records, "sentence_loss", by=0.15)
    assert float(records[-1]["sentence_accuracy"]) > 65, records[-1]


def test_mlm_only_with_segments(corpora):
    save_dir = corpora["root"] / "none-ckpt"
    log = run("fairseq-train", str(corpora["bert"]["data"]), "--task", "sentence_pair_mlm",
              "--criterion", "sentence_pair_mlm", "--sentence-objective", "none", "--arch", "bert_ext_base", *PRETRAIN,
              "--max-update", "10", "--save-dir", str(save_dir))
    records = log_records(log)
    assert records and all("sentence_loss" not in r and "mlm_loss" in r for r in records), records
    state = load_checkpoint_file(save_dir / "checkpoint_last.pt")["model"]
    assert not any(key.startswith("classification_heads.") for key in state)
