"""Clients that send what no handler expects: bodies nested past what the JSON parser takes,
ids that stand for no text, a client that hangs up (mid-body, or while its request waits), a
body that never finishes arriving (answered 408, and 503 at shutdown). Each gets a JSON answer
naming the problem (or, gone, is counted as gone), never a 500 with a traceback, and the server
goes on."""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest

from roberta_ext.serve import ServeOptions, create_app
from roberta_ext.serve.app import uvicorn_server
from tests.serve.conftest import Gate, free_port, serving
from tests.serve.test_overload import answer_of, raw_request

POST_ROUTES = ["/embed", "/v1/embeddings", "/predict", "/fill_mask", "/tokenize", "/decode"]
SLOW_HEAD = b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"


@pytest.fixture(scope="module")
def live(hub):
    with serving(hub, timeout_s=1.0) as (url, server):
        yield url, server


def sample(server, name: str, **labels: str) -> float:
    """The value of one metric sample of ``server`` (0 when it was never counted)."""
    for metric in server.metrics.registry.collect():
        for found in metric.samples:
            if found.name == name and found.labels == labels:
                return found.value
    return 0.0


@pytest.mark.parametrize("route", POST_ROUTES)
def test_a_body_nested_too_deeply_is_answered_400(live, route, caplog):
    url, _ = live
    for body in (b"[" * 5000, b'{"inputs": ' + b"[" * 5000 + b"]" * 5000 + b"}"):
        answer = httpx.post(f"{url}{route}", content=body, timeout=30)
        assert answer.status_code == 400, answer.text
        error = answer.json()
        assert "nest too deeply" in str(error)
        assert (error["error"]["param"] if route.startswith("/v1") else error["field"]) == "body"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_ids_that_stand_for_no_text_are_answered_422_naming_them(live, hub):
    """A ``madeupword`` filler of dict.txt is in the vocabulary but is no GPT-2 token: fairseq's
    ``decode`` refuses it (``int('madeupword0000')``), and so does the server, naming it."""
    url, _ = live
    dictionary = hub.inputs.dictionary
    filler = next(i for i in range(len(dictionary)) if dictionary[i].startswith("madeupword"))
    hello = hub.encode("Hello").tolist()[1:-1]
    answer = httpx.post(f"{url}/decode", json={"ids": [hello, [0, *hello, filler, 2]]}, timeout=30)
    assert answer.status_code == 422, answer.text
    assert answer.json()["field"] == f"ids[1][{len(hello) + 1}]"
    assert f"is {filler}, {dictionary[filler]!r} in the dictionary" in answer.json()["error"]
    assert httpx.post(f"{url}/decode", json={"ids": [filler]}, timeout=30).json()["field"] == "ids[0]"
    assert httpx.post(f"{url}/decode", json={"ids": hello}, timeout=30).json() == ["Hello"]


def test_a_client_that_hangs_up_mid_body_is_counted_as_gone_not_as_a_failure(live, caplog):
    url, server = live
    caplog.set_level(logging.DEBUG, logger="roberta_ext.serve")
    before = sample(server, "roberta_ext_requests_total", endpoint="embed", status="499")
    with raw_request(url, SLOW_HEAD, b'{"inputs": "'):
        pass  # closed with 88 of the 100 bytes unsent
    deadline = time.monotonic() + 10
    while sample(server, "roberta_ext_requests_total", endpoint="embed", status="499") == before:
        assert time.monotonic() < deadline, "the hang-up was not counted"
        time.sleep(0.01)
    assert sample(server, "roberta_ext_request_errors_total", endpoint="embed", kind="ClientClosed") >= 1
    assert sample(server, "roberta_ext_request_errors_total", endpoint="embed", kind="Backend") == 0
    records = [r for r in caplog.records if r.name.startswith(("roberta_ext", "uvicorn"))]
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.DEBUG, None)], records
    assert httpx.post(f"{url}/embed", json={"inputs": "still serving"}, timeout=30).status_code == 200


def test_a_client_that_hangs_up_while_its_request_waits_drops_its_work_and_slot(hub):
    """A client gone (its own timeout, a crash) while its request waits for the model: the job
    leaves the queue and the slot is free at once, as when the request is answered 504, not
    when ``timeout_s`` is over or the model has computed what nobody will read."""
    with serving(hub, max_concurrent_requests=2) as (url, server):
        gate = Gate(server)  # one slot; the model busy
        body = b'{"inputs": "a"}'
        head = SLOW_HEAD.replace(b"Content-Length: 100", b"Content-Length: %d" % len(body))
        with raw_request(url, head, body):
            gate.wait_for_queue(1)
        deadline = time.monotonic() + 10
        while sample(server, "roberta_ext_requests_total", endpoint="embed", status="499") == 0:
            assert time.monotonic() < deadline, "the hang-up was not noticed"
            time.sleep(0.01)
        assert server.worker.queue_depth == 0
        server.worker.admit().release()  # the freed slot (Overloaded if it were not)
        gate.open()


def test_a_body_that_does_not_arrive_in_time_is_answered_408_and_frees_its_slot(hub):
    with serving(hub, timeout_s=0.5, max_concurrent_requests=1) as (url, server):
        with raw_request(url, SLOW_HEAD, b'{"inputs": "abc') as connection:  # 15 of 100 bytes
            status, error = answer_of(connection)
            assert connection.recv(1) == b""  # closed: the rest of the body is no request
        assert status == 408 and error["error_type"] == "Timeout" and error["field"] == "body"
        assert "did not arrive within 0.5 s (15 bytes came)" in error["error"]
        assert sample(server, "roberta_ext_request_errors_total", endpoint="embed", kind="Timeout") == 1
        assert httpx.post(f"{url}/embed", json={"inputs": "next"}, timeout=30).status_code == 200


def test_shutdown_answers_a_body_still_arriving_503_at_once(hub):
    """With ``timeout_s`` 30 (and so 35 s of grace), a connection that sent 15 of its 100 bytes
    gets a JSON 503 as soon as shutdown begins (SIGTERM sets uvicorn's ``should_exit``), and the
    server stops: it used to hold the shutdown for the whole grace period, then get uvicorn's
    plain-text 500 (measured with ``roberta-ext serve --timeout 3``: after 8.2 s)."""
    options = ServeOptions(port=free_port(), timeout_s=30, log_level="warning")
    app = create_app(hub, options)
    server = uvicorn_server(app, options)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    with raw_request(f"http://127.0.0.1:{options.port}", SLOW_HEAD, b'{"inputs": "abc') as connection:
        while not app.state.server._reading:  # the handler waits for the rest of the body
            assert time.monotonic() < deadline, "the body is not being read"
            time.sleep(0.01)
        stopping = time.monotonic()
        server.should_exit = True
        status, error = answer_of(connection)
        answered = time.monotonic() - stopping
    thread.join(30)
    assert not thread.is_alive(), "the server did not stop"
    assert status == 503 and error == {
        "error": "the server is shutting down and the body had not all arrived",
        "error_type": "Unhealthy",
    }
    assert answered < 10, answered  # generous: at once, where it used to take the 35 s of grace
