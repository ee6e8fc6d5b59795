"""The per-request code made cheap for speed still does exactly what it did: metrics, JSON
bodies, header filtering, the upstream retry, the end of a broken stream, log levels."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import structlog
from multidict import CIMultiDict

from proxy import logs
from proxy.config import UpstreamSettings
from proxy.errors import BadRequest
from proxy.http.body import parse_body, serialise
from proxy.metrics import Metrics
from proxy.pipeline.strategy import Strategy
from proxy.upstream.client import UpstreamClient
from proxy.upstream.headers import end_to_end
from proxy.upstream.relay import _pump

# -- metrics ----------------------------------------------------------------------------------


def sample(text: str, line_start: str) -> float:
    lines = [line for line in text.splitlines() if line.startswith(line_start + " ")]
    assert len(lines) == 1, (line_start, lines)
    return float(lines[0].rsplit(" ", 1)[1])


def test_histogram_buckets_are_inclusive_and_cumulative() -> None:
    metrics = Metrics()
    for seconds in (0.001, 0.0011, 0.3, 200.0):  # on a bound, just past it, mid, past the last
        metrics.observe_request("chat", "POST", 200, seconds, None)
    text = metrics.render().decode()
    bucket = 'proxy_request_duration_seconds_bucket{le="%s",route="chat"}'
    assert sample(text, bucket % "0.001") == 1  # le is inclusive: 0.001 counts here
    assert sample(text, bucket % "0.0025") == 2
    assert sample(text, bucket % "0.25") == 2
    assert sample(text, bucket % "0.5") == 3
    assert sample(text, bucket % "120.0") == 3
    assert sample(text, bucket % "+Inf") == 4
    assert sample(text, 'proxy_request_duration_seconds_count{route="chat"}') == 4
    assert sample(text, 'proxy_request_duration_seconds_sum{route="chat"}') == pytest.approx(
        200.3021
    )
    # No upstream answer yet, but the route's latency histogram is listed (at zero).
    assert sample(text, 'proxy_upstream_latency_seconds_count{route="chat"}') == 0
    assert 'proxy_request_duration_seconds_created{route="chat"}' in text


def test_counters_gauge_and_labels() -> None:
    metrics = Metrics()
    metrics.observe_request("chat", "POST", 200, 0.01, 0.005)
    metrics.observe_request("chat", "POST", 200, 0.01, 0.005)
    metrics.observe_request("passthrough", "GET", 404, 0.01, 0.005)
    metrics.strategies.labels(Strategy.RETRIEVAL).inc()
    metrics.in_flight.inc()
    metrics.in_flight.inc()
    metrics.in_flight.dec()
    metrics.prepare.observe(0.002)
    text = metrics.render().decode()
    assert sample(text, 'proxy_requests_total{method="POST",route="chat",status="200"}') == 2
    assert sample(text, 'proxy_requests_total{method="GET",route="passthrough",status="404"}') == 1
    assert sample(text, 'proxy_enrich_strategy_total{strategy="retrieval"}') == 1
    assert sample(text, "proxy_requests_in_flight") == 1
    assert sample(text, 'proxy_enrich_prepare_seconds_bucket{le="0.0025"}') == 1
    assert sample(text, 'proxy_upstream_latency_seconds_sum{route="chat"}') == pytest.approx(0.01)
    assert "# TYPE proxy_request_duration_seconds histogram" in text


# -- JSON bodies ------------------------------------------------------------------------------


async def test_body_json_module_fallbacks() -> None:
    # What orjson refuses and the json module reads is still read: NaN, huge integers, UTF-16.
    assert (await parse_body(b'{"t": NaN}'))["t"] != 0
    assert (await parse_body(b'{"seed": 1180591620717411303424}'))["seed"] == 2**70
    assert (await parse_body('{"a": "é"}'.encode("utf-16")))["a"] == "é"
    # ...and written: a huge integer goes upstream unchanged.
    assert json.loads(await serialise({"seed": 2**70, "a": "é"})) == {"seed": 2**70, "a": "é"}
    assert "é".encode() in await serialise({"a": "é"})  # UTF-8, not \u escapes


async def test_body_errors_are_the_json_modules() -> None:
    with pytest.raises(BadRequest) as caught:
        await parse_body(b'{"a": }')
    assert "Expecting value: line 1 column 7" in caught.value.message
    with pytest.raises(BadRequest):
        await parse_body(b"[1, 2]")


# -- headers ----------------------------------------------------------------------------------


def test_end_to_end_drops_hop_by_hop_connection_named_and_asked() -> None:
    incoming = CIMultiDict(
        [
            ("Host", "proxy"),
            ("Connection", "keep-alive, X-Hop"),
            ("x-hop", "1"),
            ("Accept", "a"),
            ("X-Many", "1"),
            ("Transfer-Encoding", "chunked"),
            ("X-Many", "2"),
            ("Accept-Encoding", "gzip"),
        ]
    )
    kept = end_to_end(incoming, ("ACCEPT-encoding",))
    assert list(kept.items()) == [("Accept", "a"), ("X-Many", "1"), ("X-Many", "2")]
    # The cached drop set of one call site does not leak the Connection names into the next.
    assert "x-hop" in end_to_end(CIMultiDict([("X-Hop", "2")]), ("ACCEPT-encoding",))


# -- the upstream's one retry -----------------------------------------------------------------


class FlakySession:
    """Fails the first `failures` requests as a dead pooled connection does."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls = 0

    async def request(self, method: str, url: str, **kwargs: Any) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise aiohttp.ServerDisconnectedError()
        return "response"


async def test_a_dead_pooled_connection_is_retried_once() -> None:
    once = FlakySession(failures=1)
    client = UpstreamClient(UpstreamSettings(), once)  # type: ignore[arg-type]
    assert await client.send("POST", "http://upstream/x") == "response"
    assert once.calls == 2
    twice = FlakySession(failures=2)
    client = UpstreamClient(UpstreamSettings(), twice)  # type: ignore[arg-type]
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client.send("POST", "http://upstream/x")
    assert twice.calls == 2


# -- a stream that breaks ---------------------------------------------------------------------


class Collected:
    def __init__(self) -> None:
        self.body = b""
        self.ended = False

    async def write(self, data: bytes) -> None:
        self.body += data

    async def write_eof(self) -> None:
        self.ended = True


def breaking(*chunks: bytes) -> AsyncIterator[bytes]:
    async def source() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk
        raise aiohttp.ClientPayloadError("cut")

    return source()


@pytest.mark.parametrize(
    ("chunks", "separated"),
    [
        ((b'data: {"a": 1}\n\n', b'data: {"a"'), True),  # cut inside an event
        ((b'data: {"a": 1}\n', b"", b"\n"), False),  # whole event, its last byte alone
        ((b'data: {"a": 1}\n\n',), False),
        ((), False),  # nothing relayed yet
    ],
)
async def test_broken_stream_ends_with_an_error_event(
    chunks: tuple[bytes, ...], separated: bool
) -> None:
    response = Collected()
    await _pump(response, breaking(*chunks), sse=True, url="http://upstream")  # type: ignore[arg-type]
    relayed = b"".join(chunks)
    assert response.body.startswith(relayed)
    rest = response.body[len(relayed) :]
    assert rest.startswith(b"\n\ndata: " if separated else b"data: ")
    assert b'"upstream_stream_broken"' in rest
    assert rest.endswith(b"data: [DONE]\n\n")
    assert response.ended


# -- log levels -------------------------------------------------------------------------------


def test_enabled_follows_the_configured_level(monkeypatch: pytest.MonkeyPatch) -> None:
    # The process-wide set-up is put back afterwards: later tests' loggers must not cache it.
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, root_level = list(root.handlers), root.level
    monkeypatch.setattr(logs, "_level", logs._level)
    try:
        logs.configure_logging("json", "warning")
        assert not logs.enabled(logging.INFO)
        assert logs.enabled(logging.WARNING)
        logs.configure_logging("json", "debug")
        assert logs.enabled(logging.DEBUG)
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(root_level)
