"""An OpenAI-compatible server that answers chat and nothing else: every other request (the
kind probes, `/v1/models`) is held open without an answer until the client gives up — as a
gateway does that queues what it does not route, or a server behind a firewall that drops
unknown paths."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from aiohttp import web

from tests.fakes.openai_like import OpenAIServer


@dataclass
class SilentProbes(OpenAIServer):
    label: str = "silent"
    answers_models: bool = False  # True: `/v1/models` is answered (without windows)

    async def not_found(self, request: web.Request) -> web.Response:
        await asyncio.sleep(3600)  # cancelled when the client hangs up
        return web.json_response({}, status=504)

    async def models(self, request: web.Request) -> web.Response:
        if self.answers_models:
            return await super().models(request)
        return await self.not_found(request)

    def held(self) -> list[str]:
        """The paths asked that are not chat: what the proxy probed."""
        return [r.path for r in self.requests if r.path not in ("/v1/chat/completions",)]
