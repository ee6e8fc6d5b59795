"""The real command: `python -m proxy` serving, several workers, graceful shutdown on SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.fakes.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[object]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(upstream: str, *args: str, env: dict[str, str] | None = None) -> str:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy", "--upstream", upstream, "--port", str(port), *args],
            cwd=ROOT,
            env={
                **os.environ,
                "PROXY__SERVER__DATA_DIR": str(tmp_path / "data"),
                "PROXY__SERVER__SHUTDOWN_GRACE_S": "20",
                **(env or {}),
            },
        )
        processes.append(process)
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    return base
            except httpx.HTTPError:
                pass
            if process.poll() is not None:
                raise RuntimeError(f"proxy exited with {process.returncode}")
            time.sleep(0.1)
        raise RuntimeError("proxy did not start")

    start.processes = processes  # type: ignore[attr-defined]
    yield start
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_sigterm_lets_an_in_flight_stream_finish(launch: object, upstream: FakeUpstream) -> None:
    upstream.chunk_delay = 0.3  # about 2 s of streaming
    base = launch(upstream.base_url)  # type: ignore[operator, attr-defined]
    process = launch.processes[-1]  # type: ignore[attr-defined]
    received: list[bytes] = []

    def read_stream() -> None:
        body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
        with httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=30) as response:
            received.extend(response.iter_raw())

    reader = threading.Thread(target=read_stream)
    reader.start()
    time.sleep(0.8)
    process.send_signal(signal.SIGTERM)
    reader.join(30)
    assert b"".join(received).rstrip().endswith(b"data: [DONE]")
    assert process.wait(30) == 0


def test_several_workers_share_the_port(launch: object, upstream: FakeUpstream) -> None:
    base = launch(  # type: ignore[operator]
        upstream.base_url,  # type: ignore[attr-defined]
        "--workers",
        "2",
        env={"PROXY__VECTOR_STORE__MODE": "server"},
    )
    for _ in range(10):
        response = httpx.post(
            base + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert response.status_code == 200
    assert len([r for r in upstream.requests if r.path == "/v1/chat/completions"]) == 10
