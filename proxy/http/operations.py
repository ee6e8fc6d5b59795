"""What operators call: GET /healthz and GET /metrics."""

from __future__ import annotations

from aiohttp import web

from proxy.http.keys import CALLER, SERVICES
from proxy.upstream.health import check_upstream


async def healthz(request: web.Request) -> web.Response:
    """The proxy is up; is the upstream reachable? (llama.cpp `/health`, else `/v1/models`).
    `details.model_files` says where each model file was found, or where it was looked for and
    what to do (`missing_model_files` names those missing; the proxy serves on without them).
    `details.upstream` says what kind of server it is and, with server.api_keys to an admin key
    only (as /metrics' document sources), the windows and abilities learnt per model: the model
    names are what callers sent, and a window raised for Ollama tells how long someone's prompt
    was."""
    services = request.app[SERVICES]
    caller = request.get(CALLER)
    detailed = not services.settings.server.api_keys or (caller is not None and caller.admin)
    # What was learnt of the upstream so far (its kind, the windows seen), asked of nobody.
    known = services.introspection.known(detailed)
    details: dict[str, object] = {"ocr": services.parser.ocr.describe(), "upstream": known}
    abilities = services.abilities.known(detailed)
    if abilities:
        known["abilities"] = abilities  # per model: instruct and tools, each with its source
    missing: list[str] = []
    if services.model_files is not None:
        # Where each was found or looked for are the operator's paths: an admin's with keys.
        files = services.model_files.report()
        details["model_files"] = [
            f.to_json() if detailed else {"name": f.name, "state": f.state} for f in files
        ]
        missing = [f.name for f in files if f.state != "present"]
    health = await check_upstream(services.upstream)
    if health.status is None:
        body: dict[str, object] = {
            "status": "degraded",
            "proxy": "ok",
            "upstream": "unreachable",
            "detail": health.problem,
        }
        status = 503
    else:
        body = {"status": "ok" if health.healthy else "degraded", "proxy": "ok"}
        body["upstream"] = health.status
        if health.problem:
            body["detail"] = health.problem
        status = 200 if health.healthy else 503
    # A missing model file leaves the proxy serving (chats, whole documents): not a 503.
    if missing:
        body["missing_model_files"] = missing
    body["details"] = details
    return web.json_response(body, status=status)


async def metrics_route(request: web.Request) -> web.Response:
    """Open to any scraper; with server.api_keys, the sources of documents read (which tell
    whether someone sent the same bytes before) only to an admin key."""
    services = request.app[SERVICES]
    caller = request.get(CALLER)
    detailed = not services.settings.server.api_keys or (caller is not None and caller.admin)
    body = services.metrics.render(detailed)
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})
