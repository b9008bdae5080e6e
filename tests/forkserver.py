"""fairseq's console scripts, forked from a process that has imported fairseq already.

A ``fairseq-train`` of the tests' tiny models spends ~10 s of CPU and 0.2 s training: importing
fairseq takes 3.3 s (1.5 s of it scikit-learn, which fairseq's criteria import), the first
optimizer imports ``torch._dynamo`` (2 s), and fairseq's hydra composes its config (1.5 s). The
suite starts a few hundred such processes on 2 cores, and that start-up was most of its time.

A fork server imports all that once per test process; ``fairseq-train``, ``fairseq-preprocess``
and ``fairseq-hydra-train`` then run as small shims (:func:`shim_dir`, first on a test's
``PATH``, or :func:`command` for ``subprocess``) that hand the server their argv, working
folder, environment and standard streams. The server forks a child that becomes the command:
the same entry point (``fairseq_cli.train.cli_main``, ...) the console script calls, in that
folder, with that environment, ``sys.path`` as that process would have it (its ``PYTHONPATH``)
and the shim's streams. The shim forwards the signals it gets (SIGINT, SIGTERM, ...) to the
child and exits as the child did (its status, or death by the same signal); a shim killed
outright takes its child's process group with it. What the command does — every flag, the
plugin's registration by ``--user-dir``, its log, its files, its exit — is the real command's.

``ROBERTA_EXT_TEST_FORKSERVER=0`` turns it off: the shims then run the real console scripts.
The real scripts stay covered: tests/test_forkserver.py runs each beside its shim, and the GLUE
script test, the quickstart and the two-rank training start them as they are.

>>> subprocess.run([command("fairseq-preprocess"), "--help"], capture_output=True).returncode  # doctest: +SKIP
0
"""

from __future__ import annotations

import array
import atexit
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

BIN = Path(sys.executable).parent

TOOLS = {
    "fairseq-train": "fairseq_cli.train",
    "fairseq-preprocess": "fairseq_cli.preprocess",
    "fairseq-hydra-train": "fairseq_cli.hydra_train",
    "fairseq-validate": "fairseq_cli.validate",
    "python": "runpy",
}
"""The console scripts served, and the module whose ``cli_main`` each calls; of ``python``,
only ``python -m examples.X`` is served (fairseq's example scripts, which import fairseq:
``examples.roberta.multiprocessing_bpe_encoder``), running the module as ``__main__`` as
``python -m`` does; anything else runs this environment's Python itself."""

SOCKET_ENV = "ROBERTA_EXT_FORKSERVER"
"""The server's socket, for the shims; unset or unreachable: a shim runs the real command."""

SWITCH_ENV = "ROBERTA_EXT_TEST_FORKSERVER"

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)

_HEADER = struct.Struct("!I")

SHIM = """#!{python} -S
# {tool}, run by the tests' fork server (tests/forkserver.py) when it is up, else the real one.
import array, json, os, signal, socket, struct, sys

REAL = {real!r}
path = os.environ.get({socket_env!r})
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    # Of python, only `python -m examples.X` (fairseq's example scripts, which import fairseq) is served.
    if {tool!r} == "python" and not (sys.argv[1:2] == ["-m"] and sys.argv[2:3] and sys.argv[2].startswith("examples.")):
        raise OSError
    client.connect(path or "")
except OSError:
    os.execv(REAL, [REAL, *sys.argv[1:]])
request = json.dumps({{"tool": {tool!r}, "argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ)}}).encode()
fds = array.array("i", [0, 1, 2])
client.sendmsg([struct.pack("!I", len(request)) + request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
reader = client.makefile("rb")
pid = int(reader.readline())
for number in {forwarded!r}:
    signal.signal(number, lambda signum, frame: os.kill(pid, signum))
line = reader.readline()
status = int(line) if line else 1 << 8
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
sys.exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
"""

_started: dict[str, object] = {}


def enabled() -> bool:
    return os.environ.get(SWITCH_ENV, "1") != "0"


def shim_dir() -> Path:
    """A folder of shims, one per served console script (the server started if it is not);
    put it first on a command's ``PATH``. With the server off, the shims run the real scripts."""
    if "shims" not in _started:
        folder = Path(tempfile.mkdtemp(prefix="roberta-ext-shims-"))
        for tool in TOOLS:
            shim = folder / tool
            shim.write_text(
                SHIM.format(
                    python=sys.executable,
                    tool=tool,
                    real=sys.executable if tool == "python" else str(BIN / tool),
                    socket_env=SOCKET_ENV,
                    forwarded=tuple(int(s) for s in FORWARDED),
                ),
                encoding="utf-8",
            )
            shim.chmod(0o755)
        _started["shims"] = folder
    if enabled():
        start()
    return Path(str(_started["shims"]))


def command(tool: str) -> str:
    """The path to run ``tool`` (``fairseq-train``, ...) by: its shim when ``tool`` is served, else the real script."""
    return str(shim_dir() / tool) if tool in TOOLS else str(BIN / tool)


def start() -> None:
    """Start this process's fork server (once) and point :data:`SOCKET_ENV` at it, in this
    process's environment, which the commands it starts inherit."""
    if "server" in _started:
        return
    path = Path(tempfile.mkdtemp(prefix="roberta-ext-fork-")) / "socket"
    log = open(path.with_name("server.log"), "wb")  # noqa: SIM115 (the server's for its life)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONPATH"}
    server = subprocess.Popen(
        [sys.executable, "-m", "tests.forkserver", str(path)],
        cwd=Path(__file__).resolve().parent.parent,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 120
    while not path.exists():
        if server.poll() is not None or time.monotonic() > deadline:
            server.kill()
            raise RuntimeError(f"the fork server did not start: {path.with_name('server.log').read_text()}")
        time.sleep(0.05)
    _started["server"] = server
    os.environ[SOCKET_ENV] = str(path)

    def stop() -> None:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()

    atexit.register(stop)


# ---------------------------------------------------------------------------------------- the server


WARM = ("fairseq_cli.train", "fairseq_cli.preprocess", "torch._dynamo")
"""What the server imports: fairseq (through its scripts' modules) and what the first optimizer
imports. Not ``fairseq_cli.hydra_train``: the plugin tells ``fairseq-hydra-train`` from
``fairseq-train`` by whether that module is imported (``fairseq_plugin.models.under_hydra``)."""

NEEDS = {
    "fairseq-train": {"fairseq_cli.train"},
    "fairseq-preprocess": {"fairseq_cli.preprocess"},
    "fairseq-hydra-train": {"fairseq_cli.hydra_train", "fairseq_cli.train"},
    "fairseq-validate": {"fairseq_cli.validate"},
    "python": set(),
}
"""The ``fairseq_cli`` modules each script's process holds; a child forgets the others."""


def _warm() -> None:
    """Import what every served command imports before its first update (:data:`WARM`)."""
    import importlib

    for module in WARM:
        importlib.import_module(module)


def _receive(conn: socket.socket) -> tuple[dict, list[int]]:
    data, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(3 * array.array("i").itemsize))
    fds = array.array("i")
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    while len(data) < _HEADER.size or len(data) < _HEADER.size + _HEADER.unpack_from(data)[0]:
        more = conn.recv(1 << 16)
        if not more:
            raise ConnectionError("the shim hung up mid-request")
        data += more
    (size,) = _HEADER.unpack_from(data)
    return json.loads(data[_HEADER.size : _HEADER.size + size]), list(fds)


def _become(request: dict, fds: list[int], base_path: list[str]) -> None:
    """In the forked child: become the command the shim was asked to run; never returns."""
    code: int = 1
    try:
        os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = list(request["argv"])
        python_path = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
        # A script's folder first, as Python puts it; for `python -m`, the working folder.
        sys.path[:] = [request["cwd"] if request["tool"] == "python" else str(BIN), *python_path, *base_path]
        import importlib

        importlib.invalidate_caches()
        for name in [name for name in sys.modules if name.startswith("fairseq_cli.")]:
            if name not in NEEDS[request["tool"]]:  # as if this process had never imported it
                del sys.modules[name]
                vars(sys.modules["fairseq_cli"]).pop(name.rpartition(".")[2], None)
        if request["tool"] == "python":
            import runpy

            module = sys.argv[2]
            sys.argv = [sys.argv[0], *sys.argv[3:]]  # runpy puts the module's path in sys.argv[0]

            def main() -> None:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            main = importlib.import_module(TOOLS[request["tool"]]).cli_main
        try:
            result = main()
            code = result if isinstance(result, int) else 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except KeyboardInterrupt:
            traceback.print_exc()
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        except BaseException:
            traceback.print_exc()
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(code)


def serve(path: str) -> None:
    """Serve shims on the Unix socket ``path`` until the process that started the server ends."""
    _warm()
    base_path = [entry for entry in sys.path if entry and Path(entry).resolve() != Path.cwd().resolve()]
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".binding")
    listener.listen(64)
    os.rename(path + ".binding", path)  # the socket appears only once it takes connections
    parent = os.getppid()
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    sys.stdout.flush()
    sys.stderr.flush()
    while os.getppid() == parent:
        for key, _ in selector.select(timeout=0.05):
            if key.fileobj is listener:
                conn, _ = listener.accept()
                request, fds = _receive(conn)
                pid = os.fork()
                if pid == 0:
                    listener.close()
                    for other in children.values():
                        other.close()
                    conn.close()
                    _become(request, fds, base_path)
                for fd in fds:
                    os.close(fd)
                conn.sendall(b"%d\n" % pid)
                children[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            else:  # a shim's connection is readable only when it closes: the shim is gone
                pid = key.data
                selector.unregister(key.fileobj)
                try:
                    os.killpg(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid)
            try:
                selector.unregister(conn)
            except (KeyError, ValueError):
                pass
            try:
                conn.sendall(b"%d\n" % status)
            except OSError:
                pass
            conn.close()
    for pid in children:
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    serve(sys.argv[1])
