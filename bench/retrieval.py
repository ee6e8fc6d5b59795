"""Retrieval costs: chunking, indexing vs. embedding alone, search latency, resent documents.

    python bench/retrieval.py             # several minutes on 2 busy cores (100k build)
    python bench/retrieval.py --quick     # 10k chunks only, fewer chunks embedded
    python bench/retrieval.py --first-question   # only: first question vs parse (see below)
    python bench/retrieval.py --lexical   # only: bm25s vs SQLite FTS5 on the same terms

1. chunking a 352-page book (freeculture.pdf, text already extracted);
2. chunks/s of `ensure_indexed` (chunk, embed with MiniLM, upsert, mark complete) against
   MiniLM's `embed_documents` alone on the same chunks, in interleaved rounds;
3. search latency (p50/p99, the query already embedded) in a collection of 10k and 100k
   chunks, and the cost of a resent, already indexed document. These collections hold
   random 384-dim unit vectors (MiniLM's size): embedding 100k chunks with MiniLM takes hours
   on 2 cores, and HNSW search cost does not depend on where the vectors came from.
Prints numbers, asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pymupdf  # noqa: E402

from proxy.documents.model import Page, ParsedDocument  # noqa: E402
from proxy.retrieval.chunking import Chunk, chunk_document  # noqa: E402
from proxy.retrieval.embeddings import DefaultEmbedder  # noqa: E402
from proxy.retrieval.index import VectorIndex  # noqa: E402
from proxy.upstream.encodings import load_encoding  # noqa: E402

sys.path.insert(0, str(ROOT / "bench" / "eval"))
from reporting import recorded  # noqa: E402

from bench.corpus import add_corpus_option, corpus_or_exit  # noqa: E402

CHUNKS_PER_DOC = 500


class RandomEmbedder:
    """Random unit vectors of MiniLM's size, for building big collections quickly."""

    name = "bench-random-384"
    default_threshold = 0.2

    def __init__(self) -> None:
        self.rng = np.random.default_rng(7)

    def _unit(self, count: int) -> list[list[float]]:
        vectors = self.rng.standard_normal((count, 384)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        result: list[list[float]] = vectors.tolist()
        return result

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._unit(len(texts))

    async def embed_query(self, text: str) -> list[float]:
        return self._unit(1)[0]


def pdf_document(path: Path, sha256: str | None = None) -> ParsedDocument:
    with pymupdf.open(path) as pdf:  # type: ignore[no-untyped-call]
        pages = tuple(Page(i + 1, page.get_text()) for i, page in enumerate(pdf))
    digest = sha256 or hashlib.sha256(path.read_bytes()).hexdigest()
    return ParsedDocument(path.name, digest, "pdf", "pymupdf", pages)


def counter() -> Callable[[str], int]:
    encoding = load_encoding("cl100k_base")  # the file shipped with the proxy
    return lambda text: len(encoding.encode_ordinary(text))


def percentiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return f"p50 {1000 * statistics.median(ordered):6.1f} ms  p99 {1000 * p99:6.1f} ms"


async def timed(call: Callable[..., Awaitable[object]], *args: object) -> float:
    start = time.perf_counter()
    await call(*args)
    return time.perf_counter() - start


def bench_chunking(corpus: Path) -> None:
    doc = pdf_document(corpus / "pdf" / "freeculture.pdf")
    count = DefaultEmbedder().count_tokens
    start = time.perf_counter()
    chunks = chunk_document(doc, count_tokens=count)
    elapsed = time.perf_counter() - start
    print(f"chunking  {len(doc.pages)} pages -> {len(chunks)} chunks in {elapsed:.2f} s")


async def bench_indexing(limit: int, rounds: int, corpus: Path) -> None:
    source = pdf_document(corpus / "pdf" / "tracemonkey.pdf")
    chunks = chunk_document(source, count_tokens=counter())[:limit]
    texts = [chunk.text for chunk in chunks]
    embedder = DefaultEmbedder()
    await embedder.embed_documents(texts[:8])  # load the model outside the measurements
    alone: list[float] = []
    indexing: list[float] = []
    with tempfile.TemporaryDirectory() as store:
        index = VectorIndex.embedded(Path(store), embedder)
        await index.is_indexed("warm-up")  # opens the store outside the measurements
        for round_number in range(rounds):
            doc = ParsedDocument(source.name, f"{round_number:064x}", "pdf", "pymupdf", ())

            def these(doc: ParsedDocument = doc) -> list[Chunk]:
                return [
                    Chunk(doc.sha256, doc.name, c.index, c.text, c.page_start, c.page_end)
                    for c in chunks
                ]

            # Alternate which goes first, so a machine getting busier or quieter favours neither.
            if round_number % 2:
                indexing.append(await timed(index.ensure_indexed, doc, these))
                alone.append(await timed(embedder.embed_documents, texts))
            else:
                alone.append(await timed(embedder.embed_documents, texts))
                indexing.append(await timed(index.ensure_indexed, doc, these))
            print(
                f"  round {round_number + 1}: embed alone {len(texts) / alone[-1]:6.1f} chunks/s,"
                f" ensure_indexed {len(texts) / indexing[-1]:6.1f} chunks/s",
                flush=True,
            )
        queries = [f"question number {i} about trace trees" for i in range(20)]
        query_times = [await timed(embedder.embed_query, query) for query in queries]
        await index.close()
    total = len(texts) * rounds
    print(
        f"indexing  {len(texts)} chunks x {rounds}: embed alone {total / sum(alone):.1f} chunks/s,"
        f" ensure_indexed {total / sum(indexing):.1f} chunks/s"
        f" -> {sum(alone) / sum(indexing):.2f}x of embedding alone (goal >= 0.8x)"
    )
    print(f"query embedding (MiniLM)  {percentiles(query_times)}")


async def grow(index: VectorIndex, start_doc: int, chunk_total: int) -> int:
    """Index random-vector documents until the collection holds `chunk_total` chunks."""
    doc_number = start_doc
    while doc_number * CHUNKS_PER_DOC < chunk_total:
        doc = ParsedDocument(f"doc{doc_number}.txt", f"{doc_number:064x}", "text", "bench", ())

        def chunks(doc: ParsedDocument = doc) -> list[Chunk]:
            return [
                Chunk(doc.sha256, doc.name, i, f"passage {i} of {doc.name}", i // 3 + 1, i // 3 + 1)
                for i in range(CHUNKS_PER_DOC)
            ]

        await index.ensure_indexed(doc, chunks)
        doc_number += 1
    return doc_number


async def bench_search(sizes: list[int], queries: int) -> None:
    embedder = RandomEmbedder()
    with tempfile.TemporaryDirectory() as directory:
        store = Path(directory)
        docs = 0
        for size in sizes:
            index = VectorIndex.embedded(store, embedder)
            start = time.perf_counter()
            docs = await grow(index, docs, size)
            await index.close()
            print(
                f"  built {docs * CHUNKS_PER_DOC} chunks ({docs} documents of {CHUNKS_PER_DOC})"
                f" in {time.perf_counter() - start:.0f} s",
                flush=True,
            )
            rng = np.random.default_rng(size)
            picks = [f"{int(rng.integers(docs)):064x}" for _ in range(queries)]
            vectors = [await embedder.embed_query("") for _ in range(queries)]
            # cold: the document's vectors fetched from Chroma first; warm: already in memory.
            for label, cache_bytes in (("cold", 0), ("warm", 64 * 2**20)):
                index = VectorIndex.embedded(store, embedder, cache_bytes=cache_bytes)
                times = []
                for sha256, vector in zip(picks, vectors, strict=True):
                    if label == "warm":
                        await index.search(sha256, vector, 3)
                    times.append(await timed(index.search, sha256, vector, 3))
                print(f"search  {size:>7} chunks, {label}, limit 3:        {percentiles(times)}")
                await index.close()
            index = VectorIndex.embedded(store, embedder)
            # For comparison: Chroma's own HNSW query filtered with where={"sha256": ...}.
            times = [
                await timed(asyncio.to_thread, index._query_where, sha256, vector, 3)
                for sha256, vector in zip(picks[: queries // 2], vectors, strict=False)
            ]
            print(f"chroma  {size:>7} chunks, where=sha256, limit 3: {percentiles(times)}")
            resent = [ParsedDocument("x", sha256, "text", "bench", ()) for sha256 in picks]
            times = [await timed(index.ensure_indexed, doc, list) for doc in resent]
            print(f"resent  {size:>7} chunks, already indexed:       {percentiles(times)}")
            await index.close()


async def main(args: argparse.Namespace) -> None:
    print(f"cpus {os.cpu_count()}, load average {os.getloadavg()[0]:.1f} at start")
    if args.first_question:
        from bench.retrieval_first import bench_first_question

        await asyncio.to_thread(bench_first_question, args.rounds, args.corpus)
        print(f"load average {os.getloadavg()[0]:.1f} at end")
        return
    if args.lexical:
        from bench.retrieval_first import bench_lexical_engines

        bench_lexical_engines(args.corpus)
        return
    bench_chunking(args.corpus)
    await bench_indexing(args.chunks, args.rounds, args.corpus)
    await bench_search(args.sizes, args.queries)
    print(f"load average {os.getloadavg()[0]:.1f} at end")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="10k chunks only, 64 embedded")
    parser.add_argument("--chunks", type=int, default=160, help="chunks embedded per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--sizes", default="10000,100000", help="collection sizes, ascending")
    parser.add_argument(
        "--first-question",
        action="store_true",
        help="only: the first question on a new 352-page book against parsing it alone",
    )
    parser.add_argument("--lexical", action="store_true", help="only: bm25s against SQLite FTS5")
    parser.add_argument(
        "--out", type=Path, help="also write what is printed here (e.g. bench/results/retrieval/…)"
    )
    add_corpus_option(parser)
    args = parser.parse_args()
    args.corpus = corpus_or_exit(args.corpus)
    args.sizes = [int(size) for size in args.sizes.split(",")]
    if args.quick:
        args.chunks, args.sizes, args.queries = 64, [10_000], 100
    return args


if __name__ == "__main__":
    ARGS = parse_args()
    with recorded(ARGS.out):
        asyncio.run(main(ARGS))
