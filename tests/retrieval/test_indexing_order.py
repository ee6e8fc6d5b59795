"""The background's order: around a question's hits first, the latest question's first, then the
rest by length; a passage left to a request that failed is embedded after all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from proxy.retrieval.chunking import chunk_document
from proxy.retrieval.index import VectorIndex, VectorStoreUnavailable
from proxy.retrieval.indexing import Indexer, nearby_first
from proxy.retrieval.passages import PassageStore
from proxy.retrieval.retriever import Retriever
from tests.retrieval.support import CountingEmbedder, HashEmbedder, text_document

FILLER = ["lighthouse lamp keeper", "bakery bread flour", "river boat ferry", "garden roses soil"]


def page(n: int) -> str:
    """One passage a page; lengths vary, so that an order by length is visible."""
    words = {7: " The keeper fed sardines to the cats.", 30: " A pilot counted anchovies."}
    again = " again" * (n % 3)
    return f"Page {n} tells a long story about the {FILLER[n % 4]} in this chapter{again}." + (
        words.get(n, "")
    )


DOC = text_document([page(n) for n in range(40)], name="book.txt")


@pytest_asyncio.fixture
async def retriever(tmp_path: Path) -> AsyncIterator[Retriever]:
    embedder = CountingEmbedder(HashEmbedder())
    made = Retriever(
        index=VectorIndex.embedded(tmp_path / "chroma", embedder),
        embedder=embedder,
        count_tokens=embedder.count_tokens,
        chunk_tokens=24,
        chunk_overlap=0,
        new_document_candidates=2,
    )
    yield made
    await made.close()


def pages_of(retriever: Retriever, texts: list[str]) -> list[int]:
    """The page number of each embedded passage (one passage a page)."""
    embedded = {page(n): n for n in range(40)}
    return [embedded[text] for text in texts]


async def test_passages_around_each_questions_hits_are_embedded_first(
    retriever: Retriever,
) -> None:
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    async with retriever.indexer.gate.foreground():  # the background waits for both questions
        await retriever.search([DOC], "who fed sardines to the cats", 3)
        await retriever.search([DOC], "who counted anchovies", 3)
        foreground = len(counting.documents)
    while retriever.indexer.running(DOC.sha256):
        await asyncio.sleep(0.01)
    asked = pages_of(retriever, counting.documents)
    # Each question embedded its candidates whole (short passages): its hit and the openings.
    assert asked[:foreground] == [7, 0, 1, 2, 30]
    background = asked[foreground:]
    # The latest question's part first: its hit's neighbours and the openings' (3); then the
    # first question's hit's neighbours; every passage once.
    assert background[:5] == [29, 31, 3, 6, 8]
    assert sorted(asked) == list(range(40))
    # The rest in order of length (similar lengths batched together pad less).
    rest = [len(page(n)) for n in background[5:]]
    assert rest == sorted(rest)


async def test_without_a_question_the_background_goes_by_length(retriever: Retriever) -> None:
    counting = retriever.embedder
    assert isinstance(counting, CountingEmbedder)
    assert await retriever.index_document(DOC)
    lengths = [len(text) for text in counting.documents]
    assert lengths == sorted(lengths) and len(lengths) == 40


def test_nearby_first_puts_each_hit_then_its_neighbours_best_first() -> None:
    assert nearby_first([5, 0, 9], total=10) == [5, 4, 6, 0, 1, 9, 8]
    assert nearby_first([5, 6], total=10, reach=2) == [5, 4, 6, 3, 7, 8]
    assert nearby_first([], total=10) == []


async def test_a_passage_left_to_a_request_that_failed_is_embedded_in_the_background(
    tmp_path: Path,
) -> None:
    embedder = CountingEmbedder(HashEmbedder())
    index = VectorIndex.embedded(tmp_path / "chroma", embedder)
    store = PassageStore(
        None,
        "s",
        lambda d: chunk_document(
            d, chunk_tokens=24, overlap=0, count_tokens=lambda t: len(t.split())
        ),
    )
    passages = await store.open(DOC)
    indexer = Indexer(index, embedder, "s")
    progress = indexer.progress(passages)
    # A request is embedding passage 12 when the background starts...
    request: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    progress.embedding[12] = request  # type: ignore[assignment]
    indexer.complete_later(DOC, passages)
    while len(embedder.documents) < 39:
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.05)
    assert indexer.running(DOC.sha256)  # ...and the background waits for it before finishing
    assert not await index.is_indexed(DOC.sha256, "s")
    # ...which fails: the background embeds it itself, and only then records the document.
    del progress.embedding[12]
    request.set_exception(RuntimeError("the request's embedding failed"))
    await indexer.complete(DOC, passages)
    assert await index.is_indexed(DOC.sha256, "s")
    assert embedder.documents[-1] == passages.chunks[12].text
    assert sorted(embedder.documents) == sorted(chunk.text for chunk in passages.chunks)
    await indexer.close()
    await index.close()


def word_passages() -> PassageStore:
    return PassageStore(
        None,
        "s",
        lambda d: chunk_document(
            d, chunk_tokens=24, overlap=0, count_tokens=lambda t: len(t.split())
        ),
    )


class FlakyIndex(VectorIndex):
    """An embedded index whose writes fail while `down` (a Chroma server restarting)."""

    down = False

    async def add(self, chunks: Any, vectors: Any, fingerprint: str | None = None) -> None:
        if self.down:
            raise VectorStoreUnavailable("Chroma server: refused", code="vector_store_failed")
        await super().add(chunks, vectors, fingerprint)


async def test_the_background_waits_for_a_store_that_went_down_and_embeds_nothing_twice(
    tmp_path: Path,
) -> None:
    embedder = CountingEmbedder(HashEmbedder())
    index = FlakyIndex.embedded(tmp_path / "chroma", embedder)
    assert isinstance(index, FlakyIndex)
    passages = await word_passages().open(DOC)
    indexer = Indexer(index, embedder, "s", resume_after_s=0.01, resume_every_s=0.02)
    index.down = True
    indexer.complete_later(DOC, passages)
    while not embedder.documents:  # a batch embedded, then refused by the store
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # the background is waiting for the store
    assert indexer.running(DOC.sha256)
    assert len(embedder.documents) == indexer.batch  # nothing more while the store is down
    index.down = False
    assert await indexer.complete(DOC, passages)
    assert await index.is_indexed(DOC.sha256, "s")
    stored = await index.stored_indexes(DOC.sha256, "s")
    assert stored == set(range(len(passages.chunks)))
    # The refused batch was stored from the vectors kept, not embedded again.
    assert sorted(embedder.documents) == sorted(chunk.text for chunk in passages.chunks)
    await indexer.close()
    await index.close()


async def test_the_background_gives_up_on_a_store_down_for_too_long(tmp_path: Path) -> None:
    embedder = CountingEmbedder(HashEmbedder())
    index = FlakyIndex.embedded(tmp_path / "chroma", embedder)
    assert isinstance(index, FlakyIndex)
    passages = await word_passages().open(DOC)
    indexer = Indexer(index, embedder, "s", resume_after_s=0.01, resume_for_s=0.05)
    index.down = True
    with pytest.raises(VectorStoreUnavailable):
        await indexer.complete(DOC, passages)
    assert not indexer.running(DOC.sha256)
    await indexer.close()
    await index.close()


class LanedEmbedder(CountingEmbedder):
    """Records which passages came through the background's lanes."""

    def __init__(self) -> None:
        super().__init__(HashEmbedder())
        self.background: list[str] = []

    async def embed_in_background(self, texts: Sequence[str]) -> list[list[float]]:
        self.background.extend(texts)
        return await self.inner.embed_documents(texts)


async def test_the_background_embeds_on_the_lanes_that_step_back(tmp_path: Path) -> None:
    embedder = LanedEmbedder()
    retriever = Retriever(
        index=VectorIndex.embedded(tmp_path / "chroma", embedder),
        embedder=embedder,
        count_tokens=embedder.count_tokens,
        chunk_tokens=24,
        chunk_overlap=0,
        new_document_candidates=2,
    )
    try:
        async with retriever.indexer.gate.foreground():  # the background waits for the request
            await retriever.search([DOC], "Who fed sardines to the cats?", 3)
        asked = list(embedder.documents)  # the request's candidates, on its own lanes
        assert asked and not embedder.background
        assert await retriever.index_document(DOC)
        assert sorted(embedder.background + asked) == sorted(p.text for p in DOC.pages)
        assert not set(embedder.background) & set(asked)
    finally:
        await retriever.close()
