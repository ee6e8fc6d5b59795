"""Progress statuses of a streamed request, sent as SSE comment lines while the proxy prepares."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from aiohttp import web

log = structlog.get_logger(__name__)

KEEPALIVE_S = 15.0


def comment(line: str) -> bytes:
    # A comment line must not contain a line break, or the rest would be read as a field.
    return b": " + " ".join(line.splitlines()).encode() + b"\n\n"


class StatusChannel:
    """Collects status lines; starts the client's stream only once preparing is slow.

    A preparation that finishes within `delay_s` is answered with the upstream's own status and
    headers (so errors are real 4xx answers and the `X-Enrich-*` headers are present) and its
    statuses go out as comments ahead of the first event. Past `delay_s` the stream starts here,
    so a client waiting on a big document sees progress and does not time out.
    """

    def __init__(
        self, request: web.Request, *, enabled: bool, delay_s: float, request_id: str
    ) -> None:
        self.request = request
        self.enabled = enabled
        self.delay_s = delay_s
        self.request_id = request_id
        self.lines: list[str] = []
        self.sent = 0
        self.response: web.StreamResponse | None = None
        # Made by the background writer when there is one: most requests never need it.
        self._wake: asyncio.Event | None = None
        self._stopped = False
        self._task: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._armed = False

    def __call__(self, line: str) -> None:
        log.debug("status", line=line)
        if not self.enabled:
            return
        self.lines.append(line)
        if self._wake is not None:
            self._wake.set()
        if self._armed and self._timer is None and self._task is None:
            # Requests without documents never get here: no timer, no task, no cost.
            self._timer = asyncio.get_running_loop().call_later(self.delay_s, self._fire)

    def begin(self) -> None:
        """A streamed request: statuses may start the stream once preparing turns out slow."""
        self._armed = self.enabled

    def _fire(self) -> None:
        self._timer = None
        if not self._stopped:
            self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Request-ID": self.request_id,
            },
        )
        self.response = response
        wake = self._wake = asyncio.Event()
        await response.prepare(self.request)
        while not self._stopped:
            await self._flush()
            wake.clear()
            try:
                async with asyncio.timeout(KEEPALIVE_S):
                    await wake.wait()
            except TimeoutError:
                await response.write(b": keep-alive\n\n")
        await self._flush()

    async def _flush(self) -> None:
        assert self.response is not None
        while self.sent < len(self.lines):
            line = self.lines[self.sent]
            self.sent += 1
            await self.response.write(comment(line))

    async def finish(self) -> web.StreamResponse | None:
        """Stop the background writer; the started response, if the stream had to start early."""
        if self._timer is not None:
            self._timer.cancel()  # prepared in time: the upstream's response carries everything
            self._timer = None
        self._stopped = True
        if self._task is not None:
            # Stopped by a flag, not cancelled: a write is never cut off halfway.
            if self._wake is not None:
                self._wake.set()
            with contextlib.suppress(ConnectionError):
                await self._task
            self._task = None
        if self.response is not None:
            await self._flush()
        return self.response

    def pending(self) -> bytes:
        """Status comments not yet sent, for the start of a stream this channel did not start."""
        unsent = b"".join(comment(line) for line in self.lines[self.sent :])
        self.sent = len(self.lines)
        return unsent
