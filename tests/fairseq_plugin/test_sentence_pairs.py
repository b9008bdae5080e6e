"""``--task roberta_ext_sentence_pair_mlm`` and ``--criterion roberta_ext_sentence_pair_mlm`` without a
training run: the task set up from tiny fairseq-binarized documents the tests write (what
``fairseq-preprocess --only-source`` writes for one sentence per line, an empty line between
documents), its data (the pure :class:`~roberta_ext.data.sentence_pairs.SentencePairs` with the task's
masker, whole words by each ``--word-boundaries`` style, DATA's directories in turn by epoch), the model
it builds with its sentence head, and the loss fairseq-train minimises against fairseq's own
``masked_lm`` and ``sentence_prediction`` criteria on the same model and batch (BERT's objective: mean
MLM loss plus weight times mean sentence loss), and the metrics it logs against the formulas the module
documents."""

from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from tests.peers import require

require("fairseq", "the task and criterion are fairseq's")

from fairseq.criterions import CRITERION_REGISTRY  # (after the peer check)
from fairseq.criterions.masked_lm import MaskedLmConfig, MaskedLmLoss
from fairseq.criterions.sentence_prediction import SentencePredictionConfig, SentencePredictionCriterion
from fairseq.data import Dictionary, data_utils
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder
from fairseq.logging import metrics
from fairseq.tasks import TASK_REGISTRY

import roberta_ext.fairseq_plugin  # noqa: F401  (registers the models, tasks and criteria)
from roberta_ext.data.sentence_pairs import SentencePairs
from roberta_ext.data.word_starts import gpt2_word_starts, piece_word_starts
from roberta_ext.fairseq_plugin.sentence_pairs import (
    SentencePairDataset,
    SentencePairMLMConfig,
    SentencePairMLMLoss,
    SentencePairMLMLossConfig,
    SentencePairMLMTask,
)
from tests.bpe_fixtures import build_bpe_files
from tests.fairseq_plugin.test_models import args_of, dictionary

LOGGER = "roberta_ext.fairseq_plugin.sentence_pairs"
BOS, PAD, EOS = 0, 1, 2

# Documents of sentences (token ids of the 60-symbol dictionary of test_models, </s> excluded).
DOCS = [
    [[4, 5, 6], [7, 8], [9, 10, 11, 12], [13, 14]],
    [[15, 16, 17, 18, 19], [20, 21], [22, 23, 24]],
    [[25, 26], [27, 28, 29], [30, 31], [32, 33, 34, 35], [36, 37]],
    [[38, 39, 40, 41], [42, 43, 44]],
    [[45, 46, 47], [48, 49], [50, 51, 52, 53, 54], [55, 56]],
]


def write_split(folder: Path, split: str, docs: list[list[list[int]]]) -> None:
    """``split``.bin/.idx as fairseq-preprocess writes them: each sentence ends in ``</s>``, the empty
    line between two documents is a lone ``</s>``."""
    builder = MMapIndexedDatasetBuilder(str(folder / f"{split}.bin"), dtype=np.int32)
    for number, doc in enumerate(docs):
        if number:
            builder.add_item(torch.tensor([EOS], dtype=torch.int32))
        for sentence in doc:
            builder.add_item(torch.tensor([*sentence, EOS], dtype=torch.int32))
    builder.finalize(str(folder / f"{split}.idx"))


def data_dir(folder: Path, docs: list[list[list[int]]] = DOCS, symbols: Dictionary | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (symbols or dictionary()).save(str(folder / "dict.txt"))
    write_split(folder, "train", docs)
    return folder


def set_up(data: Path | str, **options: object) -> SentencePairMLMTask:
    """The task set up as fairseq-train does (``--seed`` 1 unless given)."""
    return SentencePairMLMTask.setup_task(SentencePairMLMConfig(data=str(data), **{"seed": 1, **options}))


def loaded(data: Path | str, split: str = "train", epoch: int = 1, **options: object) -> SentencePairDataset:
    task = set_up(data, **options)
    task.load_dataset(split, epoch=epoch)
    return task.dataset(split)


def pure_pairs(folder: Path, task: SentencePairMLMTask, word_starts: torch.Tensor | None = None) -> SentencePairs:
    """The pairs the task should make of ``folder``'s train split: the pure dataset with the task's
    options and a masker of the task's masking options."""
    sentences = data_utils.load_indexed_dataset(str(folder / "train"), task.dictionary)
    cfg = task.cfg
    return SentencePairs(
        sentences,
        sentences.sizes,
        objective=str(cfg.sentence_objective),
        tokens_per_sample=cfg.tokens_per_sample,
        bos=BOS,
        eos=EOS,
        pad=PAD,
        masker=task.batch_masker(word_starts),
        short_seq_prob=cfg.short_seq_prob,
        seed=cfg.seed,
    )


def assert_same_batches(dataset: SentencePairDataset, expected: SentencePairs, epochs=(1, 2)) -> None:
    assert len(dataset) == len(expected) and np.array_equal(dataset.sizes, expected.sizes)
    for epoch in epochs:
        dataset.set_epoch(epoch)
        expected.set_epoch(epoch)
        indices = list(range(len(dataset)))
        got, want = dataset.collater([dataset[i] for i in indices]), expected.collater([expected[i] for i in indices])
        assert sorted(got) == sorted(want)
        for key in ("id", "target", "sentence_target"):
            assert torch.equal(got[key], want[key]), key
        for key in ("src_tokens", "segment_labels", "src_lengths"):
            assert torch.equal(got["net_input"][key], want["net_input"][key]), key
        assert (got["nsentences"], got["ntokens"]) == (want["nsentences"], want["ntokens"])


# ------------------------------------------------------------------------------------ the task


def test_the_options_default_to_berts(tmp_path):
    cfg = SentencePairMLMConfig()
    assert str(cfg.sentence_objective) == "nsp" and cfg.tokens_per_sample == 512 and cfg.short_seq_prob == 0.1
    assert (cfg.mask_prob, cfg.leave_unmasked_prob, cfg.random_token_prob) == (0.15, 0.1, 0.1)
    assert cfg.freq_weighted_replacement is False and cfg.mask_whole_words is False and cfg.word_boundaries is None
    assert cfg.reuse_dataloader is False
    assert SentencePairMLMLossConfig().sentence_loss_weight == 1.0
    assert TASK_REGISTRY["roberta_ext_sentence_pair_mlm"] is SentencePairMLMTask
    assert CRITERION_REGISTRY["roberta_ext_sentence_pair_mlm"] is SentencePairMLMLoss


def test_setup_reads_the_dictionary_and_adds_the_mask(tmp_path, caplog):
    data = data_dir(tmp_path)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task = set_up(data, tokens_per_sample=16)
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == ["dictionary: 60 types"]
    assert task.mask_idx == 60 and task.dictionary[60] == "<mask>" and len(task.dictionary) == 61
    assert task.source_dictionary is task.dictionary and task.max_positions() == 16
    # The dictionary of the first of DATA's directories.
    other = data_dir(tmp_path / "other", symbols=dictionary(40))
    assert len(set_up(f"{other}:{data}").dictionary) == 41


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tokens_per_sample": 4}, "--tokens-per-sample must be at least 5 (<s> A </s> B </s>), got 4"),
        (
            {"mask_whole_words": True},
            "--mask-whole-words needs --word-boundaries {wordpiece,sentencepiece,gpt2}: "
            "how the tokens of DATA mark the start of a word",
        ),
    ],
    ids=["too-short", "whole-words-without-boundaries"],
)
def test_setup_refuses_options_it_cannot_train_with(tmp_path, options, message):
    with pytest.raises(ValueError) as error:
        set_up(data_dir(tmp_path), **options)
    assert str(error.value) == message


def test_five_tokens_per_sample_are_enough(tmp_path):
    dataset = loaded(data_dir(tmp_path), tokens_per_sample=5)
    assert set(dataset.sizes.tolist()) <= {4, 5} and len(dataset) > len(DOCS)


@pytest.mark.parametrize("objective", ["nsp", "sop", "none"])
def test_the_data_are_the_pure_pairs_with_the_tasks_options_and_masker(tmp_path, objective):
    data = data_dir(tmp_path)
    options = dict(sentence_objective=objective, tokens_per_sample=9, short_seq_prob=0.9, seed=7, mask_prob=0.3)
    task = set_up(data, **options)
    task.load_dataset("train")
    dataset = task.dataset("train")
    assert type(dataset) is SentencePairDataset
    expected = pure_pairs(data, task)
    assert_same_batches(dataset, expected)
    # The options do matter: another seed, short_seq_prob or mask_prob makes other batches.
    for change in ({"seed": 8}, {"short_seq_prob": 0.0}, {"mask_prob": 0.15}):
        with pytest.raises(AssertionError):
            assert_same_batches(dataset, pure_pairs(data, set_up(data, **{**options, **change})), epochs=(1,))
    assert dataset.chunks.doc_first_sentence.tolist() == [0, 5, 9, 15, 18]
    batch = dataset.collater([dataset[i] for i in range(len(dataset))])
    assert bool(batch["target"].ne(PAD).any())  # masked, by the task's masker
    labels = set(batch["sentence_target"].tolist())
    assert labels == ({0} if objective == "none" else {0, 1})


def test_loading_logs_what_was_made(tmp_path, caplog):
    data = data_dir(tmp_path)
    task = set_up(data, tokens_per_sample=9, short_seq_prob=0.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        task.load_dataset("train")
    dataset = task.dataset("train")
    mean = float(dataset.sizes.mean())
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER] == [
        ("INFO", f"{data / 'train'}: {len(dataset)} examples from 5 documents, mean length {mean:.1f} tokens")
    ]


def test_loading_warns_of_one_token_sentences_in_no_example(tmp_path, caplog):
    # A one-token sentence after a chunk that is full, at the end of its document, and a document
    # of one one-token sentence: in no example.
    docs = [[[4, 5, 6, 7, 8, 9], [10]], [[11]], [[12, 13], [14, 15, 16]]]
    data = data_dir(tmp_path, docs)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        dataset = loaded(data, tokens_per_sample=9, short_seq_prob=0.0, sentence_objective="sop")
    assert dataset.chunks.skipped_sentences == 2
    warnings = [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
    assert warnings == [f"{data / 'train'}: 2 one-token sentences alone at the end of a document are in no example"]


def test_loading_warns_of_nothing_when_every_sentence_is_used(tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger=LOGGER):
        loaded(data_dir(tmp_path), tokens_per_sample=9)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_missing_split_is_named(tmp_path):
    data = data_dir(tmp_path)
    task = set_up(data)
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("valid")
    assert str(error.value) == f"dataset not found: valid ({data / 'valid'}.bin/.idx)"


def test_data_without_a_pair_is_refused(tmp_path):
    data = data_dir(tmp_path, [[[4]], [[5]], [[6]]])
    task = set_up(data, sentence_objective="none")
    with pytest.raises(ValueError) as error:
        task.load_dataset("train")
    assert str(error.value) == f"{data / 'train'}: no sentence pairs could be made (no document has two tokens)"


def test_the_epochs_take_the_data_directories_in_turn(tmp_path):
    folders = [data_dir(tmp_path / name, DOCS[:count]) for name, count in (("a", 5), ("b", 2), ("c", 3))]
    alone = [len(loaded(folder, tokens_per_sample=9, short_seq_prob=0.0)) for folder in folders]
    assert len(set(alone)) == 3
    data = ":".join(str(folder) for folder in folders)
    sizes = {
        epoch: len(loaded(data, epoch=epoch, tokens_per_sample=9, short_seq_prob=0.0)) for epoch in (1, 2, 3, 4, 5)
    }
    assert sizes == {1: alone[0], 2: alone[1], 3: alone[2], 4: alone[0], 5: alone[1]}
    task = set_up(data, tokens_per_sample=9, short_seq_prob=0.0)
    task.load_dataset("train")  # as fairseq-validate and the hub load a split: epoch 1 by default
    assert len(task.dataset("train")) == alone[0]


def test_shards_of_a_split_are_combined_only_when_asked(tmp_path):
    """fairseq-train loads the train split with ``combine=True``: ``train``, ``train1``, ... together."""
    data = data_dir(tmp_path)
    write_split(data, "train1", DOCS[:2])
    task = set_up(data, tokens_per_sample=9, short_seq_prob=0.0)
    lines = {"train": 22, "train1": 8}  # sentences and the empty lines between documents
    task.load_dataset("train")
    assert len(task.dataset("train").sentences) == lines["train"]
    task.load_dataset("train", combine=True)
    assert len(task.dataset("train").sentences) == lines["train"] + lines["train1"]
    assert len(task.dataset("train")) > len(loaded(data, tokens_per_sample=9, short_seq_prob=0.0))
    task.load_dataset("train", combine=False)
    assert len(task.dataset("train").sentences) == lines["train"]


def test_raw_text_data_are_read_with_the_dictionary(tmp_path):
    """``fairseq-preprocess --dataset-impl raw`` keeps the text: the task reads it with its dictionary
    (an empty line is a lone ``</s>``), to the same pairs as the binarized data."""
    options = dict(tokens_per_sample=9, short_seq_prob=0.5, mask_prob=0.3)
    binarized = data_dir(tmp_path / "bin")
    raw = tmp_path / "raw"
    raw.mkdir()
    dictionary().save(str(raw / "dict.txt"))
    lines = [" ".join(f"w{i - 4}" for i in sentence) for doc in DOCS for sentence in [*doc, []]][:-1]
    (raw / "train").write_text("\n".join(lines) + "\n", "utf-8")
    task = set_up(raw, **options)
    task.load_dataset("train")
    assert_same_batches(task.dataset("train"), pure_pairs(binarized, set_up(binarized, **options)))


# -------------------------------------------------------------------------------- whole words

WORD_SYMBOLS = ["un", "##able", "##ly", "▁the", "cat", "▁sat", "##s", "on", "▁mat", "##ting", "dog", "##gy"]


def word_dictionary() -> Dictionary:
    d = Dictionary()
    for symbol in WORD_SYMBOLS * 2:
        d.add_symbol(symbol)
    return d


def word_docs(count: int) -> list[list[list[int]]]:
    rng = np.random.default_rng(0)
    first = 4
    return [
        [rng.integers(first, first + len(WORD_SYMBOLS), int(rng.integers(3, 7))).tolist() for _ in range(3)]
        for _ in range(count)
    ]


@pytest.mark.parametrize("style", ["wordpiece", "sentencepiece"])
def test_whole_words_are_those_of_the_boundary_style(tmp_path, style):
    data = data_dir(tmp_path, word_docs(6), symbols=word_dictionary())
    options = dict(tokens_per_sample=12, mask_whole_words=True, word_boundaries=style, mask_prob=0.4, seed=3)
    task = set_up(data, **options)
    task.load_dataset("train")
    dataset = task.dataset("train")
    assert_same_batches(dataset, pure_pairs(data, task, piece_word_starts(task.dictionary, style)))
    # The style matters: the other style's words are masked otherwise.
    other = "sentencepiece" if style == "wordpiece" else "wordpiece"
    unlike = pure_pairs(data, task, piece_word_starts(task.dictionary, other))
    with pytest.raises(AssertionError):
        assert_same_batches(dataset, unlike)


def gpt2_docs(symbols: Dictionary, count: int) -> list[list[list[int]]]:
    rng = np.random.default_rng(1)
    ids = np.arange(symbols.nspecial, min(len(symbols), 400))
    return [[rng.choice(ids, int(rng.integers(3, 7))).tolist() for _ in range(3)] for _ in range(count)]


def test_gpt2_whole_words_read_the_bpe_files_of_the_epochs_directory(tmp_path):
    bpe = tmp_path / "bpe"
    files = build_bpe_files(bpe)
    symbols = Dictionary.load(str(files.dict_txt))
    docs = gpt2_docs(symbols, 6)
    without = data_dir(tmp_path / "a", docs, symbols)
    with_files = data_dir(tmp_path / "b", docs, symbols)
    build_bpe_files(with_files)
    options = dict(tokens_per_sample=12, mask_whole_words=True, word_boundaries="gpt2", mask_prob=0.4, seed=3)
    task = set_up(f"{without}:{with_files}", **options)
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("train", epoch=1)
    assert str(error.value) == (
        "--word-boundaries gpt2 reads GPT-2's BPE files from DATA: "
        f"{without / 'encoder.json'}, {without / 'vocab.bpe'} missing"
    )
    task.load_dataset("train", epoch=2)
    starts = gpt2_word_starts(task.dictionary, str(files.encoder_json), str(files.vocab_bpe))
    assert not bool(starts.all()) and bool(starts.any())
    assert_same_batches(task.dataset("train"), pure_pairs(with_files, task, starts))
    # Only what is missing is named.
    (without / "vocab.bpe").write_bytes(files.vocab_bpe.read_bytes())
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("train", epoch=3)
    assert str(error.value) == (
        f"--word-boundaries gpt2 reads GPT-2's BPE files from DATA: {without / 'encoder.json'} missing"
    )


# ------------------------------------------------------------------------------------ the model


def model_options(family: str) -> argparse.Namespace:
    """fairseq's parsed options of ``family``'s tiny preset under its ``<family>_ext_base`` architecture."""
    return argparse.Namespace(**vars(args_of(family)), arch=f"{family}_ext_base")


STALE = "an_option_of_older_versions"


def checkpoint_options(family: str = "bert") -> DictConfig:
    """A checkpoint's model options as fairseq hands them to ``build_model`` (a ``DictConfig``), with
    one the model no longer has (``STALE``): fairseq's loaders pass ``from_checkpoint=True`` to drop
    it, and ``build_model`` refuses it otherwise."""
    sizes = {"encoder_layers": 1, "encoder_embed_dim": 16, "encoder_ffn_embed_dim": 32, "encoder_attention_heads": 2}
    segments = {"type_vocab_size": 2} if family == "bert" else {}
    return OmegaConf.create(
        {"_name": "roberta_ext", "family": family, **sizes, **segments, "max_positions": 64, STALE: 1}
    )


def refuses_stale(task: object) -> None:
    with pytest.raises(ConfigKeyError, match=f"Key '{STALE}' not in '"):
        task.build_model(checkpoint_options())  # type: ignore[attr-defined]


def test_the_model_is_built_from_a_checkpoints_options_as_fairseq_builds_it(tmp_path):
    task = set_up(data_dir(tmp_path), tokens_per_sample=16)
    model = task.build_model(checkpoint_options(), from_checkpoint=True)
    assert sorted(model.classification_heads) == ["next_sentence"] and model.cfg.type_vocab_size == 2
    refuses_stale(task)


@pytest.mark.parametrize(
    ("objective", "heads"),
    [("nsp", ["next_sentence"]), ("sop", ["sentence_order"]), ("none", [])],
)
def test_the_model_gets_the_objectives_sentence_head(tmp_path, caplog, objective, heads):
    task = set_up(data_dir(tmp_path), sentence_objective=objective, tokens_per_sample=16)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        model = task.build_model(model_options("bert"))
    assert sorted(model.classification_heads) == heads
    assert [head.num_classes for head in model.classification_heads.values()] == [2] * len(heads)
    assert model.cfg.type_vocab_size == 2
    assert not [r for r in caplog.records if r.name == LOGGER]


def test_a_model_without_segment_embeddings_is_warned_of(tmp_path, caplog):
    task = set_up(data_dir(tmp_path), tokens_per_sample=16)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        model = task.build_model(model_options("roberta"))
    assert model.cfg.type_vocab_size == 0 and sorted(model.classification_heads) == ["next_sentence"]
    assert [(r.levelname, r.getMessage()) for r in caplog.records if r.name == LOGGER] == [
        (
            "WARNING",
            "the model has no segment embeddings (type_vocab_size=0): segment_labels are ignored; "
            "use a bert_ext_* or albert_ext_* architecture, or --type-vocab-size 2",
        )
    ]


def test_a_model_without_a_config_is_warned_of_too(tmp_path, caplog):
    """fairseq's own RoBERTa (``--arch roberta_base``) has no ``cfg`` and no segment embeddings."""
    task = set_up(data_dir(tmp_path), tokens_per_sample=16)
    fairseqs = argparse.Namespace(
        arch="roberta_base",
        encoder_layers=1,
        encoder_embed_dim=16,
        encoder_ffn_embed_dim=32,
        encoder_attention_heads=2,
        max_positions=64,
    )
    with caplog.at_level(logging.INFO, logger=LOGGER):
        model = task.build_model(fairseqs)
    assert not hasattr(model, "cfg") and sorted(model.classification_heads) == ["next_sentence"]
    assert [r.getMessage() for r in caplog.records if r.name == LOGGER] == [
        "the model has no segment embeddings (type_vocab_size=0): segment_labels are ignored; "
        "use a bert_ext_* or albert_ext_* architecture, or --type-vocab-size 2"
    ]


# --------------------------------------------------------------------------------- the criterion


def task_model_batch(tmp_path: Path, objective: str = "nsp", family: str = "bert", **options: object):
    """The task, its model (eval mode: no dropout) and a batch of all its examples."""
    task = set_up(data_dir(tmp_path), sentence_objective=objective, tokens_per_sample=9, mask_prob=0.3, **options)
    task.load_dataset("train")
    dataset = task.dataset("train")
    torch.manual_seed(0)
    model = task.build_model(model_options(family)).eval()
    return task, model, dataset.collater([dataset[i] for i in range(len(dataset))])


def fairseqs_losses(task, model, batch, head: str) -> tuple[torch.Tensor, torch.Tensor, dict]:
    """The summed masked-LM loss of fairseq's ``masked_lm`` criterion and the summed loss and log of its
    ``sentence_prediction`` criterion with ``head``, on the same model and batch."""
    mlm, masked, _ = MaskedLmLoss(MaskedLmConfig(), task)(model, batch)
    assert int(masked) == int(batch["target"].ne(PAD).sum())
    # (fairseq's sentence-level tasks give it their label dictionary; these labels are 0 and 1)
    labels = SimpleNamespace(target_dictionary=None, label_dictionary=None)
    criterion = SentencePredictionCriterion(SentencePredictionConfig(classification_head_name=head), labels)
    sentence, count, log = criterion(model, {**batch, "target": batch["sentence_target"]})
    assert count == batch["nsentences"]
    return mlm, sentence, log


@pytest.mark.parametrize(("objective", "head"), [("nsp", "next_sentence"), ("sop", "sentence_order")])
@pytest.mark.parametrize("weight", [None, 0.25], ids=["default-weight", "weight-0.25"])
def test_the_loss_is_mean_mlm_plus_weight_times_mean_sentence_loss(tmp_path, objective, head, weight):
    task, model, batch = task_model_batch(tmp_path, objective)
    config = SentencePairMLMLossConfig() if weight is None else SentencePairMLMLossConfig(sentence_loss_weight=weight)
    criterion = SentencePairMLMLoss(config, task)
    assert criterion.head == head and criterion.padding_idx == PAD
    loss, sample_size, log = criterion(model, batch)
    mlm, sentence, fairseq_log = fairseqs_losses(task, model, batch, head)
    masked, sentences = int(batch["target"].ne(PAD).sum()), batch["nsentences"]
    assert masked > sentences > 0
    lam = 1.0 if weight is None else weight
    # Divided by sample_size (the masked tokens), as fairseq's trainer does: BERT's objective.
    torch.testing.assert_close(loss / sample_size, mlm / masked + lam * sentence / sentences)
    assert sample_size == masked and loss.requires_grad
    assert sorted(log) == sorted(
        ["ntokens", "nsentences", "sample_size", "mlm_loss", "loss", "sentence_loss", "sentence_ncorrect"]
        + ["sentence_count"]
    )
    torch.testing.assert_close(log["mlm_loss"], mlm.detach())
    torch.testing.assert_close(log["sentence_loss"], sentence.detach())
    torch.testing.assert_close(log["loss"], loss.detach())
    assert not (log["mlm_loss"].requires_grad or log["sentence_loss"].requires_grad or log["loss"].requires_grad)
    assert log["sentence_ncorrect"] == int(fairseq_log["ncorrect"])
    assert (log["ntokens"], log["nsentences"], log["sample_size"], log["sentence_count"]) == (
        batch["ntokens"],
        sentences,
        masked,
        sentences,
    )


def test_the_sentence_accuracy_counts_the_right_answers(tmp_path):
    task, model, batch = task_model_batch(tmp_path)
    criterion = SentencePairMLMLoss(SentencePairMLMLossConfig(), task)
    head = model.classification_heads["next_sentence"]
    targets = batch["sentence_target"]
    for bias in ([-9.0, 9.0], [9.0, -9.0]):  # always 1, then always 0
        with torch.no_grad():
            head.out_proj.bias.copy_(torch.tensor(bias))
        _, _, log = criterion(model, batch)
        answer = int(bias[1] > 0)
        assert log["sentence_ncorrect"] == int(targets.eq(answer).sum())
    assert 0 < int(targets.sum()) < len(targets)


def test_a_batch_without_masked_tokens_still_trains_the_sentence_head(tmp_path):
    task, model, batch = task_model_batch(tmp_path)
    batch = {**batch, "target": torch.full_like(batch["target"], PAD)}
    loss, sample_size, log = SentencePairMLMLoss(SentencePairMLMLossConfig(sentence_loss_weight=3.0), task)(
        model, batch
    )
    _, sentence, _ = fairseqs_losses(
        task, model, {**batch, "target": batch["net_input"]["src_tokens"]}, "next_sentence"
    )
    assert sample_size == 0 and log["sample_size"] == 0
    assert float(log["mlm_loss"]) == 0.0 and loss.requires_grad
    # fairseq's trainer divides by max(sample_size, 1): the mean sentence loss, weighted.
    torch.testing.assert_close(loss, 3.0 * sentence / batch["nsentences"])
    loss.backward()
    assert model.classification_heads["next_sentence"].out_proj.weight.grad.abs().sum() > 0


def test_without_a_sentence_objective_the_loss_is_the_masked_lm_loss(tmp_path):
    task, model, batch = task_model_batch(tmp_path, "none")
    criterion = SentencePairMLMLoss(SentencePairMLMLossConfig(sentence_loss_weight=5.0), task)
    assert criterion.head is None
    loss, sample_size, log = criterion(model, batch)
    mlm, masked, _ = MaskedLmLoss(MaskedLmConfig(), task)(model, batch)
    torch.testing.assert_close(loss, mlm)
    assert sample_size == int(masked) > 0
    assert sorted(log) == ["loss", "mlm_loss", "nsentences", "ntokens", "sample_size"]


def test_a_task_without_a_sentence_objective_option_has_no_sentence_loss():
    from tests.fairseq_plugin.test_models import mlm_task

    assert SentencePairMLMLoss(SentencePairMLMLossConfig(), mlm_task()).head is None


def test_a_model_without_the_sentence_head_is_refused_with_its_heads(tmp_path):
    task, model, batch = task_model_batch(tmp_path, "none")
    model.register_classification_head("other", num_classes=3)
    model.register_classification_head("another", num_classes=2)
    nsp_task = set_up(data_dir(tmp_path / "nsp"), tokens_per_sample=9)
    with pytest.raises(KeyError) as error:
        SentencePairMLMLoss(SentencePairMLMLossConfig(), nsp_task)(model, batch)
    assert error.value.args == (
        "the model has no 'next_sentence' head (heads: ['another', 'other']); "
        "it is registered by --task roberta_ext_sentence_pair_mlm",
    )


# ------------------------------------------------------------------------------- the metrics


def reduced(logs: list[dict]) -> dict:
    with metrics.aggregate(new_root=True) as agg:
        SentencePairMLMLoss.reduce_metrics(logs)
    return agg.get_smoothed_values()


LOGS = [
    {"loss": 20.123456, "mlm_loss": 15.654321, "sentence_loss": 2.2222, "sentence_ncorrect": 2, "sentence_count": 3,
     "sample_size": 9, "ntokens": 40, "nsentences": 3},
    {"loss": torch.tensor(9.5), "mlm_loss": torch.tensor(7.25), "sentence_loss": torch.tensor(1.1),
     "sentence_ncorrect": 2, "sentence_count": 4, "sample_size": 5, "ntokens": 30, "nsentences": 4},
    {"loss": 3.0, "mlm_loss": 3.0, "sample_size": 2, "ntokens": 9, "nsentences": 1},
]  # fmt: skip


def test_metrics_follow_the_documented_formulas():
    stats = reduced(LOGS[:2])
    bits = math.log(2)
    mlm = (15.654321 + 7.25) / 14 / bits
    assert stats["loss"] == round((20.123456 + 9.5) / 14 / bits, 3)  # bits per masked token
    assert stats["mlm_loss"] == round(mlm, 3)
    assert stats["ppl"] == round(2**mlm, 2)  # of the unrounded loss
    assert stats["sentence_loss"] == round((2.2222 + 1.1) / 7 / bits, 3)  # bits per sentence
    assert stats["sentence_accuracy"] == round(100 * 4 / 7, 1)  # 57.1
    assert list(stats) == ["loss", "mlm_loss", "sentence_loss", "sentence_accuracy", "ppl"]


def test_metrics_weigh_each_reduction_by_its_own_counts():
    """Logs reduced in groups (as fairseq-train's valid_step reduces each batch) average as one reduction
    of all: the losses weighted by masked tokens, the sentence metrics by sentences."""
    with metrics.aggregate(new_root=True) as agg:
        for group in (LOGS[:1], LOGS[1:]):
            with metrics.aggregate():
                SentencePairMLMLoss.reduce_metrics(group)
    grouped, whole = agg.get_smoothed_values(), reduced(LOGS)
    bits = math.log(2)
    assert whole["loss"] == round((20.123456 + 9.5 + 3.0) / 16 / bits, 3)
    assert whole["sentence_loss"] == round((2.2222 + 1.1) / 7 / bits, 3)
    assert whole["sentence_accuracy"] == round(100 * 4 / 7, 1)
    for key in ("loss", "mlm_loss", "sentence_loss"):
        assert grouped[key] == pytest.approx(whole[key], abs=1e-3), key
    assert grouped["sentence_accuracy"] == pytest.approx(whole["sentence_accuracy"], abs=0.1)


def test_without_sentence_counts_only_the_masked_lm_is_logged():
    stats = reduced(LOGS[2:])
    assert stats == {
        "loss": round(3.0 / 2 / math.log(2), 3),
        "mlm_loss": round(3.0 / 2 / math.log(2), 3),
        "ppl": round(2 ** (1.5 / math.log(2)), 2),
    }
    assert reduced([{}]) == {"loss": 0.0, "mlm_loss": 0.0, "ppl": 1.0}
    # A sample size of one: the sums, undivided.
    one = reduced([{"loss": 0.5, "mlm_loss": 0.25, "sample_size": 1, "sentence_loss": 0.75, "sentence_count": 1}])
    bits = math.log(2)
    assert (one["loss"], one["mlm_loss"], one["sentence_loss"]) == (
        round(0.5 / bits, 3),
        round(0.25 / bits, 3),
        round(0.75 / bits, 3),
    )
    assert one["sentence_accuracy"] == 0.0


def test_logs_can_be_summed_across_workers():
    assert SentencePairMLMLoss.logging_outputs_can_be_summed() is True
    summed = {key: LOGS[0][key] + LOGS[1][key] for key in LOGS[0]}
    assert reduced([summed]) == reduced(LOGS[:2])
