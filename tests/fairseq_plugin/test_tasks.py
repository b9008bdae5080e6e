"""``roberta_ext_mlm``'s data pipeline in process: blocks, the ``<s>`` it prepends, and the size
filter fairseq's trainer applies (``--skip-invalid-size-inputs-valid-test`` and training's own
skipping) — a block the model cannot take must never reach it."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.peers import require

require("fairseq", "the task is fairseq's")

from fairseq import options, tasks
from fairseq.data import Dictionary, data_utils
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

from roberta_ext.data.masking import BatchMasker, MaskingConfig
from roberta_ext.data.word_starts import gpt2_word_starts
from roberta_ext.fairseq_plugin.tasks import (
    RobertaExtClassificationTask,
    RobertaExtMLMConfig,
    RobertaExtMLMTask,
    document_starts,
)
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel
from roberta_ext.tokenizers.gpt2_bpe import bytes_to_unicode

TOKENS_PER_SAMPLE = 8


def binarize(directory: Path, sentences: list[list[str]]) -> Path:
    """What fairseq-preprocess writes for ``valid``: dict.txt and valid.bin/.idx, each
    sentence ending in ``</s>``."""
    dictionary = Dictionary()
    for sentence in sentences:
        for word in sentence:
            dictionary.add_symbol(word)
    dictionary.save(str(directory / "dict.txt"))
    builder = MMapIndexedDatasetBuilder(str(directory / "valid.bin"), dtype=np.int32)
    for sentence in sentences:
        builder.add_item(torch.tensor([dictionary.index(w) for w in sentence] + [dictionary.eos()], dtype=torch.int32))
    builder.finalize(str(directory / "valid.idx"))
    return directory


@pytest.mark.parametrize("break_mode", ["complete", "eos"])
def test_size_filter_counts_the_prepended_bos(tmp_path, break_mode):
    """Issue 15: with --sample-break-mode complete, a sentence of exactly --tokens-per-sample
    tokens (``</s>`` included) becomes a block that ``<s>`` makes one longer than the position
    table; the filter saw the block before ``<s>`` and let it through (IndexError in
    ``embed_positions`` during training)."""
    # Words per sentence; each gets </s>. 7 words make a block of 8 (too long once <s> is in
    # front), 6 words one that fits exactly.
    lengths = [3, TOKENS_PER_SAMPLE - 1, TOKENS_PER_SAMPLE - 2, 5, TOKENS_PER_SAMPLE + 2, 2]
    sentences = [[f"w{i % 5}" for i in range(n)] for n in lengths]
    data = binarize(tmp_path, sentences)
    cfg = RobertaExtMLMConfig(data=str(data), tokens_per_sample=TOKENS_PER_SAMPLE, sample_break_mode=break_mode, seed=1)
    task = RobertaExtMLMTask.setup_task(cfg)
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    sizes = {i: len(dataset[i]["source"]) for i in range(len(dataset))}
    assert max(sizes.values()) > TOKENS_PER_SAMPLE  # the corpus does hold blocks too long for the model
    assert all(dataset[i]["source"][0] == task.dictionary.bos() for i in sizes)

    model = RobertaModel(preset("tiny", vocab_size=len(task.dictionary), max_positions=TOKENS_PER_SAMPLE))
    kept = task.filter_indices_by_size(
        dataset.ordered_indices(), dataset, max_positions=model.max_positions(), ignore_invalid_inputs=True
    )
    assert sorted(kept.tolist()) == sorted(i for i, size in sizes.items() if size <= TOKENS_PER_SAMPLE)
    batch = dataset.collater([dataset[int(i)] for i in kept])
    features, _ = model(batch["net_input"]["src_tokens"], features_only=True)  # every kept block fits
    assert features.shape[1] == TOKENS_PER_SAMPLE  # the exact fit is kept
    with pytest.raises(Exception, match=f"max_positions={TOKENS_PER_SAMPLE}"):
        task.filter_indices_by_size(
            dataset.ordered_indices(), dataset, max_positions=TOKENS_PER_SAMPLE, ignore_invalid_inputs=False
        )


@pytest.mark.parametrize("family", ["tiny", "modernbert-tiny"])
def test_pack_documents_gives_each_line_of_a_block_its_own_attention(tmp_path, family):
    """``--pack-documents``: the batch carries where each line (document) of a block starts, read
    before masking; the model attends and positions each alone, so a block's features are its
    documents' features one by one (RoBERTa's learned positions and ModernBERT's rotary ones)."""
    lengths = [3, 5, 2, 6, 4, 1, 7]
    sentences = [[f"w{(i * 7 + k) % 11}" for k in range(n)] for i, n in enumerate(lengths)]
    data = binarize(tmp_path, sentences)
    common = dict(data=str(data), tokens_per_sample=24, sample_break_mode="complete", seed=1, mask_prob=0.3)
    packed = RobertaExtMLMTask.setup_task(RobertaExtMLMConfig(pack_documents=True, **common))
    plain = RobertaExtMLMTask.setup_task(RobertaExtMLMConfig(**common))
    for task in (packed, plain):
        task.load_dataset("valid")
    samples = [packed.dataset("valid")[i] for i in range(len(packed.dataset("valid")))]
    batch = packed.dataset("valid").collater(samples)
    assert "document_starts" not in plain.dataset("valid").collater(samples)["net_input"]
    tokens, starts = batch["net_input"]["src_tokens"], batch["net_input"]["document_starts"]
    eos, pad = packed.dictionary.eos(), packed.dictionary.pad()
    originals = [sample["source"] for sample in samples]
    assert starts.any() and int(starts.sum()) == sum(int(row[:-1].eq(eos).sum()) for row in originals)

    torch.manual_seed(0)
    model = RobertaModel(preset(family, vocab_size=len(packed.dictionary), max_positions=24)).eval()
    with torch.no_grad():
        features = model(tokens, features_only=True, document_starts=starts)[0]
        for row, source in enumerate(originals):
            ends = [0, *(i + 1 for i in source.eq(eos).nonzero().flatten().tolist())]
            for begin, end in zip(ends, ends[1:]):
                alone = model(tokens[row : row + 1, begin:end], features_only=True)[0][0]
                torch.testing.assert_close(features[row, begin:end], alone, atol=2e-5, rtol=1e-4)
    assert tokens.ne(pad).sum() == batch["ntokens"]


def test_pack_documents_refuses_complete_doc_rows(tmp_path):
    """``complete_doc`` rows are one document of several lines (fairseq ends a document at an empty
    line); ``--pack-documents`` would attend each of its lines alone, so the task refuses the pair
    and names the mode that packs documents."""
    data = binarize(tmp_path, [["w1", "w2"], ["w3"]])
    cfg = RobertaExtMLMConfig(data=str(data), tokens_per_sample=16, sample_break_mode="complete_doc", seed=1)
    RobertaExtMLMTask.setup_task(cfg)  # without --pack-documents: fairseq's complete_doc rows
    refusal = "complete_doc makes each row one document .* use --sample-break-mode complete"
    with pytest.raises(ValueError, match=refusal):
        RobertaExtMLMTask.setup_task(dataclasses.replace(cfg, pack_documents=True))


# -- The task against fairseq's masked_lm on the same data (no training run) ------------------------------------

WORDS = [f"w{i}" for i in range(10)]
# Lines of 1 to 12 words: with --tokens-per-sample 8 some are longer than a block.
LINES = [[WORDS[(7 * i + 3 * k) % 10] for k in range(1 + (5 * i) % 12)] for i in range(17)]
OTHER_LINES = [[WORDS[(i + k) % 10] for k in range(1 + (3 * i) % 9)] for i in range(9)]


def parsed(task: str, data: object, *argv: str) -> object:
    """fairseq-train's options for ``task`` on ``data`` (every default as the command gives it);
    blocks of 8 tokens for the masked-LM tasks."""
    blocks = ["--tokens-per-sample", "8"] if task in ("roberta_ext_mlm", "masked_lm") else []
    parser = options.get_training_parser()
    return options.parse_args_and_arch(
        parser, [str(data), "--task", task, "--arch", "roberta_ext_base", *blocks, *argv]
    )


def both(data: object, *argv: str, fairseq_seed: int | None = None) -> tuple:
    """The plugin's roberta_ext_mlm and fairseq's masked_lm (unmasked: ``--skip-masking``) set up by
    fairseq's ``tasks.setup_task`` from the same options."""
    ours = tasks.setup_task(parsed("roberta_ext_mlm", data, *argv))
    theirs_argv = [*argv, "--skip-masking", *(["--seed", str(fairseq_seed)] if fairseq_seed is not None else [])]
    return ours, tasks.setup_task(parsed("masked_lm", data, *theirs_argv))


def three_folders(tmp_path: Path) -> str:
    """DATA of three folders (used round-robin by epoch) of one dictionary; the first also holds
    ``valid1`` (what ``combine`` adds)."""
    first, second, third = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    for folder in (first, second, third):
        folder.mkdir()
    binarize(first, LINES)
    dictionary = Dictionary.load(str(first / "dict.txt"))
    splits = ((first, "valid1", OTHER_LINES), (second, "valid", OTHER_LINES[::-1]), (third, "valid", LINES[::2]))
    for folder, split, lines in splits:
        (folder / "dict.txt").write_bytes((first / "dict.txt").read_bytes())
        write_split(folder / split, dictionary, lines)
    return os.pathsep.join(map(str, (first, second, third)))


def write_split(prefix: Path, dictionary: Dictionary, lines: list[list[str]]) -> None:
    builder = MMapIndexedDatasetBuilder(f"{prefix}.bin", dtype=np.int32)
    for line in lines:
        builder.add_item(torch.tensor([dictionary.index(w) for w in line] + [dictionary.eos()], dtype=torch.int32))
    builder.finalize(f"{prefix}.idx")


def blocks(dataset) -> list[list[int]]:
    """Each example of a loaded split, unmasked: the plugin's ``source``, fairseq's ``src_tokens``."""
    items = [dataset[i] for i in range(len(dataset))]
    return [(item["source"] if "source" in item else item["net_input.src_tokens"]).tolist() for item in items]


BLOCK_OPTIONS = {
    "none": [],
    "complete": ["--sample-break-mode", "complete"],
    "eos truncated": ["--sample-break-mode", "eos", "--shorten-method", "truncate"],
    "eos cropped": [
        "--sample-break-mode",
        "eos",
        "--shorten-method",
        "random_crop",
        "--seed",
        "4",
        "--tokens-per-sample",
        "5",
    ],
    "cropped in valid": [
        "--sample-break-mode",
        "eos",
        "--shorten-method",
        "random_crop",
        "--shorten-data-split-list",
        "valid",
    ],
    "not in train": [
        "--sample-break-mode",
        "eos",
        "--shorten-method",
        "truncate",
        "--shorten-data-split-list",
        "train",
    ],
}


@pytest.mark.parametrize("argv", BLOCK_OPTIONS.values(), ids=list(BLOCK_OPTIONS))
def test_blocks_are_fairseqs_masked_lm_for_every_epoch_folder_and_combine(tmp_path, argv):
    """The blocks (``<s>`` in front), their sizes and the folder each epoch reads are those of
    fairseq's ``masked_lm`` with the same options: break modes, shortening (and the splits it
    applies to, its seed), ``combine`` (``valid1`` after ``valid``), the defaults of ``load_dataset``."""
    data = three_folders(tmp_path)
    ours, theirs = both(data, *argv)
    for kwargs in ({}, {"epoch": 2}, {"epoch": 3}, {"epoch": 4, "combine": True}, {"epoch": 1, "combine": True}):
        ours.load_dataset("valid", **kwargs)
        theirs.load_dataset("valid", **kwargs)
        ours_blocks = blocks(ours.dataset("valid"))
        assert ours_blocks == blocks(theirs.dataset("valid")), kwargs
        assert ours.dataset("valid").sizes.tolist() == [len(block) for block in ours_blocks]
        sizes = [ours.dataset("valid").num_tokens(i) for i in range(len(ours_blocks))]
        assert sizes == [theirs.dataset("valid").num_tokens(i) for i in range(len(ours_blocks))]
    assert max(ours.dataset("valid").sizes) > 1


def test_text_data_is_read_with_the_tasks_dictionary(tmp_path):
    """A split that is a text file (fairseq's ``raw`` dataset) is encoded with the dictionary, as
    fairseq's ``masked_lm`` reads it."""
    binarize(tmp_path, LINES)
    for suffix in (".bin", ".idx"):
        (tmp_path / f"valid{suffix}").unlink()
    (tmp_path / "valid").write_text("".join(" ".join(line) + "\n" for line in LINES[:5]))
    ours, theirs = both(tmp_path, "--sample-break-mode", "eos")
    for task in (ours, theirs):
        task.load_dataset("valid")
    assert blocks(ours.dataset("valid")) == blocks(theirs.dataset("valid"))
    assert len(ours.dataset("valid")) == 5


def test_the_order_is_fairseqs_shuffle_then_sort_drawn_for_each_epoch(tmp_path):
    """fairseq's ``masked_lm`` shuffles under ``--seed`` and sorts by size; the plugin draws the
    shuffle under ``--seed + epoch`` (a fresh order each epoch): its order at epoch e is
    fairseq's at seed + e."""
    binarize(tmp_path, LINES)
    for epoch in (1, 2):
        ours, theirs = both(tmp_path, "--seed", "3", "--sample-break-mode", "eos", fairseq_seed=3 + epoch)
        ours.load_dataset("valid", epoch=epoch)
        theirs.load_dataset("valid", epoch=epoch)
        order = ours.dataset("valid").ordered_indices()
        assert order.tolist() == theirs.dataset("valid").ordered_indices().tolist()
        assert ours.dataset("valid").sizes[order].tolist() == sorted(ours.dataset("valid").sizes.tolist())


def test_the_logged_lines_are_fairseqs(tmp_path, caplog):
    binarize(tmp_path, LINES)
    with caplog.at_level(logging.INFO):
        ours, theirs = both(tmp_path, "--sample-break-mode", "eos")
        for task in (ours, theirs):
            task.load_dataset("valid")
    ours_lines = [r.getMessage() for r in caplog.records if r.name == "roberta_ext.fairseq_plugin.tasks"]
    theirs_lines = [r.getMessage() for r in caplog.records if r.name == "fairseq.tasks.masked_lm"]
    types = len(Dictionary.load(str(tmp_path / "dict.txt")))  # before <mask> is added
    loaded = f"loaded {len(LINES)} blocks from: {tmp_path / 'valid'}"
    assert ours_lines == [f"dictionary: {types} types", loaded]
    assert theirs_lines == [f"dictionary: {types} types", loaded]


def test_batches_are_fairseqs_batching_and_collation(tmp_path):
    """The batches fairseq's trainer gets (``get_batch_iterator`` with a token and a sentence budget
    and a batch-size multiple) and their keys are ``masked_lm``'s; the same iterator comes back for
    the next epoch, as fairseq's (the epoch reaches the collater through ``set_epoch``); an empty
    batch collates to ``{}``, as fairseq's."""
    binarize(tmp_path, LINES)
    ours, theirs = both(tmp_path, "--sample-break-mode", "eos", "--seed", "2", fairseq_seed=3)
    for task in (ours, theirs):
        task.load_dataset("valid")
    budget = dict(max_tokens=16, max_sentences=3, required_batch_size_multiple=2)
    batches = [
        task.get_batch_iterator(task.dataset("valid"), **budget, seed=2).frozen_batches for task in (ours, theirs)
    ]
    assert [b.tolist() for b in batches[0]] == [b.tolist() for b in batches[1]]
    assert len(batches[0]) > 3 and any(len(b) == 1 for b in batches[0])  # the token budget binds
    indices = ours.dataset("valid").ordered_indices()
    for budget in ({"max_tokens": 16}, {"max_tokens": 40}, {"max_sentences": 3}):  # each with the defaults
        ours_batches = ours.dataset("valid").batch_by_size(indices, **budget)
        unsorted = ours.dataset("valid").dataset  # the batch dataset under the order, called alone
        assert [b.tolist() for b in unsorted.batch_by_size(indices, **budget)] == [b.tolist() for b in ours_batches]
        assert [b.tolist() for b in ours_batches] == [
            b.tolist() for b in theirs.dataset("valid").batch_by_size(indices, **budget)
        ]
        assert sorted(i for b in ours_batches for i in b.tolist()) == sorted(indices.tolist())
        assert any(len(b) % 2 for b in ours_batches[:-1])  # batches of odd sizes: no multiple of 2 asked for
    for task in (ours, theirs):
        first = task.get_batch_iterator(task.dataset("valid"), **budget)
        assert task.get_batch_iterator(task.dataset("valid"), **budget) is first

    ours_set, theirs_set = ours.dataset("valid"), theirs.dataset("valid")
    indices = [int(i) for i in batches[0][1]]
    mine = ours_set.collater([ours_set[i] for i in indices])
    fairseqs = theirs_set.collater([theirs_set[i] for i in indices])
    assert sorted(mine) == sorted(fairseqs) == ["id", "net_input", "nsentences", "ntokens", "target"]
    assert sorted(mine["net_input"]) == ["src_lengths", "src_tokens"]  # fairseq's adds src_id, which no model reads
    assert set(mine["net_input"]) < set(fairseqs["net_input"])
    assert mine["id"].tolist() == fairseqs["id"].tolist() and mine["id"].dtype == torch.long
    assert (mine["nsentences"], mine["ntokens"]) == (fairseqs["nsentences"], fairseqs["ntokens"])
    assert mine["net_input"]["src_lengths"].tolist() == fairseqs["net_input"]["src_lengths"].tolist()
    assert mine["target"].shape == mine["net_input"]["src_tokens"].shape == fairseqs["net_input"]["src_tokens"].shape
    assert ours_set.collater([]) == theirs_set.collater([]) == {}


def dictionary_of(data: Path) -> Dictionary:
    d = Dictionary.load(str(data / "dict.txt"))
    d.add_symbol("<mask>")
    return d


def masker(d: Dictionary, *, seed: int = 1, word_starts=None, weighted: bool = False, **masking) -> BatchMasker:
    """The batch masker of ``masking`` (roberta_ext.data.masking) over dictionary ``d``: never the
    four specials, ``<mask>`` or fairseq's ``madeupword`` fillers."""
    fillers = [i for i, s in enumerate(d.symbols) if s.startswith("madeupword")]
    assert fillers  # the dictionaries here have them
    return BatchMasker(
        MaskingConfig(**masking),
        vocab_size=len(d),
        mask_idx=d.index("<mask>"),
        pad_idx=d.pad(),
        special_ids=[0, 1, 2, 3, d.index("<mask>"), *fillers],
        word_starts=word_starts,
        replacement_weights=torch.tensor(d.count, dtype=torch.float) if weighted else None,
        seed=seed,
    )


def padded_binarize(directory: Path, lines: list[list[str]]) -> Path:
    """:func:`binarize` with fairseq-preprocess's ``madeupword`` fillers in dict.txt (and in some
    lines, so that masking them would show)."""
    binarize(directory, lines)
    d = Dictionary.load(str(directory / "dict.txt"))
    if len(d) % 8 == 0:  # fillers in any case
        d.add_symbol("unseen", n=0)
    d.pad_to_multiple_(8)
    d.save(str(directory / "dict.txt"))
    fillers = [s for s in d.symbols if s.startswith("madeupword")]
    write_split(directory / "valid", d, [line + [fillers[i % len(fillers)]] for i, line in enumerate(lines)])
    return directory


MASKING = {
    "defaults": ([], {}, {}),
    "options": (
        ["--mask-prob", "0.5", "--leave-unmasked-prob", "0.2", "--random-token-prob", "0.3", "--seed", "7"],
        dict(mask_prob=0.5, leave_unmasked_prob=0.2, random_token_prob=0.3),
        {"seed": 7},
    ),
    "frequencies": (
        ["--mask-prob", "0.6", "--random-token-prob", "0.5", "--freq-weighted-replacement"],
        dict(mask_prob=0.6, random_token_prob=0.5, freq_weighted_replacement=True),
        {"weighted": True},
    ),
}


@pytest.mark.parametrize(("argv", "masking", "extra"), MASKING.values(), ids=list(MASKING))
def test_batches_are_masked_by_the_options_at_the_datasets_epoch(tmp_path, argv, masking, extra):
    """The collater masks the padded batch with the masker of the options (fairseq's defaults
    unless given: 0.15, 0.1, 0.1, seed 1), at epoch 1 until the dataset is told another; the
    trainer's ``begin_epoch`` hands the epoch to the model."""
    padded_binarize(tmp_path, LINES)
    task = tasks.setup_task(parsed("roberta_ext_mlm", tmp_path, "--sample-break-mode", "eos", *argv))
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    expected = masker(task.dictionary, **masking, **extra)
    indices = [int(i) for i in dataset.ordered_indices()]
    tokens = data_utils.collate_tokens([dataset[i]["source"] for i in indices], task.dictionary.pad())
    ids = torch.tensor(indices)
    seen = []
    for epoch in (None, 3):
        if epoch is not None:
            dataset.set_epoch(epoch)
        batch = dataset.collater([dataset[i] for i in indices])
        masked, target = expected(tokens, ids, epoch or 1)
        assert torch.equal(batch["net_input"]["src_tokens"], masked) and torch.equal(batch["target"], target)
        seen.append(batch["target"])
    assert not torch.equal(*seen)  # a fresh draw each epoch

    class Model:
        epochs: list[int] = []

        def set_epoch(self, epoch: int) -> None:
            self.epochs.append(epoch)

    model = Model()
    task.begin_epoch(4, model)
    assert model.epochs == [4]


# A GPT-2 BPE of single bytes (no merges): the space's token starts a word, every other continues it.
BYTE = bytes_to_unicode()


def gpt2_files(folder: Path) -> tuple[Path, Path]:
    folder.mkdir(exist_ok=True)
    (folder / "encoder.json").write_text(json.dumps({c: i for i, c in enumerate(BYTE.values())}))
    (folder / "vocab.bpe").write_text("#version: 0.2\n")
    return folder / "encoder.json", folder / "vocab.bpe"


def gpt2_lines() -> list[list[str]]:
    ids = {byte: str(i) for i, byte in enumerate(BYTE)}
    words = ["ab", "cd", "e", "abc", "d", "bcd", "dc", "ba", "a", "cab", "de"]
    text = ["".join(f" {words[(3 * i + 5 * k) % len(words)]}" for k in range(4 + (7 * i) % 13)) for i in range(12)]
    return [[ids[b] for b in line.encode()] for line in text]


WHOLE_WORDS = {
    "whole words, files in DATA": (["--mask-whole-words"], dict(mask_whole_words=True), False),
    "spans, files given": (
        ["--span-masking", "--span-p", "1.0", "--mask-prob", "0.3"],
        dict(span_masking=True, span_p=1.0, mask_prob=0.3),
        True,
    ),
    "spans of one word": (
        ["--span-masking", "--span-max-words", "1", "--mask-prob", "0.3"],
        dict(span_masking=True, span_max_words=1, mask_prob=0.3),
        False,
    ),
}


@pytest.mark.parametrize(("argv", "masking", "given"), WHOLE_WORDS.values(), ids=list(WHOLE_WORDS))
def test_whole_word_and_span_masking_read_the_word_starts_of_the_gpt2_files(tmp_path, argv, masking, given):
    """Word starts from ``DATA/encoder.json`` and ``DATA/vocab.bpe``, or the files the options name
    (then DATA needs none); spans with their options."""
    data = padded_binarize(tmp_path / "data", gpt2_lines())
    encoder_json, vocab_bpe = gpt2_files(tmp_path / ("bpe" if given else "data"))
    paths = ["--bpe-encoder-json", str(encoder_json), "--bpe-vocab", str(vocab_bpe)] if given else []
    blocks = ["--sample-break-mode", "eos", "--tokens-per-sample", "64"]
    task = tasks.setup_task(parsed("roberta_ext_mlm", data, *blocks, *argv, *paths))
    task.load_dataset("valid")
    dataset = task.dataset("valid")
    starts = gpt2_word_starts(task.dictionary, str(encoder_json), str(vocab_bpe))
    assert 0 < int(starts[4:].sum()) < len(starts) - 4  # words of several tokens
    expected = masker(task.dictionary, word_starts=starts, **masking)
    indices = list(range(len(dataset)))
    tokens = data_utils.collate_tokens([dataset[i]["source"] for i in indices], task.dictionary.pad())
    masked, target = expected(tokens, torch.tensor(indices), 1)
    batch = dataset.collater([dataset[i] for i in indices])
    assert torch.equal(batch["net_input"]["src_tokens"], masked) and torch.equal(batch["target"], target)
    if "span_masking" in masking:  # each case's one span option matters here: the defaults' spans differ
        defaults = masker(task.dictionary, word_starts=starts, span_masking=True, mask_prob=0.3)
        assert not torch.equal(defaults(tokens, torch.tensor(indices), 1)[1], target)


@pytest.mark.parametrize(("missing", "option"), [("encoder.json", "--bpe-encoder-json"), ("vocab.bpe", "--bpe-vocab")])
@pytest.mark.parametrize("flag", ["--mask-whole-words", "--span-masking"])
def test_a_missing_gpt2_file_is_named_with_the_option_that_gives_it(tmp_path, missing, option, flag):
    data = padded_binarize(tmp_path, gpt2_lines())
    gpt2_files(tmp_path)
    (tmp_path / missing).unlink()
    task = tasks.setup_task(parsed("roberta_ext_mlm", data, flag))
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("valid")
    assert str(error.value) == (
        "whole-word and span masking need the GPT-2 BPE files to find word starts: "
        f"{str(tmp_path / missing)!r} does not exist (pass {option})"
    )


def test_a_missing_split_and_complete_doc_packing_are_refused_in_full(tmp_path):
    binarize(tmp_path, LINES)
    task = tasks.setup_task(parsed("roberta_ext_mlm", tmp_path))
    with pytest.raises(FileNotFoundError) as error:
        task.load_dataset("test")
    assert str(error.value) == f"dataset not found: test ({tmp_path / 'test'}.bin/.idx)"
    with pytest.raises(ValueError) as refusal:
        tasks.setup_task(parsed("roberta_ext_mlm", tmp_path, "--pack-documents", "--sample-break-mode", "complete_doc"))
    assert str(refusal.value) == (
        "--pack-documents attends each line of a row (ending with </s>) as a document of its own, but "
        "--sample-break-mode complete_doc makes each row one document of several lines, which it would "
        "split at every line: write one document per line and use --sample-break-mode complete"
    )


def test_document_starts_are_bool_after_each_eos_that_is_no_padding():
    tokens = torch.tensor([[0, 5, 2, 7, 7, 2, 8, 2], [0, 2, 2, 6, 2, 1, 1, 1]])
    starts = document_starts(tokens, eos=2, pad=1)
    assert starts.dtype == torch.bool
    expected = [[j > 0 and tokens[i, j - 1] == 2 and tokens[i, j] != 1 for j in range(8)] for i in range(2)]
    assert starts.tolist() == expected


# -- roberta_ext_classification: fairseq's sentence_prediction, every example kept -------------------------------


def sentence_prediction_data(tmp_path: Path) -> Path:
    """fairseq's sentence_prediction layout: input0/ (sentences) and label/ (labels), ``valid`` and
    ``valid1`` (what ``combine`` adds)."""
    (tmp_path / "input0").mkdir()
    binarize(tmp_path / "input0", LINES)
    labels = tmp_path / "label"
    labels.mkdir()
    label_dictionary = Dictionary()
    for label in ("yes", "no"):
        label_dictionary.add_symbol(label)
    label_dictionary.save(str(labels / "dict.txt"))
    words = Dictionary.load(str(tmp_path / "input0" / "dict.txt"))
    write_split(tmp_path / "input0" / "valid1", words, OTHER_LINES)
    for split, n in (("valid", len(LINES)), ("valid1", len(OTHER_LINES))):
        write_split(labels / split, label_dictionary, [["yes" if i % 3 else "no"] for i in range(n)])
    return tmp_path


def test_classification_data_is_fairseqs_sentence_prediction_with_every_example(tmp_path):
    data = sentence_prediction_data(tmp_path)
    argv = ["--num-classes", "2", "--max-positions", "16"]
    ours = tasks.setup_task(
        parsed("roberta_ext_classification", data, "--criterion", "roberta_ext_classification", *argv)
    )
    theirs = tasks.setup_task(parsed("sentence_prediction", data, "--criterion", "sentence_prediction", *argv))
    assert ours.mask_idx == ours.source_dictionary.index("<mask>") == len(ours.source_dictionary) - 1
    for kwargs in ({}, {"combine": True}):
        dataset = ours.load_dataset("valid", **kwargs)
        theirs.load_dataset("valid", **kwargs)
        assert dataset is ours.dataset("valid")
        reference = theirs.dataset("valid")
        assert len(dataset) == len(reference) == len(LINES) + (len(OTHER_LINES) if kwargs else 0)
        for i in range(len(dataset)):
            item, expected = dataset[i], reference[i]
            assert item["net_input.src_tokens"].tolist() == expected["net_input.src_tokens"].tolist()
            assert item["target"].tolist() == expected["target"].tolist()
        batches = ours.get_batch_iterator(dataset, max_sentences=4, required_batch_size_multiple=4).frozen_batches
        assert sorted(int(i) for b in batches for i in b) == list(range(len(dataset)))  # none dropped


def test_a_classification_dictionary_names_what_its_folder_holds(tmp_path):
    """``load_dictionary`` (fairseq's tasks call it for input0/ and label/) says what the folder
    must hold, for any folder."""
    for folder, holds in (
        ("input0", "input0/ with the binarized (first) sentences"),
        ("label", "label/ with the binarized labels (for regression, pass --regression-target)"),
        ("input1", "input1/"),
    ):
        path = tmp_path / folder / "dict.txt"
        with pytest.raises(FileNotFoundError) as error:
            RobertaExtClassificationTask.load_dictionary(str(path))
        assert str(error.value) == (
            f"--task roberta_ext_classification: {path} does not exist; its data folder needs {holds}, written by "
            "fairseq-preprocess --only-source (or roberta-ext glue-preprocess); see docs/fine-tuning.md"
        )


def test_options_without_the_newer_keys_set_the_task_up(tmp_path):
    """Options objects without some keys set the task up, as fairseq's tasks read their options
    (``getattr`` with a default): an older checkpoint's, from before ``--pack-documents`` (no
    packing), and one without ``sample_break_mode``."""
    binarize(tmp_path, LINES)
    RobertaExtMLMTask.setup_task(SimpleNamespace(data=str(tmp_path), sample_break_mode="complete_doc"))
    RobertaExtMLMTask.setup_task(SimpleNamespace(data=str(tmp_path), pack_documents=True))
