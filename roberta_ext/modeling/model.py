"""The model of every family: the encoder core, a tied masked-LM head and named heads.

The module tree mirrors fairseq's ``RobertaModel`` (``encoder.sentence_encoder``,
``encoder.lm_head``, ``classification_heads.NAME``), so ``state_dict()`` keys are identical.
BERT and ALBERT add a ``pooler`` under their sentence-level heads (NSP, SOP, classification);
any family can carry per-token heads (``token_heads.NAME``: tagging, QA spans).

Two ways in, one model. ``model(src_tokens, ...)`` is fairseq's call convention (a tuple of the
output and ``{"inner_states": ...}``), which fairseq's trainer and criteria call. Everything
else — the hub, embedding, export, the server, QA — uses the typed interface:
:meth:`EncoderModel.features` (an :class:`EncoderOutput`), :meth:`~EncoderModel.lm_logits`,
:meth:`~EncoderModel.classify`, :meth:`~EncoderModel.tag`, the :attr:`~EncoderModel.device` and
:attr:`~EncoderModel.dtype` properties, the :meth:`~EncoderModel.inference` context and
:attr:`~EncoderModel.transformer` (the core, for compiling and export). fairseq's path
``encoder.sentence_encoder`` stays in this package (and the fairseq plugin): state-dict key
tables spell it through :data:`ENCODER_PREFIX`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .attention import checked_strategy
from .config import EncoderConfig
from .encoder import TransformerEncoder, init_bert_params
from .heads import (
    ClassificationHead,
    LMHead,
    NormedClassificationHead,
    PooledClassificationHead,
    Pooler,
    TokenClassificationHead,
)

ENCODER_PREFIX = "encoder.sentence_encoder."
"""Where the transformer's parameters sit in a state dict (fairseq's ``RobertaModel`` layout):
``ENCODER_PREFIX + "embed_tokens.weight"``, ``ENCODER_PREFIX + "layers.0.fc1.bias"``, ..."""


@dataclass(frozen=True)
class EncoderOutput:
    """What the transformer gives for a batch of rows.

    >>> cfg = EncoderConfig(vocab_size=64, encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
    ...                     encoder_attention_heads=4, max_positions=64)
    >>> out = EncoderModel(cfg).eval().features(torch.tensor([[0, 10, 11, 2]]), return_all_hiddens=True)
    >>> out.last_hidden_state.shape, len(out.hidden_states)
    (torch.Size([1, 4, 32]), 3)
    """

    last_hidden_state: torch.Tensor
    """The last layer's features (B, T, C), after the final LayerNorm of pre-LN stacks; zeros on padding."""
    hidden_states: tuple[torch.Tensor, ...] | None = None
    """With ``return_all_hiddens``: the embedding output and every layer's output, (B, T, C) each
    (``encoder_layers + 1`` tensors); ``None`` otherwise."""


@contextlib.contextmanager
def eval_mode(module: nn.Module) -> Iterator[None]:
    """``module`` in eval mode for a ``with`` block, then every sub-module back in the mode it
    had (one mode restored for the whole tree would put a head that was in eval mode into
    training). :meth:`EncoderModel.eval_mode` for a model; export uses it on its wrappers."""
    modes = [(sub, sub.training) for sub in module.modules()]
    module.eval()
    try:
        yield
    finally:
        for sub, training in modes:
            sub.training = training


class RobertaEncoder(nn.Module):
    """fairseq's ``RobertaEncoder``: the transformer plus the masked-LM head."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.sentence_encoder = TransformerEncoder(cfg)
        tied = None if cfg.untie_weights else self.sentence_encoder.embed_tokens.weight
        self.lm_head = LMHead.for_config(cfg, tied)

    def forward(
        self,
        tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        masked_tokens: torch.Tensor | None = None,
        segment_labels: torch.Tensor | None = None,
        document_starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        features, hiddens = self.sentence_encoder(tokens, return_all_hiddens, segment_labels, document_starts)
        out = features if features_only else self.lm_head(features, masked_tokens)
        return out, {"inner_states": hiddens if return_all_hiddens else None}


class EncoderModel(nn.Module):
    """RoBERTa — and, by its config, BERT, ALBERT and the other families — in plain PyTorch
    (``RobertaModel`` is the same class under fairseq's name).

    >>> cfg = EncoderConfig(vocab_size=64, encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
    ...                     encoder_attention_heads=4, max_positions=64)
    >>> model = EncoderModel(cfg).eval()
    >>> model.features(torch.tensor([[0, 10, 11, 2]])).last_hidden_state.shape
    torch.Size([1, 4, 32])
    >>> tokens = torch.tensor([[0, 10, 11, 2]])
    >>> model(tokens, features_only=True)[0].shape
    torch.Size([1, 4, 32])
    >>> model(tokens)[0].shape          # logits over the vocabulary
    torch.Size([1, 4, 64])
    """

    def __init__(self, cfg: EncoderConfig, *, has_lm_head: bool = True) -> None:
        super().__init__()
        self.cfg = cfg
        self.has_lm_head = has_lm_head
        """False for a model loaded from a file without a trained masked-LM head (transformers'
        ``BertModel``): the head's weights are fresh, and ``fill_mask`` refuses."""
        self.encoder = RobertaEncoder(cfg)
        self.pooler = Pooler(cfg.encoder_embed_dim, cfg.pooler_activation_fn) if cfg.pooler else None
        self.classification_heads = nn.ModuleDict()
        self.token_heads = nn.ModuleDict()
        self.apply(init_bert_params)

    # ------------------------------------------------------------------ what the model is

    @property
    def transformer(self) -> TransformerEncoder:
        """The transformer core (embeddings and layers; fairseq's ``encoder.sentence_encoder``):
        what compiling (:mod:`roberta_ext.inference.compiled`), export and quantization work on."""
        return self.encoder.sentence_encoder

    @property
    def embed_tokens(self) -> nn.Embedding:
        """The token embedding table ``(vocab_size, embed_dim)`` (tied to the masked-LM head's output)."""
        return self.encoder.sentence_encoder.embed_tokens

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (that of the token embeddings: a model sits on one device)."""
        return self.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the model's weights (that of the token embeddings)."""
        return self.embed_tokens.weight.dtype

    def max_positions(self) -> int:
        """Longest input the position table allows (512 for the released models)."""
        return self.encoder.sentence_encoder.max_positions()

    @contextlib.contextmanager
    def eval_mode(self) -> Iterator[EncoderModel]:
        """The model in eval mode (no dropout) for a ``with`` block; then every sub-module back in
        the mode it had (a model in training, or with some heads in training, stays so).

        >>> model = EncoderModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> with model.eval_mode():
        ...     model.training
        False
        >>> model.training
        True
        """
        with eval_mode(self):
            yield self

    @contextlib.contextmanager
    def inference(self) -> Iterator[EncoderModel]:
        """:meth:`eval_mode` under ``torch.inference_mode()``: how every feature runs the model
        (no dropout, no autograd records, the layers' in-place inference path).

        >>> model = EncoderModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> with model.inference():
        ...     model.features(torch.tensor([[0, 5, 2]])).last_hidden_state.requires_grad
        False
        """
        with self.eval_mode(), torch.inference_mode():
            yield self

    # ------------------------------------------------------------------ the typed interface

    def features(
        self,
        tokens: torch.Tensor,
        *,
        segment_labels: torch.Tensor | None = None,
        return_all_hiddens: bool = False,
        document_starts: torch.Tensor | None = None,
    ) -> EncoderOutput:
        """The transformer's output for ``tokens`` (B, T), padded with ``cfg.padding_idx``;
        ``segment_labels`` (B, T) for models with segment embeddings (default: all 0);
        ``document_starts`` (B, T) for rows of whole documents packed back to back (True on the
        first token of each document after a row's first: each is attended alone). How padded
        rows are attended is the core's choice (:meth:`set_attention`); padding positions are 0."""
        last, hiddens = self.encoder.sentence_encoder(tokens, return_all_hiddens, segment_labels, document_starts)
        return EncoderOutput(last, tuple(hiddens) if return_all_hiddens else None)

    def lm_logits(self, features: torch.Tensor, masked_tokens: torch.Tensor | None = None) -> torch.Tensor:
        """Masked-LM logits over the vocabulary from ``features`` (B, T, C): (B, T, V), or (N, V)
        at the N positions where ``masked_tokens`` (B, T) is True."""
        return self.encoder.lm_head(features, masked_tokens)

    def num_classes(self, head: str) -> int:
        """Outputs of the classification head or token head ``head``; ``KeyError`` naming the
        registered heads when there is none of that name.

        >>> model = EncoderModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> model.register_token_head("ner", num_labels=5).num_classes == model.num_classes("ner")
        True
        """
        for heads in (self.classification_heads, self.token_heads):
            if head in heads:
                num_classes = heads[head].num_classes
                assert isinstance(num_classes, int)
                return num_classes
        known = sorted([*self.classification_heads, *self.token_heads])
        raise KeyError(f"no head named {head!r}; registered heads: {known}")

    def tag(self, name: str, features: torch.Tensor) -> torch.Tensor:
        """Logits (B, T, num_labels) of the token head ``name`` from features (B, T, C)."""
        return self.token_heads[name](features)

    def set_attention(self, strategy: str | None) -> str | None:
        """Choose how every encoder of this model (ELECTRA's generator too) attends over padded
        batches: one of :data:`~roberta_ext.modeling.attention.ATTENTION_STRATEGIES`, or None for
        ``$ROBERTA_EXT_ATTENTION``, else ``auto``. Other models keep theirs. Returns the choice it
        replaces; :func:`~roberta_ext.modeling.attention.use_attention` does this for a ``with`` block.

        >>> model = EncoderModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> model.set_attention("masked") is None       # the config chose nothing
        True
        >>> model.set_attention("flash")
        Traceback (most recent call last):
        ...
        ValueError: attention strategy='flash' is not an attention strategy; choose one of ('auto', ...)
        """
        if strategy is not None:
            checked_strategy(strategy)  # before any encoder changes: a refused name changes nothing
        previous = self.encoder.sentence_encoder.attention
        for module in self.modules():
            if isinstance(module, TransformerEncoder):
                module.set_attention(strategy)
        return previous

    def forward(
        self,
        src_tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        classification_head_name: str | None = None,
        masked_tokens: torch.Tensor | None = None,
        segment_labels: torch.Tensor | None = None,
        token_head_name: str | None = None,
        document_starts: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """fairseq's call convention: ``src_tokens`` (B, T) -> (features (B, T, C) or logits,
        ``{"inner_states": [(B, T, C), ...] | None}``). Hidden states are batch-first here.
        ``segment_labels`` (B, T) feed the segment embeddings of BERT-like models;
        ``token_head_name`` returns that token head's (B, T, num_labels) logits;
        ``document_starts`` (B, T) marks the first token of each further document of rows that
        pack whole documents (each attended and positioned alone: ``TransformerEncoder.forward``)."""
        head_name = classification_head_name or token_head_name
        if head_name is not None:
            features_only = True
        x, extra = self.encoder(
            src_tokens, features_only, return_all_hiddens, masked_tokens, segment_labels, document_starts
        )
        if classification_head_name is not None:
            x = self.classify(classification_head_name, x, padding_mask=src_tokens.eq(self.cfg.padding_idx))
        elif token_head_name is not None:
            x = self.tag(token_head_name, x)
        return x, extra

    def classify(self, name: str, features: torch.Tensor, *, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, num_classes) of the sentence-level head ``name`` from features (B, T, C),
        through the pooler when the model has one. ``padding_mask`` (B, T), True on padding: what
        a head with ``mean`` pooling (``cfg.classifier_pooling``) averages over; without it, every
        position (transformers' ModernBERT without an attention mask)."""
        head = self.classification_heads[name]
        if isinstance(head, NormedClassificationHead):
            return head(features, padding_mask)
        return head(self.pooler(features)) if self.pooler is not None else head(features)

    def register_classification_head(
        self, name: str, num_classes: int | None = None, inner_dim: int | None = None
    ) -> ClassificationHead | PooledClassificationHead | NormedClassificationHead:
        """Add (or replace, with a warning-free overwrite like fairseq's) a head named ``name``.

        >>> model = EncoderModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> model.register_classification_head("sentiment", num_classes=2).num_classes
        2
        """
        if not name or "." in name:
            raise ValueError(f"classification head name {name!r} must be non-empty and contain no '.'")
        if num_classes is None or num_classes <= 0:
            raise ValueError(f"num_classes for head {name!r} must be a positive integer, got {num_classes!r}")
        dim = self.cfg.encoder_embed_dim
        head: ClassificationHead | PooledClassificationHead | NormedClassificationHead
        if self.cfg.normed_heads:  # ModernBERT: pooling, dense, activation, LayerNorm, dropout, out_proj
            pooling, dropout = self.cfg.classifier_pooling, self.cfg.pooler_dropout
            head = NormedClassificationHead.for_config(self.cfg, num_classes, pooling=pooling, dropout=dropout)
        elif self.pooler is not None:  # BERT-like: the shared pooler, then dropout and out_proj
            head = PooledClassificationHead(dim, num_classes, self.cfg.pooler_dropout)
        else:
            head = ClassificationHead(
                dim, inner_dim or dim, num_classes, self.cfg.pooler_activation_fn, self.cfg.pooler_dropout
            )
        self.classification_heads[name] = self._adopt(head)
        return head

    def register_token_head(
        self, name: str, num_labels: int, dropout: float | None = None
    ) -> TokenClassificationHead | NormedClassificationHead:
        """Add (or replace) a per-token head named ``name`` with ``num_labels`` outputs: a tagger
        (one label per token) or, with 2 outputs, the start/end scorer of extractive QA.

        >>> model = EncoderModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> model.register_token_head("ner", num_labels=5).num_classes
        5
        """
        if not name or "." in name:
            raise ValueError(f"token head name {name!r} must be non-empty and contain no '.'")
        if num_labels is None or num_labels <= 0:
            raise ValueError(f"num_labels for token head {name!r} must be a positive integer, got {num_labels!r}")
        dropout = self.cfg.dropout if dropout is None else dropout
        head: TokenClassificationHead | NormedClassificationHead
        if self.cfg.normed_heads:  # ModernBERT: dense, activation, LayerNorm before dropout and out_proj
            head = NormedClassificationHead.for_config(self.cfg, num_labels, pooling="none", dropout=dropout)
        else:
            head = TokenClassificationHead(self.cfg.encoder_embed_dim, num_labels, dropout)
        self.token_heads[name] = self._adopt(head)
        return head

    def _adopt(self, head: nn.Module) -> nn.Module:
        """Initialise a new head and put it on the model's device, dtype and train/eval mode."""
        head.apply(init_bert_params)
        head.train(self.training)  # a head added to a model in eval mode starts in eval mode too
        return head.to(device=self.device, dtype=self.dtype)


RobertaModel = EncoderModel
"""fairseq's name for the model class (every family's model is one)."""
