"""The real command: `python -m proxy` serving, several workers, graceful shutdown on SIGTERM."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from proxy.config import load_settings
from proxy.serve import exposure_warning
from proxy.upstream.spawn import free_port
from tests.fakes.upstream import FakeUpstream

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[object]:
    processes: list[subprocess.Popen[bytes]] = []

    def start(upstream: str, *args: str, env: dict[str, str] | None = None) -> str:
        port = free_port()
        process = subprocess.Popen(
            [sys.executable, "-m", "proxy", "--upstream", upstream, "--port", str(port), *args],
            cwd=ROOT,
            # Its own process group: teardown stops the workers too, whatever the parent did.
            start_new_session=True,
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
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)


def children_of(pid: int) -> list[int]:
    """Live (not zombie) processes whose parent is `pid`, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            state, ppid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError, ValueError):
            continue
        if int(ppid) == pid and state != "Z":
            found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_for(condition: Callable[[], bool], seconds: float = 60) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def refuses_connections(base: str) -> bool:
    host, port = base.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


def stream_in_thread(base: str, received: list[bytes]) -> threading.Thread:
    def read_stream() -> None:
        body = {"messages": [{"role": "user", "content": "hi"}], "stream": True}
        with (
            contextlib.suppress(httpx.HTTPError),
            httpx.stream("POST", base + "/v1/chat/completions", json=body, timeout=30) as response,
        ):
            received.extend(response.iter_raw())

    reader = threading.Thread(target=read_stream)
    reader.start()
    return reader


def test_sigterm_lets_an_in_flight_stream_finish(launch: object, upstream: FakeUpstream) -> None:
    upstream.chunk_delay = 0.3  # about 2 s of streaming
    base = launch(upstream.base_url)  # type: ignore[operator, attr-defined]
    process = launch.processes[-1]  # type: ignore[attr-defined]
    received: list[bytes] = []
    reader = stream_in_thread(base, received)
    time.sleep(0.8)
    process.send_signal(signal.SIGTERM)
    reader.join(30)
    assert b"".join(received).rstrip().endswith(b"data: [DONE]")
    assert process.wait(30) == 0


# -- several workers: N processes, each accepting on the shared socket -------------------------


def socket_inodes(pid: int) -> set[int]:
    """The inodes of the sockets `pid` has open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(int(target[len("socket:[") : -1]))
    return inodes


def tcp_inode(local_port: int, remote_port: int | None) -> int | None:
    """The inode of the IPv4 socket bound to `local_port` (and connected to `remote_port`, or
    listening when that is None), from /proc/net/tcp."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], int(fields[9])
        if int(local.rsplit(":", 1)[1], 16) != local_port:
            continue
        if remote_port is None and state == "0A":  # LISTEN
            return inode
        if remote_port is not None and int(remote.rsplit(":", 1)[1], 16) == remote_port:
            return inode
    return None


def answering_worker(port: int, workers: list[int], connection: socket.socket) -> int:
    """The worker holding the server side of `connection` (which it has answered on)."""
    inode = tcp_inode(port, connection.getsockname()[1])
    owners = [pid for pid in workers if inode in socket_inodes(pid)]
    assert len(owners) == 1, (inode, owners)
    return owners[0]


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads /proc (Linux)")
def test_workers_n_gives_n_processes_that_each_answer(
    launch: object, upstream: FakeUpstream
) -> None:
    workers = 3
    base = launch(  # type: ignore[operator]
        upstream.base_url,  # type: ignore[attr-defined]
        "--workers",
        str(workers),
        env={"PROXY__VECTOR_STORE__MODE": "server"},
    )
    port = int(base.rsplit(":", 1)[1])
    main = launch.processes[-1]  # type: ignore[attr-defined]
    pids = sorted(children_of(main.pid))
    assert len(pids) == workers, pids
    listening = tcp_inode(port, None)
    assert listening is not None
    for pid in pids:
        assert listening in socket_inodes(pid), f"worker {pid} does not hold the listening socket"
    # Which worker accepts a connection is the kernel's choice: open connections in batches
    # until each worker has answered one (a worker that never accepts fails the test).
    answered: set[int] = set()
    for _ in range(12):
        batch = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(50)]
        try:
            for connection in batch:
                connection.sendall(b"GET /metrics HTTP/1.1\r\nHost: proxy\r\n\r\n")
            for connection in batch:
                assert connection.recv(65536).startswith(b"HTTP/1.1 200")
                answered.add(answering_worker(port, pids, connection))
        finally:
            for connection in batch:
                connection.close()
        if answered == set(pids):
            break
    assert answered == set(pids)
    # And chat requests work through them all.
    for _ in range(10):
        response = httpx.post(
            base + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert response.status_code == 200
    assert len(upstream.to("/v1/chat/completions")) == 10


WORKERS = ("--workers", "2")
SERVER_STORE = {"PROXY__VECTOR_STORE__MODE": "server"}


@pytest.mark.slow
def test_workers_stop_when_the_parent_is_killed_hard(
    launch: object, upstream: FakeUpstream
) -> None:
    upstream.chunk_delay = 0.3  # about 2 s of streaming
    base = launch(upstream.base_url, *WORKERS, env=SERVER_STORE)  # type: ignore[operator, attr-defined]
    parent = launch.processes[-1]  # type: ignore[attr-defined]
    assert wait_for(lambda: len(children_of(parent.pid)) == 2)
    workers = children_of(parent.pid)
    received: list[bytes] = []
    reader = stream_in_thread(base, received)
    time.sleep(0.8)
    parent.send_signal(signal.SIGKILL)  # as an out-of-memory kill or a supervisor would
    parent.wait(10)
    reader.join(30)
    # The request in flight finished within the shutdown grace; then nothing is left.
    assert b"".join(received).rstrip().endswith(b"data: [DONE]")
    assert wait_for(lambda: not any(alive(pid) for pid in workers), 30)
    assert refuses_connections(base)


@pytest.mark.slow
def test_workers_exit_within_the_grace_when_the_parent_is_killed_mid_stream(
    launch: object, upstream: FakeUpstream
) -> None:
    # Streams that would run for a minute: the grace cuts them, and the workers exit within it
    # (aiohttp alone waited the grace twice: once for the handlers, once more after cancelling).
    upstream.chunk_delay = 10.0
    grace = 4.0
    env = {**SERVER_STORE, "PROXY__SERVER__SHUTDOWN_GRACE_S": str(grace)}
    base = launch(upstream.base_url, *WORKERS, env=env)  # type: ignore[operator, attr-defined]
    parent = launch.processes[-1]  # type: ignore[attr-defined]
    assert wait_for(lambda: len(children_of(parent.pid)) == 2)
    workers = children_of(parent.pid)
    readers = [stream_in_thread(base, []) for _ in range(4)]
    time.sleep(1.0)
    parent.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    parent.wait(10)
    assert wait_for(lambda: not any(alive(pid) for pid in workers), 30)
    assert time.monotonic() - killed < grace + 2.5
    assert refuses_connections(base)
    for reader in readers:
        reader.join(30)


@pytest.mark.slow
def test_the_parent_restarts_a_worker_that_dies(launch: object, upstream: FakeUpstream) -> None:
    base = launch(upstream.base_url, *WORKERS, env=SERVER_STORE)  # type: ignore[operator, attr-defined]
    parent = launch.processes[-1]  # type: ignore[attr-defined]
    assert wait_for(lambda: len(children_of(parent.pid)) == 2)
    first, second = children_of(parent.pid)
    os.kill(first, signal.SIGKILL)
    assert wait_for(lambda: len(set(children_of(parent.pid)) - {first}) == 2)
    assert second in children_of(parent.pid)
    for _ in range(6):
        response = httpx.post(
            base + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "hi"}]},
            timeout=30,
        )
        assert response.status_code == 200
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(30) == 0
    assert not children_of(parent.pid)


def open_socket(base: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = base.removeprefix("http://").split(":")
    return socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))


def read_all(sock: socket.socket) -> bytes:
    answer = b""
    with contextlib.suppress(OSError):
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


SLOW_CLIENT_LIMITS = {
    "PROXY__SERVER__MAX_CONNECTIONS_PER_CLIENT": "20",
    "PROXY__SERVER__HEADER_TIMEOUT_S": "1",
    "PROXY__SERVER__BODY_TIMEOUT_S": "1",
}


@pytest.mark.slow
def test_slow_connections_from_one_address_are_capped(
    launch: object, upstream: FakeUpstream
) -> None:
    base = launch(
        upstream.base_url, env={**SLOW_CLIENT_LIMITS, "PROXY__SERVER__HEADER_TIMEOUT_S": "60"}
    )  # type: ignore[operator, attr-defined]
    held = [open_socket(base) for _ in range(20)]
    for sock in held:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never finish the headers
    refused = [open_socket(base) for _ in range(30)]
    try:
        for sock in refused:
            answer = read_all(sock)
            assert answer.startswith(b"HTTP/1.1 429"), answer[:100]
            assert b"too_many_connections" in answer
        # Another address is served meanwhile; the capped one again once a slot is free.
        other = open_socket(base, "127.0.0.2")
        other.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_all(other).startswith(b"HTTP/1.1 200")
        held.pop().close()
        assert wait_for(lambda: httpx.get(base + "/healthz", timeout=5).status_code == 200, 10)
    finally:
        for sock in held + refused:
            sock.close()


@pytest.mark.slow
def test_headers_and_bodies_that_stop_arriving_time_out(
    launch: object, upstream: FakeUpstream
) -> None:
    base = launch(upstream.base_url, env=SLOW_CLIENT_LIMITS)  # type: ignore[operator, attr-defined]
    trickle = open_socket(base)
    trickle.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    for _ in range(30):  # a header line now and then, never the end of the headers
        try:
            trickle.sendall(b"X-Slow: 1\r\n")
        except OSError:
            break
        time.sleep(0.2)
    assert read_all(trickle) == b""  # closed by the proxy, unanswered
    stalled = open_socket(base)
    stalled.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\n"
        b'Content-Length: 1000\r\n\r\n{"messages": '
    )
    answer = read_all(stalled)
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"server.body_timeout_s" in answer
    assert not [r for r in upstream.requests if r.path == "/v1/chat/completions"]


@pytest.mark.parametrize(
    ("host", "keys", "warned"),
    [
        ("0.0.0.0", [], True),
        ("::", [], True),
        ("proxy.internal", [], True),
        ("127.0.0.1", [], False),
        ("::1", [], False),
        ("localhost", [], False),
        ("0.0.0.0", ["a-long-enough-key-0001"], False),
    ],
)
def test_listening_beyond_loopback_without_keys_warns(
    host: str, keys: list[str], warned: bool
) -> None:
    settings = load_settings(
        None, environ={}, overrides={"server": {"host": host, "api_keys": keys}}
    )
    warning = exposure_warning(settings)
    assert (warning is not None) == warned
    if warning:
        assert "server.api_keys" in warning and host in warning


def test_the_warning_is_logged_at_start(upstream: FakeUpstream, tmp_path: Path) -> None:
    log = tmp_path / "stderr.txt"
    port = free_port()
    with log.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "proxy",
                "--upstream",
                upstream.base_url,
                "--host",
                "0.0.0.0",
                "--port",
                str(port),
            ],  # type: ignore[attr-defined]
            cwd=ROOT,
            env={**os.environ, "PROXY__SERVER__DATA_DIR": str(tmp_path / "data")},
            stderr=err,
            start_new_session=True,
        )
        try:
            assert wait_for(lambda: b"listening" in log.read_bytes(), 60)
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
    assert b"without server.api_keys" in log.read_bytes()


# -- a client that goes away cancels its request upstream ------------------------------------

CHAT_REQUEST = (
    b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n%s"
)


def send_chat(base: str, *, stream: bool) -> socket.socket:
    """A chat request on a raw connection, so the test decides when the client goes away."""
    port = int(base.rsplit(":", 1)[1])
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    ).encode()
    connection = socket.create_connection(("127.0.0.1", port), timeout=30)
    connection.sendall(CHAT_REQUEST % (len(body), body))
    return connection


def test_a_client_gone_before_the_first_byte_cancels_the_upstream_request(
    launch: object, upstream: FakeUpstream
) -> None:
    # The real command's server: if handler cancellation were off there, the proxy would wait
    # for an upstream that never answers, and llama-server would generate for nobody.
    upstream.chat_mode = "hang"
    base = launch(upstream.base_url)  # type: ignore[operator, attr-defined]
    connection = send_chat(base, stream=False)
    assert wait_for(lambda: bool(upstream.to("/v1/chat/completions")), 30)
    assert not upstream.disconnected.is_set()
    connection.close()
    assert upstream.disconnected.wait(30), "the upstream request was not closed"


def test_a_client_gone_mid_stream_cancels_the_upstream_request(
    launch: object, upstream: FakeUpstream
) -> None:
    # Two chunks, then the upstream goes quiet: the proxy has nothing to write, so only handler
    # cancellation can tell it the client is gone.
    upstream.chat_mode = "stall"
    base = launch(upstream.base_url)  # type: ignore[operator, attr-defined]
    connection = send_chat(base, stream=True)
    received = b""
    while b"data: " not in received:
        chunk = connection.recv(65536)
        assert chunk, "the proxy closed the stream"
        received += chunk
    assert received.startswith(b"HTTP/1.1 200")
    assert not upstream.disconnected.is_set()
    connection.close()
    assert upstream.disconnected.wait(30), "the upstream request was not closed"
