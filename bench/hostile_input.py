"""What hostile input costs everyone else: how long a static page takes while clients send
bodies a red team found (60 MB of 4,299-digit integers), how much memory bodies held half-sent
take, and how long /healthz takes while the upstream's /health hangs or sends 60 MB.

    python bench/hostile_input.py                             # this checkout, ~2 minutes
    python bench/hostile_input.py --compare-root ../main      # and another checkout, same run
    python bench/hostile_input.py --seconds 10 --clients 1    # shorter

Each checkout runs as deployed (`python -m proxy`) in front of a small upstream of this file's
own, each in its own process; the clients and the page prober run here. For each body shape,
`--clients` clients send it back to back for `--seconds` while a prober fetches `/ui/app.css`
(a static file: nothing of the upstream) every 50 ms; printed: the body's answers, the slowest
page, and the seconds the page took 0.25 s or more (the probes over it, summed). The control
shape is the same size as plain text. Then `--held` connections each send 63 MB of a 64 MB
body and wait: printed, how many the proxy refused and how much its memory (RSS) grew. Prints
numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
SLOW_S = 0.25
PROBE_EVERY_S = 0.05
HUGE = 60_000_000
DIGITS = 4299  # the most digits Python converts to an int by default


def integers_body() -> bytes:
    """A chat body with 14,000 integers of 4,299 digits in `metadata` (60 MB)."""
    number = b"7" * DIGITS
    count = HUGE // (DIGITS + 1)
    head = b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "metadata": {"n": ['
    return head + b",".join([number] * count) + b"]}}"


def text_body(size: int) -> bytes:
    """The control: a chat body of the same size, its bulk one string in `metadata`."""
    head = b'{"model": "m", "messages": [{"role": "user", "content": "Hi"}], "metadata": {"n": "'
    return head + b"7" * (size - len(head) - 4) + b'"}}'


# -- the upstream ------------------------------------------------------------------------------

ANSWER = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
).encode()


def upstream_app(health: str) -> web.Application:
    huge = b'{"status": "ok", "x": "' + b"x" * HUGE + b'"}' if health == "huge" else b""

    async def chat(request: web.Request) -> web.Response:
        await request.read()  # read, never parsed: its cost is not the proxy's
        return web.Response(body=ANSWER, content_type="application/json")

    async def health_route(request: web.Request) -> web.StreamResponse:
        if health == "hang":
            await asyncio.sleep(3600)
        if health == "huge":
            return web.Response(body=huge, content_type="application/json")
        return web.json_response({"status": "ok"})

    async def not_found(request: web.Request) -> web.Response:
        raise web.HTTPNotFound()

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health_route)
    app.router.add_get("/v1/models", lambda r: web.json_response({"object": "list", "data": []}))
    app.router.add_route("*", "/{tail:.*}", not_found)
    return app


# -- processes ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


async def wait_for(url: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as answer:
                    if answer.status < 500 or "/health" in url:
                        return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


@contextlib.contextmanager
def upstream(health: str) -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, __file__, "--role", "upstream", "--health", health, "--port", str(port)]
    )
    try:
        asyncio.run(wait_for(f"http://{HOST}:{port}/v1/models"))
        yield f"http://{HOST}:{port}"
    finally:
        process.kill()  # a hanging /health would hold a graceful stop for a minute
        process.wait(30)


@contextlib.contextmanager
def proxy(root: Path, upstream_url: str) -> Iterator[tuple[str, int]]:
    port = free_port()
    with tempfile.TemporaryDirectory() as data:
        env = {
            **os.environ,
            "PYTHONPATH": str(root),
            "PROXY__SERVER__DATA_DIR": data,
            "PROXY__SERVER__LOG_LEVEL": "warning",
        }
        command = [sys.executable, "-m", "proxy", "--host", HOST, "--port", str(port)]
        command += ["--upstream", upstream_url]
        process = subprocess.Popen(command, cwd=data, env=env)
        try:
            asyncio.run(wait_for(f"http://{HOST}:{port}/ui/app.css"))
            yield f"http://{HOST}:{port}", process.pid
        finally:
            process.terminate()
            process.wait(60)


# -- measuring ---------------------------------------------------------------------------------


@dataclass
class Probed:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)

    @property
    def slowest(self) -> float:
        return max(self.latencies, default=0.0)

    @property
    def slow_seconds(self) -> float:
        return sum(t for t in self.latencies if t >= SLOW_S)


async def probe_page(session: aiohttp.ClientSession, base: str, stop: asyncio.Event) -> Probed:
    probed = Probed()
    while not stop.is_set():
        started = time.perf_counter()
        async with session.get(base + "/ui/app.css") as answer:
            await answer.read()
        probed.latencies.append(time.perf_counter() - started)
        await asyncio.sleep(PROBE_EVERY_S)
    return probed


async def send_bodies(
    session: aiohttp.ClientSession, base: str, body: bytes, stop: asyncio.Event, seen: Counter[str]
) -> None:
    headers = {"Content-Type": "application/json"}
    while not stop.is_set():
        async with session.post(base + "/v1/chat/completions", data=body, headers=headers) as got:
            text = await got.read()
        code = ""
        with contextlib.suppress(ValueError, KeyError, TypeError):
            code = " " + str(json.loads(text)["error"]["code"])
        seen[f"{got.status}{code}"] += 1


async def under_load(base: str, body: bytes, clients: int, seconds: float) -> Probed:
    stop = asyncio.Event()
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        prober = asyncio.create_task(probe_page(session, base, stop))
        seen: Counter[str] = Counter()
        senders = [
            asyncio.create_task(send_bodies(session, base, body, stop, seen))
            for _ in range(clients)
        ]
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*senders)
        probed = await prober
    probed.statuses = seen
    return probed


async def healthz_seconds(base: str, times: int) -> tuple[list[float], list[int], Probed]:
    stop = asyncio.Event()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        prober = asyncio.create_task(probe_page(session, base, stop))
        took, statuses = [], []
        for _ in range(times):
            started = time.perf_counter()
            async with session.get(base + "/healthz") as answer:
                await answer.read()
            took.append(time.perf_counter() - started)
            statuses.append(answer.status)
        stop.set()
        return took, statuses, await prober


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def hold_bodies(base: str, count: int) -> tuple[int, list[asyncio.StreamWriter]]:
    """`count` connections each sending 63 MB of a 64 MB body, then waiting; how many the
    proxy answered (refused) meanwhile."""
    host, port = base.removeprefix("http://").split(":")
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {64 * 2**20}\r\n\r\n"
    ).encode()
    part = b'{"messages": "' + b"x" * (63 * 2**20)
    refused = 0
    writers = []
    for _ in range(count):
        reader, writer = await asyncio.open_connection(host, int(port))
        writers.append(writer)
        writer.write(head)
        try:
            for start in range(0, len(part), 2**20):
                writer.write(part[start : start + 2**20])
                await asyncio.wait_for(writer.drain(), 10)
        except (TimeoutError, ConnectionError):
            pass
        with contextlib.suppress(TimeoutError):
            if await asyncio.wait_for(reader.read(12), 1):
                refused += 1
    await asyncio.sleep(3)
    return refused, writers


def measure_held(root: Path, label: str, count: int) -> None:
    with upstream("ok") as up, proxy(root, up) as (base, pid):
        before = rss_mb(pid)

        async def run() -> tuple[int, float]:
            refused, writers = await hold_bodies(base, count)
            grown = rss_mb(pid) - before
            for writer in writers:
                writer.close()
            return refused, grown

        refused, grown = asyncio.run(run())
        print(
            f"{label:<10} {count} bodies held half-sent (63 of 64 MB each): {refused} refused,"
            f" RSS +{grown:.0f} MB",
            flush=True,
        )


def measure_load(root: Path, label: str, clients: int, seconds: float) -> None:
    integers = integers_body()
    shapes = {"integers": integers, "same size, text": text_body(len(integers))}
    with upstream("ok") as up, proxy(root, up) as (base, _):
        for name, body in shapes.items():
            probed = asyncio.run(under_load(base, body, clients, seconds))
            answers = ", ".join(f"{n}× {status}" for status, n in probed.statuses.items())
            print(
                f"{label:<10} {name:<17} {len(body) / 1e6:5.0f} MB  page slowest"
                f" {probed.slowest:6.3f} s, ≥{SLOW_S} s for {probed.slow_seconds:5.1f} s"
                f" of {seconds:g}  answers: {answers}",
                flush=True,
            )


def measure_health(root: Path, label: str) -> None:
    for health in ("hang", "huge"):
        with upstream(health) as up, proxy(root, up) as (base, _):
            took, statuses, probed = asyncio.run(healthz_seconds(base, 3))
            print(
                f"{label:<10} /health {health:<9}         /healthz"
                f" {', '.join(f'{t:.2f} s' for t in took)} (status {statuses[-1]}),"
                f" page slowest {probed.slowest:.3f} s",
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["bench", "upstream"], default="bench")
    parser.add_argument("--health", default="ok")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--compare-root", type=Path, help="another checkout, measured alike")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--held", type=int, default=8, help="connections holding 64 MB bodies")
    parser.add_argument("--parts", default="load,health,held", help="which measurements")
    args = parser.parse_args()
    if args.role == "upstream":
        web.run_app(upstream_app(args.health), host=HOST, port=args.port, print=None)
        return 0
    print(f"load average before: {os.getloadavg()[0]:.1f}; {args.clients} clients per shape")
    roots = [(ROOT, "this")]
    if args.compare_root is not None:
        roots.append((args.compare_root.resolve(), "compared"))
    parts = args.parts.split(",")
    for root, label in roots:
        if "load" in parts:
            measure_load(root, label, args.clients, args.seconds)
        if "health" in parts:
            measure_health(root, label)
    for root, label in roots:
        if "held" in parts:
            measure_held(root, label, args.held)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
