"""An upstream that flaps on a schedule, as a llama-server being restarted, overloaded or killed
does: it answers, stops listening (connections refused, open ones dropped), answers too slowly,
answers 500s, or breaks its answers off half-way. Chat answers are the fake upstream's."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections import Counter
from dataclasses import dataclass, field

from aiohttp import web

from tests.fakes.upstream import ANSWER, RECORDED, FakeUpstream, completion, stream_chunks

PHASES = ("ok", "refused", "slow", "errors", "cut")
# llama-server's own error body (tools/server/utils.hpp format_error_response).
SERVER_ERROR = {"error": {"code": 500, "message": "flapping: try again", "type": "server_error"}}


@dataclass
class FlappingUpstream(FakeUpstream):
    """`start()` serves it on a port of its own and runs `schedule` round and round, each phase
    for `phase_s`; `served` counts chat requests by the phase that met them."""

    schedule: tuple[str, ...] = PHASES
    phase_s: float = 0.5
    slow_s: float = 3.0  # silence longer than the proxy's read timeout in the tests: before a
    # plain answer, half-way through a stream
    chunk_s: float = 0.02  # between a stream's chunks: streams span phase changes
    phase: str = "ok"
    served: Counter[str] = field(default_factory=Counter)
    port: int = 0
    _runner: web.AppRunner | None = None
    _site: web.TCPSite | None = None
    _flapping: asyncio.Task[None] | None = None

    async def start(self) -> str:
        self._runner = web.AppRunner(self.app(), handler_cancellation=True, shutdown_timeout=1.0)
        await self._runner.setup()
        await self._listen()
        return f"http://127.0.0.1:{self.port}"

    def flap(self) -> None:
        """Run the schedule from now on (on the server's loop)."""
        self._flapping = asyncio.create_task(self._run_schedule())

    async def hold(self, phase: str) -> None:
        """Stay in one phase until told otherwise."""
        await self._enter(phase)

    async def steady(self) -> None:
        """Stop flapping and answer normally again."""
        if self._flapping is not None:
            self._flapping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flapping
        await self._enter("ok")

    async def stop(self) -> None:
        await self.steady()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _run_schedule(self) -> None:
        while True:
            for phase in self.schedule:
                await self._enter(phase)
                await asyncio.sleep(self.phase_s)

    async def _enter(self, phase: str) -> None:
        if phase == "refused" and self._site is not None:
            await self._site.stop()  # nothing listens on the port any more ...
            self._site = None
            assert self._runner is not None and self._runner.server is not None
            for handler in self._runner.server.connections:  # ... and open connections drop
                if handler.transport is not None:
                    handler.transport.abort()
        elif phase != "refused" and self._site is None:
            await self._listen()
        self.phase = phase

    async def _listen(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, "127.0.0.1", self.port, reuse_address=True)
        await self._site.start()
        self.port = self._runner.addresses[-1][1]

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = request[RECORDED].json
        phase = self.phase
        self.served[phase] += 1
        if phase == "slow" and not body.get("stream"):
            await asyncio.sleep(self.slow_s)
        if phase == "errors":
            return web.json_response(SERVER_ERROR, status=500)
        if not body.get("stream"):
            answer = json.dumps(completion(body, ANSWER)).encode()
            if phase != "cut":
                return web.Response(body=answer, content_type="application/json")
            # Headers and half the body (its Content-Length says more), then the connection ends.
            response = web.StreamResponse(headers={"Content-Type": "application/json"})
            response.content_length = len(answer)
            await response.prepare(request)
            await response.write(answer[: len(answer) // 2])
            await asyncio.sleep(0.01)
            assert request.transport is not None
            request.transport.close()
            return response
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for index, chunk in enumerate(stream_chunks(body, ANSWER)):
            if phase == "cut" and index == 2:
                await asyncio.sleep(0.01)
                assert request.transport is not None
                request.transport.close()
                return response
            if phase == "slow" and index == 2:  # a stream that stalls half-way
                await asyncio.sleep(self.slow_s)
            await response.write(chunk)
            await asyncio.sleep(self.chunk_s)
        await response.write_eof()
        return response
