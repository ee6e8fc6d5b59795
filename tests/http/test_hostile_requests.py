"""Hostile request bodies: never a 500, never a hang; a 200 or an OpenAI-shaped 4xx.

Property-based: hypothesis generates arbitrary JSON, message shapes, content-part mixes, data
URLs and `enrich` objects. One proxy per test function (not per example) answers them all.
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy.errors import ProxyError
from proxy.pipeline.file_refs import find_references
from tests.fakes.upstream import FakeUpstream

ERROR_KEYS = {"message", "type", "param", "code"}
FILE_PART_TYPES = {"file", "input_file"}
MAX_FILE_MB = 0.01  # ~10 KiB: "huge-claiming" payloads are cheap to generate
HANG_GUARD_S = 60.0

SETTINGS = settings(
    deadline=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

# -- strategies -------------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
)
junk: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


small_text = st.text(st.characters(codec="utf-8"), min_size=1, max_size=60).map(
    lambda s: s + " marker text"
)
document_bytes = small_text.map(str.encode) | st.binary(min_size=0, max_size=300)

file_data: st.SearchStrategy[Any] = st.one_of(
    document_bytes.map(lambda d: f"data:text/plain;base64,{b64(d)}"),  # valid
    document_bytes.map(b64),  # bare base64
    document_bytes.map(lambda d: f"data:application/pdf;base64,{b64(d)}"),  # wrong mime
    document_bytes.map(lambda d: f"data:image/png;base64,{b64(d)}"),
    document_bytes.map(lambda d: f"data:text/plain,{d.decode('latin-1')}"),  # not base64
    document_bytes.map(lambda d: f"data:;base64,{b64(d)}=="),  # padding junk
    document_bytes.map(lambda d: f"data:text/plain;charset=utf-8;base64,\n {b64(d)}\n"),
    st.just("data:"),
    st.just("data:text/plain;base64,"),
    st.just("data:text/plain;base64,====" + "A" * 3),
    st.text(max_size=40).map(lambda s: f"data:text/plain;base64,{s}"),  # invalid base64
    st.integers(min_value=0, max_value=3).map(  # claims far more than max_file_mb
        lambda n: "data:text/plain;base64," + "QUFB" * (10_000 + n * 50_000)
    ),
    st.sampled_from(["%PDF-1.7\n", "PK\x03\x04junk", "\x89PNG\r\n\x1a\n"]).map(
        lambda head: f"data:application/octet-stream;base64,{b64(head.encode('latin-1'))}"
    ),
    junk,
)

file_ids = st.one_of(
    st.just("file-" + "0" * 24),  # well-formed, unknown
    st.text(max_size=30),
    st.text(alphabet="0123456789abcdef", min_size=24, max_size=24).map(lambda h: "file-" + h),
    junk,
)
filenames = st.one_of(
    st.sampled_from(["a.txt", "b.pdf", "c.docx", "d.html", "e.png", "noext", "../x.txt", ""]),
    st.text(max_size=30),
    junk,
)


@st.composite
def file_fields(draw: st.DrawFn) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for key, values in (
        ("file_data", file_data),
        ("file_id", file_ids),
        ("filename", filenames),
        ("file_name", filenames),
        ("file_url", st.text(max_size=20)),
    ):
        if draw(st.booleans()):
            fields[key] = draw(values)
    return fields


file_part = st.one_of(
    file_fields().map(lambda fields: {"type": "file", "file": fields}),
    junk.map(lambda value: {"type": "file", "file": value}),
    st.just({"type": "file"}),
    file_fields().map(lambda fields: {"type": "input_file", **fields}),
)
text_part = st.one_of(
    st.text(max_size=40).map(lambda t: {"type": "text", "text": t}),
    st.sampled_from(["#file:docs/a.txt", "see #file:docs/../secret", "#file:nope/x"]).map(
        lambda t: {"type": "text", "text": t}
    ),
    junk.map(lambda t: {"type": "text", "text": t}),
)
image_part = st.one_of(
    st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}),
    junk.map(lambda value: {"type": "image_url", "image_url": value}),
)
other_part = st.one_of(
    st.dictionaries(st.text(max_size=8), junk, max_size=3),
    st.text(max_size=12).map(lambda t: {"type": t}),
    scalars,
)
part = st.one_of(text_part, file_part, image_part, other_part)

content = st.one_of(
    st.text(max_size=60),
    st.sampled_from(["#file:docs/a.txt what is it?", "#file:docs/missing.txt", "#file:"]),
    st.lists(part, max_size=5),
    st.none(),
    st.integers(),
    st.floats(allow_nan=False),
    junk,
)
ROLES = ["user", "user", "assistant", "system", "tool", "developer"]


def mostly(common: st.SearchStrategy[Any], rare: st.SearchStrategy[Any]) -> Any:
    """`common` nine times in ten: mostly well-formed, so that examples get past validation."""
    return st.integers(0, 9).flatmap(lambda n: common if n else rare)


@st.composite
def message(draw: st.DrawFn) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if draw(st.integers(0, 19)) > 0:
        out["role"] = draw(mostly(st.sampled_from(ROLES), junk))
    if draw(st.integers(0, 9)) > 0:
        out["content"] = draw(mostly(st.lists(part, max_size=5) | st.text(max_size=60), content))
    extra = draw(st.dictionaries(st.sampled_from(["name", "tool_calls", "x"]), junk, max_size=2))
    return {**extra, **out}


enrich = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "strategy": st.sampled_from(["auto", "inject-full-content", "retrieval", "none", "x"])
            | junk,
            "retrieval_limit": st.integers(-3, 20) | junk,
            "affinity_threshold": st.floats(allow_nan=True) | junk,
        },
    ),
    junk,
)


@st.composite
def chat_body(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if draw(st.integers(0, 9)) > 0:
        body["model"] = draw(st.just("m") | junk)
    if draw(st.integers(0, 19)) > 0:
        body["messages"] = draw(mostly(st.lists(message(), min_size=1, max_size=4), junk))
    if draw(st.booleans()):
        body["stream"] = draw(st.booleans() | junk)
    if draw(st.booleans()):
        # Retrieval would open a vector store per example: ask for it rarely.
        body["enrich"] = draw(enrich)
    if draw(st.booleans()):
        body["max_tokens"] = draw(st.integers(-5, 10**9) | junk)
    return body


# -- checks -----------------------------------------------------------------------------------


def assert_openai_error(payload: Any, where: str) -> None:
    assert isinstance(payload, dict) and set(payload) == {"error"}, where
    error = payload["error"]
    assert isinstance(error, dict) and set(error) == ERROR_KEYS, where
    assert isinstance(error["message"], str) and error["message"], where


def check_response(response: httpx.Response, upstream: FakeUpstream, before: int) -> None:
    where = f"{response.status_code}: {response.text[:500]}"
    event(f"HTTP {response.status_code}")
    if response.status_code >= 400 and response.headers.get("content-type", "").startswith(
        "application/json"
    ):
        event(f"code {response.json().get('error', {}).get('code')}")
    assert response.status_code < 500, where
    if response.status_code >= 400:
        assert_openai_error(response.json(), where)
        return
    assert response.status_code == 200, where
    events = [
        line[len("data: ") :]
        for line in response.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]
    errors = [json.loads(event) for event in events if event.startswith('{"error"')]
    if errors:  # a stream started early carries the error as an event
        for error in errors:
            assert_openai_error(error, where)
        return
    sent = [r for r in upstream.requests[before:] if r.path == "/v1/chat/completions"]
    assert len(sent) == 1, where
    for msg in sent[0].json["messages"]:
        parts = msg.get("content") if isinstance(msg, dict) else None
        # Only user messages are searched for documents: file parts in assistant, system or
        # tool messages are forwarded as they came (reported; the upstream judges them).
        if msg.get("role") == "user" and isinstance(parts, list):
            assert not any(
                isinstance(p, dict) and p.get("type") in FILE_PART_TYPES for p in parts
            ), "a file part reached the upstream"


@pytest.fixture
def roots(tmp_path: Path) -> dict[str, str]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("A document inside the root.")
    (tmp_path / "secret").write_text("TOP SECRET")
    return {"docs": str(docs)}


@pytest.fixture
def proxy(make_proxy: Callable[..., str], roots: dict[str, str]) -> str:
    return make_proxy(documents={"roots": roots, "max_file_mb": MAX_FILE_MB})


def post(client: httpx.Client, base: str, content: bytes) -> httpx.Response:
    return client.post(
        base + "/v1/chat/completions",
        content=content,
        headers={"Content-Type": "application/json"},
    )


# -- through the proxy ------------------------------------------------------------------------


@settings(SETTINGS, max_examples=120)
@given(body=chat_body())
def test_chat_bodies_never_500(proxy: str, upstream: FakeUpstream, body: dict[str, Any]) -> None:
    with httpx.Client(timeout=HANG_GUARD_S) as client:
        before = len(upstream.requests)
        check_response(post(client, proxy, json.dumps(body).encode()), upstream, before)


@settings(SETTINGS, max_examples=40)
@given(body=junk | st.binary(max_size=64))
def test_arbitrary_bodies_never_500(proxy: str, upstream: FakeUpstream, body: Any) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with httpx.Client(timeout=HANG_GUARD_S) as client:
        before = len(upstream.requests)
        check_response(post(client, proxy, raw), upstream, before)


@settings(SETTINGS, max_examples=40)
@given(parts=st.lists(st.one_of(file_part, text_part, image_part), min_size=1, max_size=4))
def test_content_part_mixes_in_the_last_user_message(
    proxy: str, upstream: FakeUpstream, parts: list[Any]
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": parts}]}
    with httpx.Client(timeout=HANG_GUARD_S) as client:
        before = len(upstream.requests)
        check_response(post(client, proxy, json.dumps(body).encode()), upstream, before)


def test_a_file_named_in_the_error(proxy: str, upstream: FakeUpstream) -> None:
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "q"},
                    {"type": "file", "file": {"filename": "bad.txt", "file_data": "!!!"}},
                ],
            }
        ]
    }
    response = httpx.post(proxy + "/v1/chat/completions", json=body, timeout=HANG_GUARD_S)
    assert response.status_code == 400
    assert_openai_error(response.json(), response.text)
    assert response.json()["error"]["message"].startswith("bad.txt:")
    assert response.json()["error"]["code"] == "invalid_base64"
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]


# -- find_references directly -----------------------------------------------------------------


@settings(SETTINGS, max_examples=120)
@given(
    messages=st.lists(message() | st.dictionaries(st.text(max_size=8), junk), max_size=5),
    prefix=st.one_of(st.none(), st.just("#file:"), st.text(max_size=4)),
)
def test_find_references_returns_or_raises_proxy_error(
    messages: list[dict[str, Any]], prefix: str | None
) -> None:
    try:
        found = find_references(messages, path_prefix=prefix)
    except ProxyError as error:
        assert error.status == 400
        assert set(error.to_dict()["error"]) == ERROR_KEYS
        return
    assert len(found.messages) == len(messages)
    assert all(ref.origin in {"file_data", "file_id", "path", "url"} for ref in found.refs)
    for msg in found.messages:
        parts = msg.get("content")
        if msg.get("role") == "user" and isinstance(parts, list):
            assert not any(isinstance(p, dict) and p.get("type") in FILE_PART_TYPES for p in parts)


# -- deep nesting, odd request targets, huge headers --------------------------------------------


@settings(SETTINGS, max_examples=25)
@given(
    depth=st.integers(min_value=1, max_value=200_000),
    opener=st.sampled_from(["[", '{"a":']),
    where=st.sampled_from(["messages", "enrich", "top"]),
)
def test_deeply_nested_bodies_never_500(
    proxy: str, upstream: FakeUpstream, depth: int, opener: str, where: str
) -> None:
    closer = "]" if opener == "[" else "}"
    nested = opener * depth + "1" + closer * depth
    raw = {
        "messages": '{"model": "m", "messages": ' + nested + "}",
        "enrich": '{"messages": [{"role": "user", "content": "q"}], "enrich": ' + nested + "}",
        "top": nested,
    }[where]
    with httpx.Client(timeout=HANG_GUARD_S) as client:
        before = len(upstream.requests)
        check_response(post(client, proxy, raw.encode()), upstream, before)


odd_targets = st.one_of(
    st.sampled_from(
        [
            "http://evil.example/v1/models",
            "https://127.0.0.1:1/v1/chat/completions",
            "//evil.example/v1/models",
            "/v1/../../etc/passwd",
            "/%2e%2e/%2e%2e/healthz",
            "/v1/files/..%2f..%2fblobs",
            "/v1/models?x=" + "a" * 5000,
            "/" + "a/" * 2000,
            "*",
            "evil.example:443",
            "/healthz#frag",
            "/%00",
            "/v1/chat/completions?stream=true",
        ]
    ),
    st.text(
        st.characters(min_codepoint=0x21, max_codepoint=0x7E, exclude_characters=" "),
        min_size=1,
        max_size=60,
    ),
)


def raw_exchange(base: str, request: bytes) -> bytes:
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=HANG_GUARD_S) as sock:
        sock.sendall(request)
        answer = b""
        with contextlib.suppress(ConnectionError):
            while chunk := sock.recv(65536):
                answer += chunk
    return answer


def status_of(answer: bytes) -> int:
    assert answer.startswith(b"HTTP/1."), answer[:200]
    return int(answer.split(b" ", 2)[1])


@settings(SETTINGS, max_examples=60)
@given(target=odd_targets, method=st.sampled_from(["GET", "POST", "DELETE", "OPTIONS"]))
def test_odd_request_targets_never_500_nor_reach_elsewhere(
    proxy: str, upstream: FakeUpstream, target: str, method: str
) -> None:
    before = len(upstream.requests)
    answer = raw_exchange(
        proxy,
        f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
        "Connection: close\r\n\r\n".encode(),
    )
    status = status_of(answer)
    event(f"HTTP {status}")
    assert status < 500, answer[:300]
    for recorded in upstream.requests[before:]:
        assert recorded.path.startswith("/"), recorded.path  # never a URL as the path


@settings(SETTINGS, max_examples=30)
@given(
    size=st.integers(min_value=1, max_value=40_000),
    where=st.sampled_from(["value", "name", "many", "request-line"]),
)
def test_huge_headers_never_500(proxy: str, size: int, where: str) -> None:
    if where == "value":
        headers = f"X-Big: {'a' * size}\r\n"
    elif where == "name":
        headers = f"X-{'n' * size}: 1\r\n"
    elif where == "many":
        headers = "".join(f"X-H{i}: v\r\n" for i in range(min(size, 2000)))
    else:
        headers = ""
    path = "/healthz" if where != "request-line" else "/healthz?" + "q" * size
    answer = raw_exchange(
        proxy, f"GET {path} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n".encode()
    )
    status = status_of(answer)
    event(f"HTTP {status}")
    assert status < 500 or status == 503, answer[:300]  # 503: /healthz of a degraded upstream
