"""Pages as images: time and bytes to survey and render the drawn pages of a 50-page paper
with figures, through the parse workers as the proxy does it, at `low` and at `high` detail;
beside plain text extraction of the same pages (what every parse costs anyway).

The corpus has no 50-page paper with figures: one is made here from tracemonkey.pdf (a 14-page
two-column paper with charts and diagrams) repeated to 50 pages, in memory.

    python bench/page_images.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import add_corpus_option, corpus_or_exit, default_corpus
from proxy.documents.model import Page, ParsedDocument
from proxy.documents.page_images import PageImages
from proxy.documents.pool import WorkerPool
from proxy.documents.readers.pdf import _mupdf
from proxy.upstream.image_cost import ImageCost

CORPUS = (default_corpus() or Path("shared-corpus-not-found")) / "pdf"
PAGES = 50


def paper() -> bytes:
    """tracemonkey.pdf's pages over and over, 50 pages in all."""
    source = _mupdf.open(CORPUS / "tracemonkey.pdf")
    made = _mupdf.open()
    while made.page_count < PAGES:
        last = min(source.page_count, PAGES - made.page_count) - 1
        made.insert_pdf(source, from_page=0, to_page=last)
    data: bytes = made.tobytes(garbage=3, deflate=True)
    return data


def text_seconds(data: bytes) -> float:
    started = time.perf_counter()
    with _mupdf.open(stream=data, filetype="pdf") as document:
        for page in document:
            page.get_text()
    return time.perf_counter() - started


async def main(rounds: int) -> None:
    data = paper()
    print(f"paper: {PAGES} pages, {len(data) / 1024:.0f} KiB (tracemonkey.pdf repeated)")
    pool = WorkerPool(1)
    await pool.start()
    results: dict[str, list[float]] = {}
    sizes: dict[str, tuple[int, int]] = {}
    try:
        for round_ in range(rounds):
            # A new sha256 each round: nothing is remembered between rounds.
            document = ParsedDocument(
                "paper.pdf",
                f"bench-{round_}",
                "pdf",
                "PyMuPDF",
                tuple(Page(n, "text") for n in range(1, PAGES + 1)),
            )
            images = PageImages(
                pool, survey_timeout_s=120, render_timeout_s=120, max_image_bytes=1536 * 1024
            )
            results.setdefault("text extraction, all pages (in process)", []).append(
                text_seconds(data)
            )
            started = time.perf_counter()
            drawn = await images.survey(document, data)
            results.setdefault("survey: which pages are drawn (worker)", []).append(
                time.perf_counter() - started
            )
            for family in ("qwen2vl", "gemma3"):
                cost = ImageCost(family, "bench", estimated=False)
                for detail in ("low", "high"):
                    if family == "gemma3" and detail == "low":
                        continue  # Gemma 3 takes its native 896 at any detail
                    wanted = [
                        (
                            page.number,
                            *cost.size(page.width, page.height, detail, 512, 1280),
                            page.reason,
                        )
                        for page in drawn
                    ]
                    images._images.clear()
                    started = time.perf_counter()
                    rendered = await images.render(document, data, wanted)
                    label = f"render {len(wanted)} drawn pages, {family} {detail}"
                    results.setdefault(label, []).append(time.perf_counter() - started)
                    total = sum(image.size for image in rendered.values())
                    tokens = sum(
                        cost.tokens(image.width, image.height) for image in rendered.values()
                    )
                    sizes[label] = (total, tokens)
        print(f"drawn pages: {len(drawn)} of {PAGES} ({', '.join(str(p.number) for p in drawn)})")
        print(f"{'step':<52} {'median s':>9} {'KiB':>8} {'tokens':>7}")
        for label, seconds in results.items():
            total, tokens = sizes.get(label, (0, 0))
            kib = f"{total / 1024:.0f}" if total else ""
            print(f"{label:<52} {statistics.median(seconds):>9.3f} {kib:>8} {tokens or '':>7}")
    finally:
        await pool.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    add_corpus_option(parser)
    args = parser.parse_args()
    CORPUS = corpus_or_exit(args.corpus) / "pdf"
    asyncio.run(main(args.rounds))
