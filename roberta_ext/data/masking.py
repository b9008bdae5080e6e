"""Masked-LM corruption (BERT/RoBERTa style), vectorised over a whole batch."""

from __future__ import annotations

import torch


def mask_tokens(
    tokens: torch.Tensor,
    *,
    mask_idx: int,
    vocab_size: int,
    special_ids: torch.Tensor,
    mask_prob: float = 0.15,
    leave_unmasked_prob: float = 0.1,
    random_token_prob: float = 0.1,
    num_special: int = 4,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Choose ``mask_prob`` of the non-special tokens of ``tokens`` (B, T) as targets; replace
    80% of them by ``<mask>``, 10% by a random ordinary token and keep 10%.

    Returns ``(corrupted tokens, targets)`` where targets hold the original id at chosen
    positions and ``-100`` elsewhere (ignored by ``F.cross_entropy``).

    >>> x = torch.tensor([[0, 10, 11, 12, 13, 2]])
    >>> corrupted, targets = mask_tokens(x, mask_idx=50, vocab_size=51, special_ids=torch.tensor([0, 1, 2, 3]), mask_prob=1.0)
    >>> targets.tolist()
    [[-100, 10, 11, 12, 13, -100]]
    """
    if not 0.0 <= mask_prob <= 1.0 or leave_unmasked_prob + random_token_prob > 1.0:
        raise ValueError("mask_prob must be in [0, 1] and leave_unmasked_prob + random_token_prob <= 1")
    candidates = ~torch.isin(tokens, special_ids.to(tokens.device))
    draw = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    chosen = candidates & (draw < mask_prob)
    targets = torch.where(chosen, tokens, torch.full_like(tokens, -100))

    # One more uniform draw decides what a chosen position becomes.
    fate = torch.rand(tokens.shape, generator=generator, device=tokens.device)
    keep = chosen & (fate < leave_unmasked_prob)
    randomize = chosen & ~keep & (fate < leave_unmasked_prob + random_token_prob)
    replace_with_mask = chosen & ~keep & ~randomize
    random_ids = torch.randint(num_special, vocab_size, tokens.shape, generator=generator, device=tokens.device)
    corrupted = torch.where(replace_with_mask, torch.full_like(tokens, mask_idx), tokens)
    corrupted = torch.where(randomize, random_ids, corrupted)
    return corrupted, targets
