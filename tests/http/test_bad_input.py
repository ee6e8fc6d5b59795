"""Bad input is a clear 4xx logged in one line, never a 500: deep JSON, odd request targets,
huge header lines, a file deleted under a chat request; and uploads obey the body limit."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from proxy.logs import OneLineClientErrors
from tests.fakes.upstream import FakeUpstream

DEEP = 100_000


def raw_request(base: str, head: bytes) -> bytes:
    parts = urlsplit(base)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_json_nested_100k_deep_is_a_400(
    make_proxy: Callable[..., str], upstream: FakeUpstream, capfd: pytest.CaptureFixture[str]
) -> None:
    base = make_proxy()
    nested = b'{"model": "m", "messages": ' + b"[" * DEEP + b"]" * DEEP + b"}"
    response = httpx.post(
        base + "/v1/chat/completions", content=nested, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]


def test_absolute_form_targets_are_refused_not_forwarded(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    base = make_proxy()
    for target in (b"http://evil.example:9/v1/models", b"https://127.0.0.1/v1/models?x=1"):
        answer = raw_request(
            base, b"GET " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
        assert b'"code": "invalid_request_target"' in answer
    assert not upstream.requests


def test_a_10kb_multipart_header_line_is_a_400(
    make_proxy: Callable[..., str], tmp_path: Path
) -> None:
    base = make_proxy()
    boundary = "b0undary"
    body = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nuser_data\r\n'
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n'
        f"X-Long: {'a' * 10240}\r\n\r\nhello\r\n--{boundary}--\r\n"
    ).encode()
    response = httpx.post(
        base + "/v1/files",
        content=body,
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_multipart"
    assert not list((tmp_path / "data" / "files" / "blobs").iterdir())


def test_a_10kb_request_header_line_is_a_400_logged_in_one_line(
    make_proxy: Callable[..., str], caplog: pytest.LogCaptureFixture
) -> None:
    base = make_proxy()
    logging.getLogger("aiohttp.server").addFilter(OneLineClientErrors())
    answer = raw_request(
        base, b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 10240 + b"\r\n\r\n"
    )
    assert answer.startswith(b"HTTP/1.1 400") or answer.startswith(b"HTTP/1.0 400")
    records = [r for r in caplog.records if r.name == "aiohttp.server"]
    assert records and all(r.exc_info is None for r in records)
    assert "bad request from a client (400)" in records[-1].getMessage()


def test_a_file_deleted_while_a_chat_reads_it_is_a_404(
    make_proxy: Callable[..., str], tmp_path: Path
) -> None:
    base = make_proxy()
    client = openai.OpenAI(base_url=base + "/v1", api_key="k", max_retries=0)
    created = client.files.create(file=("gone.txt", b"soon gone"), purpose="user_data")
    # The record was read, then a delete took the bytes before they were opened.
    for blob in (tmp_path / "data" / "files" / "blobs").iterdir():
        blob.unlink()
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="m",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "q"},
                        {"type": "file", "file": {"file_id": created.id}},
                    ],
                }
            ],
        )
    with pytest.raises(openai.NotFoundError):
        client.files.content(created.id)


def test_uploads_obey_the_body_limit_as_they_stream(make_proxy: Callable[..., str]) -> None:
    base = make_proxy(server={"max_body_mb": 0.01}, documents={"max_file_mb": 50})  # ~10 KiB
    too_big = httpx.post(
        base + "/v1/files",
        files={"file": ("big.txt", b"x" * 20_000)},
        data={"purpose": "user_data"},
    )
    assert too_big.status_code == 413
    assert too_big.json()["error"]["code"] == "request_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit holds while streaming
        yield b'--b0undary\r\nContent-Disposition: form-data; name="file"; filename="a"\r\n\r\n'
        for _ in range(40):
            yield b"y" * 1024
        yield b"\r\n--b0undary--\r\n"

    streamed = httpx.post(
        base + "/v1/files",
        content=chunks(),
        headers={"Content-Type": "multipart/form-data; boundary=b0undary"},
    )
    assert streamed.status_code == 413
    ok = httpx.post(
        base + "/v1/files",
        files={"file": ("small.txt", b"z" * 2000)},
        data={"purpose": "user_data"},
    )
    assert ok.status_code == 200


def test_open_paths_are_open_only_for_reading(
    make_proxy: Callable[..., str], upstream: FakeUpstream
) -> None:
    key = "an-operator-key-0001"
    base = make_proxy(server={"api_keys": [key]}, upstream={"api_key": "upstream-secret-key"})
    assert httpx.get(base + "/healthz").status_code == 200
    assert httpx.head(base + "/metrics").status_code == 200
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/healthz", "/metrics"):
            anonymous = httpx.request(method, base + path)
            assert anonymous.status_code == 401, (method, path)
            keyed = httpx.request(method, base + path, headers={"Authorization": f"Bearer {key}"})
            assert keyed.status_code == 405, (method, path)
    keyed = {"Authorization": f"Bearer {key}"}
    for method, path in (
        ("GET", "/v1/chat/completions"),
        ("PUT", "/v1/files"),
        ("POST", "/v1/files/file-0123/content"),
        ("GET", "/v1/enrich/preview"),
        ("GET", "/v1/files/a/b/c"),
    ):
        assert httpx.request(method, base + path, headers=keyed).status_code in (404, 405)
    # Nothing the proxy serves itself reached the upstream (only the health probe's own calls).
    assert not [
        r for r in upstream.requests if r.path in ("/healthz", "/metrics") or "files" in r.path
    ]
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]
