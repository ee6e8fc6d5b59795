"""A fake OpenAI-compatible /v1/embeddings server: bag-of-words vectors, recorded inputs."""

from __future__ import annotations

import asyncio
import hashlib
import math
import re
import threading
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

DIMENSIONS = 64


def embed(text: str) -> list[float]:
    """Words hashed into buckets, normalised: texts sharing words point the same way."""
    vector = [0.0] * DIMENSIONS
    for word in re.findall(r"[^\W_]+", text.lower()):
        if len(word) < 3:
            continue
        bucket = int(hashlib.md5(word.encode()).hexdigest(), 16) % DIMENSIONS
        vector[bucket] += 1.0
    norm = math.sqrt(sum(v * v for v in vector)) or 1.0
    return [v / norm for v in vector]


@dataclass
class FakeEmbeddings:
    inputs: list[list[str]] = field(default_factory=list)
    fail: bool = False
    paused: threading.Event = field(default_factory=threading.Event)  # set: requests wait
    delay_s: float = 0.0  # each request takes this long (a model on a busy CPU)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self.embeddings)
        return app

    async def embeddings(self, request: web.Request) -> web.Response:
        while self.paused.is_set():
            await asyncio.sleep(0.01)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail:
            return web.json_response({"error": {"message": "embedder down"}}, status=500)
        body: dict[str, Any] = await request.json()
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        self.inputs.append(texts)
        # OpenAI's endpoint refuses an empty input, and llama.cpp's does for a model that adds
        # no BOS token (`Input content cannot be empty`): the proxy must never send one.
        if "" in texts:
            error = {"message": "'$.input' is invalid.", "type": "invalid_request_error"}
            return web.json_response({"error": error}, status=400)
        return web.json_response(
            {
                "object": "list",
                "model": body.get("model"),
                "data": [
                    {"object": "embedding", "index": i, "embedding": embed(t)}
                    for i, t in enumerate(texts)
                ],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        )
