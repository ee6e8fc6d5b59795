"""The bytes of a request's documents: each file read once, summed before anything is read,
held to a budget per request (413) and per key in flight (429), and given back after."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.files.store import DiskFileStore
from proxy.http.keys import SERVICES
from tests.fakes.servers import ServerThread
from tests.fakes.upstream import FakeUpstream
from tests.pipeline.test_references import upload

CHAT = "/v1/chat/completions"
ROOT = Path(__file__).resolve().parents[2]
KIB = 1024


def asking(parts: list[dict[str, Any]]) -> dict[str, Any]:
    content = [*parts, {"type": "text", "text": "What do they say?"}]
    return {"model": "m", "messages": [{"role": "user", "content": content}]}


def by_id(file_id: str) -> dict[str, Any]:
    return {"type": "file", "file": {"file_id": file_id}}


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The ids the file store reads bytes of (the proxy runs in this process)."""
    done: list[str] = []
    original = DiskFileStore.read

    def read(self: DiskFileStore, file_id: str, owner: str | None) -> Any:
        done.append(file_id)
        return original(self, file_id, owner)

    monkeypatch.setattr(DiskFileStore, "read", read)
    return done


def test_a_file_named_twenty_times_is_read_once_and_counted_once(
    make_proxy: Callable[..., str], upstream: FakeUpstream, reads: list[str]
) -> None:
    base = make_proxy(documents={"max_request_mb": 1})
    file_id = upload(base, "notes.txt", b"The lighthouse keeper fed the cats. " * 6_000)
    response = httpx.post(base + CHAT, json=asking([by_id(file_id)] * 20), timeout=60)
    assert response.status_code == 200, response.text  # 216 KB once: under 1 MiB
    assert reads == [file_id]


def test_a_request_over_its_budget_is_413_before_a_byte_is_read(
    make_proxy: Callable[..., str], upstream: FakeUpstream, reads: list[str], tmp_path: Path
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "third.txt").write_bytes(b"c" * 400 * KIB)
    base = make_proxy(documents={"max_request_mb": 1, "roots": {"docs": str(docs)}})
    first = upload(base, "first.txt", b"a" * 400 * KIB)
    second = upload(base, "second.txt", b"b" * 400 * KIB)
    body = asking([by_id(first), by_id(second)])
    body["messages"][0]["content"].append({"type": "text", "text": "and #file:docs/third.txt"})
    response = httpx.post(base + CHAT, json=body, timeout=60)
    assert response.status_code == 413, response.text
    error = response.json()["error"]
    assert error["code"] == "request_documents_too_large"
    assert error["message"] == (
        "the documents this request references hold 1.2 MiB, over documents.max_request_mb"
        " (1 MiB); reference fewer or smaller files"
    )
    assert reads == []  # sized from the store's records and the path's stat
    assert not upstream.to(CHAT)


def test_a_key_over_its_bytes_in_flight_is_429_and_the_bytes_come_back(
    make_proxy: Callable[..., str], upstream: FakeUpstream, servers: ServerThread
) -> None:
    base = make_proxy(documents={"max_inflight_mb_per_key": 1})
    in_flight = servers.runners[-1].app[SERVICES].in_flight
    file_id = upload(base, "notes.txt", b"The keeper fed the cats. " * 24_000)  # 600 KB
    in_flight.take("anonymous", 700 * KIB, None)  # another request of this key, reading
    refused = httpx.post(base + CHAT, json=asking([by_id(file_id)]), timeout=60)
    assert refused.status_code == 429, refused.text
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_bytes_in_flight")
    assert error["message"] == (
        "this request's documents (0.6 MiB) with those this key's other requests are reading"
        " now (0.7 MiB) exceed documents.max_inflight_mb_per_key (1 MiB); retry when they have"
        " finished"
    )
    in_flight.give("anonymous", 700 * KIB)  # that request ended
    answered = httpx.post(base + CHAT, json=asking([by_id(file_id)]), timeout=60)
    assert answered.status_code == 200, answered.text
    assert in_flight.held("anonymous") == 0  # given back when the request was prepared
    failed = httpx.post(base + CHAT, json=asking([by_id(file_id), by_id("file-" + "0" * 24)]))
    assert failed.status_code == 404, failed.text
    assert in_flight.held("anonymous") == 0  # and when it failed


# -- the proxy's memory after hostile requests, in a process of its own ------------------------


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@pytest.fixture
def spawned_proxy(upstream: FakeUpstream, tmp_path: Path) -> Iterator[tuple[str, int]]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "proxy", "--upstream", upstream.base_url, "--port", str(port)],  # type: ignore[attr-defined]
        cwd=ROOT,
        start_new_session=True,
        env={
            **os.environ,
            "PROXY__SERVER__DATA_DIR": str(tmp_path / "data"),
            "PROXY__SERVER__LOG_LEVEL": "warning",
        },
    )
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            assert process.poll() is None, "the proxy exited"
            time.sleep(0.1)
        yield base, process.pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


@pytest.mark.slow
def test_memory_returns_to_its_start_after_eight_requests_naming_a_big_file_twenty_times(
    spawned_proxy: tuple[str, int],
) -> None:
    # The shape: a 45 MB upload referenced 20 times by each of 8 requests at once.
    # Before, each request read it 20 times and kept it: RSS grew by gigabytes and stayed.
    base, pid = spawned_proxy
    file_id = upload(base, "big.txt", b"word " * 9_000_000)
    time.sleep(0.5)
    start = rss_mib(pid)
    answers: list[int] = []

    def ask() -> None:
        response = httpx.post(base + CHAT, json=asking([by_id(file_id)] * 20), timeout=120)
        answers.append(response.status_code)

    askers = [threading.Thread(target=ask) for _ in range(8)]
    peak = start
    for asker in askers:
        asker.start()
    while any(asker.is_alive() for asker in askers):
        peak = max(peak, rss_mib(pid))
        time.sleep(0.02)
    # Refused for its text (45 MB of words is over documents.max_chars) once read and sized.
    assert answers == [400] * 8
    assert peak - start < 8 * 45 + 200  # each request read the file once
    assert rss_mib(pid) - start < 100, (start, peak, rss_mib(pid))
