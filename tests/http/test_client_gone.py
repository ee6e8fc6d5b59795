"""A client that hangs up while its answer is written: a 499, never an "unhandled error"."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import httpx
import pytest
from aiohttp import web
from structlog.testing import capture_logs

from proxy.config import Settings
from proxy.http.keys import SERVICES
from proxy.http.middleware import proxy_middleware
from proxy.metrics import Metrics
from proxy.upstream.relay import ClientGone, _pump
from tests.fakes.servers import ServerThread


class DeadClientResponse:
    """Stands in for a StreamResponse whose client has gone: every write fails."""

    def __init__(self) -> None:
        self.writes = 0

    async def write(self, data: bytes) -> None:
        self.writes += 1
        raise ConnectionResetError("Cannot write to closing transport")

    async def write_eof(self) -> None:
        raise AssertionError("nothing more is written to a client that has gone")


async def test_a_write_to_a_gone_client_is_not_taken_for_an_upstream_failure() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"data: 1\n\n"
        yield b"data: 2\n\n"

    response = DeadClientResponse()
    with pytest.raises(ClientGone):
        await _pump(response, chunks(), sse=True, url="http://upstream")  # type: ignore[arg-type]
    assert response.writes == 1  # no error event is attempted for nobody to read


def test_the_middleware_answers_499_and_logs_no_error(servers: ServerThread) -> None:
    metrics = Metrics()

    async def hung_up(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        request.transport.close()
        raise ClientGone("the client hung up during the answer")

    app = web.Application(middlewares=[proxy_middleware])
    app[SERVICES] = SimpleNamespace(metrics=metrics, settings=Settings())  # type: ignore[assignment]
    app.router.add_get("/v1/stream", hung_up)
    base = servers.serve(app)
    with capture_logs() as logs, pytest.raises(httpx.HTTPError):
        httpx.get(base + "/v1/stream")
    assert not [entry for entry in logs if entry["log_level"] in ("error", "critical")]
    assert [entry["status"] for entry in logs if entry["event"] == "request"] == [499]
    assert 'status="499"' in metrics.render().decode()


def test_a_genuine_connection_error_with_the_client_still_there_is_still_reported(
    servers: ServerThread,
) -> None:
    async def broken(request: web.Request) -> web.StreamResponse:
        raise ConnectionResetError("a bug, not a hang-up")

    app = web.Application(middlewares=[proxy_middleware])
    app[SERVICES] = SimpleNamespace(metrics=Metrics(), settings=Settings())  # type: ignore[assignment]
    app.router.add_get("/v1/broken", broken)
    base = servers.serve(app)
    with capture_logs() as logs:
        answer = httpx.get(base + "/v1/broken")
    assert answer.status_code == 500
    assert [entry["event"] for entry in logs if entry["log_level"] == "error"] == [
        "unhandled error"
    ]
