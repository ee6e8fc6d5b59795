"""GET /ui: the page that shows recent decisions and a preview playground, and its assets."""

from __future__ import annotations

from functools import cache
from importlib import resources

from aiohttp import web

from proxy.errors import ProxyError
from proxy.http.keys import ROUTE, SERVICES

# The page is static and holds no data, so it loads without a key and asks for one; the data
# comes from /v1/enrich/decisions and the other routes, which need the key like any route.
ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
PAGE_PATHS = frozenset({"/ui", *(f"/ui/{name}" for name in ASSETS if name != "index.html")})

# Only the proxy's own files and requests: no inline scripts or styles, no other origin.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@cache
def asset(name: str) -> bytes:
    """A file of the page, shipped as package data (read once)."""
    return resources.files("proxy.http").joinpath("static", name).read_bytes()


def _serve(request: web.Request, name: str) -> web.Response:
    request[ROUTE] = "ui"
    if not request.app[SERVICES].decisions.enabled:
        raise ProxyError(
            "the page is off (server.decision_log_size: 0)",
            status=404,
            type="not_found_error",
            code="ui_off",
        )
    if name not in ASSETS:
        raise ProxyError(f"no such file: {name}", status=404, type="not_found_error")
    return web.Response(
        body=asset(name), content_type=None, headers={**PAGE_HEADERS, "Content-Type": ASSETS[name]}
    )


async def page(request: web.Request) -> web.Response:
    return _serve(request, "index.html")


async def page_asset(request: web.Request) -> web.Response:
    return _serve(request, request.match_info["name"])


def add_routes(app: web.Application) -> None:
    app.router.add_get("/ui", page)
    app.router.add_get("/ui/{name}", page_asset)
