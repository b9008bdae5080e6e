"""Token classification: ``roberta-ext prepare-tagging`` and ``--task token_classification``.

* Reading CoNLL-style files (tabs or columns, ``-DOCSTART-``, errors that name file:line).
* Preparing data with each tokenizer: GPT-2 (words after the first with their leading space),
  WordPiece (a word of several "words" such as ``U.S.``, a word with no token), SentencePiece:
  the label on the first sub-word of each word, ``<pad>`` on the others — the alignment the hub's
  ``tag()`` reads back; failures leave no output folder behind.
* The dataset's checks (misaligned lines, unknown labels).
* Fine-tuning through ``fairseq-train --user-dir`` for ``roberta_ext_base``, ``bert_ext_base`` and
  ``albert_ext_base`` (2 layers x 32) on a synthetic set — capitalised words are ENT, numbers
  NUM, the rest O — where held-out word accuracy beats the majority label by far, and the
  RoBERTa model tags a new sentence through the hub.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("fairseq")

from roberta_ext.corpus import CorpusError  # noqa: E402
from roberta_ext.fairseq_plugin.tagging import IGNORE_INDEX, TokenLabelDataset, num_label_classes  # noqa: E402
from roberta_ext.tokenize_corpus import TokenWriter, prepare_tagging, prepare_tagging_main, read_conll  # noqa: E402
from roberta_ext.tokenizers import GPT2BPE  # noqa: E402
from tests.fairseq_plugin.tools import USER_DIR, log_records, run  # noqa: E402

TINY = ["--encoder-layers", "2", "--encoder-embed-dim", "32", "--encoder-ffn-embed-dim", "64",
        "--encoder-attention-heads", "4", "--max-positions", "64"]
COMMON = ["--user-dir", USER_DIR, "--cpu", "--num-workers", "0", "--seed", "1", "--log-format", "json",
          "--log-interval", "10", "--no-epoch-checkpoints", "--optimizer", "adam", "--adam-betas", "(0.9,0.98)",
          "--batch-size", "32", "--lr", "3e-3", "--max-update", "60"]

NAMES = ["Ada", "Alan", "Grace", "Paris", "London", "Berlin", "Kyoto", "Lima", "Oslo", "Turing", "Hopper", "Nile"]
WORDS = ["the", "went", "to", "saw", "visited", "with", "and", "a", "city", "friend", "river", "near", "in", "of"]


def tagged_sentences(count: int, seed: int) -> list[list[tuple[str, str]]]:
    """Capitalised words are ENT, numbers NUM, other words O."""
    rng = random.Random(seed)
    sentences = []
    for _ in range(count):
        words = []
        for _ in range(rng.randint(4, 10)):
            kind = rng.random()
            if kind < 0.25:
                words.append((rng.choice(NAMES), "ENT"))
            elif kind < 0.4:
                words.append((str(rng.randint(1, 3000)), "NUM"))
            else:
                words.append((rng.choice(WORDS), "O"))
        sentences.append(words)
    return sentences


def write_conll(path: Path, sentences: list[list[tuple[str, str]]]) -> Path:
    path.write_text("".join("".join(f"{w}\t{t}\n" for w, t in s) + "\n" for s in sentences), encoding="utf-8")
    return path


# ------------------------------------------------------------------------------- reading


def test_read_conll_columns_docstart_and_crlf(tmp_path):
    path = tmp_path / "train.conll"
    path.write_bytes(b"-DOCSTART- -X- -X- O\r\n\r\nEU NNP B-NP B-ORG\r\nrejects VBZ B-VP O\r\n\r\n\r\n"
                     b"Ada\tB-PER\nsang\tO\n")
    sentences, docstarts = read_conll(path)
    assert [(s.words, s.labels) for s in sentences] == [(["EU", "rejects"], ["B-ORG", "O"]), (["Ada", "sang"],
                                                                                               ["B-PER", "O"])]
    assert docstarts == 1
    assert sentences[1].where == f"{path}:7"


@pytest.mark.parametrize("content, message", [
    (b"Ada\tB-PER\nalone\n", r"train\.conll:2: expected 'word<TAB>label'"),
    (b"Ada\t<pad>\n", r"train\.conll:1: '<pad>' cannot be a label"),
    (b"Ada\tO\n\nb\xffad\tO\n", r"train\.conll:3: not valid UTF-8"),
    (b"New York\tLOC\n", r"train\.conll:1: the word 'New York' contains whitespace"),
])
def test_read_conll_errors_name_file_and_line(tmp_path, content, message):
    path = tmp_path / "train.conll"
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=message):
        read_conll(path)


# ----------------------------------------------------------------------------- preparing


def test_prepare_tagging_gpt2_tokenizes_words_as_the_hub_does(tmp_path, bpe_files, capsys):
    train = write_conll(tmp_path / "train.conll", [[("Ada", "ENT"), ("visited", "O"), ("Kyoto", "ENT"),
                                                    ("in", "O"), ("1868", "NUM")]] * 3)
    valid = write_conll(tmp_path / "valid.conll", [[("Hopper", "ENT"), ("sailed", "VERB")]])
    out = tmp_path / "ner"
    assert prepare_tagging_main(["--tokenizer", "gpt2", "--encoder-json", str(bpe_files.encoder_json),
                                 "--vocab-bpe", str(bpe_files.vocab_bpe), "--dict", str(bpe_files.dict_txt),
                                 "--train", str(train), "--valid", str(valid), "--output-dir", str(out),
                                 "--text-only"]) == 0
    err = capsys.readouterr().err
    assert "label 'VERB'" in err and "does not occur in train" in err and "fairseq-preprocess" in err
    bpe = GPT2BPE.from_files(bpe_files.encoder_json, bpe_files.vocab_bpe)
    words = ["Ada", "visited", "Kyoto", "in", "1868"]
    expected_tokens, expected_labels = [], []
    for i, (word, label) in enumerate(zip(words, ["ENT", "O", "ENT", "O", "NUM"])):
        ids = bpe.encode(word if i == 0 else f" {word}")  # a word after the first has its leading space
        expected_tokens += [str(t) for t in ids]
        expected_labels += [label] + ["<pad>"] * (len(ids) - 1)
    assert len(expected_tokens) > len(words)  # some words really are several sub-words
    assert (out / "text" / "train.input0").read_text().splitlines()[0].split() == expected_tokens
    assert (out / "text" / "train.label").read_text().splitlines()[0].split() == expected_labels
    # By count in train, then by name; labels only in valid last.
    assert (out / "text" / "label.dict.txt").read_text().splitlines() == ["ENT 6", "O 6", "NUM 3", "VERB 0"]
    assert not (out / "input0").exists()


def test_prepare_tagging_wordpiece_aligns_split_words_and_empty_words(tmp_path):
    from fairseq.data import Dictionary, data_utils

    from roberta_ext.tokenizers.wordpiece import BERT_SPECIAL_TOKENS, write_vocab

    vocab = tmp_path / "vocab.txt"
    write_vocab([*BERT_SPECIAL_TOKENS, "u", "s", ".", "went", "home", "##s"], vocab)
    (tmp_path / "pre").mkdir()  # the pretraining data's dictionary, as fairseq-preprocess writes it
    (tmp_path / "pre" / "dict.txt").write_text("u 2\n. 2\ns 1\nwent 1\nhome 1\n##s 1\n")
    train = write_conll(tmp_path / "train.conll", [[("U.S.", "LOC"), ("went", "O"), ("\x07", "O"),
                                                    ("homes", "O"), ("Zebra", "ANIMAL")]])
    out = tmp_path / "ner"
    stats = prepare_tagging(TokenWriter("wordpiece", model=str(vocab)), tmp_path / "pre" / "dict.txt",
                            {"train": train}, out)
    assert stats.words_without_tokens == 1  # "\x07" is cleaned away: written as <unk>
    tokens = (out / "text" / "train.input0").read_text().split()
    labels = (out / "text" / "train.label").read_text().split()
    # BERT's basic tokenizer splits "U.S." at its punctuation, without "##": only the alignment
    # made here knows that the four tokens are one word.
    assert tokens == ["u", ".", "s", ".", "went", "<unk>", "home", "##s", "<unk>"]
    assert labels == ["LOC", "<pad>", "<pad>", "<pad>", "O", "O", "O", "<pad>", "ANIMAL"]
    labels_dict = Dictionary.load(str(out / "label" / "dict.txt"))
    assert num_label_classes(labels_dict) == 3
    binarized = data_utils.load_indexed_dataset(str(out / "label" / "train"), labels_dict)
    assert binarized[0].tolist() == [labels_dict.index(t) for t in labels] + [labels_dict.eos()]
    assert binarized[0].tolist()[1] == labels_dict.pad()  # <pad> binarizes to the padding index
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".ner.")]  # no temporary folder left


def test_prepare_tagging_sentencepiece(tmp_path):
    from roberta_ext.tokenizers.sentencepiece_tokenizer import train_sentencepiece

    texts = [" ".join(w for w, _ in s) for s in tagged_sentences(200, 0)]
    model = train_sentencepiece(texts, tmp_path / "spiece", vocab_size=60, hard_vocab_limit=False)
    writer = TokenWriter("sentencepiece", model=str(model))
    train = write_conll(tmp_path / "train.conll", tagged_sentences(5, 1))
    (tmp_path / "dict.txt").write_text("".join(f"{p} 1\n" for p in sorted({t for s in texts for t in
                                                                            writer.tokens(s)})))
    stats = prepare_tagging(writer, tmp_path / "dict.txt", {"train": train}, tmp_path / "ner", text_only=True)
    for words, tokens, labels in zip(read_conll(train)[0], (tmp_path / "ner" / "text" / "train.input0").open(),
                                     (tmp_path / "ner" / "text" / "train.label").open()):
        tokens, labels = tokens.split(), labels.split()
        assert len(tokens) == len(labels)
        starts = [i for i, label in enumerate(labels) if label != "<pad>"]
        assert [labels[i] for i in starts] == words.labels
        assert all(tokens[i].startswith("▁") for i in starts)  # each word starts a piece with "▁"
    assert stats.sentences == {"train": 5}


def test_prepare_tagging_leaves_nothing_behind_on_failure(tmp_path, bpe_files):
    train = write_conll(tmp_path / "train.conll", tagged_sentences(3, 0))
    bad = tmp_path / "valid.conll"
    bad.write_text("Ada\tENT\nalone\n")
    writer = TokenWriter("gpt2", encoder_json=str(bpe_files.encoder_json), vocab_bpe=str(bpe_files.vocab_bpe))
    with pytest.raises(CorpusError, match="valid.conll:2"):
        prepare_tagging(writer, bpe_files.dict_txt, {"train": train, "valid": bad}, tmp_path / "ner")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.conll", "valid.conll"]
    (tmp_path / "ner").mkdir()
    (tmp_path / "ner" / "keep.txt").write_text("mine")
    with pytest.raises(CorpusError, match="refusing to overwrite"):
        prepare_tagging(writer, bpe_files.dict_txt, {"train": train}, tmp_path / "ner")
    assert (tmp_path / "ner" / "keep.txt").read_text() == "mine"


# ------------------------------------------------------------------------------- dataset


class Rows:
    """A stand-in for fairseq's indexed dataset."""

    def __init__(self, rows: list[list[int]]) -> None:
        self.rows = [torch.tensor(r) for r in rows]
        self.sizes = np.array([len(r) for r in rows])

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.rows[index]

    def __len__(self) -> int:
        return len(self.rows)


def label_dictionary():
    from fairseq.data import Dictionary

    labels = Dictionary()
    for name in ("O", "ENT", "NUM"):
        labels.add_symbol(name)
    labels.add_symbol("madeupword0000", n=0)
    return labels


def test_dataset_targets_and_checks():
    labels = label_dictionary()
    assert num_label_classes(labels) == 3
    o, ent, pad, eos = labels.index("O"), labels.index("ENT"), labels.pad(), labels.eos()
    tokens = Rows([[10, 11, 12, 2], [13, 2]])
    dataset = TokenLabelDataset(tokens, Rows([[ent, pad, o, eos], [o, eos]]), label_dictionary=labels, num_labels=3,
                                bos=0, pad=1, name="ner/train")
    item = dataset[0]
    assert item["source"].tolist() == [0, 10, 11, 12, 2]
    assert item["target"].tolist() == [IGNORE_INDEX, 1, IGNORE_INDEX, 0, IGNORE_INDEX]
    batch = dataset.collater([dataset[0], dataset[1]])
    assert batch["nwords"] == 3 and batch["target"].shape == batch["net_input"]["src_tokens"].shape
    assert list(dataset.sizes) == [5, 3]

    with pytest.raises(ValueError, match="ner/train: line 2 has 1 tokens but 2 labels"):
        TokenLabelDataset(tokens, Rows([[ent, pad, o, eos], [o, o, eos]]), label_dictionary=labels, num_labels=3,
                          bos=0, pad=1, name="ner/train")
    with pytest.raises(ValueError, match="line 1 has the label '<unk>'"):
        TokenLabelDataset(tokens, Rows([[ent, labels.unk(), o, eos], [o, eos]]), label_dictionary=labels,
                          num_labels=3, bos=0, pad=1, name="ner/train")
    with pytest.raises(ValueError, match="line 2 starts with <pad>"):
        TokenLabelDataset(tokens, Rows([[ent, pad, o, eos], [pad, eos]]), label_dictionary=labels, num_labels=3,
                          bos=0, pad=1, name="ner/train")


# ------------------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def tagging_data(tmp_path_factory, bpe_files) -> dict:
    root = tmp_path_factory.mktemp("tagging")
    train, valid, held_out = tagged_sentences(600, 1), tagged_sentences(100, 2), tagged_sentences(20, 3)
    assert prepare_tagging_main(["--tokenizer", "gpt2", "--encoder-json", str(bpe_files.encoder_json),
                                 "--vocab-bpe", str(bpe_files.vocab_bpe), "--dict", str(bpe_files.dict_txt),
                                 "--train", str(write_conll(root / "train.conll", train)),
                                 "--valid", str(write_conll(root / "valid.conll", valid)),
                                 "--output-dir", str(root / "ner-bin")]) == 0
    majority = max(Counter(t for s in valid for _, t in s).values()) / sum(len(s) for s in valid)
    return {"root": root, "data": root / "ner-bin", "majority": majority, "held_out": held_out}


@pytest.mark.parametrize("arch", ["roberta_ext_base", "bert_ext_base", "albert_ext_base"])
def test_token_classification_beats_the_majority_label(tagging_data, arch, bpe_files):
    save_dir = tagging_data["root"] / arch
    extra = ["--embedding-size", "16"] if arch.startswith("albert") else []
    log = run("fairseq-train", str(tagging_data["data"]), "--task", "token_classification",
              "--criterion", "token_classification", "--arch", arch, *TINY, *extra, *COMMON,
              "--save-dir", str(save_dir))
    train, valid = log_records(log, "train_inner"), log_records(log, "valid")
    print(arch, [float(r["loss"]) for r in train], [float(r["valid_accuracy"]) for r in valid])
    assert float(train[-1]["loss"]) < float(train[0]["loss"]) - 0.5, train
    accuracy = float(valid[-1]["valid_accuracy"]) / 100
    assert accuracy > tagging_data["majority"] + 0.25, (accuracy, tagging_data["majority"])

    if arch == "roberta_ext_base":  # the hub reads the model, label/dict.txt and the head back
        import roberta_ext

        hub = roberta_ext.from_pretrained(str(save_dir), "checkpoint_last.pt", str(tagging_data["data"]),
                                          gpt2_encoder_json=str(bpe_files.encoder_json),
                                          gpt2_vocab_bpe=str(bpe_files.vocab_bpe))
        right = total = 0
        for sentence in tagging_data["held_out"]:
            tagged = hub.tag(" ".join(w for w, _ in sentence))
            assert [w for w, _, _ in tagged] == [w for w, _ in sentence]
            right += sum(label == gold for (_, label, _), (_, gold) in zip(tagged, sentence))
            total += len(sentence)
        assert right / total > tagging_data["majority"] + 0.25, right / total
