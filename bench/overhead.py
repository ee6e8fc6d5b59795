"""How much the proxy adds: the same load sent direct to a nearly free fake upstream and through
the proxy in front of it, in interleaved rounds so machine noise hits every target alike.

    python bench/overhead.py            # ~2 minutes, ~5 with LiteLLM
    python bench/overhead.py --quick    # ~30 seconds (~1.5 minutes with LiteLLM), rough numbers

Processes: the fake upstream, the proxy (`python -m proxy`, exactly as deployed) and the peer
users would pick instead, LiteLLM's proxy (`litellm --config ...`, an openai-compatible model
pointing at the same fake upstream), each run in their own process; the load generator (one
aiohttp ClientSession) runs in this process. Prints numbers, asserts nothing.

LiteLLM lives in a venv of its own (it pins its own aiohttp, pydantic and FastAPI):

    python3 -m venv .bench-venvs/litellm
    .bench-venvs/litellm/bin/pip install 'litellm[proxy]==1.106.12'

`--litellm PATH` names another `litellm` executable; without one its column is left out with a
note.

Diagnostics: `--targets direct,proxy,bare-relay` adds a minimal aiohttp relay (the floor any
aiohttp proxy pays), `proxy-info` the CLI at its default log level, `proxy-alt` with
`--compare-root DIR` the CLI from another checkout (A/B a change in one interleaved run);
`--chunk-interval-ms 1` paces the upstream's stream like a (very fast) model.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import IO, Any, TypeVar

import aiohttp
from aiohttp import web

uvloop: ModuleType | None
try:
    import uvloop
except ImportError:  # pragma: no cover - optional
    uvloop = None

ROOT = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")
T = TypeVar("T")

# -- the fake upstream: fixed answers, precomputed bytes -----------------------------------------

COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello from the bench upstream."},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16},
    }
).encode()


def sse_events(chunks: int) -> list[bytes]:
    """`chunks` chat.completion.chunk events (the last one finishing), then `[DONE]`."""
    events = []
    for index in range(chunks):
        last = index == chunks - 1
        payload = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "delta": {} if last else {"content": f" tok{index}"},
                    "finish_reason": "stop" if last else None,
                }
            ],
        }
        events.append(b"data: " + json.dumps(payload).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def upstream_app(chunks: int, interval: float = 0.0) -> web.Application:
    events = sse_events(chunks)
    json_headers = {"Content-Type": "application/json"}
    sse_headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        # A byte search, not a JSON parse: the bench client and the proxy write `"stream": true`.
        if b'"stream": true' not in body and b'"stream":true' not in body:
            return web.Response(body=COMPLETION, headers=json_headers)
        response = web.StreamResponse(headers=sse_headers)
        await response.prepare(request)
        for event in events:  # one write per event, as llama-server does per token
            await response.write(event)
            if interval:
                await asyncio.sleep(interval)
        await response.write_eof()
        return response

    # What the proxy asks a llama-server once (then caches): its kind and context window.
    props = json.dumps({"default_generation_settings": {"n_ctx": 8192}}).encode()
    models = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]}).encode()

    async def fixed(request: web.Request) -> web.Response:
        body = props if request.path == "/props" else models
        return web.Response(body=body, headers=json_headers)

    async def health(request: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', headers=json_headers)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/props", fixed)
    app.router.add_get("/v1/models", fixed)
    app.router.add_get("/health", health)
    return app


def proxy_app(upstream: str, data_dir: str, log_level: str) -> web.Application:
    """The proxy app exactly as `python -m proxy` builds it (serve._run), minus run_app."""
    sys.path.insert(0, str(ROOT))
    from proxy.config import load_settings
    from proxy.http.app import make_app
    from proxy.logs import configure_logging

    settings = load_settings(
        None,
        environ={},
        overrides={
            "upstream": {"base_url": upstream},
            "server": {"data_dir": data_dir, "log_level": log_level},
        },
    )
    configure_logging(settings.server.log_format, settings.server.log_level)
    return make_app(settings)


def bare_relay_app(upstream: str) -> web.Application:
    """The least an aiohttp relay can do (no headers policy, metrics, logs, checks): a floor."""
    url = upstream + "/v1/chat/completions"

    async def session_ctx(app: web.Application) -> AsyncIterator[None]:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0), auto_decompress=False
        ) as session:
            app[SESSION] = session
            yield

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        async with request.app[SESSION].post(url, data=body, headers=headers) as upstream_response:
            content_type = upstream_response.headers.get("Content-Type", "application/json")
            if upstream_response.content_type != "text/event-stream":
                answer = await upstream_response.read()
                return web.Response(body=answer, headers={"Content-Type": content_type})
            response = web.StreamResponse(headers={"Content-Type": content_type})
            await response.prepare(request)
            async for chunk in upstream_response.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_post("/v1/chat/completions", chat)
    return app


SESSION = web.AppKey("session", aiohttp.ClientSession)


async def serve(app: web.Application, port: int) -> None:
    # Same runner options as proxy/serve.py passes to web.run_app.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, HOST, port, backlog=1024).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await runner.cleanup()


def run_loop(coro: Coroutine[Any, Any, T], kind: str) -> T:
    factory = None
    if kind == "uvloop":
        assert uvloop is not None, "uvloop is not installed"
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


def child_main(args: argparse.Namespace) -> int:
    if args.role == "upstream":
        app = upstream_app(args.chunks, args.chunk_interval_ms / 1000)
    elif args.role == "bare-relay":
        app = bare_relay_app(args.upstream)
    else:
        app = proxy_app(args.upstream, args.data_dir, args.proxy_log_level)
    run_loop(serve(app, args.port), args.loop)
    return 0


# -- the peer: LiteLLM's proxy ---------------------------------------------------------------


def litellm_executable(given: Path | None) -> Path | None:
    if given is not None:
        return given if given.exists() else None
    local = ROOT / ".bench-venvs" / "litellm" / "bin" / "litellm"
    if local.exists():
        return local
    found = shutil.which("litellm")
    return Path(found) if found else None


def litellm_version(executable: Path) -> str:
    python = executable.with_name("python")
    probe = "import importlib.metadata as m; print(m.version('litellm'))"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        done = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, timeout=60, check=False
        )
        if done.returncode == 0:
            return done.stdout.strip()
    return "(version unknown)"


def write_litellm_config(directory: Path, upstream: str) -> Path:
    """One model, `bench`, served by the fake upstream as an OpenAI-compatible endpoint."""
    config = directory / "litellm.json"  # JSON is YAML: no YAML writer needed here
    config.write_text(
        json.dumps(
            {
                "model_list": [
                    {
                        "model_name": "bench",
                        "litellm_params": {
                            "model": "openai/bench",
                            "api_base": upstream + "/v1",
                            "api_key": "unused",
                        },
                    }
                ],
                "litellm_settings": {"telemetry": False},
                "general_settings": {"master_key": LITELLM_KEY},
            }
        )
    )
    # Warnings only, like the proxy under test here: no access line per request.
    quiet = {"level": "WARNING", "handlers": ["stderr"], "propagate": False}
    logging_config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"stderr": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
        "loggers": {name: quiet for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }
    (directory / "litellm-logging.json").write_text(json.dumps(logging_config))
    return config


# -- processes -------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def child_pids(pid: int) -> list[int]:
    """Direct children of a process (the proxy's `--workers` processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


# pid -> the pids whose CPU counts for it (itself and its workers), filled once all are ready.
FAMILIES: dict[int, list[int]] = {}


def cpu_seconds(pid: int) -> float:
    """On-CPU time of a process and its children, all threads (schedstat ns, else stat ticks)."""
    return sum(_cpu_seconds(member) for member in FAMILIES.get(pid, [pid]))


def _cpu_seconds(pid: int) -> float:
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                total += int((task / "schedstat").read_text().split()[0])
        if total:
            return total / 1e9
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


@dataclass
class Child:
    name: str
    where: str
    command: list[str]
    port: int
    env: dict[str, str] | None = None
    cwd: Path = ROOT
    proc: subprocess.Popen[bytes] | None = None
    log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self.log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the child
        self.proc = subprocess.Popen(
            self.command,
            cwd=self.cwd,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )

    def stderr_tail(self) -> str:
        if self.log is None:
            return ""
        self.log.seek(0)
        return self.log.read().decode("utf-8", "replace")[-3000:]

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def wait_ready(session: aiohttp.ClientSession, child: Child, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert child.proc is not None
        if child.proc.poll() is not None:
            raise RuntimeError(f"{child.name} exited early:\n{child.stderr_tail()}")
        with contextlib.suppress(aiohttp.ClientError, OSError):
            async with session.get(child.url + "/bench-ready") as response:
                await response.read()
                return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{child.name} did not start within {timeout:.0f}s:\n{child.stderr_tail()}")


# -- load ------------------------------------------------------------------------------------

REQUEST = {
    "model": "bench",
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hello."},
    ],
    "max_tokens": 16,
}
PLAIN_BODY = json.dumps(REQUEST).encode()
STREAM_BODY = json.dumps({**REQUEST, "stream": True}).encode()
# LiteLLM refuses to start without a master key; the other targets forward or ignore it.
LITELLM_KEY = "sk-bench-4f9c2e7a1b3d5e6f8a9b0c1d2e3f4a5b"
HEADERS = {"Content-Type": "application/json", "Authorization": f"Bearer {LITELLM_KEY}"}


@dataclass
class Target:
    key: str
    label: str
    url: str
    pids: dict[str, int]  # server processes on this target's path: name -> pid


@dataclass
class Samples:
    """One (scenario, target) cell, summed over rounds."""

    latencies: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    round_p50: list[float] = field(default_factory=list)
    round_ttfb_p50: list[float] = field(default_factory=list)
    wall: float = 0.0
    requests: int = 0
    chunks: int = 0
    errors: list[str] = field(default_factory=list)
    cpu: dict[str, float] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


async def plain_request(session: aiohttp.ClientSession, url: str, cell: Samples) -> None:
    started = time.perf_counter()
    async with session.post(url, data=PLAIN_BODY, headers=HEADERS) as response:
        body = await response.read()
    cell.latencies.append(time.perf_counter() - started)
    if response.status != 200 or not body.startswith(b"{"):
        cell.errors.append(f"status {response.status}: {body[:200]!r}")


async def stream_request(
    session: aiohttp.ClientSession, url: str, cell: Samples, expected: int
) -> None:
    started = time.perf_counter()
    first: float | None = None
    parts: list[bytes] = []
    async with session.post(url, data=STREAM_BODY, headers=HEADERS) as response:
        async for chunk in response.content.iter_any():
            if first is None:
                first = time.perf_counter()
            parts.append(chunk)
    ended = time.perf_counter()
    body = b"".join(parts)
    events = body.count(b"data: ") - 1  # not counting [DONE]
    cell.latencies.append(ended - started)
    cell.ttfb.append((first or ended) - started)
    cell.chunks += max(events, 0)
    if response.status != 200 or events != expected or not body.endswith(b"data: [DONE]\n\n"):
        cell.errors.append(f"status {response.status}, {events}/{expected} events: {body[-200:]!r}")


async def batch(
    session: aiohttp.ClientSession,
    target: Target,
    cell: Samples | None,
    *,
    requests: int,
    concurrency: int,
    stream: bool,
    chunks: int,
) -> None:
    """`requests` requests, `concurrency` at a time; `cell=None` is a warm-up, not recorded."""
    sink = cell if cell is not None else Samples()
    url = target.url + "/v1/chat/completions"
    before_latencies, before_ttfb = len(sink.latencies), len(sink.ttfb)
    remaining = requests

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            if stream:
                await stream_request(session, url, sink, chunks)
            else:
                await plain_request(session, url, sink)

    cpu_before = {name: cpu_seconds(pid) for name, pid in target.pids.items()}
    client_before = time.process_time()
    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    sink.wall += time.perf_counter() - started
    sink.requests += requests
    sink.cpu["client"] = sink.cpu.get("client", 0.0) + time.process_time() - client_before
    for name, pid in target.pids.items():
        sink.cpu[name] = sink.cpu.get(name, 0.0) + cpu_seconds(pid) - cpu_before[name]
    sink.round_p50.append(percentile(sink.latencies[before_latencies:], 50))
    if stream:
        sink.round_ttfb_p50.append(percentile(sink.ttfb[before_ttfb:], 50))


@dataclass
class Scenario:
    key: str
    requests: int
    concurrency: int
    stream: bool


Results = dict[tuple[str, str], Samples]  # (scenario, target) -> samples


async def bench(
    args: argparse.Namespace, children: dict[str, Child], targets: list[Target]
) -> tuple[Results, list[float]]:
    scenarios = [
        Scenario("c1", args.requests, 1, False),
        Scenario("c32", args.requests, args.concurrency, False),
        Scenario("stream", args.streams, args.stream_concurrency, True),
    ]
    results: Results = {(s.key, t.key): Samples() for s in scenarios for t in targets}
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        for child in children.values():
            await wait_ready(session, child)
        for child in children.values():
            FAMILIES[child.pid] = [child.pid, *child_pids(child.pid)]
        for target in targets:  # warm-up: connections, imports, caches
            for scenario in scenarios:
                await batch(
                    session,
                    target,
                    None,
                    requests=max(scenario.concurrency * 2, 20 if scenario.stream else 200),
                    concurrency=scenario.concurrency,
                    stream=scenario.stream,
                    chunks=args.chunks,
                )
        loads = [os.getloadavg()[0]]
        for round_index in range(args.rounds):
            # Rotate who goes first, so no target always runs right after another one.
            shift = round_index % len(targets)
            order = targets[shift:] + targets[:shift]
            for scenario in scenarios:
                for target in order:
                    await batch(
                        session,
                        target,
                        results[scenario.key, target.key],
                        requests=max(scenario.requests // args.rounds, scenario.concurrency),
                        concurrency=scenario.concurrency,
                        stream=scenario.stream,
                        chunks=args.chunks,
                    )
            loads.append(os.getloadavg()[0])
            print(
                f"  round {round_index + 1}/{args.rounds} done, load {loads[-1]:.1f}",
                file=sys.stderr,
                flush=True,
            )
    return results, loads


# -- report ----------------------------------------------------------------------------------


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def report(
    args: argparse.Namespace,
    children: dict[str, Child],
    targets: list[Target],
    results: Results,
    loads: list[float],
    elapsed: float,
) -> None:
    direct = targets[0].key
    others = [t for t in targets if t.key != direct]

    def cell(scenario: str, target: Target) -> Samples:
        return results[scenario, target.key]

    def row(name: str, goal: str, values: list[str]) -> str:
        return "| " + " | ".join([name, *values, goal]) + " |"

    c1 = {t.key: cell("c1", t).latencies for t in targets}
    ttfb = {t.key: cell("stream", t).ttfb for t in targets}
    whole = {t.key: cell("stream", t).latencies for t in targets}
    rps = {t.key: cell("c32", t).requests / cell("c32", t).wall for t in targets}
    cps = {t.key: cell("stream", t).chunks / cell("stream", t).wall for t in targets}

    def added(values: dict[str, list[float]], target: Target, q: float) -> str:
        if target.key == direct:
            return "–"
        return ms(percentile(values[target.key], q) - percentile(values[direct], q))

    def cpu(scenario: str, target: Target, unit: float, digits: int) -> str:
        samples = cell(scenario, target)
        return " / ".join(
            f"{samples.cpu[name] / samples.requests * unit:.{digits}f}"
            if name in samples.cpu
            else "–"
            for name in ("client", "upstream", "proxy")
        )

    per_round = args.requests // args.rounds
    stream_round = args.streams // args.rounds
    lines = [
        "| metric | " + " | ".join(t.label for t in targets) + " | goal |",
        "|---" * (len(targets) + 2) + "|",
        row(
            f"c=1 latency p50 / p99, ms ({per_round * args.rounds} req)",
            "",
            [f"{ms(percentile(c1[t.key], 50))} / {ms(percentile(c1[t.key], 99))}" for t in targets],
        ),
        row(
            "c=1 **added** latency p50 / p99, ms",
            "p50 ≤ 1 ms",
            [
                "–" if t.key == direct else f"{added(c1, t, 50)} / {added(c1, t, 99)}"
                for t in targets
            ],
        ),
        row(
            f"c={args.concurrency} throughput, req/s",
            "",
            [f"{rps[t.key]:.0f}" for t in targets],
        ),
        row(
            f"c={args.concurrency} throughput vs direct",
            "≥ 0.5×",
            [f"{rps[t.key] / rps[direct]:.2f}×" for t in targets],
        ),
        row(
            f"stream ({args.chunks} chunks, c={args.stream_concurrency}) TTFB p50 / p99, ms",
            "",
            [
                f"{ms(percentile(ttfb[t.key], 50))} / {ms(percentile(ttfb[t.key], 99))}"
                for t in targets
            ],
        ),
        row(
            "stream **added** TTFB p50 / p99, ms",
            "",
            [
                "–" if t.key == direct else f"{added(ttfb, t, 50)} / {added(ttfb, t, 99)}"
                for t in targets
            ],
        ),
        row(
            "stream duration p50 / p99, ms (request sent → last byte)",
            "",
            [
                f"{ms(percentile(whole[t.key], 50))} / {ms(percentile(whole[t.key], 99))}"
                for t in targets
            ],
        ),
        row(
            f"stream chunks/s ({stream_round * args.rounds} streams, whole request)",
            "",
            [f"{cps[t.key]:,.0f}" for t in targets],
        ),
        row(
            "stream chunks/s vs direct",
            "≥ 0.9×",
            [f"{cps[t.key] / cps[direct]:.2f}×" for t in targets],
        ),
        row(
            "CPU per request at c=1, µs: load gen / upstream / proxy",
            "",
            [cpu("c1", t, 1e6, 0) for t in targets],
        ),
        row(
            f"CPU per request at c={args.concurrency}, µs: load gen / upstream / proxy",
            "",
            [cpu("c32", t, 1e6, 0) for t in targets],
        ),
        row(
            "CPU per stream, ms: load gen / upstream / proxy",
            "",
            [cpu("stream", t, 1e3, 2) for t in targets],
        ),
    ]

    cpu_model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    uv = getattr(uvloop, "__version__", "?") if uvloop is not None else "not installed"
    print()
    print(
        f"Machine: {os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {cpu_model}; "
        f"Linux {platform.release()}; Python {platform.python_version()}, "
        f"aiohttp {aiohttp.__version__}, uvloop {uv}"
    )
    busy = max(loads) > 1.5 * (os.cpu_count() or 1)
    print(
        f"Load average (1 min) before/after rounds: {loads[0]:.1f} / {loads[-1]:.1f} "
        f"(max {max(loads):.1f}); {'HIGH: numbers are noisy' if busy else 'ok'}"
    )
    print("Processes (all on the same machine, sharing its cores with each other):")
    print(
        f"  load generator: this process (pid {os.getpid()}), {args.client_loop} loop, "
        "one aiohttp ClientSession"
    )
    for child in children.values():
        print(f"  {child.name}: pid {child.pid}, {child.where}")
    print(
        f"Rounds: {args.rounds}, targets interleaved (order rotated each round); "
        "per round and target: "
        f"{per_round} requests at c=1, {per_round} at c={args.concurrency}, "
        f"{stream_round} streams of {args.chunks} chunks at c={args.stream_concurrency} "
        f"({f'{args.chunk_interval_ms} ms apart' if args.chunk_interval_ms else 'back-to-back'}). "
        f"Wall time {elapsed:.0f}s."
    )
    print()
    print("\n".join(lines))
    print()

    def spread(key: str, scenario: str, target: Target) -> str:
        mine = getattr(cell(scenario, target), key)
        base = getattr(cell(scenario, targets[0]), key)
        added = [(p - d) * 1000 for p, d in zip(mine, base, strict=True)]
        if not added:
            return "–"
        return f"{min(added):.2f}–{max(added):.2f} ms (median {percentile(added, 50):.2f})"

    for target in others:
        print(
            f"{target.label}, added p50 per round: c=1 latency {spread('round_p50', 'c1', target)}"
            f"; stream TTFB {spread('round_ttfb_p50', 'stream', target)}"
        )
    print(
        "Added = proxy percentile − direct percentile (unpaired). CPU = on-CPU time of each "
        "process (/proc schedstat; the load generator's own process_time) during that target's "
        "batches, divided by requests."
    )
    for (scenario, key), samples in results.items():
        if samples.errors:
            print(f"ERRORS {scenario}/{key}: {len(samples.errors)}, first: {samples.errors[0]}")


# -- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    default_loop = "uvloop" if uvloop is not None else "asyncio"
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--requests",
        type=int,
        default=8000,
        help="non-streamed requests per target and scenario, over all rounds",
    )
    parser.add_argument(
        "--streams",
        type=int,
        default=None,
        help="streamed requests per target (default requests/15)",
    )
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds")
    parser.add_argument("--chunks", type=int, default=200, help="SSE chunks per streamed answer")
    parser.add_argument(
        "--concurrency", type=int, default=32, help="concurrency of the throughput scenario"
    )
    parser.add_argument("--stream-concurrency", type=int, default=1)
    parser.add_argument(
        "--chunk-interval-ms",
        type=float,
        default=0.0,
        help="pause between the upstream's SSE chunks (default 0: back-to-back)",
    )
    parser.add_argument("--quick", action="store_true", help="small numbers, ~20 s")
    parser.add_argument(
        "--targets",
        default="direct,proxy,litellm",
        help="comma list of: direct, proxy (python -m proxy), litellm (LiteLLM's proxy, left "
        "out with a note when not installed), proxy-uvloop, proxy-runner "
        "(this file's runner on asyncio, to check it matches the CLI), bare-relay (a minimal "
        "aiohttp relay on asyncio: the floor any aiohttp proxy pays), proxy-info (the CLI at "
        "its default log level, info), proxy-alt (the CLI from --compare-root, to A/B a change)",
    )
    parser.add_argument(
        "--proxy-log-level", default="warning", help="the proxies' server.log_level"
    )
    parser.add_argument(
        "--proxy-workers", type=int, default=1, help="--workers for the `python -m proxy` targets"
    )
    parser.add_argument(
        "--litellm",
        type=Path,
        default=None,
        help="the litellm executable (default: .bench-venvs/litellm/bin/litellm, else on PATH)",
    )
    parser.add_argument(
        "--compare-root",
        type=Path,
        help="another checkout of the repository, run as target proxy-alt",
    )
    parser.add_argument("--client-loop", choices=["asyncio", "uvloop"], default=default_loop)
    parser.add_argument("--upstream-loop", choices=["asyncio", "uvloop"], default=default_loop)
    # Internal: this file re-run as a server process.
    parser.add_argument(
        "--role", choices=["upstream", "proxy", "bare-relay"], help=argparse.SUPPRESS
    )
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--upstream", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument(
        "--loop", choices=["asyncio", "uvloop"], default="asyncio", help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.requests, args.rounds = 1200, 3
    if args.streams is None:
        args.streams = max(args.requests // 15, args.rounds)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.role:
        return child_main(args)
    keys = [key.strip() for key in args.targets.split(",") if key.strip()]
    if keys[0] != "direct":
        keys = ["direct", *[k for k in keys if k != "direct"]]
    me = [sys.executable, str(Path(__file__).resolve())]
    data_dir = tempfile.mkdtemp(prefix="bench-overhead-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROXY__")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    upstream_port = free_port()
    upstream = Child(
        "fake upstream",
        f"separate process, this file's aiohttp app, {args.upstream_loop} loop",
        [
            *me,
            "--role",
            "upstream",
            "--port",
            str(upstream_port),
            "--chunks",
            str(args.chunks),
            "--chunk-interval-ms",
            str(args.chunk_interval_ms),
            "--loop",
            args.upstream_loop,
        ],
        upstream_port,
        env,
    )
    children = {"upstream": upstream}
    proxy_env = {
        **env,
        "PROXY__SERVER__LOG_LEVEL": args.proxy_log_level,
        "PROXY__SERVER__DATA_DIR": data_dir,
    }
    if args.proxy_workers > 1:
        # Several workers refuse the embedded Chroma; these requests never reach a vector store.
        proxy_env["PROXY__VECTOR_STORE__MODE"] = "server"
    notes: list[str] = []
    for key in keys[1:]:
        port = free_port()
        child_env = proxy_env
        child_root = ROOT
        if key in ("proxy", "proxy-info", "proxy-alt"):
            command = [
                sys.executable,
                "-m",
                "proxy",
                "--upstream",
                upstream.url,
                "--host",
                HOST,
                "--port",
                str(port),
                "--workers",
                str(args.proxy_workers),
            ]
            loop_name = "uvloop" if uvloop is not None else "asyncio"
            where = (
                "separate process, `python -m proxy` "
                f"(the CLI: {loop_name} loop, {args.proxy_workers} worker(s))"
            )
            if key == "proxy-info":
                child_env = {**proxy_env, "PROXY__SERVER__LOG_LEVEL": "info"}
                where += ", log_level info (the CLI's default: one access line per request)"
            if key == "proxy-alt":
                if args.compare_root is None:
                    raise SystemExit("target proxy-alt needs --compare-root")
                child_root = args.compare_root.resolve()
                child_env = {**proxy_env, "PYTHONPATH": str(child_root)}
                where += f", code from {child_root}"
        elif key in ("proxy-uvloop", "proxy-runner"):
            loop = "uvloop" if key == "proxy-uvloop" else "asyncio"
            command = [
                *me,
                "--role",
                "proxy",
                "--port",
                str(port),
                "--upstream",
                upstream.url,
                "--data-dir",
                data_dir,
                "--loop",
                loop,
                "--proxy-log-level",
                args.proxy_log_level,
            ]
            where = f"separate process, make_app(settings) in this file's runner, {loop} loop"
        elif key == "litellm":
            executable = litellm_executable(args.litellm)
            if executable is None:
                notes.append(
                    "litellm: not installed, left out (see this file's docstring to install it)"
                )
                continue
            config = write_litellm_config(Path(data_dir), upstream.url)
            command = [
                str(executable),
                "--config",
                str(config),
                "--host",
                HOST,
                "--port",
                str(port),
                "--num_workers",
                "1",
                "--log_config",
                str(config.with_name("litellm-logging.json")),
            ]
            child_env = {**env, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
            child_env.pop("PYTHONPATH", None)
            version = litellm_version(executable)
            where = (
                f"separate process, LiteLLM proxy {version} (its CLI: uvicorn, 1 worker, "
                "access log off), openai-compatible model at the fake upstream"
            )
        elif key == "bare-relay":
            command = [*me, "--role", key, "--port", str(port), "--upstream", upstream.url]
            where = "separate process, this file's minimal aiohttp relay, asyncio loop"
        else:
            raise SystemExit(f"unknown target {key!r}")
        children[key] = Child(key, where, command, port, child_env, child_root)

    started = time.perf_counter()
    try:
        for child in children.values():
            child.start()
        targets = [Target("direct", "direct", upstream.url, {"upstream": upstream.pid})]
        for key in [k for k in keys[1:] if k in children]:
            child = children[key]
            targets.append(
                Target(key, key, child.url, {"proxy": child.pid, "upstream": upstream.pid})
            )
        print(
            f"bench: {', '.join(t.label for t in targets)}; {args.rounds} rounds …",
            file=sys.stderr,
            flush=True,
        )
        results, loads = run_loop(bench(args, children, targets), args.client_loop)
        report(args, children, targets, results, loads, time.perf_counter() - started)
        for note in notes:
            print(f"Note: {note}")
    finally:
        for child in reversed(list(children.values())):
            child.stop()
        shutil.rmtree(data_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
