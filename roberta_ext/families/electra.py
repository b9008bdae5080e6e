"""ELECTRA (Clark et al., 2020): pretraining by replaced-token detection.

Two encoders are trained together. A small **generator** — the same transformer, its hidden
size, feed-forward size and head count a fraction (1/4 by default) of the discriminator's — does
masked-LM on the masked input. At every masked position a token is **sampled** from its output
distribution (Gumbel-max, no gradient flows through the sample), giving a corrupted sentence.
The **discriminator** reads the corrupted sentence and says, for every token, whether it is the
original or a replacement; a sampled token that happens to equal the original counts as
original. The loss is ``generator MLM + lambda * discriminator BCE`` (lambda = 50), the BCE
taken over all non-padding tokens. After pretraining the generator is thrown away and the
discriminator is the encoder that gets fine-tuned.

The two share their embeddings (token, position, segment, and the embedding LayerNorm, which
sits in ELECTRA's shared ``embeddings`` scope). The generator is narrower than the embeddings, so
each model projects them to its own width with its own ``embed_proj`` — the core's factorized
embeddings (``embedding_size`` = E). The generator's MLM head maps its hidden size back to E
and predicts through the shared embedding matrix.

Layout of a pretraining model (:class:`ElectraPretrainingModel`: a
:class:`~roberta_ext.modeling.RobertaModel` plus two modules, so the discriminator keeps the keys
every loader knows)::

    encoder.sentence_encoder.*   the discriminator (what the hub serves)
    encoder.lm_head.*            the discriminator's MLM head: unused and frozen, kept so the
                                 state dict loads as an ordinary model (fill_mask on an ELECTRA
                                 discriminator is meaningless)
    discriminator_head.*         dense H->H, GELU, dense_prediction H->1 (transformers' names)
    generator.*                  a whole RobertaModel; its embeddings are the discriminator's

A served discriminator is :class:`ElectraDiscriminator` (the encoder and ``discriminator_head``);
transformers' ``ElectraForPreTraining`` checkpoints load into it through
:mod:`roberta_ext.checkpoints.transformers`.

>>> from roberta_ext.families import preset
>>> model = ElectraPretrainingModel(preset("electra-tiny"))
>>> model.generator.cfg.encoder_embed_dim, model.cfg.encoder_embed_dim, model.cfg.embed_dim
(8, 32, 16)
>>> model.generator.embed_tokens is model.embed_tokens
True
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..modeling.config import EncoderConfig
from ..modeling.encoder import get_activation_fn, init_bert_params
from ..modeling.model import ENCODER_PREFIX, RobertaModel
from .base import BERT_STYLE_EMBEDDINGS, BERT_STYLE_LAYER, LARGE, SEQUENCE_HEAD, TINY, Family, TransformersLayout
from .bert import bert_config

GENERATOR = "generator"
"""Attribute (and state-dict prefix) of the generator of a pretraining model."""

DISCRIMINATOR_HEAD = "discriminator_head"
"""Attribute (and state-dict prefix) of the replaced-token-detection head."""

DEFAULT_GENERATOR_FRACTION = 0.25
"""Generator width / discriminator width (the paper: 1/4 for small and large, 1/3 for base)."""

DEFAULT_DISCRIMINATOR_WEIGHT = 50.0
"""The paper's lambda: weight of the discriminator's BCE against the generator's MLM loss."""

SHARED_EMBEDDINGS = ("embed_tokens", "embed_positions", "segment_embeddings", "layernorm_embedding")
"""Modules of the discriminator's ``sentence_encoder`` that the generator uses as its own."""


# ------------------------------------------------------------------------------- configs


def electra_config(**overrides: Any) -> EncoderConfig:
    """ELECTRA-base's discriminator with ``overrides``: BERT's uncased vocabulary, 12 x 768.

    ELECTRA is BERT's architecture (absolute positions, segments, LayerNorm epsilon 1e-12) without
    a pooler; its classification head is dense -> GELU -> out_proj on the first token, which is
    our :class:`~roberta_ext.modeling.heads.ClassificationHead` with ``pooler_activation_fn="gelu"``.
    """
    return bert_config(**{"family": "electra", "pooler": False, "pooler_activation_fn": "gelu", **overrides})


def generator_config(cfg: EncoderConfig, fraction: float = DEFAULT_GENERATOR_FRACTION) -> EncoderConfig:
    """The generator that goes with discriminator ``cfg``: same depth and vocabulary, hidden
    size, feed-forward size and head count scaled by ``fraction``, embeddings ``cfg.embed_dim``
    wide (they are the discriminator's), no pooler.

    >>> from roberta_ext.families import preset
    >>> g = generator_config(preset("electra-base"), 1 / 3)
    >>> g.encoder_embed_dim, g.encoder_ffn_embed_dim, g.encoder_attention_heads, g.embed_dim
    (256, 1024, 4, 768)
    """
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction <= 1.0:
        raise ValueError(f"generator fraction must be a number in (0, 1], got {fraction!r}")
    hidden = max(1, round(cfg.encoder_embed_dim * fraction))
    heads = max(1, min(hidden, round(cfg.encoder_attention_heads * fraction)))
    while hidden % heads:  # the nearest head count at or below the scaled one that divides the width
        heads -= 1
    return cfg.replace(
        encoder_embed_dim=hidden,
        encoder_ffn_embed_dim=max(1, round(cfg.encoder_ffn_embed_dim * fraction)),
        encoder_attention_heads=heads,
        embedding_size=cfg.embed_dim if cfg.embed_dim != hidden else None,
        pooler=False,
    )


# -------------------------------------------------------------------------------- modules


class ElectraDiscriminatorHead(nn.Module):
    """Replaced-token detection: dense H->H -> activation -> dense_prediction H->1, one logit
    per token (positive: replaced). Names as transformers' ``ElectraDiscriminatorPredictions``."""

    def __init__(self, dim: int, activation_fn: str = "gelu") -> None:
        super().__init__()
        self.dense = nn.Linear(dim, dim)
        self.activation_fn = get_activation_fn(activation_fn)
        self.dense_prediction = nn.Linear(dim, 1)

    def forward(self, features: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T)
        return self.dense_prediction(self.activation_fn(self.dense(features))).squeeze(-1)


def make_discriminator_head(cfg: EncoderConfig) -> ElectraDiscriminatorHead:
    """A freshly initialised replaced-token-detection head for a discriminator of config ``cfg``."""
    head = ElectraDiscriminatorHead(cfg.encoder_embed_dim, cfg.activation_fn)
    head.apply(init_bert_params)
    return head


def make_generator(model: RobertaModel, fraction: float | EncoderConfig = DEFAULT_GENERATOR_FRACTION) -> RobertaModel:
    """A generator for the discriminator ``model``: a :class:`RobertaModel` whose embeddings
    (:data:`SHARED_EMBEDDINGS`) and tied output matrix are the discriminator's. ``fraction`` is
    the generator's relative width, or its whole config."""
    gen_cfg = fraction if isinstance(fraction, EncoderConfig) else generator_config(model.cfg, fraction)
    if gen_cfg.embed_dim != model.cfg.embed_dim or gen_cfg.vocab_size != model.cfg.vocab_size:
        raise ValueError(
            f"the generator's embeddings ({gen_cfg.vocab_size} x {gen_cfg.embed_dim}) must be the "
            f"discriminator's ({model.cfg.vocab_size} x {model.cfg.embed_dim}) to be shared"
        )
    generator = RobertaModel(gen_cfg)
    ours, theirs = model.transformer, generator.transformer
    for name in SHARED_EMBEDDINGS:
        setattr(theirs, name, getattr(ours, name))
    if not gen_cfg.untie_weights:
        generator.encoder.lm_head.weight = ours.embed_tokens.weight
    return generator


def freeze_unused_lm_head(model: RobertaModel) -> None:
    """Stop training the discriminator's MLM head (ELECTRA has no use for it): its dense layer,
    LayerNorm and bias get ``requires_grad=False`` — optimizers skip them and distributed
    data-parallel does not wait for their gradients. The tied output matrix is the token
    embedding and keeps training."""
    head = model.encoder.lm_head
    for param in (*head.dense.parameters(), *head.layer_norm.parameters()):
        param.requires_grad_(False)
    if head.bias is not None:  # a head may have no output bias (cfg.lm_output_bias)
        head.bias.requires_grad_(False)
    if model.cfg.untie_weights:
        head.weight.requires_grad_(False)


class ElectraDiscriminator(RobertaModel):
    """ELECTRA's discriminator as it is served: the encoder and its replaced-token-detection head.

    >>> from roberta_ext.families import preset
    >>> model = ElectraDiscriminator(preset("electra-tiny"))
    >>> sorted(name for name, _ in model.named_children())
    ['classification_heads', 'discriminator_head', 'encoder', 'token_heads']
    """

    def __init__(self, cfg: EncoderConfig, *, has_lm_head: bool = True) -> None:
        super().__init__(cfg, has_lm_head=has_lm_head)
        self.discriminator_head = make_discriminator_head(cfg)


class ElectraPretrainingModel(ElectraDiscriminator):
    """The discriminator (this model) with a generator and a replaced-token-detection head.

    >>> from roberta_ext.families import preset
    >>> model = ElectraPretrainingModel(preset("electra-tiny"))
    >>> tokens = torch.tensor([[0, 5, 6, 7, 2]])
    >>> out = model.pretraining_forward(tokens.masked_fill(tokens == 6, 63), torch.tensor([[0, 0, 6, 0, 0]]))
    >>> out.generator_logits.shape, out.discriminator_logits.shape
    (torch.Size([1, 64]), torch.Size([1, 5]))
    """

    def __init__(self, cfg: EncoderConfig, generator_fraction: float | EncoderConfig = DEFAULT_GENERATOR_FRACTION):
        super().__init__(cfg)
        self.generator = make_generator(self, generator_fraction)
        freeze_unused_lm_head(self)

    def pretraining_forward(self, src_tokens: torch.Tensor, targets: torch.Tensor, **kwargs: Any) -> ElectraOutput:
        """:func:`electra_forward` on this model."""
        return electra_forward(self, src_tokens, targets, **kwargs)


# --------------------------------------------------------------------- the forward pass


@torch.no_grad()
def sample_replacements(
    logits: torch.Tensor, *, disallowed_ids: Sequence[int] = (), generator: torch.Generator | None = None
) -> torch.Tensor:
    """One token per row of ``logits`` (N, V), drawn from ``softmax(logits)`` by Gumbel-max
    (as ELECTRA's ``sample_from_softmax``), never one of ``disallowed_ids``. No gradient: the
    result is an index, and the generator learns only from its MLM loss.

    >>> sample_replacements(torch.tensor([[0.0, 50.0, 0.0]])).tolist()
    [1]
    """
    scores = logits.detach().float()
    if disallowed_ids:
        scores = scores.index_fill(-1, torch.as_tensor(list(disallowed_ids), device=scores.device), float("-inf"))
    uniform = torch.rand(scores.shape, generator=generator, device=scores.device if generator is None else "cpu")
    uniform = uniform.to(scores.device).clamp_(min=1e-20)  # no log(0)
    gumbel = -torch.log(-torch.log(uniform))
    return (scores + gumbel).argmax(dim=-1)


@dataclass
class ElectraOutput:
    """What one ELECTRA step computes. N is the number of masked positions."""

    generator_logits: torch.Tensor
    """(N, V) the generator's MLM logits at the masked positions, in row-major order."""
    masked: torch.Tensor
    """(B, T) bool: the masked (target) positions."""
    original: torch.Tensor
    """(B, T) the uncorrupted tokens."""
    corrupted: torch.Tensor
    """(B, T) the discriminator's input: ``original`` with a generator sample at every masked position."""
    labels: torch.Tensor
    """(B, T) bool: True where ``corrupted`` differs from ``original`` (a replaced token)."""
    discriminator_logits: torch.Tensor
    """(B, T) the discriminator's logits (positive: replaced)."""


def electra_forward(
    model: RobertaModel,
    src_tokens: torch.Tensor,
    targets: torch.Tensor,
    *,
    segment_labels: torch.Tensor | None = None,
    disallowed_ids: Sequence[int] | None = None,
    generator: torch.Generator | None = None,
) -> ElectraOutput:
    """One ELECTRA forward pass on a masked batch.

    Args:
        model: a discriminator with ``generator`` and ``discriminator_head``
            (:class:`ElectraPretrainingModel`, or the plugin's pretraining ``electra_ext``).
        src_tokens: (B, T) the masked input (``<mask>`` or kept tokens at target positions).
        targets: (B, T) the original token at target positions, ``padding_idx`` elsewhere (the
            masked-LM convention of :class:`~roberta_ext.data.masking.BatchMasker`).
        disallowed_ids: tokens never sampled; padding always is (a sampled ``<pad>`` would be
            read as padding). Pass ``<mask>`` too.
        generator: a ``torch.Generator`` for the sampling (default: torch's global one).
    """
    pad = model.cfg.padding_idx
    masked = targets.ne(pad)  # (B, T)
    original = torch.where(masked, targets, src_tokens)  # (B, T)
    generator_logits, _ = getattr(model, GENERATOR)(
        src_tokens, masked_tokens=masked, segment_labels=segment_labels
    )  # (N, V)
    disallowed = sorted({pad, *(disallowed_ids or ())})
    sampled = sample_replacements(generator_logits, disallowed_ids=disallowed, generator=generator)  # (N,)
    corrupted = original.masked_scatter(masked, sampled)  # (B, T); row-major, as the LM head gathered
    labels = corrupted.ne(original)  # a sample equal to the original is an original
    features = model.features(corrupted, segment_labels=segment_labels).last_hidden_state  # (B, T, C)
    discriminator_logits = getattr(model, DISCRIMINATOR_HEAD)(features)  # (B, T)
    return ElectraOutput(generator_logits, masked, original, corrupted, labels, discriminator_logits)


@dataclass
class ElectraLoss:
    """The objective and its parts; sums and counts, so that batches and ranks add up."""

    loss: torch.Tensor
    """generator MLM mean + weight * discriminator BCE mean: what is minimised (one batch)."""
    generator_loss: torch.Tensor
    """Sum of the generator's cross-entropy (nats) over the masked positions."""
    masked: int
    discriminator_loss: torch.Tensor
    """Sum of the discriminator's binary cross-entropy (nats) over the non-padding tokens."""
    tokens: int
    replaced_correct: int
    """Replaced tokens the discriminator calls replaced."""
    replaced: int
    original_correct: int
    """Original (non-padding) tokens the discriminator calls original."""
    original: int


def electra_loss(
    output: ElectraOutput, *, padding_idx: int, discriminator_weight: float = DEFAULT_DISCRIMINATOR_WEIGHT
) -> ElectraLoss:
    """ELECTRA's objective: mean MLM cross-entropy of the generator over masked positions plus
    ``discriminator_weight`` times the mean BCE of the discriminator over non-padding tokens.

    A batch without masked positions contributes a zero MLM term (and still trains the
    discriminator), so that distributed ranks stay in step.
    """
    real = output.original.ne(padding_idx)  # (B, T)
    num_masked, num_tokens = int(output.masked.sum()), int(real.sum())
    gen_targets = output.original[output.masked]  # (N,)
    gen_sum = (
        F.cross_entropy(output.generator_logits.float(), gen_targets, reduction="sum")
        if num_masked
        else output.generator_logits.float().sum() * 0.0
    )
    logits = output.discriminator_logits.float()[real]  # (M,)
    labels = output.labels[real]  # (M,)
    disc_sum = F.binary_cross_entropy_with_logits(logits, labels.float(), reduction="sum")
    loss = gen_sum / max(num_masked, 1) + discriminator_weight * disc_sum / max(num_tokens, 1)
    with torch.no_grad():
        predicted = logits > 0
        replaced = int(labels.sum())
        replaced_correct = int((predicted & labels).sum())
        original_correct = int((~predicted & ~labels).sum())
    return ElectraLoss(
        loss,
        gen_sum,
        num_masked,
        disc_sum,
        num_tokens,
        replaced_correct,
        replaced,
        original_correct,
        num_tokens - replaced,
    )


# ----------------------------------------------------------------------------- inference


@torch.no_grad()
def replaced_token_probs(
    model: RobertaModel, tokens: torch.Tensor, segment_labels: torch.Tensor | None = None
) -> torch.Tensor:
    """The discriminator's probability that each token was replaced: (T,) -> (1, T), (B, T)
    -> (B, T); 0 at padding. The seed's "real or fake" example.

    >>> from roberta_ext.families import preset
    >>> model = ElectraPretrainingModel(preset("electra-tiny")).eval()
    >>> replaced_token_probs(model, torch.tensor([0, 5, 6, 2])).shape
    torch.Size([1, 4])
    """
    head = getattr(model, DISCRIMINATOR_HEAD, None)
    if head is None:
        raise ValueError(
            "this model has no ELECTRA discriminator head (discriminator_head): "
            "replaced_token_probs needs a checkpoint from ELECTRA pretraining"
        )
    if tokens.dim() == 1:
        tokens = tokens.unsqueeze(0)
    tokens = tokens.to(model.device)
    segments = None if segment_labels is None else segment_labels.to(model.device).view_as(tokens)
    features = model.features(tokens, segment_labels=segments).last_hidden_state  # (B, T, C)
    probs = torch.sigmoid(head(features).float())  # (B, T)
    return probs.masked_fill(tokens.eq(model.cfg.padding_idx), 0.0)


# ----------------------------------------------------------------------------- checkpoints

PRETRAINING_ONLY = (GENERATOR,)
"""State-dict prefixes of ELECTRA pretraining that a served discriminator does not need."""


def discriminator_state(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``state_dict`` without the generator: what a hub loads from an ELECTRA pretraining
    checkpoint. Other checkpoints come back unchanged. Keeps ``discriminator_head.*`` (see
    :func:`has_discriminator_head` and :class:`ElectraDiscriminator`).

    >>> sorted(discriminator_state({"generator.x": torch.zeros(1), "encoder.y": torch.zeros(1)}))
    ['encoder.y']
    """
    return {k: v for k, v in state_dict.items() if not k.startswith(tuple(p + "." for p in PRETRAINING_ONLY))}


def has_discriminator_head(keys: Iterable[str]) -> bool:
    """Whether a state dict (or its keys) holds an ELECTRA discriminator head (``discriminator_head.*``)."""
    return any(key.startswith(DISCRIMINATOR_HEAD + ".") for key in keys)


def _serving_model(cfg: EncoderConfig, keys: Collection[str], has_lm_head: bool) -> RobertaModel:
    """The discriminator with its head when the checkpoint has one (replaced-token detection
    stays servable), else the plain encoder."""
    if has_discriminator_head(keys):
        return ElectraDiscriminator(cfg, has_lm_head=has_lm_head)
    return RobertaModel(cfg, has_lm_head=has_lm_head)


def _read_transformers_config(config: Mapping[str, Any], values: dict[str, Any]) -> None:
    # Embeddings narrower than the layers are projected (ELECTRA-small); the classifier's
    # activation is GELU (dense -> GELU -> out_proj).
    size = config.get("embedding_size", config["hidden_size"])
    values.update(embedding_size=size if size != config["hidden_size"] else None, pooler_activation_fn="gelu")


def _write_transformers_config(cfg: EncoderConfig, config: dict[str, Any]) -> None:
    config.update(embedding_size=cfg.embed_dim)


FAMILY = Family(
    name="electra",
    presets={
        "tiny": lambda: electra_config(**TINY, embedding_size=16),
        "small": lambda: electra_config(
            encoder_embed_dim=256, encoder_ffn_embed_dim=1024, encoder_attention_heads=4, embedding_size=128
        ),
        "base": electra_config,
        "large": lambda: electra_config(**LARGE),
    },
    tokenizer="wordpiece",  # BERT's uncased vocabulary
    pretraining_modules=(GENERATOR, DISCRIMINATOR_HEAD),
    serving_model=_serving_model,
    transformers=TransformersLayout(
        model_type="electra",
        class_prefix="Electra",
        base_prefix="electra.",
        layer_prefix="{p}encoder.layer.{i}.",
        layer=BERT_STYLE_LAYER,
        modules=[("{p}" + theirs, ours) for theirs, ours in BERT_STYLE_EMBEDDINGS]
        + [("{p}embeddings_project", ENCODER_PREFIX + "embed_proj")],
        lm_head=[],
        lm_decoder="generator_lm_head",
        # The discriminator's replaced-token-detection head is our discriminator_head.
        task_heads={
            "ForPreTraining": [
                ("discriminator_predictions.dense", "discriminator_head.dense"),
                ("discriminator_predictions.dense_prediction", "discriminator_head.dense_prediction"),
            ],
            "ForSequenceClassification": [
                ("classifier.dense", f"classification_heads.{SEQUENCE_HEAD}.dense"),
                ("classifier.out_proj", f"classification_heads.{SEQUENCE_HEAD}.out_proj"),
            ],
        },
        factorized_embeddings=True,
        read_config=_read_transformers_config,
        write_config=_write_transformers_config,
    ),
    fairseq_model="electra_ext",
    architecture_sizes=("small", "base", "large"),
    # The generator's width as a fraction of the discriminator's: 1/4 for small and large, 1/3
    # for base (256 wide, 4 heads), as in the paper.
    architecture_defaults={
        "small": {"generator_fraction": 0.25},
        "base": {"generator_fraction": 1 / 3},
        "large": {"generator_fraction": 0.25},
    },
)


__all__ = [
    "DISCRIMINATOR_HEAD",
    "ElectraDiscriminator",
    "ElectraDiscriminatorHead",
    "ElectraLoss",
    "ElectraOutput",
    "ElectraPretrainingModel",
    "GENERATOR",
    "discriminator_state",
    "electra_config",
    "electra_forward",
    "electra_loss",
    "freeze_unused_lm_head",
    "generator_config",
    "make_discriminator_head",
    "make_generator",
    "has_discriminator_head",
    "replaced_token_probs",
    "sample_replacements",
]
