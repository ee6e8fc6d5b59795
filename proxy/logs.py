"""structlog set-up: JSON or console lines, one level for the whole process, libraries' too."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


# The level configured last; `enabled` reads it (a filtered structlog call still builds its
# arguments, and asking a lazy logger proxy costs more than comparing two numbers).
_level = logging.INFO
_format = "console"

QUIET_LIBRARIES = {"bm25s": logging.WARNING}
"""Libraries that log what no user needs at a level below it: bm25s sets its own logger to
DEBUG and says "Building index from tokens" for every index it builds."""

UPSTREAM_DOWN = frozenset({"upstream_unreachable", "upstream_timeout"})
"""Failures the request's own line and /healthz report (and, at start, "upstream not
answering"): a probe that meets one adds nothing for the user."""

CHILD_LOG = "ENRICH_PROXY_CHILD_LOG"
"""Tells a child process (a parse worker) the format and level to log in: `json:warning`."""


def enabled(level: int) -> bool:
    """Whether a line at `level` would be written: skip building what nobody will read."""
    return level >= _level


def _renderer(fmt: str) -> structlog.types.Processor:
    if fmt == "json":
        return structlog.processors.JSONRenderer()
    return structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())


def _processors(fmt: str) -> list[structlog.types.Processor]:
    return [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info,
        _renderer(fmt),
    ]


class CurrentStderr:
    """sys.stderr as it is when a line is written, not when logging was set up: whatever
    replaces it later (a test's capture, a supervisor's pipe) gets the lines, and a stream
    closed since then is never written to."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()

    def isatty(self) -> bool:
        return sys.stderr.isatty()


class LibraryLines(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes the standard library's records (aiohttp's, the libraries') as the proxy's own
    lines: the same format, with the logger's name."""

    def __init__(self, fmt: str, level: int) -> None:
        super().__init__(CurrentStderr())
        self.setLevel(level)
        self.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=[
                    structlog.stdlib.add_logger_name,
                    structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True),
                ],
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    _renderer(fmt),
                ],
            )
        )


def _route_libraries(fmt: str, level: int) -> None:
    """One handler of ours on the root logger (a second call replaces it; others stay)."""
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, LibraryLines)]:
        root.removeHandler(handler)
    # A library that sets its own logger's level (bm25s: DEBUG, when imported) would otherwise
    # reach the handler with every debug line.
    root.addHandler(LibraryLines(fmt, max(level, logging.WARNING)))
    # What libraries say below a warning is for their own developers.
    root.setLevel(max(level, logging.WARNING))
    for name, quiet in QUIET_LIBRARIES.items():
        logging.getLogger(name).setLevel(max(level, quiet))


def log_line(fmt: str, level: str, event: str, **fields: object) -> None:
    """One info line in the log's format, without configuring logging for the process (which
    `serve` does, once it has everything loaded)."""
    if LEVELS[level] > logging.INFO:
        return
    line = structlog.wrap_logger(structlog.PrintLogger(sys.stderr), processors=_processors(fmt))
    line.info(event, **fields)


def configure_logging(fmt: str = "console", level: str = "info") -> None:
    """Route structlog (and stdlib logging, e.g. aiohttp's) to stderr in the chosen format."""
    global _level, _format
    _level = LEVELS[level]
    _format = fmt
    structlog.configure(
        processors=_processors(fmt),
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(file=CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )
    _route_libraries(fmt, LEVELS[level])
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, OneLineClientErrors) for f in server_log.filters):
        server_log.addFilter(OneLineClientErrors())


def child_environment() -> dict[str, str]:
    """What a child process needs to log as this one does (server.log_format, log_level)."""
    level = next(name for name, value in LEVELS.items() if value == _level)
    return {CHILD_LOG: f"{_format}:{level}"}


def configure_from_environment(environ: dict[str, str]) -> None:
    """A child's logging, as its parent's `child_environment` said (nothing said: as before)."""
    fmt, _, level = environ.get(CHILD_LOG, "").partition(":")
    if fmt in ("console", "json") and level in LEVELS:
        configure_logging(fmt, level)


def probe_failed(logger: Any, event: str, code: str | None, message: str, **fields: Any) -> None:
    """A question to the upstream that failed: a warning, unless the upstream is down, which
    the request's own line says (debug then, not one line per probe)."""
    write = logger.debug if code in UPSTREAM_DOWN else logger.warning
    write(event, error=message, **fields)


class OneLineClientErrors(logging.Filter):
    """aiohttp logs a request it cannot parse (a 10 KB header line, a `*` target) with a
    traceback; it is the client's error, answered 400: one line is enough."""

    def filter(self, record: logging.LogRecord) -> bool:
        from aiohttp.http_exceptions import HttpProcessingError

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            reason = str(error.message).strip().splitlines()[0][:120]
            record.msg, record.args = "bad request from a client (400): %s", (reason,)
            record.exc_info, record.exc_text = None, None
            record.levelno, record.levelname = logging.INFO, "INFO"
        return True
