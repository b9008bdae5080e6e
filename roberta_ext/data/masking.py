"""Masked-LM corruption for pretraining: token, whole-word and SpanBERT span masking, vectorised
over a whole batch and reproducible from ``(seed, epoch, dataset index)`` alone.

Two entry points:

* :class:`BatchMasker` — what the fairseq plugin's pretraining task calls inside its collater.
  Its randomness is *counter based*: every random number is a hash of
  ``(seed, epoch, dataset index, position among the row's real tokens, stream)``, so a row's
  mask does not depend on which rows share its batch, on the padding side or amount, on the
  row's place in the batch, on the number of data-loader workers, or on any generator state.
  Different epochs give different masks; distributed ranks see different dataset indices and
  so differ without extra work.

How ``BatchMasker`` follows fairseq's ``MaskTokensDataset`` (fairseq/data/mask_tokens_dataset.py)
and where it deliberately differs:

* Count: ``num_mask = int(mask_prob * n + u)`` with ``u ~ U[0, 1)`` (probabilistic rounding),
  then exactly ``num_mask`` tokens (or words) are chosen without replacement — as in fairseq.
  *Deviation:* fairseq counts and may choose every token of the item, ``<s>`` and ``</s>``
  included; here ``n`` counts only non-special tokens and special tokens are never chosen.
* 80/10/10: a chosen token is kept with ``leave_unmasked_prob``, replaced by a random token with
  ``random_token_prob``, else replaced by ``<mask>``. fairseq draws this with two uniforms
  (``u1 < leave + random``, then ``u2 < leave / (leave + random)``); one uniform split into the
  same three intervals gives the same distribution. Targets include the kept tokens.
* Whole words: fairseq chooses ``int(mask_prob * n_words + u)`` words, decides the 80/10/10 fate
  per *word*, and draws random replacements per *token*; so does this. *Deviation:* a word here
  never contains a special token: a word also begins at any ordinary token that follows a
  special one (fairseq marks specials as word beginnings, so a sentence's first BPE piece, which
  lacks the leading space, is glued to ``<s>`` and masked together with it).
* Random replacements are drawn uniformly (or by ``replacement_weights``) over the vocabulary
  minus ``special_ids``. *Deviation:* fairseq only excludes the first four symbols, so
  ``<mask>`` and ``madeupword`` fillers can appear as "random" tokens there.

Span masking follows SpanBERT (Joshi et al., 2020, and its released ``PairWithSpanMaskingScheme``):
span lengths in words from ``Geometric(span_p)`` restricted to ``1..span_max_words`` (the tail
is dropped and the rest renormalised, as SpanBERT's code does — mean 3.8 words for p=0.2 and
10; the paper calls this "clipping"), a start word drawn uniformly, spans added until the
covered tokens reach the budget, the last span cut at the budget, and the 80/10/10 fate drawn
per span. *Deviations*, all documented at :meth:`BatchMasker._choose_spans`: the budget uses the
same probabilistic rounding as the other modes (SpanBERT uses ``ceil``); a span whose start is
already masked is not re-drawn but simply adds the words it newly covers; spans stop at special
tokens (they never run across ``</s> </s>``); the last span is cut at a word boundary, so the
budget may be exceeded by less than one word.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import torch

__all__ = ["BatchMasker", "MaskingConfig", "reference_random_bits"]


@dataclass(kw_only=True)
class MaskingConfig:
    """What to corrupt for masked-LM pretraining (the defaults are BERT's / RoBERTa's)."""

    mask_prob: float = 0.15
    """Fraction of a row's non-special tokens chosen as prediction targets, in [0, 1]."""

    leave_unmasked_prob: float = 0.1
    """Of the chosen tokens, the fraction left unchanged (still predicted), in [0, 1]."""

    random_token_prob: float = 0.1
    """Of the chosen tokens, the fraction replaced by a random ordinary token, in [0, 1];
    ``leave_unmasked_prob + random_token_prob`` must not exceed 1."""

    freq_weighted_replacement: bool = False
    """Draw random replacements in proportion to ``replacement_weights`` (fairseq passes the
    dictionary counts) instead of uniformly over the ordinary tokens."""

    mask_whole_words: bool = False
    """Choose whole words: a word is a token that begins a word (``word_starts``) and the
    non-beginning tokens that follow it. ``mask_prob`` then counts words, as in fairseq."""

    span_masking: bool = False
    """SpanBERT span masking: contiguous spans of whole words (implies word boundaries whatever
    ``mask_whole_words`` says) until ``mask_prob`` of the row's tokens are covered."""

    span_p: float = 0.2
    """Parameter of the geometric distribution of span lengths (in words), in (0, 1]."""

    span_max_words: int = 10
    """Longest span, in words (>= 1); longer lengths are never drawn."""

    def __post_init__(self) -> None:
        for name in ("mask_prob", "leave_unmasked_prob", "random_token_prob"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise ValueError(f"MaskingConfig.{name} must be a number in [0, 1], got {value!r}")
        if self.leave_unmasked_prob + self.random_token_prob > 1.0:
            raise ValueError(
                "MaskingConfig.leave_unmasked_prob + random_token_prob must be <= 1, got "
                f"{self.leave_unmasked_prob!r} + {self.random_token_prob!r}"
            )
        for name in ("freq_weighted_replacement", "mask_whole_words", "span_masking"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"MaskingConfig.{name} must be a bool, got {getattr(self, name)!r}")
        if isinstance(self.span_p, bool) or not isinstance(self.span_p, (int, float)) or not 0.0 < self.span_p <= 1.0:
            raise ValueError(f"MaskingConfig.span_p must be a number in (0, 1], got {self.span_p!r}")
        if isinstance(self.span_max_words, bool) or not isinstance(self.span_max_words, int) or self.span_max_words < 1:
            raise ValueError(f"MaskingConfig.span_max_words must be an int >= 1, got {self.span_max_words!r}")


# ---------------------------------------------------------------------------------------------
# Counter-based randomness: splitmix64 on int64 tensors.
#
# torch has no uint64 arithmetic, but int64 addition and multiplication wrap modulo 2**64 exactly
# like unsigned ones (two's complement), and xor is bitwise. Only right shifts differ: torch's
# ``>>`` is arithmetic (copies the sign bit), so after shifting we clear the copied high bits.
# ``reference_random_bits`` is the same hash on Python ints; the tests check the two agree.
# ---------------------------------------------------------------------------------------------

_U64 = (1 << 64) - 1
_INT64_MAX = (1 << 63) - 1


def _as_int64(value: int) -> int:
    """The int64 with the same 64 bits as ``value`` mod 2**64 (torch wants signed constants)."""
    value &= _U64
    return value - (1 << 64) if value >> 63 else value


_GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment: 2**64 / golden ratio, odd
_MIX_1 = 0xBF58476D1CE4E5B9
_MIX_2 = 0x94D049BB133111EB
_GOLDEN_I64, _MIX_1_I64, _MIX_2_I64 = _as_int64(_GOLDEN), _as_int64(_MIX_1), _as_int64(_MIX_2)

# Independent random streams. Each consumer draws from its own stream, so e.g. turning on
# random replacement does not change which tokens are chosen.
_STREAM_SELECT = 1  # per token position: ranking keys for choosing targets (tokens or word starts)
_STREAM_ROUND = 2  # per row (counter 0): the uniform of the probabilistic rounding of the count
_STREAM_FATE = 3  # per token position: mask / random / keep (whole words read it at the word start)
_STREAM_REPLACE = 4  # per token position: which random token
_STREAM_SPAN_LENGTH = 5  # per span rank: span length
_STREAM_SPAN_START = 6  # per span rank: span start word
_STREAM_SPAN_FATE = 7  # per span rank: mask / random / keep for the whole span

# Ranking keys keep 43 random bits and put the position within the row in the low 20 bits: keys
# are then distinct, and the rare tie of the random bits is broken by the position within the
# row — never by the padded column — so choices stay independent of padding.
_POSITION_BITS = 20
_MAX_ROW_TOKENS = 1 << _POSITION_BITS


def _mix64_int(z: int) -> int:
    """splitmix64's finaliser on a Python int (unsigned 64-bit)."""
    z &= _U64
    z = ((z ^ (z >> 30)) * _MIX_1) & _U64
    z = ((z ^ (z >> 27)) * _MIX_2) & _U64
    return z ^ (z >> 31)


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's ``>>`` is arithmetic)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _mix64(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on an int64 tensor, bit-identical to :func:`_mix64_int`."""
    z = (z ^ _shift_right(z, 30)) * _MIX_1_I64
    z = (z ^ _shift_right(z, 27)) * _MIX_2_I64
    return z ^ _shift_right(z, 31)


def _epoch_key(seed: int, epoch: int) -> int:
    """One 64-bit key per (seed, epoch), chained so nearby seeds and epochs land far apart."""
    return _mix64_int(_mix64_int(seed + _GOLDEN) + epoch + _GOLDEN)


def reference_random_bits(seed: int, epoch: int, index: int, stream: int, counter: int) -> int:
    """The 64 random bits (as an unsigned int) behind stream ``stream`` at ``counter`` for dataset
    row ``index`` — a plain, one-number-at-a-time statement of what :class:`BatchMasker` computes
    vectorised. ``counter`` is the position among the row's real tokens, or a span rank.

    Every step is splitmix64's finaliser, which from state 0 gives splitmix64's first output
    (0xe220a8397b1dcdaf in Vigna's reference ``splitmix64.c``); the vectorised path of
    :class:`BatchMasker` gives the same bits (the value itself was recorded from this function):

    >>> hex(_mix64_int(0 + _GOLDEN))
    '0xe220a8397b1dcdaf'
    >>> hex(reference_random_bits(1, 0, 0, 1, 0))
    '0x4e4c43b89eccd15e'
    >>> bits = _random_bits(_row_stream_keys(1, 0, torch.tensor([0]), [1]), torch.tensor([[0]]))  # (S, B, N)
    >>> hex(int(bits) & _U64)  # int64 -> unsigned
    '0x4e4c43b89eccd15e'
    """
    row = _mix64_int(_epoch_key(seed, epoch) + (index + 1) * _GOLDEN)
    row_stream = _mix64_int(row ^ _mix64_int(stream * _GOLDEN))
    return _mix64_int(row_stream + (counter + 1) * _GOLDEN)


def _row_stream_keys(seed: int, epoch: int, indices: torch.Tensor, streams: Sequence[int]) -> torch.Tensor:
    """(S, B) int64: one key per (stream, row); the first three steps of ``reference_random_bits``."""
    base = _as_int64(_epoch_key(seed, epoch) + _GOLDEN)
    row = _mix64(indices * _GOLDEN_I64 + base)  # (B,) == mix(epoch_key + (index + 1) * golden)
    salts = torch.tensor([_as_int64(_mix64_int(s * _GOLDEN)) for s in streams], dtype=torch.long, device=indices.device)
    return _mix64(row[None, :] ^ salts[:, None])  # (S, B)


def _random_bits(row_stream_keys: torch.Tensor, counters: torch.Tensor) -> torch.Tensor:
    """(S, B, N) int64 random bits for counters (B, N) under each of the (S, B) stream keys."""
    return _mix64(row_stream_keys[:, :, None] + (counters[None] + 1) * _GOLDEN_I64)


def _uniform(bits: torch.Tensor) -> torch.Tensor:
    """Float64 uniforms in [0, 1) from the top 53 random bits."""
    return _shift_right(bits, 11).to(torch.float64) * (2.0**-53)


def _choose_exactly(
    bits: torch.Tensor, eligible: torch.Tensor, counts: torch.Tensor, positions: torch.Tensor
) -> torch.Tensor:
    """Choose exactly ``counts[b]`` of the eligible positions of each row, uniformly without
    replacement: the ``counts[b]`` eligible positions with the smallest random keys.

    bits (B, T) int64, eligible (B, T) bool, counts (B,) long <= eligible.sum(1),
    positions (B, T) long < 2**20 (position among the row's real tokens). Returns (B, T) bool.
    """
    keys = (_shift_right(bits, 1) & ~(_MAX_ROW_TOKENS - 1)) | positions  # (B, T), distinct per row
    keys = keys.masked_fill(~eligible, _INT64_MAX)
    most = int(counts.max()) if counts.numel() else 0
    if most == 0:
        return torch.zeros_like(eligible)
    smallest = keys.topk(most, dim=1, largest=False, sorted=True).values  # (B, most)
    threshold = smallest.gather(1, (counts - 1).clamp(min=0)[:, None])  # (B, 1): the counts[b]-th smallest key
    return eligible & (keys <= threshold) & (counts > 0)[:, None]


def _lookup(table: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """``table[ids]`` for a 1-d table and ids of any shape. ``index_select`` rather than advanced
    indexing: for a batch-sized lookup, torch's ``index`` kernel goes multi-threaded and on a
    busy 2-core machine waits milliseconds for its second thread (measured: 8 ms vs 10 us)."""
    return table.index_select(0, ids.reshape(-1)).view(ids.shape)


def _alias_table(weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Walker/Vose alias table for drawing slot i with probability weights[i] / sum(weights):
    draw a slot uniformly, keep it with probability ``prob[slot]``, else take ``alias[slot]``.
    weights (R,) float64 > 0; returns prob (R,) float64 and alias (R,) long. Built once at
    start-up (a Python loop over R, ~25 ms for a 50k vocabulary)."""
    size = weights.numel()
    weights = weights.to(torch.float64)
    scaled = (weights * (size / weights.sum())).tolist()
    prob, alias = [1.0] * size, list(range(size))
    small = [i for i, w in enumerate(scaled) if w < 1.0]
    large = [i for i, w in enumerate(scaled) if w >= 1.0]
    while small and large:
        low, high = small.pop(), large[-1]
        prob[low], alias[low] = scaled[low], high
        scaled[high] -= 1.0 - scaled[low]
        if scaled[high] < 1.0:
            small.append(large.pop())
    # Whatever is left holds probability 1 up to rounding.
    return torch.tensor(prob, dtype=torch.float64), torch.tensor(alias, dtype=torch.long)


def _shift_in_false(mask: torch.Tensor) -> torch.Tensor:
    """(B, T) -> (B, T): ``mask`` moved one column right, False in column 0 ("the previous token")."""
    return torch.cat([torch.zeros_like(mask[:, :1]), mask[:, :-1]], dim=1)


class _DeviceTables(NamedTuple):
    """A masker's lookup tables on one device; ``None`` where its config never reads the table."""

    is_special: torch.Tensor  # (V,) bool
    word_starts: torch.Tensor | None  # (V,) bool: whole-word and span masking
    replacement_ids: torch.Tensor | None  # (R,) long: random_token_prob > 0
    alias_prob: torch.Tensor | None  # (R,) float64: frequency-weighted replacements
    alias: torch.Tensor | None  # (R,) long, slots into replacement_ids; set with alias_prob
    span_cdf: torch.Tensor  # (M-1,) float64


class BatchMasker:
    """Corrupt a padded batch for masked-LM training, reproducibly per dataset row.

    >>> cfg = MaskingConfig(mask_prob=0.5)
    >>> masker = BatchMasker(cfg, vocab_size=20, mask_idx=19, pad_idx=1, special_ids=[0, 1, 2, 3, 19])
    >>> tokens = torch.tensor([[0, 5, 6, 7, 8, 2], [0, 9, 10, 2, 1, 1]])
    >>> masked, targets = masker(tokens, torch.tensor([7, 3]), epoch=1)
    >>> targets.ne(1).sum(1).tolist()  # int(0.5 * n + u): 4 ordinary tokens -> 2, 2 -> 1
    [2, 1]
    >>> again, _ = masker(tokens[1:, :4], torch.tensor([3]), epoch=1)  # row 3 alone, unpadded
    >>> torch.equal(again[0], masked[1, :4])
    True
    """

    def __init__(
        self,
        cfg: MaskingConfig,
        *,
        vocab_size: int,
        mask_idx: int,
        pad_idx: int,
        special_ids: Sequence[int],
        word_starts: torch.Tensor | None = None,
        replacement_weights: torch.Tensor | None = None,
        seed: int = 1,
    ) -> None:
        """
        Args:
            cfg: what to mask.
            vocab_size: dictionary size; token ids are in ``[0, vocab_size)``.
            mask_idx: index of ``<mask>``.
            pad_idx: index of ``<pad>``; also the "no target" value of the returned targets.
            special_ids: indices never chosen and never used as random replacements (``<s>``,
                ``<pad>``, ``</s>``, ``<unk>``, ``<mask>``, ``madeupword*``); ``pad_idx`` and
                ``mask_idx`` are added if missing.
            word_starts: bool (vocab_size,), True where a dictionary index begins a word;
                required for ``mask_whole_words`` and ``span_masking``.
            replacement_weights: float (vocab_size,) >= 0, e.g. dictionary counts; required for
                ``freq_weighted_replacement`` when ``random_token_prob > 0``, unused otherwise.
            seed: base seed of all random streams.
        """
        if not isinstance(cfg, MaskingConfig):
            raise ValueError(f"cfg must be a MaskingConfig, got {type(cfg).__name__}")
        if not isinstance(vocab_size, int) or vocab_size < 1:
            raise ValueError(f"vocab_size must be a positive int, got {vocab_size!r}")
        for name, value in (("mask_idx", mask_idx), ("pad_idx", pad_idx)):
            if not isinstance(value, int) or not 0 <= value < vocab_size:
                raise ValueError(f"{name} must be an int in [0, vocab_size={vocab_size}), got {value!r}")
        if mask_idx == pad_idx:
            raise ValueError(f"mask_idx and pad_idx must differ, both are {mask_idx}")
        special_list = [int(i) for i in special_ids]
        bad = [i for i in special_list if not 0 <= i < vocab_size]
        if bad:
            raise ValueError(f"special_ids must be in [0, vocab_size={vocab_size}), got {bad}")
        if not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")

        self.cfg = cfg
        self.vocab_size = vocab_size
        self.mask_idx = mask_idx
        self.pad_idx = pad_idx
        self.seed = seed

        is_special = torch.zeros(vocab_size, dtype=torch.bool)  # (V,)
        is_special[special_list + [pad_idx, mask_idx]] = True
        self._is_special = is_special

        self._word_starts: torch.Tensor | None = None
        if cfg.mask_whole_words or cfg.span_masking:
            if word_starts is None:
                mode = "span_masking" if cfg.span_masking else "mask_whole_words"
                raise ValueError(f"word_starts is required for MaskingConfig.{mode}")
            if not isinstance(word_starts, torch.Tensor) or word_starts.shape != (vocab_size,):
                got = tuple(word_starts.shape) if isinstance(word_starts, torch.Tensor) else type(word_starts).__name__
                raise ValueError(f"word_starts must be a tensor of shape ({vocab_size},), got {got}")
            if word_starts.dtype != torch.bool and not ((word_starts == 0) | (word_starts == 1)).all():
                raise ValueError("word_starts must be bool (or 0/1)")
            self._word_starts = word_starts.detach().to("cpu", torch.bool)

        # Random replacements: the allowed ids, and for frequency weighting an alias table over
        # them (O(1) per draw, unlike a search in a 50k-entry CDF). Zero-weight ids are left out
        # of the table, so no rounding can ever draw one.
        self._replacement_ids: torch.Tensor | None = None  # (R,) long
        self._alias_prob: torch.Tensor | None = None  # (R,) float64
        self._alias: torch.Tensor | None = None  # (R,) long, slots into _replacement_ids
        if cfg.random_token_prob > 0:
            if cfg.freq_weighted_replacement:
                if replacement_weights is None:
                    raise ValueError("replacement_weights is required for MaskingConfig.freq_weighted_replacement")
                if not isinstance(replacement_weights, torch.Tensor) or replacement_weights.shape != (vocab_size,):
                    raise ValueError(f"replacement_weights must be a tensor of shape ({vocab_size},)")
                weights = replacement_weights.detach().to("cpu", torch.float64).clone()
                if not torch.isfinite(weights).all() or (weights < 0).any():
                    raise ValueError("replacement_weights must be finite and >= 0")
                weights[is_special] = 0.0
                ids = weights.gt(0).nonzero().view(-1)
                if ids.numel() == 0:
                    raise ValueError("replacement_weights gives no positive weight to any non-special token")
                self._alias_prob, self._alias = _alias_table(weights[ids])
            else:
                ids = (~is_special).nonzero().view(-1)
                if ids.numel() == 0:
                    raise ValueError("random_token_prob > 0 but every vocabulary entry is in special_ids")
            self._replacement_ids = ids

        # Span lengths 1..span_max_words with P(L) ∝ p (1-p)^(L-1), as SpanBERT's len_distrib.
        q = 1.0 - cfg.span_p
        lengths = range(1, cfg.span_max_words + 1)
        pmf = torch.tensor([cfg.span_p * q ** (length - 1) for length in lengths], dtype=torch.float64)  # (M,)
        self._span_cdf = (pmf.cumsum(0) / pmf.sum())[:-1].contiguous()  # (M-1,): boundaries between lengths
        self._span_mean_words = float((pmf * torch.arange(1, cfg.span_max_words + 1)).sum() / pmf.sum())

        self._device_tables: dict[torch.device, _DeviceTables] = {}

    # -- public -----------------------------------------------------------------------------

    def __call__(self, tokens: torch.Tensor, indices: torch.Tensor, epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Mask a batch.

        Args:
            tokens: (B, T) long, right- or left-padded with ``pad_idx``; must not contain ``<mask>``.
            indices: (B,) integer, the dataset index of each row.
            epoch: the training epoch (fairseq's ``set_epoch`` value).

        Returns:
            ``(masked_tokens, targets)``, both (B, T) long: the corrupted input, and the original
            token at chosen positions with ``pad_idx`` elsewhere (fairseq's masked_lm convention:
            the criterion selects targets with ``target.ne(pad)``).
        """
        self._check_inputs(tokens, indices, epoch)
        if tokens.numel() == 0:
            return tokens.clone(), tokens.clone()
        tables = self._tables(tokens.device)
        indices = indices.to(device=tokens.device, dtype=torch.long)

        real = tokens.ne(self.pad_idx)  # (B, T)
        # Position among the row's real tokens: the counter of every per-token random number, so
        # left padding, right padding and padding amount all give the same numbers.
        positions = real.cumsum(1) - 1  # (B, T); -1 on left padding, never used there
        candidate = ~_lookup(tables.is_special, tokens)  # (B, T); pad is special

        # Per-token streams first (counter = position), then the per-row and per-span ones.
        token_streams = (_STREAM_SELECT, _STREAM_FATE, _STREAM_REPLACE)
        span_streams = (_STREAM_SPAN_LENGTH, _STREAM_SPAN_START, _STREAM_SPAN_FATE)
        keys = _row_stream_keys(self.seed, epoch, indices, (*token_streams, _STREAM_ROUND, *span_streams))  # (7, B)
        token_keys, round_keys, span_keys = keys[:3], keys[3:4], keys[4:]
        per_token = 3 if self.cfg.random_token_prob > 0 else 2  # no replacement stream when nothing is replaced
        bits = _random_bits(token_keys[:per_token], positions)  # (per_token, B, T)
        round_uniform = _uniform(_random_bits(round_keys, torch.zeros_like(indices)[:, None]))[0, :, 0]  # (B,)

        if self.cfg.span_masking:
            chosen, fate, _ = self._choose_spans(tokens, candidate, positions, round_uniform, span_keys)
        elif self.cfg.mask_whole_words:
            chosen, fate = self._choose_words(tokens, candidate, positions, round_uniform, bits[0], _uniform(bits[1]))
        else:
            num_tokens = candidate.sum(1)  # (B,)
            count = self._count(num_tokens, round_uniform)
            chosen = _choose_exactly(bits[0], candidate, count, positions)
            fate = _uniform(bits[1])  # (B, T)

        return self._corrupt(tokens, chosen, fate, bits[2] if per_token == 3 else None, tables)

    # -- choosing targets -------------------------------------------------------------------

    def _count(self, population: torch.Tensor, round_uniform: torch.Tensor) -> torch.Tensor:
        """(B,) -> (B,): ``int(mask_prob * population + u)``, fairseq's probabilistic rounding."""
        count = (self.cfg.mask_prob * population.to(torch.float64) + round_uniform).floor().long()
        return torch.minimum(count, population)

    def _word_structure(self, tokens: torch.Tensor, candidate: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Word starts (B, T) bool and, for every token, the column of its word's start (B, T).

        A word begins at an ordinary token marked in ``word_starts`` or following a special token
        or padding, so words never contain or cross special tokens.
        """
        word_starts = self._tables(tokens.device).word_starts
        assert word_starts is not None
        starts = candidate & (_lookup(word_starts, tokens) | ~_shift_in_false(candidate))
        columns = torch.arange(tokens.size(1), device=tokens.device).expand_as(tokens)
        # Running maximum of "column if a word starts here": the start of the word each token is
        # in (meaningful on candidate tokens only, which is where it is read).
        start_column = torch.where(starts, columns, -1).cummax(1).values.clamp(min=0)  # (B, T)
        return starts, start_column

    def _choose_words(
        self,
        tokens: torch.Tensor,
        candidate: torch.Tensor,
        positions: torch.Tensor,
        round_uniform: torch.Tensor,
        select_bits: torch.Tensor,
        token_fate: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Whole-word masking as fairseq: choose ``int(mask_prob * n_words + u)`` words; every
        token of a chosen word is a target, and the word's fate is the one drawn at its first
        token. Returns chosen (B, T) bool and fate uniforms (B, T)."""
        starts, start_column = self._word_structure(tokens, candidate)
        count = self._count(starts.sum(1), round_uniform)
        chosen_starts = _choose_exactly(select_bits, starts, count, positions)  # (B, T)
        chosen = candidate & chosen_starts.gather(1, start_column)
        return chosen, token_fate.gather(1, start_column)

    def _span_lengths(self, uniform: torch.Tensor) -> torch.Tensor:
        """Inverse CDF of the truncated geometric: uniforms (...) in [0, 1) -> lengths (...) in
        ``1..span_max_words``."""
        cdf = self._tables(uniform.device).span_cdf  # (M-1,)
        # Count the boundaries at or below u: (..., M-1) comparisons, cheap for M ~ 10, and unlike
        # torch.searchsorted never multi-threaded (see _lookup).
        return (uniform[..., None] >= cdf).sum(-1) + 1

    def _choose_spans(
        self,
        tokens: torch.Tensor,
        candidate: torch.Tensor,
        positions: torch.Tensor,
        round_uniform: torch.Tensor,
        span_keys: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """SpanBERT span masking, vectorised over rows and spans.

        Span number ``k`` of a row (its *rank*) has length ``L_k`` words (truncated geometric)
        and start word ``s_k`` uniform over the row's words; it covers words
        ``[s_k, min(s_k + L_k, end of s_k's segment))`` — a segment being a run of ordinary
        tokens between special tokens. Spans are taken in rank order until the tokens covered
        reach the budget ``int(mask_prob * n_tokens + u)``. Instead of SpanBERT's loop, every
        row draws ``K`` spans at once and each word records its *owner*: the lowest rank that
        covers it (a scatter-min over the at most ``K * span_max_words`` covered words). The
        tokens newly covered by rank ``k`` are then the lengths of the words it owns, their
        cumulative sum says which rank reaches the budget, and that last span contributes its
        new words left to right while the total is still below the budget. If ``K`` spans do not
        reach the budget, ``K`` doubles and the batch is redone; since span ``k``'s random
        numbers depend only on ``k``, the result does not depend on ``K`` (nor on the batch).

        Deviations from SpanBERT's loop: a span starting on an already masked word is kept (it
        adds whatever it newly covers) rather than re-drawn; a word covered by two spans takes
        the fate of the earlier one; the last span stops at a word boundary (SpanBERT stops at
        the exact token count, possibly mid-word), so a row may exceed its budget by less than
        one word; the budget is rounded probabilistically as in the other modes (SpanBERT: ceil).

        Returns chosen (B, T) bool, fate uniforms (B, T) float64 (one per span), and the rank of
        the span each chosen token belongs to (B, T) long, -1 elsewhere (for tests).
        """
        batch, length = tokens.shape
        device = tokens.device
        max_words = self.cfg.span_max_words
        starts, _ = self._word_structure(tokens, candidate)
        ordinal = starts.long().cumsum(1) - 1  # (B, T): word number of each candidate token
        num_words = starts.sum(1)  # (B,)
        budget = self._count(candidate.sum(1), round_uniform)  # (B,) tokens to cover
        unused = length  # a spare word column that absorbs scatters from non-words

        word_column = torch.where(candidate, ordinal, unused)  # (B, T)
        word_lengths = torch.zeros(batch, length + 1, dtype=torch.long, device=device)
        word_lengths.scatter_add_(1, word_column, torch.ones_like(word_column))
        word_lengths = word_lengths[:, :length]  # (B, W=T) tokens per word

        # A span started at word w may run up to (not including) the next word that opens a
        # segment, i.e. that follows a special token; the words of row b end at num_words[b].
        opens_segment = torch.zeros(batch, length + 1, dtype=torch.bool, device=device)
        opens_segment.scatter_(1, torch.where(starts, ordinal, unused), starts & ~_shift_in_false(candidate))
        word_numbers = torch.arange(length, device=device).expand(batch, length)
        opener = torch.where(opens_segment[:, 1 : length + 1], word_numbers + 1, length)  # (B, W): w+1 if it opens one
        segment_end = opener.flip(1).cummin(1).values.flip(1)  # (B, W): first opener after w
        segment_end = torch.minimum(segment_end, num_words[:, None])

        # Enough spans for the largest budget at the mean length, with slack for overlaps.
        spans = int(2 * int(budget.max() if batch else 0) / self._span_mean_words) + 8
        offsets = torch.arange(max_words, device=device)  # (M,)
        while True:
            ranks = torch.arange(spans, device=device)  # (K,)
            bits = _random_bits(span_keys, ranks.expand(batch, spans))  # (3, B, K)
            span_length = self._span_lengths(_uniform(bits[0]))  # (B, K)
            span_start = (_uniform(bits[1]) * num_words[:, None]).long()  # (B, K)
            span_start = torch.minimum(span_start, (num_words - 1).clamp(min=0)[:, None])
            span_end = torch.minimum(span_start + span_length, segment_end.gather(1, span_start))  # (B, K)

            covered_word = span_start[:, :, None] + offsets  # (B, K, M)
            covered_word = torch.where(covered_word < span_end[:, :, None], covered_word, unused)
            owner = torch.full((batch, length + 1), spans, dtype=torch.long, device=device)
            owner.scatter_reduce_(1, covered_word.view(batch, spans * max_words),
                                  ranks.repeat_interleave(max_words).expand(batch, spans * max_words),
                                  reduce="amin")  # fmt: skip
            owner = owner[:, :length]  # (B, W): lowest covering rank, ``spans`` if none

            new_tokens = torch.zeros(batch, spans + 1, dtype=torch.long, device=device)
            new_tokens.scatter_add_(1, owner, word_lengths)
            new_tokens = new_tokens[:, :spans]  # (B, K): tokens first covered by each rank
            covered = new_tokens.cumsum(1)  # (B, K)
            if batch == 0 or bool((covered[:, -1] >= budget).all()):
                break
            if spans > 64 * length + 64:  # never seen: a budget of every token needs ~W log W / 3.8 spans
                raise RuntimeError(f"span masking did not reach its budget with {spans} spans")
            spans *= 2

        last = (covered < budget[:, None]).sum(1, keepdim=True)  # (B, 1): rank that reaches the budget
        before_last = (covered - new_tokens).gather(1, last.clamp(max=spans - 1))  # (B, 1)
        in_last = owner == last  # (B, W)
        last_lengths = word_lengths * in_last
        before_in_last = last_lengths.cumsum(1) - last_lengths  # (B, W) exclusive prefix
        word_chosen = (owner < last) | (in_last & (before_last + before_in_last < budget[:, None]))  # (B, W)

        token_word = ordinal.clamp(min=0)  # (B, T)
        chosen = candidate & word_chosen.gather(1, token_word)
        span_fate = _uniform(bits[2])  # (B, K)
        token_owner = owner.gather(1, token_word)  # (B, T)
        fate = span_fate.gather(1, token_owner.clamp(max=spans - 1))
        return chosen, fate, torch.where(chosen, token_owner, -1)

    # -- corrupting -------------------------------------------------------------------------

    def _corrupt(
        self,
        tokens: torch.Tensor,
        chosen: torch.Tensor,
        fate: torch.Tensor,
        replace_bits: torch.Tensor | None,
        tables: _DeviceTables,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Apply 80/10/10 to the chosen positions: fate < leave -> keep, < leave + random ->
        random token, else ``<mask>``. (B, T) inputs; returns (masked_tokens, targets)."""
        leave, random = self.cfg.leave_unmasked_prob, self.cfg.random_token_prob
        targets = torch.where(chosen, tokens, self.pad_idx)
        to_mask = chosen & (fate >= leave + random)
        masked = tokens.masked_fill(to_mask, self.mask_idx)
        if replace_bits is not None:
            to_random = chosen & (fate >= leave) & (fate < leave + random)
            ids, alias_prob, alias = tables.replacement_ids, tables.alias_prob, tables.alias
            assert ids is not None  # replace_bits exist only when random_token_prob > 0, which builds ids
            # Only the ~1.5% of positions that get a random token need one looked up.
            bits = replace_bits.masked_select(to_random)  # (N,) in row-major order, as masked_scatter_ reads
            pick = _shift_right(bits, 1) % ids.numel()  # uniform slot; modulo bias < 2**-45
            if alias_prob is not None:
                assert alias is not None  # built together by _alias_table
                # Walker's alias method: keep the slot with probability alias_prob[slot], else take
                # its alias. A second uniform from re-mixing the same bits (a bijection) is
                # independent of the slot for all practical purposes.
                keep_slot = _uniform(_mix64(bits + _GOLDEN_I64)) < alias_prob.index_select(0, pick)
                pick = torch.where(keep_slot, pick, alias.index_select(0, pick))
            masked = masked.masked_scatter_(to_random, ids.index_select(0, pick))
        return masked, targets

    # -- helpers ----------------------------------------------------------------------------

    def _tables(self, device: torch.device) -> _DeviceTables:
        """Lookup tables on ``device``, copied once per device."""
        tables = self._device_tables.get(device)
        if tables is None:

            def move(t: torch.Tensor | None) -> torch.Tensor | None:
                return None if t is None else t.to(device)

            tables = _DeviceTables(
                is_special=self._is_special.to(device),
                word_starts=move(self._word_starts),
                replacement_ids=move(self._replacement_ids),
                alias_prob=move(self._alias_prob),
                alias=move(self._alias),
                span_cdf=self._span_cdf.to(device),
            )
            self._device_tables[device] = tables
        return tables

    def _check_inputs(self, tokens: torch.Tensor, indices: torch.Tensor, epoch: int) -> None:
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.dtype != torch.long:
            got = f"{tuple(tokens.shape)} {tokens.dtype}" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must be a (B, T) long tensor, got {got}")
        if tokens.size(1) > _MAX_ROW_TOKENS:
            raise ValueError(f"tokens rows are limited to {_MAX_ROW_TOKENS} tokens, got {tokens.size(1)}")
        if (
            not isinstance(indices, torch.Tensor)
            or indices.shape != (tokens.size(0),)
            or indices.dtype.is_floating_point
            or indices.dtype.is_complex
            or indices.dtype == torch.bool
        ):
            got = (f"{tuple(indices.shape)} {indices.dtype}" if isinstance(indices, torch.Tensor)
                   else type(indices).__name__)  # fmt: skip
            raise ValueError(f"indices must be an integer tensor of shape ({tokens.size(0)},), got {got}")
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise ValueError(f"epoch must be an int, got {epoch!r}")
        if tokens.numel():
            low, high = int(tokens.min()), int(tokens.max())
            if low < 0 or high >= self.vocab_size:
                raise ValueError(f"tokens must be in [0, vocab_size={self.vocab_size}), got values in [{low}, {high}]")
            # fairseq's MaskTokensDataset asserts the same: a <mask> in the input would be
            # indistinguishable from a masked position.
            if bool(tokens.eq(self.mask_idx).any()):
                raise ValueError(f"tokens contain mask_idx={self.mask_idx}; the input must not be masked already")
