"""Token classification: ``roberta-ext prepare-tagging`` and ``--task roberta_ext_token_classification``.

* Reading CoNLL-style files (tabs or columns, ``-DOCSTART-``, errors that name file:line).
* Preparing data with each tokenizer: GPT-2 (words after the first with their leading space),
  WordPiece (a word of several "words" such as ``U.S.``, a word with no token), SentencePiece:
  the label on the first sub-word of each word, ``<pad>`` on the others — the alignment the hub's
  ``tag()`` reads back; failures leave no output folder behind.
* The fairseq dataset: the examples of :mod:`roberta_ext.data.tagging` (whose checks on misaligned
  lines and unknown labels are tested without fairseq in tests/data/test_tagging.py) in fairseq's order.
* Fine-tuning through ``fairseq-train --user-dir`` for ``roberta_ext_base``, ``bert_ext_base`` and
  ``albert_ext_base`` (2 layers x 32) on a synthetic set — capitalised words are ENT, numbers
  NUM, the rest O — where held-out word accuracy beats the majority label by far, and the
  RoBERTa model tags a new sentence through the hub.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from tests.peers import require

require("fairseq", "the tests run fairseq-train and read fairseq-preprocess output")

from roberta_ext.cli.corpus import prepare_tagging_main
from roberta_ext.corpus import CorpusError, TokenWriter, prepare_tagging
from roberta_ext.data.tagging import TokenLabels, num_label_classes
from roberta_ext.fairseq_plugin.tagging import TokenLabelDataset
from tests.corpus.test_tagging import tagged_sentences, write_conll
from tests.data.test_tagging import Rows, label_dictionary
from tests.fairseq_plugin.tools import USER_DIR, log_records, run

TINY = [
    "--encoder-layers",
    "2",
    "--encoder-embed-dim",
    "32",
    "--encoder-ffn-embed-dim",
    "64",
    "--encoder-attention-heads",
    "4",
    "--max-positions",
    "64",
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
    "--batch-size",
    "32",
    "--lr",
    "3e-3",
    "--max-update",
    "60",
]

# ----------------------------------------------------------------------------- preparing


def test_prepare_tagging_wordpiece_aligns_split_words_and_empty_words(tmp_path):
    from fairseq.data import Dictionary, data_utils

    from roberta_ext.tokenizers.wordpiece import BERT_SPECIAL_TOKENS, write_vocab

    vocab = tmp_path / "vocab.txt"
    write_vocab([*BERT_SPECIAL_TOKENS, "u", "s", ".", "went", "home", "##s"], vocab)
    (tmp_path / "pre").mkdir()  # the pretraining data's dictionary, as fairseq-preprocess writes it
    (tmp_path / "pre" / "dict.txt").write_text("u 2\n. 2\ns 1\nwent 1\nhome 1\n##s 1\n")
    train = write_conll(
        tmp_path / "train.conll", [[("U.S.", "LOC"), ("went", "O"), ("\x07", "O"), ("homes", "O"), ("Zebra", "ANIMAL")]]
    )
    out = tmp_path / "ner"
    stats = prepare_tagging(
        TokenWriter("wordpiece", model=str(vocab)), tmp_path / "pre" / "dict.txt", {"train": train}, out
    )
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


def test_the_fairseq_dataset_is_the_pure_one_in_fairseqs_order():
    labels = label_dictionary()
    o, ent, pad, eos = labels.index("O"), labels.index("ENT"), labels.pad(), labels.eos()
    tokens = Rows([[10, 11, 12, 2], [13, 2], [14, 15, 2]])
    label_rows = Rows([[ent, pad, o, eos], [o, eos], [ent, o, eos]])
    options = dict(label_dictionary=labels, num_labels=3, bos=0, pad=1, name="ner/train")
    pure = TokenLabels(tokens, label_rows, **options)
    dataset = TokenLabelDataset(tokens, label_rows, **options, shuffle=False)
    for index in range(3):
        assert torch.equal(dataset[index]["target"], pure[index]["target"])
    samples = [dataset[i] for i in range(3)]
    assert torch.equal(dataset.collater(samples)["target"], pure.collater(samples)["target"])
    assert dataset.ordered_indices().tolist() == [1, 2, 0]  # by size, without --shuffle
    shuffled = TokenLabelDataset(tokens, label_rows, **options, seed=5)
    assert sorted(shuffled.ordered_indices().tolist()) == [0, 1, 2] and shuffled.num_tokens(0) == 5


# ------------------------------------------------------------------------------ training


@pytest.fixture(scope="module")
def tagging_data(tmp_path_factory, bpe_files) -> dict:
    root = tmp_path_factory.mktemp("tagging")
    train, valid, held_out = tagged_sentences(600, 1), tagged_sentences(100, 2), tagged_sentences(20, 3)
    assert (
        prepare_tagging_main(
            [
                "--tokenizer",
                "gpt2",
                "--encoder-json",
                str(bpe_files.encoder_json),
                "--vocab-bpe",
                str(bpe_files.vocab_bpe),
                "--dict",
                str(bpe_files.dict_txt),
                "--train",
                str(write_conll(root / "train.conll", train)),
                "--valid",
                str(write_conll(root / "valid.conll", valid)),
                "--output-dir",
                str(root / "ner-bin"),
            ]
        )
        == 0
    )
    majority = max(Counter(t for s in valid for _, t in s).values()) / sum(len(s) for s in valid)
    return {"root": root, "data": root / "ner-bin", "majority": majority, "held_out": held_out}


@pytest.mark.parametrize("arch", ["roberta_ext_base", "bert_ext_base", "albert_ext_base"])
def test_token_classification_beats_the_majority_label(tagging_data, arch, bpe_files):
    save_dir = tagging_data["root"] / arch
    extra = ["--embedding-size", "16"] if arch.startswith("albert") else []
    log = run(
        "fairseq-train",
        str(tagging_data["data"]),
        "--task",
        "roberta_ext_token_classification",
        "--criterion",
        "roberta_ext_token_classification",
        "--arch",
        arch,
        *TINY,
        *extra,
        *COMMON,
        "--save-dir",
        str(save_dir),
    )
    train, valid = log_records(log, "train_inner"), log_records(log, "valid")
    print(arch, [float(r["loss"]) for r in train], [float(r["valid_accuracy"]) for r in valid])
    assert float(train[-1]["loss"]) < float(train[0]["loss"]) - 0.5, train
    accuracy = float(valid[-1]["valid_accuracy"]) / 100
    assert accuracy > tagging_data["majority"] + 0.25, (accuracy, tagging_data["majority"])

    if arch == "roberta_ext_base":  # the hub reads the model, label/dict.txt and the head back
        import roberta_ext

        hub = roberta_ext.from_pretrained(
            str(save_dir),
            "checkpoint_last.pt",
            str(tagging_data["data"]),
            gpt2_encoder_json=str(bpe_files.encoder_json),
            gpt2_vocab_bpe=str(bpe_files.vocab_bpe),
        )
        right = total = 0
        for sentence in tagging_data["held_out"]:
            tagged = hub.tag(" ".join(w for w, _ in sentence))
            assert [w for w, _, _ in tagged] == [w for w, _ in sentence]
            right += sum(label == gold for (_, label, _), (_, gold) in zip(tagged, sentence))
            total += len(sentence)
        assert right / total > tagging_data["majority"] + 0.25, right / total
