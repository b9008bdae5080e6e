"""``roberta-ext serve MODEL``: an HTTP server over one model (:mod:`roberta_ext.serve`): the model
loaded with the same arguments as every command (:func:`.arguments.load_model`), then served
with dynamic batching until SIGTERM or Ctrl-C, which answer every accepted request first.

``--workers N`` runs N server processes on one port (uvicorn's workers, each loading the model
from the same arguments, passed to them in the environment as ``ROBERTA_EXT_SERVE_ARGV``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Sequence
from typing import Any

from ..serve import ServeOptions
from .arguments import add_model_arguments, add_progress_argument, load_model, positive_int
from .running import CommandError, run_command

__all__ = ["ARGV_VARIABLE", "app_from_environment", "build_parser", "main", "serve_options"]

PROG = "roberta-ext serve"
ARGV_VARIABLE = "ROBERTA_EXT_SERVE_ARGV"
"""Where ``--workers`` puts the command's arguments (a JSON list) for its worker processes."""
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
DEFAULTS = ServeOptions()


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Serve a model over HTTP with dynamic batching: POST /embed, /v1/embeddings (OpenAI), /predict, "
            "/fill_mask, /tokenize, /decode; GET /health, /info, /metrics (Prometheus), /openapi.json. Request "
            "and response shapes follow text-embeddings-inference. SIGTERM or Ctrl-C stop accepting, answer "
            "every accepted request, and exit."
        ),
        epilog="example: roberta-ext serve my-model --port 8080; then curl localhost:8080/embed -H "
        "'Content-Type: application/json' -d '{\"inputs\": \"Hello world!\"}' (docs/serving.md)",
    )
    add_model_arguments(parser)
    # Accepted (hidden) so that command lines that gave it still run: the server draws no bars.
    add_progress_argument(parser, ignored="the server draws no progress bars; it logs")
    _add_listening_arguments(parser)
    _add_batching_arguments(parser)
    return parser


def _add_listening_arguments(parser: argparse.ArgumentParser) -> None:
    listen = parser.add_argument_group("listening")
    listen.add_argument("--host", default=DEFAULTS.host, help=f"address to bind (default: {DEFAULTS.host}, loopback)")
    listen.add_argument("--port", type=positive_int, default=DEFAULTS.port, help=f"default: {DEFAULTS.port}")
    listen.add_argument(
        "--model-id", metavar="NAME", help="the model's name in /info and /v1/embeddings' answers (default: MODEL)"
    )
    listen.add_argument(
        "--workers",
        type=positive_int,
        default=1,
        metavar="N",
        help="server processes on the one port, each with its own copy of the model (default: 1; with N "
        "processes on N cores, give --threads 1)",
    )
    listen.add_argument(
        "--log-level", choices=LOG_LEVELS, default=DEFAULTS.log_level, help=f"default: {DEFAULTS.log_level}"
    )
    listen.add_argument("--access-log", action="store_true", help="log every request (costs throughput)")


def _add_batching_arguments(parser: argparse.ArgumentParser) -> None:
    batching = parser.add_argument_group("batching")
    batching.add_argument(
        "--max-batch-tokens",
        type=positive_int,
        default=DEFAULTS.max_batch_tokens,
        metavar="N",
        help="padded tokens (rows x longest row) per forward pass; a longer input runs alone "
        f"(default: {DEFAULTS.max_batch_tokens})",
    )
    batching.add_argument(
        "--max-batch-requests",
        type=positive_int,
        metavar="N",
        help="inputs per forward pass at most (default: only the token budget limits)",
    )
    limits = parser.add_argument_group("limits")
    limits.add_argument(
        "--max-concurrent-requests",
        type=positive_int,
        default=DEFAULTS.max_concurrent_requests,
        metavar="N",
        help="requests queued or running; one more is answered 429 with Retry-After "
        f"(default: {DEFAULTS.max_concurrent_requests})",
    )
    limits.add_argument(
        "--max-client-batch-size",
        type=positive_int,
        default=DEFAULTS.max_client_batch_size,
        metavar="N",
        help=f"inputs per request; more is answered 413 (default: {DEFAULTS.max_client_batch_size})",
    )
    limits.add_argument(
        "--auto-truncate",
        action="store_true",
        help="cut inputs longer than the model takes by default (a request's truncate still decides; "
        "/v1/embeddings has no such field); without it they are answered 413",
    )
    limits.add_argument(
        "--payload-limit",
        type=positive_int,
        default=DEFAULTS.payload_limit,
        metavar="BYTES",
        help=f"request body size at most (default: {DEFAULTS.payload_limit})",
    )
    limits.add_argument(
        "--timeout",
        type=_positive_float,
        default=DEFAULTS.timeout_s,
        metavar="SECONDS",
        help=f"a request not answered by then gets 504, one whose body has not arrived 408 "
        f"(default: {DEFAULTS.timeout_s:g})",
    )
    limits.add_argument(
        "--retry-after",
        type=int,
        default=DEFAULTS.retry_after_s,
        metavar="SECONDS",
        help=f"the Retry-After header of a 429 answer (default: {DEFAULTS.retry_after_s})",
    )
    limits.add_argument(
        "--graceful-shutdown",
        type=_positive_float,
        metavar="SECONDS",
        help="on SIGTERM, wait this long for accepted requests (default: --timeout + 5)",
    )


def serve_options(args: argparse.Namespace) -> ServeOptions:
    """The :class:`~roberta_ext.serve.ServeOptions` the parsed arguments say."""
    try:
        return ServeOptions(
            host=args.host,
            port=args.port,
            model_id=args.model_id or args.model,
            max_batch_tokens=args.max_batch_tokens,
            max_batch_requests=args.max_batch_requests,
            max_concurrent_requests=args.max_concurrent_requests,
            max_client_batch_size=args.max_client_batch_size,
            auto_truncate=args.auto_truncate,
            payload_limit=args.payload_limit,
            timeout_s=args.timeout,
            threads=args.threads,
            retry_after_s=args.retry_after,
            graceful_shutdown_s=args.graceful_shutdown,
            log_level=args.log_level,
            access_log=args.access_log,
        )
    except ValueError as error:
        raise CommandError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    """``roberta-ext serve``: serve a model until SIGTERM or Ctrl-C.

    >>> main(["my-model", "--port", "8080"])        # doctest: +SKIP
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    return run_command(PROG, lambda: _serve(args, argv), interrupted="the server stopped", threads=args.threads)


def _serve(args: argparse.Namespace, argv: list[str]) -> int:
    options = serve_options(args)
    if args.workers > 1:
        return _serve_workers(args, argv, options)
    from ..serve import run

    hub = load_model(args)
    try:
        run(hub, options)
    except RuntimeError as error:
        raise CommandError(str(error)) from None
    return 0


def _serve_workers(args: argparse.Namespace, argv: list[str], options: ServeOptions) -> int:
    """``--workers N``: uvicorn's process manager, each worker building the app from the same arguments."""
    import uvicorn

    os.environ[ARGV_VARIABLE] = json.dumps(argv)
    uvicorn.run(
        f"{__name__}:app_from_environment",
        factory=True,
        workers=args.workers,
        host=options.host,
        port=options.port,
        log_level=options.log_level,
        access_log=options.access_log,
        timeout_graceful_shutdown=math.ceil(options.shutdown_wait_s),
    )
    return 0


def app_from_environment() -> Any:
    """The app of one ``--workers`` process: the model loaded from the arguments in
    ``ROBERTA_EXT_SERVE_ARGV``, as ``roberta-ext serve`` got them."""
    from ..serve import create_app

    argv = json.loads(os.environ[ARGV_VARIABLE])
    args = build_parser().parse_args(argv)
    return create_app(load_model(args), serve_options(args))
