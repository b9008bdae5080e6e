"""Whole documents packed into rows (``document_starts``): each document is attended and positioned
as a sequence of its own, so a token's features are those of its document run alone — whatever
the other documents of its row, on every packed strategy, for rotary positions with local windows
shorter than a document (ModernBERT) and for learned positions (RoBERTa, BERT)."""

from __future__ import annotations

import pytest
import torch

from roberta_ext.families import preset
from roberta_ext.modeling import EncoderModel, use_attention
from roberta_ext.modeling.attention import Packing, packing_for


def model_of(name: str, **overrides) -> EncoderModel:
    torch.manual_seed(0)
    model = EncoderModel(preset(name, **overrides)).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.copy_(torch.randn_like(parameter) * 0.5)
    return model


MODELS = {
    "modernbert": lambda: model_of("modernbert-tiny"),  # rotary, window of 8 (4 either side)
    "roberta": lambda: model_of("tiny"),  # fairseq's learned positions
    "bert": lambda: model_of("bert-tiny"),  # BERT's absolute position table
}


def documents(lengths: list[int], seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 60, (n,), generator=generator) for n in lengths]


def rows_of(rows: list[list[torch.Tensor]], pad: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) tokens of the rows, each its documents back to back, right-padded with ``pad``; and
    the starts."""
    longest = max(sum(len(d) for d in row) for row in rows)
    tokens = torch.full((len(rows), longest), pad)
    starts = torch.zeros(len(rows), longest, dtype=torch.bool)
    for r, row in enumerate(rows):
        at = 0
        for i, doc in enumerate(row):
            tokens[r, at : at + len(doc)] = doc
            starts[r, at] = i > 0
            at += len(doc)
    return tokens, starts


@pytest.mark.parametrize("family", sorted(MODELS))
@pytest.mark.parametrize("strategy", ["auto", "masked", "padded", "per_sequence", "nested"])
def test_each_document_of_a_row_gets_the_features_it_gets_alone(family, strategy):
    model = MODELS[family]()
    docs = documents([5, 23, 1, 12, 30, 7], seed=1)
    tokens, starts = rows_of([[docs[0], docs[1], docs[2]], [docs[3]], [docs[4], docs[5]]], model.cfg.padding_idx)
    with use_attention(model, strategy), torch.no_grad():
        out = model.features(tokens, document_starts=starts).last_hidden_state
        alone = [model.features(doc[None]).last_hidden_state[0] for doc in docs]
    places = [(0, 0), (0, 5), (0, 28), (1, 0), (2, 0), (2, 30)]
    for (row, at), doc, expected in zip(places, docs, alone, strict=True):
        torch.testing.assert_close(out[row, at : at + len(doc)], expected, atol=2e-5, rtol=1e-4)
    assert out[1, 12:].abs().max() == 0  # padding stays zero


@pytest.mark.parametrize("family", sorted(MODELS))
def test_a_tokens_features_do_not_change_when_the_other_documents_of_its_row_change(family):
    model = MODELS[family]()
    kept = documents([19], seed=2)[0]
    outputs = []
    for seed, lengths in ((3, [4, 9]), (4, [13, 1]), (5, [25, 2])):
        before, after = documents(lengths, seed)
        tokens, starts = rows_of([[before, kept, after]])
        with torch.no_grad():
            out = model.features(tokens, document_starts=starts).last_hidden_state[0]
        outputs.append(out[len(before) : len(before) + len(kept)])
    torch.testing.assert_close(outputs[1], outputs[0], atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(outputs[2], outputs[0], atol=2e-5, rtol=1e-4)


def test_without_document_starts_the_row_is_one_sequence():
    """The same row without ``document_starts`` attends across the documents: the option changes
    what it should, and only where it is given."""
    model = MODELS["modernbert"]()
    docs = documents([6, 6], seed=6)
    tokens, starts = rows_of([docs])
    with torch.no_grad():
        apart = model.features(tokens, document_starts=starts).last_hidden_state
        together = model.features(tokens).last_hidden_state
        no_second = model.features(tokens, document_starts=torch.zeros_like(starts)).last_hidden_state
    assert not torch.allclose(apart[0, 6:], together[0, 6:], atol=1e-3)
    torch.testing.assert_close(no_second, together, atol=2e-5, rtol=1e-4)


def test_training_gradients_stay_inside_each_document():
    """In training (the plugin's use), a loss on one document's tokens has no gradient on the
    other documents' embeddings."""
    model = MODELS["modernbert"]().train()
    docs = documents([7, 11], seed=7)
    tokens, starts = rows_of([docs])
    embeddings = model.encoder.sentence_encoder.embed_tokens
    hidden = {}
    handle = embeddings.register_forward_hook(lambda module, args, out: hidden.setdefault("x", out))
    out = model.features(tokens, document_starts=starts).last_hidden_state
    handle.remove()
    hidden["x"].retain_grad()
    out[0, 7:].sum().backward()
    grad = hidden["x"].grad[0]
    assert grad[:7].abs().max() == 0 and grad[7:].abs().max() > 0


def test_the_packing_of_documents_counts_runs_and_positions_per_document():
    padding = torch.tensor([[False, False, False, False, True], [False, False, True, True, True]])
    starts = torch.tensor([[False, False, True, False, False], [False, True, False, False, False]])
    packing = Packing.from_padding_mask(padding, document_starts=starts)
    assert packing.seq_lens == [2, 2, 1, 1] and packing.cu_seqlens.tolist() == [0, 2, 4, 5, 6]
    assert packing.positions.tolist() == [0, 1, 0, 1, 0, 0]
    assert packing.pad_runs(torch.arange(6.0)).tolist() == [[0, 1], [2, 3], [4, 0], [5, 0]]
    assert packing_for("masked", padding, starts) is not None  # documents always pack
    assert packing_for("masked", padding) is None
