"""The heads on their own: what each reads of the features, their defaults (fairseq's and BERT's
layouts, torch's LayerNorm epsilon), an untied LM head's own matrix and its initialisation, and
the refusals of an unknown pooling."""

from __future__ import annotations

import pytest
import torch

from roberta_ext.modeling.heads import ClassificationHead, LMHead, NormedClassificationHead, Pooler, pool


def test_the_lm_heads_defaults_are_fairseqs_roberta_lm_head():
    """Tied to the embeddings given, with fairseq's parameter names: a dense layer with a bias, a
    LayerNorm (epsilon 1e-5) with a bias, and an output bias."""
    embeddings = torch.nn.Parameter(torch.randn(10, 8))
    head = LMHead(8, 10, "gelu", embeddings)
    shapes = {name: tuple(value.shape) for name, value in head.state_dict().items()}
    assert shapes == {
        "weight": (10, 8),
        "bias": (10,),
        "dense.weight": (8, 8),
        "dense.bias": (8,),
        "layer_norm.weight": (8,),
        "layer_norm.bias": (8,),
    }
    assert head.weight is embeddings and head.layer_norm.eps == 1e-5


def test_an_untied_lm_head_owns_a_matrix_drawn_as_berts():
    torch.manual_seed(0)
    head = LMHead(64, 1000, "gelu")
    assert isinstance(head.weight, torch.nn.Parameter) and head.weight.shape == (1000, 64)
    n = head.weight.numel()
    assert abs(head.weight.mean().item()) < 5 * 0.02 / n**0.5  # mean 0
    assert head.weight.std().item() == pytest.approx(0.02, rel=0.02)  # std 0.02
    assert head(torch.randn(2, 3, 64)).shape == (2, 3, 1000)
    with torch.device("meta"):
        assert LMHead(64, 1000, "gelu").weight.is_meta  # built without drawing on the meta device


def test_pool_takes_the_first_token_or_the_mean_of_every_position():
    features = torch.randn(2, 5, 4)
    assert torch.equal(pool(features, "cls"), features[:, 0, :])
    mean = pool(features, "mean")  # no mask: every position is real
    assert mean.shape == (2, 4)
    torch.testing.assert_close(mean, features.mean(dim=1))
    with pytest.raises(ValueError, match=r"^pooling 'max' is not one of \('cls', 'mean'\)$"):
        pool(features, "max")


def test_the_classification_head_reads_the_first_token_only():
    torch.manual_seed(1)
    head = ClassificationHead(8, 6, 3, "tanh", 0.0).eval()
    features = torch.randn(2, 4, 8)
    changed = features.clone()
    changed[:, 1:] = torch.randn(2, 3, 8)
    assert torch.equal(head(features), head(changed))
    changed[:, 0] += 1.0
    assert not torch.equal(head(features), head(changed))


def test_the_normed_heads_defaults_and_its_pooling_refused():
    head = NormedClassificationHead(8, 3, "gelu", 0.0)
    assert head.pooling == "cls"
    assert head.dense.bias is not None and head.layer_norm.bias is not None and head.layer_norm.eps == 1e-5
    with pytest.raises(ValueError, match=r"^pooling 'max' is not one of \('cls', 'mean', 'none'\)$"):
        NormedClassificationHead(8, 3, "gelu", 0.0, pooling="max")


def test_the_pooler_is_berts_dense_and_tanh_on_the_first_token():
    torch.manual_seed(2)
    pooler = Pooler(4)
    features = torch.randn(3, 5, 4)
    torch.testing.assert_close(pooler(features), torch.tanh(pooler.dense(features[:, 0, :])))
