"""Sentence embeddings of many texts: tokenize, truncate, sort by length, batch, encode, pool.

What makes it fast: every text is tokenized first, then the rows are sorted longest first and
cut into batches by a *token budget* (rows x longest row <= ``max_tokens``), so a batch holds
rows of nearly one length and little padding; what padding is left the encoder drops before
its layers (:class:`~roberta_ext.modeling.encoder.Packing`), so a mixed-length list costs what
its real tokens cost. Everything runs under ``torch.inference_mode``. The results go back to
the input order.

What makes it equal to sentence-transformers: the same ids (the hub's tokenizers equal
transformers'), the same truncation (``longest_first`` for pairs, specials counted), the same
prompt handling (the prompt is prepended to the first text; with ``include_prompt=False`` its
tokens, ``<s>`` included, are left out of the pooling), the same lowercasing
(``do_lower_case``: character by character, as the tokenizers library's ``Lowercase``), and the
same pooling (:func:`~roberta_ext.embedding.pooling.pool`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from .pooling import SentenceEmbedding, check_modes, pool

if TYPE_CHECKING:
    from ..hub import RobertaHubInterface

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MAX_TOKENS_CUDA",
    "Embedder",
    "TextInput",
    "embed",
    "length_batches",
    "lowercase",
    "truncate_longest_first",
]

TextInput = str | Sequence[str]
"""A text, or a pair of texts (a tuple or list of two)."""

DEFAULT_MAX_TOKENS = 4096
"""Padded tokens per batch (rows x longest row) on the CPU. The matrix products reach their rate
well below it; above it the elementwise work (GELU, LayerNorm, residuals) falls out of the cache:
a 6-layer 384-wide BERT on one core embedded 300 docstrings in 13.5-15.5 s with 1k-4k tokens per
batch, and 16 s with 8k-16k."""

DEFAULT_MAX_TOKENS_CUDA = 32768
"""The same on a GPU, where larger batches keep more of it busy (and small ones are not packed:
see :data:`~roberta_ext.modeling.encoder.CUDA_PACKING_MIN_SLOTS`)."""


def lowercase(text: str) -> str:
    """Lowercase ``text`` one character at a time, as the tokenizers library's ``Lowercase``
    normalizer does (so a final capital sigma becomes ``σ``, not ``str.lower``'s ``ς``).

    >>> lowercase("ΟΔΟΣ Straße")
    'οδοσ straße'
    """
    return text.lower() if "Σ" not in text else "".join(c.lower() for c in text)


def truncate_longest_first(first: list[int], second: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Cut a pair to at most ``budget`` ids together, as transformers' tokenizers'
    ``truncation="longest_first"``: the longer side gives way first; when both must be cut,
    each keeps half (the longer, or on a tie the second, keeps the odd one).

    >>> truncate_longest_first([1, 2, 3, 4, 5, 6], [7, 8], 6)
    ([1, 2, 3, 4], [7, 8])
    >>> [len(side) for side in truncate_longest_first([0] * 9, [0] * 7, 5)]
    [3, 2]
    """
    if len(first) + len(second) <= budget:
        return first, second
    short, long = sorted((len(first), len(second)))
    # The tokenizers library's arithmetic (tokenizers/src/utils/truncation.rs), n1 <= n2.
    keep_long = short if short > budget else max(short, budget - short)
    keep_short = short
    if keep_short + keep_long > budget:
        keep_short = budget // 2
        keep_long = keep_short + budget % 2
    if len(first) > len(second):
        return first[:keep_long], second[:keep_short]
    return first[:keep_short], second[:keep_long]


def length_batches(lengths: Sequence[int], *, max_tokens: int, batch_size: int | None = None) -> list[list[int]]:
    """Row indices sorted longest first and cut into batches whose padded size (rows x longest
    row) stays within ``max_tokens`` (a longer row makes a batch alone), each of at most
    ``batch_size`` rows.

    >>> length_batches([3, 10, 4, 9, 2], max_tokens=20)
    [[1, 3], [2, 0, 4]]
    """
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    start = 0
    while start < len(order):
        rows = max(1, max_tokens // max(1, lengths[order[start]]))
        if batch_size is not None:
            rows = min(rows, batch_size)
        batches.append(order[start : start + rows])
        start += rows
    return batches


@dataclass(frozen=True)
class Embedder:
    """Everything fixed for one run of embeddings with ``hub``: the texts' encoding (prompt,
    lowercasing, truncation) and the pooling. :meth:`encode` turns a text or pair into ids,
    :meth:`embed_ids` rows of ids into embeddings (in their order).

    >>> embedder = Embedder.for_hub(hub, pooling="cls")                 # doctest: +SKIP
    >>> embedder.embed_ids([embedder.encode("Hello world!")]).shape     # doctest: +SKIP
    torch.Size([1, 768])
    """

    hub: RobertaHubInterface
    pooling: tuple[str, ...]
    normalize: bool
    max_length: int
    prompt: str
    prompt_length: int
    """Positions of ``<s>`` + the prompt's tokens: what ``include_prompt=False`` leaves out."""
    skip: int
    do_lower_case: bool
    max_tokens: int = DEFAULT_MAX_TOKENS
    """Padded tokens per batch (default: :data:`DEFAULT_MAX_TOKENS`, on a GPU :data:`DEFAULT_MAX_TOKENS_CUDA`)."""
    batch_size: int | None = None

    @classmethod
    def for_hub(
        cls,
        hub: RobertaHubInterface,
        *,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        max_length: int | None = None,
        prompt: str | None = None,
        prompt_name: str | None = None,
        max_tokens: int | None = None,
        batch_size: int | None = None,
    ) -> Embedder:
        """The hub's own settings (:attr:`~roberta_ext.hub.RobertaHubInterface.sentence_embedding`),
        with those given here in their place."""
        settings: SentenceEmbedding = hub.sentence_embedding
        if prompt is not None and prompt_name is not None:
            raise ValueError("give prompt or prompt_name, not both")
        if prompt_name is None and prompt is None:
            prompt_name = settings.default_prompt_name
        if prompt_name is not None:
            if prompt_name not in settings.prompts:
                known = ", ".join(sorted(settings.prompts)) or "none"
                raise KeyError(f"prompt_name {prompt_name!r} is not one of the model's prompts ({known})")
            prompt = settings.prompts[prompt_name]
        for name, value in (("max_length", max_length), ("max_tokens", max_tokens), ("batch_size", batch_size)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        limit = hub.max_positions()
        length = min(max_length or settings.max_length or limit, limit)
        prompt = prompt or ""
        prompt_ids = hub.tokenizer.encode(lowercase(prompt) if settings.do_lower_case else prompt) if prompt else []
        prompt_length = min(1 + len(prompt_ids), length - 1) if prompt else 0
        return cls(
            hub=hub,
            pooling=settings.pooling if pooling is None else check_modes(pooling),
            normalize=settings.normalize if normalize is None else normalize,
            max_length=length,
            prompt=prompt,
            prompt_length=prompt_length,
            skip=0 if settings.include_prompt else prompt_length,
            do_lower_case=settings.do_lower_case,
            max_tokens=max_tokens or (DEFAULT_MAX_TOKENS_CUDA if hub.device.type == "cuda" else DEFAULT_MAX_TOKENS),
            batch_size=batch_size,
        )

    @property
    def dimension(self) -> int:
        """Width of an embedding: the model's width times the number of pooling modes."""
        return self.hub.model.cfg.encoder_embed_dim * len(self.pooling)

    def encode(self, item: TextInput) -> list[int]:
        """Ids of one text or pair, prompt prepended, truncated to :attr:`max_length`."""
        texts = (item,) if isinstance(item, str) else tuple(item)
        if len(texts) not in (1, 2) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"expected a text or a pair of texts, got {item!r}")
        if self.prompt:
            texts = (self.prompt + texts[0], *texts[1:])
        if self.do_lower_case:
            texts = tuple(map(lowercase, texts))
        hub = self.hub
        bos, eos = hub.dictionary.bos(), hub.dictionary.eos()
        first = hub.tokenizer.encode(texts[0])
        if len(texts) == 1:
            return [bos, *first[: max(0, self.max_length - 2)], eos]
        # <s> a </s> </s> b </s> (RoBERTa) or [CLS] a [SEP] b [SEP] (BERT's family).
        middle = [eos, eos] if hub.double_separator else [eos]
        budget = max(0, self.max_length - 2 - len(middle))
        first, second = truncate_longest_first(first, hub.tokenizer.encode(texts[1]), budget)
        return [bos, *first, *middle, *second, eos]

    def embed_ids(
        self, rows: Sequence[Sequence[int]], *, progress: Callable[[int], object] | None = None
    ) -> torch.Tensor:
        """Embeddings (N, :attr:`dimension`) float32, on the model's device, of rows of ids (each
        ``<s> ... </s>``), in their order. ``progress(n)`` is called after each batch of ``n`` rows."""
        hub = self.hub
        out = torch.empty(len(rows), self.dimension, dtype=torch.float32, device=hub.device)
        was_training = hub.model.training
        hub.model.eval()
        try:
            with torch.inference_mode():
                for batch in length_batches(
                    [len(row) for row in rows], max_tokens=self.max_tokens, batch_size=self.batch_size
                ):
                    tokens, lengths = hub.collate([rows[i] for i in batch])
                    features = hub.extract_features(tokens)  # (B, T, C)
                    pooled = pool(features, lengths, self.pooling, skip=self.skip)  # (B, D) float32
                    if self.normalize:
                        pooled = F.normalize(pooled, p=2, dim=-1)
                    out[torch.tensor(batch, device=out.device)] = pooled
                    if progress is not None:
                        progress(len(batch))
        finally:
            hub.model.train(was_training)
        return out

    def embed(self, items: Sequence[TextInput], *, progress: Callable[[int], object] | None = None) -> torch.Tensor:
        """Embeddings (N, :attr:`dimension`) of texts or pairs, in their order."""
        return self.embed_ids([self.encode(item) for item in items], progress=progress)


def embed(
    hub: RobertaHubInterface,
    texts: TextInput | Sequence[TextInput],
    *,
    pooling: str | Sequence[str] | None = None,
    normalize: bool | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    max_length: int | None = None,
    prompt: str | None = None,
    prompt_name: str | None = None,
) -> torch.Tensor:
    """What :meth:`~roberta_ext.hub.RobertaHubInterface.embed` does (see there).

    >>> embed(hub, ["Hello world!", ("A question?", "An answer.")]).shape   # doctest: +SKIP
    torch.Size([2, 768])
    """
    embedder = Embedder.for_hub(
        hub,
        pooling=pooling,
        normalize=normalize,
        max_length=max_length,
        prompt=prompt,
        prompt_name=prompt_name,
        max_tokens=max_tokens,
        batch_size=batch_size,
    )
    items: Sequence[TextInput] = [texts] if isinstance(texts, str) else texts
    return embedder.embed(items)
