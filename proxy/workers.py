"""Worker processes: started from the parent, restarted when one dies, stopped when the parent
dies (even by SIGKILL): no orphan keeps serving the port unsupervised."""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from multiprocessing.process import BaseProcess
from types import FrameType

import structlog

log = structlog.get_logger(__name__)

PR_SET_PDEATHSIG = 1
# A worker that dies this soon after starting, this many times in a row, is not restarted:
# a broken configuration or environment would otherwise spin forever.
QUICK_DEATH_S = 5.0
QUICK_DEATHS_TO_GIVE_UP = 5


def stop_with_parent(parent_pid: int) -> None:
    """In a worker: receive SIGTERM when the parent dies (Linux), so the worker drains its
    in-flight requests within the shutdown grace and exits. Elsewhere, a thread watches the
    parent's pid instead."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl")
    except (OSError, AttributeError):
        _watch_parent(parent_pid)
    if os.getppid() != parent_pid:  # died before the death signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


def _watch_parent(parent_pid: int) -> None:
    import threading

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(1.0)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def supervise(count: int, run: Callable[[socket.socket, int], None], sock: socket.socket) -> int:
    """Run `count` workers on `sock` until SIGTERM/SIGINT; restart any that dies meanwhile."""
    context = multiprocessing.get_context("fork")
    parent = os.getpid()
    stopping = False
    workers: dict[int, BaseProcess] = {}
    started: dict[int, float] = {}
    quick_deaths = 0

    def start(index: int) -> None:
        worker = context.Process(target=run, args=(sock, parent), name=f"proxy-worker-{index}")
        worker.start()
        workers[index], started[index] = worker, time.monotonic()

    def forward(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers.values():
            if worker.pid is not None and worker.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for index in range(count):
        start(index)
    log.info("workers started", count=count, pids=[w.pid for w in workers.values()])
    failed = False
    while workers:
        multiprocessing.connection.wait([w.sentinel for w in workers.values()])
        for index, worker in list(workers.items()):
            if worker.is_alive():
                continue
            worker.join()
            del workers[index]
            if stopping:
                failed = failed or worker.exitcode not in (0, -signal.SIGTERM, -signal.SIGINT)
                continue
            lived = time.monotonic() - started[index]
            quick_deaths = quick_deaths + 1 if lived < QUICK_DEATH_S else 0
            if quick_deaths >= QUICK_DEATHS_TO_GIVE_UP:
                log.error("workers keep dying at start; stopping", exitcode=worker.exitcode)
                forward(signal.SIGTERM, None)
                failed = True
                continue
            log.warning("worker died; restarting it", pid=worker.pid, exitcode=worker.exitcode)
            time.sleep(min(QUICK_DEATH_S, 0.5 * quick_deaths))
            start(index)
    sock.close()
    sys.stdout.flush()
    return 1 if failed else 0
