"""The xllamacpp backend: the child process under the supervisor, against a fake xllamacpp."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from proxy.upstream.launch import LlamaServerError, ServerLaunch
from proxy.upstream.spawn import LlamaServer

ROOT = Path(__file__).resolve().parents[2]

# A stand-in with xllamacpp's shape: CommonParams with nested structs and enums, and a Server
# that serves HTTP from a thread of the calling process for as long as that process lives.
FAKE_XLLAMACPP = """
import json, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__version__ = "0.0-fake"

class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)

class llama_pooling_type:
    LLAMA_POOLING_TYPE_UNSPECIFIED, LLAMA_POOLING_TYPE_NONE, LLAMA_POOLING_TYPE_MEAN = -1, 0, 1
    LLAMA_POOLING_TYPE_CLS, LLAMA_POOLING_TYPE_LAST, LLAMA_POOLING_TYPE_RANK = 2, 3, 4

class llama_flash_attn_type:
    LLAMA_FLASH_ATTN_TYPE_AUTO, LLAMA_FLASH_ATTN_TYPE_DISABLED = -1, 0
    LLAMA_FLASH_ATTN_TYPE_ENABLED = 1

class CommonParams:
    def __init__(self):
        self.model = _Struct(path="")
        self.cpuparams = _Struct(n_threads=-1)
        self.cpuparams_batch = _Struct(n_threads=-1)
        self.sampling = _Struct(seed=4294967295, temp=0.8)
        self.hostnames = ["127.0.0.1"]
        self.port = 0
        self.n_ctx = 0
        self.n_parallel = 1
        self.use_jinja = True
        self.chat_template = ""
        self.endpoint_props = False
        self.embedding = False
        self.pooling_type = -1
        self.model_alias = set()
        self.ui = True

class Server:
    def __init__(self, params):
        if params.model.path.endswith("broken.gguf"):
            raise RuntimeError("failed to load model")
        seen = {
            "model": params.model.path, "n_ctx": params.n_ctx, "n_parallel": params.n_parallel,
            "threads": params.cpuparams.n_threads,
            "threads_batch": params.cpuparams_batch.n_threads,
            "use_jinja": params.use_jinja, "chat_template": params.chat_template,
            "endpoint_props": params.endpoint_props, "embedding": params.embedding,
            "pooling_type": params.pooling_type, "seed": params.sampling.seed,
            "alias": sorted(params.model_alias), "ui": params.ui,
        }

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"status": "ok"} if self.path == "/health" else seen).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self._http = ThreadingHTTPServer((params.hostnames[0], params.port), Handler)
        self.listening_address = f"http://{params.hostnames[0]}:{params.port}"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()
        print("fake xllamacpp serving", flush=True)
"""


@pytest.fixture
def fake_xllamacpp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake `xllamacpp` importable here (for the install check) and in the child."""
    package = tmp_path / "fake_site" / "xllamacpp"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(FAKE_XLLAMACPP)
    monkeypatch.syspath_prepend(str(package.parent))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(package.parent), str(ROOT)]))
    monkeypatch.delitem(sys.modules, "xllamacpp", raising=False)
    return package.parent


@pytest.fixture
def model(tmp_path: Path) -> str:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return str(path)


@pytest.fixture
def make_server(tmp_path: Path, fake_xllamacpp: Path) -> Callable[..., LlamaServer]:
    def make(model: str, **launch: Any) -> LlamaServer:
        return LlamaServer(
            ServerLaunch(model=model, **launch),
            log_path=tmp_path / "server.log",
            startup_timeout=30.0,
            restart_backoff=0.05,
            stop_grace=5.0,
            health_interval=0.05,
        )

    return make


async def get_json(url: str) -> Any:
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.json(content_type=None)


async def test_settings_reach_the_server_params(
    make_server: Callable[..., LlamaServer], model: str
) -> None:
    server = make_server(
        model,
        ctx_size=2048,
        parallel=2,
        threads=1,
        chat_template="gemma",
        extra_args=("--embeddings", "--pooling", "mean", "-s", "42", "-a", "tiny"),
    )
    assert server.argv[1:3] == ["-m", "proxy.upstream.xllamacpp_child"]
    await server.start()
    try:
        seen = await get_json(f"{server.base_url}/props")
    finally:
        await server.stop()
    assert seen == {
        "model": model,
        "n_ctx": 2048,
        "n_parallel": 2,
        "threads": 1,
        "threads_batch": 1,
        "use_jinja": False,
        "chat_template": "gemma",
        "endpoint_props": True,
        "embedding": True,
        "pooling_type": 1,
        "seed": 42,
        "alias": ["tiny"],
        "ui": False,
    }
    log = server.log_path.read_text()
    # The child's own lines and the server's both land in the server's log file.
    assert "xllamacpp 0.0-fake" in log and "fake xllamacpp serving" in log
    assert "SIGTERM, stopping" in log


async def test_a_server_that_fails_to_start_is_reported_with_its_log(
    make_server: Callable[..., LlamaServer], tmp_path: Path
) -> None:
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF")
    server = make_server(str(broken))
    with pytest.raises(LlamaServerError) as info:
        await server.start()
    message = str(info.value)
    assert "the xllamacpp server exited with code 1" in message
    assert "failed to load model" in message
    assert server.state == "failed" and server.pid is None


async def test_killed_child_is_restarted(
    make_server: Callable[..., LlamaServer], model: str
) -> None:
    server = make_server(model)
    await server.start()
    try:
        first = server.pid
        assert first is not None
        os.kill(first, signal.SIGKILL)
        async with asyncio.timeout(30):
            while server.pid in (None, first) or server.state != "running":
                await asyncio.sleep(0.05)
        assert server.restarts == 1
        assert (await get_json(f"{server.base_url}/health")) == {"status": "ok"}
    finally:
        await server.stop()


def test_unsupported_options_are_refused_before_anything_starts(model: str) -> None:
    with pytest.raises(LlamaServerError, match=r"extra_args: .*--mlock, --rope-scaling"):
        ServerLaunch(model=model, extra_args=("--mlock", "--rope-scaling", "yarn", "-c", "8"))
    # The binary backend passes them on: llama-server itself knows them.
    ServerLaunch(model=model, backend="binary", binary="/x", extra_args=("--mlock",))


async def test_missing_xllamacpp_says_how_to_install(
    model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("proxy.upstream.launch.xllamacpp_installed", lambda: False)
    with pytest.raises(LlamaServerError, match=r"needs package xllamacpp.*'\.\[local\]'"):
        await LlamaServer(ServerLaunch(model=model)).start()


SUPERVISOR = """
import asyncio, sys
from proxy.upstream.launch import ServerLaunch
from proxy.upstream.spawn import LlamaServer

async def main():
    server = LlamaServer(ServerLaunch(model=sys.argv[1]), log_path=None, startup_timeout=30)
    await server.start()
    print("PID", server.pid, flush=True)
    await asyncio.sleep(60)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal is Linux-only")
def test_child_dies_with_the_proxy(fake_xllamacpp: Path, model: str) -> None:
    proxy = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SUPERVISOR), model],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proxy.stdout is not None
        line = ""
        while not line.startswith("PID "):
            line = proxy.stdout.readline()
            assert line, "the supervisor script ended early"
        child = int(line.split()[1])
        proxy.kill()  # no stop(), no cleanup: only the kernel can tell the child
        proxy.wait()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(child, signal.SIGKILL)
        pytest.fail("the xllamacpp child outlived the proxy")
    finally:
        proxy.kill()
