"""Tests of roberta_ext.data.masking: statistics, exact counts, reproducibility, independence from
batching and padding, whole words, SpanBERT spans, replacements, validation, and fairseq's
MaskTokensDataset as a statistical peer."""

from __future__ import annotations

import doctest
import math
import re

import pytest
import torch

from roberta_ext.data import masking
from roberta_ext.data.masking import BatchMasker, MaskingConfig, reference_random_bits
from tests.peers import require

VOCAB = 1000
BOS, PAD, EOS, UNK = 0, 1, 2, 3
MADEUP = VOCAB - 2  # a "madeupword" filler: special, never chosen, never a replacement
MASK = VOCAB - 1
SPECIALS = [BOS, PAD, EOS, UNK, MADEUP, MASK]
ORDINARY = torch.tensor([i for i in range(VOCAB) if i not in SPECIALS])


def _word_starts(fraction: float = 0.6) -> torch.Tensor:
    """(VOCAB,) bool: ~``fraction`` of the ids begin a word, so words average ~1/fraction tokens."""
    starts = torch.rand(VOCAB, generator=torch.Generator().manual_seed(123)) < fraction
    starts[SPECIALS] = True
    return starts


WORD_STARTS = _word_starts()


def _rows(count: int, low: int = 5, high: int = 120, seed: int = 0, pairs: bool = False) -> list[torch.Tensor]:
    """``count`` unpadded rows ``<s> ... </s>`` (or ``<s> A </s> </s> B </s>``) of ordinary ids."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(count):
        size = int(torch.randint(low, high + 1, (1,), generator=generator))
        body = ORDINARY[torch.randint(0, ORDINARY.numel(), (size,), generator=generator)]
        if pairs and size >= 2:
            cut = size // 2
            body = torch.cat([body[:cut], torch.tensor([EOS, EOS]), body[cut:]])
        rows.append(torch.cat([torch.tensor([BOS]), body, torch.tensor([EOS])]))
    return rows


def _pad(rows: list[torch.Tensor], side: str = "right", extra: int = 0) -> torch.Tensor:
    """(B, T) batch of ``rows`` padded on ``side`` with ``extra`` more columns than needed."""
    length = max(len(row) for row in rows) + extra
    batch = torch.full((len(rows), length), PAD)
    for i, row in enumerate(rows):
        if side == "right":
            batch[i, : len(row)] = row
        else:
            batch[i, length - len(row) :] = row
    return batch


def _unpad(batch: torch.Tensor, reference: torch.Tensor) -> list[torch.Tensor]:
    """The real (non-pad) entries of each row of ``batch``, located by ``reference`` (the input)."""
    return [row[ref.ne(PAD)] for row, ref in zip(batch, reference)]


def _masker(seed: int = 1, weights: torch.Tensor | None = None, word_starts: torch.Tensor = WORD_STARTS,
            **config) -> BatchMasker:  # fmt: skip
    return BatchMasker(MaskingConfig(**config), vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=SPECIALS,
                       word_starts=word_starts, replacement_weights=weights, seed=seed)  # fmt: skip


def _round_uniform(seed: int, epoch: int, index: int) -> float:
    """The uniform of the probabilistic rounding of a row's count, from the plain reference hash."""
    return (reference_random_bits(seed, epoch, index, masking._STREAM_ROUND, 0) >> 11) * 2.0**-53


def _expected_count(mask_prob: float, population: int, seed: int, epoch: int, index: int) -> int:
    return min(int(mask_prob * population + _round_uniform(seed, epoch, index)), population)


def _words(row: torch.Tensor) -> list[list[int]]:
    """Columns of each word of an unpadded row: a word starts at a word-start ordinary token or
    after a special token, and never contains a special token."""
    words: list[list[int]] = []
    previous_special = True
    for column, token in enumerate(row.tolist()):
        if token in SPECIALS:
            previous_special = True
            continue
        if previous_special or bool(WORD_STARTS[token]):
            words.append([])
        words[-1].append(column)
        previous_special = False
    return words


MODES = {
    "token": {},
    "token-freq": {"freq_weighted_replacement": True},
    "whole-word": {"mask_whole_words": True},
    "span": {"span_masking": True},
}
COUNTS = torch.arange(VOCAB, dtype=torch.float64) % 7  # weights with zeros, for the freq mode


# -- the hash -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 0, -5, 2**62 + 12345])
def test_vectorised_hash_equals_reference(seed: int) -> None:
    indices = torch.tensor([0, 1, 2, 17, 10**9, 2**40 + 3])
    counters = torch.tensor([0, 1, 2, 511, 5, 70000]).expand(len(indices), -1)
    for epoch in (0, 1, 99):
        keys = masking._row_stream_keys(seed, epoch, indices, [1, 4])
        bits = masking._random_bits(keys, counters)  # (2, B, N)
        for s, stream in enumerate([1, 4]):
            for b, index in enumerate(indices.tolist()):
                for n, counter in enumerate(counters[b].tolist()):
                    expected = reference_random_bits(seed, epoch, index, stream, counter)
                    assert int(bits[s, b, n]) & ((1 << 64) - 1) == expected


def test_hash_uniforms_look_uniform() -> None:
    keys = masking._row_stream_keys(1, 0, torch.arange(64), [1])
    uniform = masking._uniform(masking._random_bits(keys, torch.arange(1000).expand(64, -1)))  # (1, 64, 1000)
    assert 0.0 <= float(uniform.min()) and float(uniform.max()) < 1.0
    histogram = torch.histc(uniform.float(), bins=10, min=0.0, max=1.0)
    assert (histogram / uniform.numel() - 0.1).abs().max() < 0.005
    # Neighbouring positions are not correlated.
    flat = uniform[0]
    correlation = torch.corrcoef(torch.stack([flat[:, :-1].reshape(-1), flat[:, 1:].reshape(-1)]))[0, 1]
    assert abs(float(correlation)) < 0.01


def test_alias_table_gives_exact_distribution() -> None:
    weights = torch.tensor([5.0, 1.0, 0.5, 3.0, 10.0, 0.25, 2.0])
    prob, alias = masking._alias_table(weights)
    implied = prob / len(weights)
    implied.index_add_(0, alias, (1.0 - prob) / len(weights))
    torch.testing.assert_close(implied, weights.double() / weights.sum(), rtol=0, atol=1e-12)


# -- a plain, row-at-a-time reference implementation ----------------------------------------------


def _reference_mask_row(masker: BatchMasker, row: list[int], index: int, epoch: int) -> tuple[list[int], list[int]]:
    """What BatchMasker computes for one unpadded row, written as loops over tokens, words and
    spans from ``reference_random_bits``: the statement of the semantics the fast path must meet."""
    cfg = masker.cfg

    def uniform_at(stream: int, counter: int) -> float:
        return (reference_random_bits(masker.seed, epoch, index, stream, counter) >> 11) * 2.0**-53

    def count(population: int) -> int:
        return min(int(cfg.mask_prob * population + uniform_at(masking._STREAM_ROUND, 0)), population)

    def choose(eligible: list[int], how_many: int) -> set[int]:
        # Smallest keys: 43 random bits above the position (see masking._choose_exactly).
        low_bits = masking._MAX_ROW_TOKENS - 1
        keys = sorted(
            (((reference_random_bits(masker.seed, epoch, index, masking._STREAM_SELECT, i) >> 1) & ~low_bits) | i, i)
            for i in eligible
        )
        return {i for _, i in keys[:how_many]}

    special = masker._is_special.tolist()
    ordinary = [not special[t] for t in row]
    starts = [ordinary[i] and (bool(WORD_STARTS[t]) or i == 0 or not ordinary[i - 1]) for i, t in enumerate(row)]
    words: list[list[int]] = []
    for i in range(len(row)):
        if starts[i]:
            words.append([])
        if ordinary[i]:
            words[-1].append(i)
    fate: dict[int, float] = {}  # column -> uniform deciding mask / random / keep
    if cfg.span_masking:
        opens_segment = [words[w][0] == 0 or not ordinary[words[w][0] - 1] for w in range(len(words))]
        cdf = masker._span_cdf.tolist()
        budget, covered, owner, rank = count(sum(ordinary)), 0, {}, 0
        while covered < budget:
            length = 1 + sum(uniform_at(masking._STREAM_SPAN_LENGTH, rank) >= c for c in cdf)
            start = min(int(uniform_at(masking._STREAM_SPAN_START, rank) * len(words)), len(words) - 1)
            end = start + 1
            while end < start + length and end < len(words) and not opens_segment[end]:
                end += 1
            for w in range(start, end):
                if w not in owner and covered < budget:
                    owner[w] = rank
                    covered += len(words[w])
            rank += 1
        for w, rank in owner.items():
            for i in words[w]:
                fate[i] = uniform_at(masking._STREAM_SPAN_FATE, rank)
    elif cfg.mask_whole_words:
        for w in words:
            if w[0] in choose([w[0] for w in words], count(len(words))):
                for i in w:
                    fate[i] = uniform_at(masking._STREAM_FATE, w[0])
    else:
        for i in choose([i for i in range(len(row)) if ordinary[i]], count(sum(ordinary))):
            fate[i] = uniform_at(masking._STREAM_FATE, i)

    masked, targets = list(row), [masker.pad_idx] * len(row)
    leave, random = cfg.leave_unmasked_prob, cfg.random_token_prob
    ids = masker._replacement_ids.tolist() if masker._replacement_ids is not None else []
    for i, u in fate.items():
        targets[i] = row[i]
        if u >= leave + random:
            masked[i] = masker.mask_idx
        elif u >= leave:
            bits = reference_random_bits(masker.seed, epoch, index, masking._STREAM_REPLACE, i)
            slot = (bits >> 1) % len(ids)
            if masker._alias_prob is not None:
                keep = (masking._mix64_int(bits + masking._GOLDEN) >> 11) * 2.0**-53 < float(masker._alias_prob[slot])
                slot = slot if keep else int(masker._alias[slot])
            masked[i] = ids[slot]
    return masked, targets


@pytest.mark.parametrize("mode", MODES)
def test_fast_path_equals_reference(mode: str) -> None:
    rows = _rows(30, low=0, high=150, seed=20, pairs=True) + _rows(10, low=1, high=10, seed=21)
    rows[3][5] = UNK
    indices = torch.randint(0, 10**12, (len(rows),), generator=torch.Generator().manual_seed(1))
    for mask_prob in (0.15, 0.6):
        masker = _masker(seed=7, weights=COUNTS, mask_prob=mask_prob, leave_unmasked_prob=0.2, random_token_prob=0.3,
                         **MODES[mode])  # fmt: skip
        tokens = _pad(rows, "left", 2)
        masked, targets = masker(tokens, indices, epoch=5)
        for row, out, target, index in zip(rows, _unpad(masked, tokens), _unpad(targets, tokens), indices.tolist()):
            expected_masked, expected_targets = _reference_mask_row(masker, row.tolist(), index, 5)
            assert out.tolist() == expected_masked
            assert target.tolist() == expected_targets


# -- counts and statistics ------------------------------------------------------------------------


def test_token_mask_rate_and_replacement_split() -> None:
    rows = _rows(600, seed=1)
    tokens = _pad(rows)
    masked, targets = _masker()(tokens, torch.arange(len(rows)), epoch=0)
    ordinary = ~torch.isin(tokens, torch.tensor(SPECIALS))
    chosen = targets.ne(PAD)
    assert abs(chosen.sum() / ordinary.sum() - 0.15) < 0.005
    became_mask = (masked.eq(MASK) & chosen).sum() / chosen.sum()
    kept = (masked.eq(tokens) & chosen).sum() / chosen.sum()
    randomised = (masked.ne(MASK) & masked.ne(tokens) & chosen).sum() / chosen.sum()
    assert abs(became_mask - 0.8) < 0.02 and abs(kept - 0.1) < 0.015 and abs(randomised - 0.1) < 0.015
    assert torch.equal(targets[chosen], tokens[chosen])
    assert torch.equal(masked[~chosen], tokens[~chosen])


@pytest.mark.parametrize("mask_prob", [0.15, 0.5, 1.0, 0.0])
def test_exact_count_per_row(mask_prob: float) -> None:
    rows = _rows(50, low=0, high=60, seed=2)
    tokens = _pad(rows)
    indices = torch.arange(50) * 31 + 7
    _, targets = _masker(seed=3, mask_prob=mask_prob)(tokens, indices, epoch=4)
    for row, target, index in zip(rows, targets, indices.tolist()):
        population = len(row) - 2
        count = int(target.ne(PAD).sum())
        assert count == _expected_count(mask_prob, population, 3, 4, index)
        assert math.floor(mask_prob * population) <= count <= math.floor(mask_prob * population) + 1


def test_whole_word_count_and_rate() -> None:
    rows = _rows(400, seed=4)
    tokens = _pad(rows)
    masked, targets = _masker(mask_whole_words=True)(tokens, torch.arange(400), epoch=2)
    chosen_tokens, total_tokens = 0, 0
    for i, (row, target) in enumerate(zip(rows, _unpad(targets, tokens))):
        words = _words(row)
        chosen_words = [word for word in words if target[word[0]] != PAD]
        # A word is chosen entirely or not at all.
        for word in words:
            assert len({int(target[c] != PAD) for c in word}) == 1
        assert len(chosen_words) == _expected_count(0.15, len(words), 1, 2, i)
        chosen_tokens += sum(len(word) for word in chosen_words)
        total_tokens += len(row) - 2
    assert abs(chosen_tokens / total_tokens - 0.15) < 0.01


def test_whole_word_fate_is_per_word() -> None:
    rows = _rows(200, seed=5)
    tokens = _pad(rows)
    masked, targets = _masker(mask_whole_words=True, mask_prob=0.5, leave_unmasked_prob=0.5, random_token_prob=0.0)(
        tokens, torch.arange(200), epoch=0
    )
    fates = []
    for row, out, target in zip(rows, _unpad(masked, tokens), _unpad(targets, tokens)):
        for word in _words(row):
            if target[word[0]] != PAD:
                fate = {bool(out[c] == MASK) for c in word}
                assert len(fate) == 1, "a chosen word is masked or kept as a whole"
                fates.append(fate.pop())
    assert abs(sum(fates) / len(fates) - 0.5) < 0.05


# -- reproducibility and independence from batching -------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_deterministic_and_epoch_dependent(mode: str) -> None:
    rows = _rows(8, seed=6)
    tokens, indices = _pad(rows), torch.arange(100, 108)
    first = _masker(weights=COUNTS, **MODES[mode])(tokens, indices, epoch=3)
    second = _masker(weights=COUNTS, **MODES[mode])(tokens, indices, epoch=3)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    other_epoch = _masker(weights=COUNTS, **MODES[mode])(tokens, indices, epoch=4)
    other_seed = _masker(seed=2, weights=COUNTS, **MODES[mode])(tokens, indices, epoch=3)
    other_index = _masker(weights=COUNTS, **MODES[mode])(tokens, indices + 1000, epoch=3)
    for other in (other_epoch, other_seed, other_index):
        assert not torch.equal(first[1], other[1])
        # Every row gets its own mask, not one shared pattern.
        assert sum(not torch.equal(a, b) for a, b in zip(first[1], other[1])) >= 6


@pytest.mark.parametrize("mode", MODES)
def test_row_result_independent_of_batch_and_padding(mode: str) -> None:
    # Very different lengths, so the batch's largest budget (which sizes the span search) differs
    # from each row's own, and pair rows so spans meet </s> </s>.
    rows = _rows(6, low=3, high=20, seed=7) + _rows(4, low=300, high=500, seed=8, pairs=True)
    indices = torch.tensor([5, 900, 3, 77, 1, 12, 40000, 8, 2, 61])
    masker = _masker(weights=COUNTS, mask_prob=0.3, **MODES[mode])
    alone = [masker(row[None], indices[i : i + 1], epoch=1) for i, row in enumerate(rows)]
    layouts = []
    for side, extra in (("right", 0), ("left", 0), ("right", 37), ("left", 5)):
        tokens = _pad(rows, side, extra)
        layouts.append((torch.arange(len(rows)), tokens, masker(tokens, indices, epoch=1)))
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(0))
    tokens = _pad([rows[i] for i in order], "left", 3)
    layouts.append((order, tokens, masker(tokens, indices[order], epoch=1)))
    for order, tokens, (masked, targets) in layouts:
        for position, row_id in enumerate(order.tolist()):
            real = tokens[position].ne(PAD)
            assert torch.equal(masked[position][real], alone[row_id][0][0])
            assert torch.equal(targets[position][real], alone[row_id][1][0])
            assert bool(masked[position][~real].eq(PAD).all()) and bool(targets[position][~real].eq(PAD).all())


@pytest.mark.parametrize("mode", MODES)
def test_specials_and_padding_untouched(mode: str) -> None:
    rows = _rows(100, seed=9, pairs=True)
    for row in rows[::3]:
        row[len(row) // 3] = UNK
        row[len(row) // 2] = MADEUP
    tokens = _pad(rows, "left", 4)
    masked, targets = _masker(weights=COUNTS, mask_prob=1.0, random_token_prob=0.5, **MODES[mode])(
        tokens, torch.arange(100), epoch=0
    )
    special = torch.isin(tokens, torch.tensor(SPECIALS))
    assert torch.equal(masked[special], tokens[special])
    assert bool(targets[special].eq(PAD).all())
    assert bool(targets[~special].ne(PAD).all()), "mask_prob=1 chooses every ordinary token"
    # Replacements are <mask> or ordinary tokens, never another special.
    assert not bool(torch.isin(masked[~special], torch.tensor([BOS, PAD, EOS, UNK, MADEUP])).any())


def test_random_replacements_uniform_over_ordinary_tokens() -> None:
    rows = _rows(400, low=100, high=100, seed=10)
    tokens = _pad(rows)
    masked, _ = _masker(mask_prob=1.0, leave_unmasked_prob=0.0, random_token_prob=1.0)(tokens, torch.arange(400), 0)
    drawn = masked[:, 1:-1].reshape(-1)  # 40,000 draws over 994 ordinary ids
    assert not bool(torch.isin(drawn, torch.tensor(SPECIALS)).any())
    frequency = torch.bincount(drawn, minlength=VOCAB)[ORDINARY].double()
    assert abs(frequency.mean() - 40000 / 994) < 1e-9 and frequency.std() / frequency.mean() < 0.25


def test_freq_weighted_replacement_follows_weights() -> None:
    weights = torch.zeros(VOCAB, dtype=torch.float64)
    weights[10:20] = 1.0
    weights[20:30] = 3.0
    weights[MASK] = weights[BOS] = 100.0  # specials are excluded whatever their count
    rows = _rows(400, low=100, high=100, seed=11)
    tokens = _pad(rows)
    masker = _masker(weights=weights, mask_prob=1.0, leave_unmasked_prob=0.0, random_token_prob=1.0,
                     freq_weighted_replacement=True)  # fmt: skip
    masked, _ = masker(tokens, torch.arange(400), epoch=0)
    drawn = masked[:, 1:-1].reshape(-1)
    assert bool(((drawn >= 10) & (drawn < 30)).all()), "zero-weight and special ids never drawn"
    heavy = float(((drawn >= 20) & (drawn < 30)).double().mean())
    assert abs(heavy - 0.75) < 0.01


# -- spans ------------------------------------------------------------------------------------------


def test_span_length_sampler_is_truncated_geometric() -> None:
    masker = _masker(span_masking=True)
    uniform = torch.rand(200_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    lengths = masker._span_lengths(uniform)
    assert int(lengths.min()) == 1 and int(lengths.max()) == 10
    pmf = torch.tensor([0.2 * 0.8 ** (k - 1) for k in range(1, 11)], dtype=torch.float64)
    pmf /= pmf.sum()
    observed = torch.bincount(lengths, minlength=11)[1:].double() / len(uniform)
    assert (observed - pmf).abs().max() < 0.005
    assert abs(float(lengths.double().mean()) - 3.797) < 0.03  # SpanBERT's mean span length, 3.8 words
    # Edge cases: p = 1 gives single words; a maximum of one word allows nothing else.
    assert bool(_masker(span_masking=True, span_p=1.0)._span_lengths(uniform).eq(1).all())
    assert bool(_masker(span_masking=True, span_max_words=1)._span_lengths(uniform).eq(1).all())


def _spans(masker: BatchMasker, rows: list[torch.Tensor], epoch: int = 0):
    """Chosen (B, T), span rank of each chosen token (B, T), budget (B,) and the padded tokens."""
    tokens = _pad(rows)
    indices = torch.arange(len(rows))
    candidate = ~torch.isin(tokens, torch.tensor(SPECIALS))
    positions = tokens.ne(PAD).cumsum(1) - 1
    streams = (masking._STREAM_ROUND, masking._STREAM_SPAN_LENGTH, masking._STREAM_SPAN_START,
               masking._STREAM_SPAN_FATE)  # fmt: skip
    keys = masking._row_stream_keys(masker.seed, epoch, indices, streams)
    counter_zero = torch.zeros(len(rows), 1, dtype=torch.long)
    round_uniform = masking._uniform(masking._random_bits(keys[:1], counter_zero))[0, :, 0]  # (B,)
    chosen, _, owner = masker._choose_spans(tokens, candidate, positions, round_uniform, keys[1:])
    budget = masker._count(candidate.sum(1), round_uniform)
    return tokens, chosen, owner, budget


def test_spans_cover_budget_with_whole_words() -> None:
    rows = _rows(300, low=10, high=300, seed=12, pairs=True)
    masker = _masker(span_masking=True)
    tokens, chosen, owner, budget = _spans(masker, rows)
    total_chosen = 0
    for i, row in enumerate(rows):
        words = _words(row)
        count = int(chosen[i].sum())
        # Budget reached, overshooting by less than one word.
        assert int(budget[i]) <= count < int(budget[i]) + max(len(w) for w in words)
        for word in words:
            assert len({bool(chosen[i, c]) for c in word}) == 1, "spans are made of whole words"
        # Each span lies inside one segment (never across </s> </s>) and spans at most 10 words.
        for rank in owner[i][chosen[i]].unique().tolist():
            columns = (owner[i] == rank).nonzero().view(-1)
            assert not bool(torch.isin(tokens[i, columns.min() : columns.max() + 1], torch.tensor(SPECIALS)).any())
            assert len({j for j, w in enumerate(words) if w[0] in columns.tolist()}) <= 10
        total_chosen += count
    population = sum(len(row) for row in rows) - sum(int(torch.isin(row, torch.tensor(SPECIALS)).sum()) for row in rows)
    assert abs(total_chosen / population - 0.15) < 0.01


def test_span_budget_matches_probabilistic_rounding() -> None:
    rows = _rows(100, low=10, high=200, seed=13)
    _, _, _, budget = _spans(_masker(span_masking=True), rows)
    for i, row in enumerate(rows):
        assert int(budget[i]) == _expected_count(0.15, len(row) - 2, 1, 0, i)


def test_span_fate_is_per_span() -> None:
    rows = _rows(200, low=50, high=300, seed=15)
    masker = _masker(span_masking=True, mask_prob=0.3, leave_unmasked_prob=0.5, random_token_prob=0.0)
    tokens, chosen, owner, _ = _spans(masker, rows)
    masked, targets = masker(tokens, torch.arange(len(rows)), epoch=0)
    assert torch.equal(targets.ne(PAD), chosen)
    fates = []
    for i in range(len(rows)):
        for rank in owner[i][chosen[i]].unique().tolist():
            fate = set(masked[i][owner[i] == rank].eq(MASK).tolist())
            assert len(fate) == 1, "a span is masked or kept as a whole"
            fates.append(fate.pop())
    assert abs(sum(fates) / len(fates) - 0.5) < 0.06


def test_spans_can_cover_everything() -> None:
    # mask_prob=1 needs every word covered: the search for enough spans must keep growing.
    rows = _rows(4, low=400, high=510, seed=16)
    tokens = _pad(rows)
    _, targets = _masker(span_masking=True, mask_prob=1.0)(tokens, torch.arange(4), epoch=0)
    ordinary = ~torch.isin(tokens, torch.tensor(SPECIALS))
    assert torch.equal(targets.ne(PAD), ordinary)


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("mask_prob", -0.1), ("mask_prob", 1.5), ("mask_prob", "0.15"),
        ("leave_unmasked_prob", 1.2), ("random_token_prob", -1.0),
        ("span_p", 0.0), ("span_p", 1.1), ("span_max_words", 0), ("span_max_words", 2.5),
        ("mask_whole_words", "yes"), ("span_masking", 1), ("freq_weighted_replacement", None),
    ],
)  # fmt: skip
def test_bad_config_names_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"MaskingConfig.{field}"):
        MaskingConfig(**{field: value})


def test_bad_config_sum_of_replacement_probs() -> None:
    with pytest.raises(ValueError, match="leave_unmasked_prob \\+ random_token_prob"):
        MaskingConfig(leave_unmasked_prob=0.6, random_token_prob=0.5)


@pytest.mark.parametrize("mode", ["mask_whole_words", "span_masking"])
def test_word_starts_required(mode: str) -> None:
    with pytest.raises(ValueError, match=f"word_starts is required for MaskingConfig.{mode}"):
        BatchMasker(MaskingConfig(**{mode: True}), vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=SPECIALS)
    with pytest.raises(ValueError, match="word_starts must be a tensor of shape"):
        BatchMasker(MaskingConfig(**{mode: True}), vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=SPECIALS,
                    word_starts=torch.ones(10, dtype=torch.bool))  # fmt: skip


def test_bad_masker_arguments() -> None:
    cfg = MaskingConfig(freq_weighted_replacement=True)
    with pytest.raises(ValueError, match="replacement_weights is required"):
        BatchMasker(cfg, vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=SPECIALS)
    with pytest.raises(ValueError, match="replacement_weights gives no positive weight"):
        BatchMasker(cfg, vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=SPECIALS,
                    replacement_weights=torch.zeros(VOCAB))  # fmt: skip
    with pytest.raises(ValueError, match="replacement_weights must be finite"):
        BatchMasker(cfg, vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=SPECIALS,
                    replacement_weights=-torch.ones(VOCAB))  # fmt: skip
    with pytest.raises(ValueError, match="mask_idx"):
        BatchMasker(MaskingConfig(), vocab_size=VOCAB, mask_idx=VOCAB, pad_idx=PAD, special_ids=SPECIALS)
    with pytest.raises(ValueError, match="special_ids"):
        BatchMasker(MaskingConfig(), vocab_size=VOCAB, mask_idx=MASK, pad_idx=PAD, special_ids=[0, VOCAB + 3])


def test_bad_inputs() -> None:
    masker = _masker()
    tokens = _pad(_rows(2, seed=17))
    with pytest.raises(ValueError, match="mask_idx"):
        masker(tokens.masked_fill(tokens.eq(EOS), MASK), torch.arange(2), 0)
    with pytest.raises(ValueError, match="tokens must be a \\(B, T\\) long tensor"):
        masker(tokens.int(), torch.arange(2), 0)
    with pytest.raises(ValueError, match="tokens must be in"):
        masker(tokens + VOCAB, torch.arange(2), 0)
    with pytest.raises(ValueError, match="indices must be"):
        masker(tokens, torch.arange(3), 0)
    with pytest.raises(ValueError, match="epoch must be an int"):
        masker(tokens, torch.arange(2), 1.0)


def test_empty_batch() -> None:
    masked, targets = _masker(span_masking=True)(torch.zeros(0, 7, dtype=torch.long), torch.arange(0), 0)
    assert masked.shape == targets.shape == (0, 7)


def test_doctests() -> None:
    assert doctest.testmod(masking).failed == 0


# -- fairseq's MaskTokensDataset as a statistical peer -----------------------------------------------


@pytest.mark.parametrize("whole_words", [False, True])
def test_statistics_match_fairseq_mask_tokens_dataset(whole_words: bool) -> None:
    """Same mask rate and 80/10/10 split as fairseq on the same rows (not the same positions: the
    random streams differ). fairseq also chooses <s>/</s> and counts them in the row length, so
    its rate is over all tokens and ours over ordinary ones; both target mask_prob."""
    fairseq_data = require("fairseq.data", "fairseq's MaskTokensDataset is the peer")
    dictionary = fairseq_data.Dictionary()
    for i in range(4, MADEUP):
        dictionary.add_symbol(f"w{i}")
    assert dictionary.add_symbol("madeupword0000") == MADEUP and dictionary.add_symbol("<mask>") == MASK
    rows = _rows(1500, low=20, high=120, seed=19)
    whole_word_mask = WORD_STARTS.clone() if whole_words else None  # specials begin words, as in fairseq
    sources, targets_ds = fairseq_data.MaskTokensDataset.apply_mask(
        rows, dictionary, pad_idx=PAD, mask_idx=MASK, seed=1, mask_prob=0.15, leave_unmasked_prob=0.1,
        random_token_prob=0.1, mask_whole_words=whole_word_mask,
    )  # fmt: skip
    sources.set_epoch(1)
    targets_ds.set_epoch(1)

    def split(corrupted: torch.Tensor, original: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        c, o = corrupted[chosen], original[chosen]
        became_mask, kept, randomised = c.eq(MASK), c.eq(o), c.ne(MASK) & c.ne(o)
        return torch.stack([became_mask.double().mean(), kept.double().mean(), randomised.double().mean()])

    theirs_corrupted = torch.cat([sources[i] for i in range(len(rows))])
    theirs_targets = torch.cat([targets_ds[i] for i in range(len(rows))])
    original = torch.cat(rows)
    theirs_chosen = theirs_targets.ne(PAD)
    theirs_rate = float(theirs_chosen.double().mean())

    tokens = _pad(rows)
    masked, targets = _masker(mask_whole_words=whole_words)(tokens, torch.arange(len(rows)), epoch=1)
    real = tokens.ne(PAD)
    ours_chosen = targets[real].ne(PAD)
    ordinary = ~torch.isin(tokens[real], torch.tensor(SPECIALS))
    ours_rate = float(ours_chosen.sum() / ordinary.sum())

    assert abs(theirs_rate - 0.15) < 0.01 and abs(ours_rate - 0.15) < 0.01
    assert abs(theirs_rate - ours_rate) < 0.012
    theirs_split = split(theirs_corrupted, original, theirs_chosen)
    ours_split = split(masked[real], tokens[real], ours_chosen)
    torch.testing.assert_close(theirs_split, torch.tensor([0.8, 0.1, 0.1], dtype=torch.float64), rtol=0, atol=0.03)
    torch.testing.assert_close(ours_split, theirs_split, rtol=0, atol=0.03)


# -- the messages users read --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"mask_prob": -0.1}, "MaskingConfig.mask_prob must be a number in [0, 1], got -0.1"),
        ({"leave_unmasked_prob": True}, "MaskingConfig.leave_unmasked_prob must be a number in [0, 1], got True"),
        ({"random_token_prob": "0.1"}, "MaskingConfig.random_token_prob must be a number in [0, 1], got '0.1'"),
        (
            {"leave_unmasked_prob": 0.6, "random_token_prob": 0.5},
            "MaskingConfig.leave_unmasked_prob + random_token_prob must be <= 1, got 0.6 + 0.5",
        ),
        ({"mask_whole_words": 1}, "MaskingConfig.mask_whole_words must be a bool, got 1"),
        ({"span_p": 0}, "MaskingConfig.span_p must be a number in (0, 1], got 0"),
        ({"span_p": True}, "MaskingConfig.span_p must be a number in (0, 1], got True"),
        ({"span_max_words": True}, "MaskingConfig.span_max_words must be an int >= 1, got True"),
        ({"span_max_words": 0}, "MaskingConfig.span_max_words must be an int >= 1, got 0"),
    ],
)
def test_config_messages(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        MaskingConfig(**config)


def test_config_bounds_are_inclusive() -> None:
    MaskingConfig(mask_prob=1, leave_unmasked_prob=0.0, random_token_prob=1.0, span_p=1.0, span_max_words=1)
    MaskingConfig(mask_prob=0.0, leave_unmasked_prob=1.0, random_token_prob=0.0)


def _build(config: MaskingConfig | None = None, **arguments) -> BatchMasker:
    defaults = {"cfg": config or MaskingConfig(), "vocab_size": VOCAB, "mask_idx": MASK, "pad_idx": PAD}
    return BatchMasker(**(defaults | {"special_ids": SPECIALS} | arguments))


WHOLE_WORDS, FREQ = MaskingConfig(mask_whole_words=True), MaskingConfig(freq_weighted_replacement=True)


@pytest.mark.parametrize(
    ("cfg", "arguments", "message"),
    [
        (None, {"cfg": {"mask_prob": 0.15}}, "cfg must be a MaskingConfig, got dict"),
        (None, {"vocab_size": 0}, "vocab_size must be a positive int, got 0"),
        (None, {"vocab_size": 10.0}, "vocab_size must be a positive int, got 10.0"),
        (None, {"mask_idx": VOCAB}, f"mask_idx must be an int in [0, vocab_size={VOCAB}), got {VOCAB}"),
        (None, {"pad_idx": -1}, f"pad_idx must be an int in [0, vocab_size={VOCAB}), got -1"),
        (None, {"pad_idx": 1.0}, f"pad_idx must be an int in [0, vocab_size={VOCAB}), got 1.0"),
        (None, {"mask_idx": PAD}, f"mask_idx and pad_idx must differ, both are {PAD}"),
        (None, {"special_ids": [0, -1, VOCAB]}, f"special_ids must be in [0, vocab_size={VOCAB}), got [-1, {VOCAB}]"),
        (None, {"seed": 1.5}, "seed must be an int, got 1.5"),
        (WHOLE_WORDS, {"word_starts": torch.ones(10)}, f"word_starts must be a tensor of shape ({VOCAB},), got (10,)"),
        (WHOLE_WORDS, {"word_starts": [True] * VOCAB}, f"word_starts must be a tensor of shape ({VOCAB},), got list"),
        (WHOLE_WORDS, {"word_starts": torch.full((VOCAB,), 2)}, "word_starts must be bool (or 0/1)"),
        (FREQ, {"replacement_weights": [1.0] * VOCAB}, f"replacement_weights must be a tensor of shape ({VOCAB},)"),
        (FREQ, {"replacement_weights": torch.ones(3)}, f"replacement_weights must be a tensor of shape ({VOCAB},)"),
        (
            FREQ,
            {"replacement_weights": torch.full((VOCAB,), float("inf"))},
            "replacement_weights must be finite and >= 0",
        ),
        (
            None,
            {"vocab_size": 4, "mask_idx": 3, "pad_idx": 1, "special_ids": [0, 2]},
            "random_token_prob > 0 but every vocabulary entry is in special_ids",
        ),
    ],
)
def test_masker_messages(cfg: MaskingConfig | None, arguments: dict, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _build(cfg, **arguments)


def test_masker_accepts_0_1_word_starts_and_a_vocabulary_of_one_ordinary_token() -> None:
    whole_words = _build(WHOLE_WORDS, word_starts=WORD_STARTS.long())
    assert torch.equal(whole_words._word_starts, WORD_STARTS)
    tokens = torch.tensor([[0, 2, 1]])
    everything_random = MaskingConfig(mask_prob=1.0, random_token_prob=1.0, leave_unmasked_prob=0.0)
    masker = _build(everything_random, vocab_size=4, mask_idx=3, pad_idx=1, special_ids=[0])
    masked, targets = masker(tokens, torch.arange(1), 0)
    assert masked.tolist() == [[0, 2, 1]] and targets.tolist() == [[1, 2, 1]]  # 2 is the only replacement


ROWS_2x3 = torch.zeros(2, 3, dtype=torch.long)


@pytest.mark.parametrize(
    ("tokens", "indices", "epoch", "message"),
    [
        ([[0, 5]], torch.arange(1), 0, "tokens must be a (B, T) long tensor, got list"),
        (
            torch.zeros(2, dtype=torch.long),
            torch.arange(2),
            0,
            "tokens must be a (B, T) long tensor, got (2,) torch.int64",
        ),
        (
            torch.zeros(1, 2, dtype=torch.int32),
            torch.arange(1),
            0,
            "tokens must be a (B, T) long tensor, got (1, 2) torch.int32",
        ),
        (
            torch.zeros(0, 2**20 + 1, dtype=torch.long),
            torch.arange(0),
            0,
            "tokens rows are limited to 1048576 tokens, got 1048577",
        ),
        (ROWS_2x3, [0, 1], 0, "indices must be an integer tensor of shape (2,), got list"),
        (ROWS_2x3, torch.zeros(2), 0, "indices must be an integer tensor of shape (2,), got (2,) torch.float32"),
        (
            ROWS_2x3,
            torch.zeros(2, dtype=torch.complex64),
            0,
            "indices must be an integer tensor of shape (2,), got (2,) torch.complex64",
        ),
        (
            ROWS_2x3,
            torch.zeros(2, dtype=torch.bool),
            0,
            "indices must be an integer tensor of shape (2,), got (2,) torch.bool",
        ),
        (ROWS_2x3, torch.arange(2), True, "epoch must be an int, got True"),
        (
            torch.tensor([[0, -4, 2]]),
            torch.arange(1),
            0,
            f"tokens must be in [0, vocab_size={VOCAB}), got values in [-4, 2]",
        ),
        (
            torch.tensor([[0, VOCAB, 2]]),
            torch.arange(1),
            0,
            f"tokens must be in [0, vocab_size={VOCAB}), got values in [0, {VOCAB}]",
        ),
        (
            torch.tensor([[0, MASK, 2]]),
            torch.arange(1),
            0,
            f"tokens contain mask_idx={MASK}; the input must not be masked already",
        ),
    ],
)
def test_input_messages(tokens, indices, epoch, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _masker()(tokens, indices, epoch)


# -- edges the tests above do not reach ----------------------------------------------------------------


def test_random_bits_of_a_later_epoch() -> None:
    # Recorded from reference_random_bits at this version: the masks of a resumed run depend on it.
    assert hex(reference_random_bits(1, 5, 7, 1, 3)) == "0xc98c61f60db83156"


def test_uniforms_of_the_extreme_bits_stay_below_one() -> None:
    assert masking._uniform(torch.tensor([-1, 0])).tolist() == [1 - 2**-53, 0.0]  # all 64 bits set, none


def test_alias_table_with_slots_of_exactly_average_weight() -> None:
    """Slots whose weight is exactly the average (1.0 once scaled) belong to neither side; a slot
    is kept with probability ``min(prob, 1)`` (``u < prob``), which the implied distribution uses."""
    for weights in ([2.0, 1.0, 1.0, 0.5, 0.5], [1.0, 1.0, 3.0, 0.5, 0.5, 0.25, 0.75, 1.5, 0.5]):
        prob, alias = masking._alias_table(torch.tensor(weights))
        kept = prob.clamp(max=1.0) / len(weights)
        implied = kept.index_add(0, alias, 1.0 / len(weights) - kept)
        torch.testing.assert_close(implied, torch.tensor(weights).double() / sum(weights), rtol=0, atol=1e-12)


def test_masking_with_0_1_word_starts_equals_bool_ones() -> None:
    tokens = _pad(_rows(6, seed=32))
    as_bool = _masker(mask_whole_words=True, mask_prob=0.4)(tokens, torch.arange(6), 0)
    as_long = _masker(mask_whole_words=True, mask_prob=0.4, word_starts=WORD_STARTS.long())(tokens, torch.arange(6), 0)
    assert all(torch.equal(a, b) for a, b in zip(as_bool, as_long))


def test_default_seed_is_1() -> None:
    tokens = _pad(_rows(4, seed=30))
    default = _build()(tokens, torch.arange(4), 0)
    assert all(torch.equal(a, b) for a, b in zip(default, _masker(seed=1)(tokens, torch.arange(4), 0)))


def test_maskers_at_the_edges_of_their_arguments() -> None:
    with pytest.raises(ValueError, match=r"^mask_idx and pad_idx must differ, both are 0$"):
        _build(vocab_size=1, mask_idx=0, pad_idx=0, special_ids=[])
    tokens = torch.tensor([[2, 3]])
    masked, targets = _build(MaskingConfig(mask_prob=1.0), vocab_size=4, mask_idx=1, pad_idx=0, special_ids=[])(
        tokens, torch.arange(1), 0
    )
    assert targets.tolist() == [[2, 3]]
    # Nothing is replaced: no replacement ids needed, none built, whatever the vocabulary or weights.
    _build(MaskingConfig(random_token_prob=0.0), vocab_size=4, mask_idx=3, pad_idx=1, special_ids=[0, 2])
    _build(MaskingConfig(random_token_prob=0.0, freq_weighted_replacement=True))
    # One positive weight: every random replacement is that token.
    weights = torch.zeros(VOCAB)
    weights[42] = 3.0
    config = MaskingConfig(
        mask_prob=1.0, leave_unmasked_prob=0.0, random_token_prob=1.0, freq_weighted_replacement=True
    )
    masked, _ = _build(config, replacement_weights=weights)(torch.tensor([[0, 5, 6, 2]]), torch.arange(1), 0)
    assert masked.tolist() == [[0, 42, 42, 2]]


@pytest.mark.parametrize(
    "message",
    [
        "replacement_weights is required for MaskingConfig.freq_weighted_replacement",
        "replacement_weights gives no positive weight to any non-special token",
    ],
)
def test_replacement_weight_messages(message: str) -> None:
    weights = None if "required" in message else torch.zeros(VOCAB)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        _build(FREQ, replacement_weights=weights)


def test_one_token_batch_and_the_widest_rows() -> None:
    masked, targets = _masker(mask_prob=1.0, random_token_prob=0.0, leave_unmasked_prob=0.0)(
        torch.tensor([[5]]), torch.arange(1), 0
    )
    assert masked.tolist() == [[MASK]] and targets.tolist() == [[5]]
    assert _masker()(torch.zeros(0, 2**20, dtype=torch.long), torch.arange(0), 0)[0].shape == (0, 2**20)


@pytest.mark.parametrize("mode", ["whole-word", "span"])
@pytest.mark.parametrize("mask_prob", [0.0, 0.99])
def test_rows_without_specials_and_budgets_near_every_token_equal_reference(mode: str, mask_prob: float) -> None:
    """Rows cut from a stream (fairseq's ``--sample-break-mode none``) start mid-word with no
    ``<s>``; a budget near every token needs more spans than first drawn. Each row alone and all
    together, against the row-at-a-time reference."""
    rows = [row[1:-1] for row in _rows(6, low=40, high=300, seed=31)]
    masker = _masker(seed=3, mask_prob=mask_prob, **MODES[mode])
    indices = torch.arange(10, 16)
    tokens = _pad(rows)
    batched = masker(tokens, indices, epoch=2)
    for i, row in enumerate(rows):
        expected_masked, expected_targets = _reference_mask_row(masker, row.tolist(), i + 10, 2)
        alone = masker(row[None], indices[i : i + 1], epoch=2)
        for masked, targets in (alone, (batched[0][i : i + 1, : len(row)], batched[1][i : i + 1, : len(row)])):
            assert masked[0].tolist() == expected_masked and targets[0].tolist() == expected_targets
