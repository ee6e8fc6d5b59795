"""What operators call: GET /healthz and GET /metrics."""

from __future__ import annotations

from aiohttp import web

from proxy.http.keys import SERVICES
from proxy.upstream.health import check_upstream


async def healthz(request: web.Request) -> web.Response:
    """The proxy is up; is the upstream reachable? (llama.cpp `/health`, else `/v1/models`)."""
    upstream = request.app[SERVICES].upstream
    details = {"ocr": request.app[SERVICES].parser.ocr.describe()}
    health = await check_upstream(upstream)
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
    body = request.app[SERVICES].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})
