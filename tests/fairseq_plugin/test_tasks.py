"""``roberta_ext_mlm``'s data pipeline in process: blocks, the ``<s>`` it prepends, and the size
filter fairseq's trainer applies (``--skip-invalid-size-inputs-valid-test`` and training's own
skipping) — a block the model cannot take must never reach it."""

from __future__ import annotations

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
