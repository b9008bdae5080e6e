"""What a server is started with: every option declared once, with its default and meaning.

The command line (``roberta-ext serve``) gives each field a flag (a test checks that none is
missing); :func:`~roberta_ext.serve.create_app` and :func:`~roberta_ext.serve.run` take a
:class:`ServeOptions`. The names follow text-embeddings-inference's
flags where it has the same knob (``max_batch_tokens``, ``max_batch_requests``,
``max_concurrent_requests``, ``max_client_batch_size``, ``auto_truncate``, ``payload_limit``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

__all__ = ["ServeOptions"]


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """How one server runs: where it listens, how it batches, what it refuses.

    >>> ServeOptions(max_batch_tokens=2048).max_batch_tokens
    2048
    >>> ServeOptions(port=0)
    Traceback (most recent call last):
    ...
    ValueError: port must be in 1..65535, got 0
    """

    host: str = "127.0.0.1"
    """Address to listen on: loopback by default; ``0.0.0.0`` for every interface."""
    port: int = 8080
    """TCP port to listen on."""
    model_id: str = "model"
    """The model's name in ``/info`` and in ``/v1/embeddings``' ``model`` (the command line gives MODEL)."""
    max_batch_tokens: int = 4096
    """Padded tokens per forward pass (rows x longest row), as ``embed``'s ``max_tokens``: the
    worker takes queued requests until their tokens reach this, then runs them in
    length-sorted batches of at most this many padded tokens. A longer single input runs alone."""
    max_batch_requests: int | None = None
    """Rows (inputs) per forward pass at most; ``None``: only the token budget limits."""
    max_concurrent_requests: int = 512
    """Requests queued or running at once; one more is answered 429 at once, with ``Retry-After``."""
    max_client_batch_size: int = 32
    """Inputs one request may carry; more is answered 413."""
    auto_truncate: bool = False
    """The default of a request's ``truncate`` (and the rule of ``/v1/embeddings``, which has no
    such field): cut inputs longer than the model takes, instead of answering 413."""
    payload_limit: int = 2_000_000
    """Request body size in bytes at most; a larger body is answered 413 before it is read whole."""
    timeout_s: float = 30.0
    """Seconds a request may wait and run; past it the answer is 504 and its work is dropped.
    Also the time its body may take to arrive (408 after)."""
    threads: int | None = None
    """CPU threads the model worker runs torch with (``torch.set_num_threads``); ``None``: torch's choice."""
    retry_after_s: int = 1
    """What a 429 answer's ``Retry-After`` header says."""
    graceful_shutdown_s: float | None = None
    """On SIGTERM, how long to wait for accepted requests before closing connections (``None``:
    ``timeout_s`` plus a few seconds, so an accepted request is never cut off)."""
    log_level: str = "info"
    """uvicorn's log level (``critical``, ``error``, ``warning``, ``info``, ``debug``, ``trace``)."""
    access_log: bool = False
    """Log every request (uvicorn's access log): off by default, a line per request costs throughput."""

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ValueError(f"port must be in 1..65535, got {self.port}")
        for field in fields(self):
            value = getattr(self, field.name)
            positive = field.name in {
                "max_batch_tokens",
                "max_batch_requests",
                "max_concurrent_requests",
                "max_client_batch_size",
                "payload_limit",
                "timeout_s",
                "threads",
            }
            if positive and value is not None and not value > 0:
                raise ValueError(f"{field.name} must be > 0, got {value}")
        if self.retry_after_s < 0:
            raise ValueError(f"retry_after_s must be >= 0, got {self.retry_after_s}")

    @property
    def shutdown_wait_s(self) -> float:
        """How long SIGTERM waits for accepted requests (:attr:`graceful_shutdown_s`)."""
        return self.timeout_s + 5.0 if self.graceful_shutdown_s is None else self.graceful_shutdown_s
