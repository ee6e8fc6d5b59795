"""The embedded Chroma index: embed once, resume after crashes, search, one process per store."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import pytest_asyncio

from proxy.documents.model import ParsedDocument
from proxy.errors import ProxyError
from proxy.retrieval.chunking import Chunk, chunk_document
from proxy.retrieval.embeddings import DefaultEmbedder
from proxy.retrieval.index import WRITE_BATCH, IndexLockedError, VectorIndex
from tests.retrieval.support import CountingEmbedder, HashEmbedder, cl100k, text_document

ROOT = Path(__file__).resolve().parents[2]

STORY = [
    "The old lighthouse keeper lit the lamp every evening at dusk.\n\n"
    "Ships passing the rocky cape relied on its beam to find the harbour.",
    "One winter a storm broke the great lens into pieces.\n\n"
    "The keeper sailed to the city to order a new lens from the glassworks.",
    "Meanwhile the village children carried lanterns up the tower each night.",
]


def chunker(doc: ParsedDocument, tokens: int = 20) -> Callable[[], list[Chunk]]:
    return lambda: chunk_document(doc, chunk_tokens=tokens, overlap=0, count_tokens=cl100k())


def many_chunks(doc: ParsedDocument, count: int) -> Callable[[], list[Chunk]]:
    """`count` distinct one-sentence chunks, one per page number."""
    return lambda: [
        Chunk(doc.sha256, doc.name, i, f"Sentence {i} about topic {i % 7}.", i + 1, i + 1)
        for i in range(count)
    ]


@pytest_asyncio.fixture
async def hash_index(tmp_path: Path) -> AsyncIterator[VectorIndex]:
    index = VectorIndex.embedded(tmp_path / "store", HashEmbedder())
    yield index
    await index.close()


async def stored_count(index: VectorIndex, sha256: str) -> int:
    return len(await asyncio.to_thread(index._stored_texts, sha256))


async def test_a_document_is_embedded_once_ever(tmp_path: Path) -> None:
    doc = text_document(STORY)
    counting = CountingEmbedder(DefaultEmbedder())
    index = VectorIndex.embedded(tmp_path / "store", counting)
    assert await index.ensure_indexed(doc, chunker(doc)) is True
    embedded = len(counting.documents)
    assert embedded == len(chunker(doc)()) > 1
    assert await index.ensure_indexed(doc, chunker(doc)) is False
    await index.close()
    # A restarted proxy finds it complete too, without chunking or embedding anything.
    reopened = VectorIndex.embedded(tmp_path / "store", counting)
    assert await reopened.ensure_indexed(doc, lambda: pytest.fail("chunked again")) is False
    query = await counting.embed_query("Where did the keeper go to order a new lens?")
    hits = await reopened.search(doc.sha256, query, 2)
    await reopened.close()
    assert len(counting.documents) == embedded
    assert "glassworks" in hits[0].text and hits[0].page_start == 2
    assert 0.0 <= hits[1].score <= hits[0].score <= 1.0


async def test_concurrent_requests_for_one_document_embed_it_once(tmp_path: Path) -> None:
    doc = text_document(STORY)
    counting = CountingEmbedder(HashEmbedder())
    index = VectorIndex.embedded(tmp_path / "store", counting)
    results = await asyncio.gather(*(index.ensure_indexed(doc, chunker(doc)) for _ in range(5)))
    await index.close()
    assert sorted(results) == [False, False, False, False, True]
    assert len(counting.documents) == len(chunker(doc)())


async def test_an_interrupted_document_is_not_complete_and_resumes(tmp_path: Path) -> None:
    doc = text_document(["many sentences"], name="big.txt")
    crashing = CountingEmbedder(HashEmbedder(), fail_after=WRITE_BATCH + 10)
    index = VectorIndex.embedded(tmp_path / "store", crashing)
    with pytest.raises(RuntimeError, match="embedder crashed"):
        await index.ensure_indexed(doc, many_chunks(doc, 300))
    assert not await index.is_indexed(doc.sha256)
    assert await stored_count(index, doc.sha256) == WRITE_BATCH
    counting = CountingEmbedder(HashEmbedder())
    index.embedder = counting
    assert await index.ensure_indexed(doc, many_chunks(doc, 300)) is True
    # Only what the crash lost is embedded again.
    assert len(counting.documents) == 300 - WRITE_BATCH
    assert await index.is_indexed(doc.sha256)
    assert await stored_count(index, doc.sha256) == 300
    await index.close()


async def test_resuming_with_other_chunking_drops_stale_chunks(hash_index: VectorIndex) -> None:
    doc = text_document(["many sentences"], name="big.txt")
    hash_index.embedder = CountingEmbedder(HashEmbedder(), fail_after=WRITE_BATCH)
    with pytest.raises(RuntimeError):
        await hash_index.ensure_indexed(doc, many_chunks(doc, 200))
    hash_index.embedder = HashEmbedder()
    assert await hash_index.ensure_indexed(doc, many_chunks(doc, 50)) is True
    assert await stored_count(hash_index, doc.sha256) == 50


async def test_a_killed_process_leaves_an_incomplete_document(tmp_path: Path) -> None:
    store = tmp_path / "store"
    script = textwrap.dedent(f"""
        import asyncio, os
        from pathlib import Path
        from proxy.retrieval.index import VectorIndex
        from tests.retrieval.support import HashEmbedder, text_document
        from tests.retrieval.test_index import many_chunks

        class DyingEmbedder(HashEmbedder):
            calls = 0
            async def embed_documents(self, texts):
                self.calls += 1
                if self.calls == 2:
                    os._exit(9)  # like kill -9 in the middle of indexing
                return await super().embed_documents(texts)

        doc = text_document(["many sentences"], name="big.txt")
        index = VectorIndex.embedded(Path({str(store)!r}), DyingEmbedder())
        asyncio.run(index.ensure_indexed(doc, many_chunks(doc, 300)))
    """)
    child = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert child.returncode == 9
    doc = text_document(["many sentences"], name="big.txt")
    counting = CountingEmbedder(HashEmbedder())
    index = VectorIndex.embedded(store, counting)  # the dead process's lock is gone
    assert not await index.is_indexed(doc.sha256)
    assert await index.ensure_indexed(doc, many_chunks(doc, 300)) is True
    assert len(counting.documents) == 300 - WRITE_BATCH
    await index.close()


async def test_search_stays_within_one_document(hash_index: VectorIndex) -> None:
    first = text_document(STORY, name="lighthouse.txt")
    second = text_document(["The lighthouse lens was ground from glass."], name="glass.txt")
    for doc in (first, second):
        await hash_index.ensure_indexed(doc, chunker(doc))
    query = await hash_index.embedder.embed_query("lighthouse lens glass")
    hits = await hash_index.search(first.sha256, query, 10)
    assert hits and {hit.filename for hit in hits} == {"lighthouse.txt"}
    assert len(hits) == len(chunker(first)())
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)
    assert len(await hash_index.search(first.sha256, query, 1)) == 1
    assert await hash_index.search(first.sha256, query, 0) == []
    assert await hash_index.search("0" * 64, query, 3) == []


async def test_an_empty_document_is_complete_with_no_passages(hash_index: VectorIndex) -> None:
    doc = text_document(["", "   "], name="blank.pdf")
    assert await hash_index.ensure_indexed(doc, chunker(doc)) is True
    assert await hash_index.ensure_indexed(doc, chunker(doc)) is False
    assert await hash_index.search(doc.sha256, [1.0] + [0.0] * 63, 3) == []


@pytest.mark.slow  # two interpreter start-ups importing chromadb: ~6 s
def test_a_second_process_is_refused_the_embedded_store(tmp_path: Path) -> None:
    store = tmp_path / "store"
    script = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from proxy.retrieval.index import IndexLockedError, VectorIndex
        from tests.retrieval.support import HashEmbedder
        try:
            VectorIndex.embedded(Path({str(store)!r}), HashEmbedder())
        except IndexLockedError as error:
            print(error)
            sys.exit(3)
    """)

    def other_process() -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-c", script]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)

    index = VectorIndex.embedded(store, HashEmbedder())
    refused = other_process()
    assert refused.returncode == 3, refused.stderr
    assert f"pid {os.getpid()}" in refused.stdout
    assert "vector_store.mode: server" in refused.stdout
    with pytest.raises(IndexLockedError):  # also within one process
        VectorIndex.embedded(store, HashEmbedder())
    asyncio.run(index.close())
    assert other_process().returncode == 0


async def test_a_query_of_the_wrong_size_is_an_openai_shaped_error(
    hash_index: VectorIndex,
) -> None:
    doc = text_document(STORY)
    await hash_index.ensure_indexed(doc, chunker(doc))
    with pytest.raises(ProxyError, match="the query has 2 dimensions") as caught:
        await hash_index.search(doc.sha256, [1.0, 0.0], 3)
    assert caught.value.status == 500
    # An incomplete document is searched by Chroma itself; its failure names the store.
    partial = text_document(["many sentences"], name="big.txt")
    hash_index.embedder = CountingEmbedder(HashEmbedder(), fail_after=WRITE_BATCH)
    with pytest.raises(RuntimeError):
        await hash_index.ensure_indexed(partial, many_chunks(partial, 200))
    with pytest.raises(ProxyError, match=f"vector store {hash_index.path}"):
        await hash_index.search(partial.sha256, [1.0, 0.0], 3)


async def test_in_memory_search_matches_chromas_own(tmp_path: Path) -> None:
    doc = text_document(["many sentences"], name="big.txt")
    index = VectorIndex.embedded(tmp_path / "store", HashEmbedder())
    await index.ensure_indexed(doc, many_chunks(doc, 300))
    await index.close()
    index = VectorIndex.embedded(tmp_path / "store", HashEmbedder())  # a cold cache
    for question in ("topic 3", "nothing in common", "sentence 12 about topic 5"):
        query = await index.embedder.embed_query(question)
        ours = await index.search(doc.sha256, query, 5)
        again = await index.search(doc.sha256, query, 5)  # from the cache
        chromas = await asyncio.to_thread(index._query_where, doc.sha256, query, 5)
        assert ours == again
        assert [hit.score for hit in ours] == pytest.approx([h.score for h in chromas], abs=1e-5)
    assert ours[0].index == 12  # the last question has no ties at the top
    await index.close()


async def test_an_incomplete_document_is_still_searchable(hash_index: VectorIndex) -> None:
    doc = text_document(["many sentences"], name="big.txt")
    hash_index.embedder = CountingEmbedder(HashEmbedder(), fail_after=WRITE_BATCH)
    with pytest.raises(RuntimeError):
        await hash_index.ensure_indexed(doc, many_chunks(doc, 200))
    query = await hash_index.embedder.embed_query("sentence 3")
    hits = await hash_index.search(doc.sha256, query, 3)
    assert len(hits) == 3 and all(hit.index < WRITE_BATCH for hit in hits)
