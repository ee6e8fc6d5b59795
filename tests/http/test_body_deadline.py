"""A request body has a deadline for the whole of it, beside the timeout on silence: a body
trickled a byte at a time (never silent for long) is a 408 all the same."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Callable

import pytest

from tests.fakes.upstream import FakeUpstream

DEADLINE = {"body_timeout_s": 30.0, "body_deadline_s": 2.0}  # silence never ends it


def trickle(
    base: str, head: bytes, body: bytes, every_s: float = 0.2, for_s: float = 8
) -> tuple[bytes, float]:
    """Send `head`, then `body` a byte every `every_s` (never silent for a second); what the
    proxy answers (nothing if it was still waiting after `for_s`), and when it began to."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=for_s) as sock:
        sock.sendall(head)
        sock.setblocking(False)
        answer = b""
        stop = time.monotonic() + for_s
        for byte in body:
            if time.monotonic() > stop:
                break
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(65536)
            if answer:
                break
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                break
            time.sleep(every_s)
        answered = time.monotonic()
        sock.settimeout(max(0.1, stop - time.monotonic()))
        with contextlib.suppress(OSError):
            while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
                if not (chunk := sock.recv(65536)):
                    break
                answer += chunk
                answered = min(answered, time.monotonic())
        return answer, answered


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/v1/chat/completions", b"application/json"),
        ("/v1/files", b"multipart/form-data; boundary=xyz"),
        ("/v1/models", b"application/json"),  # passed through: read before it is forwarded
    ],
)
def test_a_trickled_body_gets_408_at_its_deadline(
    make_proxy: Callable[..., str], upstream: FakeUpstream, path: str, content_type: bytes
) -> None:
    base = make_proxy(server=DEADLINE)
    body = (
        b'{"messages": [{"role": "user", "content": "' + b"x" * 500 + b'"}]}'
        if content_type.startswith(b"application")
        else b'--xyz\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\n'
        + b"x" * 500
    )
    method = b"GET" if path == "/v1/models" else b"POST"
    head = (
        method + b" " + path.encode() + b" HTTP/1.1\r\nHost: localhost\r\n"
        + b"Content-Type: " + content_type
        + b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n"
    )  # fmt: skip
    started = time.monotonic()
    answer, answered = trickle(base, head, body)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:300]
    assert b"server.body_deadline_s" in answer
    assert b"did not arrive within 2 s" in answer
    assert answered - started < 6  # the trickle would have gone on for 100 s
    assert not upstream.to(path)
