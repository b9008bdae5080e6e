"""An opt-in compiled inference path: ``torch.compile`` over a few bucketed shapes.

Small batches on a GPU are bound by kernel launches, not arithmetic (an 8 x 128 batch of a base
model ran at 6% of the bf16 matmul rate on an H100). CUDA graphs replay a whole forward pass as
one launch, but a graph has fixed shapes; so inputs are padded up to *buckets* — the sequence
length to the next of ``length_buckets`` (powers of two from 16, and ``max_positions``), the
batch to the next of ``batch_buckets`` (1, 2, 4, ..., 64; larger batches go through in chunks of
the largest) — and a few graphs serve every input. The added positions and rows are padding:
padded keys are masked out and every other operation works token by token, so the real tokens'
features equal the eager path's; the outputs are sliced back to the input's shape.

``roberta_ext.from_pretrained(..., compile=True)`` turns it on with the defaults; for options
(backend, mode, buckets) call :func:`compile_model` on the hub or its model. The compiled path
serves the encoder in eval mode (``hub.eval()``, as loaded); in training mode the encoder runs
eagerly. Its outputs carry no gradient. Each bucket is compiled on its first use, which costs
seconds to minutes (see docs/hub-api.md for the figures measured); later calls of that bucket
replay it. On a GPU the default mode is ``"reduce-overhead"`` (CUDA graphs); on the CPU torch's
default mode, whose inductor backend needs a C++ compiler.
"""

from __future__ import annotations

import os
import shutil
import time
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ..modeling.encoder import TransformerEncoder
from ..modeling.model import EncoderModel

DEFAULT_MAX_BATCH = 64
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
"""``torch.compile`` modes that capture CUDA graphs: their outputs live in a memory pool that
the next replay overwrites, so the sliced outputs are copied out."""


def length_buckets_for(max_positions: int, smallest: int = 16) -> tuple[int, ...]:
    """Powers of two from ``smallest`` below ``max_positions``, then ``max_positions`` itself.

    >>> length_buckets_for(512)
    (16, 32, 64, 128, 256, 512)
    >>> length_buckets_for(100)
    (16, 32, 64, 100)
    """
    buckets = []
    size = smallest
    while size < max_positions:
        buckets.append(size)
        size *= 2
    return (*buckets, max_positions)


def batch_buckets_for(largest: int = DEFAULT_MAX_BATCH) -> tuple[int, ...]:
    """1, 2, 4, ... up to ``largest`` (included, power of two or not).

    >>> batch_buckets_for(64)
    (1, 2, 4, 8, 16, 32, 64)
    """
    return length_buckets_for(largest, smallest=1)


def bucket(size: int, buckets: Sequence[int]) -> int | None:
    """The smallest bucket that holds ``size``, or None when none does.

    >>> bucket(100, (16, 32, 64, 128)), bucket(200, (16, 32, 64, 128))
    (128, None)
    """
    return next((b for b in buckets if b >= size), None)


def has_cpp_compiler() -> bool:
    """Whether a C++ compiler is on the ``PATH`` (``$CXX``, ``g++``, ``clang++`` or ``c++``):
    inductor, torch.compile's default backend, builds its CPU kernels with one."""
    names = [os.environ.get("CXX", ""), "g++", "clang++", "c++"]
    return any(shutil.which(name) for name in names if name)


class BucketedForward:
    """``TransformerEncoder.forward`` in eval mode: the compiled :meth:`TransformerEncoder.forward_masked`
    on inputs padded up to their bucket, outputs sliced back. Installed as the encoder's
    ``inference_forward`` by :func:`compile_model`; not a module, so the model's parameters and
    state dict are unchanged.

    ``compile_seconds`` records, per bucketed call signature, the wall time of its first call (the
    compilation, with one run); ``calls`` counts the calls per signature."""

    def __init__(
        self,
        encoder: TransformerEncoder,
        *,
        backend: str | Callable[..., Any] = "inductor",
        mode: str | None = None,
        length_buckets: Sequence[int] | None = None,
        batch_buckets: Sequence[int] | None = None,
    ) -> None:
        self.encoder = encoder
        self.backend = backend
        self.mode = mode
        self.length_buckets = tuple(sorted(length_buckets or length_buckets_for(encoder.max_positions())))
        self.batch_buckets = tuple(sorted(batch_buckets or batch_buckets_for()))
        if self.length_buckets[0] <= 0 or self.batch_buckets[0] <= 0:
            raise ValueError(f"buckets must be positive: lengths {self.length_buckets}, batches {self.batch_buckets}")
        if self.length_buckets[-1] > encoder.max_positions():
            raise ValueError(
                f"length bucket {self.length_buckets[-1]} exceeds the model's {encoder.max_positions()} positions"
            )
        self._compiled: dict[str, Callable[..., tuple[torch.Tensor, list[torch.Tensor]]]] = {}
        self.compile_seconds: dict[tuple[Any, ...], float] = {}
        self.calls: dict[tuple[Any, ...], int] = {}
        # A filler token for the batch's added rows: a row with no real token would attend over
        # nothing (NaN); any real token gives those rows, which are dropped, something to attend to.
        pad = encoder.padding_idx
        self.filler = pad + 1 if pad + 1 < encoder.embed_tokens.num_embeddings else pad - 1

    def mode_for(self, device: torch.device) -> str | None:
        """The ``torch.compile`` mode on ``device``: the one given, else CUDA graphs on a GPU and
        torch's default elsewhere."""
        if self.mode is not None:
            return self.mode
        return "reduce-overhead" if device.type == "cuda" else None

    def compiled(self, device: torch.device) -> Callable[..., tuple[torch.Tensor, list[torch.Tensor]]]:
        """The compiled ``forward_masked`` for ``device`` (compiled lazily: one graph per shape)."""
        key = device.type
        if key not in self._compiled:
            if self.backend == "inductor" and key == "cpu" and not has_cpp_compiler():
                raise RuntimeError(
                    "compiled inference on the CPU: torch.compile's inductor backend builds C++ kernels, and no C++ "
                    "compiler was found (looked for $CXX, g++, clang++, c++ on the PATH). Install one (apt-get "
                    "install g++), or compile with backend='aot_eager' (no speed-up), or load without compile=True"
                )
            self._compiled[key] = torch.compile(
                own_code(self.encoder.forward_masked),
                backend=self.backend,
                mode=self.mode_for(device),
                fullgraph=True,  # one graph per shape: a graph break would split the CUDA graph
                dynamic=False,  # a graph per bucket, never a symbolic shape
            )
        return self._compiled[key]

    def __call__(
        self, tokens: torch.Tensor, return_all_hiddens: bool = False, segment_labels: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        batch, length = tokens.shape
        length_bucket = bucket(length, self.length_buckets)
        if length_bucket is None or batch == 0:  # longer than any bucket: the eager path (and its errors)
            return self.encoder.forward_eager(tokens, return_all_hiddens, segment_labels)
        largest = self.batch_buckets[-1]
        if batch > largest:  # in chunks of the largest bucket
            parts = [
                self(
                    tokens[start : start + largest],
                    return_all_hiddens,
                    None if segment_labels is None else segment_labels[start : start + largest],
                )
                for start in range(0, batch, largest)
            ]
            hiddens = [torch.cat(layer) for layer in zip(*(p[1] for p in parts))]
            return torch.cat([p[0] for p in parts]), hiddens
        batch_bucket = bucket(batch, self.batch_buckets)
        assert batch_bucket is not None
        padded = tokens.new_full((batch_bucket, length_bucket), self.encoder.padding_idx)  # (B', T')
        padded[:batch, :length] = tokens
        padded[batch:, 0] = self.filler
        segments = None
        if segment_labels is not None:
            segments = segment_labels.new_zeros(batch_bucket, length_bucket)
            segments[:batch, :length] = segment_labels
        return self._run(padded, return_all_hiddens, segments, batch, length)

    def _run(
        self,
        padded: torch.Tensor,
        return_all_hiddens: bool,
        segments: torch.Tensor | None,
        batch: int,
        length: int,
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        device = padded.device
        graphs = device.type == "cuda" and self.mode_for(device) in CUDA_GRAPH_MODES
        signature = (*padded.shape, return_all_hiddens, segments is not None, device.type)
        buckets = len(self.length_buckets) * len(self.batch_buckets)
        start = time.perf_counter()
        # dynamo recompiles per shape, and by default gives up after 8 shapes of one function.
        with torch.no_grad(), torch._dynamo.config.patch(recompile_limit=8 * buckets):
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            features, hiddens = self.compiled(device)(padded, return_all_hiddens, segments)
            features = features[:batch, :length]
            hiddens = [h[:batch, :length] for h in hiddens]
            if graphs:  # the next replay overwrites the graph's outputs
                features, hiddens = features.clone(), [h.clone() for h in hiddens]
        if signature not in self.calls:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            self.compile_seconds[signature] = time.perf_counter() - start
        self.calls[signature] = self.calls.get(signature, 0) + 1
        return features, hiddens


def own_code(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (bound) rebuilt around a copy of its function's code object. dynamo keeps its
    compiled graphs, and counts recompilations against its limit, per code object: without a copy,
    every compiled path of the process (two models, or one model compiled in bf16 and then in
    fp32) would share one cache, and the later ones would hit the limit and fail.

    >>> class Box:
    ...     def get(self):
    ...         return 1
    >>> box = Box()
    >>> copied = own_code(box.get)
    >>> copied(), copied.__func__.__code__ is Box.get.__code__
    (1, False)
    """
    func = method.__func__  # type: ignore[attr-defined]
    code = func.__code__.replace()  # equal, but another object
    fresh = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__, func.__closure__)
    fresh.__kwdefaults__ = func.__kwdefaults__
    fresh.__qualname__ = func.__qualname__
    return types.MethodType(fresh, method.__self__)  # type: ignore[attr-defined]


def _encoder_of(target: nn.Module) -> TransformerEncoder:
    """The :class:`TransformerEncoder` of a hub, a model or the encoder itself."""
    module = getattr(target, "model", target)  # a hub holds its model as .model
    if isinstance(module, TransformerEncoder):
        return module
    if not isinstance(module, EncoderModel):
        kind = type(target).__name__
        raise TypeError(f"compile_model takes a hub, an EncoderModel or a TransformerEncoder, not {kind}")
    return module.transformer


def compile_model(
    target: nn.Module,
    *,
    backend: str | Callable[..., Any] = "inductor",
    mode: str | None = None,
    length_buckets: Sequence[int] | None = None,
    batch_buckets: Sequence[int] | None = None,
) -> BucketedForward:
    """Serve ``target``'s encoder (a hub, an :class:`~roberta_ext.modeling.EncoderModel` or a
    :class:`~roberta_ext.modeling.TransformerEncoder`) in eval mode through ``torch.compile``
    over bucketed shapes (see the module's docstring). ``backend`` and ``mode`` are
    ``torch.compile``'s (default mode: ``"reduce-overhead"``, CUDA graphs, on a GPU; torch's
    default on the CPU); ``length_buckets`` and ``batch_buckets`` the padded shapes (default:
    :func:`length_buckets_for` the model's positions, :func:`batch_buckets_for`). Returns the
    installed :class:`BucketedForward`; :func:`uncompile_model` removes it.

    >>> from roberta_ext.families import preset
    >>> from roberta_ext.modeling import EncoderModel
    >>> model = EncoderModel(preset("tiny")).eval()
    >>> tokens = torch.tensor([[0, 5, 6, 2], [0, 7, 2, 1]])
    >>> eager = model.features(tokens).last_hidden_state
    >>> compiled = compile_model(model, backend="eager", length_buckets=[8, 16], batch_buckets=[4])
    >>> torch.allclose(model.features(tokens).last_hidden_state[0], eager[0], atol=1e-6)
    True
    >>> list(compiled.calls)    # (batch, length) bucket, return_all_hiddens, segments, device
    [(4, 8, False, False, 'cpu')]
    >>> uncompile_model(model)
    """
    encoder = _encoder_of(target)
    path = BucketedForward(
        encoder, backend=backend, mode=mode, length_buckets=length_buckets, batch_buckets=batch_buckets
    )
    encoder.inference_forward = path
    return path


def uncompile_model(target: nn.Module) -> None:
    """Back to the eager path for ``target``'s encoder (see :func:`compile_model`)."""
    _encoder_of(target).inference_forward = None


__all__ = [
    "BucketedForward",
    "batch_buckets_for",
    "bucket",
    "compile_model",
    "has_cpp_compiler",
    "length_buckets_for",
    "own_code",
    "uncompile_model",
]
