"""The transformer encoder core, written once for every family.

Module and parameter names are fairseq's (``embed_tokens``, ``layers.N.self_attn.q_proj``,
``self_attn_layer_norm``, ``fc1`` ...), so a fairseq RoBERTa state dict loads here, and ours
loads in fairseq, without renaming a single key. Unlike fairseq, tensors are batch-first:
``(B, T, C)`` throughout. How a batch with padding is attended (packed or masked, and by which
kernel) is the encoder's choice among the strategies of :mod:`roberta_ext.modeling.attention`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from .attention import PACKED_ATTENTION, Packing, checked_strategy, default_attention, packing_for
from .config import EncoderConfig
from .dropout import Dropout, attention


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


ACTIVATIONS: dict[str, tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]] = {
    "gelu": (F.gelu, torch.ops.aten.gelu_),  # the exact, erf-based one
    "gelu_accurate": (  # fairseq's name for the tanh approximation
        lambda x: F.gelu(x, approximate="tanh"),
        lambda x: torch.ops.aten.gelu_(x, approximate="tanh"),
    ),
    "relu": (F.relu, torch.relu_),
    "tanh": (torch.tanh, torch.tanh_),
    "linear": (_identity, _identity),
}
"""fairseq's activation names -> (the function, the same writing into its input)."""


def get_activation_fn(name: str, *, in_place: bool = False) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation called ``name`` in fairseq (``gelu`` is the exact, erf-based one);
    ``in_place``: the same, writing into its input (for inference: see
    :meth:`TransformerEncoderLayer.forward`).

    >>> get_activation_fn("gelu")(torch.zeros(2)).tolist()
    [0.0, 0.0]
    >>> x = torch.tensor([-1.0, 2.0])
    >>> get_activation_fn("relu", in_place=True)(x) is x, x.tolist()
    (True, [0.0, 2.0])
    """
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation function {name!r}")
    return ACTIVATIONS[name][in_place]


def make_positions(tokens: torch.Tensor, padding_idx: int) -> torch.Tensor:
    """Position ids as fairseq counts them: ``padding_idx + 1, padding_idx + 2, ...`` on real
    tokens and ``padding_idx`` on padding, so the position of a token does not depend on how
    much padding precedes it (left- and right-padded batches agree).

    >>> make_positions(torch.tensor([[0, 5, 2, 1, 1]]), padding_idx=1).tolist()
    [[2, 3, 4, 1, 1]]
    """
    mask = tokens.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


class LearnedPositionalEmbedding(nn.Embedding):
    """Position table with fairseq's offset: row ``padding_idx`` is padding, real positions
    start at ``padding_idx + 1`` (hence 514 rows for 512 tokens)."""

    padding_idx: int  # never None here (nn.Embedding's is optional)

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx)
        self.max_positions = num_embeddings - padding_idx - 1

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, T) -> (B, T, C)
        positions = make_positions(tokens, self.padding_idx)
        return F.embedding(positions, self.weight, self.padding_idx)


class AbsolutePositionalEmbedding(nn.Embedding):
    """BERT's position table: position ``t`` of a row is table row ``t``, padding or not."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.max_positions = num_embeddings

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:  # (B, T) -> (1, T, C), broadcast over B
        return self.weight[: tokens.size(1)].unsqueeze(0)


class MultiheadSelfAttention(nn.Module):
    """Self-attention through ``F.scaled_dot_product_attention`` with fairseq's parameter names
    (in training on the CPU, where SDPA with dropout runs unfused anyway, through
    :func:`~roberta_ext.modeling.dropout.attention`, whose dropout mask is cheaper)."""

    def __init__(self, embed_dim: int, num_heads: int, dropout: float) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        # Created in fairseq's order (k, v, q) so that parameter iteration order matches too.
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, packing: Packing | None = None) -> torch.Tensor:
        """``x``: (B, T, C) with ``attn_mask`` (B, 1, 1, T) bool, True where a key may be attended;
        or packed (N, C) — the real tokens of several sequences back to back — with ``packing``."""
        if packing is not None:
            return self._forward_packed(x, packing)
        batch, length, _ = x.shape

        def split_heads(t: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, H, T, D)
            return t.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)

        q = split_heads(self.q_proj(x))
        k = split_heads(self.k_proj(x))
        v = split_heads(self.v_proj(x))
        dropout_p = self.dropout if self.training else 0.0
        out = attention(q, k, v, attn_mask, dropout_p)  # (B, H, T, D)
        out = out.transpose(1, 2).reshape(batch, length, self.embed_dim)  # (B, T, C)
        return self.out_proj(out)

    def _forward_packed(self, x: torch.Tensor, packing: Packing) -> torch.Tensor:  # (N, C) -> (N, C)
        # The projections run once over every real token; only the attention itself sees the
        # sequences, so no projection or feed-forward FLOP is spent on padding.
        q, k, v = (proj(x).view(-1, self.num_heads, self.head_dim) for proj in (self.q_proj, self.k_proj, self.v_proj))
        dropout_p = self.dropout if self.training else 0.0
        attend = PACKED_ATTENTION[packing.attention_for(q, dropout_p)]
        return self.out_proj(attend(q, k, v, packing, dropout_p).reshape(-1, self.embed_dim))


class TransformerEncoderLayer(nn.Module):
    """One layer: self-attention and feed-forward blocks, each with a residual and a LayerNorm
    after it (post-LN, RoBERTa/BERT) or before it (pre-LN)."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        dim = cfg.encoder_embed_dim
        self.normalize_before = cfg.encoder_normalize_before
        self.self_attn = MultiheadSelfAttention(dim, cfg.encoder_attention_heads, cfg.attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(dim, eps=cfg.layer_norm_eps)
        self.fc1 = nn.Linear(dim, cfg.encoder_ffn_embed_dim)
        self.fc2 = nn.Linear(cfg.encoder_ffn_embed_dim, dim)
        self.final_layer_norm = nn.LayerNorm(dim, eps=cfg.layer_norm_eps)
        self.activation_fn = get_activation_fn(cfg.activation_fn)
        self.activation_fn_ = get_activation_fn(cfg.activation_fn, in_place=True)
        self.dropout = Dropout(cfg.dropout)
        self.activation_dropout = Dropout(cfg.activation_dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, packing: Packing | None = None) -> torch.Tensor:
        """``x``: (B, T, C) with ``attn_mask``, or packed (N, C) with ``packing`` (see the attention).

        Without autograd (``torch.no_grad``, ``inference_mode``) the residual sums and the
        activation are written into the fresh outputs of ``out_proj``, ``fc2`` and ``fc1`` instead
        of new tensors: the same bits, and fewer passes over newly allocated memory — 8% of a
        base layer's time on the CPU, 12-25% of a 384-wide one's. A forward hook on those three
        layers then sees its output overwritten afterwards (clone it in the hook to keep it)."""
        in_place = not torch.is_grad_enabled()

        def add(update: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
            return update.add_(residual) if in_place else residual + update

        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = add(self.dropout(self.self_attn(x, attn_mask, packing)), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        activation = self.activation_fn_ if in_place else self.activation_fn
        x = self.activation_dropout(activation(self.fc1(x)))  # (..., F)
        x = add(self.dropout(self.fc2(x)), residual)
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


# What each ``share_layers`` mode shares: these sub-modules of layer 0 are used by every layer.
SHARED_PARTS: dict[str, tuple[str, ...]] = {
    "none": (),
    "attention": ("self_attn", "self_attn_layer_norm"),
    "ffn": ("fc1", "fc2", "final_layer_norm"),
}


def build_layers(cfg: EncoderConfig) -> nn.ModuleList:
    """``cfg.encoder_layers`` layers, sharing parameters as ``cfg.share_layers`` says (ALBERT).

    Shared parameters are one tensor used by several layers: ``parameters()`` counts them
    once, and ``state_dict()`` lists them under each layer's name, as the same tensor.

    >>> cfg = EncoderConfig(encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
    ...                     encoder_attention_heads=4, share_layers="all")
    >>> layers = build_layers(cfg)
    >>> layers[0] is layers[1]
    True
    """
    if cfg.share_layers == "all":
        return nn.ModuleList([TransformerEncoderLayer(cfg)] * cfg.encoder_layers)
    layers = nn.ModuleList(TransformerEncoderLayer(cfg) for _ in range(cfg.encoder_layers))
    for layer in layers[1:]:
        for part in SHARED_PARTS[cfg.share_layers]:
            setattr(layer, part, getattr(layers[0], part))
    return layers


class TransformerEncoder(nn.Module):
    """Embeddings and the layer stack: fairseq's ``encoder.sentence_encoder``.

    The embeddings are the sum of token, position and (BERT, ALBERT) segment embeddings,
    normalised; when they are narrower than the layers (ALBERT's factorization), a linear
    ``embed_proj`` maps them to the hidden size.
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.padding_idx = cfg.padding_idx
        dim, embed_dim = cfg.encoder_embed_dim, cfg.embed_dim
        self.embed_tokens = nn.Embedding(cfg.vocab_size, embed_dim, cfg.padding_idx)
        self.embed_positions: AbsolutePositionalEmbedding | LearnedPositionalEmbedding
        if cfg.position_style == "absolute":
            self.embed_positions = AbsolutePositionalEmbedding(cfg.num_position_embeddings, embed_dim)
        else:
            self.embed_positions = LearnedPositionalEmbedding(cfg.num_position_embeddings, embed_dim, cfg.padding_idx)
        # fairseq's name for BERT's token-type embeddings.
        self.segment_embeddings = nn.Embedding(cfg.type_vocab_size, embed_dim) if cfg.type_vocab_size else None
        self.layernorm_embedding = nn.LayerNorm(embed_dim, eps=cfg.layer_norm_eps) if cfg.layernorm_embedding else None
        self.embed_proj = nn.Linear(embed_dim, dim) if embed_dim != dim else None
        self.dropout = Dropout(cfg.dropout)
        self.layers = build_layers(cfg)
        # Pre-LN stacks end with a LayerNorm; post-LN stacks already end normalised.
        self.layer_norm = nn.LayerNorm(dim, eps=cfg.layer_norm_eps) if cfg.encoder_normalize_before else None
        # fairseq keeps a format version in every TransformerEncoder state dict; keeping it
        # here too lets state dicts move between the two with strict loading on both sides.
        self.register_buffer("version", torch.Tensor([3]))
        self.inference_forward: Callable[..., tuple[torch.Tensor, list[torch.Tensor]]] | None = None
        """Set by :func:`roberta_ext.compiled.compile_model`: in eval mode, ``forward`` hands its
        arguments to it (the compiled, shape-bucketed :meth:`forward_masked`)."""
        self.attention: str | None = cfg.attention
        """How this encoder attends over a batch with padding (one of
        :data:`~roberta_ext.modeling.attention.ATTENTION_STRATEGIES`; None: ``$ROBERTA_EXT_ATTENTION``,
        else ``auto``). The config's choice to start with; :meth:`set_attention` changes it for
        this encoder alone (the config may be shared with other models)."""

    def max_positions(self) -> int:
        return self.embed_positions.max_positions

    def set_attention(self, strategy: str | None) -> str | None:
        """Choose how this encoder attends over padded batches (None: back to
        ``$ROBERTA_EXT_ATTENTION``, else ``auto``); returns the choice it replaces."""
        previous = self.attention
        self.attention = None if strategy is None else checked_strategy(strategy)
        return previous

    def forward(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``tokens``: (B, T) indices; ``segment_labels``: (B, T) segment ids for models with
        segment embeddings (default: all 0). Returns the last layer's features (B, T, C) and,
        when ``return_all_hiddens``, the embedding output followed by every layer's output.
        How a batch with padding is attended: :attr:`attention`."""
        if self.inference_forward is not None and not self.training:
            return self.inference_forward(tokens, return_all_hiddens, segment_labels)
        return self.forward_eager(tokens, return_all_hiddens, segment_labels)

    def forward_eager(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` without a compiled inference path."""
        padding_mask = tokens.eq(self.padding_idx)  # (B, T), True on padding
        has_pads = bool(padding_mask.any())
        x = self.embed(tokens, segment_labels)  # (B, T, C)
        if not has_pads:
            return self._layers(x, None, return_all_hiddens)
        # fairseq zeroes padded positions once after the embeddings; do the same so that
        # every returned hidden state matches it position for position.
        x = x * (~padding_mask).unsqueeze(-1).type_as(x)
        # Resolved once per batch: the environment is read only when this model has not chosen.
        packing = packing_for(self.attention or default_attention(), padding_mask)
        if packing is not None:
            return self._forward_packed(x, packing, return_all_hiddens)
        return self._layers(x, (~padding_mask)[:, None, None, :], return_all_hiddens)  # mask (B, 1, 1, T)

    def forward_masked(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` with every layer on the whole (B, T) batch and padded keys masked out,
        whatever the padding: no branch on the data and no host synchronisation, so that
        ``torch.compile`` captures it in one graph per shape (:mod:`roberta_ext.compiled`). Equal
        to :meth:`forward` on real tokens. A row with no real token gets no defined output.

        >>> cfg = EncoderConfig(vocab_size=64, encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
        ...                     encoder_attention_heads=4, max_positions=64)
        >>> encoder = TransformerEncoder(cfg).eval()
        >>> tokens = torch.tensor([[0, 5, 6, 2], [0, 7, 2, 1]])
        >>> torch.allclose(encoder.forward_masked(tokens)[0][1, :3], encoder(tokens)[0][1, :3], atol=1e-6)
        True
        """
        padding_mask = tokens.eq(self.padding_idx)  # (B, T), True on padding
        x = self.embed(tokens, segment_labels)  # (B, T, C)
        x = x * (~padding_mask).unsqueeze(-1).type_as(x)
        return self._layers(x, (~padding_mask)[:, None, None, :], return_all_hiddens)

    def embed(self, tokens: torch.Tensor, segment_labels: torch.Tensor | None = None) -> torch.Tensor:
        """The embeddings of (B, T) ``tokens``: token + position (+ segment) embeddings, normalised,
        dropped out and projected to the layers' width: (B, T, C)."""
        x = self.embed_tokens(tokens) + self.embed_positions(tokens)  # (B, T, E)
        if self.segment_embeddings is not None:
            if segment_labels is None:
                x = x + self.segment_embeddings.weight[0]
            else:
                x = x + self.segment_embeddings(segment_labels)
        if self.layernorm_embedding is not None:
            x = self.layernorm_embedding(x)
        x = self.dropout(x)
        if self.embed_proj is not None:
            x = self.embed_proj(x)  # (B, T, C)
        return x

    def _layers(
        self, x: torch.Tensor, attn_mask: torch.Tensor | None, return_all_hiddens: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The layer stack on (B, T, C) with ``attn_mask`` (B, 1, 1, T) or None (no padding)."""
        hiddens = [x] if return_all_hiddens else []
        for layer in self.layers:
            x = layer(x, attn_mask)
            if return_all_hiddens:
                hiddens.append(x)
        if self.layer_norm is not None:
            x = self.layer_norm(x)
        return x, hiddens

    def _forward_packed(
        self, x: torch.Tensor, packing: Packing, return_all_hiddens: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The layer stack on real tokens only: (B, T, C) is packed to (N, C), and every output
        is scattered back to (B, T, C) with zeros at padding positions."""
        packed = packing.pack(x)  # (N, C)
        hiddens = [x] if return_all_hiddens else []
        for layer in self.layers:
            packed = layer(packed, None, packing)
            if return_all_hiddens:
                hiddens.append(packing.unpack(packed))
        if self.layer_norm is not None:
            packed = self.layer_norm(packed)
        return packing.unpack(packed), hiddens


def init_bert_params(module: nn.Module) -> None:
    """BERT's initialisation, as fairseq applies it: N(0, 0.02) weights, zero biases, zero
    padding rows. Apply with ``model.apply(init_bert_params)``. Modules on the meta device (built
    only to receive a checkpoint's weights) are skipped: there is nothing to initialise, and
    ``normal_`` on meta tensors would import torch._dynamo (over a second of a cold load)."""
    weight = getattr(module, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.is_meta:
        return
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if module.padding_idx is not None:
            with torch.no_grad():
                module.weight[module.padding_idx].zero_()


__all__ = [
    "AbsolutePositionalEmbedding",
    "LearnedPositionalEmbedding",
    "build_layers",
    "MultiheadSelfAttention",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "get_activation_fn",
    "init_bert_params",
    "make_positions",
]
