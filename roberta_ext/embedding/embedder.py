"""Sentence embeddings of many texts: tokenize, truncate, sort by length, batch, encode, pool.

What makes it fast: every text is tokenized first, then the rows are sorted longest first and
cut into batches by a *token budget* (rows x longest row <= ``max_tokens``), so a batch holds
rows of nearly one length and little padding; what padding is left the encoder drops before
its layers (:class:`~roberta_ext.modeling.attention.Packing`), so a mixed-length list costs what
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

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from ..data.batching import length_batches
from ..inference.inputs import ModelInputs, TextInput, extract_features
from ..modeling import EncoderModel
from ..tokenizers.normalization import lowercase_per_character as lowercase
from .pooling import SentenceEmbedding, check_modes, check_truncate_dim, pool

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_MAX_TOKENS_CUDA",
    "Embedder",
    "embed",
]

DEFAULT_MAX_TOKENS = 4096
"""Padded tokens per batch (rows x longest row) on the CPU. The matrix products reach their rate
well below it; above it the elementwise work (GELU, LayerNorm, residuals) falls out of the cache:
a 6-layer 384-wide BERT on one core embedded 300 docstrings in 13.5-15.5 s with 1k-4k tokens per
batch, and 16 s with 8k-16k."""

DEFAULT_MAX_TOKENS_CUDA = 32768
"""The same on a GPU, where larger batches keep more of it busy (and small ones are not packed:
see :data:`~roberta_ext.modeling.attention.CUDA_PACKING_MIN_SLOTS`)."""


@dataclass(frozen=True)
class Embedder:
    """Everything fixed for one run of embeddings with a model: the texts' encoding (prompt,
    lowercasing, truncation) and the pooling. :meth:`encode` turns a text or pair into ids,
    :meth:`embed_ids` rows of ids into embeddings (in their order).

    >>> embedder = Embedder.create(hub.model, hub.inputs, hub.sentence_embedding, pooling="cls")  # doctest: +SKIP
    >>> embedder.embed_ids([embedder.encode("Hello world!")]).shape     # doctest: +SKIP
    torch.Size([1, 768])
    """

    model: EncoderModel
    inputs: ModelInputs
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
    truncate_dim: int | None = None
    """Keep the first this many values of each embedding, after the normalisation (Matryoshka)."""

    @classmethod
    def for_hub(cls, hub: Any, **options: Any) -> Embedder:
        """:meth:`create` with a hub's ``model``, ``inputs`` and ``sentence_embedding``."""
        return cls.create(hub.model, hub.inputs, hub.sentence_embedding, **options)

    @classmethod
    def create(
        cls,
        model: EncoderModel,
        inputs: ModelInputs,
        settings: SentenceEmbedding,
        *,
        pooling: str | Sequence[str] | None = None,
        normalize: bool | None = None,
        max_length: int | None = None,
        prompt: str | None = None,
        prompt_name: str | None = None,
        max_tokens: int | None = None,
        batch_size: int | None = None,
        truncate_dim: int | None = None,
    ) -> Embedder:
        """The model's own embedding ``settings`` (a sentence-transformers folder's, or mean
        pooling), with those given here in their place."""
        truncate_dim = check_truncate_dim(truncate_dim) or settings.truncate_dim
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
        limit = inputs.max_positions
        length = min(max_length or settings.max_length or limit, limit)
        prompt = prompt or ""
        prompt_ids = inputs.tokenizer.encode(lowercase(prompt) if settings.do_lower_case else prompt) if prompt else []
        prompt_length = min(1 + len(prompt_ids), length - 1) if prompt else 0
        device = model.device
        return cls(
            model=model,
            inputs=inputs,
            pooling=settings.pooling if pooling is None else check_modes(pooling),
            normalize=settings.normalize if normalize is None else normalize,
            max_length=length,
            prompt=prompt,
            prompt_length=prompt_length,
            skip=0 if settings.include_prompt else prompt_length,
            do_lower_case=settings.do_lower_case,
            max_tokens=max_tokens or (DEFAULT_MAX_TOKENS_CUDA if device.type == "cuda" else DEFAULT_MAX_TOKENS),
            batch_size=batch_size,
            truncate_dim=truncate_dim,
        )

    @property
    def dimension(self) -> int:
        """Width of an embedding: the model's width times the number of pooling modes, or
        :attr:`truncate_dim` where that is less."""
        width = self.model.cfg.encoder_embed_dim * len(self.pooling)
        return width if self.truncate_dim is None else min(width, self.truncate_dim)

    def encode(
        self, item: TextInput, *, truncate: bool = True, where: str = "input", hint: str | None = None
    ) -> list[int]:
        """Ids of one text or pair, prompt prepended, at most :attr:`max_length`: cut when
        ``truncate``, else :class:`~roberta_ext.inference.inputs.InputTooLong` naming ``where``
        (``hint``: how to cut it) — the one length rule, :meth:`ModelInputs.encode_within`."""
        return self.inputs.encode_within(self._texts(item), self.max_length, truncate=truncate, where=where, hint=hint)

    def encode_whole(self, item: TextInput) -> list[int]:
        """Ids of one text or pair as :meth:`encode` gives them, never cut (what the server's
        ``/tokenize`` shows)."""
        return self.inputs.encode_truncated(self._texts(item), sys.maxsize)

    def _texts(self, item: TextInput) -> tuple[str, ...]:
        """The texts of ``item`` as the model reads them: the prompt prepended, lowercased where
        the model's tokenizer lowercases."""
        texts = (item,) if isinstance(item, str) else tuple(item)
        if len(texts) not in (1, 2) or not all(isinstance(t, str) for t in texts):
            raise ValueError(f"expected a text or a pair of texts, got {item!r}")
        if self.prompt:
            texts = (self.prompt + texts[0], *texts[1:])
        if self.do_lower_case:
            texts = tuple(map(lowercase, texts))
        return texts

    def embed_ids(
        self, rows: Sequence[Sequence[int]], *, progress: Callable[[int], object] | None = None
    ) -> torch.Tensor:
        """Embeddings (N, :attr:`dimension`) float32, on the model's device, of rows of ids (each
        ``<s> ... </s>``), in their order. ``progress(n)`` is called after each batch of ``n`` rows."""
        model = self.model
        out = torch.empty(len(rows), self.dimension, dtype=torch.float32, device=model.device)
        with model.inference():
            for batch in length_batches(
                [len(row) for row in rows], max_tokens=self.max_tokens, batch_size=self.batch_size
            ):
                tokens, lengths = self.inputs.collate([rows[i] for i in batch])
                features = extract_features(model, self.inputs, tokens)  # (B, T, C)
                pooled = pool(features, lengths, self.pooling, skip=self.skip)  # (B, D) float32
                if self.normalize:
                    pooled = F.normalize(pooled, p=2, dim=-1)
                # Truncated after the normalisation, as sentence-transformers truncates its output.
                out[torch.tensor(batch, device=out.device)] = pooled[:, : self.dimension]
                if progress is not None:
                    progress(len(batch))
        return out

    def embed(self, items: Sequence[TextInput], *, progress: Callable[[int], object] | None = None) -> torch.Tensor:
        """Embeddings (N, :attr:`dimension`) of texts or pairs, in their order."""
        return self.embed_ids([self.encode(item) for item in items], progress=progress)


def embed(
    model: EncoderModel,
    inputs: ModelInputs,
    settings: SentenceEmbedding,
    texts: TextInput | Sequence[TextInput],
    *,
    pooling: str | Sequence[str] | None = None,
    normalize: bool | None = None,
    batch_size: int | None = None,
    max_tokens: int | None = None,
    max_length: int | None = None,
    prompt: str | None = None,
    prompt_name: str | None = None,
    truncate_dim: int | None = None,
) -> torch.Tensor:
    """Sentence embeddings ``(N, C)`` float32 of N texts, or pairs of texts (tuples), in their
    order (a single string gives ``(1, C)``), with ``model`` and its ``inputs``; ``hub.embed``.

    ``pooling`` is ``"mean"`` (over the real tokens), ``"cls"``, ``"max"``,
    ``"mean_sqrt_len_tokens"``, ``"weightedmean"`` or ``"lasttoken"``, or a list of them
    (concatenated); ``normalize=True`` L2-normalises. Both default to ``settings``, the model's
    own: those of a sentence-transformers folder (its ``Pooling`` and ``Normalize`` modules,
    ``max_seq_length``, ``do_lower_case``, prompts), giving what
    ``SentenceTransformer(folder).encode(texts)`` gives; for any other model, mean pooling
    without normalisation. Texts longer than ``max_length`` tokens (default: the folder's
    ``max_seq_length``, else the model's maximum) are truncated, pairs longest side first.
    ``prompt`` (or ``prompt_name``, one of the folder's prompts) is prepended to each text.
    ``truncate_dim`` keeps the first that many values of each embedding, after the normalisation,
    as sentence-transformers' ``truncate_dim`` does (default: the folder's, else all of them).

    Rows are sorted by length and batched by a budget of ``max_tokens`` padded tokens per batch
    (and at most ``batch_size`` rows), and the encoder skips what padding is left, so the result
    of a text never depends on its batch-mates, and a mixed-length list costs what its real
    tokens cost.

    >>> embed(hub.model, hub.inputs, hub.sentence_embedding, ["Hello world!", ("A?", "B.")]).shape  # doctest: +SKIP
    torch.Size([2, 768])
    """
    embedder = Embedder.create(
        model,
        inputs,
        settings,
        pooling=pooling,
        normalize=normalize,
        max_length=max_length,
        prompt=prompt,
        prompt_name=prompt_name,
        max_tokens=max_tokens,
        batch_size=batch_size,
        truncate_dim=truncate_dim,
    )
    items: Sequence[TextInput] = [texts] if isinstance(texts, str) else texts
    return embedder.embed(items)
