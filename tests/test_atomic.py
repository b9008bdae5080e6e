"""roberta_ext.atomic: atomic files and directories appear whole or not at all.

Each writer is made to fail in the middle (an exception, ``KeyboardInterrupt``) and must leave the
destination as it was — absent, or with its old contents — and no temporary behind.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from roberta_ext import atomic
from roberta_ext.atomic import AtomicFiles, atomic_directory, atomic_write, write_bytes_atomic, write_text_atomic


class Boom(Exception):
    """Raised on purpose in the middle of a write."""


def names(folder: Path) -> list[str]:
    """Everything in ``folder``, hidden temporaries included."""
    return sorted(p.name for p in folder.iterdir())


def umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ---------------------------------------------------------------------------------- atomic_write


def test_atomic_write_text_and_binary(tmp_path):
    with atomic_write(tmp_path / "a.txt") as file:
        file.write("héllo\n")
        assert names(tmp_path) != ["a.txt"]  # still under a temporary name
        assert not (tmp_path / "a.txt").exists()
    with atomic_write(tmp_path / "b.bin", "wb") as file:
        file.write(b"\x00\xff")
    assert (tmp_path / "a.txt").read_bytes() == "héllo\n".encode()
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert names(tmp_path) == ["a.txt", "b.bin"]


def test_atomic_write_temporary_is_a_hidden_sibling(tmp_path):
    with atomic_write(tmp_path / "dict.txt") as file:
        file.write("x")
        (temporary,) = tmp_path.iterdir()
        assert temporary.name.startswith(".dict.txt.") and temporary.name.endswith(".tmp")
    assert names(tmp_path) == ["dict.txt"]


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt, SystemExit])
def test_atomic_write_failure_keeps_the_old_file_and_leaves_nothing(tmp_path, error):
    path = tmp_path / "dict.txt"
    path.write_text("old contents\n")
    with pytest.raises(error):
        with atomic_write(path) as file:
            file.write("new contents that must never be seen half-written\n" * 1000)
            file.flush()
            raise error()
    assert path.read_text() == "old contents\n"
    assert names(tmp_path) == ["dict.txt"]


def test_atomic_write_failure_creates_nothing(tmp_path):
    with pytest.raises(Boom):
        with atomic_write(tmp_path / "new.txt", "wb") as file:
            file.write(b"partial")
            raise Boom
    assert names(tmp_path) == []


def test_atomic_write_creates_parent_folders(tmp_path):
    write_text_atomic(tmp_path / "a" / "b" / "c.txt", "x")
    assert (tmp_path / "a" / "b" / "c.txt").read_text() == "x"


def test_atomic_write_refuses_modes_that_do_not_write_a_whole_file(tmp_path):
    for bad in ("a", "r+", "w+b", "x"):
        with pytest.raises(ValueError, match="mode must be 'w' or 'wb'"):
            with atomic_write(tmp_path / "f", bad):  # type: ignore[arg-type]
                pass
    assert names(tmp_path) == []


def test_atomic_write_onto_a_folder_fails_cleanly(tmp_path):
    (tmp_path / "taken").mkdir()
    with pytest.raises(IsADirectoryError):
        write_text_atomic(tmp_path / "taken", "x")
    assert names(tmp_path) == ["taken"]


def test_new_files_get_opens_permissions_and_replaced_files_keep_theirs(tmp_path):
    """A plain open(path, "w") gives 0o666 minus the umask (not mkstemp's 0o600) and keeps an
    existing file's mode."""
    write_text_atomic(tmp_path / "new.txt", "x")
    assert mode(tmp_path / "new.txt") == 0o666 & ~umask()
    old = tmp_path / "old.txt"
    old.write_text("x")
    old.chmod(0o640)
    write_bytes_atomic(old, b"y")
    assert mode(old) == 0o640 and old.read_bytes() == b"y"


def test_text_options_are_those_of_open(tmp_path):
    write_text_atomic(tmp_path / "crlf.txt", "a\nb\n", newline="\r\n")
    write_text_atomic(tmp_path / "latin.txt", "é", encoding="latin-1")
    assert (tmp_path / "crlf.txt").read_bytes() == b"a\r\nb\r\n"
    assert (tmp_path / "latin.txt").read_bytes() == b"\xe9"


# ---------------------------------------------------------------------------------- AtomicFiles


def test_atomic_files_appear_together_on_commit(tmp_path):
    (tmp_path / "b.txt").write_text("old b")
    with AtomicFiles() as files:
        for name in ("a.txt", "b.txt"):
            files.temporary(tmp_path / name).write_text(f"new {name}")
        assert not (tmp_path / "a.txt").exists() and (tmp_path / "b.txt").read_text() == "old b"
        files.commit()
    assert (tmp_path / "a.txt").read_text() == "new a.txt" and (tmp_path / "b.txt").read_text() == "new b.txt"
    assert names(tmp_path) == ["a.txt", "b.txt"]


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
def test_atomic_files_without_commit_leave_nothing(tmp_path, error):
    (tmp_path / "b.txt").write_text("old b")
    with pytest.raises(error):
        with AtomicFiles() as files:
            files.temporary(tmp_path / "a.txt").write_text("complete")
            files.temporary(tmp_path / "b.txt").write_text("half")
            raise error()
    assert names(tmp_path) == ["b.txt"] and (tmp_path / "b.txt").read_text() == "old b"
    with AtomicFiles() as files:  # leaving the block normally without commit() discards too
        files.temporary(tmp_path / "c.txt")
    assert names(tmp_path) == ["b.txt"]


def test_atomic_files_name_a_missing_output_folder(tmp_path):
    missing = tmp_path / "no" / "such"
    with AtomicFiles() as files, pytest.raises(FileNotFoundError, match="output directory does not exist") as info:
        files.temporary(missing / "out.txt")
    assert info.value.filename == str(missing)
    assert names(tmp_path) == []


# ----------------------------------------------------------------------------- atomic_directory


def test_atomic_directory_appears_whole(tmp_path):
    target = tmp_path / "parent" / "model"
    with atomic_directory(target) as staging:
        assert staging.parent == target.parent and staging.name.startswith(".model.")
        (staging / "config.json").write_text("{}")
        (staging / "sub").mkdir()
        (staging / "sub" / "weights.bin").write_bytes(b"\x01")
        assert not target.exists()
    assert names(target.parent) == ["model"]
    assert names(target) == ["config.json", "sub"] and (target / "sub" / "weights.bin").read_bytes() == b"\x01"
    assert mode(target) == 0o777 & ~umask()  # as os.mkdir makes it, not mkdtemp's 0o700


@pytest.mark.parametrize("error", [Boom, KeyboardInterrupt])
def test_atomic_directory_failure_leaves_nothing(tmp_path, error):
    with pytest.raises(error):
        with atomic_directory(tmp_path / "model") as staging:
            (staging / "config.json").write_text("{}")
            raise error()
    assert names(tmp_path) == []


def test_atomic_directory_refuses_an_existing_target_before_any_work(tmp_path):
    target = tmp_path / "model"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    (tmp_path / "file").write_text("a file")
    for existing in (target, tmp_path / "file"):
        with pytest.raises(FileExistsError, match=f"{str(existing)!r} exists and is not an empty directory"):
            with atomic_directory(existing):
                raise AssertionError("the block must not run")
    assert names(tmp_path) == ["file", "model"] and names(target) == ["keep.txt"]


def test_atomic_directory_fills_an_empty_folder(tmp_path):
    (tmp_path / "model").mkdir()
    with atomic_directory(tmp_path / "model") as staging:
        (staging / "a").write_text("a")
    assert names(tmp_path) == ["model"] and names(tmp_path / "model") == ["a"]


def test_atomic_directory_refuses_a_target_filled_meanwhile(tmp_path):
    target = tmp_path / "model"
    with pytest.raises(FileExistsError, match="refusing to overwrite it"):
        with atomic_directory(target) as staging:
            (staging / "ours").write_text("ours")
            target.mkdir()
            (target / "theirs").write_text("theirs")  # another process finished first
    assert names(tmp_path) == ["model"] and names(target) == ["theirs"]


def test_atomic_directory_overwrite_replaces_the_old_folder(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with atomic_directory(target, overwrite=True) as staging:
        (staging / "new.txt").write_text("new")
        assert names(target) == ["old.txt"]  # untouched until the block succeeds
    assert names(tmp_path) == ["out"] and names(target) == ["new.txt"]
    (tmp_path / "a_file").write_text("a file")
    with atomic_directory(tmp_path / "a_file", overwrite=True) as staging:
        (staging / "x").write_text("x")
    assert names(tmp_path / "a_file") == ["x"]


def test_atomic_directory_overwrite_failure_keeps_the_old_folder(tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "old.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_directory(target, overwrite=True) as staging:
            (staging / "new.txt").write_text("new")
            raise KeyboardInterrupt
    assert names(tmp_path) == ["out"] and (target / "old.txt").read_text() == "old"


# ------------------------------------------------------------------------- temporaries, sync, errors


def test_temporaries_are_told_from_other_files():
    destination = Path("out.npy")
    assert atomic._temporary_name(Path("/data/out.npy")).parent == Path("/data")
    for _ in range(20):
        name = atomic._temporary_name(destination).name
        assert len(name) == len(".out.npy.") + 8 + len(".tmp") and atomic.is_temporary_of(name, destination)
    assert atomic.is_temporary_of(".out.npy.0f3a9c1e.tmp", destination)
    for name in [
        ".out.npy.json.0f3a9c1e.tmp",  # out.npy.json's
        "out.npy.0f3a9c1e.tmp",  # not hidden
        ".out.npy.0f3a9c1e.tmp2",
        ".out.npy.0f3a9c1e",
        ".out.npy.0f3a9c1.tmp",  # 7 hex digits
        ".out.npy.0f3a9c1e0.tmp",  # 9
        ".out.npy.0F3A9C1E.tmp",  # token_hex writes lower case
        ".out.npy.0f3a9c1g.tmp",
        ".out.npy.0f3a9cXX.tmp",
        ".other.0f3a9c1e.tmp",
    ]:
        assert not atomic.is_temporary_of(name, destination), name


def test_temporaries_are_created_exclusively_and_not_inherited(tmp_path):
    destination = tmp_path / "out.txt"
    fd, temporary = atomic._create_temporary_file(destination)
    try:
        assert not os.get_inheritable(fd) and temporary.parent == tmp_path and temporary.read_bytes() == b""
        with pytest.raises(FileExistsError):  # O_EXCL: the same name again is refused, not truncated
            os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_a_taken_temporary_name_is_skipped_and_a_hundred_are_given_up(tmp_path, monkeypatch, kind):
    create = atomic._create_temporary_file if kind == "file" else atomic._create_temporary_directory
    destination = tmp_path / "out"
    (tmp_path / ".out.00000000.tmp").write_text("another's")
    tokens = iter(["00000000", "00000001"])
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda nbytes: next(tokens))
    made = create(destination)
    if kind == "file":
        os.close(made[0])
        made = made[1]
    assert made.name == ".out.00000001.tmp" and (tmp_path / ".out.00000000.tmp").read_text() == "another's"
    asked: list[int] = []
    monkeypatch.setattr(atomic.secrets, "token_hex", lambda nbytes: asked.append(nbytes) or "00000000")
    with pytest.raises(FileExistsError) as refused:
        create(destination)
    assert len(asked) == 100 and set(asked) == {4}
    assert (refused.value.errno, refused.value.strerror, refused.value.filename) == (
        errno.EEXIST,
        "no free temporary name",
        str(destination),
    )


def test_files_are_synced_before_their_rename_and_folders_after(tmp_path, monkeypatch):
    events: list[tuple[str, str]] = []
    opened: list[int] = []
    real_open, real_replace = os.open, os.replace

    def recording_open(path, flags, *args):
        opened.append(flags)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}"))))
    monkeypatch.setattr(os, "replace", lambda a, b: events.append(("rename", str(b))) or real_replace(a, b))
    write_text_atomic(tmp_path / "a.txt", "a")
    temporary_synced, renamed, folder_synced = events
    assert temporary_synced[0] == "fsync" and atomic.is_temporary_of(Path(temporary_synced[1]).name, Path("a.txt"))
    assert renamed == ("rename", str(tmp_path / "a.txt")) and folder_synced == ("fsync", str(tmp_path))
    assert opened and all(flags & os.O_CLOEXEC for flags in opened)  # not inherited by a child forked meanwhile

    events.clear()
    (tmp_path / "elsewhere.txt").write_text("x")
    with atomic_directory(tmp_path / "model") as staging:
        (staging / "sub").mkdir()
        (staging / "sub" / "weights.bin").write_bytes(b"w")
        (staging / "config.json").write_text("{}")
        (staging / "link.txt").symlink_to(tmp_path / "elsewhere.txt")
    synced = set()
    for kind, path in events:
        parts = Path(path).relative_to(tmp_path).parts
        if kind == "fsync":  # inside the staging folder: its parts below it; else "outside" and the parts
            staged = parts and atomic.is_temporary_of(parts[0], Path("model"))
            synced.add(parts[1:] if staged else ("outside", *parts))
    assert synced == {("sub", "weights.bin"), ("config.json",), ("sub",), (), ("outside",)}  # not the symlink's file


def test_a_folder_that_cannot_be_opened_is_not_synced_and_that_is_no_error(tmp_path, monkeypatch):
    real_open = os.open

    def no_folders(path, flags, *args):
        if Path(path).is_dir():
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", no_folders)
    write_text_atomic(tmp_path / "a.txt", "a")
    assert (tmp_path / "a.txt").read_text() == "a"


def test_a_temporary_that_cannot_be_created_is_one_error_naming_the_destination(tmp_path, monkeypatch):
    def refuse(destination):
        raise PermissionError(errno.EACCES, "Permission denied", "the temporary's name")

    monkeypatch.setattr(atomic, "_create_temporary_file", refuse)
    with AtomicFiles() as files, pytest.raises(OSError) as refused:
        files.temporary(tmp_path / "out.txt")
    assert (refused.value.errno, refused.value.strerror, refused.value.filename) == (
        errno.EACCES,
        "cannot write output (Permission denied)",
        str(tmp_path / "out.txt"),
    )
    with AtomicFiles() as files, pytest.raises(FileNotFoundError) as missing:
        files.temporary(tmp_path / "missing" / "out.txt")
    assert (missing.value.errno, missing.value.strerror, missing.value.filename) == (
        errno.ENOENT,
        "output directory does not exist",
        str(tmp_path / "missing"),
    )


def test_temporaries_already_gone_are_no_error(tmp_path):
    with pytest.raises(Boom), AtomicFiles() as files:
        files.temporary(tmp_path / "out.txt").unlink()  # moved away by the writer, say
        raise Boom
    assert names(tmp_path) == []
    atomic._remove(tmp_path / "missing")
    atomic._remove(tmp_path / "missing-folder" / "x")
