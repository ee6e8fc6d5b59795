"""Pages as images in the parse workers: each key waits in its own turn, and a survey that runs
out of time is remembered as it came out, so the same document never pays for it again."""

from __future__ import annotations

import asyncio

import pymupdf
import pytest

from proxy.documents.model import Page, ParsedDocument
from proxy.documents.page_images import PageImages, PagesFailed, survey_budget
from proxy.documents.pool import WorkerPool
from tests.documents.test_workers import HOOK_WORKER


def figures_pdf(markers: list[str]) -> bytes:
    """One page per marker, each with a drawn figure (four black discs) and the marker as text."""
    document = pymupdf.open()
    for marker in markers:
        page = document.new_page()
        page.insert_text((72, 72), marker)
        for offset in range(4):
            page.draw_circle((150 + offset * 100, 300), 45, fill=(0, 0, 0))
    data = document.tobytes()
    document.close()
    return data


def parsed(name: str, data: bytes, pages: int) -> ParsedDocument:
    digest = f"{hash(data) & 0xFFFFFFFF:08x}" * 8
    return ParsedDocument(
        name, digest, "pdf", "PyMuPDF", tuple(Page(n, f"text {n}") for n in range(1, pages + 1))
    )


def images_on(pool: WorkerPool, timeout_s: float = 30) -> PageImages:
    return PageImages(
        pool, survey_timeout_s=timeout_s, render_timeout_s=timeout_s, max_image_bytes=2_000_000
    )


async def test_another_keys_survey_does_not_wait_behind_a_keys_slow_ones() -> None:
    # Two processes, one key may hold one: alice's two slow surveys cannot hold both, and
    # bob's one-page document is surveyed on the other while hers still run. With every survey
    # under one key (""), bob's waited for both of hers (a 1-page PDF took 117 s behind them).
    pool = WorkerPool(2, argv=HOOK_WORKER, per_key=1)
    images = images_on(pool)
    try:
        await pool.start()
        slow = [figures_pdf([f"SURVEY-SLOW {n} {page}" for page in range(8)]) for n in (1, 2)]
        hers = [
            asyncio.create_task(images.survey(parsed(f"big-{n}.pdf", data, 8), data, owner="alice"))
            for n, data in enumerate(slow)
        ]
        await asyncio.sleep(0.2)  # both of alice's surveys asked for first
        small = figures_pdf(["One figure."])
        pages = await images.survey(parsed("note.pdf", small, 1), small, owner="bob")
        assert [(page.number, page.reason) for page in pages] == [(1, "figure")]
        assert not any(task.done() for task in hers)
        assert pool.share.running == {"alice": 1}
        found = await asyncio.gather(*hers)
        assert [len(pages) for pages in found] == [8, 8]
    finally:
        await pool.close()


async def test_renders_wait_in_the_callers_turn_too() -> None:
    pool = WorkerPool(2, argv=HOOK_WORKER, per_key=1)
    images = images_on(pool)
    try:
        await pool.start()
        slow = figures_pdf([f"SURVEY-SLOW {page}" for page in range(8)])
        hers = asyncio.create_task(images.survey(parsed("big.pdf", slow, 8), slow, owner="alice"))
        await asyncio.sleep(0.2)
        small = figures_pdf(["One figure."])
        document = parsed("note.pdf", small, 1)
        rendered = await images.render(document, small, [(1, 300, 420, "figure")], owner="bob")
        assert rendered[1].url.startswith("data:image/png;base64,")
        assert pool.share.running == {"alice": 1} and not hers.done()
        await hers
    finally:
        await pool.close()


async def test_a_survey_out_of_time_keeps_what_it_found_and_is_not_done_again() -> None:
    # Twenty drawn pages at half a second each, four seconds to survey them: the worker stops
    # between two pages when its share of the time is spent and sends what it found.
    pool = WorkerPool(1, argv=HOOK_WORKER)
    images = images_on(pool, timeout_s=4)
    assert survey_budget(4) == 3
    try:
        data = figures_pdf([f"SURVEY-SLOW {page}" for page in range(20)])
        document = parsed("drawings.pdf", data, 20)
        found = await images.surveyed(document, data, owner="alice")
        assert found.cut.startswith("its time ran out (4 s, documents.parse_timeout_s)")
        assert not found.failed
        assert 1 <= found.through < 20
        assert [page.number for page in found.pages] == list(range(1, found.through + 1))
        assert all(page.reason == "figure" for page in found.pages)
        jobs = pool.jobs
        # The next request about the same document, whoever asks: no survey again.
        assert await images.surveyed(document, data, owner="bob") == found
        assert await images.survey(document, data) == found.pages
        assert pool.jobs == jobs
    finally:
        await pool.close()


async def test_a_survey_that_hangs_fails_once() -> None:
    pool = WorkerPool(1, argv=HOOK_WORKER)
    images = images_on(pool, timeout_s=2)
    try:
        data = figures_pdf(["A figure.", "SURVEY-HANG", "Another figure."])
        document = parsed("stuck.pdf", data, 3)
        with pytest.raises(PagesFailed, match="took longer than 2 s"):
            await images.survey(document, data, owner="alice")
        jobs = pool.jobs
        found = await images.surveyed(document, data, owner="alice")
        assert found.failed and found.cut == "took longer than 2 s"
        with pytest.raises(PagesFailed):
            await images.survey(document, data, owner="bob")
        assert pool.jobs == jobs  # remembered: the worker is not killed again for it
        after = figures_pdf(["A figure."])  # and the replaced worker serves the next document
        assert len(await images.survey(parsed("after.pdf", after, 1), after)) == 1
    finally:
        await pool.close()


async def test_a_keys_requests_for_one_document_share_one_survey() -> None:
    pool = WorkerPool(2, argv=HOOK_WORKER)
    images = images_on(pool)
    try:
        data = figures_pdf([f"SURVEY-SLOW {page}" for page in range(3)])
        document = parsed("shared.pdf", data, 3)
        first, second = await asyncio.gather(
            images.survey(document, data, owner="alice"),
            images.survey(document, data, owner="alice"),
        )
        assert first == second and len(first) == 3
        assert pool.jobs == 1
    finally:
        await pool.close()
