"""The first question on a new 352-page book against parsing it alone; bm25s against FTS5.

Used by `python bench/retrieval.py --first-question` and `--lexical`; prints numbers only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

BOOK = Path("pdf") / "freeculture.pdf"  # in the shared corpus (bench/corpus.py)
WARM = Path("pdf") / "multicolumn.pdf"
QUESTION = "Why did the farmers in North Carolina sue the government over airplanes?"


def variant(data: bytes, round_number: int) -> bytes:
    """The same PDF with a trailing comment: another sha256, so nothing is cached."""
    return data + f"\n% bench round {round_number} {time.time_ns()}\n".encode()


def parse_alone(data: bytes, corpus: Path) -> float:
    """Seconds to parse the book with the proxy's parser (worker pool already started)."""
    from proxy.documents.parser import DocumentParser

    async def run() -> float:
        with tempfile.TemporaryDirectory() as cache:
            parser = DocumentParser(Path(cache), workers=2)
            try:
                # the workers started, the PDF library loaded
                await parser.parse(WARM.name, (corpus / WARM).read_bytes())
                started = time.perf_counter()
                await parser.parse(BOOK.name, data)
                return time.perf_counter() - started
            finally:
                await parser.close()

    return asyncio.run(run())


def chat_body(data: bytes, stream: bool) -> dict[str, Any]:
    encoded = base64.b64encode(data).decode()
    part = {
        "type": "file",
        "file": {"filename": BOOK.name, "file_data": f"data:application/pdf;base64,{encoded}"},
    }
    content = [{"type": "text", "text": QUESTION}, part]
    return {"model": "m", "stream": stream, "messages": [{"role": "user", "content": content}]}


def first_question(base: str, data: bytes) -> tuple[float, list[str]]:
    """Seconds until the first event relayed from the upstream (the request was forwarded),
    and the status comments seen before it."""
    statuses: list[str] = []
    forwarded: float | None = None
    started = time.perf_counter()
    with httpx.stream(
        "POST", base + "/v1/chat/completions", json=chat_body(data, True), timeout=900
    ) as response:
        for line in response.iter_lines():  # read to the end: a client that hangs up is rare
            if line.startswith(": ") and forwarded is None:
                statuses.append(line[2:])
            elif line.startswith("data:") and forwarded is None:
                forwarded = time.perf_counter() - started
    if forwarded is None:
        raise RuntimeError("the stream ended without an event")
    return forwarded, statuses


def indexed_percent(base: str, data: bytes) -> int:
    body = chat_body(data, False)
    body["enrich"] = {"strategy": "retrieval"}
    preview = httpx.post(base + "/v1/enrich/preview", json=body, timeout=900).json()
    return min(preview["decision"]["retrieval"]["indexed"].values())


def bench_first_question(rounds: int, corpus: Path) -> None:
    from proxy.config import load_settings
    from proxy.http.app import make_app
    from tests.fakes.servers import ServerThread
    from tests.fakes.upstream import FakeUpstream

    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(Path.home() / ".cache" / "tiktoken"))
    data = (corpus / BOOK).read_bytes()
    servers = ServerThread()
    try:
        upstream = FakeUpstream(n_ctx=4096)
        upstream_url = servers.serve(upstream.app())
        with tempfile.TemporaryDirectory() as directory:
            settings = load_settings(
                None,
                environ={},
                overrides={
                    "upstream": {"base_url": upstream_url, "tokenizer": "tiktoken"},
                    "server": {"data_dir": directory, "max_body_mb": 64},
                },
            )
            base = servers.serve(make_app(settings))
            # A running proxy: parser workers, MiniLM and Chroma loaded by an earlier request.
            warm = chat_body((corpus / WARM).read_bytes(), False)
            warm["enrich"] = {"strategy": "retrieval"}
            httpx.post(base + "/v1/chat/completions", json=warm, timeout=300)
            for round_number in range(rounds):
                book = variant(data, round_number)
                # Alternate the order, so a machine getting busier favours neither.
                if round_number % 2:
                    first, statuses = first_question(base, book)
                    parse = parse_alone(variant(data, 100 + round_number), corpus)
                else:
                    parse = parse_alone(variant(data, 100 + round_number), corpus)
                    first, statuses = first_question(base, book)
                started = time.perf_counter()
                while indexed_percent(base, book) < 100:
                    time.sleep(1)
                complete = time.perf_counter() - started + first
                again = time.perf_counter()
                first_question(base, book)
                warm_s = time.perf_counter() - again
                indexing = [line for line in statuses if line.startswith("Indexing file")]
                print(
                    f"round {round_number + 1}: parse alone {parse:.2f} s | first question "
                    f"forwarded after {first:.2f} s = {first / parse:.1f}x parse | dense index "
                    f"complete after {complete:.0f} s | a question once complete {warm_s:.2f} s",
                    flush=True,
                )
                print(f"  statuses: {json.dumps(indexing[:3])} ... ({len(indexing)} in all)")
    finally:
        servers.close()


def bench_lexical_engines(corpus: Path) -> None:
    """Index build and query time of bm25s and SQLite FTS5 (bm25()) over the same terms."""
    from proxy.retrieval.chunking import chunk_document
    from proxy.retrieval.embeddings import DefaultEmbedder
    from proxy.retrieval.function_words import detect_language
    from proxy.retrieval.lexical import LexicalIndex, terms
    from tests.retrieval.support import corpus_document

    doc = corpus_document(corpus / BOOK)
    chunks = chunk_document(doc, count_tokens=DefaultEmbedder().count_tokens)
    texts = [chunk.text for chunk in chunks]
    queries = [QUESTION, "Who invented FM radio?", "What is doujinshi?", "Eldred v. Ashcroft"]
    started = time.perf_counter()
    lexical = LexicalIndex.build(texts)
    build_bm25s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(25):
        for query in queries:
            lexical.search(query, 50)
    query_bm25s = (time.perf_counter() - started) / (25 * len(queries))

    language = detect_language(texts)
    started = time.perf_counter()
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE passages USING fts5(terms, tokenize='unicode61')")
    db.executemany(
        "INSERT INTO passages(rowid, terms) VALUES (?, ?)",
        [(i, " ".join(terms(text, language))) for i, text in enumerate(texts)],
    )
    db.commit()
    build_fts5 = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(25):
        for query in queries:
            match = " OR ".join(f'"{term}"' for term in terms(query, language))
            db.execute(
                "SELECT rowid FROM passages WHERE passages MATCH ? ORDER BY bm25(passages) "
                "LIMIT 50",
                (match,),
            ).fetchall()
    query_fts5 = (time.perf_counter() - started) / (25 * len(queries))
    print(f"lexical engines over {len(texts)} passages of {BOOK.name} (same stemmed terms):")
    print(f"  bm25s        build {build_bm25s:.2f} s, query {query_bm25s * 1000:.2f} ms")
    print(f"  SQLite FTS5  build {build_fts5:.2f} s, query {query_fts5 * 1000:.2f} ms")
