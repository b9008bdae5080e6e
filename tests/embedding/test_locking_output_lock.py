"""One writer per output (:mod:`roberta_ext.embedding.locking`), on the lock alone: what the lock
file holds and when it is there, the refusal and its message for every kind of holder, waiting
(and waiting across a holder that deletes the file as it lets go), a lock never inherited by a
child process, and which temporaries :func:`remove_stale_temporaries` removes. The command's own
use of the lock is tested in test_command.py."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import stat
import threading
import time
from pathlib import Path

import pytest

from roberta_ext.atomic import AtomicFiles
from roberta_ext.embedding.locking import OutputBusy, lock_path, output_lock, remove_stale_temporaries
from roberta_ext.errors import RobertaExtError


def me() -> dict[str, object]:
    """What this process writes into a lock file it holds (asked at test time: mutmut forks)."""
    return {"pid": os.getpid(), "host": socket.gethostname()}


def busy_message(holder: str, output: Path) -> str:
    return f"another run ({holder}) is writing {output}; run with --wait to wait for it to finish"


def test_lock_path_is_a_hidden_sibling():
    assert lock_path(Path("out/emb.npy")) == Path("out/.emb.npy.lock")
    assert lock_path(Path("emb.shard-0-of-2.safetensors")) == Path(".emb.shard-0-of-2.safetensors.lock")


def test_the_lock_file_names_the_holder_while_held_and_is_gone_after(tmp_path):
    output = tmp_path / "new" / "folder" / "emb.npy"
    with output_lock(output) as held:
        assert held == tmp_path / "new" / "folder" / ".emb.npy.lock"
        assert json.loads(held.read_text("utf-8")) == me()
        assert sorted(p.name for p in held.parent.iterdir()) == [".emb.npy.lock"]
    assert not held.exists()
    assert held.parent.is_dir()


def test_the_lock_file_gets_the_permissions_of_a_new_file(tmp_path):
    umask = os.umask(0o022)
    try:
        with output_lock(tmp_path / "emb.npy") as held:
            assert stat.S_IMODE(held.stat().st_mode) == 0o644
    finally:
        os.umask(umask)


def test_a_lock_file_left_by_a_killed_run_is_taken_over_and_rewritten(tmp_path):
    output = tmp_path / "emb.npy"
    leftover = json.dumps({"pid": 99999999, "host": "a-much-longer-host-name-than-this-one.example.org"})
    lock_path(output).write_text(leftover, "utf-8")
    with output_lock(output) as held:
        assert held.read_text("utf-8") == json.dumps(me())
    assert not held.exists()


def test_a_second_lock_is_refused_naming_the_holder_and_the_output(tmp_path):
    output = tmp_path / "emb.npy"
    with output_lock(output):
        with pytest.raises(OutputBusy) as caught:
            with output_lock(output):
                pytest.fail("locked twice")
        assert isinstance(caught.value, RobertaExtError)  # the command line reports it in one line
        assert caught.value.holder == me()
        assert str(caught.value) == busy_message(f"process {os.getpid()} on host {socket.gethostname()}", output)
        assert json.loads(lock_path(output).read_text("utf-8")) == me()  # the refused one left it alone
    # Different outputs (a shard's) lock different files.
    with output_lock(output), output_lock(tmp_path / "emb.shard-0-of-2.npy"):
        pass


def hold_raw(path: Path, content: bytes) -> int:
    """Lock ``path`` as a holder that wrote ``content`` (nothing, or not our JSON) would."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(fd, content)
    return fd


@pytest.mark.parametrize(
    ("content", "holder", "described"),
    [
        (b"", {}, "a process that did not write its id"),
        (b"[1, 2]", {}, "a process that did not write its id"),
        (b'{"pid": 4', {}, "a process that did not write its id"),
        (b"\xff\xfe", {}, "a process that did not write its id"),
        (b'{"host": "h"}', {"host": "h"}, "a process that did not write its id"),
        (b'{"pid": 12}', {"pid": 12}, "process 12 on host unknown"),
        (b'{"pid": 12, "host": "gpu-7"}', {"pid": 12, "host": "gpu-7"}, "process 12 on host gpu-7"),
    ],
    ids=["empty", "a-list", "half", "not-utf8", "no-pid", "no-host", "both"],
)
def test_the_refusal_describes_what_the_holder_wrote(tmp_path, content, holder, described):
    output = tmp_path / "emb.npy"
    fd = hold_raw(lock_path(output), content)
    try:
        with pytest.raises(OutputBusy) as caught:
            with output_lock(output):
                pass
        assert caught.value.holder == holder
        assert str(caught.value) == busy_message(described, output)
    finally:
        os.close(fd)
    with output_lock(output):  # free again once the holder closes it
        pass


def test_a_holder_that_writes_its_id_late_is_still_named(tmp_path):
    """The holder writes its id just after locking: the refusal gives it a moment to appear."""
    output = tmp_path / "emb.npy"
    fd = hold_raw(lock_path(output), b"")
    timer = threading.Timer(0.05, lambda: os.pwrite(fd, b'{"pid": 5, "host": "late"}', 0))
    timer.start()
    try:
        with pytest.raises(OutputBusy) as caught:
            with output_lock(output):
                pass
        assert caught.value.holder == {"pid": 5, "host": "late"}
    finally:
        timer.join()
        os.close(fd)


def hold_in_thread(output: Path, release: threading.Event, log: list[str]) -> threading.Thread:
    """A thread that takes ``output``'s lock, logs it, and lets go when ``release`` is set."""
    locked = threading.Event()

    def run() -> None:
        with output_lock(output):
            log.append("held")
            locked.set()
            release.wait(10)
            log.append("released")

    thread = threading.Thread(target=run)
    thread.start()
    assert locked.wait(10)
    return thread


@pytest.mark.parametrize("wait", [True, "callable"])
def test_wait_blocks_until_the_holder_lets_go(tmp_path, wait):
    output = tmp_path / "emb.npy"
    release, log, said = threading.Event(), [], []
    thread = hold_in_thread(output, release, log)
    threading.Timer(0.1, release.set).start()
    with output_lock(output, wait=said.append if wait == "callable" else True) as held:
        log.append("mine")
        assert json.loads(held.read_text("utf-8")) == me()
    thread.join()
    assert log == ["held", "released", "mine"]
    if wait == "callable":
        holder = f"process {os.getpid()} on host {socket.gethostname()}"
        assert said == [f"another run ({holder}) is writing {output}; waiting for it to finish"]
    assert not held.exists()


def test_waiting_on_a_file_the_holder_deleted_locks_the_one_there_now(tmp_path):
    """The holder deletes its lock file as it lets go: a run that waited on that file must not
    think it holds the output, or a newcomer creating a new file would hold it too."""
    output = tmp_path / "emb.npy"
    release, log = threading.Event(), []
    holder = hold_in_thread(output, release, log)
    waiter_has_it, waiter_done = threading.Event(), threading.Event()

    def wait_for_it() -> None:
        with output_lock(output, wait=True):
            log.append("waiter")
            waiter_has_it.set()
            waiter_done.wait(10)

    waiter = threading.Thread(target=wait_for_it)
    waiter.start()
    time.sleep(0.1)  # the waiter blocks on the holder's file
    release.set()
    holder.join()
    try:
        assert waiter_has_it.wait(10)
        assert log == ["held", "released", "waiter"]
        assert json.loads(lock_path(output).read_text("utf-8")) == me()
        with pytest.raises(OutputBusy):
            with output_lock(output):
                pass
    finally:
        waiter_done.set()
        waiter.join()
    assert not lock_path(output).exists()


def test_an_error_in_the_block_lets_go_and_passes_through(tmp_path):
    output = tmp_path / "emb.npy"
    with pytest.raises(KeyError, match="boom"):
        with output_lock(output):
            raise KeyError("boom")
    assert not lock_path(output).exists()
    with output_lock(output):
        pass


def test_a_lock_file_that_is_no_longer_ours_is_left_in_place(tmp_path):
    output = tmp_path / "emb.npy"
    with output_lock(output) as held:
        held.unlink()
        held.write_text("someone else's", "utf-8")
    assert held.read_text("utf-8") == "someone else's"


def test_a_child_process_does_not_inherit_the_lock(tmp_path):
    """A process started while the lock is held (``posix_spawn`` keeps every inheritable
    descriptor) does not hold it after the parent lets go."""
    output = tmp_path / "emb.npy"
    with output_lock(output):
        child = os.posix_spawn("/bin/sleep", ["sleep", "30"], os.environ)
    try:
        with output_lock(output):
            pass
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_remove_stale_temporaries_removes_only_the_outputs_own(tmp_path):
    output = tmp_path / "out.npy"
    killed = AtomicFiles()  # never committed nor closed: as a SIGKILL leaves it
    stale = [killed.temporary(output), killed.temporary(output)]
    others = [killed.temporary(tmp_path / name) for name in ("out.npy.json", "other.npy", "out.shard-0-of-2.npy")]
    others += [tmp_path / ".out.npy.notmine.tmp", tmp_path / ".out.npy.0123456.tmp", tmp_path / "out.npy"]
    for path in [*stale, *others]:
        path.write_bytes(b"half a file")
    folder = tmp_path / ".out.npy.abcdef01.tmp"  # named like one, but a folder
    folder.mkdir()
    link = tmp_path / ".out.npy.0000ffff.tmp"  # named like one, but a link
    link.symlink_to(others[0])
    assert sorted(remove_stale_temporaries(output)) == sorted(stale)
    assert not any(path.exists() for path in stale)
    assert all(path.exists() for path in [*others, folder]) and link.is_symlink()
    assert remove_stale_temporaries(output) == []


def test_remove_stale_temporaries_of_a_missing_folder_is_nothing(tmp_path):
    assert remove_stale_temporaries(tmp_path / "absent" / "out.npy") == []


def test_a_waiting_run_says_so_once_and_keeps_waiting_when_the_lock_changes_hands(tmp_path):
    """The holder lets go (deleting its file) and a newcomer locks a new file before the waiting
    run gets its turn: the waiting run waits for the newcomer too, without saying so again."""
    output = tmp_path / "emb.npy"
    release_first, release_second, log, said = threading.Event(), threading.Event(), [], []
    first = hold_in_thread(output, release_first, log)
    threads = [first]

    def hand_over(message: str) -> None:
        said.append(message)
        release_first.set()
        first.join()  # the first holder deleted its file and let go
        threads.append(hold_in_thread(output, release_second, log))  # a newcomer locks a new file
        threading.Timer(0.1, release_second.set).start()

    with output_lock(output, wait=hand_over):
        log.append("mine")
    for thread in threads:
        thread.join()
    assert log == ["held", "released", "held", "released", "mine"]
    assert len(said) == 1 and said[0].endswith(f"is writing {output}; waiting for it to finish")


def test_a_temporary_that_vanishes_while_removing_is_not_reported(tmp_path, monkeypatch):
    """Listed, then removed by someone else before it is unlinked: no error, not in the list."""
    output = tmp_path / "out.npy"
    killed = AtomicFiles()
    gone, stays = killed.temporary(output), killed.temporary(output)
    gone.write_bytes(b"half")
    stays.write_bytes(b"half")
    listing = os.scandir

    def listed_then_one_removed(path):
        entries = list(listing(path))
        gone.unlink()
        return iter(entries)

    monkeypatch.setattr(os, "scandir", listed_then_one_removed)
    assert remove_stale_temporaries(output) == [stays]
    assert not stays.exists()
