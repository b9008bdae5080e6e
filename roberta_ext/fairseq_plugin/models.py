"""The ``roberta_ext`` fairseq model: our :class:`~roberta_ext.modeling.RobertaModel`, registered.

The class *is* the hub's model (it inherits from it), so there is one implementation and the
state dict keys are fairseq's RoBERTa keys: checkpoints written by ``fairseq-train`` load in our
hub, and in fairseq's own ``RobertaModel.from_pretrained(..., user_dir=...)``.
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
from dataclasses import dataclass, field
from typing import Any

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.utils import safe_getattr

from ..checkpoints.fairseq import upgrade_state_dict
from ..modeling import EncoderConfig, RobertaModel

logger = logging.getLogger(__name__)

ACTIVATION_CHOICES = ChoiceEnum(["gelu", "gelu_accurate", "relu", "tanh", "linear"])


@dataclass
class RobertaExtConfig(FairseqDataclass):
    """The model options of fairseq's ``roberta``, under the same names."""

    encoder_layers: int = field(default=12, metadata={"help": "number of encoder layers"})
    encoder_embed_dim: int = field(default=768, metadata={"help": "encoder embedding dimension"})
    encoder_ffn_embed_dim: int = field(default=3072, metadata={"help": "encoder feed-forward dimension"})
    encoder_attention_heads: int = field(default=12, metadata={"help": "number of attention heads"})
    max_positions: int = field(default=512, metadata={"help": "number of positional embeddings to learn"})
    activation_fn: ACTIVATION_CHOICES = field(default="gelu", metadata={"help": "activation function"})
    pooler_activation_fn: ACTIVATION_CHOICES = field(
        default="tanh", metadata={"help": "activation function of classification heads"}
    )
    encoder_normalize_before: bool = field(default=False, metadata={"help": "pre-LN layers (RoBERTa is post-LN)"})
    untie_weights_roberta: bool = field(default=False, metadata={"help": "untie the LM head from the embeddings"})
    dropout: float = field(default=0.1, metadata={"help": "dropout probability"})
    attention_dropout: float = field(default=0.1, metadata={"help": "dropout on attention weights"})
    activation_dropout: float = field(default=0.0, metadata={"help": "dropout after the FFN activation"})
    pooler_dropout: float = field(default=0.0, metadata={"help": "dropout in classification heads"})
    load_checkpoint_heads: bool = field(
        default=False, metadata={"help": "(re-)register and load heads when loading checkpoints"}
    )


@register_model("roberta_ext", dataclass=RobertaExtConfig)
class RobertaExtModel(RobertaModel, BaseFairseqModel):
    """fairseq's view of our RoBERTa: ``forward`` takes fairseq's batch keys and returns hidden
    states time-first, as fairseq's RoBERTa does."""

    def __init__(self, args: Any, cfg: EncoderConfig) -> None:
        super().__init__(cfg)
        self.args = args

    @classmethod
    def build_model(cls, args: Any, task: Any) -> "RobertaExtModel":
        cfg = EncoderConfig(
            vocab_size=len(task.source_dictionary),
            padding_idx=task.source_dictionary.pad(),
            encoder_layers=args.encoder_layers,
            encoder_embed_dim=args.encoder_embed_dim,
            encoder_ffn_embed_dim=args.encoder_ffn_embed_dim,
            encoder_attention_heads=args.encoder_attention_heads,
            max_positions=args.max_positions,
            activation_fn=str(args.activation_fn),
            pooler_activation_fn=str(args.pooler_activation_fn),
            encoder_normalize_before=args.encoder_normalize_before,
            untie_weights=args.untie_weights_roberta,
            dropout=args.dropout,
            attention_dropout=args.attention_dropout,
            activation_dropout=args.activation_dropout,
            pooler_dropout=args.pooler_dropout,
        )
        task_positions = task.max_positions()
        if isinstance(task_positions, int) and task_positions > cfg.max_positions:
            raise ValueError(
                f"the task allows {task_positions} tokens per sample but the model has --max-positions "
                f"{cfg.max_positions}; raise --max-positions or lower --tokens-per-sample/--max-positions of the task"
            )
        return cls(args, cfg)

    def forward(
        self,
        src_tokens: torch.Tensor,
        features_only: bool = False,
        return_all_hiddens: bool = False,
        classification_head_name: str | None = None,
        masked_tokens: torch.Tensor | None = None,
        **unused: Any,  # src_lengths, src_id: fairseq's tasks put them in net_input
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        x, extra = super().forward(
            src_tokens, features_only, return_all_hiddens, classification_head_name, masked_tokens
        )
        if extra.get("inner_states") is not None:  # fairseq's RoBERTa returns them (T, B, C)
            extra["inner_states"] = [h.transpose(0, 1) for h in extra["inner_states"]]
        return x, extra

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = net_output[0].float()
        return torch.log_softmax(logits, dim=-1) if log_probs else torch.softmax(logits, dim=-1)

    def register_classification_head(self, name: str, num_classes: int | None = None, inner_dim: int | None = None,
                                     **unused: Any):
        if name in self.classification_heads:
            head = self.classification_heads[name]
            if head.num_classes != num_classes or (inner_dim and head.dense.out_features != inner_dim):
                logger.warning(f"re-registering head {name!r} with num_classes {num_classes} (was {head.num_classes})")
        return super().register_classification_head(name, num_classes=num_classes, inner_dim=inner_dim)

    def upgrade_state_dict_named(self, state_dict: dict[str, torch.Tensor], name: str) -> None:
        """Accept every layout the hub accepts, and reconcile classification heads as fairseq's
        RoBERTa does: heads in the file but not in the model are registered (with
        ``--load-checkpoint-heads``) or dropped with a warning; heads in the model but not in
        the file keep their fresh weights."""
        prefix = f"{name}." if name else ""
        own = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
        upgraded = upgrade_state_dict(own)
        for key in list(state_dict):
            if key.startswith(prefix):
                del state_dict[key]
        state_dict.update({prefix + k: v for k, v in upgraded.items()})

        heads_prefix = prefix + "classification_heads."
        found: dict[str, tuple[int, int]] = {}
        for key, tensor in state_dict.items():
            if key.startswith(heads_prefix) and key.endswith(".out_proj.weight"):
                head = key[len(heads_prefix):].split(".")[0]
                found[head] = (tensor.size(0), state_dict[f"{heads_prefix}{head}.dense.weight"].size(0))
        for head, (num_classes, inner_dim) in found.items():
            current = self.classification_heads[head] if head in self.classification_heads else None
            if safe_getattr(self.args, "load_checkpoint_heads", False):
                if current is None:
                    self.register_classification_head(head, num_classes, inner_dim)
                continue
            if current is None or current.num_classes != num_classes or current.dense.out_features != inner_dim:
                logger.warning(f"dropping classification head {head!r} of the checkpoint: not in the current model "
                               "or of different dimensions")
                for key in [k for k in state_dict if k.startswith(f"{heads_prefix}{head}.")]:
                    del state_dict[key]
        for key, value in self.classification_heads.state_dict().items():
            state_dict.setdefault(heads_prefix + key, value)


def _base(args: Any) -> None:
    """Defaults for any option the command line left unset: RoBERTa base."""
    for option, default in [
        ("encoder_layers", 12), ("encoder_embed_dim", 768), ("encoder_ffn_embed_dim", 3072),
        ("encoder_attention_heads", 12), ("max_positions", 512), ("activation_fn", "gelu"),
        ("pooler_activation_fn", "tanh"), ("dropout", 0.1), ("attention_dropout", 0.1),
        ("activation_dropout", 0.0), ("pooler_dropout", 0.0), ("encoder_normalize_before", False),
        ("untie_weights_roberta", False),
    ]:
        setattr(args, option, safe_getattr(args, option, default))


@register_model_architecture("roberta_ext", "roberta_ext_base")
def roberta_ext_base(args: Any) -> None:
    """RoBERTa base: 12 layers, 768 wide, 12 heads."""
    _base(args)


@register_model_architecture("roberta_ext", "roberta_ext_large")
def roberta_ext_large(args: Any) -> None:
    """RoBERTa large: 24 layers, 1024 wide, 16 heads."""
    args.encoder_layers = safe_getattr(args, "encoder_layers", 24)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 1024)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4096)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 16)
    _base(args)
