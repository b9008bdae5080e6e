"""roberta_ext/cli/serve.py: ``roberta-ext serve`` in-process, as a user meets it. Its parser
(options, defaults against :class:`roberta_ext.serve.ServeOptions` and docs/serving.md, help, usage
errors), the refusals made before the model loads, and what reaches the server: ``roberta_ext.serve.run``
and uvicorn's ``run`` (``--workers``) are replaced by recorders, so no server starts (a live server
segfaults in mutmut's forked children; tests/serve/test_command.py runs real ones in subprocesses).
The model is a 1-layer RoBERTa."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest
import uvicorn

import roberta_ext.serve
from roberta_ext.cli import serve as command
from roberta_ext.serve import ServeOptions
from tests.cli.test_arguments import MODEL_DEFAULTS, helps, ran
from tests.test_hub import make_model_dir

PROG = "roberta-ext serve"
VARIABLE = "ROBERTA_EXT_SERVE_ARGV"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, bpe_files) -> Path:
    return make_model_dir(tmp_path_factory.mktemp("model"), bpe_files, layers=1)


@pytest.fixture
def served(monkeypatch) -> list[tuple[object, ServeOptions]]:
    """The (hub, options) ``roberta_ext.serve.run`` was called with, recorded instead of serving;
    ``served.raises`` (an exception) is raised instead when set."""

    class Calls(list):
        raises: BaseException | None = None

    calls = Calls()

    def record(hub, options: ServeOptions) -> None:
        calls.append((hub, options))
        if calls.raises is not None:
            raise calls.raises

    monkeypatch.setattr(roberta_ext.serve, "run", record)
    return calls


@pytest.fixture
def workers_run(monkeypatch) -> list[tuple[tuple, dict]]:
    """uvicorn's ``run`` as ``--workers`` calls it (arguments, keywords), recorded instead of
    starting the process manager; ``ROBERTA_EXT_SERVE_ARGV`` put back after the test."""
    calls: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(uvicorn, "run", lambda *args, **keywords: calls.append((args, keywords)))
    monkeypatch.delenv(VARIABLE, raising=False)
    return calls


def run(argv: list, capsys) -> tuple[int, str]:
    """The command's exit status and what it wrote on stderr (nothing on stdout)."""
    status, out, err = ran(command.main, argv, capsys)
    assert out == ""
    return status, err


def test_the_options_and_their_defaults():
    """The defaults are ServeOptions' (docs/serving.md: loopback, port 8080; text-embeddings-inference's
    512 concurrent requests, 32 inputs a request, a 2 MB body)."""
    parser = command.build_parser()
    assert parser.prog == PROG
    assert vars(parser.parse_args(["m"])) == {
        "model": "m",
        **MODEL_DEFAULTS,
        "progress": None,
        "host": "127.0.0.1",
        "port": 8080,
        "model_id": None,
        "workers": 1,
        "log_level": "info",
        "access_log": False,
        "max_batch_tokens": 4096,
        "max_batch_requests": None,
        "max_concurrent_requests": 512,
        "max_client_batch_size": 32,
        "auto_truncate": False,
        "payload_limit": 2_000_000,
        "timeout": 30.0,
        "retry_after": 1,
        "graceful_shutdown": None,
    }
    defaults = ServeOptions()
    assert (defaults.host, defaults.port, defaults.max_batch_tokens, defaults.timeout_s) == (
        "127.0.0.1",
        8080,
        4096,
        30,
    )
    assert command.serve_options(parser.parse_args(["m"])) == ServeOptions(model_id="m")
    given = vars(
        parser.parse_args(
            "m --host 0.0.0.0 --port 1 --model-id mine --workers 3 --log-level trace --access-log --max-batch-tokens 7 "
            "--max-batch-requests 2 --max-concurrent-requests 5 --max-client-batch-size 4 --auto-truncate "
            "--payload-limit 100 --timeout 0.5 --retry-after 0 --graceful-shutdown 0.25".split()
        )
    )
    assert {name: given[name] for name in list(given)[13:]} == {
        "host": "0.0.0.0",
        "port": 1,
        "model_id": "mine",
        "workers": 3,
        "log_level": "trace",
        "access_log": True,
        "max_batch_tokens": 7,
        "max_batch_requests": 2,
        "max_concurrent_requests": 5,
        "max_client_batch_size": 4,
        "auto_truncate": True,
        "payload_limit": 100,
        "timeout": 0.5,
        "retry_after": 0,
        "graceful_shutdown": 0.25,
    }
    for level in ("critical", "error", "warning", "info", "debug", "trace"):
        assert parser.parse_args(["m", "--log-level", level]).log_level == level


def test_the_help_says_what_each_option_does(capsys):
    parser = command.build_parser()
    assert parser.description == (
        "Serve a model over HTTP with dynamic batching: POST /embed, /v1/embeddings (OpenAI), /predict, /fill_mask, "
        "/tokenize, /decode; GET /health, /info, /metrics (Prometheus), /openapi.json. Request and response shapes "
        "follow text-embeddings-inference. SIGTERM or Ctrl-C stop accepting, answer every accepted request, and exit."
    )
    assert parser.epilog == (
        "example: roberta-ext serve my-model --port 8080; then curl localhost:8080/embed -H 'Content-Type: "
        'application/json\' -d \'{"inputs": "Hello world!"}\' (docs/serving.md)'
    )
    options = helps(parser)
    listening = ("--host", "--port", "--model-id", "--workers", "--log-level", "--access-log")
    assert {name: options[name] for name in listening} == {
        "--host": "address to bind (default: 127.0.0.1, loopback)",
        "--port": "default: 8080",
        "--model-id": "the model's name in /info and /v1/embeddings' answers (default: MODEL)",
        "--workers": "server processes on the one port, each with its own copy of the model (default: 1; with N "
        "processes on N cores, give --threads 1)",
        "--log-level": "default: info",
        "--access-log": "log every request (costs throughput)",
    }
    batching = ("--max-batch-tokens", "--max-batch-requests", "--max-concurrent-requests", "--max-client-batch-size")
    assert {name: options[name] for name in batching} == {
        "--max-batch-tokens": "padded tokens (rows x longest row) per forward pass; a longer input runs alone "
        "(default: 4096)",
        "--max-batch-requests": "inputs per forward pass at most (default: only the token budget limits)",
        "--max-concurrent-requests": "requests queued or running; one more is answered 429 with Retry-After "
        "(default: 512)",
        "--max-client-batch-size": "inputs per request; more is answered 413 (default: 32)",
    }
    limits = ("--auto-truncate", "--payload-limit", "--timeout", "--retry-after", "--graceful-shutdown")
    assert {name: options[name] for name in limits} == {
        "--auto-truncate": "cut inputs longer than the model takes by default (a request's truncate still decides; "
        "/v1/embeddings has no such field); without it they are answered 413",
        "--payload-limit": "request body size at most (default: 2000000)",
        "--timeout": "a request not answered by then gets 504, one whose body has not arrived 408 (default: 30)",
        "--retry-after": "the Retry-After header of a 429 answer (default: 1)",
        "--graceful-shutdown": "on SIGTERM, wait this long for accepted requests (default: --timeout + 5)",
    }
    groups = {group.title: [action.dest for action in group._group_actions] for group in parser._action_groups}
    assert groups["listening"] == ["host", "port", "model_id", "workers", "log_level", "access_log"]
    assert groups["batching"] == ["max_batch_tokens", "max_batch_requests"]
    assert groups["limits"] == [
        "max_concurrent_requests",
        "max_client_batch_size",
        "auto_truncate",
        "payload_limit",
        "timeout",
        "retry_after",
        "graceful_shutdown",
    ]
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args(["--help"])
    assert exit_.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "--progress" not in text  # hidden: the server draws no bars
    assert (
        "[--threads N] [--host HOST] [--port PORT] [--model-id NAME] [--workers N] "
        "[--log-level {critical,error,warning,info,debug,trace}] [--access-log] [--max-batch-tokens N] "
        "[--max-batch-requests N] [--max-concurrent-requests N] [--max-client-batch-size N] [--auto-truncate] "
        "[--payload-limit BYTES] [--timeout SECONDS] [--retry-after SECONDS] [--graceful-shutdown SECONDS] MODEL"
    ) in text
    assert "--device DEVICE" in text and "default: auto" in text  # the server runs on cuda when there is one


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "the following arguments are required: MODEL"),
        (["m", "--port", "0"], "argument --port: must be >= 1, got 0"),
        (["m", "--port", "http"], "argument --port: invalid positive_int value: 'http'"),
        (["m", "--workers", "0"], "argument --workers: must be >= 1, got 0"),
        (["m", "--max-batch-tokens", "0"], "argument --max-batch-tokens: must be >= 1, got 0"),
        (["m", "--max-batch-requests", "0"], "argument --max-batch-requests: must be >= 1, got 0"),
        (["m", "--max-concurrent-requests", "0"], "argument --max-concurrent-requests: must be >= 1, got 0"),
        (["m", "--max-client-batch-size", "0"], "argument --max-client-batch-size: must be >= 1, got 0"),
        (["m", "--payload-limit", "0"], "argument --payload-limit: must be >= 1, got 0"),
        (["m", "--timeout", "0"], "argument --timeout: must be > 0, got 0.0"),
        (["m", "--timeout", "-1.5"], "argument --timeout: must be > 0, got -1.5"),
        (["m", "--timeout", "soon"], "argument --timeout: invalid _positive_float value: 'soon'"),
        (["m", "--graceful-shutdown", "0"], "argument --graceful-shutdown: must be > 0, got 0.0"),
        (["m", "--retry-after", "0.5"], "argument --retry-after: invalid int value: '0.5'"),
        (
            ["m", "--log-level", "loud"],
            "argument --log-level: invalid choice: 'loud' (choose from critical, error, warning, info, debug, trace)",
        ),
        (["m", "--threads", "0"], "argument --threads: must be >= 1, got 0"),
    ],
    ids=lambda value: "-".join(value) if isinstance(value, list) else None,
)
def test_usage_errors_exit_2_with_argparse_s_line(argv, message, capsys, served, workers_run):
    with pytest.raises(SystemExit) as exit_:
        command.main(argv)
    assert exit_.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    # Python 3.12.8 and later name the choices without quotes
    line = line.replace(
        "'critical', 'error', 'warning', 'info', 'debug', 'trace'", "critical, error, warning, info, debug, trace"
    )
    assert line == f"{PROG}: error: {message}"
    assert served == [] and workers_run == []


def test_a_small_positive_timeout_is_taken():
    parser = command.build_parser()
    assert parser.parse_args(["m", "--timeout", "0.001"]).timeout == 0.001
    assert parser.parse_args(["m", "--graceful-shutdown", "1e-3"]).graceful_shutdown == 0.001


@pytest.mark.parametrize("workers", ["1", "2"])
def test_options_the_server_refuses_are_one_line_before_the_model_loads(workers, tmp_path, capsys, served, workers_run):
    missing = tmp_path / "no-such-model"  # never read: each refusal comes first
    refusals = [
        (["--port", "65536"], "port must be in 1..65535, got 65536"),
        (["--retry-after", "-1"], "retry_after_s must be >= 0, got -1"),
    ]
    for options, message in refusals:
        assert run([missing, "--workers", workers, *options], capsys) == (1, f"{PROG}: error: {message}\n")
    assert served == [] and workers_run == [] and VARIABLE not in os.environ
    # The bounds themselves are taken: what passes goes on to load MODEL (here: missing).
    status, err = run([missing, "--port", "65535", "--retry-after", "0"], capsys)
    assert status == 1 and err.startswith(f"{PROG}: error: cannot load the model from {missing}: "), err
    assert err.count("\n") == 1 and served == []


def test_the_model_is_served_with_the_default_options(model_dir, capsys, served, threads_asked):
    assert run([model_dir], capsys) == (0, "")
    ((hub, options),) = served
    assert hub.model.cfg.encoder_layers == 1  # the model MODEL names, loaded
    assert options == ServeOptions(model_id=str(model_dir))
    assert threads_asked == [None, None]  # torch's threads left alone


def test_every_option_reaches_the_server(model_dir, capsys, served, threads_asked):
    argv = (
        "--host 0.0.0.0 --port 9000 --model-id my-model --log-level warning --access-log --max-batch-tokens 1024 "
        "--max-batch-requests 8 --max-concurrent-requests 64 --max-client-batch-size 4 --auto-truncate "
        "--payload-limit 1000 --timeout 2.5 --retry-after 7 --graceful-shutdown 9 --threads 1"
    )
    assert run([model_dir, *argv.split()], capsys) == (0, "")
    ((hub, options),) = served
    assert options == ServeOptions(
        host="0.0.0.0",
        port=9000,
        model_id="my-model",
        max_batch_tokens=1024,
        max_batch_requests=8,
        max_concurrent_requests=64,
        max_client_batch_size=4,
        auto_truncate=True,
        payload_limit=1000,
        timeout_s=2.5,
        threads=1,
        retry_after_s=7,
        graceful_shutdown_s=9,
        log_level="warning",
        access_log=True,
    )
    unchanged = [
        field.name
        for field in dataclasses.fields(ServeOptions)
        if getattr(options, field.name) == getattr(ServeOptions(), field.name)
    ]
    assert unchanged == [], "a server option without a flag (or the flag's value equals its default here)"
    assert threads_asked == [1, None]  # set for the run, then given back


def test_progress_is_accepted_and_said_to_do_nothing(model_dir, capsys, served):
    note = f"{PROG}: note: --progress does nothing here (the server draws no progress bars; it logs)\n"
    assert run([model_dir, "--progress"], capsys) == (0, note)
    assert run([model_dir, "--no-progress"], capsys) == (0, note.replace("--progress", "--no-progress", 1))
    assert len(served) == 2


def test_a_server_that_cannot_start_or_is_interrupted_is_one_line(model_dir, capsys, served):
    served.raises = RuntimeError("the server could not start on 127.0.0.1:8080")
    assert run([model_dir], capsys) == (1, f"{PROG}: error: the server could not start on 127.0.0.1:8080\n")
    served.raises = KeyboardInterrupt()
    assert run([model_dir], capsys) == (130, f"\n{PROG}: interrupted; the server stopped\n")


def test_a_model_that_cannot_be_loaded_is_named(tmp_path, capsys, served):
    missing = tmp_path / "nothing-here"
    status, err = run([missing], capsys)
    assert status == 1 and err.startswith(f"{PROG}: error: cannot load the model from {missing}: ")
    assert err.count("\n") == 1 and served == []


def test_workers_hand_the_arguments_to_uvicorn_s_process_manager(tmp_path, capsys, served, workers_run, threads_asked):
    """The parent loads no model (MODEL is missing here): each worker process loads its own."""
    missing = tmp_path / "no-such-model"
    argv = [str(missing), "--workers", "2", "--threads", "1"]
    assert run(argv, capsys) == (0, "")
    assert workers_run == [
        (
            ("roberta_ext.cli.serve:app_from_environment",),
            dict(
                factory=True,
                workers=2,
                host="127.0.0.1",
                port=8080,
                log_level="info",
                access_log=False,
                timeout_graceful_shutdown=35,  # --timeout + 5
            ),
        )
    ]
    assert json.loads(os.environ[VARIABLE]) == argv and served == []
    assert threads_asked == [1, None]
    workers_run.clear()
    argv = f"{missing} --workers 3 --host 0.0.0.0 --port 9000 --log-level debug --access-log --graceful-shutdown 2.5"
    assert run(argv.split(), capsys) == (0, "")
    ((_, keywords),) = workers_run
    assert keywords == dict(
        factory=True,
        workers=3,
        host="0.0.0.0",
        port=9000,
        log_level="debug",
        access_log=True,
        timeout_graceful_shutdown=3,  # whole seconds, rounded up
    )
    assert json.loads(os.environ[VARIABLE]) == argv.split()
    workers_run.clear()
    assert run([missing, "--workers", "2", "--timeout", "2.2"], capsys) == (0, "")
    assert workers_run[0][1]["timeout_graceful_shutdown"] == 8  # 7.2 s, rounded up


def test_the_arguments_are_read_from_the_command_line_by_default(tmp_path, capsys, monkeypatch, workers_run):
    missing = str(tmp_path / "no-such-model")
    monkeypatch.setattr(sys, "argv", ["roberta-ext-serve", missing, "--workers", "2", "--port", "9000"])
    assert command.main() == 0
    assert json.loads(os.environ[VARIABLE]) == [missing, "--workers", "2", "--port", "9000"]
    assert workers_run[0][1]["port"] == 9000


def test_a_worker_builds_its_app_from_the_arguments_in_the_environment(model_dir, monkeypatch):
    built: list = []

    def create_app(hub, options):
        built.append((hub, options))
        return "the app"

    monkeypatch.setattr(roberta_ext.serve, "create_app", create_app)
    argv = [str(model_dir), "--workers", "2", "--port", "9000", "--max-batch-tokens", "64", "--threads", "1"]
    monkeypatch.setenv(VARIABLE, json.dumps(argv))
    assert command.app_from_environment() == "the app"
    ((hub, options),) = built
    assert hub.model.cfg.encoder_layers == 1
    assert options == ServeOptions(port=9000, model_id=str(model_dir), max_batch_tokens=64, threads=1)
