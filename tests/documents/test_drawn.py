"""Which pages are drawn (figures, charts, images, scans), and those pages as bounded images:
measured on the corpus, rendered in the parse workers."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pymupdf
import pytest

from proxy.documents.model import DrawnPage, Page, ParsedDocument
from proxy.documents.page_images import PageImages, PagesFailed
from proxy.documents.pool import WorkerPool
from proxy.documents.readers.drawn import render, run, survey
from tests.fakes.vision import BAR_RED, chart_report_pdf


def drawn(path: Path, scanned: set[int] | None = None) -> dict[int, str]:
    return {page.number: page.reason for page in survey(path.read_bytes(), "pdf", scanned or set())}


def test_a_two_column_paper_with_figures_and_a_table(corpus_dir: Path) -> None:
    """tracemonkey.pdf: a state machine (2), loop diagrams (6, 7), bar charts drawn as vectors
    (10, 13) and one made of many small images (11) are drawn; page 8's ruled table and the
    pages of prose are not."""
    pages = drawn(corpus_dir / "pdf" / "tracemonkey.pdf")
    assert pages == {2: "figure", 6: "figure", 7: "figure", 10: "figure", 11: "image", 13: "figure"}


def test_ruled_tables_alone_are_not_drawn(corpus_dir: Path) -> None:
    assert drawn(corpus_dir / "pdf" / "chinese-tables.pdf") == {}
    assert drawn(corpus_dir / "pdf" / "small-table.pdf") == {}
    assert drawn(corpus_dir / "pdf" / "multicolumn.pdf") == {}


def test_scans_are_drawn_with_or_without_an_ocr_layer(corpus_dir: Path) -> None:
    assert set(drawn(corpus_dir / "pdf" / "test_3863.pdf").values()) == {"scan"}
    assert len(drawn(corpus_dir / "pdf" / "test_3863.pdf")) == 8
    # A garbage OCR text layer over each scan: the page image covers the page all the same.
    assert drawn(corpus_dir / "pdf" / "issue12963.pdf") == dict.fromkeys(range(1, 9), "scan")


def test_a_book_with_a_few_illustrations(corpus_dir: Path) -> None:
    pages = drawn(corpus_dir / "pdf" / "freeculture.pdf")
    assert pages[1] == "scan"  # the cover, one full-page image
    assert len(pages) == 19  # of 352 pages
    assert pages[6] == "figure"  # the title page's black band and barcode
    assert all(reason in ("image", "scan", "figure") for reason in pages.values())


def test_lecture_notes_with_geometry_figures(corpus_dir: Path) -> None:
    pages = drawn(corpus_dir / "pdf" / "GeoTopo-komprimiert.pdf")
    assert len(pages) == 35  # of 117
    assert {11: "figure", 23: "figure", 73: "figure", 107: "figure"}.items() <= pages.items()
    assert 2 not in pages and 4 not in pages  # the preface and the table of contents


def test_a_vector_chart_page_is_drawn_and_prose_pages_are_not() -> None:
    pages = list(survey(chart_report_pdf(filler_pages=2), "pdf", set()))
    assert [(page.number, page.reason) for page in pages] == [(2, "figure")]
    assert pages[0].width == 595 and pages[0].height == 842
    assert 0.03 <= pages[0].share < 0.5


def test_a_page_without_text_layer_is_drawn_whatever_it_draws() -> None:
    document = pymupdf.open()
    page = document.new_page()
    for offset in range(4):
        page.draw_circle((150 + offset * 100, 300), 45, fill=(0, 0, 0))
    small = document.new_page()
    small.draw_circle((100, 100), 5, fill=(0, 0, 0))  # far below the figure share
    data = document.tobytes()
    assert [(p.number, p.reason) for p in survey(data, "pdf", set())] == [(1, "figure")]
    # Without a text layer (scanned, or text drawn as outlines) even a small drawing is all
    # the page has to say.
    assert [(p.number, p.reason) for p in survey(data, "pdf", {1, 2})] == [
        (1, "figure"),
        (2, "scan"),
    ]


def decoded(message: dict[str, Any]) -> pymupdf.Pixmap:
    return pymupdf.Pixmap(base64.b64decode(message["b64"]))


def test_drawings_render_as_png_at_the_size_asked() -> None:
    [message] = list(render(chart_report_pdf(), "pdf", [[2, 632, 896, False]], 2_000_000))
    assert message["mime"] == "image/png"
    pixmap = decoded(message)
    assert (pixmap.width, pixmap.height) == (message["w"], message["h"])
    assert abs(pixmap.width - 632) <= 1 and abs(pixmap.height - 896) <= 1
    assert message["bytes"] == len(base64.b64decode(message["b64"]))


def test_scans_render_as_jpeg(corpus_dir: Path) -> None:
    data = (corpus_dir / "pdf" / "test_3863.pdf").read_bytes()
    [message] = list(render(data, "pdf", [[1, 600, 800, True]], 2_000_000))
    assert message["mime"] == "image/jpeg"
    assert decoded(message).width == message["w"]


def test_an_image_over_the_byte_limit_is_scaled_down_or_left_out(corpus_dir: Path) -> None:
    data = (corpus_dir / "pdf" / "test_3863.pdf").read_bytes()
    [big] = list(render(data, "pdf", [[1, 1200, 1600, True]], 2_000_000))
    [small] = list(render(data, "pdf", [[1, 1200, 1600, True]], big["bytes"] // 2))
    assert small["bytes"] <= big["bytes"] // 2
    assert small["w"] < big["w"]
    [none] = list(render(data, "pdf", [[1, 1200, 1600, True]], 200))
    assert none == {"t": "image", "n": 1, "error": "over the size limit"}


def test_pages_out_of_range_are_skipped() -> None:
    assert (
        list(render(chart_report_pdf(), "pdf", [[0, 10, 10, False], [99, 10, 10, False]], 1000))
        == []
    )


def test_the_worker_task_answers_in_frames() -> None:
    sent: list[dict[str, Any]] = []
    run({"task": "survey", "kind": "pdf", "scanned": []}, chart_report_pdf(), sent.append)
    assert sent == [{"t": "drawn", "pages": [[2, 595.0, 842.0, "figure", sent[0]["pages"][0][4]]]}]


def parsed(data: bytes, name: str = "report.pdf") -> ParsedDocument:
    pages = tuple(Page(n, f"text {n}") for n in range(1, 4))
    return ParsedDocument(name, f"sha-{len(data)}", "pdf", "PyMuPDF", pages)


async def test_surveyed_and_rendered_in_a_worker_and_remembered() -> None:
    pool = WorkerPool(1)
    images = PageImages(pool, survey_timeout_s=30, render_timeout_s=30, max_image_bytes=2_000_000)
    try:
        data = chart_report_pdf()
        document = parsed(data)
        pages = await images.survey(document, data)
        assert [(p.number, p.reason) for p in pages] == [(2, "figure")]
        assert isinstance(pages[0], DrawnPage)
        jobs = pool.jobs
        assert await images.survey(document, data) == pages
        rendered = await images.render(document, data, [(2, 448, 632, "figure")])
        assert pool.jobs == jobs + 1  # the survey was remembered
        image = rendered[2]
        assert image.url.startswith("data:image/png;base64,")
        pixmap = pymupdf.Pixmap(base64.b64decode(image.url.split(",", 1)[1]))
        assert (pixmap.width, pixmap.height) == (image.width, image.height)
        red = any(
            abs(pixmap.pixel(x, y)[0] - BAR_RED[0]) < 30 and pixmap.pixel(x, y)[1] < 60
            for x in range(0, pixmap.width, 3)
            for y in range(0, pixmap.height, 3)
        )
        assert red  # the chart's tallest bar is in the image
        assert await images.render(document, data, [(2, 448, 632, "figure")]) == rendered
        assert pool.jobs == jobs + 1  # and the image too
    finally:
        await pool.close()


async def test_a_document_the_worker_cannot_open_fails_its_pages_only() -> None:
    pool = WorkerPool(1)
    images = PageImages(pool, survey_timeout_s=30, render_timeout_s=30, max_image_bytes=100_000)
    try:
        with pytest.raises(PagesFailed):
            await images.survey(parsed(b"not a pdf at all"), b"not a pdf at all")
        # Kinds PyMuPDF reflows (Office, e-books) are never surveyed.
        reflowed = ParsedDocument("deck.pptx", "x", "pptx", "python-pptx", (Page(1, "t"),))
        assert await images.survey(reflowed, b"PK") == ()
    finally:
        await pool.close()
