"""Our hub against fairseq's ``RobertaHubInterface`` on checkpoints fairseq built.

Golden values: ``tests/fairseq_reference.py`` builds each checkpoint with fairseq 0.12
(``task.build_model``), saves it in one of the layouts users hold, and records what
fairseq's hub returns for the texts of ``tests/reference_texts.py``. The same script then
records what our hub returns, in a process where fairseq, omegaconf and hydra cannot be
imported. Here the two recordings are compared: ids and text exactly, tensors within 1e-4.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

LAYOUTS = ["modern", "legacy_args", "release2019", "dictconfig", "preln", "deep24", "finetuned"]
ATOL = 1e-4


def outputs(reference: dict, layout: str) -> tuple[dict, dict]:
    model_dir = Path(reference[layout])

    def load(name):
        return torch.load(model_dir / f"outputs_{name}.pt", weights_only=True)

    return load("fairseq"), load("ours")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_encode_and_decode_are_identical(fairseq_reference, layout):
    theirs, ours = outputs(fairseq_reference, layout)
    assert ours["encode"] == theirs["encode"]
    assert ours["decode"] == theirs["decode"]
    assert ours["pairs"] == theirs["pairs"]
    assert ours["pairs_no_sep"] == theirs["pairs_no_sep"]
    assert ours["decode_pairs"] == theirs["decode_pairs"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_features_match(fairseq_reference, layout):
    theirs, ours = outputs(fairseq_reference, layout)
    for a, b in zip(ours["features"], theirs["features"], strict=True):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    assert len(ours["all_hiddens"]) == len(theirs["all_hiddens"]) == theirs["num_layers"] + 1
    for a, b in zip(ours["all_hiddens"], theirs["all_hiddens"]):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_padded_batch_features_match_on_real_tokens(fairseq_reference, layout):
    theirs, ours = outputs(fairseq_reference, layout)
    real = theirs["padded_tokens"].ne(1)
    torch.testing.assert_close(ours["padded_features"][real], theirs["padded_features"][real], atol=ATOL, rtol=0)


def test_24_layers_give_25_hidden_states(fairseq_reference):
    theirs, ours = outputs(fairseq_reference, "deep24")
    assert len(ours["all_hiddens"]) == 25


@pytest.mark.parametrize("layout", ["modern", "release2019", "finetuned"])
def test_checkpoint_heads_are_registered_and_predict_matches(fairseq_reference, layout):
    theirs, ours = outputs(fairseq_reference, layout)
    assert ours["heads"] == theirs["heads"] and ours["heads"]
    for head in theirs["heads"]:
        real_rows = slice(None)
        torch.testing.assert_close(ours["predict"][head][real_rows], theirs["predict"][head], atol=ATOL, rtol=0)
        torch.testing.assert_close(ours["predict_logits"][head], theirs["predict_logits"][head], atol=ATOL, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_fill_mask_matches(fairseq_reference, layout):
    theirs, ours = outputs(fairseq_reference, layout)
    for mine, reference in zip(ours["fill_mask"], theirs["fill_mask"], strict=True):
        assert [(s, t) for s, _, t in mine] == [(s, t) for s, _, t in reference]
        assert [p for _, p, _ in mine] == pytest.approx([p for _, p, _ in reference], abs=ATOL)
