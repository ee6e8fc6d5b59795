"""One log line per event, in the proxy's own format, saying what it means for the user."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import Callable
from typing import Any

import aiohttp
import httpx
import pytest
import structlog

from proxy.config import load_settings
from proxy.retrieval.lexical import LexicalIndex
from proxy.upstream.client import UpstreamClient
from proxy.upstream.detect import PROBES
from proxy.upstream.introspection import ModelIntrospection
from tests.test_logs_and_secrets import ENCODED, body, file_part, json_logs, log_events

CHAT = "/v1/chat/completions"


def closed_port() -> int:
    """A port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def lines_of(events: list[dict[str, Any]], request_id: str) -> list[dict[str, Any]]:
    return [e for e in events if e.get("request_id") == request_id]


@pytest.mark.parametrize("stream", [False, True])
def test_a_request_while_the_upstream_is_down_is_one_line(
    proxy_before: Callable[..., str], capfd: pytest.CaptureFixture[str], stream: bool
) -> None:
    base = proxy_before(f"http://127.0.0.1:{closed_port()}")
    request = body(file_part("q.txt", data=f"data:text/plain;base64,{ENCODED}"), stream=stream)
    with json_logs("info"):
        for _ in range(2):  # the first request learns nothing that is kept: the same again
            response = httpx.post(base + CHAT, json=request, timeout=60)
            # A stream whose progress lines went out already is a 200 ending in the error.
            assert response.status_code == 502 or (
                stream and response.status_code == 200 and "upstream_unreachable" in response.text
            ), response.text
            request_id = response.headers["X-Request-ID"]
            events = lines_of(log_events("".join(capfd.readouterr())), request_id)
            said = [(e["event"], e["level"]) for e in events]
            # The document was parsed and indexed (real events), and the request failed, saying
            # why: no "probe failed", "probed", "could not learn" line per question asked.
            assert said[-1] == ("request", "warning"), said
            assert "is unreachable" in events[-1]["error"] and events[-1]["status"] in (
                502,
                response.status_code,
            )
            assert set(said[:-1]) <= {("document parsed", "info"), ("document indexed", "info")}


@pytest.mark.parametrize("level", ["info", "debug"])
def test_libraries_write_the_proxy_s_lines_and_quiet_ones_say_nothing(
    capfd: pytest.CaptureFixture[str], level: str
) -> None:
    with json_logs(level):
        LexicalIndex.build(["the ferry leaves at seven", "the bus leaves at eight"])
        logging.getLogger("bm25s").debug("Building index from tokens")
        logging.getLogger("some.library").warning("disk %s nearly full", "/data")
        logging.getLogger("some.library").info("chatter nobody needs")
    out, err = capfd.readouterr()
    assert "Building index" not in out + err
    assert "chatter" not in out + err
    lines = [json.loads(line) for line in (out + err).splitlines() if line.strip()]
    # At debug level too: the library's own debug lines are for its developers.
    assert len(lines) == 1
    [line] = lines
    assert line["event"] == "disk /data nearly full"
    assert line["level"] == "warning" and line["logger"] == "some.library"
    assert "timestamp" in line


def test_libraries_in_the_console_format(capfd: pytest.CaptureFixture[str]) -> None:
    from proxy.logs import configure_logging

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    configure_logging("console", "info")
    # Loggers cached on first use would keep writing to this test's captured stderr, closed
    # once it ends: the proxies of later tests would fail to start.
    structlog.configure(cache_logger_on_first_use=False)
    try:
        logging.getLogger("some.library").warning("disk nearly full")
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capfd.readouterr().err
    assert "WARNING:some.library" not in err  # not the standard library's own format
    [line] = [line for line in err.splitlines() if "disk nearly full" in line]
    assert line[:4].isdigit() and "[warning  ]" in line and "some.library" in line


def test_a_build_without_a_version_has_none() -> None:
    props = next(probe for probe in PROBES if probe.path == "/props")
    assert props.version({"build_info": "b0-unknown"}) is None
    assert props.version({"build_info": "unknown"}) is None
    assert props.version({"build_info": "b6123-8a1f2c3"}) == "b6123-8a1f2c3"


def test_what_is_learnt_by_kind_waits_for_a_kind(tmp_path: Any) -> None:
    """While the upstream is down its kind is unknown: sight and abilities learnt from it then
    must fail (and be asked again), not be kept as "this kind of server does not say"."""
    settings = load_settings(
        None,
        environ={},
        overrides={
            "upstream": {"base_url": f"http://127.0.0.1:{closed_port()}"},
            "server": {"data_dir": str(tmp_path)},
        },
    )

    async def settled() -> str:
        async with aiohttp.ClientSession() as session:
            upstream = UpstreamClient(settings.upstream, session)
            return await ModelIntrospection(settings, upstream).settled_kind()

    with pytest.raises(Exception, match="unreachable") as failed:
        asyncio.run(settled())
    assert getattr(failed.value, "code", None) == "upstream_unreachable"


def test_lines_go_to_stderr_as_it_is_when_written(monkeypatch: pytest.MonkeyPatch) -> None:
    # A stream swapped after logging was set up (a test's capture, then closed) never breaks a
    # later line: the proxy's own lines and the libraries' both follow sys.stderr.
    import io

    from proxy.logs import configure_logging

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        first = io.StringIO()
        monkeypatch.setattr("sys.stderr", first)
        configure_logging("json", "info")
        logger = structlog.get_logger("some.module")
        logger.warning("first line")
        logging.getLogger("some.library").warning("first library line")
        assert "first line" in first.getvalue() and "first library line" in first.getvalue()
        first.close()
        second = io.StringIO()
        monkeypatch.setattr("sys.stderr", second)
        logger.warning("second line")
        logging.getLogger("some.library").warning("second library line")
        assert "second line" in second.getvalue() and "second library line" in second.getvalue()
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(level)
