"""Pooling: token features ``(B, T, C)`` -> one vector per text, as sentence-transformers pools.

Every mode of sentence-transformers' ``Pooling`` module is here, with its semantics kept
exactly (the tests compare against it): ``mean`` over the real tokens, ``cls`` (the first real
token), ``max``, ``mean_sqrt_len_tokens`` (the sum divided by the square root of the token
count), ``weightedmean`` (token ``t`` weighted ``t + 1``) and ``lasttoken``. Several modes are
concatenated in the order given. ``skip`` leaves a prompt's tokens out, as
sentence-transformers' ``include_prompt=False`` does: the first ``skip`` positions of every row
(``<s>`` included) count as padding, while ``weightedmean`` keeps the remaining tokens' original
weights.

Batches are right-padded (what :meth:`~roberta_ext.hub.RobertaHubInterface.collate` builds);
sums are accumulated in float32 whatever the model's dtype, and the result is float32.
:class:`SentenceEmbedding` says which modes a model uses: the defaults of ``hub.embed``, or
what a sentence-transformers folder prescribes (:mod:`roberta_ext.embedding.st_folder`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

__all__ = [
    "POOLING_MODES",
    "SIMILARITIES",
    "SentenceEmbedding",
    "check_modes",
    "check_truncate_dim",
    "pool",
    "similarity",
]

POOLING_MODES = ("mean", "cls", "max", "mean_sqrt_len_tokens", "weightedmean", "lasttoken")
"""sentence-transformers' pooling modes, all supported."""

SIMILARITIES = ("cosine", "dot", "euclidean", "manhattan")
"""sentence-transformers' ``similarity_fn_name`` values (distances come back negated, as there)."""


@dataclass(frozen=True, kw_only=True)
class SentenceEmbedding:
    """How a model turns a text into one vector: what ``hub.embed`` does when not told otherwise.

    A hub loaded from a sentence-transformers folder carries that folder's settings; any other
    hub the defaults (``mean`` pooling, no normalisation, truncation at ``max_positions()``).

    >>> SentenceEmbedding().pooling, SentenceEmbedding(pooling=("cls",), normalize=True).normalize
    (('mean',), True)
    """

    pooling: tuple[str, ...] = ("mean",)
    """Pooling modes (:data:`POOLING_MODES`); several are concatenated in this order."""
    normalize: bool = False
    """L2-normalise the pooled vector (a ``Normalize`` module)."""
    include_prompt: bool = True
    """Whether a prompt's tokens take part in the pooling (sentence-transformers' ``include_prompt``)."""
    max_length: int | None = None
    """Longest input in tokens, specials included; longer ones are truncated (longest first for
    pairs, as transformers' tokenizers do). ``None``: the model's ``max_positions()``."""
    do_lower_case: bool = False
    """Lowercase texts before tokenizing (``sentence_bert_config.json``'s ``do_lower_case``)."""
    prompts: Mapping[str, str] = field(default_factory=dict)
    """Named prompts (``config_sentence_transformers.json``), prepended to a text by ``prompt_name``."""
    default_prompt_name: str | None = None
    """The prompt used when none is given."""
    similarity: str = "cosine"
    """What ``hub.similarity`` computes (:data:`SIMILARITIES`)."""
    truncate_dim: int | None = None
    """Keep the first this many values of each embedding (Matryoshka models), after the
    normalisation, as sentence-transformers' ``truncate_dim`` does: a truncated embedding of a
    normalising model is not unit-length again. ``None``, or at least the embedding's width: the
    whole embedding."""

    def __post_init__(self) -> None:
        check_modes(self.pooling)
        check_truncate_dim(self.truncate_dim)
        if self.similarity not in SIMILARITIES:
            raise ValueError(f"similarity {self.similarity!r} is not supported; choose one of {SIMILARITIES}")


def check_truncate_dim(truncate_dim: object, where: str = "truncate_dim") -> int | None:
    """``truncate_dim`` if it is None or a positive int; a ``ValueError`` naming ``where`` otherwise.

    >>> check_truncate_dim(256), check_truncate_dim(None)
    (256, None)
    >>> check_truncate_dim(0)
    Traceback (most recent call last):
    ...
    ValueError: truncate_dim must be a positive number of dimensions, got 0
    """
    if truncate_dim is None:
        return None
    if isinstance(truncate_dim, bool) or not isinstance(truncate_dim, int) or truncate_dim < 1:
        raise ValueError(f"{where} must be a positive number of dimensions, got {truncate_dim!r}")
    return truncate_dim


def check_modes(modes: str | Sequence[str], where: str = "pooling") -> tuple[str, ...]:
    """``modes`` as a tuple, or a ``ValueError`` naming ``where`` and the unknown mode.

    >>> check_modes("cls"), check_modes(["mean", "max"])
    (('cls',), ('mean', 'max'))
    >>> check_modes("sum")
    Traceback (most recent call last):
    ...
    ValueError: pooling: unknown pooling mode 'sum'; supported: mean, cls, max, ...
    """
    chosen = (modes,) if isinstance(modes, str) else tuple(modes)
    if not chosen:
        raise ValueError(f"{where}: no pooling mode given")
    for mode in chosen:
        if mode not in POOLING_MODES:
            raise ValueError(f"{where}: unknown pooling mode {mode!r}; supported: {', '.join(POOLING_MODES)}")
    return chosen


def pool(features: torch.Tensor, lengths: torch.Tensor, modes: Sequence[str], *, skip: int = 0) -> torch.Tensor:
    """Pool right-padded ``features`` (B, T, C) whose row ``b`` is real up to ``lengths[b]`` into
    (B, len(modes) * C) float32; ``skip`` leading positions of each row are left out (a prompt).

    >>> x = torch.tensor([[[1.0], [3.0], [8.0]], [[2.0], [4.0], [0.0]]])   # row 1: 2 real tokens
    >>> pool(x, torch.tensor([3, 2]), ["mean", "cls", "max", "lasttoken"]).tolist()
    [[4.0, 1.0, 8.0, 8.0], [3.0, 2.0, 4.0, 4.0]]
    >>> pool(x, torch.tensor([3, 2]), ["mean"], skip=1).tolist()
    [[5.5], [4.0]]
    """
    batch, length, _ = features.shape
    positions = torch.arange(length, device=features.device)
    real = positions < lengths.to(features.device)[:, None]  # (B, T)
    mask = real & (positions >= skip) if skip else real
    x = features.float()
    weights = mask.unsqueeze(-1).to(x.dtype)  # (B, T, 1)
    out: list[torch.Tensor] = []
    total: torch.Tensor | None = None
    count: torch.Tensor | None = None
    for mode in modes:
        if mode == "cls":
            # The first position the mask keeps (0 when it keeps none), as sentence-transformers.
            first = mask.int().argmax(dim=1)
            out.append(x[torch.arange(batch, device=x.device), first])
        elif mode == "max":
            out.append(x.masked_fill(~mask.unsqueeze(-1), float("-inf")).max(dim=1).values)
        elif mode in ("mean", "mean_sqrt_len_tokens"):
            if total is None or count is None:
                total = (x * weights).sum(dim=1)  # (B, C)
                count = weights.sum(dim=1).clamp(min=1e-9)  # (B, 1)
            out.append(total / (count if mode == "mean" else count.sqrt()))
        elif mode == "weightedmean":
            weighted = weights * (positions + 1).to(x.dtype).view(1, -1, 1)  # token t weighs t + 1
            out.append((x * weighted).sum(dim=1) / weighted.sum(dim=1).clamp(min=1e-9))
        elif mode == "lasttoken":
            # The last position the mask keeps; a row it keeps none of pools to zeros.
            last = torch.where(mask.any(dim=1), length - 1 - mask.flip(1).int().argmax(dim=1), length - 1)
            out.append((x * weights)[torch.arange(batch, device=x.device), last])
        else:
            check_modes([mode])
    return torch.cat(out, dim=-1)


def similarity(a: torch.Tensor, b: torch.Tensor, kind: str = "cosine") -> torch.Tensor:
    """Scores (N, M) between embeddings ``a`` (N, C) and ``b`` (M, C) (a 1-D input counts as one
    row), as sentence-transformers' ``similarity``: ``cosine``, ``dot``, or a negated
    ``euclidean`` or ``manhattan`` distance (higher is more similar, whichever the kind).

    >>> similarity(torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0], [0.0, 3.0]])).tolist()
    [[1.0, 0.0]]
    >>> similarity(torch.tensor([1.0, 0.0]), torch.tensor([4.0, 3.0]), "euclidean").tolist()
    [[-4.242640495300293]]
    """
    a, b = (t.float().unsqueeze(0) if t.dim() == 1 else t.float() for t in (a, b))
    if kind == "cosine":
        return F.normalize(a, p=2, dim=-1) @ F.normalize(b, p=2, dim=-1).T
    if kind == "dot":
        return a @ b.T
    if kind == "euclidean":
        return -torch.cdist(a, b, p=2.0)
    if kind == "manhattan":
        return -torch.cdist(a, b, p=1.0)
    raise ValueError(f"similarity {kind!r} is not supported; choose one of {SIMILARITIES}")
