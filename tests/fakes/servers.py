"""Running aiohttp applications on 127.0.0.1:0 in a background event loop thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from aiohttp import web

T = TypeVar("T")


class ServerThread:
    """An event loop in a thread, so sync clients (openai's sync SDK) and async ones both work."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runners: list[web.AppRunner] = []

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 60) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def serve(self, app: web.Application, **runner_kwargs: Any) -> str:
        """Start `app` on a free port; its base URL."""

        async def start() -> str:
            options = {"handler_cancellation": True, "shutdown_timeout": 2.0, **runner_kwargs}
            runner = web.AppRunner(app, **options)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.runners.append(runner)
            port = runner.addresses[0][1]
            return f"http://127.0.0.1:{port}"

        return self.call(start())

    def run(self, fn: Callable[[], Awaitable[T]]) -> T:
        return self.call(_await(fn))

    def close(self) -> None:
        async def stop() -> None:
            for runner in reversed(self.runners):
                await runner.cleanup()

        try:
            self.call(stop(), timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)


async def _await(fn: Callable[[], Awaitable[T]]) -> T:
    return await fn()
