"""The exact refusals of :mod:`roberta_ext.checkpoints.safe_load` (each names the file and the
problem), and what comes back for the odd parts of a checkpoint: omegaconf objects with unusual
pickled state, numpy scalars as numpy 2 pickles them, tensors saved on a GPU. Every hostile or
odd file is built here, from pickle opcodes or by renaming a global in a ``torch.save`` file."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest
import torch

from roberta_ext.checkpoints.safe_load import (
    CheckpointError,
    _Recorded,
    _recorded_class,
    load_checkpoint_file,
    load_torch_file,
)
from tests.conftest import RunsCode

REFUSAL = (
    "refusing to load {path!r}: it asks to import {culprit}, which a {kind} does not need; loading never "
    "executes code from the file, so it imports only tensors and inert types, and nothing from the file was executed"
)


class Placeholder:
    """Pickled by reference as a GLOBAL opcode, then renamed in the file's bytes to the global
    under test; its pickled state is whatever the test gives it."""

    def __init__(self, state=None):
        self.pickled_state = state

    def __reduce__(self):
        return (Placeholder, (), self.pickled_state)


def legacy_bytes(obj) -> bytes:
    """``torch.save`` in the legacy (non-zip) format: pickle protocol 2, globals as text lines."""
    buffer = io.BytesIO()
    torch.save(obj, buffer, _use_new_zipfile_serialization=False)
    return buffer.getvalue()


def with_global(tmp_path, module: str, name: str, state=None, name_in_file: str = "model.pt"):
    """A legacy fairseq checkpoint whose ``cfg`` and ``extra_state`` are an object of ``module.name``."""
    obj = Placeholder(state)
    data = legacy_bytes({"model": {"w": torch.ones(2)}, "cfg": obj, "extra_state": {"x": obj}})
    placeholder = f"c{Placeholder.__module__}\n{Placeholder.__qualname__}\n".encode()
    assert placeholder in data
    path = tmp_path / name_in_file
    path.write_bytes(data.replace(placeholder, f"c{module}\n{name}\n".encode()))
    return path


def exactly(message: str) -> str:
    return f"^{re.escape(message)}$"


# ----------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(
    ("module", "name", "culprit"),
    [
        ("os", "system", "os.system"),
        ("os", "system.", "os.system"),  # the sentence's full stop is not part of the name
        ("evil", "RUNX", "evil.RUNX"),
        ("evil", "run\tnow", "evil.run\tnow"),
        ("evil", "run Unsupported global: GLOBAL os.system", "evil.run"),  # torch's marker in the name
        ("evil", "xUnsupported global: GLOBAL y", "evil.xUnsupported"),
    ],
    ids=["os.system", "trailing-dot", "ends-in-X", "tab", "GLOBAL-in-name", "GLOBAL-glued"],
)
def test_a_refused_global_is_named_in_the_full_message(tmp_path, module, name, culprit):
    path = with_global(tmp_path, module, name)
    expected = REFUSAL.format(path=str(path), culprit=culprit, kind="fairseq checkpoint")
    with pytest.raises(CheckpointError, match=exactly(expected)):
        load_checkpoint_file(path)


def test_load_torch_file_calls_the_file_a_pytorch_weights_file_by_default(tmp_path):
    path = tmp_path / "weights.bin"
    marker = tmp_path / "pwned"
    torch.save({"w": torch.ones(1), "x": RunsCode(str(marker))}, path)
    culprit = RunsCode.__reduce__(RunsCode(""))[0]
    culprit = f"{culprit.__module__}.{culprit.__name__}"
    expected = REFUSAL.format(path=str(path), culprit=culprit, kind="PyTorch weights file")
    with pytest.raises(CheckpointError, match=exactly(expected)):
        load_torch_file(path)
    assert not marker.exists()


def test_an_environment_that_turns_off_torchs_default_does_not_make_loading_unsafe(tmp_path, monkeypatch):
    """``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` turns off torch's restricted unpickler wherever
    ``weights_only`` is not passed; the loader passes it, so the file is still refused."""
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pt"
    torch.save({"model": {}, "args": RunsCode(str(marker))}, path)
    with pytest.raises(CheckpointError, match=r"^refusing to load '.*evil\.pt': it asks to import "):
        load_checkpoint_file(path)
    assert not marker.exists()


# ----------------------------------------------------------------------------- damaged files
def test_an_empty_file_is_called_empty(tmp_path):
    path = tmp_path / "empty.pt"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match=exactly(f"checkpoint file {str(path)!r} is empty")):
        load_checkpoint_file(path)


def test_a_one_byte_file_is_not_called_empty(tmp_path):
    path = tmp_path / "one.pt"
    path.write_bytes(b"x")
    with pytest.raises(CheckpointError, match=rf"^{re.escape(repr(str(path)))} is not a readable PyTorch checkpoint "):
        load_checkpoint_file(path)


def test_a_pickle_that_is_not_a_checkpoint_is_unreadable_not_refused(tmp_path):
    """An unpickling error that is about no global is reported as an unreadable file, with the
    first line of torch's message."""
    path = tmp_path / "zeros.pt"
    path.write_bytes(b"\x00" * 100)
    with pytest.raises(
        CheckpointError,
        match=rf"^{re.escape(repr(str(path)))} is not a readable PyTorch checkpoint \(Weights only load failed\. .*\)$",
    ):
        load_checkpoint_file(path)


def test_a_text_file_is_not_a_pytorch_checkpoint(tmp_path):
    path = tmp_path / "notes.pt"
    path.write_bytes(b"hello\n")
    expected = f"{str(path)!r} is not a PyTorch checkpoint (KeyError: 101)"
    with pytest.raises(CheckpointError, match=exactly(expected)):
        load_checkpoint_file(path)


@pytest.mark.parametrize(
    ("cut", "detail"),
    [(2, "EOFError: no detail"), (10, "EOFError: no detail"), (1, "IndexError: index out of range")],
)
def test_a_legacy_checkpoint_cut_short_is_called_truncated(tmp_path, cut, detail):
    path = tmp_path / "model.pt"
    path.write_bytes(legacy_bytes({"model": {"w": torch.ones(2)}})[:cut])
    expected = f"{str(path)!r} is truncated or damaged ({detail})"
    with pytest.raises(CheckpointError, match=exactly(expected)):
        load_checkpoint_file(path)


@pytest.mark.parametrize("inside", [3, 8, 15])
def test_a_legacy_checkpoint_cut_inside_a_globals_name_is_called_truncated(tmp_path, inside):
    # Cut inside "torch._utils\n_rebuild_tensor_v2\n", the unpickler reads a partial name: that is
    # a truncated file, not one asking to import "torch._utils._rebuil".
    path = tmp_path / "model.pt"
    data = legacy_bytes({"model": {"w": torch.ones(2)}})
    cut = data.index(b"_rebuild_tensor_v2\n") + inside
    path.write_bytes(data[:cut])
    name = "torch._utils." + data[cut - inside : cut - 1].decode()  # the unpickler drops the last character read
    expected = f"{str(path)!r} is truncated or damaged (it ends inside the name of {name!r})"
    with pytest.raises(CheckpointError, match=exactly(expected)):
        load_checkpoint_file(path)


def test_a_zip_checkpoint_cut_short_is_called_truncated(tmp_path):
    path = tmp_path / "model.pt"
    buffer = io.BytesIO()
    torch.save({"model": {"w": torch.ones(2)}}, buffer)
    path.write_bytes(buffer.getvalue()[:100])
    with pytest.raises(
        CheckpointError, match=rf"^{re.escape(repr(str(path)))} is truncated or damaged \(RuntimeError: "
    ):
        load_checkpoint_file(path)


def test_the_keys_found_are_listed_up_to_eight(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save({f"k{i}": i for i in range(10)}, path)
    found = [f"k{i}" for i in range(8)]
    expected = f"{str(path)!r} is not a fairseq checkpoint: expected a dict with a 'model' state dict, found {found}"
    with pytest.raises(CheckpointError, match=exactly(expected)):
        load_checkpoint_file(path)


# ----------------------------------------------------------------------------- what loads
def test_tensors_saved_on_a_gpu_load_onto_the_cpu(tmp_path):
    data = legacy_bytes({"model": {"w": torch.arange(3.0)}})
    cpu = b"X\x03\x00\x00\x00cpu"  # the storage's location, a BINUNICODE string
    assert data.count(cpu) == 1
    path = tmp_path / "model.pt"
    path.write_bytes(data.replace(cpu, b"X\x06\x00\x00\x00cuda:0"))
    weight = load_checkpoint_file(path)["model"]["w"]
    assert weight.device == torch.device("cpu")
    assert torch.equal(weight, torch.arange(3.0))


@pytest.mark.parametrize("core", ["core", "_core"])
def test_numpy_scalars_load_as_numpy_1_and_2_pickle_them(tmp_path, core):
    data = legacy_bytes({"model": {}, "extra_state": {"best": np.float64(1.5), "steps": np.int64(7)}})
    numpy_1 = b"cnumpy.core.multiarray\nscalar\n"
    assert numpy_1 in data
    path = tmp_path / "model.pt"
    path.write_bytes(data.replace(numpy_1, f"cnumpy.{core}.multiarray\nscalar\n".encode()))
    extra = load_checkpoint_file(path)["extra_state"]
    assert extra == {"best": 1.5, "steps": 7}
    assert type(extra["steps"]) is np.int64


def test_numpy_scalars_load_under_numpy_2s_module_names(tmp_path, monkeypatch):
    """With numpy 2, the scalar constructors are looked up in ``numpy._core``."""
    monkeypatch.setattr(np, "__version__", "2.0.0")
    path = tmp_path / "model.pt"
    torch.save({"model": {}, "extra_state": {"best": np.float64(1.5)}}, path)
    assert load_checkpoint_file(path)["extra_state"] == {"best": 1.5}


NODE = ("omegaconf.nodes", "AnyNode")
METADATA = ("omegaconf.base", "Metadata")


@pytest.mark.parametrize(
    ("where", "state", "plain", "recorded"),
    [
        # (dict_state, slot_state), as pickle's protocol 2 gives for a class with __slots__
        (NODE, ({"_val": 3}, {"_metadata": None}), 3, {"_val": 3, "_metadata": None}),
        (NODE, ({"_metadata": None}, {"_val": 4}), 4, {"_val": 4, "_metadata": None}),
        (NODE, (None, {"_val": 5}), 5, {"_val": 5}),
        (NODE, ({"_val": 6}, None), 6, {"_val": 6}),
        (METADATA, ({"a": 1}, {"b": [np.int64(2)]}), {"a": 1, "b": [2]}, {"a": 1, "b": [np.int64(2)]}),
        # a plain dict state of two keys is not a (dict, slots) pair
        (METADATA, {"key": "k", "_private": 1}, {"key": "k"}, {"key": "k", "_private": 1}),
        (METADATA, {"_flags": {}, "ref_type": [np.int64(1)]}, {"ref_type": [1]}, None),
        # a state that is no dict is kept under "_value", which to_plain leaves out
        (METADATA, 7, {}, {"_value": 7}),
        (METADATA, [1, 2], {}, {"_value": [1, 2]}),
    ],
    ids=["slots-val", "dict-val", "no-dict", "no-slots", "merged", "two-keys", "private", "int", "list"],
)
def test_omegaconf_objects_with_odd_pickled_state(tmp_path, where, state, plain, recorded):
    path = with_global(tmp_path, *where, state=state)
    loaded = load_checkpoint_file(path)
    assert loaded["cfg"] == plain
    stand_in = loaded["extra_state"]["x"]
    assert isinstance(stand_in, _Recorded)
    assert (type(stand_in).__module__, type(stand_in).__name__) == where
    if recorded is not None:
        assert stand_in.state == recorded


def test_stand_ins_are_named_as_the_omegaconf_classes_they_replace():
    stand_in = _recorded_class("omegaconf.nodes.AnyNode")
    assert issubclass(stand_in, _Recorded)
    assert (stand_in.__module__, stand_in.__name__, stand_in.__qualname__) == ("omegaconf.nodes", "AnyNode", "AnyNode")
    assert stand_in(1, 2).state == {}
