"""Let fairseq 0.12 read its own checkpoints under torch 2.13, without unsafe loading.

torch >= 2.6 loads with ``weights_only=True`` by default, and fairseq's
``checkpoint_utils.load_checkpoint_to_cpu`` calls plain ``torch.load``. Checkpoints of
argparse-configured models (fairseq's own ``roberta``, the 2019 release files) hold an
``argparse.Namespace`` in ``args`` or ``cfg["model"]``, fairseq 0.10 files hold omegaconf
containers, and training state may hold numpy scalars: that allowlist rejects all of them, so
resuming, ``--restore-file``, validation and ``from_pretrained`` fail on such files. (The
dataclass-configured ``roberta_ext`` model writes a plain-dict config.)

The fix keeps torch's restricted unpickler and widens its allowlist — only while fairseq's
loader runs — by the same inert globals our own loader admits (see
:mod:`roberta_ext.checkpoints.safe_load`), plus omegaconf's real classes, since fairseq needs
real configs back. ``weights_only`` is never switched off.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch

from ..checkpoints.safe_load import plain_safe_globals

_PATCHED_ATTR = "_roberta_ext_safe_load"


def _omegaconf_globals() -> list[Any]:
    from omegaconf import DictConfig, ListConfig, base, nodes

    node_types = [getattr(nodes, n) for n in dir(nodes) if n.endswith("Node") and isinstance(getattr(nodes, n), type)]
    return [DictConfig, ListConfig, base.ContainerMetadata, base.Metadata, *node_types]


def fairseq_safe_globals() -> list[Any]:
    """What a fairseq checkpoint may contain besides tensors and builtin containers."""
    return [*plain_safe_globals(), *_omegaconf_globals()]


def _with_safe_globals(load: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(load)
    def safe_load(*args: Any, **kwargs: Any) -> Any:
        with torch.serialization.safe_globals(fairseq_safe_globals()):
            return load(*args, **kwargs)

    setattr(safe_load, _PATCHED_ATTR, True)
    return safe_load


def install() -> None:
    """Wrap fairseq's checkpoint loader (idempotent). Called when the plugin is imported."""
    from fairseq import checkpoint_utils

    if not getattr(checkpoint_utils.load_checkpoint_to_cpu, _PATCHED_ATTR, False):
        checkpoint_utils.load_checkpoint_to_cpu = _with_safe_globals(checkpoint_utils.load_checkpoint_to_cpu)
