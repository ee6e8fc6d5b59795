"""make_app(settings): the routes and middleware of one proxy process, its edges around them."""

from __future__ import annotations

import gc
import sys
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from aiohttp.typedefs import Handler

from proxy.config import Settings
from proxy.http import files, ui, vector_stores
from proxy.http.body import max_body_bytes
from proxy.http.body_budget import BodyBudget
from proxy.http.browsers import BrowserPolicy
from proxy.http.chat import chat_completions
from proxy.http.decisions import decisions_route
from proxy.http.keys import BODY_BUDGET, BROWSERS, SERVICES
from proxy.http.middleware import cors_headers, proxy_middleware
from proxy.http.models import list_models
from proxy.http.native_responses import (
    create_native_response,
    native_conversations,
    stored_native_response,
)
from proxy.http.operations import healthz, metrics_route
from proxy.http.passthrough import passthrough
from proxy.http.preview import preview_route
from proxy.http.responses import create_response, stored_response
from proxy.metrics import Metrics
from proxy.wiring import build_services

SWITCH_INTERVAL_S = 0.001


def settle_runtime() -> None:
    """Two settings of the interpreter for a loop that hands big work to threads.

    What start-up made (modules, settings, services) is moved out of the garbage collector's
    sight: a request that builds many objects (a long conversation's messages) triggers a full
    collection, which would otherwise walk every one of them too — a 300 ms stall of the event
    loop for 100,000 messages, 15 ms once they are set aside (objects made later are collected
    as usual). And a thread busy with a request's work (translating, rendering, hashing) gives
    the GIL back to the loop's thread after 1 ms instead of Python's default 5 ms: a /healthz
    needs a dozen turns of the loop, each of which waited up to that long.
    """
    gc.collect()
    gc.freeze()
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def make_app(settings: Settings) -> web.Application:
    """The proxy as an aiohttp application; its edges start and stop with it."""
    app = web.Application(
        middlewares=[proxy_middleware],
        client_max_size=max_body_bytes(settings.server),
    )
    metrics = Metrics()
    app[BROWSERS] = BrowserPolicy.of(settings.server)
    app[BODY_BUDGET] = BodyBudget.of(settings.server)
    app.on_response_prepare.append(cors_headers)

    async def edges(app: web.Application) -> AsyncIterator[None]:
        # auto_decompress=False: bytes go back as the upstream encoded them, never decoded twice.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        # DummyCookieJar: a cookie the upstream sets for one client must never be replayed on
        # another client's request (the session is shared by all of them).
        session = aiohttp.ClientSession(
            connector=connector,
            auto_decompress=False,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
        )
        try:
            services = await build_services(settings, session, metrics)
        except BaseException:
            await session.close()
            raise
        app[SERVICES] = services
        settle_runtime()
        try:
            yield
        finally:
            try:
                await services.aclose()
            finally:
                await session.close()

    app.cleanup_ctx.append(edges)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_route)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", list_models)
    if settings.upstream.responses == "native":
        app.router.add_post("/v1/responses", create_native_response)
        app.router.add_route("*", "/v1/responses/{tail:.+}", stored_native_response)
        app.router.add_route("*", "/v1/conversations", native_conversations)
        app.router.add_route("*", "/v1/conversations/{tail:.+}", native_conversations)
    else:
        app.router.add_post("/v1/responses", create_response)
        app.router.add_route("*", "/v1/responses/{tail:.+}", stored_response)
        app.router.add_route("*", "/v1/conversations", stored_response)
        app.router.add_route("*", "/v1/conversations/{tail:.+}", stored_response)
    app.router.add_post("/v1/enrich/preview", preview_route)
    app.router.add_get("/v1/enrich/decisions", decisions_route)
    ui.add_routes(app)
    files.add_routes(app)
    vector_stores.add_routes(app)
    # What the proxy serves itself is never forwarded, whatever the method: other methods on
    # these paths are a 405 here, not a request the upstream receives with our upstream key.
    allowed: dict[str, set[str]] = {}
    for route in app.router.routes():
        allowed.setdefault(route.resource.canonical, set()).add(route.method)  # type: ignore[union-attr]
    for path, methods in allowed.items():
        app.router.add_route("*", path, not_allowed(sorted(methods - {"HEAD"})))
    app.router.add_route("*", "/v1/files/{tail:.*}", not_found)
    app.router.add_route("*", "/v1/vector_stores/{tail:.*}", not_found)
    app.router.add_route("*", "/{tail:.*}", passthrough)
    return app


def not_allowed(allowed: list[str]) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        raise web.HTTPMethodNotAllowed(request.method, allowed)

    return handler


async def not_found(request: web.Request) -> web.StreamResponse:
    raise web.HTTPNotFound()
