"""Indexing leases: one proxy indexes a document; a crashed holder's lease runs out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest_asyncio

from proxy.retrieval.chunking import chunk_document
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.indexing import Indexer
from proxy.retrieval.lease import Leases, may_claim
from proxy.retrieval.passages import PassageStore
from tests.retrieval.support import CountingEmbedder, HashEmbedder, text_document

SHA = "ab" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture
async def index(tmp_path: Path) -> AsyncIterator[VectorIndex]:
    # One store seen by two "proxies": two Leases objects with their own names.
    opened = VectorIndex.embedded(tmp_path / "chroma", CountingEmbedder(HashEmbedder()))
    yield opened
    await opened.close()


def test_who_may_claim() -> None:
    assert may_claim(None, "a", 5.0)
    assert may_claim({"holder": "a", "until": 10.0}, "a", 5.0)
    assert not may_claim({"holder": "b", "until": 10.0}, "a", 5.0)
    assert may_claim({"holder": "b", "until": 10.0}, "a", 10.0)


async def test_a_live_lease_keeps_others_out_until_it_runs_out(index: VectorIndex) -> None:
    clock = Clock()
    first = Leases(index, "proxy-a", lease_s=60, settle_s=0, clock=clock)
    second = Leases(index, "proxy-b", lease_s=60, settle_s=0, clock=clock)
    assert await first.claim(SHA)
    assert not await second.claim(SHA)
    clock.now += 59
    assert not await second.claim(SHA)
    clock.now += 2  # proxy-a crashed and stopped renewing
    assert await second.claim(SHA)
    assert not await first.renew(SHA)  # it learns it lost the lease and stops
    await second.release(SHA)
    assert await first.claim(SHA)


async def test_renewal_keeps_the_lease(index: VectorIndex) -> None:
    clock = Clock()
    first = Leases(index, "proxy-a", lease_s=60, settle_s=0, clock=clock)
    second = Leases(index, "proxy-b", lease_s=60, settle_s=0, clock=clock)
    assert await first.claim(SHA)
    clock.now += 50
    assert await first.renew(SHA)
    clock.now += 50
    assert not await second.claim(SHA)


async def test_the_background_stands_back_while_another_proxy_holds_the_lease(
    index: VectorIndex, tmp_path: Path
) -> None:
    clock = Clock()
    doc = text_document([f"Sentence {i} about the harbour." for i in range(30)])
    embedder = index.embedder
    assert isinstance(embedder, CountingEmbedder)
    store = PassageStore(
        tmp_path / "passages",
        "s",
        lambda d: chunk_document(d, chunk_tokens=6, overlap=0, count_tokens=embedder.count_tokens),
    )
    passages = await store.open(doc)
    other = Leases(index, "proxy-b", settle_s=0, clock=clock)
    assert await other.claim(doc.sha256)
    indexer = Indexer(
        index, embedder, "s", leases=Leases(index, "proxy-a", settle_s=0, clock=clock)
    )
    indexer.complete_later(doc, passages)
    await indexer._tasks[doc.sha256]
    assert embedder.documents == [] and indexer.progress(passages).held_elsewhere
    clock.now += 3600  # proxy-b died: the next request's background takes over
    indexer.complete_later(doc, passages)
    await indexer._tasks[doc.sha256]
    assert await index.is_indexed(doc.sha256, "s")
    assert len(embedder.documents) == len(passages.chunks)
    assert await other.holder_of(doc.sha256) is None  # released when done
