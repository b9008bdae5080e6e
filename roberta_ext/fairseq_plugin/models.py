"""The ``roberta_ext`` fairseq model: our :class:`~roberta_ext.modeling.RobertaModel`, registered,
and every family's architectures.

The class *is* the hub's model (it inherits from it), so there is one implementation and the
state dict keys are fairseq's RoBERTa keys: checkpoints written by ``fairseq-train`` load in our
hub, and in fairseq's own ``RobertaModel.from_pretrained(..., user_dir=...)``.

Nothing here declares a model option: :class:`RobertaExtConfig` is derived from the fields of
:class:`~roberta_ext.modeling.EncoderConfig` (names, defaults, help, choices), and each
architecture ``<family>_ext_<size>`` sets the options its family's preset of that size has,
for every option the command line left unset (:func:`register_architectures`).
"""

# No "from __future__ import annotations": fairseq reads dataclass field types at run time.

import dataclasses
import inspect
import logging
import sys
from collections.abc import Callable
from dataclasses import field
from typing import Any, Optional

import torch
from fairseq.dataclass import ChoiceEnum, FairseqDataclass
from fairseq.models import BaseFairseqModel, register_model, register_model_architecture
from fairseq.tasks import TASK_REGISTRY
from fairseq.utils import safe_getattr
from hydra.core.hydra_config import HydraConfig

from ..checkpoints.fairseq import upgrade_state_dict
from ..checkpoints.state import drop_pretraining_modules
from ..families import Family, families
from ..modeling import EncoderConfig, RobertaModel
from ..modeling.config import FAIRSEQ_NAMES
from ..modeling.heads import ClassificationHead

logger = logging.getLogger(__name__)

_TYPES = {"int": int, "float": float, "bool": bool, "str": str, "int | None": Optional[int]}


def _plugin_fields() -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(EncoderConfig) if f.metadata["plugin"]]


FROM_THE_TASK = "max_positions"
"""The one option whose default is not the preset's, as in fairseq's ``roberta``: left unset, the
model takes ``--tokens-per-sample`` (pretraining), else the task's own ``max_positions()``, so a
model pretrained with ``--tokens-per-sample 128`` has 128 positions and fine-tunes at
``--max-positions 128``."""


def _option_field(config_field: dataclasses.Field) -> tuple[str, Any, Any]:
    """``(fairseq name, type, field)`` of one :class:`EncoderConfig` option for a fairseq dataclass."""
    choices = config_field.metadata["choices"]
    if config_field.name == "family":
        choices = tuple(family.name for family in families())
    kind = ChoiceEnum(list(choices)) if choices else _TYPES[str(config_field.type)]
    help, default = config_field.metadata["help"], config_field.default
    if config_field.name == FROM_THE_TASK:
        kind, default = Optional[int], None
        help += "; default: --tokens-per-sample, else the task's maximum"
    return FAIRSEQ_NAMES[config_field.name], kind, field(default=default, metadata={"help": help})


RobertaExtConfig = dataclasses.make_dataclass(
    "RobertaExtConfig",
    [
        *(_option_field(f) for f in _plugin_fields()),
        (
            "load_checkpoint_heads",
            bool,
            field(default=False, metadata={"help": "(re-)register and load heads when loading checkpoints"}),
        ),
    ],
    bases=(FairseqDataclass,),
    namespace={
        "__doc__": "The model options of fairseq's ``roberta`` (derived from EncoderConfig's fields), "
        "under fairseq's names, and ``--load-checkpoint-heads``."
    },
)
RobertaExtConfig.__module__ = __name__


def config_from_args(args: Any, task: Any) -> EncoderConfig:
    """The :class:`EncoderConfig` of fairseq's parsed model options; the vocabulary and the
    padding index come from the task's dictionary."""
    values = {f.name: safe_getattr(args, FAIRSEQ_NAMES[f.name], f.default) for f in _plugin_fields()}
    values = {name: str(value) if isinstance(value, str) else value for name, value in values.items()}
    if safe_getattr(args, FROM_THE_TASK, None) is None:  # fairseq's roberta: from the task's blocks
        task_positions = task.max_positions() if hasattr(task, "max_positions") else None
        from_task = safe_getattr(args, "tokens_per_sample", None) or task_positions
        values[FROM_THE_TASK] = from_task if isinstance(from_task, int) else EncoderConfig.max_positions
    return EncoderConfig(vocab_size=len(task.source_dictionary), padding_idx=task.source_dictionary.pad(), **values)


_FORWARD_ARGUMENTS = frozenset(inspect.signature(RobertaModel.forward).parameters) - {"self"}
"""The keyword arguments of the encoder's forward, declared once (in ``modeling``)."""


@register_model("roberta_ext", dataclass=RobertaExtConfig)
class RobertaExtModel(RobertaModel, BaseFairseqModel):
    """fairseq's view of our RoBERTa: ``forward`` takes fairseq's batch keys and returns hidden
    states time-first, as fairseq's RoBERTa does."""

    PRETRAINING_TASK: str | None = None
    """The task under which this model is built as its family's pretraining model
    (:meth:`pretraining_class`); under any other task it is the encoder alone."""

    def __init__(self, args: Any, cfg: EncoderConfig) -> None:
        # Cooperative: in a pretraining model the next class is the family's pretraining model,
        # which declares its modules from cfg and these options.
        super().__init__(cfg, **self.pretraining_model_options(args))
        self.args = args

    @classmethod
    def build_model(cls, args: Any, task: Any) -> "RobertaExtModel":
        pretraining = cls.PRETRAINING_TASK is not None and isinstance(task, TASK_REGISTRY[cls.PRETRAINING_TASK])
        return (cls.pretraining_class() if pretraining else cls)(args, cls.checked_config(args, task))

    @classmethod
    def pretraining_class(cls) -> type["RobertaExtModel"]:
        """The model built under :attr:`PRETRAINING_TASK`: this class and the family's pretraining
        model in one (its modules and ``pretraining_forward`` are the family's)."""
        raise NotImplementedError(f"{cls.__name__} has no pretraining model")

    def pretraining_model_options(self, args: Any) -> dict[str, Any]:
        """The keyword options of the family's pretraining model, from fairseq's parsed ``args``."""
        return {}

    @staticmethod
    def checked_config(args: Any, task: Any) -> EncoderConfig:
        """The model's config from the parsed options, checked against what the task feeds it."""
        cfg = config_from_args(args, task)
        task_positions = task.max_positions()
        if isinstance(task_positions, int) and task_positions > cfg.max_positions:
            if under_hydra():
                task_key = "task.max_positions" if _has_option(task, "max_positions") else "task.tokens_per_sample"
                raise ValueError(
                    f"the task allows {task_positions} tokens per sample but the model has model.max_positions="
                    f"{cfg.max_positions}; raise model.max_positions or lower {task_key}"
                )
            raise ValueError(
                f"the task allows {task_positions} tokens per sample but the model has --max-positions "
                f"{cfg.max_positions}; raise --max-positions or lower --tokens-per-sample/--max-positions of the task"
            )
        return cfg

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The model's call, under bf16 autocast with ``--bf16-autocast`` (see :func:`bf16_autocast_call`):
        here rather than in ``forward`` so that it covers every subclass's forward (ELECTRA's and
        SpanBERT's pretraining steps) and every criterion's call."""
        if not self.cfg.bf16_autocast:
            return super().__call__(*args, **kwargs)
        return bf16_autocast_call(self, super().__call__, *args, **kwargs)

    def forward(
        self,
        src_tokens: torch.Tensor,
        *args: Any,
        pretraining_targets: torch.Tensor | None = None,
        pretraining_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        """:meth:`EncoderModel.forward <roberta_ext.modeling.EncoderModel.forward>` with hidden
        states time-first, as fairseq's RoBERTa returns them; the other keys fairseq's tasks put
        in ``net_input`` (``src_lengths``, ``src_id``) are ignored.

        With ``pretraining_targets`` (the masked-LM targets), one pretraining step of the family
        (ELECTRA's or SpanBERT's ``pretraining_forward``, given ``segment_labels`` and
        ``pretraining_options``) — through ``forward``, so that distributed data-parallel sees
        the parameters of the pretraining modules."""
        if pretraining_targets is not None:
            step = getattr(self, "pretraining_forward", None)
            if step is None:
                built = f"only when built for pretraining, under --task {self.PRETRAINING_TASK}"
                raise ValueError(
                    f"this {type(self).__name__} has no pretraining modules: it has them "
                    + (built if self.PRETRAINING_TASK else "in no task")
                )
            segments = kwargs.get("segment_labels")
            return step(src_tokens, pretraining_targets, segment_labels=segments, **(pretraining_options or {}))
        x, extra = super().forward(src_tokens, *args, **{k: v for k, v in kwargs.items() if k in _FORWARD_ARGUMENTS})
        if extra.get("inner_states") is not None:  # fairseq's RoBERTa returns them (T, B, C)
            extra["inner_states"] = [h.transpose(0, 1) for h in extra["inner_states"]]
        return x, extra

    def get_normalized_probs(self, net_output, log_probs, sample=None):
        logits = net_output[0].float()
        return torch.log_softmax(logits, dim=-1) if log_probs else torch.softmax(logits, dim=-1)

    def register_token_head(self, name: str, num_labels: int, dropout: float | None = None):
        if name in self.token_heads and self.token_heads[name].num_classes != num_labels:
            logger.warning(
                f"re-registering token head {name!r} with {num_labels} labels "
                f"(was {self.token_heads[name].num_classes})"
            )
        return super().register_token_head(name, num_labels, dropout)

    def register_classification_head(
        self, name: str, num_classes: int | None = None, inner_dim: int | None = None, **unused: Any
    ):
        if name in self.classification_heads:
            head = self.classification_heads[name]
            # Only an unpooled (RoBERTa) head has an inner layer; a pooled (BERT) one ignores inner_dim.
            inner_changed = inner_dim and isinstance(head, ClassificationHead) and head.dense.out_features != inner_dim
            if head.num_classes != num_classes or inner_changed:
                logger.warning(f"re-registering head {name!r} with num_classes {num_classes} (was {head.num_classes})")
        return super().register_classification_head(name, num_classes=num_classes, inner_dim=inner_dim)

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's loading (layouts upgraded, heads reconciled), with a message that says which
        tensors do not fit when a checkpoint was made with other sizes than these options (fairseq
        itself only says "please ensure that the architectures match")."""
        try:
            # BaseFairseqModel's signature, next in the MRO after RobertaModel (nn.Module's to mypy).
            return super().load_state_dict(state_dict, strict=strict, model_cfg=model_cfg, args=args)  # type: ignore[call-arg]
        except RuntimeError as error:
            problems = describe_mismatch(self.state_dict(), state_dict)
            if not problems:
                raise
            raise ValueError(
                f"the checkpoint does not fit the model these options build ({problems}); "
                f"the model has {_shape_summary(self.state_dict())}, the checkpoint {_shape_summary(state_dict)}: "
                + size_options_hint(self.cfg, self.state_dict(), state_dict, hydra=under_hydra())
            ) from error

    def upgrade_state_dict_named(self, state_dict: dict[str, torch.Tensor], name: str) -> None:
        """Accept every layout the hub accepts, and reconcile classification heads as fairseq's
        RoBERTa does: heads in the file but not in the model are registered (with
        ``--load-checkpoint-heads``) or dropped with a warning; heads in the model but not in
        the file keep their fresh weights."""
        prefix = f"{name}." if name else ""
        own = {k[len(prefix) :]: v for k, v in state_dict.items() if k.startswith(prefix)}
        upgraded = upgrade_state_dict(own)
        for key in list(state_dict):
            if key.startswith(prefix):
                del state_dict[key]
        # Pretraining-only modules (ELECTRA's generator and head, SpanBERT's SBO head) that this
        # model does not have: a pretraining checkpoint restored for fine-tuning drops them.
        for module, count in drop_pretraining_modules(self, upgraded).items():
            logger.info(f"not loading {count} tensors of {module!r}: it is only used in pretraining")
        state_dict.update({prefix + k: v for k, v in upgraded.items()})

        for kind, register in (
            ("classification_heads", self.register_classification_head),
            ("token_heads", self.register_token_head),
        ):
            self._reconcile_heads(state_dict, prefix + kind + ".", getattr(self, kind), register)

    def _reconcile_heads(
        self, state_dict: dict[str, torch.Tensor], heads_prefix: str, heads: torch.nn.ModuleDict, register: Any
    ) -> None:
        found: dict[str, tuple[int, Optional[int]]] = {}
        for key, tensor in state_dict.items():
            if key.startswith(heads_prefix) and key.endswith(".out_proj.weight"):
                head = key[len(heads_prefix) :].split(".")[0]
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
                logger.warning(
                    f"dropping head {head!r} of the checkpoint: not in the current model or of different dimensions"
                )
                for key in [k for k in state_dict if k.startswith(f"{heads_prefix}{head}.")]:
                    del state_dict[key]
            else:  # fairseq's behaviour too: a head of the same name and shape continues from the file
                logger.info(f"loading head {head!r} of the checkpoint into the model's head of that name")
        for name in heads:
            if name not in found:
                logger.info(f"head {name!r} is new: not in the checkpoint, it starts from random weights")
        for key, value in heads.state_dict().items():
            state_dict.setdefault(heads_prefix + key, value)


def under_hydra() -> bool:
    """Whether this process runs ``fairseq-hydra-train`` (or another hydra app), whose options are
    hydra keys (``task.max_positions=64``) rather than ``fairseq-train``'s (``--max-positions 64``).

    hydra's job config is set while a ``@hydra.main`` app runs; fairseq's ``hydra_train`` tests it
    the same way. The ranks it spawns on several GPUs run without it, but their main module is the
    ``fairseq-hydra-train`` script again, which imports ``fairseq_cli.hydra_train``; ``fairseq-train``
    and fairseq's hub never import it."""
    return HydraConfig.initialized() or "fairseq_cli.hydra_train" in sys.modules


def _has_option(task: Any, name: str) -> bool:
    """Whether ``task``'s options (``cfg``, or ``args`` for a legacy task) include ``name``."""
    options = safe_getattr(task, "cfg", None) or safe_getattr(task, "args", None)
    return safe_getattr(options, name, None) is not None


POSITIONS_KEY = "encoder.sentence_encoder.embed_positions.weight"


def size_options_hint(
    cfg: EncoderConfig, expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor], *, hydra: bool
) -> str:
    """What to check when a checkpoint (its upgraded state ``found``) does not fit the model of
    ``cfg`` (state ``expected``), in the spelling of the command that was run: ``fairseq-train``'s
    options, or hydra's keys. When the position tables differ, it names the ``max_positions`` that
    fits the checkpoint and the option that sets it; under hydra that is ``task.max_positions``
    for fine-tuning, because fairseq's ``sentence_prediction`` and ``sentence_ranking`` tasks
    overwrite the model's ``max_positions`` with their own (so ``++model.max_positions`` has no
    effect there).

    >>> model, checkpoint = {POSITIONS_KEY: torch.zeros(514, 8)}, {POSITIONS_KEY: torch.zeros(66, 8)}
    >>> size_options_hint(EncoderConfig(max_positions=512), model, checkpoint, hydra=False).split("; ")[-1]
    "the checkpoint's position table is that of max_positions 64: pass --max-positions 64"
    """
    if hydra:
        hint = (
            "check model._name and the size overrides (++model.encoder_layers=N, ++model.encoder_embed_dim=N, "
            "++model.encoder_ffn_embed_dim=N, ++model.encoder_attention_heads=N, ...)"
        )
    else:
        hint = "check --arch and the size options (--encoder-layers, --encoder-embed-dim, --max-positions, ...)"
    ours, theirs = expected.get(POSITIONS_KEY), found.get(POSITIONS_KEY)
    if ours is None or theirs is None or ours.shape[0] == theirs.shape[0]:
        return hint
    # Rows beyond max_positions: padding_idx + 1 for learned RoBERTa positions, 0 for BERT's.
    positions = theirs.shape[0] - (ours.shape[0] - cfg.max_positions)
    hint += f"; the checkpoint's position table is that of max_positions {positions}: "
    if hydra:
        return hint + (
            f"pass task.max_positions={positions} to fine-tune (the classification and multiple-choice tasks set "
            f"the model's from it, over ++model.max_positions), model.max_positions={positions} to continue pretraining"
        )
    return hint + f"pass --max-positions {positions}"


PRECISION_FLAGS = ("fp16", "memory_efficient_fp16", "bf16", "memory_efficient_bf16", "amp")
"""fairseq's mixed-precision options, which ``--bf16-autocast`` replaces."""


def refuse_mixed_precision(args: Any) -> None:
    """Raise if ``args`` ask for ``--bf16-autocast`` together with one of fairseq's own precision
    options (:data:`PRECISION_FLAGS`): the option runs the float32 model under autocast with
    fairseq's float32 trainer, and fairseq's ``--bf16`` means a TPU."""
    if not safe_getattr(args, "bf16_autocast", False):
        return
    clashing = [f"--{flag.replace('_', '-')}" for flag in PRECISION_FLAGS if safe_getattr(args, flag, False)]
    if clashing:
        raise ValueError(
            f"--bf16-autocast does not combine with {' / '.join(clashing)}: it runs the float32 model under bf16 "
            "autocast with fairseq's float32 trainer (no loss scaling needed); drop "
            f"{'it' if len(clashing) == 1 else 'them'} (fairseq 0.12's --bf16 means a TPU)"
        )


def bf16_autocast_call(model: torch.nn.Module, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``call(*args, **kwargs)`` under ``torch.autocast(device, torch.bfloat16)`` on the model's
    device, with every floating-point tensor of the result (features, logits, hidden states, the
    fields of ELECTRA's and SpanBERT's outputs) handed back in float32, so that every loss is
    computed in float32. Refuses a model that is not float32 (``--fp16``, ``--bf16``) and an
    autocast already running (``--amp``)."""
    parameter = next(model.parameters())
    device = parameter.device.type
    if parameter.dtype != torch.float32:
        raise ValueError(
            f"--bf16-autocast runs a float32 model under bf16 autocast, but the model's weights are "
            f"{parameter.dtype}: do not combine it with --fp16, --memory-efficient-fp16, --bf16 or "
            "--memory-efficient-bf16"
        )
    if torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) != torch.bfloat16:
        raise ValueError("--bf16-autocast does not combine with --amp (fairseq's float16 autocast)")
    with torch.autocast(device, dtype=torch.bfloat16):
        output = call(*args, **kwargs)
    return to_float32(output)


def to_float32(value: Any) -> Any:
    """``value`` with every floating-point tensor in it cast to float32: tensors, and tensors in
    tuples, lists, dicts and dataclasses, at any depth.

    >>> to_float32((torch.ones(2, dtype=torch.bfloat16), {"inner_states": [torch.zeros(1, dtype=torch.half)]}))
    (tensor([1., 1.]), {'inner_states': [tensor([0.])]})
    """
    if isinstance(value, torch.Tensor):
        return value.float() if value.is_floating_point() and value.dtype != torch.float32 else value
    if isinstance(value, dict):
        return {key: to_float32(item) for key, item in value.items()}
    if isinstance(value, list):
        return [to_float32(item) for item in value]
    if isinstance(value, tuple):
        items = [to_float32(item) for item in value]
        return type(value)(*items) if hasattr(value, "_fields") else tuple(items)  # named tuples too
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: to_float32(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **fields)
    return value


def architecture(family: Family, size: str) -> Callable[[Any], None]:
    """The architecture function of ``family``'s preset ``size``: every model option the command
    line left unset takes the preset's value (and the family's plugin-only defaults for it)."""
    preset = family.preset(size)
    defaults = {FAIRSEQ_NAMES[f.name]: getattr(preset, f.name) for f in _plugin_fields() if f.name != FROM_THE_TASK}
    defaults.update(family.architecture_defaults.get(size, {}))

    def set_defaults(args: Any) -> None:
        for option, default in defaults.items():
            setattr(args, option, safe_getattr(args, option, default))
        refuse_mixed_precision(args)  # fairseq-train parses every option before calling this

    set_defaults.__doc__ = f"{family.name} {size}: {preset.encoder_layers} layers, {preset.encoder_embed_dim} wide."
    return set_defaults


def register_architectures() -> dict[str, tuple[str, Callable[[Any], None]]]:
    """Register ``<family>_ext_<size>`` for every family's architecture sizes with fairseq.
    Returns ``{architecture: (model, function)}``. Called once, when the plugin is imported
    (after every model it names is registered)."""
    registered = {}
    for family in families():
        for name, size in family.architectures().items():
            function = architecture(family, size)
            register_model_architecture(family.fairseq_model, name)(function)
            registered[name] = (family.fairseq_model, function)
    return registered


def describe_mismatch(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor], limit: int = 4) -> str:
    """What keeps ``found`` (a checkpoint's upgraded state) from loading into a model whose state
    is ``expected``: each tensor of another shape with both shapes, then missing and extra names.

    >>> describe_mismatch({"w": torch.zeros(2, 3), "b": torch.zeros(2)}, {"w": torch.zeros(4, 3), "x": torch.zeros(1)})
    'w: (4, 3) in the checkpoint, (2, 3) in the model; not in the checkpoint: b; not in the model: x'
    """

    def listed(names: list[str]) -> str:
        return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")

    shapes = [
        f"{key}: {tuple(found[key].shape)} in the checkpoint, {tuple(tensor.shape)} in the model"
        for key, tensor in expected.items()
        if key in found and found[key].shape != tensor.shape
    ]
    parts = shapes[:limit] + ([f"{len(shapes) - limit} more of other shapes"] if len(shapes) > limit else [])
    missing = [key for key in expected if key not in found]
    extra = [key for key in found if key not in expected]
    if missing:
        parts.append(f"not in the checkpoint: {listed(missing)}")
    if extra:
        parts.append(f"not in the model: {listed(extra)}")
    return "; ".join(parts)


def _shape_summary(state: dict[str, torch.Tensor]) -> str:
    """Layers, width and positions read off a state dict in our key names."""
    layers = {key.split(".")[3] for key in state if key.startswith("encoder.sentence_encoder.layers.")}
    embed = state.get("encoder.sentence_encoder.embed_tokens.weight")
    positions = state.get("encoder.sentence_encoder.embed_positions.weight")
    width = "?" if embed is None else str(embed.shape[1])
    vocab = "?" if embed is None else str(embed.shape[0])
    rows = "?" if positions is None else str(positions.shape[0])
    return f"{len(layers)} layers, width {width}, {vocab} tokens, {rows} position rows"
