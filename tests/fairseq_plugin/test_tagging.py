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

import logging
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.peers import require

require("fairseq", "the tests run fairseq-train and read fairseq-preprocess output")

from fairseq.criterions import CRITERION_REGISTRY  # (after the peer check)
from fairseq.data import Dictionary, data_utils
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder
from fairseq.logging import metrics
from fairseq.tasks import TASK_REGISTRY

from roberta_ext.cli.corpus import prepare_tagging_main
from roberta_ext.corpus import CorpusError, TokenWriter, prepare_tagging
from roberta_ext.data.tagging import TokenLabels, num_label_classes
from roberta_ext.fairseq_plugin.tagging import (
    TokenClassificationConfig,
    TokenClassificationLoss,
    TokenClassificationLossConfig,
    TokenClassificationTask,
    TokenLabelDataset,
)
from tests.corpus.test_tagging import tagged_sentences, write_conll
from tests.data.test_tagging import Rows, label_dictionary
from tests.fairseq_plugin.test_models import dictionary
from tests.fairseq_plugin.test_sentence_pairs import checkpoint_options, model_options, refuses_stale
from tests.fairseq_plugin.tools import USER_DIR, log_records, run

LOGGER = "roberta_ext.fairseq_plugin.tagging"

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


# ---------------------------------------------------- the task and criterion, without a training run


def write_lines(folder: Path, split: str, lines: list[list[int]]) -> None:
    """``split``.bin/.idx as fairseq-preprocess writes them: each line ends in ``</s>``."""
    folder.mkdir(parents=True, exist_ok=True)
    builder = MMapIndexedDatasetBuilder(str(folder / f"{split}.bin"), dtype=np.int32)
    for line in lines:
        builder.add_item(torch.tensor([*line, 2], dtype=torch.int32))
    builder.finalize(str(folder / f"{split}.idx"))


# Tokens of each line (ids of test_models' 60-symbol dictionary) and their labels (O, ENT, NUM, or None:
# a continuation, <pad>).
LINES = [
    ([10, 11, 12, 13], ["ENT", None, "O", "NUM"]),
    ([14, 15], ["O", "O"]),
    ([16, 17, 18, 19, 20, 21], ["NUM", "O", None, None, "ENT", "O"]),
    ([22, 23, 24], ["O", "ENT", None]),
    ([25], ["ENT"]),
    ([26, 27], ["O", "NUM"]),
    ([28, 29, 30, 31], ["ENT", "O", "O", None]),
    ([32, 33], ["NUM", None]),
]


def tagging_dir(folder: Path, lines=LINES, labels: Dictionary | None = None, splits=("train",)) -> Path:
    """What ``roberta-ext prepare-tagging`` writes: input0/ and label/, each a dictionary and the splits."""
    labels = labels or label_dictionary()
    for name in ("input0", "label"):
        (folder / name).mkdir(parents=True, exist_ok=True)
    dictionary().save(str(folder / "input0" / "dict.txt"))
    labels.save(str(folder / "label" / "dict.txt"))
    for split in splits:
        write_lines(folder / "input0", split, [tokens for tokens, _ in lines])
        write_lines(
            folder / "label",
            split,
            [[labels.pad() if t is None else labels.index(t) for t in tags] for _, tags in lines],
        )
    return folder


def tagging_task(data: Path, **options: object) -> TokenClassificationTask:
    """The task set up as fairseq-train does (``--seed`` 1 unless given)."""
    return TokenClassificationTask.setup_task(TokenClassificationConfig(data=str(data), **{"seed": 1, **options}))


def test_the_task_options_default_to_a_tagger_of_512_positions():
    cfg = TokenClassificationConfig()
    assert (cfg.token_head_name, cfg.max_positions, cfg.no_shuffle) == ("tagger", 512, False)
    assert TASK_REGISTRY["roberta_ext_token_classification"] is TokenClassificationTask
    assert CRITERION_REGISTRY["roberta_ext_token_classification"] is TokenClassificationLoss


def test_setup_reads_both_dictionaries_and_logs_the_labels(tmp_path, caplog):
    labels = Dictionary()
    for k in range(25):
        labels.add_symbol(f"L{k}")
    labels.add_symbol("madeupword0000", n=0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task = tagging_task(tagging_dir(tmp_path, lines=[], labels=labels), max_positions=40)
    first_20 = [f"L{k}" for k in range(20)]
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        f"dictionary: 61 types; 25 labels: {first_20}"
    ]
    assert task.num_labels == 25 and task.label_dictionary is task.target_dictionary
    assert len(task.label_dictionary) == len(labels)  # no <mask> among the labels
    # <mask> appended to the pretrained model's dictionary, as pretraining did.
    assert task.mask_idx == 60 and task.dictionary[60] == "<mask>" and task.source_dictionary is task.dictionary
    assert task.max_positions() == 40


def test_setup_logs_the_few_labels_there_are(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task = tagging_task(tagging_dir(tmp_path))
    assert task.num_labels == 3
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "dictionary: 61 types; 3 labels: ['O', 'ENT', 'NUM']"
    ]


def test_the_data_are_the_pure_examples(tmp_path, caplog):
    data = tagging_dir(tmp_path, splits=("train", "valid"))
    task = tagging_task(data, seed=4)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task.load_dataset("valid")
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == ["loaded 8 sentences of valid"]
    dataset = task.dataset("valid")
    assert type(dataset) is TokenLabelDataset
    labels = task.label_dictionary
    o, ent, num = (labels.index(name) - labels.nspecial for name in ("O", "ENT", "NUM"))
    assert [dataset[i]["source"].tolist() for i in range(8)] == [[0, *tokens, 2] for tokens, _ in LINES]
    assert dataset[0]["target"].tolist() == [-100, ent, -100, o, num, -100]
    assert dataset[4]["target"].tolist() == [-100, ent, -100]
    batch = dataset.collater([dataset[i] for i in range(8)])
    assert batch["net_input"]["src_tokens"][1].tolist() == [0, 14, 15, 2, 1, 1, 1, 1]
    assert batch["nwords"] == 18 and batch["nsentences"] == 8
    # Shuffled by --seed and the epoch, then sorted by size: as TokenLabelDataset orders with that seed.
    for epoch in (1, 2, 3):
        dataset.set_epoch(epoch)
        alike = TokenLabelDataset(
            *(
                data_utils.load_indexed_dataset(str(data / name / "valid"), d)
                for name, d in (("input0", task.dictionary), ("label", labels))
            ),
            label_dictionary=labels,
            num_labels=3,
            bos=0,
            pad=1,
            seed=4,
        )
        alike.set_epoch(epoch)
        assert dataset.ordered_indices().tolist() == alike.ordered_indices().tolist()
    orders = set()
    for epoch in (1, 2, 3, 4):
        dataset.set_epoch(epoch)
        orders.add(tuple(dataset.ordered_indices().tolist()))
    assert len(orders) > 1  # lines of one length come in another order each epoch


def test_without_shuffle_the_data_are_sorted_by_length(tmp_path):
    task = tagging_task(tagging_dir(tmp_path), no_shuffle=True, seed=4)
    task.load_dataset("train")
    dataset = task.dataset("train")
    for epoch in (1, 2):
        dataset.set_epoch(epoch)
        assert dataset.ordered_indices().tolist() == [4, 1, 5, 7, 3, 0, 6, 2]


def test_the_dataset_shuffles_with_seed_1_from_epoch_1_by_default():
    """A TokenLabelDataset built without ``seed`` orders as fairseq's default ``--seed 1`` does, and
    before any ``set_epoch`` as in epoch 1; its messages name no file without ``name``."""
    labels = label_dictionary()
    o = labels.index("O")
    rows = [[10 + i, 2] for i in range(12)]  # lines of one size: the order is the shuffle's
    options = dict(label_dictionary=labels, num_labels=3, bos=0, pad=1)
    plain = TokenLabelDataset(Rows(rows), Rows([[o, 2]] * 12), **options)
    seeded = TokenLabelDataset(Rows(rows), Rows([[o, 2]] * 12), **options, seed=1)
    first = plain.ordered_indices().tolist()
    assert plain.shuffle and first != list(range(12))
    assert first == seeded.ordered_indices().tolist()
    plain.set_epoch(2)
    assert plain.ordered_indices().tolist() != first
    plain.set_epoch(1)
    assert plain.ordered_indices().tolist() == first
    with pytest.raises(ValueError) as error:
        TokenLabelDataset(Rows(rows), Rows([[o, 2]] * 11), **options)
    assert str(error.value) == ": 12 token lines but 11 label lines"


def test_shards_of_a_split_are_combined_only_when_asked(tmp_path):
    """fairseq-train loads the train split with ``combine=True``: ``train``, ``train1``, ... together."""
    data = tagging_dir(tmp_path)
    labels = label_dictionary()
    write_lines(data / "input0", "train1", [[40, 41]])
    write_lines(data / "label", "train1", [[labels.index("NUM"), labels.index("O")]])
    task = tagging_task(data)
    task.load_dataset("train")
    assert len(task.dataset("train")) == len(LINES)
    task.load_dataset("train", combine=True)
    assert len(task.dataset("train")) == len(LINES) + 1
    assert task.dataset("train")[len(LINES)]["source"].tolist() == [0, 40, 41, 2]
    task.load_dataset("train", combine=False)
    assert len(task.dataset("train")) == len(LINES)


def test_a_folder_without_the_label_dictionary_says_what_it_needs(tmp_path):
    data = tagging_dir(tmp_path)
    (data / "label" / "dict.txt").unlink()
    with pytest.raises(FileNotFoundError) as error:
        tagging_task(data)
    assert str(error.value) == (
        f"--task roberta_ext_token_classification: {data / 'label' / 'dict.txt'} does not exist; its data folder "
        "needs input0/ and label/, as roberta-ext prepare-tagging writes them"
    )


def test_raw_text_data_are_read_with_both_dictionaries(tmp_path):
    """``fairseq-preprocess --dataset-impl raw`` keeps the text: tokens are read with the model's dictionary,
    labels (``<pad>`` on continuations) with the label dictionary, to the same examples as binarized data."""
    binarized = tagging_task(tagging_dir(tmp_path / "bin"))
    binarized.load_dataset("train")
    raw = tagging_dir(tmp_path / "raw")
    for name in ("input0", "label"):
        for suffix in (".bin", ".idx"):
            (raw / name / f"train{suffix}").unlink()
    (raw / "input0" / "train").write_text("".join(" ".join(f"w{i - 4}" for i in t) + "\n" for t, _ in LINES))
    (raw / "label" / "train").write_text("".join(" ".join(x or "<pad>" for x in tags) + "\n" for _, tags in LINES))
    task = tagging_task(raw)
    task.load_dataset("train")
    got, want = task.dataset("train"), binarized.dataset("train")
    assert len(got) == len(want) == len(LINES)
    for index in range(len(LINES)):
        assert got[index]["source"].tolist() == want[index]["source"].tolist()
        assert got[index]["target"].tolist() == want[index]["target"].tolist()


def test_bad_data_are_named_by_folder_and_line(tmp_path):
    data = tagging_dir(tmp_path)
    write_lines(data / "label", "train", [[4] * n for n in (4, 2, 5, 3, 1, 2, 4, 2)])
    task = tagging_task(data)
    with pytest.raises(ValueError) as error:
        task.load_dataset("train")
    assert str(error.value) == (
        f"{data}/{{input0,label}}/train: line 3 has 6 tokens but 5 labels (1 lines differ); "
        "every sub-word token needs a label (<pad> for continuations)"
    )


@pytest.mark.parametrize("missing", ["input0", "label"])
def test_a_missing_split_is_named(tmp_path, missing):
    data = tagging_dir(tmp_path)
    for suffix in (".bin", ".idx"):
        (data / missing / f"train{suffix}").rename(data / missing / f"test{suffix}")
    with pytest.raises(FileNotFoundError) as error:
        tagging_task(data).load_dataset("train")
    assert str(error.value) == f"dataset not found: train ({data / missing / 'train'}.bin/.idx)"


@pytest.mark.parametrize("head", [None, "ner"])
def test_the_model_gets_a_token_head_of_the_labels(tmp_path, head):
    options = {} if head is None else {"token_head_name": head}
    task = tagging_task(tagging_dir(tmp_path), max_positions=64, **options)
    model = task.build_model(model_options("bert"))
    assert sorted(model.token_heads) == [head or "tagger"] and model.token_heads[head or "tagger"].num_classes == 3
    assert not model.classification_heads


def test_the_model_is_built_from_a_checkpoints_options_as_fairseq_builds_it(tmp_path):
    task = tagging_task(tagging_dir(tmp_path), max_positions=64)
    model = task.build_model(checkpoint_options(), from_checkpoint=True)
    assert sorted(model.token_heads) == ["tagger"] and model.token_heads["tagger"].num_classes == 3
    refuses_stale(task)


def tagging_batch(tmp_path: Path, **options: object):
    """The task, its model (eval mode: no dropout) and a batch of all its examples."""
    task = tagging_task(tagging_dir(tmp_path), max_positions=64, **options)
    task.load_dataset("train")
    dataset = task.dataset("train")
    torch.manual_seed(0)
    model = task.build_model(model_options("roberta")).eval()
    return task, model, dataset.collater([dataset[i] for i in range(len(dataset))])


@pytest.mark.parametrize("head", [None, "ner"])
def test_the_loss_is_the_cross_entropy_of_the_labelled_tokens(tmp_path, head):
    task, model, batch = tagging_batch(tmp_path, **({} if head is None else {"token_head_name": head}))
    criterion = TokenClassificationLoss(TokenClassificationLossConfig(), task)
    assert criterion.head == (head or "tagger")
    assert criterion.task is task and criterion.padding_idx == task.label_dictionary.pad()  # fairseq's criterion
    loss, sample_size, log = criterion(model, batch)
    logits = model.tag(head or "tagger", model(**batch["net_input"], features_only=True)[0])  # (B, T, 3)
    target = batch["target"]
    labelled = target.ne(-100)
    log_probs = torch.log_softmax(logits[labelled], dim=-1)
    expected = -log_probs.gather(1, target[labelled][:, None]).sum()
    torch.testing.assert_close(loss, expected)
    assert loss.requires_grad and sample_size == 18 == int(labelled.sum())
    correct = int((logits[labelled].argmax(-1) == target[labelled]).sum())
    assert log == {
        "loss": log["loss"],
        "ntokens": batch["ntokens"],
        "nsentences": 8,
        "sample_size": 18,
        "nwords": 18,
        "ncorrect": correct,
    }
    torch.testing.assert_close(log["loss"], loss.detach())
    assert not log["loss"].requires_grad


def test_the_accuracy_counts_labelled_tokens_tagged_right(tmp_path):
    task, model, batch = tagging_batch(tmp_path)
    criterion = TokenClassificationLoss(TokenClassificationLossConfig(), task)
    head = model.token_heads["tagger"]
    target = batch["target"]
    for label in range(3):  # a head that always answers `label`
        bias = torch.full((3,), -20.0)
        bias[label] = 20.0
        with torch.no_grad():
            head.out_proj.bias.copy_(bias)
        _, _, log = criterion(model, batch)
        assert log["ncorrect"] == int(target.eq(label).sum())
    assert [int(target.eq(k).sum()) for k in range(3)] == [9, 5, 4]


def test_a_task_without_a_head_option_trains_the_tagger(tmp_path):
    from tests.fairseq_plugin.test_models import mlm_task

    assert TokenClassificationLoss(TokenClassificationLossConfig(), mlm_task()).head == "tagger"


def test_a_model_without_the_head_is_refused_with_its_heads(tmp_path):
    task, model, batch = tagging_batch(tmp_path, token_head_name="ner")
    other = tagging_task(tagging_dir(tmp_path / "other"), token_head_name="pos")
    model.register_token_head("chunks", 2)
    with pytest.raises(KeyError) as error:
        TokenClassificationLoss(TokenClassificationLossConfig(), other)(model, batch)
    assert error.value.args == (
        "the model has no token head 'pos' (token heads: ['chunks', 'ner']); check --token-head-name",
    )


def reduced(logs: list[dict]) -> dict:
    with metrics.aggregate(new_root=True) as agg:
        TokenClassificationLoss.reduce_metrics(logs)
    return agg.get_smoothed_values()


LOGS = [
    {"loss": 7.654321, "nwords": 6, "ncorrect": 4, "sample_size": 6, "ntokens": 20, "nsentences": 2},
    {"loss": torch.tensor(3.5), "nwords": 3, "ncorrect": 3, "sample_size": 3, "ntokens": 9, "nsentences": 1},
    {"loss": 1.25, "nwords": 1, "ncorrect": 0, "sample_size": 1, "ntokens": 4, "nsentences": 1},
]


def test_metrics_are_bits_per_word_and_the_word_accuracy():
    stats = reduced(LOGS[:2])
    assert stats == {"loss": round((7.654321 + 3.5) / 9 / math.log(2), 3), "accuracy": round(100 * 7 / 9, 1)}
    # One word: the values, undivided.
    assert reduced(LOGS[2:]) == {"loss": round(1.25 / math.log(2), 3), "accuracy": 0.0}
    # No word (a batch of sentences without labels): the loss, no accuracy.
    assert reduced([{"loss": 0.0, "nwords": 0, "ncorrect": 0}]) == {"loss": 0.0}
    assert reduced([{}]) == {"loss": 0.0}


def test_metrics_weigh_each_reduction_by_its_words():
    with metrics.aggregate(new_root=True) as agg:
        for group in (LOGS[:1], LOGS[1:]):
            with metrics.aggregate():
                TokenClassificationLoss.reduce_metrics(group)
    grouped, whole = agg.get_smoothed_values(), reduced(LOGS)
    assert whole == {"loss": round((7.654321 + 3.5 + 1.25) / 10 / math.log(2), 3), "accuracy": 70.0}
    assert grouped["loss"] == pytest.approx(whole["loss"], abs=1e-3) and grouped["accuracy"] == pytest.approx(
        70.0, abs=0.1
    )


def test_tagging_logs_can_be_summed_across_workers():
    assert TokenClassificationLoss.logging_outputs_can_be_summed() is True
    summed = {key: LOGS[0][key] + LOGS[1][key] for key in LOGS[0]}
    assert reduced([summed]) == reduced(LOGS[:2])
