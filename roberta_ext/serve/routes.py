"""The handlers of every route: each reads its body through its request model
(:meth:`Server.read <roberta_ext.serve.server.Server.read>`), calls the library, and renders the
answer, with text-embeddings-inference's (TEI's) shapes where TEI has the route. The rules an
input must meet are the library's: its length (:meth:`~roberta_ext.inference.inputs.ModelInputs.
encode_within`), its mask (:func:`~roberta_ext.inference.head_outputs.encode_masked`), the head
(:func:`~roberta_ext.inference.predict.choose_head`, through ``/predict``'s model); what they
refuse is answered by its class (:mod:`.errors`), naming the request's field (``inputs[3]``).

>>> await embed(server, request)                                  # doctest: +SKIP
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from starlette.requests import Request
from starlette.responses import Response

from ..inference.head_outputs import HeadError, encode_masked, fill_encoded_mask
from ..tokenizers.registry import kind_of
from .errors import RequestError
from .metrics import CONTENT_TYPE
from .openapi import openapi_description
from .server import JSONAnswer, Server
from .worker import Task

__all__ = [
    "Handler",
    "decode",
    "embed",
    "fill_mask",
    "health",
    "info",
    "openai_embeddings",
    "openapi",
    "predict",
    "prometheus",
    "tokenize",
]

Handler = Callable[[Server, Request], Awaitable[Response]]
"""A route's handler, over the server it serves."""

CUT_WITH_TRUNCATE = "set truncate to cut it"


def _where(name: str, single: bool, i: int) -> str:
    """The field of a request's ``i``-th input: ``inputs``, or ``inputs[i]`` in a list."""
    return name if single else f"{name}[{i}]"


def server_version() -> str:
    try:
        return version("roberta_ext")
    except PackageNotFoundError:
        return "unknown"


# ------------------------------------------------------------------ embeddings


async def embeddings(
    server: Server,
    items: Sequence[Any],
    name: str,
    single: bool,
    *,
    truncate: bool,
    normalize: bool,
    prompt_name: str | None,
    dimensions: int | None,
    hint: str = CUT_WITH_TRUNCATE,
) -> tuple[torch.Tensor, int]:
    """Embeddings ``(N, D)`` of the items of field ``name`` (``dimensions``: the first that many
    values, normalised again when ``normalize``), and the tokens they took. An item longer than
    the model takes is cut when ``truncate``, else refused naming it and ``hint``."""
    embedder = server.embedder(prompt_name, normalize)
    rows = [
        embedder.encode(item, truncate=truncate, where=_where(name, single, i), hint=hint)
        for i, item in enumerate(items)
    ]
    lengths = [len(row) for row in rows]
    vectors = await server.compute(server.embedding_task(embedder), rows, lengths)
    assert isinstance(vectors, torch.Tensor)
    if dimensions is not None and dimensions < vectors.size(1):
        vectors = vectors[:, :dimensions]
        if normalize:
            vectors = F.normalize(vectors, p=2, dim=-1)
    return vectors, sum(lengths)


async def embed(server: Server, request: Request) -> Response:
    """TEI's ``POST /embed``: ``{"inputs": text | [text | [text, text], ...], "normalize": true,
    "truncate": false, "prompt_name": null, "dimensions": null}`` -> ``[[float, ...], ...]``."""
    body = await server.read(request, "/embed")
    single = isinstance(body.inputs, str)
    vectors, _ = await embeddings(
        server,
        [body.inputs] if single else body.inputs,
        "inputs",
        single,
        truncate=body.truncate,
        normalize=body.normalize,
        prompt_name=body.prompt_name,
        dimensions=body.dimensions,
    )
    return JSONAnswer(vectors.contiguous().numpy())


async def openai_embeddings(server: Server, request: Request) -> Response:
    """OpenAI's ``POST /v1/embeddings``: ``{"input": text | [text, ...], "model": ...,
    "encoding_format": "float" | "base64", "dimensions": null}``; normalised vectors, as TEI gives."""
    body = await server.read(request, "/v1/embeddings")
    single = isinstance(body.input, str)
    vectors, tokens = await embeddings(
        server,
        [body.input] if single else body.input,
        "input",
        single,
        truncate=server.options.auto_truncate,  # TEI's rule: OpenAI's API has no truncate field
        normalize=True,
        prompt_name=None,
        dimensions=body.dimensions,
        hint="this route cuts long inputs only when the server runs with --auto-truncate",
    )
    if body.encoding_format == "base64":  # little-endian float32, as OpenAI's clients decode it
        data: list[Any] = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors.numpy()]
    else:
        data = list(vectors.contiguous().numpy())
    return JSONAnswer(
        {
            "object": "list",
            "data": [{"object": "embedding", "embedding": e, "index": i} for i, e in enumerate(data)],
            "model": server.options.model_id,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
    )


# ------------------------------------------------------------------ heads


async def predict(server: Server, request: Request) -> Response:
    """TEI's ``POST /predict``: ``{"inputs": text | [a, b] | [[a], [a, b], ...], "raw_scores":
    false, "truncate": false, "truncation_direction": "right", "head": null}`` -> ``[{"score",
    "label"}, ...]`` sorted by score (a batch: one such list per item). A one-output head
    (regression) gives its value as the score. ``truncate`` cuts as ``/embed`` does: a text
    at its end, a pair its longer side first."""
    body = await server.read(request, "/predict")
    inputs = body.inputs
    single = not (inputs and isinstance(inputs[0], list))  # a text, or one [a] or [a, b]
    items = [inputs] if isinstance(inputs, str) else [inputs] if single else inputs
    rows = [
        server.inputs.encode_within(
            texts, truncate=body.truncate, where=_where("inputs", single, i), hint=CUT_WITH_TRUNCATE
        )
        for i, texts in enumerate(items)
    ]
    logits = await server.compute(server.classify_task(body.head), rows, [len(row) for row in rows])
    assert isinstance(logits, torch.Tensor)
    names = server.class_names(logits.size(1))
    scores = logits if body.raw_scores or logits.size(1) == 1 else logits.softmax(dim=-1)
    answers = []
    for row in scores.float().numpy():  # float32 scalars: written as float32 text, as vectors are
        order = sorted(range(len(row)), key=lambda k: -row[k])
        answers.append([{"score": row[k], "label": names[k]} for k in order])
    return JSONAnswer(answers[0] if single else answers)


async def fill_mask(server: Server, request: Request) -> Response:
    """``POST /fill_mask``: ``{"inputs": text | [text, ...], "top_k": 5}``, each text with one
    mask -> ``[{"score", "token_str", "sequence"}, ...]`` (a list of texts: one list each)."""
    if not server.limits.mask_spellings or server.mask_token is None:
        raise HeadError("this model has no masked-LM head, so it cannot fill masks")
    body = await server.read(request, "/fill_mask")
    single = isinstance(body.inputs, str)
    masked = [
        encode_masked(
            server.inputs,
            text,
            mask=server.mask_token,
            spellings=server.mask_spellings,
            where=_where("inputs", single, i),
        )
        for i, text in enumerate([body.inputs] if single else body.inputs)
    ]
    model, inputs, top_k = server.model, server.inputs, body.top_k
    task = Task(("fill_mask", top_k), lambda batch: [fill_encoded_mask(model, inputs, m, topk=top_k) for m in batch])
    results = await server.compute(task, masked, [len(m.ids) for m in masked])
    answers = [
        # The probability as float32 text, as vectors are written (not its float64 expansion).
        [{"score": np.float32(score), "token_str": token, "sequence": filled} for filled, score, token in result]
        for result in results
    ]
    return JSONAnswer(answers[0] if single else answers)


# ------------------------------------------------------------------ text


async def tokenize(server: Server, request: Request) -> Response:
    """TEI's ``POST /tokenize``: ``{"inputs": text | [text, ...], "add_special_tokens": true,
    "prompt_name": null}`` -> ``[[{"id", "text", "special", "start", "stop"}, ...], ...]``: the
    ids ``/embed`` runs (uncut); ``start``/``stop`` are character offsets into the text
    (``null`` for special tokens and the prompt's)."""
    body = await server.read(request, "/tokenize")
    embedder = server.embedder(body.prompt_name, False)
    special_ids, tokenizer = server.special_ids(), server.inputs.tokenizer
    answers = []
    for text in [body.inputs] if isinstance(body.inputs, str) else body.inputs:
        ids = embedder.encode_whole(text)
        spans = _spans(server, embedder.prompt, embedder.do_lower_case, text, len(ids) - 2)
        tokens = []
        for position, index in enumerate(ids):
            inner = 0 < position < len(ids) - 1
            if not body.add_special_tokens and not inner:
                continue
            start, stop = spans[position - 1] if inner else (None, None)
            special = index in special_ids
            shown = server.dictionary[index] if special else tokenizer.token_text(index)
            tokens.append({"id": index, "text": shown, "special": special, "start": start, "stop": stop})
        answers.append(tokens)
    return JSONAnswer(answers)


def _spans(server: Server, prompt: str, lower: bool, text: str, count: int) -> list[tuple[int | None, int | None]]:
    """Character offsets into ``text`` of the ``count`` tokens between ``<s>`` and ``</s>``;
    ``(None, None)`` where the tokenizer cannot say (a prompt's tokens, lowercasing that
    changed the text's length)."""
    unknown: list[tuple[int | None, int | None]] = [(None, None)] * count
    fed = prompt + text
    if lower:
        from ..tokenizers.normalization import lowercase_per_character

        fed = lowercase_per_character(fed)
    if len(fed) != len(prompt) + len(text):
        return unknown
    try:
        found = kind_of(server.inputs.tokenizer).spans(server.inputs.tokenizer, fed)
    except Exception:  # offsets are a courtesy: the ids are the answer
        return unknown
    if len(found) != count:
        return unknown
    shift = len(prompt)
    return [(start - shift, stop - shift) if start >= shift else (None, None) for start, stop in found]


async def decode(server: Server, request: Request) -> Response:
    """TEI's ``POST /decode``: ``{"ids": [id, ...] | [[id, ...], ...], "skip_special_tokens":
    true}`` -> ``[text, ...]``."""
    body = await server.read(request, "/decode")
    single = not isinstance(body.ids[0], list)
    special_ids, texts = server.special_ids(), []
    for i, row in enumerate([body.ids] if single else body.ids):
        where = _where("ids", single, i)
        pieces: list[str] = []
        run: list[int] = []  # positions of the ordinary ids since the last special one
        for j, index in enumerate(row):
            if index in special_ids:
                if run:
                    pieces.append(_decode_run(server, row, run, where))
                    run = []
                if not body.skip_special_tokens:
                    pieces.append(server.dictionary[index])
            else:
                run.append(j)
        if run:
            pieces.append(_decode_run(server, row, run, where))
        texts.append("".join(pieces))
    return JSONAnswer(texts)


def _decode_run(server: Server, row: Sequence[int], positions: Sequence[int], where: str) -> str:
    """Text of ``row``'s ids at ``positions``. An id that stands for no text (a ``madeupword``
    filler of a GPT-2 ``dict.txt``, which fairseq's ``decode`` refuses too) is answered 422
    naming it, ``ids[i][j]``."""
    tokenizer = server.inputs.tokenizer
    try:
        return tokenizer.decode([row[j] for j in positions])
    except (ValueError, KeyError):
        for j in positions:  # which one: only on failure
            try:
                tokenizer.decode([row[j]])
            except (ValueError, KeyError):
                raise RequestError(
                    422,
                    f"{where}[{j}] is {row[j]}, {server.dictionary[row[j]]!r} in the dictionary, which stands "
                    "for no text: the tokenizer cannot decode it",
                    field=f"{where}[{j}]",
                ) from None
        raise


# ------------------------------------------------------------------ about the server


def info_body(server: Server) -> dict[str, Any]:
    """What ``GET /info`` says: TEI's fields, then the model's own (family, sizes, heads, dtype)."""
    model, options, embedder = server.model, server.options, server.default_embedder
    heads = {name: model.num_classes(name) for name in sorted(model.classification_heads)}
    if heads:
        names = server.class_names(heads[sorted(heads)[0]])
        model_type: dict[str, Any] = {
            "classifier": {
                "id2label": {str(k): name for k, name in enumerate(names)},
                "label2id": {name: k for k, name in enumerate(names)},
            }
        }
    else:
        model_type = {"embedding": {"pooling": ",".join(embedder.pooling)}}
    return {
        "model_id": options.model_id,
        "model_sha": None,
        "model_dtype": model_dtype(server),
        "model_type": model_type,
        "max_concurrent_requests": options.max_concurrent_requests,
        "max_input_length": embedder.max_length,
        "max_batch_tokens": options.max_batch_tokens,
        "max_batch_requests": options.max_batch_requests,
        "max_client_batch_size": options.max_client_batch_size,
        "auto_truncate": options.auto_truncate,
        "tokenization_workers": 1,
        "version": server_version(),
        "family": getattr(model.cfg, "family", "roberta"),
        "hidden_size": model.cfg.encoder_embed_dim,
        "layers": model.cfg.encoder_layers,
        "embedding_dimension": embedder.dimension,
        "pooling": list(embedder.pooling),
        "normalize_by_default": True,
        "prompts": list(server.limits.prompts),
        "max_positions": server.inputs.max_positions,
        "vocab_size": len(server.dictionary),
        "classification_heads": heads,
        "token_heads": {name: model.num_classes(name) for name in sorted(model.token_heads)},
        "masked_lm_head": bool(model.has_lm_head),
        "mask_token": server.mask_token if model.has_lm_head else None,
        "labels": server.label_names(),
        "device": str(model.device),
        "threads": options.threads if options.threads is not None else torch.get_num_threads(),
        "timeout_s": options.timeout_s,
    }


def model_dtype(server: Server) -> str:
    """``int8`` for a model quantized by :func:`~roberta_ext.export.int8.quantize_int8`, else
    its parameters' dtype (``float32``, ``bfloat16``, ...)."""
    from ..export.int8 import Int8Linear, PerTensorInt8Linear

    if any(isinstance(module, Int8Linear | PerTensorInt8Linear) for module in server.model.modules()):
        return "int8"
    return str(server.model.dtype).removeprefix("torch.")


async def info(server: Server, request: Request) -> Response:
    return JSONAnswer(info_body(server))


async def health(server: Server, request: Request) -> Response:
    if not server.worker.alive:
        raise RequestError(503, "the model worker is not running", kind="Unhealthy")
    return JSONAnswer({"status": "ok", "queue_depth": server.worker.queue_depth})


async def prometheus(server: Server, request: Request) -> Response:
    return Response(server.metrics.render(), media_type=CONTENT_TYPE)


async def openapi(server: Server, request: Request) -> Response:
    return JSONAnswer(openapi_description(server.options.model_id, server_version(), server.limits, server.models))
