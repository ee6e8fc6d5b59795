"""The ordered list of stages a chat completion request goes through before it is forwarded."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from .exchange import Exchange
from .services import Services
from .stages.validate import validate_request

Stage = Callable[[Exchange, Services], Awaitable[None]]

# Read this list to know what the proxy does to a chat request, in order.
STAGES: list[tuple[str, Stage]] = [
    ("validate", validate_request),
]


async def run_pipeline(exchange: Exchange, services: Services) -> None:
    for name, stage in STAGES:
        started = time.perf_counter()
        await stage(exchange, services)
        exchange.timed(name, time.perf_counter() - started)
