"""Running aiohttp applications on 127.0.0.1:0 in a background event loop thread."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from aiohttp import web

from proxy.config import Settings
from proxy.http.app import make_app
from proxy.serve import proxy_site, server_options

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

    def serve_proxy(self, settings: Settings) -> str:
        """The proxy's app served the way `serve` serves it: the same `server_options` and the
        same site (`proxy_site`), on a loopback socket of its own."""
        sock = socket.create_server(("127.0.0.1", 0))

        async def start() -> str:
            runner = web.AppRunner(make_app(settings), **server_options(settings))
            await runner.setup()
            await proxy_site(runner, sock, settings).start()
            self.runners.append(runner)
            return f"http://127.0.0.1:{sock.getsockname()[1]}"

        return self.call(start())

    def serve(self, app: web.Application) -> str:
        """Start a fake's `app` on a free port; its base URL.

        Fakes have handler cancellation on, so a fake upstream notices a proxy that hangs up.
        """

        async def start() -> str:
            runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=2.0)
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
