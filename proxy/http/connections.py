"""Connections from one client address, capped: a few hundred slow sockets cannot take every
file descriptor of the process."""

from __future__ import annotations

import asyncio
import json
import socket
from collections import Counter
from collections.abc import Callable
from typing import Any, cast

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

_REFUSAL_BODY = json.dumps(
    {
        "error": {
            "message": "too many open connections from your address "
            "(server.max_connections_per_client); close some and retry",
            "type": "rate_limit_error",
            "param": None,
            "code": "too_many_connections",
        }
    }
).encode()
REFUSAL = (
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
    b"Connection: close\r\nContent-Length: " + str(len(_REFUSAL_BODY)).encode() + b"\r\n\r\n"
) + _REFUSAL_BODY


class AddressGate:
    """Counts the open connections of each client address; past `limit` (0: no limit) a new
    one is answered 429 and closed before aiohttp ever sees it."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: Counter[str] = Counter()

    def admit(self, address: str) -> bool:
        if self.limit and self.open[address] >= self.limit:
            return False
        self.open[address] += 1
        return True

    def release(self, address: str) -> None:
        self.open[address] -= 1
        if self.open[address] <= 0:
            del self.open[address]

    def factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        return lambda: GatedProtocol(self, inner)


class GatedProtocol(asyncio.Protocol):
    """Stands in front of aiohttp's protocol for one connection and passes every event on.

    Wrapping the protocol factory is the one place aiohttp (3.14) lets a server see each
    connection before a request is parsed; its own options have no per-address cap.
    """

    def __init__(self, gate: AddressGate, make_inner: Callable[[], asyncio.Protocol]) -> None:
        self.gate = gate
        self.make_inner = make_inner
        self.inner: asyncio.Protocol | None = None
        self.address = ""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer: Any = transport.get_extra_info("peername")
        self.address = str(peer[0]) if isinstance(peer, tuple) else "local"
        if not self.gate.admit(self.address):
            log.debug("connection refused", client=self.address, reason="per-client cap")
            writer = cast(asyncio.Transport, transport)  # uvloop's are not asyncio subclasses
            writer.write(REFUSAL)
            writer.close()
            return
        self.inner = self.make_inner()
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.inner is not None:
            self.gate.release(self.address)
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.inner is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.inner is not None else None

    def pause_writing(self) -> None:
        if self.inner is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.inner is not None:
            self.inner.resume_writing()


class GatedSite(web.BaseSite):
    """A listening socket whose connections pass through an AddressGate."""

    def __init__(
        self, runner: web.BaseRunner, sock: socket.socket, gate: AddressGate, backlog: int = 1024
    ) -> None:
        super().__init__(runner, backlog=backlog)
        self._sock = sock
        self._gate = gate

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        server = self._runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._gate.factory(server), sock=self._sock, backlog=self._backlog
        )
