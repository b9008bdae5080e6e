"""The model of every family: the encoder core, a tied masked-LM head and named heads.

The module tree mirrors fairseq's ``RobertaModel`` (``encoder.sentence_encoder``,
``encoder.lm_head``, ``classification_heads.NAME``), so ``state_dict()`` keys are identical.
BERT and ALBERT add a ``pooler`` under their sentence-level heads (NSP, SOP, classification);
any family can carry per-token heads (``token_heads.NAME``: tagging, QA spans).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .attention import checked_strategy
from .config import EncoderConfig
from .encoder import TransformerEncoder, init_bert_params
from .heads import ClassificationHead, LMHead, PooledClassificationHead, Pooler, TokenClassificationHead


class RobertaEncoder(nn.Module):
    """fairseq's ``RobertaEncoder``: the transformer plus the masked-LM head."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.sentence_encoder = TransformerEncoder(cfg)
        tied = None if cfg.untie_weights else self.sentence_encoder.embed_tokens.weight
        self.lm_head = LMHead(
            cfg.embed_dim,
            cfg.vocab_size,
            cfg.activation_fn,
            weight=tied,
            input_dim=cfg.encoder_embed_dim,
            layer_norm_eps=cfg.layer_norm_eps,
        )

    def forward(
        self,
        tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        masked_tokens: torch.Tensor | None = None,
        segment_labels: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        features, hiddens = self.sentence_encoder(tokens, return_all_hiddens, segment_labels)
        out = features if features_only else self.lm_head(features, masked_tokens)
        return out, {"inner_states": hiddens if return_all_hiddens else None}


class RobertaModel(nn.Module):
    """RoBERTa — and, by its config, BERT, ALBERT and the other families — in plain PyTorch.

    >>> cfg = EncoderConfig(vocab_size=64, encoder_layers=2, encoder_embed_dim=32, encoder_ffn_embed_dim=64,
    ...                     encoder_attention_heads=4, max_positions=64)
    >>> model = RobertaModel(cfg).eval()
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

    def max_positions(self) -> int:
        """Longest input the position table allows (512 for the released models)."""
        return self.encoder.sentence_encoder.max_positions()

    def set_attention(self, strategy: str | None) -> str | None:
        """Choose how every encoder of this model (ELECTRA's generator too) attends over padded
        batches: one of :data:`~roberta_ext.modeling.attention.ATTENTION_STRATEGIES`, or None for
        ``$ROBERTA_EXT_ATTENTION``, else ``auto``. Other models keep theirs. Returns the choice it
        replaces; :func:`~roberta_ext.modeling.attention.use_attention` does this for a ``with`` block.

        >>> model = RobertaModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
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
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """fairseq's call convention: ``src_tokens`` (B, T) -> (features (B, T, C) or logits,
        ``{"inner_states": [(B, T, C), ...] | None}``). Hidden states are batch-first here.
        ``segment_labels`` (B, T) feed the segment embeddings of BERT-like models;
        ``token_head_name`` returns that token head's (B, T, num_labels) logits."""
        head_name = classification_head_name or token_head_name
        if head_name is not None:
            features_only = True
        x, extra = self.encoder(src_tokens, features_only, return_all_hiddens, masked_tokens, segment_labels)
        if classification_head_name is not None:
            x = self.classify(classification_head_name, x)
        elif token_head_name is not None:
            x = self.token_heads[token_head_name](x)
        return x, extra

    def classify(self, name: str, features: torch.Tensor) -> torch.Tensor:
        """Logits (B, num_classes) of the sentence-level head ``name`` from features (B, T, C),
        through the pooler when the model has one."""
        head = self.classification_heads[name]
        return head(self.pooler(features)) if self.pooler is not None else head(features)

    def register_classification_head(
        self, name: str, num_classes: int | None = None, inner_dim: int | None = None
    ) -> ClassificationHead | PooledClassificationHead:
        """Add (or replace, with a warning-free overwrite like fairseq's) a head named ``name``.

        >>> model = RobertaModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> model.register_classification_head("sentiment", num_classes=2).num_classes
        2
        """
        if not name or "." in name:
            raise ValueError(f"classification head name {name!r} must be non-empty and contain no '.'")
        if num_classes is None or num_classes <= 0:
            raise ValueError(f"num_classes for head {name!r} must be a positive integer, got {num_classes!r}")
        dim = self.cfg.encoder_embed_dim
        head: ClassificationHead | PooledClassificationHead
        if self.pooler is not None:  # BERT-like: the shared pooler, then dropout and out_proj
            head = PooledClassificationHead(dim, num_classes, self.cfg.pooler_dropout)
        else:
            head = ClassificationHead(
                dim, inner_dim or dim, num_classes, self.cfg.pooler_activation_fn, self.cfg.pooler_dropout
            )
        self.classification_heads[name] = self._adopt(head)
        return head

    def register_token_head(self, name: str, num_labels: int, dropout: float | None = None) -> TokenClassificationHead:
        """Add (or replace) a per-token head named ``name`` with ``num_labels`` outputs: a tagger
        (one label per token) or, with 2 outputs, the start/end scorer of extractive QA.

        >>> model = RobertaModel(EncoderConfig(encoder_layers=1, encoder_embed_dim=32, encoder_attention_heads=4))
        >>> model.register_token_head("ner", num_labels=5).num_classes
        5
        """
        if not name or "." in name:
            raise ValueError(f"token head name {name!r} must be non-empty and contain no '.'")
        if num_labels is None or num_labels <= 0:
            raise ValueError(f"num_labels for token head {name!r} must be a positive integer, got {num_labels!r}")
        head = TokenClassificationHead(
            self.cfg.encoder_embed_dim, num_labels, self.cfg.dropout if dropout is None else dropout
        )
        self.token_heads[name] = self._adopt(head)
        return head

    def _adopt(self, head: nn.Module) -> nn.Module:
        """Initialise a new head and put it on the model's device, dtype and train/eval mode."""
        head.apply(init_bert_params)
        head.train(self.training)  # a head added to a model in eval mode starts in eval mode too
        param = next(self.parameters())
        return head.to(device=param.device, dtype=param.dtype)
