"""Running the server: one process, or several worker processes sharing one listening socket."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import socket
from typing import TypedDict

import structlog
from aiohttp import web

from proxy.arenas import limit_malloc_arenas
from proxy.config import ConfigError, Settings
from proxy.errors import StartupError
from proxy.http.app import make_app
from proxy.http.connections import AddressGate, GatedSite
from proxy.http.keys import SERVICES
from proxy.logs import configure_logging
from proxy.upstream.client import UpstreamClient
from proxy.upstream.health import check_upstream
from proxy.workers import stop_with_parent, supervise

log = structlog.get_logger(__name__)

# How often an upstream that was down at start is asked again, until it answers.
UPSTREAM_RECHECK_S = 5.0


def check_workers(settings: Settings) -> None:
    """Embedded Chroma and a spawned llama-server belong to one process: refuse several workers."""
    if settings.server.workers > 1 and settings.vector_store.mode == "embedded":
        raise ConfigError(
            "config key server.workers: several workers cannot share an embedded vector store "
            "(Chroma's PersistentClient is not process-safe); set vector_store.mode: server "
            "and run 'chroma run', or use one worker per instance behind a load balancer"
        )
    if settings.server.workers > 1 and settings.upstream.spawn.enabled:
        raise ConfigError(
            "config key server.workers: upstream.spawn starts one llama-server per process; "
            "use one worker, or start llama-server yourself"
        )


def _event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where installed: 2-18% less proxy CPU per request (bench/overhead.py)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


def listening_socket(settings: Settings) -> socket.socket:
    host, port = settings.server.host, settings.server.port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        return socket.create_server((host, port), family=family, backlog=1024)
    except OSError as exc:
        raise StartupError(listen_failure(host, port, exc)) from None


def listen_failure(host: str, port: int, exc: OSError) -> str:
    """Why the proxy cannot listen on host:port, and what to do about it."""
    if exc.errno == errno.EADDRINUSE:
        return (
            f"port {port} on {host} is already in use (another proxy, or another server, is "
            f"listening there): stop it, or start on another port with --port {port + 1} "
            "(server.port)"
        )
    if exc.errno == errno.EACCES:
        return (
            f"not allowed to listen on port {port}: choose a port above 1023 with --port "
            "(server.port)"
        )
    if exc.errno == errno.EADDRNOTAVAIL or isinstance(exc, socket.gaierror):
        return (
            f"cannot listen on {host}: not an address of this machine; use 127.0.0.1 "
            "(this machine only) or 0.0.0.0 (every interface) with --host (server.host)"
        )
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"


def browser_address(settings: Settings, port: int) -> str:
    """http://host:port as a browser on this machine reaches it (a wildcard bind is loopback)."""
    host = settings.server.host
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def startup_notes(settings: Settings) -> list[str]:
    """What a user should know before the first request: settings taken another way than
    written."""
    notes = []
    if settings.upstream.dropped_v1:
        notes.append(
            f"upstream.base_url ended in /v1: using {settings.upstream.base_url} (the proxy adds "
            "/v1/... to each path itself; write the address without /v1 to silence this)"
        )
    return notes


async def watch_upstream(upstream: UpstreamClient, every: float = UPSTREAM_RECHECK_S) -> None:
    """Say at start when the upstream does not answer, and again once it does."""
    health = await check_upstream(upstream)
    if health.healthy:
        return
    log.warning(
        "upstream not answering",
        detail=(
            f"{health.problem}; /healthz answers 503 until it answers, and requests fail with 502"
        ),
    )
    while not (await check_upstream(upstream)).healthy:
        await asyncio.sleep(every)
    log.info("upstream answering", detail=f"{upstream.base_url} answers now")


def exposure_warning(settings: Settings) -> str | None:
    """A warning when the proxy listens beyond this machine with no keys: anyone reaching the
    port can use the upstream and every uploaded file."""
    if settings.server.api_keys:
        return None
    host = settings.server.host
    if host == "localhost":
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass  # a host name: it may resolve beyond loopback
    return (
        f"listening on {host} without server.api_keys: anyone who can reach this port can use "
        "the upstream and read every uploaded file"
    )


class ServerOptions(TypedDict):
    """How aiohttp serves the proxy's application (keyword arguments of `web.AppRunner`)."""

    handler_cancellation: bool
    shutdown_timeout: float
    access_log: logging.Logger | None
    keepalive_timeout: float


def server_options(settings: Settings) -> ServerOptions:
    """The one place these are set: `serve` uses them, and so do the tests' servers.

    The body size limit (`server.max_body_mb`) belongs to the application (`make_app`), the
    per-client connection cap to the site (`proxy_site`).
    """
    server = settings.server
    return ServerOptions(
        # A client that goes away cancels its handler, which closes the upstream request:
        # llama-server stops generating for nobody.
        handler_cancellation=True,
        shutdown_timeout=server.shutdown_grace_s,
        access_log=None,  # the proxy's middleware writes the access line, with the request id
        # aiohttp closes a connection whose next request's headers are not complete this long
        # after it opened or after the last answer: the header read timeout.
        keepalive_timeout=server.header_timeout_s,
    )


def proxy_site(runner: web.AppRunner, sock: socket.socket, settings: Settings) -> GatedSite:
    """The listening site: `sock`, with at most `max_connections_per_client` per address."""
    return GatedSite(runner, sock, AddressGate(settings.server.max_connections_per_client))


async def _serve(settings: Settings, sock: socket.socket) -> None:
    # Signals are the serving process's own (tests serve from a thread, where they cannot be).
    runner = web.AppRunner(make_app(settings), handle_signals=True, **server_options(settings))
    await runner.setup()
    try:
        site = proxy_site(runner, sock, settings)
        await site.start()
        log.info("listening", detail=site.name)
        address = browser_address(settings, sock.getsockname()[1])
        if settings.server.decision_log_size:
            log.info("web page", detail=f"open {address}/ui to see what the proxy decides")
        watcher = asyncio.create_task(watch_upstream(runner.app[SERVICES].upstream))
        try:
            while True:
                await asyncio.sleep(3600)
        finally:
            watcher.cancel()
    finally:
        await stop_within(runner, settings.server.shutdown_grace_s)


async def stop_within(runner: web.AppRunner, grace_s: float) -> None:
    """Stop listening, give in-flight requests `grace_s` to finish, then close what is left.

    aiohttp's cleanup waits the grace for the handlers, then asks them to stop and waits the
    grace once more: a stream that never ends (a long generation) would hold the process for
    twice the grace. After the grace every connection still open is closed, which cancels its
    handler (handler_cancellation), so the whole shutdown takes the grace and no more.
    """
    cleanup = asyncio.ensure_future(runner.cleanup())
    done, _ = await asyncio.wait({cleanup}, timeout=grace_s)
    if not done:
        server = runner.server
        for connection in list(server.connections if server is not None else ()):
            connection.force_close()
        if server is not None:
            log.info("shutdown grace over: open connections closed", grace_s=grace_s)
    await cleanup


def _run(settings: Settings, sock: socket.socket, parent: int | None = None) -> None:
    """One serving process until SIGTERM/SIGINT (then in-flight requests get the grace)."""
    if parent is not None:
        stop_with_parent(parent)
    limit_malloc_arenas()  # before the threads that would each take an arena
    configure_logging(settings.server.log_format, settings.server.log_level)
    loop = _event_loop()
    asyncio.set_event_loop(loop)
    main = loop.create_task(_serve(settings, sock))
    try:
        loop.run_until_complete(main)
    except (web.GracefulExit, KeyboardInterrupt):
        pass  # raised by the signal handler while `main` waits: stop it below, gracefully
    finally:
        # As aiohttp's run_app does: cancelling `main` runs its `finally`, where
        # runner.cleanup() stops listening and gives in-flight requests the grace.
        main.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            loop.run_until_complete(main)
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def check_formats(settings: Settings) -> None:
    """Instruct-format presets are validated before the server starts, not per request."""
    from proxy.errors import ProxyError
    from proxy.wiring import make_formats

    try:
        make_formats(settings)
    except ProxyError as error:
        raise ConfigError(f"config key formats: {error.message}") from error


def serve(settings: Settings) -> int:
    check_workers(settings)
    check_formats(settings)
    from proxy.wiring import ocr_of

    ocr_of(settings)  # documents.ocr.enabled: true without Tesseract's data stops here
    configure_logging(settings.server.log_format, settings.server.log_level)
    warning = exposure_warning(settings)
    if warning:
        log.warning("no proxy keys", detail=warning)
    for note in startup_notes(settings):
        log.warning("configuration", detail=note)
    sock = listening_socket(settings)
    if settings.server.workers == 1:
        _run(settings, sock)
        return 0
    sock.set_inheritable(True)
    return supervise(
        settings.server.workers, lambda sock, parent: _run(settings, sock, parent), sock
    )
