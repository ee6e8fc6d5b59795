"""make_app(settings): routes, middleware and the shared resources of one proxy process."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import structlog
import yarl
from aiohttp import web

from .chat import chat_completions
from .config import Settings
from .edges import data_dir, make_files, make_formats, make_parser, make_retriever
from .errors import ProxyError
from .files_api import add_routes as add_file_routes
from .guarding import GuardedTexts
from .introspection import ModelIntrospection
from .keys import REQUEST_ID, ROUTE, SERVICES, UPSTREAM_SECONDS
from .metrics import Metrics
from .middleware import proxy_middleware
from .preview import preview_route
from .services import Services
from .stages.decide import TokenCache
from .upstream.client import UpstreamClient
from .upstream.relay import relay_response, translate_client_error, upstream_request_headers
from .upstream.spawn import LlamaServer

log = structlog.get_logger(__name__)


async def passthrough(request: web.Request) -> web.StreamResponse:
    """Any other method and path: relayed unchanged, both ways."""
    upstream = request.app[SERVICES].upstream
    headers = upstream_request_headers(
        request.headers,
        api_key=upstream.settings.api_key,
        request_id=request[REQUEST_ID],
        proxy_keys=bool(request.app[SERVICES].settings.server.api_keys),
    )
    body = await request.read()
    url = upstream.url(request.raw_path)
    loop = asyncio.get_running_loop()
    sent = loop.time()
    try:
        async with upstream.open(
            request.method,
            yarl.URL(url, encoded=True),
            data=body if body else None,
            headers=headers,
            allow_redirects=False,
        ) as response:
            request[UPSTREAM_SECONDS] = loop.time() - sent
            return await relay_response(
                request, response, extra_headers={"X-Request-ID": request[REQUEST_ID]}
            )
    except (TimeoutError, aiohttp.ClientError) as exc:
        raise translate_client_error(exc, upstream.base_url) from exc


async def chat_route(request: web.Request) -> web.StreamResponse:
    request[ROUTE] = "chat"
    return await chat_completions(request)


async def healthz(request: web.Request) -> web.Response:
    """The proxy is up; is the upstream reachable? (llama.cpp `/health`, else `/v1/models`)."""
    upstream = request.app[SERVICES].upstream
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
            },
            status=503,
        )
    healthy = status < 500
    return web.json_response(
        {"status": "ok" if healthy else "degraded", "proxy": "ok", "upstream": status},
        status=200 if healthy else 503,
    )


async def metrics_route(request: web.Request) -> web.Response:
    body = request.app[SERVICES].metrics.render()
    return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4"})


async def start_local_upstream(settings: Settings) -> LlamaServer | None:
    """`upstream.spawn`: a llama-server of our own, healthy before the first request."""
    spawn = settings.upstream.spawn
    if not spawn.enabled:
        return None
    server = LlamaServer(
        binary=spawn.binary,
        model=spawn.model,
        ctx_size=spawn.ctx_size,
        extra_args=spawn.extra_args,
        log_path=data_dir(settings) / "llama-server.log",
        startup_timeout=spawn.startup_timeout_s,
    )
    log.info("starting llama-server", argv=server.argv, log=str(server.log_path))
    await server.start()
    log.info("llama-server ready", base_url=server.base_url)
    return server


def make_app(settings: Settings) -> web.Application:
    """The proxy as an aiohttp application; its edges start and stop with it."""
    app = web.Application(
        middlewares=[proxy_middleware],
        client_max_size=int(settings.server.max_body_mb * 1024 * 1024),
    )
    metrics = Metrics()

    async def edges(app: web.Application) -> AsyncIterator[None]:
        # auto_decompress=False: bytes go back as the upstream encoded them, never decoded twice.
        connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
        session = aiohttp.ClientSession(connector=connector, auto_decompress=False, trust_env=False)
        local = await start_local_upstream(settings)
        upstream_settings = settings.upstream
        if local is not None:
            upstream_settings = upstream_settings.model_copy(update={"base_url": local.base_url})
        upstream = UpstreamClient(upstream_settings, session)
        parser = make_parser(settings)
        services = Services(
            settings=settings,
            upstream=upstream,
            metrics=metrics,
            files=make_files(settings),
            parser=parser,
            tokens=ModelIntrospection(settings, upstream),
            guarded=GuardedTexts(redact_overrides=settings.guard.redact_overrides),
            token_cache=TokenCache(),
            formats=make_formats(settings),
            retriever_factory=lambda: make_retriever(settings),
        )
        app[SERVICES] = services
        try:
            yield
        finally:
            await parser.close()
            if services._retriever is not None:
                await services._retriever.close()
            await session.close()
            if local is not None:
                await local.stop()

    app.cleanup_ctx.append(edges)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics_route)
    app.router.add_post("/v1/chat/completions", chat_route)
    app.router.add_post("/v1/enrich/preview", preview_route)
    add_file_routes(app)
    app.router.add_route("*", "/{tail:.*}", passthrough)
    return app
