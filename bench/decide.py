"""Preparation cost of a document request: a 50-page PDF first and cached, vs. a plain relay.

Runs the proxy and a fake llama.cpp upstream (real aiohttp servers on 127.0.0.1) in this
process and prints, per case, the median time from sending the request to the upstream
receiving it, and how many /tokenize calls one request makes.

    python bench/decide.py [--pages 50] [--rounds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import pymupdf
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.config import load_settings
from proxy.http.app import make_app
from tests.fakes.upstream import FakeUpstream


def make_pdf(pages: int) -> bytes:
    document = pymupdf.open()
    for number in range(pages):
        page = document.new_page()
        text = f"Page {number + 1}. " + "The quick brown fox jumps over the lazy dog. " * 40
        page.insert_textbox(pymupdf.Rect(40, 40, 560, 800), text)
    data: bytes = document.tobytes()
    document.close()
    return data


class TimedUpstream(FakeUpstream):
    """Notes when each chat request arrives, to time request → forward."""

    arrivals: list[float]

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(time.perf_counter())
        return await super().chat(request)


async def serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def time_one(
    session: aiohttp.ClientSession, url: str, body: dict[str, Any], upstream: TimedUpstream
) -> float:
    upstream.arrivals = []
    started = time.perf_counter()
    async with session.post(url, json=body) as response:
        await response.read()
        assert response.status == 200, await response.text()
    return (upstream.arrivals[0] - started) * 1000


async def main(pages: int, rounds: int) -> None:
    pdf = make_pdf(pages)
    encoded = base64.b64encode(pdf).decode()
    upstream = TimedUpstream()
    upstream.n_ctx = 131072  # the document fits: this measures deciding and injecting
    upstream.arrivals = []
    upstream_runner, upstream_url = await serve(upstream.app())
    with tempfile.TemporaryDirectory() as data:
        settings = load_settings(
            None,
            environ={},
            overrides={
                "upstream": {"base_url": upstream_url},
                "server": {"data_dir": data, "log_level": "warning"},
            },
        )
        from proxy.logs import configure_logging

        configure_logging("console", "warning")
        proxy_runner, proxy_url = await serve(make_app(settings))
        url = proxy_url + "/v1/chat/completions"
        plain = {"model": "m", "messages": [{"role": "user", "content": "Summarise it."}]}
        with_pdf = {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "Summarise it."},
                        {
                            "type": "file",
                            "file": {
                                "filename": "fifty.pdf",
                                "file_data": f"data:application/pdf;base64,{encoded}",
                            },
                        },
                    ],
                }
            ],
            "enrich": {"strategy": "auto"},
        }
        async with aiohttp.ClientSession() as session:
            await time_one(session, url, plain, upstream)  # warm the connection pools
            upstream.tokenize_calls = 0
            first = await time_one(session, url, with_pdf, upstream)
            first_calls = upstream.tokenize_calls
            plain_times, cached_times, cached_calls = [], [], []
            for _ in range(rounds):
                plain_times.append(await time_one(session, url, plain, upstream))
                upstream.tokenize_calls = 0
                cached_times.append(await time_one(session, url, with_pdf, upstream))
                cached_calls.append(upstream.tokenize_calls)
        await proxy_runner.cleanup()
    await upstream_runner.cleanup()
    plain_p50 = statistics.median(plain_times)
    cached_p50 = statistics.median(cached_times)
    print(f"{pages}-page PDF ({len(pdf) // 1024} KiB), {rounds} rounds, fake llama.cpp upstream")
    print(f"{'case':<34}{'request → forward (ms)':>24}{'tokenize calls':>16}")
    print(f"{'plain relay (no document), p50':<34}{plain_p50:>24.2f}{0:>16}")
    print(f"{'PDF, first time (parse + count)':<34}{first:>24.2f}{first_calls:>16}")
    print(f"{'PDF, cached, p50':<34}{cached_p50:>24.2f}{statistics.median(cached_calls):>16.0f}")
    print(f"added by a cached document: {cached_p50 - plain_p50:.2f} ms (goal < 10 ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    asyncio.run(main(args.pages, args.rounds))
