"""End-to-end fixtures: real llama.cpp servers (xllamacpp, the small Gemma model), and Chroma."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from proxy.config import load_settings
from proxy.upstream.launch import LlamaServerError, find_binary, find_model, xllamacpp_installed
from proxy.upstream.local import make_local_server
from proxy.upstream.spawn import LlamaServer, free_port

E2E_DIR = Path(__file__).resolve().parent

# -t 1: on two shared cores, two spinning threads per server ran 2-5x slower than one while
# anything else was busy. One slot (upstream.spawn.parallel), so n_ctx in /props is the full
# 4096. No prompt cache, so two identical greedy requests give identical answers; a fixed seed
# for anything that does sample. No web UI: nothing in the tests uses it.
COMMON_ARGS = ["--no-webui", "--log-colors", "off"]
CHAT_ARGS = ["--seed", "42", "--no-cache-prompt", *COMMON_ARGS]
# Pooled embeddings need the whole input in one physical batch: the default ubatch (512)
# would reject longer chunks with "input is too large to process".
EMBED_ARGS = ["--embeddings", "--pooling", "mean", "-b", "2048", "-ub", "2048", *COMMON_ARGS]
STARTUP_TIMEOUT = 300.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything under tests/e2e as e2e, even a module that forgot its pytestmark."""
    for item in items:
        if E2E_DIR in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def gemma_model() -> str:
    """The small Gemma GGUF of the `local` extra; skips when it is not installed."""
    try:
        return find_model()
    except LlamaServerError as exc:
        pytest.skip(str(exc))


def spawn_settings(model: str, **spawn: Any) -> dict[str, Any]:
    """`upstream.spawn` as a user writes it: the e2e servers are launched the proxy's way."""
    return {"enabled": True, "model": model, "threads": 1, **spawn}


async def start_spawned(log_dir: Path, spawn: dict[str, Any]) -> LlamaServer:
    settings = load_settings(None, environ={}, overrides={"upstream": {"spawn": spawn}})
    if spawn.get("backend", "xllamacpp") == "xllamacpp" and not xllamacpp_installed():
        pytest.skip("xllamacpp is not installed (pip install '.[local]')")
    # A crash during the suite should fail the tests, not be papered over.
    server, _ = await make_local_server(
        settings, log_dir / "llama-server.log", startup_timeout=STARTUP_TIMEOUT, max_restarts=0
    )
    await server.start()
    return server


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def llama_server_process(
    gemma_model: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LlamaServer]:
    """The chat server (xllamacpp, Gemma 3 270M, n_ctx 4096, one slot) as a LlamaServer."""
    spawn = spawn_settings(gemma_model, ctx_size=4096, extra_args=CHAT_ARGS)
    server = await start_spawned(tmp_path_factory.mktemp("llama-chat"), spawn)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
def llama_server(llama_server_process: LlamaServer) -> str:
    """Base URL (no /v1) of the chat server."""
    return llama_server_process.base_url


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def llama_embed_server_process(
    gemma_model: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LlamaServer]:
    """An embeddings-only server (same Gemma model, mean pooling) as a LlamaServer."""
    spawn = spawn_settings(gemma_model, ctx_size=2048, extra_args=EMBED_ARGS)
    server = await start_spawned(tmp_path_factory.mktemp("llama-embed"), spawn)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
def llama_embed_server(llama_embed_server_process: LlamaServer) -> str:
    """Base URL (no /v1) of the embeddings server."""
    return llama_embed_server_process.base_url


@pytest.fixture(scope="session")
def llama_binary() -> str:
    """A llama-server binary (`.[local-build]`); skips when none is installed: CI does not
    build one (10-30 minutes of compiling)."""
    try:
        return find_binary()
    except LlamaServerError as exc:
        pytest.skip(str(exc))


def _chroma_binary() -> Path:
    # The console script of the venv pytest runs in, not whatever `chroma` is on PATH.
    return Path(sys.executable).parent / "chroma"


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """A `chroma run` server on a free port with a temporary store; yields (host, port)."""
    binary = _chroma_binary()
    if not binary.is_file():
        pytest.skip(f"chroma CLI not found at {binary} (pip install chromadb)")
    host, port = "127.0.0.1", free_port()
    root = tmp_path_factory.mktemp("chroma")
    log_path = root / "chroma.log"
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "NO_COLOR": "1"}
    argv = [str(binary), "run", "--path", str(root / "data"), "--host", host, "--port", str(port)]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT, env=env
        )
    try:
        # chromadb 1.x (Rust server): /api/v2/heartbeat; /api/v1/* answers 410 Gone.
        _wait_http_ok(f"http://{host}:{port}/api/v2/heartbeat", proc, log_path, timeout=60.0)
        yield host, port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_http_ok(url: str, proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{url} not answering after {timeout:.0f} s:\n{tail}")
        time.sleep(0.1)


def _llama_cpp_python() -> str | None:
    """An interpreter with llama-cpp-python's server: `LLAMA_CPP_PYTHON`, else this one if it
    has it. PyPI has only its source (it compiles llama.cpp: 39 minutes measured on 2 busy
    cores), so CI does not install it."""
    configured = os.environ.get("LLAMA_CPP_PYTHON")
    if configured:
        return configured
    probe = subprocess.run(
        [sys.executable, "-c", "import llama_cpp.server"], capture_output=True, check=False
    )
    return sys.executable if probe.returncode == 0 else None


@pytest.fixture(scope="session")
def llama_cpp_python_server(
    gemma_model: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-cpp-python's OpenAI server (`python -m llama_cpp.server`, n_ctx 2048) with the
    small Gemma; skips when llama-cpp-python is not installed."""
    python = _llama_cpp_python()
    if python is None:
        pytest.skip("llama-cpp-python is not installed (set LLAMA_CPP_PYTHON to its python)")
    port = free_port()
    log_path = tmp_path_factory.mktemp("llama-cpp-python") / "server.log"
    argv = [
        python,
        "-m",
        "llama_cpp.server",
        "--model",
        gemma_model,
        "--n_ctx",
        "2048",
        "--n_threads",
        "1",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    try:
        _wait_http_ok(f"http://127.0.0.1:{port}/v1/models", proc, log_path, timeout=STARTUP_TIMEOUT)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
