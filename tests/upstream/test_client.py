"""The upstream client's timeouts, its one retry and its small JSON calls, with a fake session."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from proxy.config import UpstreamSettings
from proxy.upstream.client import UpstreamClient


class Answer:
    """Just enough of an aiohttp response for the client's JSON calls."""

    status = 200

    async def read(self) -> bytes:
        return b'{"ok": true}'

    def release(self) -> None:
        pass


class RecordingSession:
    """Records each request; the first `failures` of them fail as a dead pooled connection."""

    def __init__(self, failures: int = 0) -> None:
        self.failures = failures
        self.calls: list[tuple[str, str, dict[str, Any]]] = []

    async def request(self, method: str, url: str, **kwargs: Any) -> Answer:
        self.calls.append((method, url, kwargs))
        if self.failures:
            self.failures -= 1
            raise aiohttp.ServerDisconnectedError()
        return Answer()


def client(session: RecordingSession, **settings: Any) -> UpstreamClient:
    upstream = UpstreamSettings(base_url="http://upstream.test", **settings)
    return UpstreamClient(upstream, session)  # type: ignore[arg-type]


def test_streams_have_no_total_cap_and_probes_have_one() -> None:
    upstream = client(RecordingSession(), connect_timeout_s=4, read_timeout_s=90)
    # A long generation is not a hung one: only connecting and silence between reads count.
    assert upstream.stream_timeout == aiohttp.ClientTimeout(
        total=None, sock_connect=4, sock_read=90
    )
    # The proxy's own small calls give up after 30 s at most (or the connect timeout if longer).
    assert upstream.probe_timeout == aiohttp.ClientTimeout(total=30.0, sock_connect=4)
    assert client(RecordingSession(), connect_timeout_s=45).probe_timeout.total == 45


async def test_json_calls_use_the_probe_timeout_and_plain_json() -> None:
    session = RecordingSession()
    upstream = client(session, api_key="sk-up")
    assert await upstream.post_json("/tokenize", {"content": "x"}) == (200, {"ok": True})
    assert await upstream.get_json("/props") == (200, {"ok": True})
    (post, post_url, posted), (get, get_url, got) = session.calls
    assert (post, post_url, get, get_url) == (
        "POST",
        "http://upstream.test/tokenize",
        "GET",
        "http://upstream.test/props",
    )
    assert posted["data"] == b'{"content": "x"}' and got["data"] is None
    assert posted["timeout"] is upstream.probe_timeout and got["timeout"] is upstream.probe_timeout
    assert posted["headers"] == {
        "Authorization": "Bearer sk-up",
        "Content-Type": "application/json",
        "Accept-Encoding": "identity",
    }
    assert got["headers"] == {"Authorization": "Bearer sk-up", "Accept-Encoding": "identity"}


async def test_a_dead_pooled_connection_is_retried_once_with_the_same_request() -> None:
    session = RecordingSession(failures=1)
    upstream = client(session)
    async with upstream.open("POST", "http://upstream.test/x", data=b"body", headers={"A": "1"}):
        pass
    first, second = session.calls
    assert first == second
    assert second[2] == {"data": b"body", "headers": {"A": "1"}, "timeout": upstream.stream_timeout}
    with pytest.raises(aiohttp.ServerDisconnectedError):
        await client(RecordingSession(failures=2)).send("GET", "http://upstream.test/y")
