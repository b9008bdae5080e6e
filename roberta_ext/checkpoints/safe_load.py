"""Load fairseq checkpoint files without running code from them.

A fairseq ``model.pt`` is a pickle. Besides tensors it holds ``args`` (an
``argparse.Namespace``, 2019-2020 files) and/or ``cfg`` (omegaconf objects in some
versions, plain dicts in others), and sometimes numpy scalars in its training state.
torch's own ``weights_only=True`` unpickler refuses all of those, and
``weights_only=False`` would execute whatever the file asks for.

We keep torch's restricted unpickler and widen its allowlist by exactly what fairseq
checkpoints contain, and nothing that can execute code:

* ``argparse.Namespace``, ``typing.Any``, and plain types (``dict``, ``int``, ...) — inert;
* numpy's scalar and dtype constructors — inert;
* omegaconf's containers, nodes and metadata — replaced by :class:`_Recorded`, a class
  that only stores the state it is given. omegaconf need not be installed, and its
  ``__setstate__`` (which would run on the real classes) never runs.

Anything else in the file — ``os.system``, ``builtins.eval``, a fairseq class — makes
loading fail with :class:`CheckpointError` naming the file and the offending global.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import pickle
import typing
import zipfile
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError  # defined with the layer; importable from here as it always was


class _Recorded:
    """Stand-in for an omegaconf object: remembers constructor arguments and pickled state,
    has no behaviour, and runs no code of the original class."""

    def __new__(cls, *args: Any, **kwargs: Any) -> _Recorded:
        inst = super().__new__(cls)
        inst.__dict__["_args"] = args
        return inst

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        if isinstance(state, tuple) and len(state) == 2:  # (dict_state, slot_state)
            state = {**(state[0] or {}), **(state[1] or {})}
        self.__dict__["_state"] = state if isinstance(state, dict) else {"_value": state}

    @property
    def state(self) -> dict[str, Any]:
        return self.__dict__.get("_state", {})


def _recorded_class(qualified_name: str) -> type[_Recorded]:
    module, _, name = qualified_name.rpartition(".")
    return type(name, (_Recorded,), {"__module__": module, "__qualname__": name})


_OMEGACONF_CLASSES = [
    "omegaconf.dictconfig.DictConfig",
    "omegaconf.listconfig.ListConfig",
    "omegaconf.base.ContainerMetadata",
    "omegaconf.base.Metadata",
    "omegaconf.nodes.AnyNode",
    "omegaconf.nodes.StringNode",
    "omegaconf.nodes.IntegerNode",
    "omegaconf.nodes.FloatNode",
    "omegaconf.nodes.BooleanNode",
    "omegaconf.nodes.EnumNode",
    "omegaconf.nodes.BytesNode",
    "omegaconf.nodes.PathNode",
    "omegaconf.nodes.InterpolationResultNode",
]
_STAND_INS: dict[str, type[_Recorded]] = {name: _recorded_class(name) for name in _OMEGACONF_CLASSES}


def _numpy_globals() -> list[Any]:
    try:
        import numpy as np
    except ImportError:  # numpy scalars cannot occur in a file we can read without numpy
        return []
    # By name: numpy 2 warns on numpy.core, and numpy 1's stubs do not know numpy._core.
    multiarray = importlib.import_module(
        "numpy.core.multiarray" if int(np.__version__.split(".")[0]) < 2 else "numpy._core.multiarray"
    )
    found: list[Any] = [np.dtype, np.ndarray]
    # numpy 1 pickles these as numpy.core.*, numpy 2 as numpy._core.*: accept both spellings.
    for name in ("scalar", "_reconstruct"):
        found += [(getattr(multiarray, name), f"numpy.{core}.multiarray.{name}") for core in ("core", "_core")]
    dtypes = getattr(np, "dtypes", None)
    if dtypes is not None:
        found += [getattr(dtypes, n) for n in dir(dtypes) if n.endswith("DType")]
    return found


# Plain types omegaconf's metadata refers to (e.g. ``object_type=dict``, ``key_type=Any``).
# Calling one builds an inert value; none can reach code that is not on this list.
_PLAIN_TYPES = [dict, list, tuple, set, int, float, str, bool, bytes, collections.defaultdict]


def plain_safe_globals() -> list[Any]:
    """The inert globals of a fairseq checkpoint other than omegaconf's classes."""
    return [argparse.Namespace, typing.Any, *_PLAIN_TYPES, *_numpy_globals()]


def _safe_globals() -> list[Any]:
    return [*plain_safe_globals(), *((cls, name) for name, cls in _STAND_INS.items())]


def to_plain(obj: Any) -> Any:
    """Turn what :func:`load_checkpoint_file` returns for ``args``/``cfg`` into plain Python:
    Namespaces and omegaconf stand-ins become dicts and lists, leaves stay as they are.

    >>> to_plain(argparse.Namespace(encoder_layers=2, tags=["a"]))
    {'encoder_layers': 2, 'tags': ['a']}
    """
    if isinstance(obj, argparse.Namespace):
        return {k: to_plain(v) for k, v in vars(obj).items()}
    if isinstance(obj, _Recorded):
        state = obj.state
        if "_content" in state:  # DictConfig / ListConfig
            return to_plain(state["_content"])
        if "_val" in state:  # a value node
            return to_plain(state["_val"])
        return {k: to_plain(v) for k, v in state.items() if not k.startswith("_")}
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_plain(v) for v in obj)
    if type(obj).__module__ == "numpy":
        return obj.item() if getattr(obj, "ndim", 0) == 0 else obj.tolist()
    return obj


def load_checkpoint_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a fairseq checkpoint safely onto the CPU.

    Returns the checkpoint dict with ``args`` and ``cfg`` converted to plain dicts (or None).
    Raises :class:`CheckpointError` naming the file for every way the file can be wrong,
    and ``FileNotFoundError`` when there is no file.

    >>> state = load_checkpoint_file("roberta.large/model.pt")  # doctest: +SKIP
    >>> sorted(state)[:3]                                        # doctest: +SKIP
    ['args', 'cfg', 'extra_state']
    """
    state = load_torch_file(path, kind="fairseq checkpoint")
    if not isinstance(state, dict) or "model" not in state or not isinstance(state["model"], dict):
        found = sorted(state)[:8] if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(
            f"{str(path)!r} is not a fairseq checkpoint: expected a dict with a 'model' state dict, found {found}"
        )
    state["args"] = to_plain(state.get("args"))
    state["cfg"] = to_plain(state.get("cfg"))
    return state


def load_torch_file(path: str | os.PathLike[str], *, kind: str = "PyTorch weights file") -> Any:
    """Any ``torch.save`` file (a fairseq checkpoint, a transformers ``pytorch_model.bin``),
    read onto the CPU with torch's restricted unpickler and the inert globals above; errors
    as :func:`load_checkpoint_file`. ``kind`` names what the file should be, for the message
    that refuses a global outside the list.

    >>> load_torch_file("pytorch_model.bin")["embeddings.word_embeddings.weight"].shape  # doctest: +SKIP
    torch.Size([30522, 768])
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint file {str(path)!r} does not exist")
    if path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint file {str(path)!r} is empty")
    try:
        with torch.serialization.safe_globals(_safe_globals()):
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=_is_zip(path))
    except pickle.UnpicklingError as exc:
        message = str(exc)
        if "Unsupported global" in message or "not an allowed global" in message or "GLOBAL" in message:
            culprit = _culprit(message)
            if _ends_inside_global(path, culprit):
                raise CheckpointError(
                    f"{str(path)!r} is truncated or damaged (it ends inside the name of {culprit!r})"
                ) from None
            raise CheckpointError(
                f"refusing to load {str(path)!r}: it asks to import {culprit}, which a {kind} does not need; "
                "loading never executes code from the file, so it imports only tensors and inert types, and "
                "nothing from the file was executed"
            ) from None
        raise CheckpointError(f"{str(path)!r} is not a readable PyTorch checkpoint ({_first_line(message)})") from None
    except (RuntimeError, EOFError, zipfile.BadZipFile, ValueError, OSError, IndexError, KeyError) as exc:
        kind = "truncated or damaged" if _is_zip_prefix(path) else "not a PyTorch checkpoint"
        raise CheckpointError(f"{str(path)!r} is {kind} ({type(exc).__name__}: {_first_line(str(exc))})") from None
    return state


def _is_zip(path: Path) -> bool:
    return zipfile.is_zipfile(path)


def _is_zip_prefix(path: Path) -> bool:
    """True when the file starts like a zip (torch >= 1.6) or legacy pickle checkpoint but
    fails to load — i.e. it was cut short rather than being some other kind of file."""
    with open(path, "rb") as f:
        head = f.read(4)
    return head.startswith(b"PK\x03\x04") or head[:1] == b"\x80"


def _ends_inside_global(path: Path, culprit: str) -> bool:
    """Whether a legacy (pickle) file ends inside the text lines of a GLOBAL opcode (``c`` module
    newline name newline): a file cut there names a partial global, which is not a refusal but a
    truncation. Only the file's last kilobyte is read."""
    if _is_zip(path):
        return False
    module = culprit.rpartition(".")[0]
    if not module:
        return False
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 1024))
        tail = f.read()
    opcode = b"c" + module.encode("utf-8", "replace") + b"\n"
    where = tail.rfind(opcode)
    return where >= 0 and b"\n" not in tail[where + len(opcode) :]


def _culprit(message: str) -> str:
    for line in message.splitlines():
        for marker in ("Unsupported global: GLOBAL ", "GLOBAL "):
            if marker in line:
                return line.split(marker, 1)[1].split(" ")[0].rstrip(".,")
    return "an unknown global"


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "no detail"
