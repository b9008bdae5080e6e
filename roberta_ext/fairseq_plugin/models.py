"""The ``roberta_ext`` fairseq model: our :class:`~roberta_ext.modeling.RobertaModel`, registered.

The class *is* the hub's model (it inherits from it), so there is one implementation and the
state dict keys are fairseq's RoBERTa keys: checkpoints written by ``fairseq-train`` load in our
hub, and in fairseq's own ``RobertaModel.from_pretrained(..., user_dir=...)``.
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import logging
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.utils import safe_getattr

from ..checkpoints.fairseq import upgrade_state_dict
from ..modeling import EncoderConfig, RobertaModel

logger = logging.getLogger(__name__)

PRETRAINING_MODULES = ("generator", "discriminator_head", "sbo_head")
"""Modules only pretraining models have; restoring their checkpoints elsewhere drops them."""

ACTIVATION_CHOICES = ChoiceEnum(["gelu", "gelu_accurate", "relu", "tanh", "linear"])
FAMILY_CHOICES = ChoiceEnum(["roberta", "bert", "albert", "electra", "spanbert"])
POSITION_CHOICES = ChoiceEnum(["fairseq", "absolute"])
SHARING_CHOICES = ChoiceEnum(["none", "all", "ffn", "attention"])


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
    # The families' differences (RoBERTa's values are the defaults; the bert_ext_* and
    # albert_ext_* architectures set them).
    family: FAMILY_CHOICES = field(default="roberta", metadata={"help": "family conventions (pairs, objectives)"})
    embedding_size: Optional[int] = field(
        default=None, metadata={"help": "embedding width E < hidden size: ALBERT's factorized embeddings"})
    type_vocab_size: int = field(default=0, metadata={"help": "segment embeddings (BERT/ALBERT: 2)"})
    position_style: POSITION_CHOICES = field(
        default="fairseq", metadata={"help": "fairseq: positions from padding_idx+1; absolute: BERT's"})
    layer_norm_eps: float = field(default=1e-5, metadata={"help": "LayerNorm epsilon (BERT: 1e-12)"})
    share_layers: SHARING_CHOICES = field(
        default="none", metadata={"help": "ALBERT cross-layer sharing: none, all, ffn, attention"})
    pooler: bool = field(default=False, metadata={"help": "BERT's pooler under sentence-level heads"})


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
            family=str(safe_getattr(args, "family", "roberta")),
            embedding_size=safe_getattr(args, "embedding_size", None),
            type_vocab_size=safe_getattr(args, "type_vocab_size", 0),
            position_style=str(safe_getattr(args, "position_style", "fairseq")),
            layer_norm_eps=safe_getattr(args, "layer_norm_eps", 1e-5),
            share_layers=str(safe_getattr(args, "share_layers", "none")),
            pooler=safe_getattr(args, "pooler", False),
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
        segment_labels: torch.Tensor | None = None,
        token_head_name: str | None = None,
        **unused: Any,  # src_lengths, src_id: fairseq's tasks put them in net_input
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        x, extra = super().forward(
            src_tokens, features_only, return_all_hiddens, classification_head_name, masked_tokens,
            segment_labels, token_head_name,
        )
        if extra.get("inner_states") is not None:  # fairseq's RoBERTa returns them (T, B, C)
            extra["inner_states"] = [h.transpose(0, 1) for h in extra["inner_states"]]
        return x, extra

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = net_output[0].float()
        return torch.log_softmax(logits, dim=-1) if log_probs else torch.softmax(logits, dim=-1)

    def register_token_head(self, name: str, num_labels: int, dropout: float | None = None):
        if name in self.token_heads and self.token_heads[name].num_classes != num_labels:
            logger.warning(f"re-registering token head {name!r} with {num_labels} labels "
                           f"(was {self.token_heads[name].num_classes})")
        return super().register_token_head(name, num_labels, dropout)

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
        # Pretraining-only modules (ELECTRA's generator and head, SpanBERT's SBO head) that this
        # model does not have: a pretraining checkpoint restored for fine-tuning drops them.
        for module in PRETRAINING_MODULES:
            if not hasattr(self, module) and any(k.startswith(f"{module}.") for k in upgraded):
                logger.info(f"dropping {module}.* of the checkpoint: this model has no {module}")
                upgraded = {k: v for k, v in upgraded.items() if not k.startswith(f"{module}.")}
        state_dict.update({prefix + k: v for k, v in upgraded.items()})

        for kind, register in (("classification_heads", self.register_classification_head),
                               ("token_heads", self.register_token_head)):
            self._reconcile_heads(state_dict, prefix + kind + ".", getattr(self, kind), register)

    def _reconcile_heads(self, state_dict: dict[str, torch.Tensor], heads_prefix: str, heads: torch.nn.ModuleDict,
                         register: Any) -> None:
        found: dict[str, tuple[int, Optional[int]]] = {}
        for key, tensor in state_dict.items():
            if key.startswith(heads_prefix) and key.endswith(".out_proj.weight"):
                head = key[len(heads_prefix):].split(".")[0]
                dense = state_dict.get(f"{heads_prefix}{head}.dense.weight")
                found[head] = (tensor.size(0), None if dense is None else dense.size(0))
        for head, (num_classes, inner_dim) in found.items():
            current = heads[head] if head in heads else None
            if safe_getattr(self.args, "load_checkpoint_heads", False):
                if current is None:
                    register(head, num_classes, inner_dim) if inner_dim else register(head, num_classes)
                continue
            current_inner = getattr(getattr(current, "dense", None), "out_features", None)
            if current is None or current.num_classes != num_classes or current_inner != inner_dim:
                logger.warning(f"dropping head {head!r} of the checkpoint: not in the current model "
                               "or of different dimensions")
                for key in [k for k in state_dict if k.startswith(f"{heads_prefix}{head}.")]:
                    del state_dict[key]
        for key, value in heads.state_dict().items():
            state_dict.setdefault(heads_prefix + key, value)


def _defaults(args: Any, defaults: dict[str, Any]) -> None:
    for option, default in defaults.items():
        setattr(args, option, safe_getattr(args, option, default))


def _base(args: Any) -> None:
    """Defaults for any option the command line left unset: RoBERTa base."""
    for option, default in [
        ("encoder_layers", 12), ("encoder_embed_dim", 768), ("encoder_ffn_embed_dim", 3072),
        ("encoder_attention_heads", 12), ("max_positions", 512), ("activation_fn", "gelu"),
        ("pooler_activation_fn", "tanh"), ("dropout", 0.1), ("attention_dropout", 0.1),
        ("activation_dropout", 0.0), ("pooler_dropout", 0.0), ("encoder_normalize_before", False),
        ("untie_weights_roberta", False), ("family", "roberta"), ("embedding_size", None), ("type_vocab_size", 0),
        ("position_style", "fairseq"), ("layer_norm_eps", 1e-5), ("share_layers", "none"), ("pooler", False),
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


BERT_DEFAULTS = {"family": "bert", "type_vocab_size": 2, "position_style": "absolute", "layer_norm_eps": 1e-12,
                 "pooler": True}
ALBERT_DEFAULTS = {**BERT_DEFAULTS, "family": "albert", "embedding_size": 128, "share_layers": "all",
                   "activation_fn": "gelu_accurate", "dropout": 0.0, "attention_dropout": 0.0}


@register_model_architecture("roberta_ext", "bert_ext_base")
def bert_ext_base(args: Any) -> None:
    """BERT base: RoBERTa base's shape with segment embeddings, absolute positions and a pooler."""
    _defaults(args, BERT_DEFAULTS)
    _base(args)


@register_model_architecture("roberta_ext", "bert_ext_large")
def bert_ext_large(args: Any) -> None:
    """BERT large: 24 layers, 1024 wide, 16 heads."""
    _defaults(args, BERT_DEFAULTS)
    roberta_ext_large(args)


@register_model_architecture("roberta_ext", "albert_ext_base")
def albert_ext_base(args: Any) -> None:
    """ALBERT base: E=128 factorized embeddings, one layer's weights shared by all 12, no dropout."""
    _defaults(args, ALBERT_DEFAULTS)
    _base(args)


@register_model_architecture("roberta_ext", "albert_ext_large")
def albert_ext_large(args: Any) -> None:
    """ALBERT large: 24 shared layers, 1024 wide, 16 heads, E=128."""
    _defaults(args, ALBERT_DEFAULTS)
    roberta_ext_large(args)
