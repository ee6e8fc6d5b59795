"""What the client is told when a turn of the loop goes wrong in a way the fake model does not
make by itself: a refusal that is not JSON, an answer that is no chat completion, an error event
in the middle of a stream, a turn that stalls; what a stream may carry that is not a chunk; and
the connection a turn read to its end leaves to the next."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.fakes.upstream import FakeUpstream
from tests.stores.support import FAST
from tests.test_logs_and_secrets import json_logs, log_events
from tests.toolloop.support import (
    Proxy,
    events,
    in_turn,
    model,
    ready,
    search_then_answer,
    searching_chat,
)

KEEPER = "lighthouse keeper fed the cats"
HELP = "; its log says why: ask again, or search once instead (enrich.search: once, "
HELP += "X-Enrich-Search: once)"


@pytest.fixture
def base(make_proxy: Proxy) -> str:
    return make_proxy(vector_stores=FAST)


def asked(base: str, store_id: str, **fields: Any) -> httpx.Response:
    return httpx.post(
        base + "/v1/chat/completions", json=searching_chat(store_id, **fields), timeout=60
    )


def test_a_refusal_that_is_not_json_is_told_as_its_text_cut_short(
    base: str, upstream: FakeUpstream
) -> None:
    text = b"Bad request: \xff " + b"x" * 3000  # not UTF-8, and long

    def refusal() -> web.Response:
        return web.Response(body=text, status=400, content_type="text/plain")

    model(upstream, search_then_answer(KEEPER), raw=in_turn(1, refusal))
    _, store_id, _ = ready(base)
    response = asked(base, store_id)
    said = text.decode("utf-8", "replace")[:2000]
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        f"the upstream answered 400 to turn 1 of the search loop: {said}{HELP}"
    )


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ("[1, 2]", "not a JSON object"),
        ("sardines", "Expecting value: line 1 column 1 (char 0)"),
    ],
)
def test_an_answer_that_is_no_chat_completion_is_a_bad_upstream(
    base: str, upstream: FakeUpstream, body: str, why: str
) -> None:
    def answer() -> web.Response:
        return web.Response(text=body, content_type="application/json")

    model(upstream, search_then_answer(KEEPER), raw=in_turn(1, answer))
    _, store_id, _ = ready(base)
    response = asked(base, store_id)
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["message"] == f"the upstream's answer is not a chat completion: {why}"
    assert error["code"] == "bad_upstream"


@pytest.mark.parametrize(
    ("error", "message"),
    [
        ({"message": "CUDA out of memory", "type": "server_error"}, "CUDA out of memory"),
        ({}, "the upstream failed mid-stream"),
    ],
)
def test_an_error_event_mid_stream_ends_the_answer_with_it(
    base: str, upstream: FakeUpstream, error: dict[str, Any], message: str
) -> None:
    said = {"choices": [{"index": 0, "delta": {"content": "Sardines"}}]}
    model(
        upstream, search_then_answer(KEEPER), raw=in_turn(2, lambda: events(said, {"error": error}))
    )
    _, store_id, _ = ready(base)
    response = asked(base, store_id, stream=True)
    data = [
        json.loads(line[6:]) for line in response.text.splitlines() if line.startswith("data: {")
    ]
    assert data[0]["choices"][0]["delta"]["content"] == "Sardines"
    assert data[-1]["error"]["message"] == message and data[-1]["error"]["code"] == "upstream_error"

    # Before anything was said, it is the answer's error.
    model(upstream, search_then_answer(KEEPER), raw=in_turn(1, lambda: events({"error": error})))
    whole = asked(base, store_id)
    assert whole.status_code == 502
    assert whole.json()["error"]["message"] == message
    assert whole.json()["error"]["code"] == "upstream_error"


def test_what_is_not_a_chunk_is_passed_over(base: str, upstream: FakeUpstream) -> None:
    def answer() -> web.Response:
        return events(
            b": keep-alive\n\n",
            42,
            {"id": "chatcmpl-x", "timings": {"predicted_n": 3}},  # llama.cpp's, no choices
            # An `error` beside the choices is no error event (vLLM's has no choices).
            {"choices": [{"index": 0, "delta": {"content": "Sardines."}}], "error": None},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            b"data: [DONE]\n\n",
        )

    model(upstream, search_then_answer(KEEPER), raw=in_turn(1, answer))
    _, store_id, _ = ready(base)
    response = asked(base, store_id)
    assert response.status_code == 200, response.text
    answer_ = response.json()
    assert answer_["choices"][0]["message"]["content"] == "Sardines."
    assert answer_["id"] == "chatcmpl-x"
    assert "usage" not in answer_  # the server counted nothing: no usage made up


def test_a_turn_is_not_redirected(base: str, upstream: FakeUpstream) -> None:
    # The upstream's route moved: the loop does not follow (the body would go where it was not
    # sent), and says the answer was not a chat completion.
    def moved() -> web.Response:
        return web.Response(status=307, headers={"Location": "/v1/moved"})

    model(upstream, search_then_answer(KEEPER), raw=in_turn(1, moved))
    _, store_id, _ = ready(base)
    response = asked(base, store_id)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_upstream"
    assert [r.path for r in upstream.requests][-1] == "/v1/chat/completions"


def test_the_access_line_and_metrics_count_the_loop(
    make_proxy: Proxy, upstream: FakeUpstream, capfd: pytest.CaptureFixture[str]
) -> None:
    model(upstream, search_then_answer(KEEPER))
    with json_logs("info"):
        base = make_proxy(vector_stores=FAST)
        _, store_id, _ = ready(base)
        capfd.readouterr()
        asked(base, store_id)
        logs = capfd.readouterr()
    [line] = [e for e in log_events(logs.out + logs.err) if e.get("path") == "/v1/chat/completions"]
    # The first turn's time: more than nothing, less than the whole request.
    assert 0 < line["upstream_ms"] <= line["duration_ms"]
    metrics = httpx.get(base + "/metrics", timeout=30).text
    assert 'proxy_enrich_strategy_total{strategy="retrieval"} 1.0' in metrics


def test_every_turn_carries_the_upstream_key_and_the_request_id(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    model(upstream, search_then_answer(KEEPER))
    base = make_proxy(vector_stores=FAST, upstream={"api_key": "sk-upstream"})
    _, store_id, _ = ready(base)
    answer = asked(base, store_id)
    turns = [r for r in upstream.requests if r.path == "/v1/chat/completions"]
    assert len(turns) == 2
    for turn in turns:
        assert turn.headers["Authorization"] == "Bearer sk-upstream"
        assert turn.headers["X-Request-ID"] == answer.headers["X-Request-ID"]


def test_a_turn_the_upstream_stops_answering_is_a_timeout_naming_it(
    make_proxy: Proxy, upstream: FakeUpstream
) -> None:
    # The second turn's stream stalls: the read timeout ends it as it ends any request's.
    base = make_proxy(vector_stores=FAST, upstream={"read_timeout_s": 1})
    model(upstream, search_then_answer(KEEPER), hang_in_turn=2)
    _, store_id, _ = ready(base)
    answer = asked(base, store_id)
    assert answer.status_code == 504, answer.text
    error = answer.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert error["message"].startswith(f"upstream {upstream.base_url} did not answer in time")


@pytest.mark.parametrize("stream", [False, True])
def test_a_turn_read_to_its_end_leaves_its_connection_to_the_next(
    base: str, upstream: FakeUpstream, stream: bool
) -> None:
    # The next turn goes out on the same connection: no new connection per turn (a broken-off
    # turn's connection is closed instead, which stops the upstream: test_chat_loop.py).
    tool_model = model(upstream, search_then_answer(KEEPER))
    _, store_id, _ = ready(base)
    assert asked(base, store_id, stream=stream).status_code == 200
    first, second = tool_model.peers
    assert first is not None and first == second
