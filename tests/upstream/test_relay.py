"""The transparent proxy: the real openai SDK through the proxy to a fake upstream."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import logging
import time
from collections.abc import Callable

import httpx
import openai
import pytest

from tests.fakes.upstream import (
    ANSWER,
    UPSTREAM_DATE,
    UPSTREAM_SERVER,
    FakeUpstream,
    stream_chunks,
)
from tests.retrieval.test_flow import SMALL_CHUNKS, retrieval_body
from tests.test_logs_and_secrets import json_logs, log_events

MESSAGES = [{"role": "user", "content": "Hi"}]
# The fake upstream's test routes, which no real upstream has: forwarded once allowed.
RELAYED = {"allowed_routes": ["/anything", "/gzip", "/long-sse", "/moved", "/chunked"]}


def client(base: str, **kwargs: object) -> openai.OpenAI:
    return openai.OpenAI(base_url=base + "/v1", api_key="sk-client", max_retries=0, **kwargs)  # type: ignore[arg-type]


def test_non_streamed_completion(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy()
    answer = client(base).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "".join(ANSWER)
    assert upstream.last.json["messages"] == MESSAGES
    assert upstream.last.headers["Authorization"] == "Bearer sk-client"


def test_streamed_completion(make_proxy: Callable[..., str]) -> None:
    base = make_proxy()
    stream = client(base).chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == "".join(ANSWER)


async def test_async_sdk_streamed(make_proxy: Callable[..., str]) -> None:
    base = make_proxy()
    sdk = openai.AsyncOpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
    stream = await sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    pieces = [chunk.choices[0].delta.content async for chunk in stream if chunk.choices]
    assert "".join(p or "" for p in pieces) == "".join(ANSWER)
    await sdk.close()


def test_stream_relayed_byte_for_byte(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Odd splits, CRLF, comments and a custom event: whatever the upstream sends arrives unchanged.
    upstream.chat_mode = "raw"
    upstream.raw_chunks = [
        b": ping\r\n\r\n",
        b'event: custom\ndata: {"a"',
        b": 1}\n\n",
        *stream_chunks({"model": "m"}),
    ]
    base = make_proxy()
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json={"messages": MESSAGES, "stream": True}
    ) as response:
        received = b"".join(response.iter_raw())
    assert received == b"".join(upstream.raw_chunks)


def test_stream_is_not_buffered(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    upstream.chunk_delay = 0.3
    base = make_proxy()
    arrivals = []
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json={"messages": MESSAGES, "stream": True}
    ) as response:
        for _ in response.iter_raw():
            arrivals.append(time.monotonic())
    # Chunks arrive spread over the upstream's pacing, not all at the end.
    assert len(arrivals) >= 4
    assert arrivals[-1] - arrivals[0] > 0.9


def test_unknown_fields_preserved(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy()
    client(base).chat.completions.create(
        model="m",
        messages=MESSAGES,  # type: ignore[arg-type]
        extra_body={"cache_prompt": False, "n_probs": 3, "top_k": 40, "nested": {"x": [1, 2]}},
        temperature=0.2,
    )
    sent = upstream.last.json
    assert sent["cache_prompt"] is False
    assert sent["n_probs"] == 3
    assert sent["top_k"] == 40
    assert sent["nested"] == {"x": [1, 2]}
    assert sent["temperature"] == 0.2


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "PATCH"])
def test_passthrough_any_method_and_path(
    make_proxy: Callable[..., str], upstream: FakeUpstream, method: str
) -> None:
    # With a proxy key, any body goes (without one, only JSON: see tests/http/test_browsers.py).
    key = "relay-key-0123456789"
    base = make_proxy(server={"api_keys": [key]}, upstream={"allowed_routes": ["/some/odd/*"]})
    body = b"\x00\x01binary" if method in {"POST", "PUT", "PATCH"} else b""
    response = httpx.request(
        method,
        base + "/some/odd/path?x=1&y=%20z",
        content=body,
        headers={
            "Authorization": f"Bearer {key}",
            "X-Custom": "yes",
            # Hop-by-hop by name: a comma-separated list, with or without spaces.
            "Connection": "keep-alive,X-Hop, X-Hop-Two",
            "X-Hop": "drop-me",
            "X-Hop-Two": "drop-me-too",
        },
    )
    assert response.status_code == 200
    echoed = response.json()
    assert echoed["method"] == method
    assert echoed["path"] == "/some/odd/path"
    assert echoed["query"] == "x=1&y=%20z"
    assert base64.b64decode(echoed["body_b64"]) == body
    assert echoed["headers"]["X-Custom"] == "yes"
    assert not {"x-hop", "x-hop-two", "connection"} & {h.lower() for h in echoed["headers"]}
    assert response.headers["X-Upstream-Header"] == "kept"
    # The proxy's own Server and Date, not the upstream's.
    assert response.headers["Server"] != UPSTREAM_SERVER
    assert response.headers["Date"] != UPSTREAM_DATE


def test_passthrough_status_and_models(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(upstream=RELAYED)
    assert httpx.get(base + "/anything", headers={"X-Want-Status": "418"}).status_code == 418
    models = client(base).models.list()
    assert models.data[0].id == "fake-model"


def test_gzip_relayed_once(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(upstream=RELAYED)
    raw = httpx.get(base + "/gzip", headers={"Accept-Encoding": "gzip"})
    assert raw.headers["Content-Encoding"] == "gzip"
    assert raw.json() == {"compressed": True}  # httpx decodes once: the bytes were not decoded
    assert int(raw.headers["Content-Length"]) == len(gzip.compress(b'{"compressed": true}'))


def test_long_sse_line(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(upstream=RELAYED)
    with httpx.stream("GET", base + "/long-sse") as response:
        body = b"".join(response.iter_raw())
    first = body.split(b"\n\n")[0]
    assert len(json.loads(first[len(b"data: ") :])["blob"]) == 300_000


def test_request_id_propagates(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy()
    response = httpx.post(
        base + "/v1/chat/completions",
        json={"messages": MESSAGES},
        headers={"X-Request-ID": "abc-1"},
    )
    assert response.headers["X-Request-ID"] == "abc-1"
    assert upstream.last.headers["X-Request-ID"] == "abc-1"
    generated = httpx.post(base + "/v1/chat/completions", json={"messages": MESSAGES})
    assert len(generated.headers["X-Request-ID"]) == 32
    assert upstream.last.headers["X-Request-ID"] == generated.headers["X-Request-ID"]


def test_upstream_api_key_replaces_client_key(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(upstream={"api_key": "sk-upstream"})
    client(base).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert upstream.last.headers["Authorization"] == "Bearer sk-upstream"


def test_proxy_keys(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy(server={"api_keys": ["proxy-key-0123456789"]})
    with pytest.raises(openai.AuthenticationError) as caught:
        client(base).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 401
    assert caught.value.body["type"] == "authentication_error"  # type: ignore[index]
    ok = openai.OpenAI(base_url=base + "/v1", api_key="proxy-key-0123456789", max_retries=0)
    ok.chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert httpx.get(base + "/v1/models").status_code == 401
    assert httpx.get(base + "/healthz").status_code == 200


def test_upstream_unreachable_is_502(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(upstream={"base_url": "http://127.0.0.1:9"})
    with pytest.raises(openai.APIStatusError) as caught:
        client(base).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code == 502
    assert caught.value.code == "upstream_unreachable"
    # The operating system's reason, not the whole exception's text.
    assert caught.value.body["message"] == (  # type: ignore[index]
        "upstream http://127.0.0.1:9 is unreachable: Connect call failed ('127.0.0.1', 9); "
        "start it, or point --upstream (upstream.base_url) at a running server"
    )
    response = httpx.get(base + "/v1/models")
    assert response.status_code == 502
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_upstream_timeout_is_504(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    upstream.chat_mode = "hang"
    base = make_proxy(upstream={"read_timeout_s": 0.5})
    response = httpx.post(base + "/v1/chat/completions", json={"messages": MESSAGES}, timeout=10)
    assert response.status_code == 504
    error = response.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert error["message"] == (
        f"upstream {upstream.base_url} did not answer in time; it may be busy or still loading"
        " its model: ask again, or give it longer (upstream.read_timeout_s,"
        " upstream.connect_timeout_s)"
    )


def test_body_over_limit_is_413(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy(server={"max_body_mb": 0.01})
    response = httpx.post(
        base + "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": "x" * 20_000}]},
    )
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"
    assert not upstream.requests


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b"", "empty"),
        (b'{"model": "m"}', "'messages'"),
        (b'{"messages": [1]}', "messages[0]"),
    ],
)
def test_malformed_chat_is_400(
    make_proxy: Callable[..., str], upstream: FakeUpstream, body: bytes, fragment: str
) -> None:
    base = make_proxy()
    response = httpx.post(
        base + "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert fragment in response.json()["error"]["message"]
    assert not upstream.requests


def test_upstream_error_relayed(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    upstream.chat_mode = "error"
    upstream.error_status = 400
    upstream.error_body = {
        "error": {"code": 400, "message": "too long", "type": "exceed_context_size_error"}
    }
    base = make_proxy()
    response = httpx.post(base + "/v1/chat/completions", json={"messages": MESSAGES})
    assert response.status_code == 400
    assert response.json() == upstream.error_body


def test_upstream_dies_mid_stream(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    upstream.chat_mode = "die"
    base = make_proxy()
    with httpx.stream(
        "POST",
        base + "/v1/chat/completions",
        json={"messages": MESSAGES, "stream": True},
        timeout=10,
    ) as response:
        body = b"".join(response.iter_raw())
    events = [e for e in body.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["message"] == (
        f"upstream {upstream.base_url}/v1/chat/completions broke off the stream: "
        "ClientPayloadError; its log says why (a crash, a restart): ask again"
    )
    assert error["code"] == "upstream_stream_broken"
    with pytest.raises(openai.APIError):
        stream = client(base).chat.completions.create(model="m", messages=MESSAGES, stream=True)  # type: ignore[arg-type]
        for _ in stream:
            pass


async def test_client_disconnect_cancels_upstream(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Two chunks, then silence: with nothing to write, only handler cancellation (from
    # serve's server_options) tells the proxy that its client went away.
    upstream.chat_mode = "stall"
    base = make_proxy()
    async with (
        httpx.AsyncClient() as http,
        http.stream(
            "POST", base + "/v1/chat/completions", json={"messages": MESSAGES, "stream": True}
        ) as response,
    ):
        async for _ in response.aiter_raw():
            break
    for _ in range(300):
        if upstream.disconnected.is_set():
            break
        await asyncio.sleep(0.1)
    assert upstream.disconnected.is_set()


def test_healthz_and_metrics(make_proxy: Callable[..., str], upstream: FakeUpstream) -> None:
    base = make_proxy()
    health = httpx.get(base + "/healthz")
    assert health.status_code == 200
    assert health.json()["proxy"] == "ok"
    httpx.post(base + "/v1/chat/completions", json={"messages": MESSAGES})
    metrics = httpx.get(base + "/metrics").text
    assert 'proxy_requests_total{method="POST",route="chat",status="200"} 1.0' in metrics
    assert "proxy_upstream_latency_seconds_bucket" in metrics
    assert "proxy_requests_in_flight" in metrics


def test_healthz_reports_unreachable_upstream(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(upstream={"base_url": "http://127.0.0.1:9"})
    health = httpx.get(base + "/healthz")
    assert health.status_code == 503
    assert health.json()["upstream"] == "unreachable"


def test_upstream_cookies_are_never_replayed_for_other_clients(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # Reached by a host name (cookies from bare IP addresses are never kept by aiohttp): a
    # cookie the upstream sets for one client must not ride along on anyone else's request.
    host_url = upstream.base_url.replace("127.0.0.1", "localhost")  # type: ignore[attr-defined]
    base = make_proxy(upstream={"base_url": host_url})
    upstream.set_cookie = "session=client-A-secret; Path=/"
    first = httpx.get(base + "/v1/models", headers={"Authorization": "Bearer client-a"})
    assert first.headers["Set-Cookie"].startswith("session=client-A-secret")  # relayed to A
    upstream.set_cookie = None
    httpx.get(base + "/v1/models", headers={"Authorization": "Bearer client-b"})
    assert "Cookie" not in upstream.last.headers


def test_redirects_are_relayed_not_followed(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # The client decides whether to follow: the proxy must not fetch another URL on its behalf.
    base = make_proxy(upstream=RELAYED)
    response = httpx.get(
        base + "/moved",
        headers={"X-Want-Status": "307", "X-Want-Location": "/v1/models"},
        follow_redirects=False,
    )
    assert response.status_code == 307
    assert response.headers["Location"] == "/v1/models"
    assert [entry.path for entry in upstream.requests] == ["/moved"]


def test_an_upstream_lost_after_the_stream_started_ends_it_with_an_error(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # No status delay: the document's statuses start the client's stream while the proxy
    # prepares; the upstream then drops the chat request, and the stream says so and ends.
    upstream.chat_mode = "drop"
    events = started_stream(make_proxy(server={"status_delay_s": 0.0}))
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert upstream.base_url in error["message"]
    assert error["type"] == "upstream_error"


def test_the_access_line_times_the_upstream_within_the_request(
    make_proxy: Callable[..., str], upstream: FakeUpstream, capfd: pytest.CaptureFixture[str]
) -> None:
    with json_logs("info"):
        base = make_proxy()
        client(base).chat.completions.create(model="m", messages=MESSAGES)  # type: ignore[arg-type]
        logs = capfd.readouterr()
    [line] = [e for e in log_events(logs.out + logs.err) if e["event"] == "request"]
    assert 0 <= line["upstream_ms"] <= line["duration_ms"]


def started_stream(base: str) -> list[bytes]:
    """A streamed request with a document, its stream started by the statuses (no delay)."""
    document = {
        "type": "file",
        "file": {
            "filename": "note.txt",
            "file_data": "data:text/plain;base64,"
            + base64.b64encode(b"The keeper feeds the cats.").decode(),
        },
    }
    body = {
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Who?"}, document]}],
        "stream": True,
    }
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        raw = b"".join(response.iter_raw())
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[0].startswith(b": ")  # the stream began with a status, before the upstream
    return events


@pytest.mark.parametrize(
    ("status", "error_body", "message"),
    [
        (400, {"error": {"message": "too long", "type": "x"}}, "too long"),
        (400, {"message": "flat too long"}, "flat too long"),
        (503, "loading model", '"loading model"'),
        # Not UTF-8, and long: decoded with replacement characters and cut to 2,000.
        (502, b"\xff" + b"x" * 2999, "\ufffd" + "x" * 1999),
    ],
)
def test_an_upstream_error_after_the_stream_started_becomes_an_error_event(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    status: int,
    error_body: object,
    message: str,
) -> None:
    upstream.chat_mode = "error"
    upstream.error_status = status
    upstream.error_body = error_body  # type: ignore[assignment]
    events = started_stream(make_proxy(server={"status_delay_s": 0.0}))
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert (error["message"], error["type"]) == (message, "upstream_error")


def test_an_error_typed_as_an_event_stream_is_still_an_error(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # A 400 is an error whatever its Content-Type says: its body is not relayed as events.
    upstream.chat_mode = "error"
    upstream.error_status = 400
    upstream.error_body = b"data: not an event, a refusal\n\n"
    upstream.error_content_type = "text/event-stream"
    events = started_stream(make_proxy(server={"status_delay_s": 0.0}))
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert (error["message"], error["type"]) == (
        "data: not an event, a refusal\n\n",
        "upstream_error",
    )


def test_an_error_event_after_a_broken_event_starts_an_event_of_its_own(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    # The upstream dies two bytes into an event: the error event is set apart by a blank line,
    # not glued to the broken one.
    upstream.chat_mode = "die"
    upstream.raw_chunks = [b"d", b"a", b"never sent"]
    body = {"messages": MESSAGES, "stream": True}
    with httpx.stream("POST", make_proxy() + "/v1/chat/completions", json=body, timeout=30) as r:
        raw = b"".join(r.iter_raw())
    events = raw.split(b"\n\n")
    assert events[0] == b"da"
    error = json.loads(events[1].removeprefix(b"data: "))["error"]
    assert error["code"] == "upstream_stream_broken"
    assert events[2:] == [b"data: [DONE]", b""]


def test_answers_after_the_stream_started_are_relayed_into_it(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy(server={"status_delay_s": 0.0})
    streamed = [e for e in started_stream(base) if e.startswith(b"data: {")]
    text = "".join(
        json.loads(e.removeprefix(b"data: "))["choices"][0]["delta"].get("content") or ""
        for e in streamed
    )
    assert text == "".join(ANSWER)


@pytest.mark.parametrize("started", [True, False])
def test_a_whole_answer_to_a_streamed_request_is_streamed_with_its_citations(
    make_proxy: Callable[..., str], upstream: FakeUpstream, started: bool
) -> None:
    # An upstream that ignores `stream` answers with one JSON body: the client still gets the
    # stream it asked for, citations and statuses included, whether or not the statuses had
    # already started it (no delay) or not (a delay longer than the preparation).
    upstream.chat_mode = "json"
    delay = 0.0 if started else 30.0
    base = make_proxy(retrieval=SMALL_CHUNKS, server={"status_delay_s": delay})
    body = retrieval_body("lighthouse cats sardines", stream=True)
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=60) as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert (response.headers.get("X-Enrich-Strategy") == "retrieval") is not started
        raw = b"".join(response.iter_raw()).decode()
    events = [e for e in raw.split("\n\n") if e]
    assert events[-1] == "data: [DONE]"
    assert ": Retrieving relevant citations for user query..." in events
    [chunk] = [json.loads(e.removeprefix("data: ")) for e in events if e.startswith("data: {")]
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"] == [
        {
            "index": 0,
            "finish_reason": "stop",
            "delta": {"role": "assistant", "content": "".join(ANSWER)},
        }
    ]
    assert chunk["citations"][0] == "book.pdf#page=1"
    assert chunk["usage"]["total_tokens"] == 16
    # The SDK reads it as any stream.
    stream = client(base).chat.completions.create(
        model="m",
        messages=body["messages"],
        stream=True,
        extra_body={"enrich": body["enrich"]},
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "".join(ANSWER)


def test_a_whole_answer_with_tool_calls_becomes_one_numbered_chunk(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    calls = [
        {"id": f"call_{n}", "type": "function", "function": {"name": f"f{n}", "arguments": "{}"}}
        for n in range(2)
    ]
    upstream.chat_mode = "json"
    upstream.reply = {
        "id": "chatcmpl-tools",
        "object": "chat.completion",
        "created": 7,
        "model": "fake-model",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "tool_calls": calls},
                "finish_reason": "tool_calls",
            }
        ],
    }
    stream = client(make_proxy()).chat.completions.create(
        model="m",
        messages=MESSAGES,  # type: ignore[arg-type]
        stream=True,
    )
    [chunk] = list(stream)
    assert (chunk.id, chunk.object, chunk.created) == ("chatcmpl-tools", "chat.completion.chunk", 7)
    [choice] = chunk.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.delta.tool_calls is not None
    assert [(c.index, c.id, c.function.name) for c in choice.delta.tool_calls] == [  # type: ignore[union-attr]
        (0, "call_0", "f0"),
        (1, "call_1", "f1"),
    ]


def test_a_whole_answer_that_is_not_json_fails_the_streamed_request(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.chat_mode = "json"
    upstream.reply = ["not", "an", "object"]  # JSON, but not an object
    response = httpx.post(
        make_proxy() + "/v1/chat/completions",
        json={"messages": MESSAGES, "stream": True},
        timeout=30,
    )
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "bad_upstream"
    # Once statuses started the stream, the same failure ends it as an error event.
    events = started_stream(make_proxy(server={"status_delay_s": 0.0}))
    assert events[-1] == b"data: [DONE]"
    assert json.loads(events[-2].removeprefix(b"data: "))["error"]["code"] == "bad_upstream"


def test_a_plain_body_cut_short_reaches_the_client_incomplete(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Its first bytes are out: no error answer can follow them. The connection closes before
    # the body's end is marked, so the client knows its copy is truncated; the log says why.
    with json_logs("info"):
        base = make_proxy(upstream=RELAYED)
        received = b""
        with (
            pytest.raises(httpx.RemoteProtocolError, match="incomplete"),
            httpx.stream("GET", base + "/chunked?cut", timeout=30) as response,
        ):
            assert response.status_code == 200
            for piece in response.iter_raw():
                received += piece
        assert httpx.get(base + "/healthz", timeout=30).status_code == 200  # still serving
        logs = capfd.readouterr()
    assert received == b'{"parts": '
    events = log_events(logs.out + logs.err)
    [cut] = [e for e in events if e["event"] == "upstream answer cut short"]
    assert cut["error"] == f"upstream {upstream.base_url}/chunked?cut broke off the response"
    assert [e["status"] for e in events if e.get("path") == "/chunked"] == [502]
    # Nothing crashed on the way out, in the proxy or in the server under it.
    assert not [e for e in events if e.get("level") in ("error", "critical")]
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("padding", [0, 2_000_000])
def test_status_reason_headers_and_length_are_the_upstreams(
    make_proxy: Callable[..., str], upstream: FakeUpstream, padding: int
) -> None:
    # Small answers are relayed whole, large ones as they arrive: the client sees the same.
    base = make_proxy(server={"max_body_mb": 8}, upstream=RELAYED)
    response = httpx.post(
        base + "/anything",
        content=b"x" * padding,
        headers={
            "Content-Type": "application/json",
            "X-Want-Status": "203",
            "X-Want-Reason": "Relayed As Is",
        },
        timeout=30,
    )
    assert (response.status_code, response.reason_phrase) == (203, "Relayed As Is")
    assert response.headers["X-Upstream-Header"] == "kept"
    assert response.headers["Content-Type"].startswith("application/json")
    assert int(response.headers["Content-Length"]) == len(response.content)
    assert "Transfer-Encoding" not in response.headers
    assert len(response.json()["body_b64"]) >= padding


def test_an_answer_without_a_length_is_relayed_as_it_comes(make_proxy: Callable[..., str]) -> None:
    response = httpx.get(make_proxy(upstream=RELAYED) + "/chunked", timeout=30)
    assert response.status_code == 200
    assert response.json() == {"parts": ["one", "two"]}


def test_an_upstream_dying_in_a_started_stream_ends_it_with_an_error(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.chat_mode = "die"
    events = started_stream(make_proxy(server={"status_delay_s": 0.0}))
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["message"].startswith(f"upstream {upstream.base_url}/v1/chat/completions ")
    assert error["code"] == "upstream_stream_broken"


def test_a_stream_that_stalls_past_the_read_timeout_ends_with_an_error(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    upstream.chat_mode = "stall"
    base = make_proxy(upstream={"read_timeout_s": 0.5})
    body = {"messages": MESSAGES, "stream": True}
    with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=30) as response:
        raw = b"".join(response.iter_raw())
    events = [e for e in raw.split(b"\n\n") if e]
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["message"].startswith(
        f"upstream {upstream.base_url}/v1/chat/completions did not answer in time; it may be busy"
    )
    assert error["code"] == "upstream_timeout"
