"""Preview: the decision record and the exact upstream body, without calling the model."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from .chat import prepare_exchange
from .config import Settings
from .keys import ROUTE, SERVICES
from .logs import configure_logging


async def preview_route(request: web.Request) -> web.Response:
    """POST /v1/enrich/preview: same body as chat completions; nothing is generated."""
    request[ROUTE] = "preview"
    services = request.app[SERVICES]
    exchange = await prepare_exchange(request, services)
    return web.json_response(
        {
            "object": "enrich.preview",
            "request_id": exchange.request_id,
            "strategy": exchange.strategy,
            "decision": exchange.decision,
            "timings_s": exchange.timings,
            "headers": exchange.response_headers,
            "citations": exchange.citations,
            "search_results": exchange.search_results,
            "upstream": {
                "url": services.upstream.url(exchange.upstream_path),
                "body": exchange.body,
            },
        },
        dumps=lambda value: json.dumps(value, ensure_ascii=False, indent=2),
    )


async def _preview(settings: Settings, body: bytes) -> tuple[int, Any]:
    from .app import make_app

    runner = web.AppRunner(make_app(settings))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                f"http://127.0.0.1:{port}/v1/enrich/preview",
                data=body,
                headers={"Content-Type": "application/json"},
            ) as response,
        ):
            return response.status, await response.json()
    finally:
        await runner.cleanup()


def preview_command(settings: Settings, request_file: Path) -> int:
    """`python -m proxy preview request.json`: print what the proxy would send, exit 0 or 1."""
    try:
        body = request_file.read_bytes()
    except OSError as exc:
        print(f"cannot read {request_file}: {exc.strerror}", file=sys.stderr)
        return 2
    configure_logging(settings.server.log_format, settings.server.log_level)  # to stderr
    status, answer = asyncio.run(_preview(settings, body))
    print(json.dumps(answer, ensure_ascii=False, indent=2))
    return 0 if status == 200 else 1
