"""Running the server: one process, or several worker processes sharing one listening socket."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import socket
from types import FrameType

import structlog
from aiohttp import web

from proxy.config import ConfigError, Settings
from proxy.http.app import make_app
from proxy.logs import configure_logging

log = structlog.get_logger(__name__)


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


def _run(settings: Settings, sock: socket.socket | None) -> None:
    configure_logging(settings.server.log_format, settings.server.log_level)
    app = make_app(settings)
    web.run_app(
        app,
        host=None if sock else settings.server.host,
        port=None if sock else settings.server.port,
        sock=sock,
        # A client that goes away cancels its handler, which closes the upstream request:
        # llama-server stops generating for nobody.
        handler_cancellation=True,
        shutdown_timeout=settings.server.shutdown_grace_s,
        access_log=None,
        print=lambda message: log.info("listening", detail=str(message).strip()),
        loop=_event_loop(),
    )


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
    if settings.server.workers == 1:
        _run(settings, None)
        return 0
    sock = socket.create_server(
        (settings.server.host, settings.server.port), reuse_port=False, backlog=1024
    )
    sock.set_inheritable(True)
    context = multiprocessing.get_context("fork")
    workers = [
        context.Process(target=_run, args=(settings, sock), name=f"proxy-worker-{index}")
        for index in range(settings.server.workers)
    ]
    for worker in workers:
        worker.start()
    log.info("workers started", count=len(workers), pids=[w.pid for w in workers])

    def forward(signum: int, frame: FrameType | None) -> None:
        for worker in workers:
            if worker.pid is not None and worker.is_alive():
                os.kill(worker.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = []
    for worker in workers:
        worker.join()
        codes.append(worker.exitcode or 0)
    sock.close()
    return 0 if all(code == 0 for code in codes) else 1
