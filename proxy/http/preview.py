"""POST /v1/enrich/preview: the decision record and the exact upstream body, no generation."""

from __future__ import annotations

import json

from aiohttp import web

from proxy.http.chat import prepare_exchange
from proxy.http.keys import ROUTE, SERVICES
from proxy.toolloop.loop import first_turn


async def preview_route(request: web.Request) -> web.Response:
    """POST /v1/enrich/preview: same body as chat completions; nothing is generated."""
    request[ROUTE] = "preview"
    services = request.app[SERVICES]
    exchange = await prepare_exchange(request, services)
    body = exchange.body
    if exchange.model_search is not None:  # the search loop's first turn
        body = first_turn(exchange, services.settings.tool_search)
    return web.json_response(
        {
            "object": "enrich.preview",
            "request_id": exchange.request_id,
            "strategy": exchange.strategy,
            "decision": exchange.decision.to_json(),
            "timings_s": exchange.timings,
            "headers": exchange.response_headers,
            "citations": exchange.citations,
            "search_results": exchange.search_results,
            "upstream": {
                "url": services.upstream.url(exchange.upstream_path),
                "body": body,
            },
        },
        dumps=lambda value: json.dumps(value, ensure_ascii=False, indent=2),
    )
