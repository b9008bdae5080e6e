"""The transformer encoder core, written once for every family.

Module and parameter names are fairseq's (``embed_tokens``, ``layers.N.self_attn.q_proj``,
``self_attn_layer_norm``, ``fc1`` ...), so a fairseq RoBERTa state dict loads here, and ours
loads in fairseq, without renaming a single key. Unlike fairseq, tensors are batch-first:
``(B, T, C)`` throughout. How a batch with padding is attended (packed or masked, and by which
kernel) is the encoder's choice among the strategies of :mod:`roberta_ext.modeling.attention`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .attention import (
    PACKED_ATTENTION,
    Packing,
    attends_blockwise,
    checked_strategy,
    default_attention,
    local_attention,
    packing_for,
    real_positions,
    window_mask,
)
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

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) -> (B, T, C); ``positions`` (B, T), from 0 on real tokens: where they do not
        count from each row's first token (documents packed into a row restart at each)."""
        if positions is None:
            ids = make_positions(tokens, self.padding_idx)
        else:
            ids = torch.where(tokens.eq(self.padding_idx), self.padding_idx, positions + self.padding_idx + 1)
        return F.embedding(ids, self.weight, self.padding_idx)


class AbsolutePositionalEmbedding(nn.Embedding):
    """BERT's position table: position ``t`` of a row is table row ``t``, padding or not."""

    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__(num_embeddings, embedding_dim)
        self.max_positions = num_embeddings

    def forward(self, tokens: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """(B, T) -> (1, T, C), broadcast over B; with ``positions`` (B, T): (B, T, C)."""
        if positions is not None:
            return F.embedding(positions, self.weight)
        return self.weight[: tokens.size(1)].unsqueeze(0)


Rotary = tuple[torch.Tensor, torch.Tensor]
"""The cosines and sines (..., T, D) that rotate the queries and keys of T tokens (:func:`rotary`)."""


def rotary(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype) -> Rotary:
    """Rotary position embeddings (RoPE, rotate-half style over the whole head, as transformers'
    ModernBERT): the cosines and sines (..., T, D) for ``positions`` (..., T), from inverse
    frequencies computed in fp32, then cast to ``dtype``.

    >>> cos, sin = rotary(torch.arange(3), 4, 10000.0, torch.float32)
    >>> cos.shape, cos[0].tolist()
    (torch.Size([3, 4]), [1.0, 1.0, 1.0, 1.0])
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float, device=positions.device) / head_dim))
    freqs = positions[..., None].float() * inv_freq  # (..., T, D / 2)
    angles = torch.cat((freqs, freqs), dim=-1)  # (..., T, D)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(x: torch.Tensor, rotation: Rotary) -> torch.Tensor:
    """Rotate ``x`` (..., T, H, D) — queries or keys, padded (B, T, H, D) or packed (N, H, D) —
    by ``rotation``'s (..., T, D) cosines and sines, in fp32 as transformers does."""
    cos, sin = (t.unsqueeze(-2) for t in rotation)  # (..., T, 1, D): the same for every head
    x32 = x.float()
    half = x32.shape[-1] // 2
    rotated = torch.cat((-x32[..., half:], x32[..., :half]), dim=-1)
    return (x32 * cos + rotated * sin).to(x.dtype)


class MultiheadSelfAttention(nn.Module):
    """Self-attention through ``F.scaled_dot_product_attention`` with fairseq's parameter names
    (in training on the CPU, where SDPA with dropout runs unfused anyway, through
    :func:`~roberta_ext.modeling.dropout.attention`, whose dropout mask is cheaper)."""

    def __init__(
        self, embed_dim: int, num_heads: int, dropout: float, *, bias: bool = True, fused: bool = False
    ) -> None:
        super().__init__()
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = dropout
        if fused:  # ModernBERT's Wqkv: query | key | value stacked along the output
            self.qkv_proj: nn.Linear | None = nn.Linear(embed_dim, 3 * embed_dim, bias=bias)
        else:  # created in fairseq's order (k, v, q) so that parameter iteration order matches too
            self.qkv_proj = None
            self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
            self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
            self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values (..., C) of ``x`` (..., C): one product when fused, else three."""
        if self.qkv_proj is not None:
            q, k, v = self.qkv_proj(x).chunk(3, dim=-1)
            return q, k, v
        return self.q_proj(x), self.k_proj(x), self.v_proj(x)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None,
        packing: Packing | None = None,
        rotation: Rotary | None = None,
        window: int | None = None,
    ) -> torch.Tensor:
        """``x``: (B, T, C) with ``attn_mask`` (B, 1, 1, T) — or (B, 1, T, T) for a local layer —
        bool, True where a key may be attended; or packed (N, C) — the real tokens of several
        sequences back to back — with ``packing`` and a local layer's ``window``. ``rotation``:
        the rotary cosines and sines of the tokens' positions, (B or 1, T, D) or packed (N, D)."""
        if packing is not None:
            return self._forward_packed(x, packing, rotation, window)
        batch, length, _ = x.shape
        q, k, v = (t.view(batch, length, self.num_heads, self.head_dim) for t in self.project(x))  # (B, T, H, D)
        if rotation is not None:
            q, k = apply_rotary(q, rotation), apply_rotary(k, rotation)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, D)
        dropout_p = self.dropout if self.training else 0.0
        if window is not None and (attn_mask is None or attn_mask.shape[-2] == 1) and attends_blockwise(length, window):
            # A long row, padded (a (B, 1, 1, T) key mask) or not: only the blocks inside the window.
            out = local_attention(q, k, v, window, dropout_p, attn_mask)  # (B, H, T, D)
        else:
            out = attention(q, k, v, attn_mask, dropout_p)  # (B, H, T, D)
        out = out.transpose(1, 2).reshape(batch, length, self.embed_dim)  # (B, T, C)
        return self.out_proj(out)

    def _forward_packed(
        self, x: torch.Tensor, packing: Packing, rotation: Rotary | None, window: int | None
    ) -> torch.Tensor:  # (N, C) -> (N, C)
        # The projections run once over every real token; only the attention itself sees the
        # sequences, so no projection or feed-forward FLOP is spent on padding.
        q, k, v = (t.view(-1, self.num_heads, self.head_dim) for t in self.project(x))  # (N, H, D)
        if rotation is not None:
            q, k = apply_rotary(q, rotation), apply_rotary(k, rotation)
        dropout_p = self.dropout if self.training else 0.0
        attend = PACKED_ATTENTION[packing.attention_for(q, dropout_p)]
        # A global layer calls the strategy as every family always has; a local one adds its window.
        out = attend(q, k, v, packing, dropout_p) if window is None else attend(q, k, v, packing, dropout_p, window)
        return self.out_proj(out.reshape(-1, self.embed_dim))


def layer_norm(cfg: EncoderConfig, dim: int) -> nn.LayerNorm:
    """A LayerNorm of the config's epsilon, with a bias unless ``cfg.norm_bias`` is False."""
    return nn.LayerNorm(dim, eps=cfg.layer_norm_eps, bias=cfg.norm_bias)


class TransformerEncoderLayer(nn.Module):
    """One layer: self-attention and feed-forward blocks, each with a residual and a LayerNorm
    after it (post-LN, RoBERTa/BERT) or before it (pre-LN; ModernBERT's layer 0 normalises only
    its feed-forward input). The feed-forward block is fc1 -> activation -> fc2, or gated
    (``cfg.gated_ffn``: fc1 gives the input and the gate, activation(input) * gate -> fc2)."""

    def __init__(self, cfg: EncoderConfig, index: int = 0) -> None:
        super().__init__()
        dim = cfg.encoder_embed_dim
        self.normalize_before = cfg.encoder_normalize_before
        self.gated = cfg.gated_ffn
        self.self_attn = MultiheadSelfAttention(
            dim, cfg.encoder_attention_heads, cfg.attention_dropout, bias=cfg.attention_bias, fused=cfg.fused_qkv
        )
        no_attention_norm = index == 0 and cfg.encoder_normalize_before and not cfg.first_layer_attention_norm
        self.self_attn_layer_norm: nn.Module = nn.Identity() if no_attention_norm else layer_norm(cfg, dim)
        ffn_dim = cfg.encoder_ffn_embed_dim
        self.fc1 = nn.Linear(dim, 2 * ffn_dim if cfg.gated_ffn else ffn_dim, bias=cfg.ffn_bias)
        self.fc2 = nn.Linear(ffn_dim, dim, bias=cfg.ffn_bias)
        self.final_layer_norm = layer_norm(cfg, dim)
        self.activation_fn = get_activation_fn(cfg.activation_fn)
        self.activation_fn_ = get_activation_fn(cfg.activation_fn, in_place=True)
        self.dropout = Dropout(cfg.dropout)
        self.activation_dropout = Dropout(cfg.activation_dropout)

    def forward(
        self,
        x: torch.Tensor,
        attn_mask: torch.Tensor | None,
        packing: Packing | None = None,
        rotation: Rotary | None = None,
        window: int | None = None,
    ) -> torch.Tensor:
        """``x``: (B, T, C) with ``attn_mask``, or packed (N, C) with ``packing``; ``rotation`` and
        ``window`` for rotary positions and local layers (see the attention).

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
        x = add(self.dropout(self.self_attn(x, attn_mask, packing, rotation, window)), residual)
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        activation = self.activation_fn_ if in_place else self.activation_fn
        if self.gated:
            hidden, gate = self.fc1(x).chunk(2, dim=-1)  # (..., F) each
            x = self.activation_dropout(self.activation_fn(hidden) * gate)
        else:
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
    layers = nn.ModuleList(TransformerEncoderLayer(cfg, i) for i in range(cfg.encoder_layers))
    for layer in layers[1:]:
        for part in SHARED_PARTS[cfg.share_layers]:
            setattr(layer, part, getattr(layers[0], part))
    return layers


@dataclass(frozen=True)
class AttentionInputs:
    """What every layer's attention needs for one batch, computed once per forward and shared by
    the layers: the key mask (padded path) or the packing, and — for rotary positions and local
    layers — each kind of layer's rotation, mask and window."""

    mask: torch.Tensor | None = None
    """Global layers' mask on the padded path: (B, 1, 1, T), or None (no padding, or packed)."""
    packing: Packing | None = None
    rotation: Rotary | None = None
    """Global layers' rotary cosines and sines, (B or 1, T, D) or packed (N, D); None: no rotary."""
    local_mask: torch.Tensor | None = None
    """Local layers' mask on the padded path: (B or 1, 1, T, T), the window and the padded keys."""
    local_rotation: Rotary | None = None
    window: int | None = None
    """How far a local layer's tokens see on either side (``local_attention // 2``)."""

    def layer_args(self, local: bool) -> tuple[Any, ...]:
        """The arguments after ``x`` of a global or a local :class:`TransformerEncoderLayer`."""
        if local:
            return self.local_mask, self.packing, self.local_rotation, self.window
        return self.mask, self.packing, self.rotation, None


class TransformerEncoder(nn.Module):
    """Embeddings and the layer stack: fairseq's ``encoder.sentence_encoder``.

    The embeddings are the sum of token, position and (BERT, ALBERT) segment embeddings,
    normalised; when they are narrower than the layers (ALBERT's factorization), a linear
    ``embed_proj`` maps them to the hidden size. With rotary positions (ModernBERT) there is no
    position table: the attention rotates queries and keys by the tokens' positions among the
    real tokens of their row, from 0, and the local layers (``cfg.local_attention``) attend within
    their window.
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.padding_idx = cfg.padding_idx
        dim, embed_dim = cfg.encoder_embed_dim, cfg.embed_dim
        self.embed_tokens = nn.Embedding(cfg.vocab_size, embed_dim, cfg.padding_idx)
        self.embed_positions: AbsolutePositionalEmbedding | LearnedPositionalEmbedding | None
        if cfg.position_style == "absolute":
            self.embed_positions = AbsolutePositionalEmbedding(cfg.num_position_embeddings, embed_dim)
        elif cfg.position_style == "fairseq":
            self.embed_positions = LearnedPositionalEmbedding(cfg.num_position_embeddings, embed_dim, cfg.padding_idx)
        else:  # rotary: the positions are in the attention
            self.embed_positions = None
        # fairseq's name for BERT's token-type embeddings.
        self.segment_embeddings = nn.Embedding(cfg.type_vocab_size, embed_dim) if cfg.type_vocab_size else None
        self.layernorm_embedding = layer_norm(cfg, embed_dim) if cfg.layernorm_embedding else None
        self.embed_proj = nn.Linear(embed_dim, dim) if embed_dim != dim else None
        self.dropout = Dropout(cfg.dropout)
        self.layers = build_layers(cfg)
        self.local_layers = tuple(cfg.is_local_layer(i) for i in range(cfg.encoder_layers))
        """Which layers attend within their window (``cfg.local_attention``) rather than globally."""
        # Pre-LN stacks end with a LayerNorm; post-LN stacks already end normalised.
        self.layer_norm = layer_norm(cfg, dim) if cfg.encoder_normalize_before else None
        # fairseq keeps a format version in every TransformerEncoder state dict; keeping it
        # here too lets state dicts move between the two with strict loading on both sides.
        self.register_buffer("version", torch.Tensor([3]))
        self.inference_forward: Callable[..., tuple[torch.Tensor, list[torch.Tensor]]] | None = None
        """Set by :func:`roberta_ext.inference.compiled.compile_model`: in eval mode, ``forward`` hands its
        arguments to it (the compiled, shape-bucketed :meth:`forward_masked`)."""
        self.attention: str | None = cfg.attention
        """How this encoder attends over a batch with padding (one of
        :data:`~roberta_ext.modeling.attention.ATTENTION_STRATEGIES`; None: ``$ROBERTA_EXT_ATTENTION``,
        else ``auto``). The config's choice to start with; :meth:`set_attention` changes it for
        this encoder alone (the config may be shared with other models)."""

    def max_positions(self) -> int:
        if self.embed_positions is None:  # rotary: the longest input the model was trained on
            return self.cfg.max_positions
        return self.embed_positions.max_positions

    def set_attention(self, strategy: str | None) -> str | None:
        """Choose how this encoder attends over padded batches (None: back to
        ``$ROBERTA_EXT_ATTENTION``, else ``auto``); returns the choice it replaces."""
        previous = self.attention
        self.attention = None if strategy is None else checked_strategy(strategy)
        return previous

    def forward(
        self,
        tokens: torch.Tensor,
        return_all_hiddens: bool = False,
        segment_labels: torch.Tensor | None = None,
        document_starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``tokens``: (B, T) indices; ``segment_labels``: (B, T) segment ids for models with
        segment embeddings (default: all 0); ``document_starts``: (B, T), True on the first token
        of each document after a row's first, for rows of whole documents packed back to back:
        each document is then attended, and positioned, as a sequence of its own. Returns the
        last layer's features (B, T, C) and, when ``return_all_hiddens``, the embedding output
        followed by every layer's output. How a batch with padding is attended: :attr:`attention`."""
        if document_starts is not None:
            return self.forward_documents(tokens, document_starts, return_all_hiddens, segment_labels)
        if self.inference_forward is not None and not self.training:
            return self.inference_forward(tokens, return_all_hiddens, segment_labels)
        return self.forward_eager(tokens, return_all_hiddens, segment_labels)

    def forward_documents(
        self,
        tokens: torch.Tensor,
        document_starts: torch.Tensor,
        return_all_hiddens: bool = False,
        segment_labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` on rows of several documents: the layers run packed, one sequence per
        document, with positions (rotary or learned) from 0 at each document's first token; a
        token's outputs are those of its document alone.

        >>> cfg = EncoderConfig(vocab_size=64, encoder_layers=1, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
        ...                     encoder_attention_heads=4, max_positions=64)
        >>> encoder = TransformerEncoder(cfg).eval()
        >>> row, starts = torch.tensor([[0, 5, 2, 7, 8, 2]]), torch.tensor([[0, 0, 0, 1, 0, 0]]).bool()
        >>> alone = encoder(torch.tensor([[7, 8, 2]]))[0]
        >>> torch.allclose(encoder(row, document_starts=starts)[0][:, 3:], alone, atol=1e-6)
        True
        """
        padding_mask = tokens.eq(self.padding_idx)  # (B, T), True on padding
        packing = packing_for(self.attention or default_attention(), padding_mask, document_starts)
        assert packing is not None  # rows of documents are always packed
        # A position table needs each token's place in its document; rotary positions are the packing's own.
        positions = None if self.embed_positions is None else packing.unpack(packing.positions)  # (B, T)
        x = self.embed(tokens, segment_labels, positions)  # (B, T, C)
        x = x * (~padding_mask).unsqueeze(-1).type_as(x)
        return self._forward_packed(x, packing, return_all_hiddens)

    def forward_eager(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` without a compiled inference path."""
        padding_mask = tokens.eq(self.padding_idx)  # (B, T), True on padding
        has_pads = bool(padding_mask.any())
        x = self.embed(tokens, segment_labels)  # (B, T, C)
        if not has_pads:
            return self._layers(x, self.attention_inputs(x, None), return_all_hiddens)
        # fairseq zeroes padded positions once after the embeddings; do the same so that
        # every returned hidden state matches it position for position.
        x = x * (~padding_mask).unsqueeze(-1).type_as(x)
        # Resolved once per batch: the environment is read only when this model has not chosen.
        packing = packing_for(self.attention or default_attention(), padding_mask)
        if packing is not None:
            return self._forward_packed(x, packing, return_all_hiddens)
        return self._layers(x, self.attention_inputs(x, padding_mask, blockwise=True), return_all_hiddens)

    def forward_masked(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` with every layer on the whole (B, T) batch and padded keys masked out,
        whatever the padding: no branch on the data and no host synchronisation, so that
        ``torch.compile`` captures it in one graph per shape (:mod:`roberta_ext.inference.compiled`). Equal
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
        return self._layers(x, self.attention_inputs(x, padding_mask), return_all_hiddens)

    def attention_inputs(
        self,
        x: torch.Tensor,
        padding_mask: torch.Tensor | None,
        packing: Packing | None = None,
        *,
        blockwise: bool = False,
    ) -> AttentionInputs:
        """What the layers' attention needs for the batch ``x``: (B, T, C) with its ``padding_mask``
        (B, T) (None: no padding), or packed (N, C) with ``packing``. The masks here are built
        without a branch on the data (``forward_masked`` compiles this). ``blockwise`` (eager
        calls): a padded batch long enough for it has its local layers attend block by block with
        the key mask, rather than under a (B, 1, T, T) band; compiled and exported graphs keep the
        band, which has no branch on the length."""
        mask = None if padding_mask is None or packing is not None else (~padding_mask)[:, None, None, :]
        rotary_positions = self.cfg.position_style == "rotary"
        window = None if self.cfg.local_attention is None else self.cfg.local_attention // 2
        if not rotary_positions and window is None:
            return AttentionInputs(mask=mask, packing=packing)
        if packing is not None:
            positions = packing.positions  # (N,)
        elif padding_mask is None:
            positions = torch.arange(x.shape[1], device=x.device)[None]  # (1, T)
        else:
            positions = real_positions(padding_mask)  # (B, T)
        local_mask = None
        # The length is looked at only without a padding mask (or in eager calls): torch.export
        # would otherwise guard the exported graph on it (a window of 8 pinned the length to 6-15).
        if window is not None and packing is None and blockwise and attends_blockwise(x.shape[1], window):
            local_mask = mask  # (B, 1, 1, T) or None: the local layers attend block by block
        elif (
            window is not None
            and packing is None
            and (padding_mask is not None or (window + 1 < x.shape[1] and not attends_blockwise(x.shape[1], window)))
        ):
            band = window_mask(positions, window)[:, None]  # (B or 1, 1, T, T)
            local_mask = band if mask is None else band & mask
        if not rotary_positions:
            return AttentionInputs(mask=mask, packing=packing, local_mask=local_mask, window=window)
        head_dim, dtype = self.cfg.head_dim, x.dtype
        return AttentionInputs(
            mask=mask,
            packing=packing,
            rotation=rotary(positions, head_dim, self.cfg.rotary_theta, dtype),
            local_mask=local_mask,
            local_rotation=None if window is None else rotary(positions, head_dim, self.cfg.local_rotary_theta, dtype),
            window=window,
        )

    def embed(
        self, tokens: torch.Tensor, segment_labels: torch.Tensor | None = None, positions: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The embeddings of (B, T) ``tokens``: token + position (+ segment) embeddings, normalised,
        dropped out and projected to the layers' width: (B, T, C). ``positions`` (B, T), from 0:
        where they do not count from each row's first real token (rows of documents)."""
        x = self.embed_tokens(tokens)  # (B, T, E)
        if self.embed_positions is not None:
            x = x + self.embed_positions(tokens, positions)
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
        self, x: torch.Tensor, inputs: AttentionInputs, return_all_hiddens: bool
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The layer stack on (B, T, C) with the masks (and rotations) of ``inputs``."""
        hiddens = [x] if return_all_hiddens else []
        for layer, local in zip(self.layers, self.local_layers):
            x = layer(x, *inputs.layer_args(local))
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
        inputs = self.attention_inputs(packed, None, packing)
        hiddens = [x] if return_all_hiddens else []
        for layer, local in zip(self.layers, self.local_layers):
            packed = layer(packed, *inputs.layer_args(local))
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
    "AttentionInputs",
    "LearnedPositionalEmbedding",
    "build_layers",
    "MultiheadSelfAttention",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "apply_rotary",
    "get_activation_fn",
    "init_bert_params",
    "layer_norm",
    "make_positions",
    "rotary",
]
