"""Relevance with the default model: a question finds the page that answers it, in the top 3."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from proxy.documents.model import ParsedDocument
from proxy.retrieval.chunking import chunk_document
from proxy.retrieval.embeddings import DefaultEmbedder
from proxy.retrieval.index import VectorIndex
from tests.retrieval.support import corpus_document

README = Path(__file__).resolve().parents[3] / "shared/corpus/text/readability-README.md"

QUESTIONS = [
    ("How do I install the library?", 1),
    ("What is the default character threshold for an article?", 2),
    ("Which fields does the parsed article object contain?", 3),
    ("How can I get a DOM document in Node.js?", 4),
    ("How do I protect against script injection from the output?", 5),
]


@pytest.fixture(scope="module")
def readme(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[VectorIndex, ParsedDocument]]:
    if not README.exists():  # module-scoped, so not through the function-scoped corpus_dir
        pytest.skip("../shared/corpus is absent")
    doc = corpus_document(README)
    embedder = DefaultEmbedder()
    index = VectorIndex.embedded(tmp_path_factory.mktemp("store"), embedder)
    # Indexed once for all questions; the index holds no loop-bound state between calls.
    chunks = lambda: chunk_document(doc, count_tokens=embedder.count_tokens)  # noqa: E731
    asyncio.run(index.ensure_indexed(doc, chunks))
    yield index, doc
    asyncio.run(index.close())


@pytest.mark.parametrize(("question", "page"), QUESTIONS)
async def test_the_answering_page_is_in_the_top_3(
    readme: tuple[VectorIndex, ParsedDocument], question: str, page: int
) -> None:
    index, doc = readme
    hits = await index.search(doc.sha256, await index.embedder.embed_query(question), 3)
    assert any(hit.page_start <= page <= hit.page_end for hit in hits), [
        (hit.page_start, hit.page_end, hit.score) for hit in hits
    ]
    assert hits[0].score > index.embedder.default_threshold
