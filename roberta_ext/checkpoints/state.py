"""The one strict way a state dict enters a model, for every source (fairseq files,
transformers directories): every tensor used, every parameter filled, every shape checked, the
tied LM output matrix checked against the embeddings, then adopted without a copy.

>>> from roberta_ext.families import preset
>>> from roberta_ext.modeling import RobertaModel
>>> model = RobertaModel(preset("tiny"))
>>> state = dict(model.state_dict())
>>> load_state_strict(RobertaModel(preset("tiny")), state, source="example.pt")
>>> del state["encoder.lm_head.bias"]
>>> load_state_strict(RobertaModel(preset("tiny")), state, source="example.pt")
Traceback (most recent call last):
...
roberta_ext.checkpoints.errors.CheckpointError: 'example.pt' does not match a roberta model:
parameters not in the file ['encoder.lm_head.bias'], tensors of the file nothing takes []
"""

from __future__ import annotations

from collections.abc import Collection, Mapping

import torch
from torch import nn

from ..families import families
from ..modeling import ENCODER_PREFIX, RobertaModel
from .errors import CheckpointError

LM_OUTPUT = "encoder.lm_head.weight"
EMBEDDINGS = ENCODER_PREFIX + "embed_tokens.weight"


def _listed(names: list[str], limit: int = 6) -> str:
    return f"{names[:limit]}{' ...' if len(names) > limit else ''}"


def load_state_strict(
    model: RobertaModel,
    state: dict[str, torch.Tensor],
    *,
    source: str,
    file_names: Mapping[str, str] | None = None,
    unused: Collection[str] = (),
) -> None:
    """Load ``state`` (our key names) into ``model`` — typically built on the meta device —
    strictly, adopting its tensors (``assign=True``: a memory-mapped file is not copied).

    ``file_names`` maps our key to the source's own name for it, so that messages name what the
    user's file calls a tensor; ``unused`` lists tensors of the source that no key of ours took
    (an error too). A tied LM output matrix may be absent from ``state`` or equal to the token
    embeddings; anything else is a :class:`CheckpointError` naming the source and the tensors.
    """
    names = file_names or {}
    tied = not model.cfg.untie_weights
    if tied and EMBEDDINGS in state:
        if LM_OUTPUT in state and not torch.equal(state[LM_OUTPUT], state[EMBEDDINGS]):
            raise CheckpointError(f"{source!r}: the LM head is tied to the embeddings but its weights differ")
        state[LM_OUTPUT] = state[EMBEDDINGS]
    expected = model.state_dict()
    missing = [f"{key} <- {names[key]}" if key in names else key for key in expected if key not in state]
    unexpected = sorted({names.get(key, key) for key in state if key not in expected} | set(unused))
    if missing or unexpected:
        raise CheckpointError(
            f"{source!r} does not match a {model.cfg.family} model: parameters not in the file "
            f"{_listed(missing)}, tensors of the file nothing takes {_listed(unexpected)}"
        )
    for key, tensor in expected.items():
        if tensor.shape != state[key].shape:
            raise CheckpointError(
                f"{source!r}: {names.get(key, key)} has shape {tuple(state[key].shape)}, "
                f"our {key} expects {tuple(tensor.shape)}"
            )
    model.load_state_dict(state, strict=True, assign=True)
    if tied:  # assign=True replaced the shared Parameter by two tensors: tie them again
        model.encoder.lm_head.weight = model.embed_tokens.weight


def pretraining_modules() -> tuple[str, ...]:
    """Top-level modules that only some families' pretraining models have (ELECTRA's
    ``generator``, SpanBERT's ``sbo_head``, ...), as the families declare them."""
    return tuple(dict.fromkeys(module for family in families() for module in family.pretraining_modules))


def drop_pretraining_modules(model: nn.Module, state: dict[str, torch.Tensor], prefix: str = "") -> dict[str, int]:
    """Delete from ``state`` the tensors of pretraining-only modules that ``model`` does not
    have (a pretraining checkpoint loaded for serving or fine-tuning). Returns how many tensors
    of each module were dropped, for the caller to report.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import RobertaModel
    >>> state = {"generator.x": torch.zeros(1), "encoder.y": torch.zeros(1)}
    >>> drop_pretraining_modules(RobertaModel(preset("tiny")), state), sorted(state)
    ({'generator': 1}, ['encoder.y'])
    """
    children = dict(model.named_children())
    dropped = {}
    for module in pretraining_modules():
        if module in children:
            continue
        keys = [key for key in state if key.startswith(f"{prefix}{module}.")]
        for key in keys:
            del state[key]
        if keys:
            dropped[module] = len(keys)
    return dropped
