"""What operators call: GET /healthz and GET /metrics."""

from __future__ import annotations

from aiohttp import web

from proxy.http.keys import CALLER, SERVICES
from proxy.upstream.health import check_upstream


async def healthz(request: web.Request) -> web.Response:
    """The proxy is up; is the upstream reachable? (llama.cpp `/health`, else `/v1/models`).
    `details.upstream` says what kind of server it is and, with server.api_keys to an admin key
    only (as /metrics' document sources), the windows and abilities learnt per model: the model
    names are what callers sent, and a window raised for Ollama tells how long someone's prompt
    was."""
    services = request.app[SERVICES]
    caller = request.get(CALLER)
    detailed = not services.settings.server.api_keys or (caller is not None and caller.admin)
    # What was learnt of the upstream so far (its kind, the windows seen), asked of nobody.
    known = services.introspection.known(detailed)
    abilities = services.abilities.known(detailed)
    if abilities:
        known["abilities"] = abilities  # per model: instruct and tools, each with its source
    details = {"ocr": services.parser.ocr.describe(), "upstream": known}
    health = await check_upstream(services.upstream)
    if health.status is None:
        return web.json_response(
            {
                "status": "degraded",
                "proxy": "ok",
                "upstream": "unreachable",
                "detail": health.problem,
                "details": details,
            },
            status=503,
        )
    body: dict[str, object] = {
        "status": "ok" if health.healthy else "degraded",
        "proxy": "ok",
        "upstream": health.status,
        "details": details,
    }
    if health.problem:
        body["detail"] = health.problem
    return web.json_response(body, status=200 if health.healthy else 503)


async def metrics_route(request: web.Request) -> web.Response:
    """Open to any scraper; with server.api_keys, the sources of documents read (which tell
    whether someone sent the same bytes before) only to an admin key."""
    services = request.app[SERVICES]
    caller = request.get(CALLER)
    detailed = not services.settings.server.api_keys or (caller is not None and caller.admin)
    body = services.metrics.render(detailed)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})
