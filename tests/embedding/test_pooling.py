"""``pool`` and ``similarity`` against sentence-transformers' own ``Pooling`` module and ``util``
functions, called directly on random token features (no model): every mode alone and all of
them together, rows of mixed lengths whose padding holds a large value that must not leak in,
prompts left out as ``include_prompt=False`` does, and the error messages users read.
"""

from __future__ import annotations

import pytest
import torch

from roberta_ext.embedding.pooling import POOLING_MODES, SIMILARITIES, SentenceEmbedding, check_modes, pool, similarity
from tests.peers import require

st = require("sentence_transformers", "pooling and similarity are compared with sentence-transformers'")

LENGTHS = torch.tensor([7, 3, 1, 5, 2])


def features(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(B, T, C) random features, right-padded to 7 with 123.0 past each row's length."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(len(LENGTHS), 7, 6, generator=generator)
    x[torch.arange(7) >= LENGTHS[:, None]] = 123.0
    return x.to(dtype)


def st_pool(x: torch.Tensor, modes, skip: int = 0) -> torch.Tensor:
    """sentence-transformers' ``Pooling`` of right-padded ``x`` with a prompt of ``skip`` tokens."""
    pooler = st.sentence_transformer.modules.Pooling(x.size(-1), pooling_mode=modes, include_prompt=skip == 0)
    mask = (torch.arange(x.size(1)) < LENGTHS[:, None]).long()
    batch = {"token_embeddings": x, "attention_mask": mask} | ({"prompt_length": skip} if skip else {})
    return pooler(batch)["sentence_embedding"]


@pytest.mark.parametrize("skip", [0, 2, 5])
@pytest.mark.parametrize("modes", [*POOLING_MODES, POOLING_MODES, ("max", "mean", "cls")])
def test_pool_equals_sentence_transformers_pooling(modes, skip):
    x = features()
    out = pool(x, LENGTHS, [modes] if isinstance(modes, str) else modes, skip=skip)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, st_pool(x, modes, skip), rtol=1e-6, atol=1e-6)


def test_pool_of_half_precision_features_is_float32_of_the_same_values():
    x = features(torch.bfloat16)
    out = pool(x, LENGTHS, POOLING_MODES, skip=1)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, pool(x.float(), LENGTHS, POOLING_MODES, skip=1), rtol=0, atol=0)


def test_pool_of_rows_whose_prompt_covers_them():
    """A row that is all prompt: ``cls`` takes position 0, ``lasttoken`` and the means give zeros
    (the count is clamped, not zero), ``max`` gives -inf, as in sentence-transformers."""
    x = torch.arange(1.0, 7.0).view(1, 3, 2)
    out = pool(
        x, torch.tensor([2]), ["cls", "lasttoken", "mean", "mean_sqrt_len_tokens", "weightedmean", "max"], skip=2
    )
    inf = float("inf")
    assert out.tolist() == [[1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -inf, -inf]]


@pytest.mark.parametrize("kind", SIMILARITIES)
def test_similarity_equals_sentence_transformers(kind):
    generator = torch.Generator().manual_seed(1)
    a, b = torch.randn(3, 5, generator=generator), torch.randn(4, 5, generator=generator)
    reference = {
        "cosine": st.util.cos_sim,
        "dot": st.util.dot_score,
        "euclidean": st.util.euclidean_sim,
        "manhattan": st.util.manhattan_sim,
    }[kind]
    torch.testing.assert_close(similarity(a, b, kind), reference(a, b), rtol=1e-5, atol=1e-5)
    # A 1-D input is one row, on either side; integer input is computed in float.
    torch.testing.assert_close(similarity(a[0], b, kind), reference(a[:1], b), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(similarity(a, b[1], kind), reference(a, b[1:2]), rtol=1e-5, atol=1e-5)
    assert similarity(a.round().long(), b.round().long(), kind).dtype == torch.float32


def test_cosine_is_the_default_similarity():
    assert similarity(torch.tensor([[3.0, 4.0]]), torch.tensor([[6.0, 8.0], [-4.0, 3.0]])).tolist() == [[1.0, 0.0]]


def test_errors_name_the_input_and_the_choices():
    with pytest.raises(ValueError, match=r"^similarity 'cos' is not supported; choose one of \('cosine', 'dot', "):
        similarity(torch.ones(2), torch.ones(2), "cos")
    with pytest.raises(ValueError, match=r"^similarity 'cos' is not supported; choose one of \('cosine', 'dot', "):
        SentenceEmbedding(similarity="cos")
    with pytest.raises(ValueError, match=r"^pooling: unknown pooling mode 'sum'; supported: mean, cls, max, mean_sqrt"):
        SentenceEmbedding(pooling=("mean", "sum"))
    with pytest.raises(ValueError, match=r"^embed: unknown pooling mode 'sum'; supported: mean, cls, max, mean_sqrt"):
        check_modes("sum", "embed")
    with pytest.raises(ValueError, match=r"^pooling: no pooling mode given$"):
        check_modes([])
    with pytest.raises(ValueError, match=r"^pooling: unknown pooling mode 'sum'; supported: mean, cls, max, mean_sqrt"):
        pool(features(), LENGTHS, ["sum"])
    assert check_modes("cls") == ("cls",) and check_modes(["mean", "max"]) == ("mean", "max")


def test_sentence_embedding_defaults():
    settings = SentenceEmbedding()
    assert (settings.pooling, settings.normalize, settings.include_prompt, settings.max_length) == (
        ("mean",),
        False,
        True,
        None,
    )
    assert (settings.do_lower_case, dict(settings.prompts), settings.default_prompt_name, settings.similarity) == (
        False,
        {},
        None,
        "cosine",
    )


def test_pool_keeps_every_position_unless_told_to_skip():
    x = torch.tensor([[[1.0], [3.0], [8.0]], [[2.0], [4.0], [0.0]]])  # row 1: 2 real tokens
    assert pool(x, torch.tensor([3, 2]), ["mean", "cls", "max", "lasttoken"]).tolist() == [
        [4.0, 1.0, 8.0, 8.0],
        [3.0, 2.0, 4.0, 4.0],
    ]
