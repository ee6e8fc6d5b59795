"""What knowing the upstream costs: finding each kind, and Ollama's native door vs. a refusal.

Runs the fakes of tests/fakes (real aiohttp servers on 127.0.0.1, answering each server's
shapes instantly, so what is measured is the proxy) in this process and prints:

1. per kind: the requests and the time the one-off detection takes (then it is cached);
2. for Ollama, a chat request whose document fits the model's trained window but not the window
   Ollama runs it with: the proxy's time from the request to the answer when it sends it to the
   native /api/chat (translated both ways, streamed and not), when it refuses it
   (upstream.ollama.overflow: refuse), and a plain relay of a small request for reference;
   plus the pure translation costs (request, each streamed line).

    python bench/upstream_kinds.py [--rounds 30]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.config import load_settings
from proxy.http.app import make_app
from proxy.logs import configure_logging
from proxy.upstream.client import UpstreamClient
from proxy.upstream.detect import detect_kind
from proxy.upstream.ollama.answer import OllamaChatConverter
from proxy.upstream.ollama.native import native_chat_request
from proxy.upstream.sse import data_event
from tests.fakes.koboldcpp import FakeKoboldCpp
from tests.fakes.llama_cpp_python import FakeLlamaCppPython
from tests.fakes.lmstudio import FakeLmStudio
from tests.fakes.ollama import FakeOllama
from tests.fakes.openrouter import FakeOpenRouter
from tests.fakes.sglang import FakeSglang
from tests.fakes.tabbyapi import FakeTabbyApi
from tests.fakes.textgen import FakeTextgen
from tests.fakes.tgi import FakeTgi
from tests.fakes.upstream import FakeUpstream

VOCABULARY = ["house", "river", "stone", "light", "water", "green", "table", "music"]


def fake_upstream(kind: str) -> Callable[[], Any]:
    def make() -> FakeUpstream:
        fake = FakeUpstream()
        fake.kind = kind
        return fake

    return make


FAKES: list[tuple[str, Callable[[], Any]]] = [
    ("llama.cpp", fake_upstream("llamacpp")),
    ("SGLang", FakeSglang),
    ("Ollama", FakeOllama),
    ("KoboldCpp", FakeKoboldCpp),
    ("TabbyAPI", FakeTabbyApi),
    ("LM Studio", FakeLmStudio),
    ("TGI", FakeTgi),
    ("text-generation-webui", FakeTextgen),
    ("vLLM", fake_upstream("vllm")),
    ("llama-cpp-python", FakeLlamaCppPython),
    ("OpenRouter", FakeOpenRouter),
    ("none of them", fake_upstream("plain")),
]


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def detection(rounds: int) -> None:
    print("1. Finding the kind (once per upstream, then cached)")
    print(f"{'server':<24}{'found as':<20}{'requests':>10}{'p50 ms':>10}")
    for label, make in FAKES:
        fake = make()
        runner, url = await serve(fake.app())
        settings = load_settings(None, environ={}, overrides={"upstream": {"base_url": url}})
        async with aiohttp.ClientSession() as session:
            client = UpstreamClient(settings.upstream, session)
            times = []
            for _ in range(rounds):
                started = time.perf_counter()
                found, asked = await detect_kind(client)
                times.append((time.perf_counter() - started) * 1000)
        await runner.cleanup()
        print(f"{label:<24}{found.kind:<20}{asked:>10}{statistics.median(times):>10.2f}")


def ask(words: int, **body: Any) -> dict[str, Any]:
    text = " ".join(VOCABULARY[n % len(VOCABULARY)] for n in range(words))
    data = base64.b64encode(text.encode()).decode()
    part = {
        "type": "file",
        "file": {"filename": "d.txt", "file_data": f"data:text/plain;base64,{data}"},
    }
    return {
        "model": "llama3.2",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Sum up."}, part]}],
        **body,
    }


async def timed(session: aiohttp.ClientSession, url: str, body: dict[str, Any], want: int) -> float:
    started = time.perf_counter()
    async with session.post(url, json=body) as response:
        await response.read()
        assert response.status == want, (response.status, await response.text())
    return (time.perf_counter() - started) * 1000


async def ollama_paths(rounds: int) -> None:
    fake = FakeOllama()
    upstream_runner, upstream_url = await serve(fake.app())
    results: dict[str, float] = {}
    for overflow in ("native", "refuse"):
        with tempfile.TemporaryDirectory() as data:
            settings = load_settings(
                None,
                environ={},
                overrides={
                    "upstream": {"base_url": upstream_url, "ollama": {"overflow": overflow}},
                    "server": {"data_dir": data, "log_level": "warning"},
                },
            )
            proxy_runner, proxy_url = await serve(make_app(settings))
            url = proxy_url + "/v1/chat/completions"
            forced = {"enrich": {"strategy": "inject-full-content"}}
            small = {"model": "llama3.2", "messages": [{"role": "user", "content": "Hi"}]}
            async with aiohttp.ClientSession() as session:
                await timed(session, url, small, 200)  # warm up: probes, windows, pools
                cases: dict[str, tuple[dict[str, Any], int]] = {}
                if overflow == "native":
                    # First the plain relay: once a window is raised, a model's requests all go
                    # to /api/chat (so that Ollama does not reload it back and forth).
                    cases["plain relay (small request, /v1)"] = (small, 200)
                    cases["6,000-word document, native"] = (ask(6000, **forced), 200)
                    cases["same, native, streamed"] = (ask(6000, stream=True, **forced), 200)
                else:
                    cases["6,000-word document, refused"] = (ask(6000, **forced), 400)
                for name, (body, status) in cases.items():
                    await timed(session, url, body, status)
                    times = [await timed(session, url, body, status) for _ in range(rounds)]
                    results[name] = statistics.median(times)
            await proxy_runner.cleanup()
    await upstream_runner.cleanup()
    print("\n2. Ollama: a document over the loaded window (4,096), inside the trained one")
    print(f"{'case':<44}{'request → answer, p50 ms':>26}")
    for name, value in results.items():
        print(f"{name:<44}{value:>26.2f}")

    body = ask(6000)
    body["messages"][0]["content"] = "word " * 6000
    started = time.perf_counter()
    for _ in range(200):
        native_chat_request(body, num_ctx=8192, num_predict=None, truncate_field=True)
    request_us = (time.perf_counter() - started) / 200 * 1e6
    line = {"model": "m", "created_at": "2026-08-01T10:00:00Z", "done": False}
    lines = [{**line, "message": {"role": "assistant", "content": " word"}}] * 1000
    converter = OllamaChatConverter()
    events = [(data_event(x), x) for x in lines]
    started = time.perf_counter()
    for event, payload in events:
        converter.convert_event(event, payload)
    line_us = (time.perf_counter() - started) / len(events) * 1e6
    print(f"translating the request (a 6,000-word message): {request_us:.1f} µs")
    print(f"translating one streamed NDJSON line into a chunk: {line_us:.2f} µs")


async def main(rounds: int) -> None:
    configure_logging("console", "warning")
    await detection(rounds)
    await ollama_paths(rounds)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    asyncio.run(main(args.rounds))
