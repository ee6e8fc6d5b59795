"""What operators call: GET /healthz and GET /metrics."""

from __future__ import annotations

from aiohttp import web

from proxy.errors import ProxyError
from proxy.http.keys import CALLER, SERVICES


async def healthz(request: web.Request) -> web.Response:
    """The proxy is up; is the upstream reachable? (llama.cpp `/health`, else `/v1/models`).
    `details.upstream` says what kind of server it is and, with server.api_keys to an admin key
    only (as /metrics' document sources), the windows learnt per model: the model names are
    what callers sent, and a window raised for Ollama tells how long someone's prompt was."""
    services = request.app[SERVICES]
    upstream = services.upstream
    caller = request.get(CALLER)
    detailed = not services.settings.server.api_keys or (caller is not None and caller.admin)
    # What was learnt of the upstream so far (its kind, the windows seen), asked of nobody.
    known = services.introspection.known(detailed)
    details = {"ocr": services.parser.ocr.describe(), "upstream": known}
    try:
        status, _ = await upstream.get_json("/health")
        if status == 404:
            status, _ = await upstream.get_json("/v1/models")
    except ProxyError as error:
        return web.json_response(
            {
                "status": "degraded",
                "proxy": "ok",
                "upstream": "unreachable",
                "detail": error.message,
                "details": details,
            },
            status=503,
        )
    healthy = status < 500
    return web.json_response(
        {
            "status": "ok" if healthy else "degraded",
            "proxy": "ok",
            "upstream": status,
            "details": details,
        },
        status=200 if healthy else 503,
    )


async def metrics_route(request: web.Request) -> web.Response:
    """Open to any scraper; with server.api_keys, the sources of documents read (which tell
    whether someone sent the same bytes before) only to an admin key."""
    services = request.app[SERVICES]
    caller = request.get(CALLER)
    detailed = not services.settings.server.api_keys or (caller is not None and caller.admin)
    body = services.metrics.render(detailed)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})
