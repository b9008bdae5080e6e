"""Every route's handler answered in the test's own process, through the Starlette app that
``create_app`` builds (httpx's ASGI transport: no socket, no uvicorn, the worker's thread
started by hand): what a client sees — TEI's shapes and statuses, the full error bodies —
against the library's own ``embed``, ``classify`` and ``fill_mask`` on the same inputs. The
live server's tests (``test_routes.py``, ``test_server.py``) cannot run in mutmut's forked
children; these can (with ``OMP_NUM_THREADS=1``, as ``scripts/mutation/run.py`` runs them)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import socket
import time
import types
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import httpx
import numpy as np
import pytest
import torch
from starlette.applications import Starlette

import roberta_ext
from roberta_ext.embedding.pooling import SentenceEmbedding
from roberta_ext.inference.head_outputs import classify
from roberta_ext.inference.inputs import InputTooLong
from roberta_ext.serve import ServeOptions, create_app, routes
from roberta_ext.serve.errors import RequestError
from roberta_ext.serve.metrics import CONTENT_TYPE
from roberta_ext.serve.openapi import openapi_description
from tests.serve.conftest import LABELS

HEAD = "sentence_classification_head"
LONG = "word " * 80  # 81 tokens, more than the served model's 64 positions
CUT = "set truncate to cut it"


@contextlib.contextmanager
def started(served: Any, **options: Any) -> Iterator[Starlette]:
    """The app over ``served`` with its worker running (the lifespan's part that matters here)."""
    app = create_app(served, ServeOptions(log_level="warning", **options))
    app.state.server.worker.start()
    try:
        yield app
    finally:
        app.state.server.worker.stop()


@pytest.fixture(scope="module")
def app(hub) -> Iterator[Starlette]:
    with started(hub, model_id="served-model") as app:
        yield app


@pytest.fixture
def fresh(served_model_dir):
    """A hub of its own, to change (heads, dtype, flags) without touching the module's."""
    return roberta_ext.from_pretrained(str(served_model_dir))


def call(app: Starlette, method: str, path: str, **how: Any) -> httpx.Response:
    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
            return await client.request(method, path, **how)

    return asyncio.run(go())


def post(app: Starlette, path: str, body: Any) -> httpx.Response:
    return call(app, "POST", path, json=body)


def ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    return response.json()


def too_long(hub, texts: tuple[str, ...], where: str, hint: str) -> str:
    """The library's own refusal of ``texts`` (the server answers it as it is)."""
    with pytest.raises(InputTooLong) as refused:
        hub.inputs.encode_within(texts, hub.inputs.max_positions, truncate=False, where=where, hint=hint)
    return str(refused.value)


def f32(value: Any) -> float:
    """A score as a client reads it: the float32 value's shortest text (as TEI writes it)."""
    return float(str(np.float32(value)))


def tensor(rows: Any) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float32)


# ------------------------------------------------------------------------------ /embed


def test_embed_answers_the_librarys_vectors_for_texts_pairs_and_a_single_text(app, hub):
    texts = ["Hello world!", "Hi", ""]
    assert torch.equal(tensor(ok(post(app, "/embed", {"inputs": texts}))), hub.embed(texts, normalize=True))
    one = ok(post(app, "/embed", {"inputs": "Hello world!", "normalize": False}))
    assert torch.equal(tensor(one), hub.embed(["Hello world!"]))  # a single text: still a list of one vector
    pair = ok(post(app, "/embed", {"inputs": [["A question?", "An answer."], "Hi"]}))
    assert torch.equal(tensor(pair), hub.embed([("A question?", "An answer."), "Hi"], normalize=True))


def test_embed_dimensions_keeps_the_first_values_normalised_again_only_when_normalising(app, hub):
    whole = hub.embed(["Hello world!", "Hi"])
    short = tensor(ok(post(app, "/embed", {"inputs": ["Hello world!", "Hi"], "dimensions": 8})))
    unit = hub.embed(["Hello world!", "Hi"], normalize=True)
    assert torch.equal(short, torch.nn.functional.normalize(unit[:, :8], dim=-1))  # TEI's order: cut, normalise
    raw = tensor(ok(post(app, "/embed", {"inputs": ["Hello world!", "Hi"], "dimensions": 8, "normalize": False})))
    assert torch.equal(raw, whole[:, :8])
    every = tensor(ok(post(app, "/embed", {"inputs": ["Hello world!"], "dimensions": 32, "normalize": False})))
    assert torch.equal(every, whole[:1])


def test_embed_refuses_a_long_input_naming_it_and_cuts_it_when_asked(app, hub):
    refused = post(app, "/embed", {"inputs": ["fine", LONG]})
    assert refused.status_code == 413
    message = too_long(hub, (LONG,), "inputs[1]", CUT)
    assert refused.json() == {"error": message, "error_type": "Validation", "field": "inputs[1]"}
    assert message == f"inputs[1] is {len(hub.encode(LONG))} tokens long, more than the maximum of 64 ({CUT})"
    alone = post(app, "/embed", {"inputs": LONG})
    assert alone.status_code == 413 and alone.json()["field"] == "inputs"
    assert alone.json()["error"] == too_long(hub, (LONG,), "inputs", CUT)
    cut = ok(post(app, "/embed", {"inputs": ["fine", LONG], "truncate": True}))
    assert torch.equal(tensor(cut), hub.embed(["fine", LONG], normalize=True))


def test_embed_with_a_prompt_embeds_the_prompted_text(hub):
    served = types.SimpleNamespace(
        model=hub.model, inputs=hub.inputs, sentence_embedding=SentenceEmbedding(prompts={"query": "query: "})
    )
    with started(served) as app:
        prompted = ok(post(app, "/embed", {"inputs": "Hello", "prompt_name": "query", "normalize": False}))
        plain = ok(post(app, "/embed", {"inputs": "Hello", "normalize": False}))
    assert torch.equal(tensor(prompted), hub.embed(["query: Hello"]))
    assert torch.equal(tensor(plain), hub.embed(["Hello"]))


# ------------------------------------------------------------------------------ /v1/embeddings


def test_openai_embeddings_in_openais_shape(app, hub):
    texts = ["Hello world!", "Hi", "A third one."]
    body = ok(post(app, "/v1/embeddings", {"input": texts, "model": "anything"}))
    assert list(body) == ["object", "data", "model", "usage"]
    assert body["object"] == "list" and body["model"] == "served-model"
    assert [list(item) for item in body["data"]] == [["object", "embedding", "index"]] * 3
    assert [(item["object"], item["index"]) for item in body["data"]] == [("embedding", i) for i in range(3)]
    assert torch.equal(tensor([item["embedding"] for item in body["data"]]), hub.embed(texts, normalize=True))
    tokens = sum(len(hub.encode(text)) for text in texts)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    single = ok(post(app, "/v1/embeddings", {"input": "Hi"}))
    assert len(single["data"]) == 1 and single["usage"]["prompt_tokens"] == len(hub.encode("Hi"))
    assert torch.equal(tensor(single["data"][0]["embedding"]), hub.embed(["Hi"], normalize=True)[0])


def test_openai_base64_is_little_endian_float32_and_dimensions_renormalise(app, hub):
    packed = ok(post(app, "/v1/embeddings", {"input": ["Hi", "Hello"], "encoding_format": "base64"}))
    for item, expected in zip(packed["data"], hub.embed(["Hi", "Hello"], normalize=True)):
        assert isinstance(item["embedding"], str)
        decoded = np.frombuffer(base64.b64decode(item["embedding"]), dtype="<f4")
        assert np.array_equal(decoded, expected.numpy())
    short = ok(post(app, "/v1/embeddings", {"input": "Hi", "dimensions": 4}))["data"][0]["embedding"]
    unit = hub.embed(["Hi"], normalize=True)[0, :4]
    assert torch.equal(tensor(short), torch.nn.functional.normalize(unit, dim=-1))


def test_openai_long_inputs_name_the_server_flag_and_auto_truncate_cuts_them(app, hub):
    refused = post(app, "/v1/embeddings", {"input": ["fine", LONG]})
    assert refused.status_code == 413
    hint = "this route cuts long inputs only when the server runs with --auto-truncate"
    assert refused.json() == {
        "error": {
            "message": too_long(hub, (LONG,), "input[1]", hint),
            "type": "Validation",
            "param": "input[1]",
            "code": 413,
        }
    }
    alone = post(app, "/v1/embeddings", {"input": LONG})
    assert alone.json()["error"]["param"] == "input"
    with started(hub, auto_truncate=True) as cutting:
        cut = ok(post(cutting, "/v1/embeddings", {"input": ["fine", LONG]}))
    assert torch.equal(tensor([item["embedding"] for item in cut["data"]]), hub.embed(["fine", LONG], normalize=True))
    assert cut["usage"]["prompt_tokens"] == len(hub.encode("fine")) + hub.inputs.max_positions


# ------------------------------------------------------------------------------ /predict


def probabilities(hub, *texts: str, head: str = HEAD) -> torch.Tensor:
    return classify(hub.model, hub.inputs, head, hub.encode(*texts), return_logits=True)[0].softmax(-1)


def ranked(scores: torch.Tensor, names: list[str]) -> list[dict[str, Any]]:
    """TEI's answer: each class's score and label, highest score first."""
    values = scores.detach().float().numpy()
    return [{"score": f32(values[k]), "label": names[k]} for k in np.argsort(-values, kind="stable")]


def test_predict_answers_label_names_and_softmax_scores_best_first(app, hub):
    single = ok(post(app, "/predict", {"inputs": "Great movie!"}))
    assert single == ranked(probabilities(hub, "Great movie!"), LABELS)
    pair = ok(post(app, "/predict", {"inputs": ["A premise.", "A hypothesis."]}))
    assert pair == ranked(probabilities(hub, "A premise.", "A hypothesis."), LABELS)
    one = ok(post(app, "/predict", {"inputs": ["A premise."]}))  # a one-item pair is a text
    assert one == ranked(probabilities(hub, "A premise."), LABELS)


def test_predict_a_batch_answers_a_list_per_item_and_raw_scores_are_logits(app, hub):
    batch = ok(post(app, "/predict", {"inputs": [["one"], ["two", "three"]], "raw_scores": True}))
    assert len(batch) == 2
    for answer, texts in zip(batch, [("one",), ("two", "three")]):
        logits = classify(hub.model, hub.inputs, HEAD, hub.encode(*texts), return_logits=True)[0]
        assert [p["label"] for p in answer] == [p["label"] for p in ranked(logits, LABELS)]
        served = torch.tensor([p["score"] for p in sorted(answer, key=lambda p: LABELS.index(p["label"]))])
        torch.testing.assert_close(served, logits.detach(), atol=1e-6, rtol=1e-6)  # batched: float32 rounding
        assert served.sum() != pytest.approx(1.0)
    soft = ok(post(app, "/predict", {"inputs": [["one"], ["two", "three"]]}))
    assert [sum(p["score"] for p in answer) for answer in soft] == [pytest.approx(1.0)] * 2


def test_predict_refuses_a_long_input_naming_it_and_cuts_it_when_asked(app, hub):
    refused = post(app, "/predict", {"inputs": [["x"], [LONG]]})
    assert refused.status_code == 413
    assert refused.json() == {
        "error": too_long(hub, (LONG,), "inputs[1]", CUT),
        "error_type": "Validation",
        "field": "inputs[1]",
    }
    alone = post(app, "/predict", {"inputs": LONG})
    assert alone.status_code == 413 and alone.json()["field"] == "inputs"
    cut = ok(post(app, "/predict", {"inputs": LONG, "truncate": True}))
    tokens = hub.inputs.encode_truncated((LONG,), hub.inputs.max_positions)
    logits = classify(hub.model, hub.inputs, HEAD, torch.tensor(tokens), return_logits=True)[0]
    assert cut == ranked(logits.softmax(-1), LABELS)


def test_a_one_output_head_gives_its_value_as_the_score_and_a_head_without_labels_label_k(fresh):
    fresh.model.register_classification_head("score", num_classes=1)
    fresh.model.register_classification_head("three", num_classes=3)
    fresh.model.eval()
    with started(fresh) as app:
        value = ok(post(app, "/predict", {"inputs": "Great movie!", "head": "score"}))
        three = ok(post(app, "/predict", {"inputs": "Great movie!", "head": "three"}))
    logit = classify(fresh.model, fresh.inputs, "score", fresh.encode("Great movie!"), return_logits=True)[0]
    assert value == [{"score": f32(logit.item()), "label": "negative"}]
    assert three == ranked(probabilities(fresh, "Great movie!", head="three"), ["LABEL_0", "LABEL_1", "LABEL_2"])


# ------------------------------------------------------------------------------ /fill_mask


def test_fill_mask_answers_the_librarys_fills(app, hub):
    filled = ok(post(app, "/fill_mask", {"inputs": "Hello <mask>!", "top_k": 3}))
    assert filled == [
        {"score": f32(score), "token_str": token, "sequence": sequence}
        for sequence, score, token in hub.fill_mask("Hello <mask>!", topk=3)
    ]
    both = ok(post(app, "/fill_mask", {"inputs": ["Hello <mask>!", "<mask> world"], "top_k": 2}))
    assert both == [
        [{"score": f32(s), "token_str": t, "sequence": q} for q, s, t in hub.fill_mask(text, topk=2)]
        for text in ("Hello <mask>!", "<mask> world")
    ]
    assert len(ok(post(app, "/fill_mask", {"inputs": "<mask>"}))) == 5  # TEI's default top_k


def test_fill_mask_names_the_text_without_a_mask(app):
    refused = post(app, "/fill_mask", {"inputs": ["Hello <mask>!", "no mask here"]})
    assert refused.status_code == 422 and refused.json()["field"] == "inputs[1]"


@pytest.mark.parametrize(("has_lm_head", "mask_token"), [(False, "<mask>"), (True, None)])
def test_fill_mask_without_a_masked_lm_head_or_mask_refuses_every_request(fresh, has_lm_head, mask_token):
    fresh.model.has_lm_head = has_lm_head
    fresh.mask_token = mask_token
    fresh.mask_spellings = ("<mask>",)
    with started(fresh) as app:
        refused = post(app, "/fill_mask", {"inputs": "Hello <mask>!"})
    assert refused.status_code == 422
    assert refused.json() == {
        "error": "this model has no masked-LM head, so it cannot fill masks",
        "error_type": "Validation",
    }


# ------------------------------------------------------------------------------ /tokenize and /decode


def test_tokenize_answers_the_ids_embed_runs_with_their_texts_and_offsets(app, hub):
    text = "Hello world! Café"
    ids = hub.encode(text).tolist()
    tokens = ok(post(app, "/tokenize", {"inputs": text}))
    assert len(tokens) == 1
    pieces = [hub.inputs.tokenizer.token_text(i) for i in ids[1:-1]]
    offsets, start = [], 0
    for piece in pieces:
        offsets.append((start, start + len(piece)))
        start += len(piece)
    assert "".join(pieces) == text
    assert tokens[0] == [
        {"id": 0, "text": "<s>", "special": True, "start": None, "stop": None},
        *(
            {"id": i, "text": piece, "special": False, "start": a, "stop": b}
            for i, piece, (a, b) in zip(ids[1:-1], pieces, offsets)
        ),
        {"id": 2, "text": "</s>", "special": True, "start": None, "stop": None},
    ]
    bare = ok(post(app, "/tokenize", {"inputs": [text, "Hi"], "add_special_tokens": False}))
    assert bare[0] == tokens[0][1:-1]
    assert [t["id"] for t in bare[1]] == hub.encode("Hi").tolist()[1:-1]


def test_decode_takes_the_mask_for_a_special_token(app, hub):
    mask, hello = hub.dictionary.index("<mask>"), hub.encode("Hello").tolist()[1]
    assert ok(post(app, "/decode", {"ids": [0, hello, mask, 2]})) == ["Hello"]
    assert ok(post(app, "/decode", {"ids": [0, hello, mask, 2], "skip_special_tokens": False})) == [
        "<s>Hello<mask></s>"
    ]


def test_tokenize_offsets_skip_the_prompt_and_lowercasing_that_changes_lengths(hub):
    settings = SentenceEmbedding(prompts={"query": "query: "}, do_lower_case=True)
    served = types.SimpleNamespace(model=hub.model, inputs=hub.inputs, sentence_embedding=settings)
    with started(served) as app:
        prompted = ok(post(app, "/tokenize", {"inputs": "Hello World", "prompt_name": "query"}))[0]
        plain = ok(post(app, "/tokenize", {"inputs": ["Hello World", "İstanbul"]}))
    assert [t["id"] for t in prompted] == hub.encode("query: hello world").tolist()
    inner = prompted[1:-1]
    given = [(t["start"], t["stop"]) for t in inner if t["start"] is not None]
    assert [(None, None)] * (len(inner) - len(given)) == [(t["start"], t["stop"]) for t in inner[: -len(given)]]
    assert "".join("Hello World"[a:b] for a, b in given).strip() == "Hello World"
    assert given[-1][1] == len("Hello World") and len(given) < len(inner)
    assert "".join("Hello World"[t["start"] : t["stop"]] for t in plain[0][1:-1]) == "Hello World"
    assert [t["id"] for t in plain[1]] == hub.encode("i̇stanbul").tolist()  # "İ" lowercases to two characters
    assert all(t["start"] is None and t["stop"] is None for t in plain[1])


def test_tokenize_without_offsets_from_the_tokenizer_still_answers_the_ids(app, hub, monkeypatch):
    kind = routes.kind_of(hub.inputs.tokenizer)

    def failing(tokenizer, text):
        raise RuntimeError("no offsets")

    monkeypatch.setattr(kind, "spans", failing)
    tokens = ok(post(app, "/tokenize", {"inputs": "Hello world"}))[0]
    assert [t["id"] for t in tokens] == hub.encode("Hello world").tolist()
    assert all(t["start"] is None and t["stop"] is None for t in tokens)
    monkeypatch.setattr(kind, "spans", lambda tokenizer, text: [(0, 1)])  # a count that is not the tokens'
    tokens = ok(post(app, "/tokenize", {"inputs": "Hello world"}))[0]
    assert all(t["start"] is None and t["stop"] is None for t in tokens)


def test_decode_answers_the_texts_with_or_without_special_tokens(app, hub):
    hello, world = hub.encode("Hello").tolist()[1:-1], hub.encode(" world").tolist()[1:-1]
    row = [0, *hello, 2, *world, 2]
    assert ok(post(app, "/decode", {"ids": row})) == ["Hello world"]
    assert ok(post(app, "/decode", {"ids": row, "skip_special_tokens": False})) == ["<s>Hello</s> world</s>"]
    assert ok(post(app, "/decode", {"ids": [row, hello, [0, 2]]})) == ["Hello world", "Hello", ""]
    assert ok(post(app, "/decode", {"ids": [[1, 3, *hello]], "skip_special_tokens": False})) == ["<pad><unk>Hello"]


def test_an_id_that_stands_for_no_text_is_named_in_full(app, hub):
    server = app.state.server
    filler = hub.dictionary.index("madeupword0000")
    hello = hub.encode("Hello").tolist()[1]
    with pytest.raises(RequestError) as refused:
        routes._decode_run(server, [0, hello, filler], [1, 2], "ids[3]")
    assert (refused.value.status, refused.value.kind, refused.value.field) == (422, "Validation", "ids[3][2]")
    assert refused.value.message == (
        f"ids[3][2] is {filler}, 'madeupword0000' in the dictionary, which stands for no text: "
        "the tokenizer cannot decode it"
    )
    assert routes._decode_run(server, [0, hello, filler], [1], "ids") == "Hello"


def test_a_decoding_failure_no_single_id_explains_is_raised_as_it_is(app, monkeypatch):
    server = app.state.server
    tokenizer = server.inputs.tokenizer
    decode = tokenizer.decode

    def only_one_at_a_time(ids):
        if len(ids) > 1:
            raise ValueError("not together")
        return decode(ids)

    monkeypatch.setattr(tokenizer, "decode", only_one_at_a_time)
    with pytest.raises(ValueError, match="^not together$"):
        routes._decode_run(server, [10, 11], [0, 1], "ids")


# ------------------------------------------------------------------------------ about the server


def expected_info(hub, **changes: Any) -> dict[str, Any]:
    return {
        "model_id": "served-model",
        "model_sha": None,
        "model_dtype": "float32",
        "model_type": {
            "classifier": {"id2label": {"0": "negative", "1": "positive"}, "label2id": {"negative": 0, "positive": 1}}
        },
        "max_concurrent_requests": 512,
        "max_input_length": 64,
        "max_batch_tokens": 4096,
        "max_batch_requests": None,
        "max_client_batch_size": 32,
        "auto_truncate": False,
        "tokenization_workers": 1,
        "version": version("roberta_ext"),
        "family": "roberta",
        "hidden_size": 32,
        "layers": 2,
        "embedding_dimension": 32,
        "pooling": ["mean"],
        "normalize_by_default": True,
        "prompts": [],
        "max_positions": 64,
        "vocab_size": len(hub.dictionary),
        "classification_heads": {HEAD: 2},
        "token_heads": {},
        "masked_lm_head": True,
        "mask_token": "<mask>",
        "labels": LABELS,
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "timeout_s": 30.0,
    } | changes


def test_info_says_the_model_and_the_options(app, hub):
    assert ok(call(app, "GET", "/info")) == expected_info(hub)
    options = {
        "max_concurrent_requests": 7,
        "max_batch_tokens": 512,
        "max_batch_requests": 3,
        "max_client_batch_size": 5,
        "auto_truncate": True,
        "threads": 1,
        "timeout_s": 12.5,
    }
    with started(hub, model_id="served-model", **options) as other:
        assert ok(call(other, "GET", "/info")) == expected_info(hub, **options)


def test_info_of_an_embedding_model_with_prompts_and_no_masked_lm_head(fresh):
    fresh.model.classification_heads.clear()
    fresh.model.register_token_head("ner", num_labels=5)
    fresh.model.register_token_head("answer", num_labels=2)
    fresh.model.has_lm_head = False
    settings = SentenceEmbedding(pooling=("cls", "mean"), prompts={"query": "q: ", "doc": "d: "})
    served = types.SimpleNamespace(model=fresh.model, inputs=fresh.inputs, sentence_embedding=settings)
    with started(served) as app:
        info = ok(call(app, "GET", "/info"))
    assert info["model_type"] == {"embedding": {"pooling": "cls,mean"}}
    assert (info["classification_heads"], info["labels"], info["mask_token"], info["masked_lm_head"]) == (
        {},
        None,
        None,
        False,
    )
    assert list(info["token_heads"].items()) == [("answer", 2), ("ner", 5)]
    assert (info["pooling"], info["prompts"], info["embedding_dimension"]) == (["cls", "mean"], ["doc", "query"], 64)


def test_info_names_a_bfloat16_model_and_an_unknown_version(fresh, monkeypatch):
    fresh.model.to(torch.bfloat16)
    with started(fresh) as app:
        server = app.state.server
        assert routes.model_dtype(server) == "bfloat16"
        monkeypatch.setattr(routes, "version", lambda name: (_ for _ in ()).throw(PackageNotFoundError(name)))
        assert routes.server_version() == "unknown"
        assert ok(call(app, "GET", "/info"))["version"] == "unknown"


def test_an_int8_model_says_int8(served_model_dir):
    int8 = roberta_ext.from_pretrained(str(served_model_dir), dtype="int8")
    with started(int8) as app:
        assert ok(call(app, "GET", "/info"))["model_dtype"] == "int8"


def test_health_answers_ok_with_the_queue_and_503_without_a_worker(app, hub):
    assert ok(call(app, "GET", "/health")) == {"status": "ok", "queue_depth": 0}
    stopped = create_app(hub, ServeOptions())
    refused = call(stopped, "GET", "/health")
    assert refused.status_code == 503
    assert refused.json() == {"error": "the model worker is not running", "error_type": "Unhealthy"}


def test_metrics_and_the_openapi_document(app):
    server = app.state.server
    metrics = call(app, "GET", "/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"] == CONTENT_TYPE
    assert metrics.content == server.metrics.render()
    document = ok(call(app, "GET", "/openapi.json"))
    expected = openapi_description("served-model", version("roberta_ext"), server.limits, server.models)
    assert document == json.loads(json.dumps(expected))


# ------------------------------------------------------------------------------ the server's plumbing


def request(*chunks: bytes, headers: dict[str, str] | None = None, complete: bool = True, then: str = "wait"):
    """A POST request whose body arrives in ``chunks`` (the last one not the end unless
    ``complete``); after them the connection waits (``then="wait"``) or the client hangs up."""
    from starlette.requests import Request

    left = list(chunks)

    async def receive() -> dict[str, Any]:
        if left:
            chunk = left.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": bool(left) or not complete}
        if then == "disconnect":
            return {"type": "http.disconnect"}
        await asyncio.Event().wait()  # nothing more comes
        raise AssertionError("unreachable")

    raw = [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    return Request({"type": "http", "method": "POST", "path": "/x", "headers": raw, "query_string": b""}, receive)


@pytest.fixture
def server(hub):
    """A :class:`Server` over the module's hub with its worker running; options by ``indirect``."""
    from roberta_ext.serve import Server

    server = Server(hub, ServeOptions(max_concurrent_requests=1, retry_after_s=3, timeout_s=5.0))
    server.worker.start()
    yield server
    server.worker.stop()


def sample(server, name: str, **labels: str) -> float | None:
    return server.metrics.registry.get_sample_value(name, labels)


def answered(response) -> tuple[int, Any, dict[str, str]]:
    return response.status_code, json.loads(response.body), dict(response.headers)


def test_a_route_answers_refusals_library_errors_and_bugs_as_json_and_counts_each(server, caplog):
    from starlette.requests import ClientDisconnect

    from roberta_ext.checkpoints import CheckpointError
    from roberta_ext.inference.head_outputs import HeadError
    from roberta_ext.serve.server import JSONAnswer

    raised: dict[str, BaseException] = {
        "refusal": RequestError(418, "no tea", kind="Teapot", field="cup", headers={"X-Why": "tea"}),
        "server refusal": RequestError(503, "not now", kind="Unhealthy"),
        "library": HeadError("the model has no head 'x'"),
        "weights": CheckpointError("damaged weights"),
        "bug": KeyError("k"),
        "gone": ClientDisconnect(),
    }

    async def handler(request):
        what = (await request.body()).decode()
        if what == "fine":
            return JSONAnswer({"fine": True})
        raise raised[what]

    route = server.route("thing", handler)
    caplog.set_level("DEBUG", logger="roberta_ext.serve")
    answers = {what: answered(asyncio.run(route(request(what.encode())))) for what in ["fine", *raised]}
    assert answers == {
        "fine": (200, {"fine": True}, {"content-length": "13", "content-type": "application/json"}),
        "refusal": (
            418,
            {"error": "no tea", "error_type": "Teapot", "field": "cup"},
            {"x-why": "tea", "content-length": "54", "content-type": "application/json"},
        ),
        "server refusal": (503, {"error": "not now", "error_type": "Unhealthy"}, answers["server refusal"][2]),
        "library": (422, {"error": "the model has no head 'x'", "error_type": "Validation"}, answers["library"][2]),
        "weights": (
            500,
            {"error": "CheckpointError: damaged weights", "error_type": "Backend"},
            answers["weights"][2],
        ),
        "bug": (500, {"error": "KeyError: 'k'", "error_type": "Backend"}, answers["bug"][2]),
        "gone": (
            499,
            {"error": "the client closed the connection before its answer", "error_type": "ClientClosed"},
            answers["gone"][2],
        ),
    }
    logged = [(r.levelname, r.getMessage(), r.exc_info and r.exc_info[0]) for r in caplog.records]
    assert logged == [
        ("ERROR", "thing failed", CheckpointError),  # the library's 500, not the server's own 503
        ("ERROR", "thing failed", KeyError),  # the bug
        ("DEBUG", "thing: the client closed the connection before its answer", None),
    ]
    for status, count in {"200": 1, "418": 1, "503": 1, "422": 1, "500": 2, "499": 1}.items():
        assert sample(server, "roberta_ext_requests_total", endpoint="thing", status=status) == count
    for kind, count in {"Teapot": 1, "Unhealthy": 1, "Validation": 1, "Backend": 2, "ClientClosed": 1}.items():
        assert sample(server, "roberta_ext_request_errors_total", endpoint="thing", kind=kind) == count
    assert sample(server, "roberta_ext_request_errors_total", endpoint="thing", kind="None") is None
    assert sample(server, "roberta_ext_request_duration_seconds_count", endpoint="thing") == 7
    assert 0 < sample(server, "roberta_ext_request_duration_seconds_sum", endpoint="thing") < 5


def test_openais_routes_answer_errors_in_openais_shape(server):
    async def handler(request):
        raise RequestError(413, "too long", field="input[2]", headers={"Retry-After": "2"})

    async def fieldless(request):
        raise RequestError(429, "busy", kind="Overloaded")

    status, body, headers = answered(asyncio.run(server.route("v1", handler, openai=True)(request())))
    assert (status, body) == (
        413,
        {"error": {"message": "too long", "type": "Validation", "param": "input[2]", "code": 413}},
    )
    assert headers["retry-after"] == "2"
    status, body, _ = answered(asyncio.run(server.route("v1", fieldless, openai=True)(request())))
    assert body == {"error": {"message": "busy", "type": "Overloaded", "param": None, "code": 429}}


def test_a_queueing_route_holds_a_slot_until_its_answer_however_it_ends(server):
    """With one slot, a second request is refused 429 (Retry-After: the option) while the first
    holds it; the slot comes back after an answer and after an error, and routes that queue
    nothing take none."""
    from roberta_ext.serve.server import JSONAnswer, _admitted

    seen: list[Any] = []

    async def holding(request):
        seen.append(_admitted.get())
        with pytest.raises(RequestError) as refused:
            server.admit()
        error = refused.value
        seen.append((error.status, error.kind, error.message, error.headers))
        if (await request.body()) == b"fail":
            raise RuntimeError("failed while holding")
        return JSONAnswer("held")

    queueing = server.route("held", holding, queues=True)
    for body, status in ((b"ok", 200), (b"fail", 500)):
        seen.clear()
        incoming = request(body)
        assert asyncio.run(queueing(incoming)).status_code == status
        assert seen[0][1] is incoming and seen[0][0].held is False  # the slot it held, released since
        assert seen[1] == (
            429,
            "Overloaded",
            "the model is overloaded: all request slots are taken (--max-concurrent-requests 1)",
            {"Retry-After": "3"},
        )
        assert _admitted.get() is None
        server.admit().release()  # the slot is free again

    async def free(request):
        seen.append(_admitted.get())
        slot = server.admit()  # none taken by the route
        slot.release()
        return JSONAnswer("free")

    seen.clear()
    assert asyncio.run(server.route("free", free)(request())).status_code == 200
    assert seen == [None]


def test_a_queueing_route_is_refused_503_once_the_worker_stops(server):
    async def never(request):
        raise AssertionError("a refused request is not handled")

    server.worker.stop()
    status, body, headers = answered(asyncio.run(server.route("embed", never, queues=True)(request(b"{}"))))
    assert (status, body) == (503, {"error": "the server is shutting down", "error_type": "Unhealthy"})
    assert "retry-after" not in headers


def test_refusals_name_the_wait_the_worker_estimated_or_the_option(server):
    from roberta_ext.serve.worker import Overloaded, ShuttingDown, WouldTimeOut

    estimated = server.refusal(WouldTimeOut("about 9 s", retry_after_s=7))
    assert (estimated.status, estimated.kind, estimated.message, estimated.headers) == (
        429,
        "Overloaded",
        "about 9 s",
        {"Retry-After": "7"},
    )
    full = server.refusal(Overloaded("all taken"))
    assert (full.status, full.kind, full.message, full.headers) == (
        429,
        "Overloaded",
        "all taken",
        {"Retry-After": "3"},
    )
    stopping = server.refusal(ShuttingDown("stopping"))
    assert (stopping.status, stopping.kind, stopping.message, stopping.headers) == (503, "Unhealthy", "stopping", {})


def read(server, incoming) -> Any:
    return asyncio.run(server.read_json(incoming))


def refused_reading(server, incoming) -> RequestError:
    with pytest.raises(RequestError) as refused:
        read(server, incoming)
    return refused.value


def told(error: RequestError) -> tuple[Any, ...]:
    return error.status, error.kind, error.field, error.message, error.headers


def test_a_body_is_read_whole_up_to_the_payload_limit(hub):
    from roberta_ext.serve import Server

    server = Server(hub, ServeOptions(payload_limit=12))
    assert read(server, request(b'{"a": ', b'"bc"}')) == {"a": "bc"}  # in two chunks
    twelve = b'{"a": "bcd"}'
    assert len(twelve) == 12
    assert read(server, request(twelve, headers={"content-length": "12"})) == {"a": "bcd"}
    large = (413, "Validation", "body", "the body is larger than the limit of 12 bytes", {})

    async def unread() -> dict[str, Any]:
        raise AssertionError("a body declared too large is not read")

    from starlette.requests import Request

    declared = Request(
        {"type": "http", "method": "POST", "path": "/x", "headers": [(b"content-length", b"13")], "query_string": b""},
        unread,
    )
    assert told(refused_reading(server, declared)) == large
    assert told(refused_reading(server, request(b'{"a": ', b'"bcde"}'))) == large  # 13 bytes, none declared
    assert told(refused_reading(server, request(twelve + b" ", headers={"content-length": "x"}))) == large


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_closes_the_connection(hub):
    from roberta_ext.serve import Server

    server = Server(hub, ServeOptions(timeout_s=0.25))
    slow = refused_reading(server, request(b'{"in', complete=False))
    assert told(slow) == (
        408,
        "Timeout",
        "body",
        "the body did not arrive within 0.25 s (4 bytes came)",
        {"Connection": "close"},
    )
    assert not server._reading  # its deadline forgotten


def test_once_draining_a_body_still_on_its_way_is_answered_503_and_one_received_is_read(hub):
    from roberta_ext.serve import Server

    server = Server(hub, ServeOptions(timeout_s=30.0))
    stopping = (
        503,
        "Unhealthy",
        None,
        "the server is shutting down and the body had not all arrived",
        {"Connection": "close"},
    )

    async def drained_while_reading() -> RequestError:
        reading = asyncio.ensure_future(server.read_json(request(b'{"in', complete=False)))
        await asyncio.sleep(0.05)
        assert not reading.done()
        begun = asyncio.get_running_loop().time()
        server.drain()
        with pytest.raises(RequestError) as refused:
            await reading
        assert asyncio.get_running_loop().time() - begun < 5  # not the 30 s timeout
        return refused.value

    assert told(asyncio.run(drained_while_reading())) == stopping
    assert server.draining is True
    assert read(server, request(b'{"in": 1}')) == {"in": 1}
    begun = time.monotonic()
    assert told(refused_reading(server, request(b'{"in', complete=False))) == stopping
    assert time.monotonic() - begun < 0.5  # not waited for at all (the timeout is 30 s)


def test_draining_moves_every_reading_deadline_to_now_but_one_expiring_already(hub):
    """A body whose deadline has just expired is being answered 408: its deadline cannot be
    moved again (asyncio refuses to), and drain() goes on to the others."""
    from roberta_ext.serve import Server

    server = Server(hub, ServeOptions())

    async def drain() -> tuple[float | None, float]:
        loop = asyncio.get_running_loop()
        async with asyncio.timeout(100) as later:
            try:
                async with asyncio.timeout(0.01) as expiring:
                    server._reading.update({expiring, later})
                    try:
                        await asyncio.sleep(5)
                    except asyncio.CancelledError:
                        assert expiring.expired()
                        server.drain()
                        raise
            except TimeoutError:
                pass
            server._reading.clear()
            moved = later.when()
            later.reschedule(None)
            return moved, loop.time()

    moved, now = asyncio.run(drain())
    assert moved is not None and moved <= now


def computed(server, task, items=(1,), lengths=(1,)) -> Any:
    return asyncio.run(server.compute(task, list(items), list(lengths)))


def test_compute_answers_the_tasks_results_and_names_its_failures(server):
    from roberta_ext.serve import Task

    assert computed(server, Task("double", lambda items: [2 * i for i in items]), (1, 2), (1, 1)) == [2, 4]
    finite = computed(server, Task("finite", lambda items: torch.ones(len(items), 2)))
    assert torch.equal(finite, torch.ones(1, 2))
    whole = computed(server, Task("ints", lambda items: torch.zeros(len(items), 2, dtype=torch.long)))
    assert whole.dtype == torch.long

    def broken(items):
        raise RuntimeError("the model broke")

    with pytest.raises(RequestError) as failed:
        computed(server, Task("broken", broken))
    assert told(failed.value) == (
        500,
        "Backend",
        None,
        "the model failed on this request: RuntimeError: the model broke",
        {},
    )
    for bad in (float("nan"), float("inf")):
        with pytest.raises(RequestError) as failed:
            computed(server, Task(("bad", bad), lambda items, bad=bad: torch.tensor([[0.5, bad]])))
        assert told(failed.value) == (
            500,
            "Backend",
            None,
            "the model gave non-finite values (NaN or infinity) for this request",
            {},
        )
    server.worker.stop()
    with pytest.raises(RequestError) as stopped:
        computed(server, Task("double", lambda items: items))
    assert told(stopped.value) == (503, "Unhealthy", None, "the server is shutting down", {})


def test_compute_past_the_timeout_is_504_and_the_job_is_dropped(hub):
    from roberta_ext.serve import Server, Task
    from tests.serve.conftest import Gate

    server = Server(hub, ServeOptions(timeout_s=0.2))
    server.worker.start()
    ran: list[Any] = []
    try:
        gate = Gate(server)
        try:
            with pytest.raises(RequestError) as late:
                computed(server, Task("late", lambda items: ran.extend(items) or items), ("late",))
        finally:
            gate.open()
        assert told(late.value) == (504, "Timeout", None, "the request did not finish within 0.2 s", {})
        assert computed(server, Task("late", lambda items: items), ("next",)) == ["next"]
        assert ran == []  # cancelled before the worker took it
    finally:
        server.worker.stop()


def test_a_client_that_hangs_up_while_its_work_waits_is_answered_499_and_its_work_dropped(hub):
    from roberta_ext.serve import Server, Task
    from roberta_ext.serve.server import JSONAnswer
    from tests.serve.conftest import Gate

    ran: list[Any] = []

    async def handler(incoming):
        await incoming.body()
        await server.compute(Task("gone", lambda items: ran.extend(items) or items), ["gone"], [1])
        return JSONAnswer("computed")

    server = Server(hub, ServeOptions())  # a slot for the gate's job, one for the request
    server.worker.start()
    gate = Gate(server)
    try:
        gone = request(b"{}", then="disconnect")
        status, body, _ = answered(asyncio.run(server.route("gone", handler, queues=True)(gone)))
    finally:
        gate.open()
    assert (status, body) == (
        499,
        {"error": "the client closed the connection before its answer", "error_type": "ClientClosed"},
    )
    assert computed(server, Task("gone", lambda items: items), ("after",)) == ["after"]
    assert ran == []
    server.worker.stop()


def test_a_client_that_stays_gets_its_answer_after_the_watch_began(server):
    from roberta_ext.serve import Task
    from roberta_ext.serve.server import WATCH_AFTER_S, JSONAnswer

    async def handler(incoming):
        await incoming.body()
        slow = Task("slow", lambda items: [__import__("time").sleep(WATCH_AFTER_S * 3), *items][1:])
        return JSONAnswer(await server.compute(slow, ["stayed"], [1]))

    status, body, _ = answered(asyncio.run(server.route("slow", handler, queues=True)(request(b"{}"))))
    assert (status, body) == (200, ["stayed"])


def test_the_lifespan_runs_the_worker_and_freezes_what_was_alive_until_shutdown(hub):
    import gc

    from roberta_ext.serve import Server, Task

    server = Server(hub, ServeOptions())

    async def serve() -> tuple[bool, int, Any]:
        async with server.lifespan(Starlette()):
            alive, frozen = server.worker.alive, gc.get_freeze_count()
            done = await server.compute(Task("alive", lambda items: items), ["x"], [1])
        return alive, frozen, done

    alive, frozen, done = asyncio.run(serve())
    assert alive and done == ["x"] and frozen > sum(1 for _ in hub.model.modules())
    assert not server.worker.alive and gc.get_freeze_count() == 0


def test_the_server_takes_the_models_limits_and_the_options(hub, monkeypatch):
    from roberta_ext.serve import Server
    from roberta_ext.serve.schemas import RouteLimits

    hub.model.train()
    options = ServeOptions(
        max_client_batch_size=5,
        auto_truncate=True,
        max_batch_tokens=300,
        max_batch_requests=7,
        max_concurrent_requests=9,
        threads=1,
    )
    server = Server(hub, options)
    assert not hub.model.training  # no dropout while serving
    fillers = tuple(i for i, s in enumerate(hub.dictionary.symbols) if s.startswith("madeupword"))
    assert fillers and server.limits == RouteLimits(
        max_items=5,
        dimension=32,
        vocab_size=len(hub.dictionary),
        textless_ids=fillers,
        heads=(HEAD,),
        prompts=(),
        max_top_k=100,
        mask_spellings=("<mask>",),
        auto_truncate=True,
    )
    worker = server.worker
    assert (worker.max_batch_tokens, worker.max_batch_requests, worker.max_concurrent_requests, worker.threads) == (
        300,
        7,
        9,
        1,
    )
    assert worker.metrics is server.metrics
    assert server.request_fields["/fill_mask"] == ("inputs", "top_k")
    assert set(server.request_fields) == {"/embed", "/v1/embeddings", "/predict", "/fill_mask", "/tokenize", "/decode"}
    assert (server.labels, server.mask_token, server.mask_spellings) == (LABELS, "<mask>", ("<mask>",))
    assert server.draining is False and server.served is hub and server.options is options
    monkeypatch.setattr(hub, "mask_spellings", ("<mask>", "[MASK]"))
    assert Server(hub, options).limits.mask_spellings == ("<mask>", "[MASK]")


def test_a_served_model_without_labels_mask_or_masked_lm_head(hub):
    from roberta_ext.serve import Server

    bare = types.SimpleNamespace(
        model=hub.model,
        inputs=hub.inputs,
        sentence_embedding=SentenceEmbedding(prompts={"b": "b: ", "a": "a: "}, pooling=("mean", "max")),
    )
    server = Server(bare, ServeOptions())
    assert (server.labels, server.mask_token, server.mask_spellings) == (None, None, ())
    assert (server.limits.mask_spellings, server.limits.prompts, server.limits.dimension) == ((), ("a", "b"), 64)
    assert server.label_names() is None and server.class_names(3) == ["LABEL_0", "LABEL_1", "LABEL_2"]
    assert server.special_ids() == {0, 1, 2, 3}
    masked = types.SimpleNamespace(**vars(bare), mask_token="<mask>")
    server = Server(masked, ServeOptions())
    assert server.mask_spellings == ("<mask>",) and server.limits.mask_spellings == ("<mask>",)
    assert server.special_ids() == {0, 1, 2, 3, hub.dictionary.index("<mask>")}
    unknown = types.SimpleNamespace(**vars(bare), mask_token="[MASK]")  # not a symbol of the dictionary
    assert Server(unknown, ServeOptions()).special_ids() == {0, 1, 2, 3}


def test_label_names_leave_fairseqs_fillers_out_and_short_lists_fall_back_to_label_k(hub, monkeypatch):
    from roberta_ext.serve import Server

    monkeypatch.setattr(hub, "labels", ["neg", "pos", "madeupword0000", "madeupword0001"])
    server = Server(hub, ServeOptions())
    assert server.label_names() == ["neg", "pos"]
    assert server.class_names(2) == ["neg", "pos"] and server.class_names(1) == ["neg"]
    assert server.class_names(3) == ["LABEL_0", "LABEL_1", "LABEL_2"]


def test_embedders_are_the_models_settings_cached_per_prompt_and_normalisation(hub):
    from roberta_ext.embedding.embedder import Embedder
    from roberta_ext.serve import Server

    served = types.SimpleNamespace(
        model=hub.model, inputs=hub.inputs, sentence_embedding=SentenceEmbedding(prompts={"q": "q: "})
    )
    server = Server(served, ServeOptions(max_batch_tokens=256, max_batch_requests=3))
    assert server.embedder(None, True) is server.default_embedder
    prompted = server.embedder("q", False)
    assert server.embedder("q", False) is prompted and server.embedder("q", True) is not prompted
    assert prompted == Embedder.create(
        hub.model, hub.inputs, served.sentence_embedding, prompt_name="q", normalize=False, max_tokens=256, batch_size=3
    )
    task = server.embedding_task(prompted)
    assert task.key == ("embed", ("mean",), False, 0)
    rows = [prompted.encode("Hello"), prompted.encode("Hi there")]
    assert torch.equal(task.compute(rows), prompted.embed_ids(rows))
    classify_task = server.classify_task(HEAD)
    assert classify_task.key == ("predict", HEAD)
    logits = classify_task.compute([hub.encode("Great movie!").tolist()])
    expected = classify(hub.model, hub.inputs, HEAD, hub.encode("Great movie!"), return_logits=True)
    assert torch.equal(logits, expected)


# ------------------------------------------------------------------------------ the app


ROUTES = {
    ("POST", "/embed"): ("embed", {"inputs": "a"}),
    ("POST", "/v1/embeddings"): ("v1/embeddings", {"input": "a"}),
    ("POST", "/predict"): ("predict", {"inputs": "a"}),
    ("POST", "/fill_mask"): ("fill_mask", {"inputs": "a <mask>"}),
    ("POST", "/tokenize"): ("tokenize", {"inputs": "a"}),
    ("POST", "/decode"): ("decode", {"ids": [0, 2]}),
    ("GET", "/health"): ("health", None),
    ("GET", "/info"): ("info", None),
}


def test_every_route_answers_under_its_endpoints_name(hub):
    with started(hub) as app:
        server = app.state.server
        for (method, path), (endpoint, body) in ROUTES.items():
            assert call(app, method, path, json=body).status_code == 200, path
            assert sample(server, "roberta_ext_requests_total", endpoint=endpoint, status="200") == 1, path
        assert call(app, "GET", "/metrics").status_code == 200
        assert call(app, "GET", "/openapi.json").status_code == 200
        counted = {s.labels["endpoint"] for s in server.metrics.requests.collect()[0].samples}
        assert counted == {endpoint for endpoint, _ in ROUTES.values()}  # /metrics and /openapi.json not counted


def test_only_the_routes_that_run_the_model_take_a_slot_before_reading_the_body(hub):
    """With every slot taken, the model's routes are refused 429 before their body is read (a
    body they would refuse 422 included); the others read it and answer."""
    with started(hub, max_concurrent_requests=1, retry_after_s=4) as app:
        assert create_app(hub).state.server.options == ServeOptions()  # the default options
        slot = app.state.server.admit()
        try:
            for (method, path), (_, body) in ROUTES.items():
                if method == "GET":
                    assert call(app, method, path).status_code == 200, path
                    continue
                answer = post(app, path, {**body, "bogus": 1})
                if path in ("/embed", "/v1/embeddings", "/predict", "/fill_mask"):
                    assert answer.status_code == 429 and answer.headers["retry-after"] == "4", path
                    message = "the model is overloaded: all request slots are taken (--max-concurrent-requests 1)"
                    error = answer.json()["error"]
                    assert (error["message"] if path == "/v1/embeddings" else error) == message, path
                else:
                    fields = ", ".join(app.state.server.request_fields[path])
                    assert answer.status_code == 422, path
                    assert answer.json() == {
                        "error": f"unknown field 'bogus': {path} takes {fields}",
                        "error_type": "Validation",
                        "field": "bogus",
                    }
        finally:
            slot.release()


def test_wrong_paths_and_methods_are_json_errors(hub):
    app = create_app(hub)  # its own: mutmut links a test to the code its own calls run (no worker needed)
    wrong = call(app, "GET", "/embed")
    assert wrong.status_code == 405 and wrong.headers["allow"] == "POST"
    assert wrong.json() == {"error": "GET /embed: Method Not Allowed", "error_type": "Route"}
    posted = call(app, "POST", "/info")
    assert posted.status_code == 405 and set(posted.headers["allow"].split(", ")) == {"GET", "HEAD"}
    assert posted.json() == {"error": "POST /info: Method Not Allowed", "error_type": "Route"}
    for method, path in [*ROUTES, ("GET", "/metrics"), ("GET", "/openapi.json")]:
        other = "GET" if method == "POST" else "POST"
        answer = call(app, other, path)
        assert answer.status_code == 405, path
        assert set(answer.headers["allow"].split(", ")) == ({"POST"} if method == "POST" else {"GET", "HEAD"}), path
    nowhere = call(app, "GET", "/nowhere")
    assert nowhere.status_code == 404
    assert nowhere.json() == {"error": "GET /nowhere: Not Found", "error_type": "Route"}


def test_the_apps_lifespan_is_the_servers(hub):
    app = create_app(hub)
    server = app.state.server

    async def lifespan() -> tuple[bool, bool]:
        async with app.router.lifespan_context(app):
            alive = server.worker.alive
        return alive, server.worker.alive

    assert asyncio.run(lifespan()) == (True, False)


def test_uvicorn_is_configured_from_the_options_and_its_shutdown_drains_the_server(app):
    from roberta_ext.serve.app import uvicorn_server

    options = ServeOptions(host="0.0.0.0", port=9123, log_level="error", access_log=False, graceful_shutdown_s=2.5)
    server = uvicorn_server(app, options)
    config = server.config
    assert (config.app, config.host, config.port, config.log_level, config.access_log) == (
        app,
        "0.0.0.0",
        9123,
        "error",
        False,
    )
    assert (config.timeout_graceful_shutdown, config.lifespan) == (3, "on")
    assert app.state.server.draining is False
    server.servers, server.force_exit = [], True  # never started: no lifespan to end
    with socket.socket() as listening:
        asyncio.run(server.shutdown([listening]))
        assert listening.fileno() == -1  # the sockets it was given, closed
    assert app.state.server.draining is True
    app.state.server.draining = False


def test_sigterm_is_left_to_uvicorn_while_it_serves_and_given_back_after():
    import signal
    import threading

    from roberta_ext.serve.app import _sigterm_handled_by_uvicorn

    def mine(signum, frame):
        raise AssertionError("not while serving")

    previous = signal.signal(signal.SIGTERM, mine)
    try:
        with _sigterm_handled_by_uvicorn():
            during = signal.getsignal(signal.SIGTERM)
            assert during is not mine and callable(during) and during(signal.SIGTERM, None) is None
        assert signal.getsignal(signal.SIGTERM) is mine
        seen: list[Any] = []

        def elsewhere() -> None:
            with _sigterm_handled_by_uvicorn():
                seen.append(signal.getsignal(signal.SIGTERM))

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join(10)
        assert seen == [mine]  # only the main thread may set handlers: left alone
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.mark.parametrize("starts", [True, False])
def test_run_serves_the_app_with_sigterm_left_to_uvicorn_and_says_when_it_could_not_start(hub, monkeypatch, starts):
    import signal

    from roberta_ext.serve import app as app_module

    made: list[Any] = []

    class Uvicorn:
        started = False

        def run(self) -> None:
            made.append(signal.getsignal(signal.SIGTERM))
            self.started = starts

    def uvicorn_server(app, options):
        made.extend([app, options])
        return Uvicorn()

    monkeypatch.setattr(app_module, "uvicorn_server", uvicorn_server)
    before = signal.getsignal(signal.SIGTERM)
    if starts:
        assert app_module.run(hub) is None
    else:
        with pytest.raises(RuntimeError, match=r"^the server could not start on 127\.0\.0\.1:8080$"):
            app_module.run(hub)
    app, options, during = made
    assert options == ServeOptions() and app.state.server.options is options and app.state.server.served is hub
    assert during is not before and signal.getsignal(signal.SIGTERM) is before
    given = ServeOptions(host="::1", port=9999)
    made.clear()
    with (
        pytest.raises(RuntimeError, match=r"^the server could not start on ::1:9999$")
        if not starts
        else contextlib.nullcontext()
    ):
        app_module.run(hub, given)
    assert made[1] is given


# ------------------------------------------------------------------------------ corners the first run left untested


def test_embed_at_the_full_width_is_the_librarys_vector_not_normalised_twice(app, hub):
    """``dimensions`` equal to the width cuts nothing, so nothing is normalised again (which
    would move the float32 values by a rounding)."""
    texts = ["Hello world!", "Hi", "A third one."]
    full = tensor(ok(post(app, "/embed", {"inputs": texts, "dimensions": 32})))
    assert torch.equal(full, hub.embed(texts, normalize=True))


def test_fill_mask_takes_every_spelling_of_the_mask_and_names_a_masked_text_too_long(fresh):
    fresh.mask_spellings = ("<mask>", "[MASK]")
    with started(fresh) as app:
        spelled = ok(post(app, "/fill_mask", {"inputs": "Hello [MASK]!", "top_k": 2}))
        long_one = post(app, "/fill_mask", {"inputs": LONG + "<mask>"})
        long_two = post(app, "/fill_mask", {"inputs": ["<mask>", LONG + "<mask>"]})
    assert [(f["token_str"], f["score"]) for f in spelled] == [
        (token, f32(score)) for _, score, token in fresh.fill_mask("Hello <mask>!", topk=2)
    ]
    assert (long_one.status_code, long_one.json()["field"]) == (413, "inputs")
    assert (long_two.status_code, long_two.json()["field"]) == (413, "inputs[1]")
    assert long_two.json()["error"].startswith("inputs[1] is ")


def test_fill_mask_requests_with_other_top_k_are_not_batched_together(hub):
    from tests.serve.conftest import Gate

    with started(hub) as app:
        server = app.state.server

        async def both() -> list[httpx.Response]:
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
                sent = [
                    asyncio.ensure_future(client.post("/fill_mask", json={"inputs": "Hello <mask>!", "top_k": k}))
                    for k in (1, 3)
                ]
                while server.worker.queue_depth < 2:
                    await asyncio.sleep(0.01)
                gate.open()
                return list(await asyncio.gather(*sent))

        gate = Gate(server)
        try:
            one, three = asyncio.run(both())
        finally:
            gate.open()
        assert len(ok(one)) == 1 and len(ok(three)) == 3
        for task in ("embed", "predict"):
            assert sample(server, "roberta_ext_estimated_tokens_per_second", task=task) is None
        for _ in range(3):  # a rate is given after a few batches
            ok(post(app, "/embed", {"inputs": "a"}))
            ok(post(app, "/predict", {"inputs": "a"}))
        for task in ("fill_mask", "embed", "predict"):  # each kind's rate measured apart, under its name
            assert sample(server, "roberta_ext_estimated_tokens_per_second", task=task) > 0, task


def test_tokenize_shows_special_tokens_as_the_dictionarys_symbols(app, hub, monkeypatch):
    """A tokenizer may write a special symbol otherwise (WordPiece's ``" [CLS]"``): the answer
    names it as the dictionary does."""
    tokenizer = hub.inputs.tokenizer
    token_text = tokenizer.token_text
    monkeypatch.setattr(tokenizer, "token_text", lambda index: "~" + token_text(index))
    tokens = ok(post(app, "/tokenize", {"inputs": "Hello"}))[0]
    assert [t["text"] for t in tokens] == ["<s>", *(f"~{token_text(i)}" for i in hub.encode("Hello")[1:-1]), "</s>"]


def test_decode_names_an_id_the_tokenizer_cannot_decode_by_its_place(app, hub, monkeypatch):
    """Defence in depth: an id the schema lets through but the tokenizer refuses (as it
    refuses a ``madeupword`` filler) is answered 422 naming where it is."""
    tokenizer = hub.inputs.tokenizer
    decode = tokenizer.decode
    hello, world = hub.encode("Hello").tolist()[1], hub.encode(" world").tolist()[1]

    def refusing(ids):
        if world in ids:
            raise KeyError(world)
        return decode(ids)

    monkeypatch.setattr(tokenizer, "decode", refusing)
    symbol = hub.dictionary[world]
    cases = {
        "ids[1][3]": {"ids": [[0, hello, 2], [0, hello, hello, world, 2]]},  # before a special id
        "ids[2]": {"ids": [0, hello, world]},  # at the end of a single row
    }
    for where, body in cases.items():
        refused = post(app, "/decode", body)
        assert refused.status_code == 422, refused.text
        assert refused.json() == {
            "error": f"{where} is {world}, {symbol!r} in the dictionary, which stands for no text: "
            "the tokenizer cannot decode it",
            "error_type": "Validation",
            "field": where,
        }


def test_info_names_another_family_and_a_config_without_one(app, monkeypatch):
    import dataclasses

    model = app.state.server.model
    monkeypatch.setattr(model, "cfg", dataclasses.replace(model.cfg, family="electra"))
    assert ok(call(app, "GET", "/info"))["family"] == "electra"
    monkeypatch.setattr(model, "cfg", types.SimpleNamespace(encoder_embed_dim=32, encoder_layers=2))
    assert ok(call(app, "GET", "/info"))["family"] == "roberta"


def test_info_without_a_masked_lm_head_has_no_mask_token_and_says_the_threads_asked(fresh):
    fresh.model.has_lm_head = False
    app = create_app(fresh, ServeOptions(threads=3))  # /info runs no model work: no worker needed
    info = ok(call(app, "GET", "/info"))
    assert (info["mask_token"], info["masked_lm_head"], info["threads"]) == (None, False, 3)
    assert app.state.server.mask_token == "<mask>"


def test_the_openapi_document_describes_the_models_the_server_validates_with(app, monkeypatch):
    from pydantic import BaseModel, ConfigDict

    class Other(BaseModel):
        model_config = ConfigDict(extra="forbid")
        only: int

    server = app.state.server
    monkeypatch.setattr(server, "models", {**server.models, "/decode": Other})
    document = ok(call(app, "GET", "/openapi.json"))
    body = document["paths"]["/decode"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert list(body["properties"]) == ["only"]


def test_the_predict_task_runs_at_most_max_batch_requests_rows_at_once(hub):
    """One row per forward pass gives each row's logits exactly as alone (a padded batch of
    two would round them otherwise)."""
    from roberta_ext.serve import Server

    server = Server(hub, ServeOptions(max_batch_requests=1))
    texts = ["Great movie!", "A much longer sentence with many more tokens in it than the first one has."]
    rows = [hub.encode(text).tolist() for text in texts]
    alone = [classify(hub.model, hub.inputs, HEAD, torch.tensor(row), return_logits=True) for row in rows]
    assert torch.equal(server.classify_task(HEAD).compute(rows), torch.cat(alone))


def test_work_that_could_not_be_done_in_time_is_refused_429_before_it_is_queued(hub):
    from roberta_ext.serve import Job, Server, Task
    from tests.serve.conftest import Gate

    server = Server(hub, ServeOptions(timeout_s=1.0))
    server.worker.start()
    try:
        measured = Task("slow", lambda items: time.sleep(0.05) or items)
        for _ in range(3):  # a rate of about 200 tokens/s
            assert computed(server, measured, ("x",), (10,)) == ["x"]
        gate = Gate(server)
        try:
            server.worker.submit(Job(measured, ["ahead"], [1000]))  # about 5 s of work ahead
            with pytest.raises(RequestError) as refused:
                computed(server, measured, ("late",), (10,))
        finally:
            gate.open()
        error = refused.value
        assert (error.status, error.kind) == (429, "Overloaded")
        assert error.message.startswith("the model is overloaded: this request would take about ")
        assert error.message.endswith(f"s; retry after {error.headers['Retry-After']} s")
        assert int(error.headers["Retry-After"]) >= 1
    finally:
        server.worker.stop()
