"""A fake `/v1/rerank` (llama.cpp / Jina shape) that records requests; `scorer` sets its scores."""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


def overlap(query: str, passage: str) -> float:
    """Shared words over query words: a predictable relevance for tests."""
    words = set(re.findall(r"\w+", query.lower()))
    return len(words & set(re.findall(r"\w+", passage.lower()))) / max(1, len(words))


@dataclass
class FakeReranker:
    """`scorer`: "overlap" (shared words), "reverse" (last passage best), "minilm" (MiniLM
    cosine: a stand-in for a cross-encoder in the eval), "fail" (HTTP 500), "bad" (no results)."""

    scorer: str = "overlap"
    requests: list[dict[str, Any]] = field(default_factory=list)
    _minilm: Any = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/rerank", self.rerank)
        app.router.add_post("/rerank", self.rerank)
        return app

    async def rerank(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if self.scorer == "fail":
            return web.json_response({"error": {"message": "model crashed"}}, status=500)
        if self.scorer == "bad":
            return web.json_response({"answer": 42})
        query, documents = str(body["query"]), [str(d) for d in body["documents"]]
        scores = await self._scores(query, documents)
        results = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
        results.sort(key=lambda item: -float(item["relevance_score"]))
        return web.json_response(
            {"model": body.get("model"), "results": results[: body.get("top_n")]}
        )

    async def _scores(self, query: str, documents: list[str]) -> list[float]:
        if self.scorer == "reverse":
            return [float(i) for i in range(len(documents))]
        if self.scorer == "minilm":
            from proxy.retrieval.embeddings import DefaultEmbedder

            if self._minilm is None:
                self._minilm = DefaultEmbedder()
            vectors = await self._minilm.embed_documents([query, *documents])
            return [
                float(sum(a * b for a, b in zip(vectors[0], v, strict=True))) for v in vectors[1:]
            ]
        await asyncio.sleep(0)
        return [overlap(query, document) for document in documents]
