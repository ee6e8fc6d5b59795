"""DocumentParser on generated documents: page numbers, progress, cache, limits."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pymupdf
import pytest
import pytest_asyncio

from proxy.documents.cache import DocumentCache
from proxy.documents.detect import detect
from proxy.documents.limits import ParseLimits
from proxy.documents.model import Page, ParsedDocument
from proxy.documents.parser import DocumentParser
from proxy.errors import DocumentError, PayloadTooLarge

pytestmark = pytest.mark.asyncio(loop_scope="module")
PdfMaker = Callable[[list[str]], bytes]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def parser(cache_dir: Path) -> AsyncIterator[DocumentParser]:
    parser = DocumentParser(cache_dir, ParseLimits(), workers=2)
    yield parser
    await parser.close()


@contextmanager
def _limits(parser: DocumentParser, limits: ParseLimits) -> Iterator[None]:
    """Lower the shared parser's limits for one test, sparing a pool start-up per test."""
    saved, parser.limits = parser.limits, limits
    try:
        yield
    finally:
        parser.limits = saved


async def test_pdf_pages_keep_their_numbers(
    parser: DocumentParser, make_pdf: PdfMaker, page_texts: list[str]
) -> None:
    document = await parser.parse("seven.pdf", make_pdf(page_texts))
    assert document.kind == "pdf"
    assert document.library == "PyMuPDF"
    assert [page.number for page in document.pages] == list(range(1, 8))
    assert [page.text for page in document.pages] == page_texts
    assert document.text == "\n\n".join(page_texts)


async def test_progress_statuses_in_order(parser: DocumentParser, make_pdf: PdfMaker) -> None:
    data = make_pdf([f"progress page {n}" for n in range(300)])
    statuses: list[str] = []
    await parser.parse("long.pdf", data, statuses.append)
    assert statuses[:3] == [
        "Loading parser for long.pdf...",
        "PyMuPDF loaded for long.pdf...",
        "Parsing file long.pdf... (0%)",
    ]
    percents = [
        int(s.removeprefix("Parsing file long.pdf... (").rstrip("%)")) for s in statuses[2:]
    ]
    assert percents == sorted(set(percents))
    assert percents[-1] == 100
    assert all(0 <= p <= 100 for p in percents)


async def test_text_statuses(parser: DocumentParser) -> None:
    statuses: list[str] = []
    await parser.parse("notes.md", b"# Notes\n\nSome text.", statuses.append)
    assert statuses == [
        "Loading parser for notes.md...",
        "text loaded for notes.md...",
        "Parsing file notes.md... (0%)",
        "Parsing file notes.md... (100%)",
    ]


async def test_cache_hit_skips_the_pool_and_keeps_the_callers_name(
    parser: DocumentParser, make_pdf: PdfMaker
) -> None:
    data = make_pdf(["cached once", "and only once"])
    first = await parser.parse("first.pdf", data)
    jobs = parser.pool.jobs
    statuses: list[str] = []
    second = await parser.parse("second name.pdf", data, statuses.append)
    assert parser.pool.jobs == jobs
    assert second.name == "second name.pdf"
    assert second.pages == first.pages
    assert second.sha256 == first.sha256


async def test_disk_cache_serves_a_new_parser(
    parser: DocumentParser, cache_dir: Path, make_pdf: PdfMaker
) -> None:
    data = make_pdf(["on disk"])
    original = await parser.parse("a.pdf", data)
    reader = DocumentParser(cache_dir, workers=1)
    try:
        cached = await reader.parse("b.pdf", data)
        assert reader.pool.jobs == 0
        assert reader.pool.pids() == []
        assert cached.pages == original.pages
        assert cached.name == "b.pdf"
    finally:
        await reader.close()


async def test_corrupt_cache_entry_is_reparsed(tmp_path: Path) -> None:
    data = b"some text worth caching"
    first = DocumentParser(tmp_path, workers=1)
    document = await first.parse("a.txt", data)
    entries = list(tmp_path.rglob("*.json"))
    assert len(entries) == 1
    entries[0].write_text('{"v": 1, "pages": [[1, "tampe', encoding="utf-8")
    second = DocumentParser(tmp_path, workers=1)
    assert (await second.parse("a.txt", data)).pages == document.pages
    assert json.loads(entries[0].read_text(encoding="utf-8"))["pages"] == [
        [1, data.decode(), "line=1", "", False]
    ]
    await first.close()
    await second.close()


async def test_long_text_is_cut_into_pages(parser: DocumentParser) -> None:
    text = "\n\n".join(f"Paragraph {n}. " + "lorem ipsum " * 40 for n in range(200))
    document = await parser.parse("long.txt", text.encode())
    assert len(document.pages) > 10
    assert [page.number for page in document.pages] == list(range(1, len(document.pages) + 1))
    assert "Paragraph 199." in document.pages[-1].text


async def test_html_and_docx_go_through_workers(parser: DocumentParser) -> None:
    document = await parser.parse("p.html", b"<h1>Title</h1><p>Body text.</p>")
    assert document.library == "selectolax"
    assert document.text == "# Title\n\nBody text."


async def test_the_kind_is_detected_once_and_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from proxy.documents import parser as parser_module

    threads: list[int] = []

    def counted(name: str, data: bytes) -> object:
        threads.append(threading.get_ident())
        return detect(name, data)

    monkeypatch.setattr(parser_module, "detect", counted)
    parser = DocumentParser(tmp_path, workers=1)
    try:
        for _ in range(3):
            assert await parser.kind_of("notes.txt", b"plain words\n") == "text"
            document = await parser.parse("notes.txt", b"plain words\n")
            assert document.kind == "text"
        # A refusal is remembered as well.
        for _ in range(2):
            with pytest.raises(DocumentError, match="empty"):
                await parser.parse("empty.txt", b"")
        assert await parser.kind_of("notes.md", b"plain words\n") == "markdown"
    finally:
        await parser.close()
    assert len(threads) == 3  # notes.txt, empty.txt, notes.md: once each
    assert threading.get_ident() not in threads


async def test_file_size_limit(tmp_path: Path) -> None:
    small = DocumentParser(tmp_path, ParseLimits(max_file_bytes=100), workers=1)
    with pytest.raises(PayloadTooLarge, match=r"big\.txt: .*over the limit of 100 bytes"):
        await small.parse("big.txt", b"x" * 101)
    await small.close()


async def test_page_limit(parser: DocumentParser, make_pdf: PdfMaker) -> None:
    with _limits(parser, ParseLimits(max_pages=3)):
        with pytest.raises(
            DocumentError, match=r"many\.pdf: has 4 pages, more than the limit of 3"
        ):
            await parser.parse("many.pdf", make_pdf(["a", "b", "c", "d"]))
        # Reflowable text has no pages to refuse: its units are merged down to the limit.
        text = "\n\n".join(f"paragraph {n} " + "word " * 200 for n in range(40))
        document = await parser.parse("many.txt", text.encode())
        assert len(document.pages) <= 3
        assert all(f"paragraph {n} " in document.text for n in range(40))


async def test_char_limit(parser: DocumentParser, make_pdf: PdfMaker) -> None:
    with _limits(parser, ParseLimits(max_chars=50)):
        with pytest.raises(DocumentError, match="more than 50 characters") as caught:
            await parser.parse("wordy.pdf", make_pdf(["x" * 40, "y" * 40]))
        assert caught.value.code == "too_much_text"
        with pytest.raises(DocumentError, match="more than 50 characters"):
            await parser.parse("wordy.txt", b"z" * 60)


async def test_limits_apply_to_cache_hits(parser: DocumentParser, make_pdf: PdfMaker) -> None:
    data = make_pdf(["one", "two", "three"])
    await parser.parse("a.pdf", data)
    with (
        _limits(parser, ParseLimits(max_pages=2)),
        pytest.raises(DocumentError, match="of 2 pages"),
    ):
        await parser.parse("a.pdf", data)


async def test_blank_pdf_says_it_may_be_scanned(parser: DocumentParser, make_pdf: PdfMaker) -> None:
    with pytest.raises(DocumentError, match="scanned document without a text layer"):
        await parser.parse("scan.pdf", make_pdf(["", ""]))


async def test_concurrent_parses_of_the_same_bytes_share_one_job(tmp_path: Path) -> None:
    document = pymupdf.open()
    for number in range(3):
        document.new_page().insert_text((72, 72), f"Shared page {number + 1}")
    data = document.tobytes()
    parser = DocumentParser(tmp_path / "cache", ParseLimits(), workers=1)
    try:
        results = await asyncio.gather(*(parser.parse(f"copy-{n}.pdf", data) for n in range(5)))
        assert parser.pool.jobs == 1
        assert [r.name for r in results] == [f"copy-{n}.pdf" for n in range(5)]
        assert len({r.sha256 for r in results}) == 1
    finally:
        await parser.close()


async def test_disk_cache_drops_the_least_recently_used(tmp_path: Path) -> None:
    cache = DocumentCache(tmp_path, max_bytes=5600)

    def entry(n: int) -> ParsedDocument:
        return ParsedDocument(f"d{n}.txt", f"{n:064x}", "text", "text", (Page(1, "x" * 1500),))

    for n in range(3):
        cache.store(entry(n))
        path = tmp_path / f"{n:064x}"[:2] / f"{n:064x}.text.json"
        os.utime(path, (time.time() - 100 + n, time.time() - 100 + n))
    assert cache.load(f"{0:064x}", "text") is not None  # used again: now the most recent
    cache.store(entry(3))
    kept = {p.name.split(".")[0][-1] for p in tmp_path.glob("*/*.json")}
    assert "1" not in kept  # the least recently used went first
    assert {"0", "3"} <= kept
    assert sum(p.stat().st_size for p in tmp_path.glob("*/*.json")) <= 5600


async def test_a_plain_text_book_is_parsed_into_its_chapters(parser: DocumentParser) -> None:
    chapters = [f"CHAPTER {n}. The {name}" for n, name in enumerate(("Storm", "Harbour"), 1)]
    text = "\n\n".join(
        ["A BOOK OF THE SEA", *(f"{c}\n\n" + "The sea was grey. " * 30 for c in chapters)]
    )
    document = await parser.parse("book.txt", text.encode())
    titled = [(page.location, page.title) for page in document.pages if page.title]
    assert titled == [(f"section={c}", c) for c in chapters]
    assert document.pages[0].location == "line=1"
