"""The real server on a loopback port, spoken to over HTTP: every route's answers against the
same computations in process, concurrent clients each getting exactly their own results out of
shared batches, and the server holding under bad input, a full queue, a slow model and a
failing batch."""

from __future__ import annotations

import base64
import dataclasses
import threading

import httpx
import numpy as np
import pytest
import torch

import roberta_ext
from roberta_ext.inference.head_outputs import classify
from tests.serve.conftest import LABELS, Gate, serving

TEXTS = [
    "Hello world!",
    "Hi",
    "A much longer sentence, with many more tokens than the others have in them, to pad the batch.",
    "Numbers 1,234 and e-mail a@b.c",
    "Café naïve façade",
    "",
    "The quick brown fox jumps over the lazy dog.",
]
HEAD = "sentence_classification_head"


@pytest.fixture(scope="module")
def live(hub):
    with serving(hub) as (url, server):
        with httpx.Client(base_url=url, timeout=30) as client:
            yield client, server


def probabilities(hub, *texts: str) -> torch.Tensor:
    return classify(hub.model, hub.inputs, HEAD, hub.encode(*texts), return_logits=True)[0].softmax(-1)


def as_tensor(vectors) -> torch.Tensor:
    return torch.tensor(vectors, dtype=torch.float32)


def scores(answer: list[dict]) -> dict[str, np.float32]:
    """``/predict``'s scores by label, read back as the float32 values they were written from."""
    return {p["label"]: np.float32(p["score"]) for p in answer}


# ------------------------------------------------------------------------------ every route


def test_embed_equals_in_process_embed(live, hub):
    client, _ = live
    response = client.post("/embed", json={"inputs": TEXTS})
    assert response.status_code == 200, response.text
    assert torch.equal(as_tensor(response.json()), hub.embed(TEXTS, normalize=True))
    one = client.post("/embed", json={"inputs": "Hello world!", "normalize": False}).json()
    assert torch.equal(as_tensor(one), hub.embed(["Hello world!"]))
    pair = client.post("/embed", json={"inputs": [["A question?", "An answer."]]}).json()
    assert torch.equal(as_tensor(pair), hub.embed([("A question?", "An answer.")], normalize=True))
    short = as_tensor(client.post("/embed", json={"inputs": TEXTS[:2], "dimensions": 8}).json())
    assert short.shape == (2, 8)
    torch.testing.assert_close(short, torch.nn.functional.normalize(hub.embed(TEXTS[:2])[:, :8], dim=-1))


def test_long_inputs_are_cut_only_when_asked(live, hub):
    client, _ = live
    long = "word " * 80
    response = client.post("/embed", json={"inputs": ["fine", long]})
    assert response.status_code == 413
    length = len(hub.encode(long))
    assert response.json()["field"] == "inputs[1]"
    assert f"inputs[1] is {length} tokens long, more than the maximum of 64" in response.json()["error"]
    cut = client.post("/embed", json={"inputs": ["fine", long], "truncate": True})
    assert torch.equal(as_tensor(cut.json()), hub.embed(["fine", long], normalize=True))
    response = client.post("/predict", json={"inputs": [[long], ["x"]]})
    assert response.status_code == 413 and response.json()["field"] == "inputs[0]"


def test_openai_embeddings(live, hub):
    client, _ = live
    body = client.post("/v1/embeddings", json={"input": TEXTS[:3], "model": "anything"}).json()
    assert body["object"] == "list" and body["model"] == "model"
    assert [item["index"] for item in body["data"]] == [0, 1, 2]
    expected = hub.embed(TEXTS[:3], normalize=True)
    assert torch.equal(as_tensor([item["embedding"] for item in body["data"]]), expected)
    tokens = sum(len(hub.encode(text)) for text in TEXTS[:3])
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    packed = client.post("/v1/embeddings", json={"input": "Hi", "encoding_format": "base64"}).json()
    decoded = torch.frombuffer(bytearray(base64.b64decode(packed["data"][0]["embedding"])), dtype=torch.float32)
    assert torch.equal(decoded, hub.embed(["Hi"], normalize=True)[0])
    short = client.post("/v1/embeddings", json={"input": "Hi", "dimensions": 4}).json()["data"][0]["embedding"]
    assert len(short) == 4 and abs(sum(v * v for v in short) - 1) < 1e-5
    error = client.post("/v1/embeddings", json={"input": [[1, 2, 3]]})
    assert error.status_code == 422 and error.json()["error"]["param"] == "input"


def test_predict_gives_label_names_and_scores_like_in_process(live, hub):
    client, _ = live
    single = client.post("/predict", json={"inputs": "Great movie!"}).json()
    assert [p["label"] for p in single] == sorted(
        LABELS, key=lambda label: -probabilities(hub, "Great movie!")[LABELS.index(label)]
    )
    assert scores(single) == dict(zip(LABELS, probabilities(hub, "Great movie!").detach().numpy()))
    pair = client.post("/predict", json={"inputs": ["A premise.", "A hypothesis."]}).json()
    assert scores(pair) == dict(zip(LABELS, probabilities(hub, "A premise.", "A hypothesis.").detach().numpy()))
    batch = client.post("/predict", json={"inputs": [["one"], ["two", "three"]], "raw_scores": True}).json()
    logits = classify(hub.model, hub.inputs, HEAD, hub.encode("two", "three"), return_logits=True)
    served = [p["score"] for p in sorted(batch[1], key=lambda p: LABELS.index(p["label"]))]
    torch.testing.assert_close(torch.tensor([served]), logits, atol=1e-6, rtol=1e-6)  # batched: float32 rounding
    assert len(batch) == 2 and all(len(item) == 2 for item in batch)


def test_fill_mask_tokenize_and_decode(live, hub):
    client, _ = live
    filled = client.post("/fill_mask", json={"inputs": "Hello <mask>!", "top_k": 3}).json()
    expected = hub.fill_mask("Hello <mask>!", topk=3)
    assert [(f["sequence"], np.float32(f["score"]), f["token_str"]) for f in filled] == [
        (sequence, np.float32(score), token) for sequence, score, token in expected
    ]
    both = client.post("/fill_mask", json={"inputs": ["Hello <mask>!", "<mask> world"], "top_k": 1}).json()
    assert len(both) == 2 and both[1][0]["sequence"] == hub.fill_mask("<mask> world", topk=1)[0][0]

    text = "Hello world! Café"
    tokens = client.post("/tokenize", json={"inputs": [text]}).json()[0]
    ids = hub.encode(text).tolist()
    assert [t["id"] for t in tokens] == ids
    assert [t["special"] for t in tokens] == [True] + [False] * (len(ids) - 2) + [True]
    assert "".join(text[t["start"] : t["stop"]] for t in tokens[1:-1]) == text
    assert [
        t["id"] for t in client.post("/tokenize", json={"inputs": text, "add_special_tokens": False}).json()[0]
    ] == (ids[1:-1])
    assert client.post("/decode", json={"ids": ids}).json() == [text]
    assert client.post("/decode", json={"ids": [ids, ids[:2]], "skip_special_tokens": False}).json()[0] == (
        f"<s>{text}</s>"
    )


def test_info_health_metrics_and_openapi(live, hub):
    client, _ = live
    info = client.get("/info").json()
    assert info["model_type"] == {
        "classifier": {"id2label": {"0": "negative", "1": "positive"}, "label2id": {"negative": 0, "positive": 1}}
    }
    assert (info["family"], info["hidden_size"], info["max_positions"], info["model_dtype"]) == (
        "roberta",
        32,
        64,
        "float32",
    )
    assert info["classification_heads"] == {HEAD: 2} and info["masked_lm_head"] is True
    assert info["max_input_length"] == 64 and info["embedding_dimension"] == 32
    assert client.get("/health").json()["status"] == "ok"
    client.post("/embed", json={"inputs": []})  # an error, to be counted
    metrics = client.get("/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    for name in (
        'roberta_ext_requests_total{endpoint="embed",status="200"}',
        'roberta_ext_request_errors_total{endpoint="embed",kind="Empty"}',
        "roberta_ext_queue_depth",
        "roberta_ext_batch_requests_bucket",
        "roberta_ext_batch_tokens_bucket",
        "roberta_ext_tokens_total",
        "roberta_ext_tokens_per_second",
        'roberta_ext_request_duration_seconds_bucket{endpoint="embed"',
        "roberta_ext_admitted_requests_total",
        'roberta_ext_estimated_tokens_per_second{task="embed"}',
        "roberta_ext_wait_estimate_error_seconds_bucket",
    ):
        assert name in metrics.text, name
    paths = client.get("/openapi.json").json()["paths"]
    assert set(paths) == {
        "/embed",
        "/v1/embeddings",
        "/predict",
        "/fill_mask",
        "/tokenize",
        "/decode",
        "/health",
        "/info",
        "/metrics",
        "/openapi.json",
    }


# ------------------------------------------------------------------------------ batching


def test_concurrent_clients_each_get_their_own_exact_results(live, hub):
    """Requests queued behind a gate run in shared batches; every client still gets what
    in-process embed and predict give for its own texts."""
    client, server = live
    before = server.metrics.batch_requests.collect()[0].samples
    jobs = [
        ("embed", [TEXTS[(i + k) % len(TEXTS)] for k in range(1 + i % 4)])
        if i % 3
        else ("predict", TEXTS[i % len(TEXTS)])
        for i in range(12)
    ]
    answers: dict[int, httpx.Response] = {}

    def send(i: int) -> None:
        kind, texts = jobs[i]
        with httpx.Client(base_url=str(client.base_url), timeout=30) as own:
            body = {"inputs": texts}
            answers[i] = own.post(f"/{kind}", json=body)

    gate = Gate(server)
    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    gate.wait_for_queue(len(jobs))
    gate.open()
    for thread in threads:
        thread.join(30)
    for i, (kind, texts) in enumerate(jobs):
        assert answers[i].status_code == 200, answers[i].text
        if kind == "embed":
            served, alone = as_tensor(answers[i].json()), hub.embed(texts, normalize=True)
        else:
            served = as_tensor([[p["score"] for p in sorted(answers[i].json(), key=lambda p: p["label"])]])
            alone = probabilities(hub, texts)[None]
        # Shared batches are other matrix shapes than the request's alone: equal to float32
        # rounding (1e-6, embed's own guarantee), never to a batch-mate's influence.
        torch.testing.assert_close(served, alone, atol=1e-6, rtol=1e-6, msg=f"request {i}")
    # The 8 embed requests shared one batch, the 4 predict requests another.
    after = server.metrics.batch_requests.collect()[0].samples
    count = {s.labels.get("le"): s.value for s in after if s.name.endswith("_bucket")}
    count_before = {s.labels.get("le"): s.value for s in before if s.name.endswith("_bucket")}
    assert count["4.0"] - count_before["4.0"] == 2 and count["8.0"] - count_before["8.0"] == 3  # gate, predict, embed


# ------------------------------------------------------------------------------ under load and bad input


BAD = [
    ("/embed", b'{"inputs": ', 400, "body"),
    ("/embed", b'{"inputs": "\xff\xfe"}', 400, "body"),
    ("/embed", b'["a list"]', 422, "body"),
    ("/embed", b"{}", 422, "inputs"),
    ("/embed", b'{"inputs": 3}', 422, "inputs"),
    ("/embed", b'{"inputs": []}', 400, "inputs"),
    ("/embed", b'{"inputs": ["ok", null]}', 422, "inputs[1]"),
    ("/embed", b'{"inputs": "\\ud800 lone surrogate"}', 422, "inputs"),
    ("/embed", b'{"inputs": "x", "normalize": "yes"}', 422, "normalize"),
    ("/embed", b'{"inputs": "x", "dimensions": 0}', 422, "dimensions"),
    ("/embed", b'{"inputs": "x", "prompt_name": "query"}', 422, "prompt_name"),
    ("/embed", b'{"inputs": "x", "truncation_direction": "left"}', 422, "truncation_direction"),
    ("/embed", b'{"inputs": [' + b",".join([b'"x"'] * 33) + b"]}", 413, "inputs"),
    ("/v1/embeddings", b'{"input": "x", "encoding_format": "int8"}', 422, "encoding_format"),
    ("/predict", b'{"inputs": "x", "head": "nope"}', 422, "head"),
    ("/predict", b'{"inputs": ["a", "b", "c"]}', 422, "inputs"),
    ("/predict", b'{"inputs": [["a"], "b"]}', 422, "inputs[1]"),
    ("/fill_mask", b'{"inputs": "no mask here"}', 422, "inputs"),
    ("/fill_mask", b'{"inputs": ["<mask>", "x"]}', 422, "inputs[1]"),
    ("/fill_mask", b'{"inputs": "<mask>", "top_k": true}', 422, "top_k"),
    ("/decode", b'{"ids": [0, 99999]}', 422, "ids[1]"),
    ("/decode", b'{"ids": [[0], [1.5]]}', 422, "ids[1][0]"),
    ("/tokenize", b'{"inputs": {"a": 1}}', 422, "inputs"),
]


@pytest.mark.parametrize(("path", "body", "status", "field"), BAD, ids=[f"{p} {b[:40]!r}" for p, b, _, _ in BAD])
def test_bad_input_gets_4xx_naming_the_field(live, path, body, status, field):
    client, _ = live
    response = client.post(path, content=body, headers={"content-type": "application/json"})
    assert response.status_code == status, response.text
    error = response.json()
    named = error["error"]["param"] if path.startswith("/v1") else error["field"]
    assert named == field, error


def test_unknown_routes_and_oversized_bodies(live):
    client, _ = live
    assert client.get("/nowhere").json()["error_type"] == "Route"
    assert client.get("/embed").status_code == 405
    huge = client.post("/embed", json={"inputs": "x" * 2_100_000})
    assert huge.status_code == 413 and huge.json()["field"] == "body"
    assert client.post("/embed", json={"inputs": "still serving"}).status_code == 200


def test_a_full_queue_answers_429_at_once(hub):
    with serving(hub, max_concurrent_requests=2, retry_after_s=3) as (url, server):
        gate = Gate(server)  # one request's slot
        waiting: list[httpx.Response] = []
        thread = threading.Thread(
            target=lambda: waiting.append(httpx.post(f"{url}/embed", json={"inputs": "a"}, timeout=30))
        )
        thread.start()
        gate.wait_for_queue(1)  # the second slot
        refused = httpx.post(f"{url}/embed", json={"inputs": "b"}, timeout=30)  # answered while the gate holds
        assert refused.status_code == 429 and refused.headers["retry-after"] == "3"
        assert refused.json()["error_type"] == "Overloaded"
        gate.open()
        thread.join(30)
        assert waiting[0].status_code == 200
        assert httpx.post(f"{url}/embed", json={"inputs": "b"}, timeout=30).status_code == 200


def test_a_request_past_its_timeout_gets_504_and_the_server_goes_on(hub):
    # 1.5 s, not less: the timeout also bounds reading the body (408), which a loaded 2-core machine
    # has taken over 0.3 s to get to; the gate opens whatever happens, so the server can stop.
    with serving(hub, timeout_s=1.5) as (url, server):
        gate = Gate(server)
        try:
            late = httpx.post(f"{url}/embed", json={"inputs": "slow"}, timeout=30)
        finally:
            gate.open()
        assert late.status_code == 504 and late.json()["error_type"] == "Timeout"
        assert httpx.post(f"{url}/embed", json={"inputs": "fast"}, timeout=30).status_code == 200


def test_a_failing_batch_fails_only_its_own_request(live, hub, monkeypatch):
    client, server = live
    marker = hub.encode("zebra").tolist()[1]  # a token only the failing request holds
    features = hub.model.features

    def failing(tokens, **kwargs):
        if (tokens == marker).any():
            raise RuntimeError("the marker input broke the model")
        return features(tokens, **kwargs)

    monkeypatch.setattr(hub.model, "features", failing)
    texts = ["fine one", "zebra", "fine two", "fine three"]
    answers: dict[str, httpx.Response] = {}

    def send(text: str) -> None:
        answers[text] = httpx.post(f"{str(client.base_url).rstrip('/')}/embed", json={"inputs": [text]}, timeout=30)

    gate = Gate(server)
    threads = [threading.Thread(target=send, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    gate.wait_for_queue(len(texts))
    gate.open()
    for thread in threads:
        thread.join(30)
    failed = answers.pop("zebra")
    assert failed.status_code == 500 and failed.json()["error_type"] == "Backend"
    assert "RuntimeError: the marker input broke the model" in failed.json()["error"]
    monkeypatch.undo()
    for text, answer in answers.items():
        assert answer.status_code == 200 and torch.equal(as_tensor(answer.json()), hub.embed([text], normalize=True))
    assert client.post("/embed", json={"inputs": "zebra"}).status_code == 200


def test_non_finite_outputs_are_an_error_not_nulls(live, hub, monkeypatch):
    """JSON has no NaN: a model answering NaN (a float16 overflow, damaged weights) gets a 500
    naming it, not a list of nulls; the server goes on."""
    client, _ = live
    features = hub.model.features

    def broken(tokens, **kwargs):
        out = features(tokens, **kwargs)
        return dataclasses.replace(out, last_hidden_state=out.last_hidden_state.clone().fill_(float("nan")))

    monkeypatch.setattr(hub.model, "features", broken)
    for route, body in (("/embed", {"inputs": "a"}), ("/v1/embeddings", {"input": "a"})):
        failed = client.post(route, json=body)
        assert failed.status_code == 500 and "non-finite values (NaN or infinity)" in str(failed.json()), route
    monkeypatch.undo()
    assert client.post("/embed", json={"inputs": "a"}).status_code == 200


def test_vectors_are_written_as_float32_text():
    """The answers' floats read back to the very float32 values (as TEI writes them), in
    shorter text than the float64 expansion of ``json.dumps(tensor.tolist())``."""
    import json

    import numpy as np

    from roberta_ext.serve.app import JSONAnswer

    vectors = torch.randn(4, 384, generator=torch.Generator().manual_seed(0)).numpy()
    vectors[0, :4] = [0.1, 1e-30, -3.4e38, 0.0]
    body = JSONAnswer(vectors).body
    assert np.array_equal(np.array(json.loads(body), dtype=np.float32), vectors)
    assert len(body) < 0.7 * len(json.dumps(vectors.tolist()))
    assert json.loads(JSONAnswer({"data": list(vectors[:2])}).body)["data"][0][:2] == [0.1, 1e-30]


def test_an_int8_model_is_served_and_says_so(served_model_dir):
    int8 = roberta_ext.from_pretrained(str(served_model_dir), dtype="int8")
    with serving(int8) as (url, _):
        assert httpx.get(f"{url}/info", timeout=30).json()["model_dtype"] == "int8"
        vectors = httpx.post(f"{url}/embed", json={"inputs": TEXTS}, timeout=30).json()
    assert torch.equal(as_tensor(vectors), int8.embed(TEXTS, normalize=True))


def test_what_was_alive_at_startup_is_out_of_the_collectors_reach_while_serving(hub):
    """The model and everything loaded before the server started are frozen (``gc.freeze``) while
    it serves, so that no collection walks them on the event loop; garbage made while serving is
    still collected, and the freeze is lifted at shutdown."""
    import gc
    import weakref

    class Cycle:
        pass

    with serving(hub) as (url, _):
        assert gc.get_freeze_count() > sum(1 for _ in hub.model.modules())
        assert httpx.post(f"{url}/embed", json={"inputs": "Hi"}, timeout=30).status_code == 200
        garbage = Cycle()
        garbage.me = garbage  # type: ignore[attr-defined]
        gone = weakref.ref(garbage)
        del garbage
        gc.collect()
        assert gone() is None
    assert gc.get_freeze_count() == 0
