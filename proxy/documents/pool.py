"""Long-lived parse worker processes; a worker that hangs or dies is killed and replaced."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import structlog

from proxy.documents.fairness import FairShare
from proxy.documents.framing import HEADER, frame_length, pack, pack_json
from proxy.logs import child_environment

log = structlog.get_logger(__name__)

WORKER_MEMORY_BYTES = 4 * 1024**3
"""Address-space cap per worker, so a hostile file fails its parse instead of the machine."""
RECYCLE_RSS_BYTES = 1024**3
"""A worker still holding more than this after a job is replaced: freed memory is not always
given back to the system, and a bomb's heap would otherwise stay until the next job."""
_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_READ_BUFFER = 4 * 1024 * 1024
STARTUP_TIMEOUT_S = 120.0
"""Importing the parsers is not part of a parse: it has its own, generous, timeout."""

Message = dict[str, Any]


class WorkerTimeout(Exception):
    """The worker did not finish the job in time; it has been killed."""


class WorkerCrashed(Exception):
    """The worker died during the job (crash, signal, out of memory)."""

    def __init__(self, returncode: int | None) -> None:
        super().__init__(f"parser process exited with code {returncode}")
        self.returncode = returncode


class WorkerUnavailable(Exception):
    """A fresh worker failed to start (broken installation, not a bad document)."""


class _Worker:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.ready = False

    async def wait_ready(self) -> None:
        if self.ready:
            return
        try:
            async with asyncio.timeout(STARTUP_TIMEOUT_S):
                message = await self.receive()
        except (TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
            raise WorkerUnavailable(f"parse worker did not start ({exc!r})") from exc
        if message.get("t") != "ready":
            raise WorkerUnavailable(f"parse worker sent {message!r} instead of ready")
        self.ready = True

    async def send(self, job: Message, data: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(pack_json(job))
        self.proc.stdin.write(pack(data))
        await self.proc.stdin.drain()

    async def receive(self) -> Message:
        assert self.proc.stdout is not None
        header = await self.proc.stdout.readexactly(HEADER)
        body = await self.proc.stdout.readexactly(frame_length(header))
        message: Message = json.loads(body)
        return message


class WorkerPool:
    """`size` worker processes, each running one job at a time."""

    def __init__(
        self,
        size: int = 2,
        *,
        argv: Sequence[str] | None = None,
        memory_bytes: int = WORKER_MEMORY_BYTES,
        recycle_rss_bytes: int = RECYCLE_RSS_BYTES,
        per_key: int | None = None,
    ) -> None:
        self._size = max(1, size)
        # None: no cap (one identity); the proxy's wiring caps keys at all processes but one.
        self.share = FairShare(self._size, min(self._size, per_key or self._size))
        self._argv = list(argv or [sys.executable, "-m", "proxy.documents.readers.worker"])
        self._argv.append(str(memory_bytes))
        self._idle: asyncio.Queue[_Worker | None] | None = None
        self._live: set[_Worker] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._recycle_rss_bytes = recycle_rss_bytes
        self.recycled = 0
        """Workers replaced for holding too much memory after a job."""
        self.jobs = 0
        """Jobs handed to a worker so far (tests read it to prove a cache hit skipped the pool)."""

    def pids(self) -> list[int]:
        return [worker.proc.pid for worker in self._live]

    async def start(self) -> None:
        """Spawn the workers and wait until they are ready, rather than on the first parse."""
        workers = [await self._acquire() for _ in range(self._size)]
        for worker in workers:
            self._queue().put_nowait(worker)

    async def run(
        self,
        job: Message,
        data: bytes,
        timeout_s: float,
        on_message: Callable[[Message], float | None],
        key: str = "",
    ) -> None:
        """Run one job, passing each frame to `on_message`, until `done` or `error` arrives.

        `on_message` may return seconds to add to the time limit (slow steps such as OCR).
        `key`: whose job it is, for the fair share of the processes (waiting is not timed).
        """
        await self.share.acquire(key)
        try:
            await self._run(job, data, timeout_s, on_message)
        finally:
            self.share.release(key)

    async def _run(
        self,
        job: Message,
        data: bytes,
        timeout_s: float,
        on_message: Callable[[Message], float | None],
    ) -> None:
        for attempt in (1, 2):
            worker = await self._acquire()
            self.jobs += 1
            acked = finished = bloated = False
            try:
                async with asyncio.timeout(timeout_s) as deadline:
                    await worker.send(job, data)
                    while not finished:
                        message = await worker.receive()
                        acked = True
                        finished = message.get("t") in ("done", "error")
                        if finished:
                            bloated = int(message.get("rss", 0)) > self._recycle_rss_bytes
                        extra = on_message(message)
                        if extra and deadline.when() is not None:
                            deadline.reschedule(deadline.when() + extra)  # type: ignore[operator]
                return
            except TimeoutError:
                raise WorkerTimeout() from None
            except (asyncio.IncompleteReadError, ConnectionError, ValueError) as exc:
                # A worker that died before taking the job (killed while idle) is not the
                # document's fault: try once more on a fresh one.
                if not acked and attempt == 1:
                    continue
                await _wait_briefly(worker.proc)
                raise WorkerCrashed(worker.proc.returncode) from exc
            finally:
                if finished and not bloated:
                    self._queue().put_nowait(worker)
                else:
                    if bloated:
                        self.recycled += 1
                        log.info(
                            "parse worker recycled: memory kept after a job", pid=worker.proc.pid
                        )
                    self._replace(worker)

    async def close(self) -> None:
        self._closed = True
        for task in self._tasks:
            task.cancel()
        for worker in list(self._live):
            if worker.proc.stdin is not None:
                worker.proc.stdin.close()
        for worker in list(self._live):
            await _wait_briefly(worker.proc, 2.0)
            if worker.proc.returncode is None:
                worker.proc.kill()
                await worker.proc.wait()
        self._live.clear()

    def _queue(self) -> asyncio.Queue[_Worker | None]:
        if self._idle is None:
            self._idle = asyncio.Queue()
            for _ in range(self._size):
                self._idle.put_nowait(None)
        return self._idle

    async def _acquire(self) -> _Worker:
        if self._closed:
            raise RuntimeError("the parse pool is closed")
        slot = await self._queue().get()
        try:
            if slot is None or slot.proc.returncode is not None:
                if slot is not None:
                    self._live.discard(slot)
                slot = await self._spawn()
            await slot.wait_ready()
            return slot
        except BaseException:
            if slot is not None and slot.proc.returncode is None:
                slot.proc.kill()
            if slot is not None:
                self._live.discard(slot)
            self._queue().put_nowait(None)
            raise

    async def _spawn(self) -> _Worker:
        # A worker logs in the proxy's format and level (its lines go to the same stderr).
        env = {**os.environ, **child_environment()}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_ROOT, env.get("PYTHONPATH")]))
        proc = await asyncio.create_subprocess_exec(
            *self._argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
            limit=_READ_BUFFER,
        )
        worker = _Worker(proc)
        self._live.add(worker)
        log.debug("parse worker started", pid=proc.pid)
        return worker

    def _replace(self, worker: _Worker) -> None:
        # Synchronous kill: this runs in `finally`, possibly while the caller is cancelled.
        if worker.proc.returncode is None:
            worker.proc.kill()
        self._live.discard(worker)
        log.warning("parse worker replaced", pid=worker.proc.pid)
        task = asyncio.get_running_loop().create_task(self._respawn(worker))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _respawn(self, old: _Worker) -> None:
        await old.proc.wait()
        fresh: _Worker | None = None
        try:
            if not self._closed:
                fresh = await self._spawn()
        finally:
            self._queue().put_nowait(fresh)


async def _wait_briefly(proc: asyncio.subprocess.Process, seconds: float = 0.5) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await proc.wait()
