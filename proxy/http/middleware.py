"""Around every request: request id, proxy keys, OpenAI-shaped errors, access log, metrics."""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import time

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.typedefs import Handler

from proxy import logs
from proxy.config import ApiKey
from proxy.disk import DiskFull, disk_full
from proxy.errors import BadRequest, PayloadTooLarge, ProxyError
from proxy.http.browsers import BrowserPolicy, is_preflight
from proxy.http.keys import (
    BROWSERS,
    CALLER,
    HELD_BODY,
    REQUEST_ID,
    ROUTE,
    SERVICES,
    UPSTREAM_SECONDS,
)
from proxy.http.ui import PAGE_PATHS
from proxy.pipeline.exchange import ANONYMOUS, Caller
from proxy.pipeline.option_layers import repeated_option_header, unknown_option_header
from proxy.upstream.relay import UpstreamCut

log = structlog.get_logger("proxy.access")

# Ids we accept from clients: printable, short, no header tricks.
REQUEST_ID_SHAPE = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
PREFLIGHT = web.RequestKey("preflight", bool)
OPEN_PATHS = frozenset({"/healthz", "/metrics"})
OPEN_METHODS = frozenset({"GET", "HEAD"})


def is_open(request: web.Request) -> bool:
    """Only reading the health and metrics pages (and the /ui page's static files) needs no
    key; any other method is a request like every other (and the proxy answers it itself:
    nothing here is forwarded)."""
    return request.path in OPEN_PATHS | PAGE_PATHS and request.method in OPEN_METHODS


def target_error(request: web.Request) -> ProxyError | None:
    """Request targets the proxy refuses: absolute-form (`GET http://host/path`) would put a
    client-chosen URL where the upstream's path goes."""
    if not request.raw_path.startswith("/"):
        return BadRequest(
            "the request target must be a path (origin-form, e.g. /v1/models), not a URL",
            code="invalid_request_target",
        )
    return None


def error_response(error: ProxyError, request_id: str | None = None) -> web.Response:
    headers = {"X-Request-ID": request_id} if request_id else None
    return web.json_response(error.to_dict(), status=error.status, headers=headers)


def _http_exception_error(exc: web.HTTPException) -> ProxyError:
    if exc.status == 413:
        return PayloadTooLarge(
            f"the request body is larger than the proxy's limit (server.max_body_mb): {exc.text}",
            code="request_too_large",
        )
    kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
    if exc.status == 405:
        return ProxyError(
            f"{exc.reason}: this path is served by the proxy itself and is never forwarded",
            status=405,
            type=kind,
            code="method_not_allowed",
        )
    return ProxyError(exc.reason, status=exc.status, type=kind)


def internal_error(request_id: str) -> ProxyError:
    """A bug of the proxy's: its traceback is in the log under the request's id."""
    return ProxyError(
        f"internal proxy error; the proxy's log has its traceback under request id {request_id}:"
        " report it with that line, and ask again",
        status=500,
        type="server_error",
        code="internal_error",
    )


def preflight_response(
    browsers: BrowserPolicy, request: web.Request, request_id: str
) -> web.StreamResponse:
    """A CORS preflight, answered here (never forwarded): allowed for the origins of
    server.cors_origins, refused for any other."""
    request[PREFLIGHT] = True
    headers = browsers.preflight(request.headers)
    if headers is None:
        origin = request.headers.get("Origin", "")
        return error_response(
            ProxyError(
                f"web pages of {origin!r} may not call this proxy (server.cors_origins)",
                status=403,
                type="permission_error",
                code="cross_origin_request",
            ),
            request_id,
        )
    return web.Response(status=204, headers=headers)


async def cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer, streams and errors included: no upstream's own `Access-Control-*` header
    passes (an empty `Access-Control-Allow-Origin:` would be relayed otherwise); an allowed
    origin's page gets the proxy's."""
    if request.get(PREFLIGHT):
        return
    for name in [n for n in response.headers if n.lower().startswith("access-control-")]:
        response.headers.popall(name, None)
    browsers = request.app.get(BROWSERS)
    if browsers is None:
        return
    for name, value in browsers.response_headers(request.headers).items():
        if name == "Vary" and "Vary" in response.headers:
            value = f"{response.headers['Vary']}, {value}"
        response.headers[name] = value


def caller_of(request: web.Request, keys: list[ApiKey]) -> Caller | None:
    """The identity of the proxy key the request presents, or None when it presents none of
    them. Every key is compared (in constant time), so timing tells nothing about which."""
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        token = request.headers.get("X-Api-Key", "")
    presented = token.strip().encode()
    found = None
    for key in keys:
        if hmac.compare_digest(presented, key.key.encode()) and found is None:
            found = Caller(key.name, key.admin)
    return found


def client_gone(request: web.Request) -> bool:
    """The client's connection is closed or closing."""
    transport = request.transport
    return transport is None or transport.is_closing()


@web.middleware
async def proxy_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    services = request.app[SERVICES]
    metrics = services.metrics
    incoming_id = request.headers.get("X-Request-ID", "")
    request_id = incoming_id if REQUEST_ID_SHAPE.match(incoming_id) else os.urandom(16).hex()
    request[REQUEST_ID] = request_id
    # Every log line written while handling this request carries its id (each request runs in
    # its own task, so the binding is its own).
    structlog.contextvars.bind_contextvars(request_id=request_id)
    started = time.perf_counter()
    status = 500
    failure: str | None = None  # why the proxy answered an error of its own
    metrics.in_flight.inc()
    try:
        keys = services.settings.server.api_keys
        caller = caller_of(request, keys) if keys else ANONYMOUS
        if caller is not None:
            request[CALLER] = caller
        browsers = request.app.get(BROWSERS) or BrowserPolicy.of(services.settings.server)
        refused = target_error(request) or browsers.refusal(
            request.method,
            request.path,
            request.headers,
            has_body=request.body_exists,
            open_path=is_open(request),
        )
        if refused is not None:
            response: web.StreamResponse = error_response(refused, request_id)
        elif is_preflight(request.method, request.headers):
            response = preflight_response(browsers, request, request_id)
        elif caller is None and not is_open(request):
            response = error_response(
                ProxyError(
                    "a valid proxy API key is required (Authorization: Bearer <key>)",
                    status=401,
                    type="authentication_error",
                    code="invalid_api_key",
                ),
                request_id,
            )
        elif (
            unknown := unknown_option_header(request.headers)
            or repeated_option_header(name for name, _ in request.headers.items())
        ) is not None:
            response = error_response(unknown, request_id)
        else:
            try:
                response = await handler(request)
            except ProxyError as error:
                failure = error.message
                response = error_response(error, request_id)
            except web.HTTPException as exc:
                if exc.status < 400:
                    raise
                response = error_response(_http_exception_error(exc), request_id)
            except HttpProcessingError as exc:
                # The body broke HTTP's rules as it was read (bad chunked encoding...).
                message = str(exc.message).strip().splitlines()[0][:120]
                response = error_response(
                    BadRequest(f"malformed request: {message}", code="malformed_request"),
                    request_id,
                )
        if not response.prepared and "X-Request-ID" not in response.headers:
            response.headers["X-Request-ID"] = request_id
        status = response.status
        return response
    except asyncio.CancelledError:
        status = 499  # the client went away; nginx's name for it
        raise
    except UpstreamCut as cut:
        log.warning("upstream answer cut short", request_id=request_id, error=str(cut))
        status = 502
        # Closed before aiohttp marks the body's end (its write then fails quietly): the client
        # sees an incomplete body rather than a whole one.
        if request.transport is not None:
            request.transport.close()
        return cut.response
    except ConnectionResetError:
        if not client_gone(request):
            log.exception("unhandled error", request_id=request_id, path=request.path)
            status = 500
            return error_response(internal_error(request_id), request_id)
        # The client hung up while its answer was being written, before the handler could be
        # cancelled: nobody is left to answer, and nothing went wrong here.
        status = 499
        return web.Response(status=499)
    except Exception as exc:
        if disk_full(exc):
            # Whichever write met the full disk: a 507 saying so, not an internal error.
            log.warning("data folder full", request_id=request_id, error=str(exc)[:300])
            status = 507
            return error_response(DiskFull("what this request had to write"), request_id)
        log.exception("unhandled error", request_id=request_id, path=request.path)
        response = error_response(internal_error(request_id), request_id)
        status = 500
        return response
    finally:
        held = request.get(HELD_BODY)
        if held is not None:
            held.release()
        metrics.in_flight.dec()
        duration = time.perf_counter() - started
        route = request.get(ROUTE, "passthrough")
        upstream_seconds = request.get(UPSTREAM_SECONDS)
        metrics.observe_request(route, request.method, status, duration, upstream_seconds)
        if logs.enabled(logging.INFO) and not is_open(request):
            # A request the proxy failed says why on its one line (the upstream down, ...).
            failed = status >= 500 and failure is not None
            (log.warning if failed else log.info)(
                "request",
                method=request.method,
                path=request.path,
                status=status,
                duration_ms=round(duration * 1000, 2),
                upstream_ms=None if upstream_seconds is None else round(upstream_seconds * 1000, 2),
                **({"error": failure} if failed else {}),
            )
