"""ELECTRA and SpanBERT on the shared core, without fairseq: the generator's size and its
shared embeddings, sampling without gradient, replaced-token labels, the objective, the
discriminator served from a pretraining state dict (equality with transformers' ELECTRA is
tested with the transformers interop, tests/checkpoints/test_transformers_interop.py); span
boundaries and the span boundary head against a plain reference, and the SpanBERT objective."""

from __future__ import annotations

import doctest
import math

import pytest
import torch
import torch.nn.functional as F

from roberta_ext.checkpoints.fairseq import load_roberta_checkpoint, save_roberta_checkpoint
from roberta_ext.families import electra, preset, spanbert
from roberta_ext.families.electra import ElectraPretrainingModel
from roberta_ext.families.spanbert import SpanBertPretrainingModel, span_boundaries
from roberta_ext.modeling import RobertaModel

MASK = 63  # the tiny presets' last row, used as <mask> here


def masked_batch(seed: int = 0, batch: int = 4, length: int = 12, pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(src_tokens, targets) of a tiny ELECTRA/SpanBERT batch (padding_idx 0, tokens 5..60,
    ``<s>``=1 and ``</s>``=2 at the ends), about 30% masked, the last row shorter."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(5, 60, (batch, length), generator=g)
    tokens[:, 0], tokens[:, -1] = 1, 2
    tokens[-1, length - 3 :] = pad
    tokens[-1, length - 4] = 2
    chosen = (torch.rand(batch, length, generator=g) < 0.3) & (tokens > 4)
    chosen[:, 3] = True  # every row has a target
    return tokens.masked_fill(chosen, MASK), torch.where(chosen, tokens, pad)


# ------------------------------------------------------------------------------- ELECTRA


def test_generator_is_a_fraction_of_the_discriminator():
    small = electra.generator_config(preset("electra-small"))  # 1/4 by default
    assert (small.encoder_embed_dim, small.encoder_ffn_embed_dim, small.encoder_attention_heads) == (64, 256, 1)
    assert small.embed_dim == 128 and small.encoder_layers == 12
    base = electra.generator_config(preset("electra-base"), 1 / 3)  # transformers' electra-base-generator
    assert (base.encoder_embed_dim, base.encoder_ffn_embed_dim, base.encoder_attention_heads, base.embed_dim) == (
        256,
        1024,
        4,
        768,
    )
    odd = electra.generator_config(preset("electra-base"), 0.3)  # 230 wide: 4 heads do not divide it
    assert odd.encoder_embed_dim % odd.encoder_attention_heads == 0
    with pytest.raises(ValueError, match="fraction"):
        electra.generator_config(preset("electra-tiny"), 1.5)


def test_generator_shares_the_discriminators_embeddings():
    model = ElectraPretrainingModel(preset("electra-tiny"))
    ours, gen = model.encoder.sentence_encoder, model.generator.encoder.sentence_encoder
    for name in electra.SHARED_EMBEDDINGS:
        assert getattr(gen, name) is getattr(ours, name), name
    assert model.generator.encoder.lm_head.weight is ours.embed_tokens.weight  # the MLM output matrix too
    # Each model lifts the 16-wide embeddings to its own width.
    assert ours.embed_proj.weight.shape == (32, 16) and gen.embed_proj.weight.shape == (8, 16)
    assert gen.embed_proj is not ours.embed_proj
    # Shared tensors are counted once, and the generator's MLM loss trains them.
    params = list(model.parameters())
    assert len({id(p) for p in params}) == len(params)
    src, targets = masked_batch()
    out = model.pretraining_forward(src, targets)
    F.cross_entropy(out.generator_logits, out.original[out.masked]).backward()
    assert ours.embed_tokens.weight.grad is not None and ours.embed_tokens.weight.grad.abs().sum() > 0
    assert model.encoder.sentence_encoder.layers[0].fc1.weight.grad is None  # the discriminator's layers: untouched


def test_sampling_has_no_gradient_and_the_discriminator_loss_does_not_reach_the_generator():
    model = ElectraPretrainingModel(preset("electra-tiny"))
    src, targets = masked_batch(1)
    out = model.pretraining_forward(src, targets)
    assert not out.corrupted.requires_grad and out.corrupted.grad_fn is None
    parts = electra.electra_loss(out, padding_idx=0)
    parts.discriminator_loss.backward()
    gen_layers = model.generator.encoder.sentence_encoder.layers
    assert all(p.grad is None for p in gen_layers.parameters()), "BCE must not flow through the samples"
    assert model.generator.encoder.lm_head.dense.weight.grad is None
    assert model.encoder.sentence_encoder.layers[0].fc1.weight.grad is not None


def test_samples_follow_the_softmax_and_avoid_disallowed_ids():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0, 3.0]).expand(40000, 5)
    g = torch.Generator().manual_seed(0)
    samples = electra.sample_replacements(logits, disallowed_ids=[4], generator=g)
    assert not bool((samples == 4).any())
    expected = torch.softmax(logits[0, :4], dim=0)
    observed = torch.bincount(samples, minlength=5)[:4].float() / samples.numel()
    torch.testing.assert_close(observed, expected, atol=0.01, rtol=0)


class _FixedGenerator(torch.nn.Module):
    """A stand-in generator whose every masked position predicts ``token`` (or the original)."""

    def __init__(self, vocab_size: int, token: int | None, targets: torch.Tensor) -> None:
        super().__init__()
        self.vocab_size, self.token, self.targets = vocab_size, token, targets
        self.anchor = torch.nn.Parameter(torch.zeros(()))

    def forward(self, src_tokens, masked_tokens=None, segment_labels=None):
        wanted = (
            self.targets[masked_tokens]
            if self.token is None
            else torch.full_like(self.targets[masked_tokens], self.token)
        )
        return F.one_hot(wanted, self.vocab_size).float() * 1e4 + self.anchor, {}


@pytest.mark.parametrize("token", [None, 7])
def test_labels_mark_exactly_the_tokens_that_differ(token):
    model = ElectraPretrainingModel(preset("electra-tiny"))
    src, targets = masked_batch(2)
    model.generator = _FixedGenerator(64, token, targets)
    out = model.pretraining_forward(src, targets)
    original = torch.where(targets.ne(0), targets, src)
    assert torch.equal(out.original, original)
    if token is None:  # the generator reproduces the original: nothing counts as replaced
        assert torch.equal(out.corrupted, original) and not out.labels.any()
    else:
        assert torch.equal(out.corrupted, torch.where(out.masked, token, original))
        assert torch.equal(out.labels, out.masked & original.ne(token))
    assert not bool(out.labels[original.eq(0)].any())  # padding is never "replaced"


def test_objective_is_mlm_plus_lambda_times_bce_over_non_padding():
    model = ElectraPretrainingModel(preset("electra-tiny"))
    out = model.pretraining_forward(*masked_batch(3))
    parts = electra.electra_loss(out, padding_idx=0, discriminator_weight=50.0)
    real = out.original.ne(0)
    mlm = F.cross_entropy(out.generator_logits, out.original[out.masked])
    bce = F.binary_cross_entropy_with_logits(out.discriminator_logits[real], out.labels[real].float())
    torch.testing.assert_close(parts.loss, mlm + 50.0 * bce)
    assert parts.tokens == int(real.sum()) and parts.masked == int(out.masked.sum())
    assert parts.replaced + parts.original == parts.tokens and parts.replaced == int(out.labels.sum())
    predicted = out.discriminator_logits[real] > 0
    assert parts.replaced_correct + parts.original_correct == int((predicted == out.labels[real]).sum())


def test_unused_mlm_head_of_the_discriminator_is_frozen():
    model = ElectraPretrainingModel(preset("electra-tiny"))
    head = model.encoder.lm_head
    assert not head.dense.weight.requires_grad and not head.bias.requires_grad
    assert head.weight.requires_grad  # the tied output matrix is the token embedding


def test_pretraining_a_few_steps_lowers_the_loss():
    torch.manual_seed(0)
    model = ElectraPretrainingModel(preset("electra-tiny", dropout=0.0, attention_dropout=0.0))
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    losses = []
    for step in range(30):
        out = model.pretraining_forward(*masked_batch(100 + step % 4), disallowed_ids=[MASK])
        parts = electra.electra_loss(out, padding_idx=0)
        optimizer.zero_grad()
        parts.loss.backward()
        optimizer.step()
        losses.append(float(parts.loss.detach()))
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 5, losses


def test_replaced_token_probs():
    model = ElectraPretrainingModel(preset("electra-tiny")).eval()
    tokens = torch.tensor([[1, 5, 6, 7, 2], [1, 5, 2, 0, 0]])
    probs = electra.replaced_token_probs(model, tokens)
    assert probs.shape == (2, 5) and bool(((probs >= 0) & (probs <= 1)).all())
    assert probs[1, 3:].eq(0).all()  # padding
    torch.testing.assert_close(probs[1, :3], electra.replaced_token_probs(model, tokens[1, :3])[0])
    with pytest.raises(ValueError, match="discriminator head"):
        electra.replaced_token_probs(RobertaModel(preset("electra-tiny")), tokens)


def test_discriminator_loads_from_a_pretraining_state_dict(tmp_path):
    model = ElectraPretrainingModel(preset("electra-tiny")).eval()
    state = model.state_dict()
    assert any(k.startswith("generator.") for k in state) and electra.has_discriminator_head(state)
    served = electra.discriminator_state(state)
    assert not any(k.startswith("generator.") for k in served)
    # What a hub does with it: a plain model, plus the head because the file has one.
    hub_model = electra.ElectraDiscriminator(model.cfg)
    hub_model.load_state_dict(served, strict=True)
    hub_model.eval()
    tokens = torch.tensor([[1, 5, 6, 7, 2]])
    torch.testing.assert_close(
        electra.replaced_token_probs(hub_model, tokens), electra.replaced_token_probs(model, tokens)
    )
    # Without the head it is an ordinary encoder checkpoint for every loader.
    plain = RobertaModel(model.cfg)
    plain.load_state_dict({k: v for k, v in served.items() if not k.startswith("discriminator_head.")}, strict=True)
    save_roberta_checkpoint(plain, tmp_path / "electra.pt")
    loaded = load_roberta_checkpoint(tmp_path / "electra.pt").model
    assert loaded.cfg.family == "electra" and loaded.cfg.embedding_size == 16
    torch.testing.assert_close(loaded(tokens, features_only=True)[0], model(tokens, features_only=True)[0])


# ------------------------------------------------------------------------------ SpanBERT


def test_span_boundaries_of_runs():
    masked = torch.tensor(
        [
            [0, 1, 1, 1, 0, 0, 1, 0],
            [0, 0, 0, 0, 0, 1, 1, 1],  # a run reaching the end: right boundary clamped to the last column
            [1, 1, 0, 0, 0, 0, 0, 0],  # from column 0 (never the case with <s>): left boundary clamped to 0
        ],
        dtype=torch.bool,
    )
    left, right, offset = span_boundaries(masked)
    assert left[0].tolist() == [0, 0, 0, 0, 0, 0, 5, 0] and right[0].tolist() == [0, 4, 4, 4, 0, 0, 7, 0]
    assert offset[0].tolist() == [0, 0, 1, 2, 0, 0, 0, 0]
    assert (
        left[1, 5:].tolist() == [4, 4, 4] and right[1, 5:].tolist() == [7, 7, 7] and offset[1, 5:].tolist() == [0, 1, 2]
    )
    assert left[2, :2].tolist() == [0, 0] and right[2, :2].tolist() == [2, 2]
    # Boundaries of runs are never masked themselves (except at the row's edges).
    inner = masked.clone()
    inner[1:] = False
    left, right, _ = span_boundaries(inner)
    assert not masked[0][left[0][inner[0]]].any() and not masked[0][right[0][inner[0]]].any()
    with pytest.raises(ValueError, match="bool"):
        span_boundaries(masked.long())


def reference_sbo(head: spanbert.SpanBoundaryHead, features: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """The span boundary objective token by token, as the paper writes it."""
    rows = []
    for b in range(masked.size(0)):
        t = 0
        while t < masked.size(1):
            if not masked[b, t]:
                t += 1
                continue
            s = t
            while t < masked.size(1) and masked[b, t]:
                t += 1
            e = t - 1
            for i in range(s, e + 1):
                x = torch.cat(
                    [
                        features[b, max(s - 1, 0)],
                        features[b, min(e + 1, masked.size(1) - 1)],
                        head.position_embeddings.weight[min(i - s, head.max_span_length - 1)],
                    ]
                )
                x = head.layer_norm1(F.gelu(head.dense1(x)))
                x = head.layer_norm2(F.gelu(head.dense2(x)))
                rows.append(x @ head.weight.T + head.bias)
    return torch.stack(rows)


@pytest.mark.parametrize("name", ["spanbert-tiny", "albert-tiny"])
def test_span_boundary_head_equals_the_reference(name):
    model = SpanBertPretrainingModel(preset(name), max_span_length=3).eval()
    src, targets = masked_batch(4, length=16)
    out = model.pretraining_forward(src, targets)
    features, _ = model.encoder.sentence_encoder(src)
    masked = targets.ne(0)
    n, vocab = int(masked.sum()), model.cfg.vocab_size
    assert out.mlm_logits.shape == out.sbo_logits.shape == (n, vocab)
    torch.testing.assert_close(out.sbo_logits, reference_sbo(model.sbo_head, features, masked), atol=1e-4, rtol=1e-4)
    assert torch.equal(out.targets, targets[masked])
    # Tied to the token embedding (E wide with ALBERT's factorization, through dense2: H -> E).
    assert model.sbo_head.weight is model.encoder.sentence_encoder.embed_tokens.weight
    assert model.sbo_head.dense2.out_features == model.cfg.embed_dim


def test_span_boundary_head_reads_only_boundaries_and_positions():
    model = SpanBertPretrainingModel(preset("spanbert-tiny")).eval()
    features = torch.randn(1, 8, 32)
    masked = torch.tensor([[0, 0, 1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    base = model.sbo_head(features, masked)
    changed = features.clone()
    changed[0, 2:5] = torch.randn(3, 32)  # the span's own encodings
    changed[0, 6:] = torch.randn(2, 32)  # beyond the right boundary
    torch.testing.assert_close(model.sbo_head(changed, masked), base)
    changed[0, 5] += 1.0  # the right boundary
    assert not torch.allclose(model.sbo_head(changed, masked), base)
    # Same boundaries, different offsets: different predictions.
    assert not torch.allclose(base[0], base[1])


def test_spanbert_objective_sums_mlm_and_sbo():
    model = SpanBertPretrainingModel(preset("spanbert-tiny"))
    out = model.pretraining_forward(*masked_batch(5))
    parts = spanbert.spanbert_loss(out)
    mlm = F.cross_entropy(out.mlm_logits, out.targets, reduction="sum")
    sbo = F.cross_entropy(out.sbo_logits, out.targets, reduction="sum")
    torch.testing.assert_close(parts.loss, mlm + sbo)
    assert parts.masked == out.targets.numel()
    parts.loss.backward()
    assert model.sbo_head.dense1.weight.grad is not None
    # A batch without targets: zero, still connected to the model.
    src, _ = masked_batch(5)
    empty = spanbert.spanbert_loss(model.pretraining_forward(src, torch.zeros_like(src)))
    assert float(empty.loss.detach()) == 0.0 and empty.loss.requires_grad and empty.masked == 0


def test_spanbert_pretraining_state_dict_serves_as_an_encoder():
    model = SpanBertPretrainingModel(preset("spanbert-tiny"))
    served = spanbert.encoder_state(model.state_dict())
    assert not any(k.startswith("sbo_head.") for k in served)
    plain = RobertaModel(model.cfg)
    plain.load_state_dict(served, strict=True)


def test_presets_are_registered():
    assert preset("electra-small").embedding_size == 128
    assert preset("electra-base").pooler_activation_fn == "gelu"
    assert preset("spanbert-base").family == "spanbert"
    params = sum(p.numel() for p in RobertaModel(preset("electra-small")).parameters())
    assert 13e6 < params < 14.5e6, params  # the paper: 14M


def test_doctests():
    for module in (electra, spanbert):
        result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
        assert result.failed == 0 and result.attempted > 0, module.__name__
    assert math.isclose(electra.DEFAULT_DISCRIMINATOR_WEIGHT, 50.0)
