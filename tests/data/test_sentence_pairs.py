"""roberta_ext.data.sentence_pairs: BERT/ALBERT pretraining pairs, without fairseq.

On in-memory "sentences" whose token ids say where they come from (document, sentence,
position): the ``<s> A </s> B </s>`` layout and segments, labels about 50/50, reproducibility
from (seed, epoch, index), fresh pairs every epoch, SOP pairs from one document in or out of
order, NSP negatives from other documents, BERT's pair truncation, and the collater's masking
(never ``<s>``/``</s>``, whole words). The fairseq task that trains on them is tested in
tests/fairseq_plugin/test_families_training.py.
"""

from __future__ import annotations

import doctest
import random

import numpy as np
import pytest
import torch

from roberta_ext.data import sentence_pairs
from roberta_ext.data.masking import BatchMasker, MaskingConfig
from roberta_ext.data.sentence_pairs import SentencePairs, build_pair_chunks, truncated_lengths
from roberta_ext.data.word_starts import piece_word_starts
from roberta_ext.tokenizers import Dictionary

BOS, PAD, EOS = 0, 1, 2


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

    def set_rows(self, rows: list[torch.Tensor]) -> Sentences:
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


def pairs(
    objective: str, *, seed: int = 1, tokens_per_sample: int = 40, num_docs: int = 60, short_seq_prob: float = 0.1
) -> SentencePairs:
    sentences = Sentences(make_docs(num_docs))
    return SentencePairs(
        sentences,
        sentences.sizes,
        objective=objective,
        tokens_per_sample=tokens_per_sample,
        bos=BOS,
        eos=EOS,
        pad=PAD,
        masker=None,
        short_seq_prob=short_seq_prob,
        seed=seed,
    )


def split(source: torch.Tensor) -> tuple[list[int], list[int]]:
    """A and B of ``<s> A </s> B </s>``."""
    ids = source.tolist()
    first_eos = ids.index(EOS)
    return ids[1:first_eos], ids[first_eos + 1 : -1]


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
    for first, count, tokens, doc in zip(
        chunks.first_sentence, chunks.num_sentences, chunks.num_tokens, chunks.document
    ):
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
    changed = sum(
        not torch.equal(x["source"], y["source"]) or x["label"] != y["label"] for x, y in zip(items[1], items[2])
    )
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
        SentencePairs(
            one_document,
            one_document.sizes,
            objective="nsp",
            tokens_per_sample=20,
            bos=BOS,
            eos=EOS,
            pad=PAD,
            masker=None,
        )
    with pytest.raises(ValueError, match="objective"):
        SentencePairs(
            one_document,
            one_document.sizes,
            objective="mlm",
            tokens_per_sample=20,
            bos=BOS,
            eos=EOS,
            pad=PAD,
            masker=None,
        )
    with pytest.raises(ValueError, match="two tokens"):
        build_pair_chunks(one_document.sizes, max_tokens=1, short_seq_prob=0.0, seed=1)


def test_collater_masks_whole_words_but_never_bos_or_eos():
    dictionary = Dictionary()
    for symbol in ["the", "un", "##break", "##able", "stone", "▁x"]:
        dictionary.add_symbol(symbol)
    mask = dictionary.add_symbol("<mask>")
    starts = piece_word_starts(dictionary, "wordpiece")
    assert [starts[dictionary.index(s)].item() for s in ["the", "un", "##break", "##able"]] == [
        True,
        True,
        False,
        False,
    ]
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
    masker = BatchMasker(
        MaskingConfig(mask_prob=0.3, mask_whole_words=True),
        vocab_size=len(dictionary),
        mask_idx=mask,
        pad_idx=PAD,
        special_ids=[*range(dictionary.nspecial), mask],
        word_starts=starts,
        seed=1,
    )
    dataset = SentencePairs(
        sentences, sentences.sizes, objective="sop", tokens_per_sample=64, bos=BOS, eos=EOS, pad=PAD, masker=masker
    )
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
            if ids[i : i + 3] == word:
                chosen = row_target[i : i + 3].ne(PAD).tolist()
                assert chosen in ([True] * 3, [False] * 3)


def test_doctests():
    assert doctest.testmod(sentence_pairs).failed == 0
