"""The transformer encoder core, written once for every family.

Module and parameter names are fairseq's (``embed_tokens``, ``layers.N.self_attn.q_proj``,
``self_attn_layer_norm``, ``fc1`` ...), so a fairseq RoBERTa state dict loads here, and ours
loads in fairseq, without renaming a single key. Unlike fairseq, tensors are batch-first:
``(B, T, C)`` throughout.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from .config import EncoderConfig
from .dropout import Dropout, attention


def get_activation_fn(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation called ``name`` in fairseq (``gelu`` is the exact, erf-based one).

    >>> get_activation_fn("gelu")(torch.zeros(2)).tolist()
    [0.0, 0.0]
    """
    if name == "gelu":
        return F.gelu
    if name == "gelu_accurate":  # fairseq's name for the tanh approximation
        return lambda x: F.gelu(x, approximate="tanh")
    if name == "relu":
        return F.relu
    if name == "tanh":
        return torch.tanh
    if name == "linear":
        return lambda x: x
    raise ValueError(f"unknown activation function {name!r}")


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


# ----------------------------------------------------------------------------- attention strategies

ATTENTION_STRATEGIES = ("auto", "masked", "padded", "per_sequence", "nested", "varlen")
"""How the encoder attends over a batch with padding:

* ``masked``: no packing; every layer runs on the padded (B, T) batch, padded keys masked out;
* ``padded``: the layers run on the real tokens packed back to back (N, C); the attention gets
  its padding back for one masked SDPA call over the batch (:func:`padded_attention`);
* ``per_sequence``: packed; one SDPA call per sequence (:func:`per_sequence_attention`);
* ``nested``: packed; one SDPA call over a nested jagged tensor (:func:`nested_attention`);
* ``varlen``: packed; torch's variable-length flash kernel (:func:`varlen_attention`; CUDA,
  fp16/bf16, no attention dropout);
* ``auto`` (the default): :func:`should_pack` decides whether to pack, and each attention call
  takes ``per_sequence`` on the CPU, ``varlen`` on CUDA in fp16/bf16 without attention dropout,
  else ``padded``.

A batch without padding always runs unpacked and unmasked. Choose with :func:`set_attention`,
:func:`attention_strategy` (a ``with`` block) or the environment variable
``ROBERTA_EXT_ATTENTION``; the benchmarks compare them (``benchmarks/run.py``, section ``paths``)."""

ATTENTION_ENV = "ROBERTA_EXT_ATTENTION"
"""Environment variable naming one of :data:`ATTENTION_STRATEGIES`, read when
:func:`set_attention` has not chosen one."""

_chosen_attention: str | None = None


def _checked_strategy(strategy: str, source: str) -> str:
    if strategy not in ATTENTION_STRATEGIES:
        raise ValueError(f"{source}={strategy!r} is not an attention strategy; choose one of {ATTENTION_STRATEGIES}")
    return strategy


def get_attention() -> str:
    """The attention strategy in force: :func:`set_attention`'s choice, else
    ``$ROBERTA_EXT_ATTENTION``, else ``auto``.

    >>> get_attention()
    'auto'
    """
    if _chosen_attention is not None:
        return _chosen_attention
    return _checked_strategy(os.environ.get(ATTENTION_ENV, "auto") or "auto", ATTENTION_ENV)


def set_attention(strategy: str | None) -> str | None:
    """Choose how every encoder attends over padded batches (one of :data:`ATTENTION_STRATEGIES`;
    ``None``: back to ``$ROBERTA_EXT_ATTENTION`` or ``auto``). Returns the previous choice.

    >>> previous = set_attention("masked")
    >>> get_attention()
    'masked'
    >>> set_attention(previous)
    'masked'
    """
    global _chosen_attention
    previous = _chosen_attention
    _chosen_attention = None if strategy is None else _checked_strategy(strategy, "attention strategy")
    return previous


@contextmanager
def attention_strategy(strategy: str) -> Iterator[None]:
    """:func:`set_attention` for a ``with`` block.

    >>> with attention_strategy("per_sequence"):
    ...     get_attention()
    'per_sequence'
    """
    previous = set_attention(strategy)
    try:
        yield
    finally:
        set_attention(previous)


PACKED_STRATEGIES = ("padded", "per_sequence", "nested", "varlen")
"""The strategies that run the layers on packed tokens (see :class:`Packing`)."""

_HALF = (torch.float16, torch.bfloat16)


def varlen_suits(q: torch.Tensor, dropout_p: float) -> bool:
    """Whether torch's variable-length flash kernel takes these packed (N, H, D) queries: CUDA,
    fp16 or bf16 (under autocast too: the projections' output dtype), no attention dropout (the
    kernel has none), a head size flash supports (a multiple of 8, at most 256).

    >>> varlen_suits(torch.zeros(4, 2, 64), 0.0)    # the CPU
    False
    """
    head_dim = q.shape[-1]
    return (
        q.is_cuda and q.dtype in _HALF and dropout_p == 0.0 and head_dim % 8 == 0 and head_dim <= 256 and _has_varlen()
    )


@cache
def _has_varlen() -> bool:
    """Whether this torch has ``torch.nn.attention.varlen`` (torch 2.13 has), without importing it."""
    import importlib.util

    return importlib.util.find_spec("torch.nn.attention.varlen") is not None


@dataclass(frozen=True)
class Packing:
    """Where the real tokens of a padded (B, T) batch lie once packed back to back into (N, ...):
    row b's real tokens, in order, are the b-th run (left or right padding alike). Computed once
    per batch and shared by every layer.

    >>> packing = Packing.from_padding_mask(torch.tensor([[False, False, True], [True, False, False]]))
    >>> packing.seq_lens, packing.cu_seqlens.tolist(), packing.max_len
    ([2, 2], [0, 2, 4], 2)
    """

    padding_mask: torch.Tensor  # (B, T), True on padding
    keep: torch.Tensor  # (N,) positions of the real tokens in the flattened (B * T)
    lengths: torch.Tensor  # (B,) the runs' lengths, on the batch's device
    seq_lens: list[int]  # the same, on the host
    max_len: int  # the longest run
    strategy: str = "auto"  # one of PACKED_STRATEGIES, or "auto": chosen per attention call

    @classmethod
    def from_padding_mask(cls, padding_mask: torch.Tensor, strategy: str = "auto") -> Packing:
        real = ~padding_mask
        lengths = real.sum(dim=1)  # (B,)
        seq_lens = lengths.tolist()
        keep = real.flatten().nonzero().squeeze(1)
        return cls(padding_mask, keep, lengths, seq_lens, max(seq_lens, default=0), strategy)

    @cached_property
    def cu_seqlens(self) -> torch.Tensor:
        """(B + 1,) int32 on the batch's device: run b is ``packed[cu[b]:cu[b + 1]]`` (the varlen
        kernel's cumulative sequence lengths). Computed on first use, once per batch: the CPU's
        per-sequence attention does without it."""
        return F.pad(self.lengths.cumsum(0, dtype=torch.int32), (1, 0))

    @cached_property
    def offsets(self) -> torch.Tensor:
        """``cu_seqlens`` as int64: the offsets of a nested jagged tensor. One tensor per batch,
        so that every layer's nested tensors share one ragged dimension."""
        return self.cu_seqlens.long()

    def pack(self, x: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) -> (N, ...), the real tokens only."""
        return x.flatten(0, 1).index_select(0, self.keep)

    def unpack(self, packed: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (B, T, ...), zeros at padding."""
        batch, length = self.padding_mask.shape
        out = packed.new_zeros(batch * length, *packed.shape[1:]).index_copy(0, self.keep, packed)
        return out.view(batch, length, *packed.shape[1:])

    def attention_for(self, q: torch.Tensor, dropout_p: float) -> str:
        """The packed strategy for one attention call over packed queries ``q`` (N, H, D): the
        chosen one, or under ``auto`` one call per sequence on the CPU (whose fused kernel takes
        dense inputs and costs little per call), the varlen flash kernel on CUDA where it applies
        (:func:`varlen_suits`), else the padding restored for one masked call (on a GPU a call per
        sequence is a kernel launch per sequence and layer: slower than attending over padding)."""
        if self.strategy != "auto":
            return self.strategy
        if not q.is_cuda:
            return "per_sequence"
        return "varlen" if varlen_suits(q, dropout_p) else "padded"


def per_sequence_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float
) -> torch.Tensor:
    """Packed (N, H, D) queries, keys and values -> (N, H, D), one SDPA call per sequence."""
    # A leading batch dimension of 1: CPU SDPA takes its fused kernel only for 4-D inputs.
    return torch.cat(
        [
            attention(
                qs.transpose(0, 1)[None], ks.transpose(0, 1)[None], vs.transpose(0, 1)[None], dropout_p=dropout_p
            )[0].transpose(0, 1)  # (L, H, D)
            for qs, ks, vs in zip(q.split(packing.seq_lens), k.split(packing.seq_lens), v.split(packing.seq_lens))
        ]
    )


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float
) -> torch.Tensor:
    """Packed (N, H, D) -> (N, H, D) in one SDPA call over the batch, padded back to (B, H, T, D)
    with padded keys masked out."""

    def padded(t: torch.Tensor) -> torch.Tensor:
        return packing.unpack(t).transpose(1, 2)  # (B, H, T, D)

    attn_mask = ~packing.padding_mask[:, None, None, :]  # (B, 1, 1, T), True where a key may be attended
    out = attention(padded(q), padded(k), padded(v), attn_mask, dropout_p)
    return packing.pack(out.transpose(1, 2))


def nested_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float
) -> torch.Tensor:
    """Packed (N, H, D) -> (N, H, D) in one SDPA call over nested jagged tensors (B, H, j, D):
    the packed tensors are their values as they are, ``packing.offsets`` their offsets. On CUDA
    SDPA takes its flash or memory-efficient kernel; on the CPU it attends sequence by sequence
    in Python (several times slower than :func:`per_sequence_attention`). Dropout is
    ``F.scaled_dot_product_attention``'s own."""

    def nested(t: torch.Tensor) -> torch.Tensor:  # (N, H, D) -> (B, H, j, D)
        jagged = torch.nested.nested_tensor_from_jagged(
            t, packing.offsets, min_seqlen=min(packing.seq_lens), max_seqlen=packing.max_len
        )
        return jagged.transpose(1, 2)

    out = F.scaled_dot_product_attention(nested(q), nested(k), nested(v), dropout_p=dropout_p)
    return out.transpose(1, 2).values()  # (N, H, D)


def varlen_kernel() -> Callable[..., Any]:
    """torch's ``torch.nn.attention.varlen.varlen_attn`` (flash attention over packed sequences),
    imported on first use: importing it imports ``torch._dynamo``, over a second."""
    from torch.nn.attention.varlen import varlen_attn

    return varlen_attn


def varlen_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float
) -> torch.Tensor:
    """Packed (N, H, D) -> (N, H, D) by torch's variable-length flash kernel, which takes the packed
    tensors as they are with ``packing.cu_seqlens`` and ``packing.max_len``: no padding anywhere.
    CUDA, fp16/bf16 and no attention dropout only (:func:`varlen_suits`)."""
    if dropout_p:
        raise ValueError(
            f"the varlen attention kernel has no dropout, but attention dropout is {dropout_p} in training: "
            "use --attention-dropout 0, or another attention strategy"
        )
    kernel = varlen_kernel()
    cu, longest = packing.cu_seqlens, packing.max_len
    try:
        return kernel(q, k, v, cu, cu, longest, longest, scale=q.shape[-1] ** -0.5)
    except (NotImplementedError, RuntimeError) as error:
        raise ValueError(
            f"varlen attention runs torch's flash kernel, which needs CUDA and fp16/bf16 inputs with a head size "
            f"that is a multiple of 8 up to 256; got {q.device.type}, {q.dtype}, head size {q.shape[-1]} ({error})"
        ) from error


PACKED_ATTENTION: dict[str, Callable[..., torch.Tensor]] = {
    "padded": padded_attention,
    "per_sequence": per_sequence_attention,
    "nested": nested_attention,
    "varlen": varlen_attention,
}
"""Packed strategy -> ``f(q, k, v, packing, dropout_p)``, (N, H, D) in and out."""


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
        self.dropout = Dropout(cfg.dropout)
        self.activation_dropout = Dropout(cfg.activation_dropout)

    def forward(self, x: torch.Tensor, attn_mask: torch.Tensor | None, packing: Packing | None = None) -> torch.Tensor:
        """``x``: (B, T, C) with ``attn_mask``, or packed (N, C) with ``packing`` (see the attention)."""
        residual = x
        if self.normalize_before:
            x = self.self_attn_layer_norm(x)
        x = residual + self.dropout(self.self_attn(x, attn_mask, packing))
        if not self.normalize_before:
            x = self.self_attn_layer_norm(x)

        residual = x
        if self.normalize_before:
            x = self.final_layer_norm(x)
        x = self.activation_dropout(self.activation_fn(self.fc1(x)))  # (..., F)
        x = residual + self.dropout(self.fc2(x))
        if not self.normalize_before:
            x = self.final_layer_norm(x)
        return x


PACKING_MIN_PADDING = 0.1
"""Share of padding in a batch from which the encoder drops padding before the layers: below it,
one batched attention call beats a call per sequence."""

CUDA_PACKING_MIN_SLOTS = 8192
"""On a GPU, batches of fewer (B x T) positions are not packed: small batches are bound by
kernel launches, not FLOPs, and packing adds launches. Measured at base shape in fp32 on an
H100: an 8 x 128 batch (1024 slots) with 44% padding took 10.9 ms packed against 7.2 ms
unpacked; a 64 x 512 batch (32768 slots) with 49% padding 88 ms packed against 143 ms for a
full batch of that shape. Measured with :func:`padded_attention`; whether the varlen kernel
(bf16) moves this threshold is left to the GPU measurement of issue 14."""


def should_pack(padding_mask: torch.Tensor) -> bool:
    """Whether the encoder runs the layers on the real tokens only (see :class:`Packing`), under
    the ``auto`` attention strategy.

    >>> should_pack(torch.tensor([[False, False, True, True]]))   # half padding, on the CPU
    True
    """
    if padding_mask.is_cuda and padding_mask.numel() < CUDA_PACKING_MIN_SLOTS:
        return False
    return float(padding_mask.float().mean()) >= PACKING_MIN_PADDING


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

    >>> layers = build_layers(EncoderConfig.preset("albert-tiny"))
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

    def max_positions(self) -> int:
        return self.embed_positions.max_positions

    def forward(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """``tokens``: (B, T) indices; ``segment_labels``: (B, T) segment ids for models with
        segment embeddings (default: all 0). Returns the last layer's features (B, T, C) and,
        when ``return_all_hiddens``, the embedding output followed by every layer's output.
        How a batch with padding is attended: :data:`ATTENTION_STRATEGIES`."""
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
        strategy = get_attention()
        if strategy in PACKED_STRATEGIES or (strategy == "auto" and should_pack(padding_mask)):
            return self._forward_packed(x, padding_mask, return_all_hiddens, strategy)
        return self._layers(x, (~padding_mask)[:, None, None, :], return_all_hiddens)  # mask (B, 1, 1, T)

    def forward_masked(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` with every layer on the whole (B, T) batch and padded keys masked out,
        whatever the padding: no branch on the data and no host synchronisation, so that
        ``torch.compile`` captures it in one graph per shape (:mod:`roberta_ext.compiled`). Equal
        to :meth:`forward` on real tokens. A row with no real token gets no defined output.

        >>> from roberta_ext.modeling import RobertaModel
        >>> encoder = RobertaModel(EncoderConfig.preset("tiny")).eval().encoder.sentence_encoder
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
        self, x: torch.Tensor, padding_mask: torch.Tensor, return_all_hiddens: bool, strategy: str = "auto"
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """The layer stack on real tokens only: (B, T, C) is packed to (N, C), and every output
        is scattered back to (B, T, C) with zeros at padding positions."""
        packing = Packing.from_padding_mask(padding_mask, strategy)
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
    "ATTENTION_STRATEGIES",
    "AbsolutePositionalEmbedding",
    "LearnedPositionalEmbedding",
    "build_layers",
    "MultiheadSelfAttention",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "attention_strategy",
    "get_activation_fn",
    "get_attention",
    "init_bert_params",
    "make_positions",
    "set_attention",
]
