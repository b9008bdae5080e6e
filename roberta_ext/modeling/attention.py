"""How the encoder attends over a batch with padding: the attention strategies, and the packed
layout (:class:`Packing`) that all but ``masked`` share.

Each model chooses its own strategy — ``EncoderConfig.attention`` when it is built,
``model.set_attention(name)`` or :func:`use_attention` afterwards — and a model that has not
chosen reads ``$ROBERTA_EXT_ATTENTION`` (else ``auto``). Nothing here is process-wide state:
two models in one process attend as each was told, and a test cannot leak its choice into the
next one.

>>> import torch
>>> packing = packing_for("auto", torch.tensor([[False, False, True, True], [False, False, False, False]]))
>>> packing.seq_lens            # a quarter of the batch is padding: the layers see 6 tokens, not 8
[2, 4]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from .dropout import attention

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

A batch without padding always runs unpacked and unmasked. The benchmarks compare them
(``benchmarks/run.py``, section ``paths``)."""

ATTENTION_ENV = "ROBERTA_EXT_ATTENTION"
"""Environment variable naming one of :data:`ATTENTION_STRATEGIES`: the strategy of every model
that has not chosen one (``EncoderConfig.attention`` is None and ``set_attention`` was not
called). Read at each forward, so that it also reaches models built before it was set."""

PACKED_STRATEGIES = ("padded", "per_sequence", "nested", "varlen")
"""The strategies that run the layers on packed tokens (see :class:`Packing`)."""


def checked_strategy(strategy: str, source: str = "attention strategy") -> str:
    """``strategy`` if it is one of :data:`ATTENTION_STRATEGIES`; a ``ValueError`` naming
    ``source`` and the choices otherwise.

    >>> checked_strategy("flash")
    Traceback (most recent call last):
    ...
    ValueError: attention strategy='flash' is not an attention strategy; choose one of ('auto', ...)
    """
    if strategy not in ATTENTION_STRATEGIES:
        raise ValueError(f"{source}={strategy!r} is not an attention strategy; choose one of {ATTENTION_STRATEGIES}")
    return strategy


def default_attention() -> str:
    """The strategy of a model that has not chosen one: ``$ROBERTA_EXT_ATTENTION``, else ``auto``.

    >>> default_attention()
    'auto'
    """
    return checked_strategy(os.environ.get(ATTENTION_ENV) or "auto", ATTENTION_ENV)


class ChoosesAttention(Protocol):
    """A model (or encoder) whose strategy can be set: ``set_attention`` returns the choice it
    replaces (None: the model had not chosen)."""

    def set_attention(self, strategy: str | None) -> str | None: ...


@contextmanager
def use_attention(model: ChoosesAttention, strategy: str | None) -> Iterator[None]:
    """``model.set_attention(strategy)`` for a ``with`` block: the model's previous choice comes
    back when the block ends, and no other model is touched.

    >>> from roberta_ext.modeling import EncoderConfig, RobertaModel
    >>> model = RobertaModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
    ...                                    encoder_attention_heads=4, vocab_size=64, max_positions=64))
    >>> with use_attention(model, "masked"):
    ...     model.encoder.sentence_encoder.attention
    'masked'
    >>> model.encoder.sentence_encoder.attention is None
    True
    """
    previous = model.set_attention(strategy)
    try:
        yield
    finally:
        model.set_attention(previous)


# ----------------------------------------------------------------------------- positions and windows


def real_positions(padding_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) positions of the real tokens among the real tokens of their row, counted from 0
    (left and right padding alike); a padding position gets its nearest real neighbour's number
    (its value does not matter: no real token attends to it).

    >>> real_positions(torch.tensor([[True, False, False, True]])).tolist()
    [[0, 0, 1, 1]]
    """
    return ((~padding_mask).cumsum(dim=1) - 1).clamp_(min=0)


def window_mask(positions: torch.Tensor, window: int) -> torch.Tensor:
    """(..., T) positions -> (..., T, T) bool, True where a query may attend a key: at most
    ``window`` positions away on either side (ModernBERT's local layers: ``local_attention // 2``).

    >>> window_mask(torch.arange(4), 1).int().tolist()
    [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    """
    return (positions[..., :, None] - positions[..., None, :]).abs() <= window


LOCAL_BLOCKS_FROM = 4
"""A local layer attends blockwise (:func:`local_attention`) once a sequence is at least this
many windows long; shorter ones take one SDPA call with a banded mask, which is cheaper there."""


def attends_blockwise(length: int, window: int | None) -> bool:
    """Whether a local layer with ``window`` attends a sequence of ``length`` blockwise."""
    return window is not None and length >= LOCAL_BLOCKS_FROM * window


def local_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    dropout_p: float = 0.0,
    key_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of (B, H, L, D) queries to the keys at most ``window`` positions away, computed
    block by block: the L queries are cut into blocks of ``window``, and each block attends only
    to the ``3 * window`` keys around it, with a fixed banded mask. Work and memory grow with
    ``L * window``, not ``L * L`` (the (L, L) mask is never built); equal to one SDPA call over
    the whole sequence with :func:`window_mask`, to float rounding. ``key_mask`` (B, 1, 1, L),
    True on the keys that may be attended (a padded batch's real tokens), masks the rest; the
    window then counts positions in the row as given (padding only at a row's ends keeps the
    real tokens' distances).

    >>> q, k, v = torch.randn(3, 1, 2, 10, 4).unbind(0)
    >>> whole = F.scaled_dot_product_attention(q, k, v, attn_mask=window_mask(torch.arange(10), 2))
    >>> torch.allclose(local_attention(q, k, v, 2), whole, atol=1e-6)
    True
    """
    batch, heads, length, dim = q.shape
    block = window
    blocks = -(-length // block)
    padded = blocks * block
    span = block + 2 * window  # the keys a block sees: its own and a window on either side

    def pad(t: torch.Tensor, left: int, right: int) -> torch.Tensor:  # along L
        return F.pad(t, (0, 0, left, right))

    def windows(t: torch.Tensor) -> torch.Tensor:  # (B, H, L, D) -> (B * n, H, span, D)
        t = pad(t, window, padded - length + window).unfold(2, span, block)  # (B, H, n, D, span)
        return t.permute(0, 2, 1, 4, 3).reshape(batch * blocks, heads, span, dim)

    queries = pad(q, 0, padded - length).view(batch, heads, blocks, block, dim)
    queries = queries.transpose(1, 2).reshape(batch * blocks, heads, block, dim)  # (B * n, H, b, D)
    row = torch.arange(block, device=q.device)[:, None]  # a query's offset in its block
    column = torch.arange(span, device=q.device)[None, :] - window  # a key's offset from the block's start
    starts = torch.arange(blocks, device=q.device)[:, None, None] * block  # (n, 1, 1)
    key_real = (starts + column >= 0) & (starts + column < length)  # (n, 1, span)
    query_padding = starts + row >= length  # (n, b, 1): rows past the end, sliced off below
    mask = ((row - column).abs() <= window) & key_real | query_padding  # (n, b, span)
    if key_mask is None:
        mask = mask[:, None].repeat(batch, 1, 1, 1)  # (B * n, 1, b, span)
    else:  # each row's own keys: its window of key_mask beside each block
        keys = F.pad(key_mask.reshape(batch, length), (window, padded - length + window)).unfold(1, span, block)
        mask = (mask[None] & keys[:, :, None, :]) | query_padding  # (B, n, b, span)
        mask = mask.view(batch * blocks, 1, block, span)
    out = attention(queries, windows(k), windows(v), mask, dropout_p)  # (B * n, H, b, D)
    out = out.view(batch, blocks, heads, block, dim).transpose(1, 2).reshape(batch, heads, padded, dim)
    return out[:, :, :length]


# ----------------------------------------------------------------------------- the packed layout

PACKING_MIN_PADDING = 0.1
"""Share of padding in a batch from which ``auto`` drops padding before the layers: below it,
one batched attention call beats a call per sequence."""

CUDA_PACKING_MIN_SLOTS = 8192
"""On a GPU, ``auto`` does not pack batches of fewer (B x T) positions: small batches are bound
by kernel launches, not FLOPs, and packing adds launches. Measured at base shape in fp32 on an
H100: an 8 x 128 batch (1024 slots) with 44% padding took 10.9 ms packed against 7.2 ms
unpacked; a 64 x 512 batch (32768 slots) with 49% padding 88 ms packed against 143 ms for a
full batch of that shape. Measured with :func:`padded_attention`; whether the varlen kernel
(bf16) moves this threshold is left to the GPU measurement of issue 14."""


def should_pack(padding_mask: torch.Tensor) -> bool:
    """Whether ``auto`` runs the layers on the real tokens only (see :class:`Packing`).

    >>> should_pack(torch.tensor([[False, False, True, True]]))   # half padding, on the CPU
    True
    """
    if padding_mask.is_cuda and padding_mask.numel() < CUDA_PACKING_MIN_SLOTS:
        return False
    return float(padding_mask.float().mean()) >= PACKING_MIN_PADDING


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
    """Where the real tokens of a padded (B, T) batch lie once packed back to back into (N, ...),
    and which sequences they form: row b's real tokens, in order, are the b-th run (left or right
    padding alike) — or, with ``document_starts``, each document of a row is a run of its own
    (whole documents packed into rows: attention and positions stay inside each). Computed once
    per batch and shared by every layer.

    >>> packing = Packing.from_padding_mask(torch.tensor([[False, False, True], [True, False, False]]))
    >>> packing.seq_lens, packing.cu_seqlens.tolist(), packing.max_len
    ([2, 2], [0, 2, 4], 2)
    >>> starts = torch.tensor([[False, False, True], [False, True, False]])  # row 0 holds two documents
    >>> packing = Packing.from_padding_mask(torch.zeros(2, 3, dtype=torch.bool), document_starts=starts)
    >>> packing.seq_lens, packing.positions.tolist()
    ([2, 1, 1, 2], [0, 1, 0, 0, 0, 1])
    """

    padding_mask: torch.Tensor  # (B, T), True on padding
    keep: torch.Tensor  # (N,) positions of the real tokens in the flattened (B * T)
    lengths: torch.Tensor  # (S,) the runs' lengths, on the batch's device (S = B without documents)
    seq_lens: list[int]  # the same, on the host
    max_len: int  # the longest run
    strategy: str = "auto"  # one of PACKED_STRATEGIES, or "auto": chosen per attention call
    run_starts: torch.Tensor | None = None  # (S,) where each run starts in the packed tokens; None: one per row

    @classmethod
    def from_padding_mask(
        cls, padding_mask: torch.Tensor, strategy: str = "auto", document_starts: torch.Tensor | None = None
    ) -> Packing:
        """The packing of a batch with ``padding_mask`` (B, T); ``document_starts`` (B, T), True on
        the first token of each document after a row's first (a row's first real token always
        starts one), makes each document a run. A row without real tokens has a run of length 0
        without documents, and none with them."""
        real = ~padding_mask
        keep = real.flatten().nonzero().squeeze(1)
        if document_starts is None:
            lengths = real.sum(dim=1)  # (B,)
            seq_lens = lengths.tolist()
            return cls(padding_mask, keep, lengths, seq_lens, max(seq_lens, default=0), strategy)
        first = (document_starts | (real.cumsum(dim=1) == 1)) & real  # (B, T): each run's first token
        run_starts = first.flatten().index_select(0, keep).nonzero().squeeze(1)  # (S,)
        ends = torch.cat([run_starts[1:], run_starts.new_tensor([keep.numel()])])
        lengths = ends - run_starts
        seq_lens = lengths.tolist()
        return cls(padding_mask, keep, lengths, seq_lens, max(seq_lens, default=0), strategy, run_starts)

    @cached_property
    def cu_seqlens(self) -> torch.Tensor:
        """(B + 1,) int32 on the batch's device: run b is ``packed[cu[b]:cu[b + 1]]`` (the varlen
        kernel's cumulative sequence lengths). Computed on first use, once per batch: the CPU's
        per-sequence attention does without it."""
        return F.pad(self.lengths.cumsum(0, dtype=torch.int32), (1, 0))

    @cached_property
    def length_runs(self) -> list[tuple[int, int]]:
        """``(length, count)`` of each run of consecutive sequences of one length, in order.

        >>> Packing.from_padding_mask(torch.tensor([[False] * 3, [False] * 3, [False, True, True]])).length_runs
        [(3, 2), (1, 1)]
        """
        runs: list[tuple[int, int]] = []
        for length in self.seq_lens:
            if runs and runs[-1][0] == length:
                runs[-1] = (length, runs[-1][1] + 1)
            else:
                runs.append((length, 1))
        return runs

    @cached_property
    def positions(self) -> torch.Tensor:
        """(N,) each packed token's position in its own sequence, from 0 (rotary positions restart
        at every sequence, and at every document)."""
        if self.run_starts is None:
            return self.pack(real_positions(self.padding_mask))
        return torch.arange(self.keep.numel(), device=self.keep.device) - self.run_starts[self.run_of]

    @cached_property
    def run_of(self) -> torch.Tensor:
        """(N,) the run each packed token belongs to."""
        return torch.repeat_interleave(torch.arange(len(self.seq_lens), device=self.keep.device), self.lengths)

    @cached_property
    def run_slots(self) -> torch.Tensor:
        """(N,) each packed token's place in the (S * max_len) layout of the runs padded to the
        longest: run r's tokens at ``r * max_len + position``."""
        return self.run_of * self.max_len + self.positions

    def pad_runs(self, packed: torch.Tensor) -> torch.Tensor:
        """(N, ...) -> (S, max_len, ...): each run padded to the longest, zeros after its end."""
        runs = len(self.seq_lens)
        out = packed.new_zeros(runs * self.max_len, *packed.shape[1:]).index_copy(0, self.run_slots, packed)
        return out.view(runs, self.max_len, *packed.shape[1:])

    def unpad_runs(self, padded: torch.Tensor) -> torch.Tensor:
        """(S, max_len, ...) -> (N, ...), the inverse of :meth:`pad_runs`."""
        return padded.flatten(0, 1).index_select(0, self.run_slots)

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


def packing_for(
    strategy: str, padding_mask: torch.Tensor, document_starts: torch.Tensor | None = None
) -> Packing | None:
    """The packing of a batch with padding (``padding_mask`` (B, T), True on padding) under
    ``strategy``, or None where the layers run on the padded batch with padded keys masked out
    (``masked``, and ``auto`` below :data:`PACKING_MIN_PADDING` or on a small GPU batch). Rows of
    several documents (``document_starts``, see :meth:`Packing.from_padding_mask`) are always
    packed, each document a sequence: under ``masked`` as under ``auto``."""
    if document_starts is not None:
        return Packing.from_padding_mask(
            padding_mask, strategy if strategy in PACKED_STRATEGIES else "auto", document_starts
        )
    if strategy in PACKED_STRATEGIES or (strategy == "auto" and should_pack(padding_mask)):
        return Packing.from_padding_mask(padding_mask, strategy)
    return None


# ----------------------------------------------------------------------------- packed attention


def per_sequence_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float, window: int | None = None
) -> torch.Tensor:
    """Packed (N, H, D) queries, keys and values -> (N, H, D), one SDPA call per run of
    consecutive sequences of one length: such a run of c sequences of length L is a (c, L, H, D)
    view of the packed tensors, attended as one batch without a mask. Length-sorted batches
    (``embed``, ``predict``) are mostly such runs: short lines of a few lengths, long texts cut at
    ``max_length``; a batch of distinct lengths gets a call per sequence.

    The runs are cut with ``split``, not by slicing: in training, the backward of each slice
    writes its gradient into a zero tensor of the whole packed size and the slices' gradients are
    summed, a pass over (N, H, D) per run and per q, k and v, where ``split``'s backward is one
    ``cat``. Training batches are not sorted by length (fairseq's fine-tuning shuffles them), so
    a run per sequence is the rule there: at 16 sequences the slices' backward took a third of
    the attention's time.

    With a ``window`` (local layers), a run of sequences at least :data:`LOCAL_BLOCKS_FROM`
    windows long attends blockwise (:func:`local_attention`: work and memory linear in the
    length); a shorter one longer than the window gets a banded (L, L) mask."""
    sizes = [length * count for length, count in packing.length_runs]
    out = []
    for (length, count), *runs in zip(packing.length_runs, q.split(sizes), k.split(sizes), v.split(sizes)):
        # (c * L, H, D) -> (c, H, L, D) views: 4-D inputs, for which CPU SDPA takes its fused kernel.
        qs, ks, vs = (t.view(count, length, *t.shape[1:]).transpose(1, 2) for t in runs)
        if window is not None and attends_blockwise(length, window):
            attended = local_attention(qs, ks, vs, window, dropout_p)  # (c, H, L, D)
        else:
            band = None
            if window is not None and length > window + 1:
                band = window_mask(torch.arange(length, device=q.device), window)  # (L, L)
            attended = attention(qs, ks, vs, band, dropout_p=dropout_p)  # (c, H, L, D)
        out.append(attended.transpose(1, 2).reshape(length * count, *q.shape[1:]))
    return out[0] if len(out) == 1 else torch.cat(out)


def padded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float, window: int | None = None
) -> torch.Tensor:
    """Packed (N, H, D) -> (N, H, D) in one SDPA call over the runs padded to the longest, (S, H,
    L, D), padded keys masked out (and, with a ``window``, keys outside it: an (S, 1, L, L) mask, as
    this strategy pads anyway). Without documents the runs are the rows."""

    def padded(t: torch.Tensor) -> torch.Tensor:
        return packing.pad_runs(t).transpose(1, 2)  # (S, H, L, D)

    positions = torch.arange(packing.max_len, device=q.device)
    attn_mask = (positions[None, :] < packing.lengths[:, None])[:, None, None, :]  # (S, 1, 1, L): real keys
    if window is not None:
        attn_mask = attn_mask & window_mask(positions, window)  # (S, 1, L, L)
    out = attention(padded(q), padded(k), padded(v), attn_mask, dropout_p)
    return packing.unpad_runs(out.transpose(1, 2))


def nested_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float, window: int | None = None
) -> torch.Tensor:
    """Packed (N, H, D) -> (N, H, D) in one SDPA call over nested jagged tensors (B, H, j, D):
    the packed tensors are their values as they are, ``packing.offsets`` their offsets. On CUDA
    SDPA takes its flash or memory-efficient kernel; on the CPU it attends sequence by sequence
    in Python (several times slower than :func:`per_sequence_attention`). Dropout is
    ``F.scaled_dot_product_attention``'s own. SDPA takes no mask with nested tensors: a local
    layer (``window``) attends through :func:`per_sequence_attention` instead."""
    if window is not None:
        return per_sequence_attention(q, k, v, packing, dropout_p, window)

    def nested(t: torch.Tensor) -> torch.Tensor:  # (N, H, D) -> (B, H, j, D)
        jagged = torch.nested.nested_tensor_from_jagged(  # contiguous: a fused projection's chunks are views
            t.contiguous(), packing.offsets, min_seqlen=min(packing.seq_lens), max_seqlen=packing.max_len
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
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, packing: Packing, dropout_p: float, window: int | None = None
) -> torch.Tensor:
    """Packed (N, H, D) -> (N, H, D) by torch's variable-length flash kernel, which takes the packed
    tensors as they are with ``packing.cu_seqlens`` and ``packing.max_len``: no padding anywhere.
    CUDA, fp16/bf16 and no attention dropout only (:func:`varlen_suits`). A ``window`` is the
    kernel's own sliding window (``window_size=(window, window)``): only the band is computed."""
    if dropout_p:
        raise ValueError(
            f"the varlen attention kernel has no dropout, but attention dropout is {dropout_p} in training: "
            "use --attention-dropout 0, or another attention strategy"
        )
    kernel = varlen_kernel()
    cu, longest = packing.cu_seqlens, packing.max_len
    try:
        band = {} if window is None else {"window_size": (window, window)}
        q, k, v = (t.contiguous() for t in (q, k, v))  # a fused projection's chunks are strided views
        return kernel(q, k, v, cu, cu, longest, longest, scale=q.shape[-1] ** -0.5, **band)
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
"""Packed strategy -> ``f(q, k, v, packing, dropout_p)``, (N, H, D) in and out; a local layer
passes a sixth argument, ``window``: how far its tokens see on either side."""


__all__ = [
    "ATTENTION_ENV",
    "ATTENTION_STRATEGIES",
    "CUDA_PACKING_MIN_SLOTS",
    "PACKED_ATTENTION",
    "PACKED_STRATEGIES",
    "PACKING_MIN_PADDING",
    "ChoosesAttention",
    "Packing",
    "checked_strategy",
    "default_attention",
    "nested_attention",
    "packing_for",
    "padded_attention",
    "per_sequence_attention",
    "real_positions",
    "should_pack",
    "use_attention",
    "varlen_attention",
    "varlen_kernel",
    "varlen_suits",
    "window_mask",
    "attends_blockwise",
    "local_attention",
    "LOCAL_BLOCKS_FROM",
]
