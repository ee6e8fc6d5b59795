"""How long one key's one-page PDF waits for its drawn-page survey behind another key's
drawing-heavy PDFs, in the real parse workers (two, one key may hold one, as with keys).

Prints the survey of one drawing-heavy page alone, then the one-page PDF's survey while the
other key's two heavy PDFs are being surveyed, and how long those took.

    python bench/page_image_turns.py [--pages 15] [--curves 12000]
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import sys
import time
from pathlib import Path

import pymupdf

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.documents.model import Page, ParsedDocument
from proxy.documents.page_images import PageImages
from proxy.documents.pool import WorkerPool
from proxy.logs import configure_logging


def heavy_pdf(seed: int, pages: int, curves: int) -> bytes:
    """Pages of `curves` separate small curves each: slow to survey (every path is looked at
    and clustered)."""
    document = pymupdf.open()
    for number in range(pages):
        page = document.new_page()
        page.insert_text((72, 60), f"Drawing {seed}-{number}")
        shape = page.new_shape()
        for i in range(curves):
            x, y = 50 + (i * 37 + seed) % 500, 80 + (i * 53 + number) % 700
            shape.draw_bezier((x, y), (x + 7, y - 9), (x + 13, y + 9), (x + 20, y))
            shape.finish(color=(0, 0, 0), width=0.5)
        shape.commit()
    return document.tobytes()


def one_figure() -> bytes:
    document = pymupdf.open()
    page = document.new_page()
    page.insert_text((72, 72), "One figure.")
    for k in range(4):
        page.draw_circle((150 + k * 100, 300), 45, fill=(0, 0, 0))
    return document.tobytes()


def parsed(name: str, data: bytes, pages: int) -> ParsedDocument:
    digest = hashlib.sha256(data).hexdigest()
    texts = tuple(Page(n, f"text {n}") for n in range(1, pages + 1))
    return ParsedDocument(name, digest, "pdf", "PyMuPDF", texts)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=15)
    parser.add_argument("--curves", type=int, default=12000)
    args = parser.parse_args()
    configure_logging(level="warning")
    pool = WorkerPool(2, per_key=1)
    images = PageImages(pool, survey_timeout_s=600, render_timeout_s=60, max_image_bytes=2**21)
    await pool.start()
    try:
        page = heavy_pdf(9, 1, args.curves)
        started = time.monotonic()
        await images.survey(parsed("page.pdf", page, 1), page, owner="alone")
        print(f"one page of {args.curves} curves, alone: {time.monotonic() - started:.1f} s")
        heavy = [heavy_pdf(n, args.pages, args.curves) for n in (1, 2)]
        started = time.monotonic()
        theirs = [
            asyncio.create_task(
                images.survey(parsed(f"heavy-{n}.pdf", data, args.pages), data, owner="alice")
            )
            for n, data in enumerate(heavy)
        ]
        await asyncio.sleep(0.5)
        small = one_figure()
        asked = time.monotonic()
        await images.survey(parsed("note.pdf", small, 1), small, owner="bob")
        print(
            f"bob's one-page PDF behind alice's two {args.pages}-page ones:"
            f" {time.monotonic() - asked:.1f} s"
        )
        await asyncio.gather(*theirs)
        print(f"alice's two surveys: {time.monotonic() - started:.1f} s")
    finally:
        await pool.close()


if __name__ == "__main__":
    asyncio.run(main())
