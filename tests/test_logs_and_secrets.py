"""Logs never carry document text, file data or keys, at info level (and at debug level)."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import structlog

from proxy.logs import configure_logging
from tests.fakes.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parent.parent

DOC_MARKER = "DOCMARKER-8d1f2a-confidential-paragraph"
CLIENT_KEY = "sk-secret-marker"
UPSTREAM_KEY = "sk-upstream-marker-77c3"
PROXY_KEY = "sk-proxy-marker-1b9e"
CHAT = "/v1/chat/completions"
DOCUMENT = f"Quarterly figures. {DOC_MARKER}. End of the document.\n".encode()
ENCODED = base64.b64encode(DOCUMENT).decode()


@contextmanager
def json_logs(level: str) -> Iterator[None]:
    """The proxy's own logging set-up (JSON) for a block; the previous set-up afterwards.

    Entered inside the test: configure_logging binds the sys.stderr of the moment, and only
    during the test's call phase is that capfd's capture (it is closed after the setup phase).
    """
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, root_level = list(root.handlers), root.level
    configure_logging("json", level)
    # Loggers cached on first use would keep writing to this test's captured stderr.
    structlog.configure(cache_logger_on_first_use=False)
    try:
        yield
    finally:
        structlog.configure(**saved)
        root.handlers[:] = handlers
        root.setLevel(root_level)


def file_part(name: str, *, data: str | None = None, file_id: str | None = None) -> dict[str, Any]:
    fields: dict[str, Any] = {"filename": name}
    if data is not None:
        fields["file_data"] = data
    if file_id is not None:
        fields["file_id"] = file_id
    return {"type": "file", "file": fields}


def body(part: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Sum up."}, part]}],
        **extra,
    }


def assert_clean(logs: str) -> None:
    for secret in (DOC_MARKER, CLIENT_KEY, UPSTREAM_KEY, PROXY_KEY, ENCODED, ENCODED[:24]):
        assert secret not in logs, f"{secret!r} appears in the logs"


def log_events(logs: str) -> list[dict[str, Any]]:
    """The JSON log lines among what was captured."""
    events = []
    for line in logs.splitlines():
        with contextlib.suppress(ValueError):
            event = json.loads(line)
            if isinstance(event, dict) and "event" in event:
                events.append(event)
    return events


def access_lines(events: list[dict[str, Any]]) -> list[tuple[str, str, int]]:
    return [(e["method"], e["path"], e["status"]) for e in events if e["event"] == "request"]


@pytest.mark.parametrize("level", ["info", "debug"])
def test_no_document_text_file_data_or_keys_in_logs(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    capfd: pytest.CaptureFixture[str],
    level: str,
) -> None:
    with json_logs(level):
        logs = exercise(make_proxy, upstream, capfd)
    # What is scanned is the proxy's log: one access line per request, and the lines that
    # name what happened (so an empty or misdirected capture fails here, not passes).
    events = log_events(logs)
    assert access_lines(events) == EXERCISED
    names = {e["event"] for e in events}
    assert {"document parsed", "upstream probed"} <= names, names
    if level == "info":
        assert {e["level"] for e in events} <= {"info", "warning", "error"}
    else:
        assert {"decision", "status"} <= names, names
    assert_clean(logs)
    # The client's key was replaced by the upstream's key on the way out.
    chat = upstream.last_to(CHAT)
    assert chat.headers["Authorization"] == f"Bearer {UPSTREAM_KEY}"


# The access lines `exercise` causes, in order.
EXERCISED = [
    *[("POST", CHAT, 200)] * 3,
    ("POST", "/v1/files", 200),
    *[("POST", CHAT, 200)] * 2,
    ("POST", "/v1/enrich/preview", 200),
    ("POST", CHAT, 400),
    ("POST", CHAT, 500),
    ("GET", "/v1/models", 200),
]


def exercise(
    make_proxy: Callable[..., str], upstream: FakeUpstream, capfd: pytest.CaptureFixture[str]
) -> str:
    """Documents every way they can arrive, and the error paths; what was logged meanwhile."""
    base = make_proxy(upstream={"api_key": UPSTREAM_KEY})
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    data_url = f"data:text/plain;base64,{ENCODED}"
    with httpx.Client(base_url=base, headers=auth, timeout=60) as client:
        # Injected in full, non-streamed and streamed.
        assert client.post(CHAT, json=body(file_part("q.txt", data=data_url))).status_code == 200
        streamed = client.post(CHAT, json=body(file_part("q.txt", data=data_url), stream=True))
        assert streamed.status_code == 200
        # Bare base64, and through the Files API by id.
        assert client.post(CHAT, json=body(file_part("r.txt", data=ENCODED))).status_code == 200
        uploaded = client.post(
            "/v1/files", files={"file": ("s.txt", DOCUMENT)}, data={"purpose": "user_data"}
        )
        assert uploaded.status_code == 200, uploaded.text
        file_id = uploaded.json()["id"]
        part = file_part("s.txt", file_id=file_id)
        assert client.post(CHAT, json=body(part)).status_code == 200
        # Retrieval, the preview, a rejected document, an upstream error, a passthrough call.
        retrieval = body(part, enrich={"strategy": "retrieval"})
        assert client.post(CHAT, json=retrieval).status_code == 200
        assert client.post("/v1/enrich/preview", json=body(part)).status_code == 200
        binary = base64.b64encode(DOC_MARKER.encode() + bytes(range(32)) * 8).decode()
        rejected = client.post(CHAT, json=body(file_part("t.bin", data=binary)))
        assert rejected.status_code == 400
        upstream.chat_mode = "error"
        assert client.post(CHAT, json=body(part)).status_code == 500
        upstream.chat_mode = "auto"
        assert client.get("/v1/models").status_code == 200
    out, err = capfd.readouterr()
    return out + err


@pytest.mark.parametrize("level", ["info", "debug"])
def test_proxy_keys_stay_out_of_logs(
    make_proxy: Callable[..., str],
    upstream: FakeUpstream,
    capfd: pytest.CaptureFixture[str],
    level: str,
) -> None:
    base = make_proxy(server={"api_keys": [PROXY_KEY]}, upstream={"api_key": UPSTREAM_KEY})
    data_url = f"data:text/plain;base64,{ENCODED}"
    with json_logs(level), httpx.Client(base_url=base, timeout=60) as client:
        denied = client.post(
            CHAT, json=body(file_part("q.txt", data=data_url)), headers={"X-Api-Key": CLIENT_KEY}
        )
        assert denied.status_code == 401
        for headers in ({"Authorization": f"Bearer {PROXY_KEY}"}, {"X-Api-Key": PROXY_KEY}):
            response = client.post(
                CHAT, json=body(file_part("q.txt", data=data_url)), headers=headers
            )
            assert response.status_code == 200, response.text
    out, err = capfd.readouterr()
    assert access_lines(log_events(out + err)) == [("POST", CHAT, 401), *[("POST", CHAT, 200)] * 2]
    assert_clean(out + err)


# The proxy's own calls to the upstream, on a request's behalf, for each kind of upstream.
OWN_CALLS = {
    "llamacpp": {"/props", "/tokenize", "/apply-template"},
    "vllm": {"/props", "/tokenize", "/v1/models"},  # /props is probed (404), then vLLM's paths
}


@pytest.mark.parametrize("kind", ["llamacpp", "vllm"])
@pytest.mark.parametrize("upstream_key", [UPSTREAM_KEY, None])
def test_the_proxy_key_is_not_forwarded_upstream(
    make_proxy: Callable[..., str], upstream: FakeUpstream, upstream_key: str | None, kind: str
) -> None:
    upstream.kind = kind
    base = make_proxy(server={"api_keys": [PROXY_KEY]}, upstream={"api_key": upstream_key})
    for headers in ({"Authorization": f"Bearer {PROXY_KEY}"}, {"X-Api-Key": PROXY_KEY}):
        # A document to count: the proxy asks the upstream for its tokenizer and window.
        chat = httpx.post(base + CHAT, json=body(file_part("q.txt", data=ENCODED)), headers=headers)
        assert chat.status_code == 200, chat.text
        assert chat.headers["X-Enrich-Strategy"] == "inject-full-content"
        assert httpx.get(base + "/v1/models", headers=headers).status_code == 200
    paths = {request.path for request in upstream.requests}
    assert paths >= OWN_CALLS[kind] | {CHAT, "/v1/models"}, paths  # every call was seen
    for request in upstream.requests:
        assert PROXY_KEY not in str(request.headers), (request.path, request.headers)
        # The upstream's own key, or none at all: never the client's proxy key.
        expected = f"Bearer {upstream_key}" if upstream_key else None
        assert request.headers.get("Authorization") == expected, request.path


def test_a_library_that_lowers_its_own_log_level_stays_quiet() -> None:
    """bm25s sets its logger to DEBUG when imported: its debug lines (one per document indexed)
    must not reach a JSON log as plain text lines."""
    script = (
        "from proxy.logs import configure_logging\n"
        "configure_logging('json', 'info')\n"
        "from proxy.retrieval.lexical import LexicalIndex\n"
        "LexicalIndex.build(['the harbour master', 'the bakery'])\n"
        "import structlog; structlog.get_logger('t').warning('a line of ours')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["a line of ours"], lines
