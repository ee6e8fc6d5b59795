"""PyMuPDF documents (PDF, XPS, MOBI, FB2, CBZ, images) page by page: text, tables, OCR."""

from __future__ import annotations

import bisect
import sys
import time
from typing import Any

import structlog

from proxy.documents.failure import ExtractError
from proxy.documents.job import Job, OcrOptions, Unit, Units
from proxy.documents.readers.pdf_tables import ruled, text_with_tables

# When installed, pymupdf imports its optional add-ons (layout analysis, pymupdf4llm with
# numpy) eagerly: over a second of worker start-up, and the layout model makes the table
# finder ~20x slower (0.5 s a page). setdefault: an add-on already loaded stays loaded.
for _addon in ("pymupdf.layout", "pymupdf4llm"):
    sys.modules.setdefault(_addon, None)  # type: ignore[arg-type]

import pymupdf  # noqa: E402

log = structlog.get_logger(__name__)
# PyMuPDF's calls are untyped; going through Any keeps mypy --strict quiet without ignores.
_mupdf: Any = pymupdf

# Keep MuPDF's own complaints off stderr; the worker forwards them to the parent's log.
_mupdf.TOOLS.mupdf_display_errors(False)
_mupdf.TOOLS.mupdf_display_warnings(False)
if hasattr(_mupdf, "no_recommend_layout"):
    _mupdf.no_recommend_layout()

TABLE_SHARE = 0.6
"""Time the table finder may take, as a share of the plain extraction time so far: a parse
stays at least about half as fast as plain text extraction (0.6, not 1.0: one finder call
may overrun the budget), whatever the document draws. bench/parse.py measures it."""
TABLE_FLOOR_S = 0.1
"""...but a short document may always spend this much on tables (a one-page table sheet)."""
MIN_TEXT_CHARS = 16
"""A page with fewer characters than this and an image is read by OCR (when OCR is on)."""
_ALWAYS_IMAGES = frozenset({"cbz", "image"})


def mupdf_units(data: bytes, job: Job) -> Units:
    """Yield one unit per page that can be read; pages read by OCR come last (numbered)."""
    _mupdf.TOOLS.reset_mupdf_warnings()
    label = "image" if job.kind == "image" else job.kind.upper()
    try:
        document: Any = _mupdf.open(stream=data, filetype=None if job.kind == "image" else job.kind)
    except Exception as exc:
        raise ExtractError(
            f"is corrupt or not a valid {label} file and could not be opened ({exc})",
            "corrupt_document",
        ) from exc
    with document:
        yield from _pages(document, job, label)


def _pages(document: Any, job: Job, label: str) -> Units:
    # needs_pass is read once and before anything else: see FACTS (PyMuPDF).
    if document.needs_pass:
        raise ExtractError(
            "is password-protected (encrypted); it needs a password to be opened",
            "encrypted_document",
        )
    try:
        count = document.page_count
    except Exception as exc:
        raise ExtractError(
            f"has an invalid page count ({exc}); the file is corrupt", "corrupt_document"
        ) from exc
    if count <= 0:
        raise ExtractError(
            f"is damaged: no pages could be read (the {label} may be truncated or corrupt)",
            "corrupt_document",
        )
    job.check_pages(count)
    job.on_count(count)
    job.title((document.metadata or {}).get("title"))
    titles = _outline(document)
    unreadable: list[int] = []
    scanned: list[int] = []
    budget = _TableBudget(job.tables and job.kind == "pdf")
    for index in range(count):
        try:
            started = time.perf_counter()
            page = document.load_page(index)
            text = page.get_text()
            budget.extracted(time.perf_counter() - started)
            found = budget.tables(page)
            if found is not None:
                text, cut = found
                if cut:
                    job.warn("cell_cut", "table cells longer than 2000 characters were cut")
            if len(text.strip()) < MIN_TEXT_CHARS and _has_images(page, job.kind):
                scanned.append(index)
                continue
        except Exception:
            # A page that cannot be loaded (cycle in the page tree, broken object) is
            # skipped; the parent fails the document only if no page at all was read.
            unreadable.append(index + 1)
            continue
        yield Unit(index + 1, text, f"page={index + 1}", _title(titles, index + 1))
    if budget.skipped:
        log.info(
            "tables read as plain text",
            file=job.name,
            pages=budget.skipped,
            detail="the table finder's time budget was spent: no text is lost, but tables on "
            "these pages are read line by line rather than as rows under their header",
        )
    if scanned:
        yield from _ocr(document, job, scanned, titles, unreadable)
    if unreadable:
        shown = ", ".join(map(str, unreadable[:20])) + (" …" if len(unreadable) > 20 else "")
        job.warn("pages_unreadable", f"pages {shown} could not be read and were skipped")
    if getattr(document, "is_repaired", False):
        read = count - len(unreadable)
        job.warn(
            "repaired",
            f"was damaged and has been repaired; {read} of {count} pages could be read",
        )


class _TableBudget:
    """Runs the table finder on ruled pages while its time stays within TABLE_SHARE of the
    plain extraction time (or TABLE_FLOOR_S); counts the pages it had to skip after that."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.extract_s = 0.0
        self.spent_s = 0.0
        self.skipped = 0

    def extracted(self, seconds: float) -> None:
        self.extract_s += seconds

    def tables(self, page: Any) -> tuple[str, bool] | None:
        if not self.enabled:
            return None
        if self.spent_s > max(TABLE_FLOOR_S, TABLE_SHARE * self.extract_s):
            self.skipped += 1
            return None
        started = time.perf_counter()
        try:
            found = text_with_tables(page) if ruled(page) else None
        finally:
            self.spent_s += time.perf_counter() - started
        return None if found is None else (found[0], found[2])


def _ocr(document: Any, job: Job, indexes: list[int], titles: Any, unreadable: list[int]) -> Units:
    options = job.ocr
    if options is None:
        if job.kind == "image":
            raise ExtractError(
                "is an image, and reading text from images (OCR) is off; send it as an"
                " image_url part, or enable OCR (documents.ocr.enabled, with tesseract-ocr"
                " installed)",
                "image_not_document",
            )
        for index in indexes:
            yield Unit(index + 1, "", f"page={index + 1}", _title(titles, index + 1))
        job.warn(
            "ocr_off",
            f"{len(indexes)} pages have no text layer (scanned?) and OCR is off;"
            " they were left empty",
        )
        return
    chosen = indexes[: options.max_pages]
    for step, index in enumerate(chosen, start=1):
        job.on_ocr(step, len(chosen))
        try:
            text = _ocr_page(document.load_page(index), options)
        except Exception:
            unreadable.append(index + 1)
            continue
        yield Unit(index + 1, text, f"page={index + 1}", _title(titles, index + 1), ocr=True)
    pages = _ranges([index + 1 for index in chosen])
    said = (
        f"pages {pages} have no text layer and were"
        if len(chosen) > 1
        else (f"page {pages} has no text layer and was")
    )
    job.warn("ocr", f"{said} read by OCR ({options.language})")
    if len(indexes) > len(chosen):
        for index in indexes[len(chosen) :]:
            yield Unit(index + 1, "", f"page={index + 1}", _title(titles, index + 1))
        job.warn(
            "ocr_cut",
            f"OCR stopped after {len(chosen)} pages (documents.ocr.max_pages);"
            f" {len(indexes) - len(chosen)} more scanned pages were left empty",
        )


def _ocr_page(page: Any, options: OcrOptions) -> str:
    textpage = page.get_textpage_ocr(
        language=options.language, dpi=options.dpi, full=True, tessdata=options.tessdata or None
    )
    return str(page.get_text(textpage=textpage))


def _has_images(page: Any, kind: str) -> bool:
    if kind in _ALWAYS_IMAGES:
        return True
    return bool(page.get_images(full=False)) if kind == "pdf" else False


def _outline(document: Any) -> tuple[list[int], list[str]]:
    """First pages of the outline's entries, sorted by page, each with its path of titles
    (`Part II > 7. Tables`): where a page sits in the document, for the passages cut from it."""
    try:
        toc = document.get_toc(simple=True)
    except Exception:
        return [], []
    entries: list[tuple[int, str]] = []
    path: list[tuple[int, str]] = []
    for level, title, page, *_ in toc:
        name = " ".join(str(title).split())
        path = [(depth, part) for depth, part in path if depth < int(level)] + [(int(level), name)]
        if int(page) > 0 and name:
            entries.append((int(page), " > ".join(part for _, part in path if part)))
    entries.sort(key=lambda entry: entry[0])  # stable: the outline's own order within a page
    return [page for page, _ in entries], [title for _, title in entries]


def _title(titles: tuple[list[int], list[str]], number: int) -> str:
    at = bisect.bisect_right(titles[0], number) - 1
    return titles[1][at][:200] if at >= 0 else ""


def _ranges(numbers: list[int]) -> str:
    spans: list[str] = []
    start = previous = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == previous + 1:
            previous = number
            continue
        spans.append(str(start) if start == previous else f"{start}-{previous}")
        if number is not None:
            start = previous = number
    return ", ".join(spans)


def mupdf_warnings() -> str:
    """Warnings MuPDF collected since the last document was opened."""
    return str(_mupdf.TOOLS.mupdf_warnings())
