"""Server mode: a real `chroma run` shared by several indexes, and a server that is down."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from proxy.documents.model import ParsedDocument
from proxy.errors import UpstreamError
from proxy.retrieval.chunking import Chunk, chunk_document
from proxy.retrieval.index import VectorIndex
from proxy.upstream.spawn import free_port
from tests.retrieval.support import CountingEmbedder, HashEmbedder, text_document

CHROMA = Path(sys.executable).with_name("chroma")


def start_chroma(path: Path, port: int) -> subprocess.Popen[bytes]:
    """`chroma run` on 127.0.0.1:`port`, returned once its heartbeat answers."""
    command = [str(CHROMA), "run", "--path", str(path), "--host", "127.0.0.1", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat", timeout=1):
                return server
        except OSError:
            if server.poll() is not None or time.monotonic() > deadline:
                stop_chroma(server)
                pytest.fail("chroma run did not start")
            time.sleep(0.2)


def stop_chroma(server: subprocess.Popen[bytes]) -> None:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture(scope="module")
def chroma_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    if not CHROMA.exists():
        pytest.skip("the chroma CLI is not installed")
    port = free_port()
    server = start_chroma(tmp_path_factory.mktemp("chroma-server"), port)
    yield port
    stop_chroma(server)


def words(text: str) -> int:
    return len(text.split())


def two_page_chunks() -> tuple[ParsedDocument, Callable[[], list[Chunk]]]:
    doc = text_document(["The harbour master logs every ship.", "Tides turn twice a day."])
    return doc, lambda: chunk_document(doc, chunk_tokens=10, overlap=0, count_tokens=len)


@pytest.mark.slow
async def test_indexes_on_one_server_share_documents(chroma_port: int) -> None:
    doc, chunks = two_page_chunks()
    first = CountingEmbedder(HashEmbedder())
    second = CountingEmbedder(HashEmbedder())
    one = VectorIndex.server("127.0.0.1", chroma_port, first)
    other = VectorIndex.server("127.0.0.1", chroma_port, second)
    assert await one.ensure_indexed(doc, chunks) is True
    # Another proxy process on the same server finds it done and embeds nothing.
    assert await other.ensure_indexed(doc, chunks) is False
    assert second.documents == [] and len(first.documents) == len(chunks())
    hits = await other.search(doc.sha256, await second.embed_query("tides turn"), 1)
    assert "Tides" in hits[0].text and hits[0].page_start == 2
    for index in (one, other):
        await index.close()


@pytest.mark.slow
async def test_a_second_embedders_index_shares_the_servers_client(chroma_port: int) -> None:
    # The multilingual embedder's vectors: another collection on the same server, through the
    # main index's client; closed first, it leaves that client working.
    doc = text_document(["Срок действия договора три года.", "Tides turn twice a day here."])
    chunks = lambda: chunk_document(doc, chunk_tokens=10, overlap=0, count_tokens=words)  # noqa: E731
    main = VectorIndex.server("127.0.0.1", chroma_port, CountingEmbedder(HashEmbedder()))
    other = CountingEmbedder(HashEmbedder("test-other"))
    other.name = "test-other"
    sibling = main.sibling(other)
    assert await sibling.ensure_indexed(doc, chunks) is True
    assert await sibling.is_indexed(doc.sha256) and not await main.is_indexed(doc.sha256)
    hits = await sibling.search(doc.sha256, await other.embed_query("tides turn"), 1)
    assert "Tides" in hits[0].text
    await sibling.close()
    assert await main.ensure_indexed(doc, chunks) is True
    await main.close()


@pytest.mark.slow
async def test_a_restarted_server_is_used_again(tmp_path: Path) -> None:
    if not CHROMA.exists():
        pytest.skip("the chroma CLI is not installed")
    doc, chunks = two_page_chunks()
    port = free_port()
    server = start_chroma(tmp_path, port)
    index = VectorIndex.server("127.0.0.1", port, HashEmbedder())
    query = await index.embedder.embed_query("harbour master")
    try:
        assert await index.ensure_indexed(doc, chunks) is True
        stop_chroma(server)
        with pytest.raises(UpstreamError, match=f"Chroma server http://127.0.0.1:{port}"):
            await index.search(doc.sha256, query, 1)
        server = start_chroma(tmp_path, port)
        assert (await index.search(doc.sha256, query, 1))[0].page_start == 1
        assert await index.ensure_indexed(doc, chunks) is False
    finally:
        stop_chroma(server)
        await index.close()


async def test_a_server_that_is_down_is_an_upstream_error() -> None:
    port = free_port()
    index = VectorIndex.server("127.0.0.1", port, HashEmbedder())
    doc = text_document(["text"])
    with pytest.raises(UpstreamError) as caught:
        await index.ensure_indexed(doc, lambda: [])
    assert f"Chroma server http://127.0.0.1:{port}" in caught.value.message
    assert caught.value.status == 502
    with pytest.raises(UpstreamError, match=f"127.0.0.1:{port}"):
        await index.search(doc.sha256, [1.0], 3)
    await index.close()
