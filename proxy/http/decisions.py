"""GET /v1/enrich/decisions: the recent requests' decision records the caller may see."""

from __future__ import annotations

from aiohttp import web

from proxy.errors import BadRequest, ProxyError
from proxy.http.keys import CALLER, ROUTE, SERVICES


def parse_limit(raw: str | None, size: int) -> int:
    """`?limit=N`, 1 or more, at most the log's size (the default)."""
    if raw is None:
        return size
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if limit < 1:
        raise BadRequest("limit must be a positive integer", param="limit", code="invalid_limit")
    return min(limit, size)


async def decisions_route(request: web.Request) -> web.Response:
    request[ROUTE] = "decisions"
    log = request.app[SERVICES].decisions
    if not log.enabled:
        raise ProxyError(
            "the decision log is off (server.decision_log_size: 0)",
            status=404,
            type="not_found_error",
            code="decision_log_off",
        )
    caller = request[CALLER]
    records = log.recent(caller, parse_limit(request.query.get("limit"), log.size))
    return web.json_response(
        {
            "object": "list",
            "data": [record.to_json() for record in records],
            "caller": {"name": caller.name, "admin": caller.admin},
            "capacity": log.size,
            "snippets": log.snippets,
        },
        headers={"Cache-Control": "no-store"},
    )
