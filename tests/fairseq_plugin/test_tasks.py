"""``roberta_ext_mlm``'s data pipeline in process: blocks, the ``<s>`` it prepends, and the size
filter fairseq's trainer applies (``--skip-invalid-size-inputs-valid-test`` and training's own
skipping) — a block the model cannot take must never reach it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.peers import require

require("fairseq", "the task is fairseq's")

from fairseq.data import Dictionary
from fairseq.data.indexed_dataset import MMapIndexedDatasetBuilder

from roberta_ext.fairseq_plugin.tasks import RobertaExtMLMConfig, RobertaExtMLMTask
from roberta_ext.families import preset
from roberta_ext.modeling import RobertaModel

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
