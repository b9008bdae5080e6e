"""RoBERTa: the encoder core, a tied masked-LM head and named classification heads.

The module tree mirrors fairseq's ``RobertaModel`` (``encoder.sentence_encoder``,
``encoder.lm_head``, ``classification_heads.NAME``), so ``state_dict()`` keys are identical.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .config import EncoderConfig
from .encoder import TransformerEncoder, init_bert_params
from .heads import ClassificationHead, LMHead


class RobertaEncoder(nn.Module):
    """fairseq's ``RobertaEncoder``: the transformer plus the masked-LM head."""

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.sentence_encoder = TransformerEncoder(cfg)
        tied = None if cfg.untie_weights else self.sentence_encoder.embed_tokens.weight
        self.lm_head = LMHead(cfg.encoder_embed_dim, cfg.vocab_size, cfg.activation_fn, weight=tied)

    def forward(
        self,
        tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        masked_tokens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        features, hiddens = self.sentence_encoder(tokens, return_all_hiddens=return_all_hiddens)
        out = features if features_only else self.lm_head(features, masked_tokens)
        return out, {"inner_states": hiddens if return_all_hiddens else None}


class RobertaModel(nn.Module):
    """RoBERTa in plain PyTorch.

    >>> model = RobertaModel(EncoderConfig.preset("tiny")).eval()
    >>> tokens = torch.tensor([[0, 10, 11, 2]])
    >>> model(tokens, features_only=True)[0].shape
    torch.Size([1, 4, 32])
    >>> model(tokens)[0].shape          # logits over the vocabulary
    torch.Size([1, 4, 64])
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.encoder = RobertaEncoder(cfg)
        self.classification_heads = nn.ModuleDict()
        self.apply(init_bert_params)

    def max_positions(self) -> int:
        """Longest input the position table allows (512 for the released models)."""
        return self.encoder.sentence_encoder.max_positions()

    def forward(
        self,
        src_tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        classification_head_name: str | None = None,
        masked_tokens: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """fairseq's call convention: ``src_tokens`` (B, T) -> (features (B, T, C) or logits,
        ``{"inner_states": [(B, T, C), ...] | None}``). Hidden states are batch-first here."""
        if classification_head_name is not None:
            features_only = True
        x, extra = self.encoder(src_tokens, features_only, return_all_hiddens, masked_tokens)
        if classification_head_name is not None:
            x = self.classification_heads[classification_head_name](x)
        return x, extra

    def register_classification_head(
        self, name: str, num_classes: int | None = None, inner_dim: int | None = None
    ) -> ClassificationHead:
        """Add (or replace, with a warning-free overwrite like fairseq's) a head named ``name``.

        >>> model = RobertaModel(EncoderConfig.preset("tiny"))
        >>> model.register_classification_head("sentiment", num_classes=2).num_classes
        2
        """
        if not name or "." in name:
            raise ValueError(f"classification head name {name!r} must be non-empty and contain no '.'")
        if num_classes is None or num_classes <= 0:
            raise ValueError(f"num_classes for head {name!r} must be a positive integer, got {num_classes!r}")
        dim = self.cfg.encoder_embed_dim
        head = ClassificationHead(
            dim, inner_dim or dim, num_classes, self.cfg.pooler_activation_fn, self.cfg.pooler_dropout
        )
        head.apply(init_bert_params)
        head.train(self.training)  # a head added to a model in eval mode starts in eval mode too
        param = next(self.parameters())
        self.classification_heads[name] = head.to(device=param.device, dtype=param.dtype)
        return head
