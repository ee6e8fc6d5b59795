"""Presentations (PPTX with python-pptx, ODP with lxml): one unit per slide, notes included."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from proxy.documents.failure import ExtractError
from proxy.documents.job import Job, Unit, Units
from proxy.documents.readers.archive import open_zip
from proxy.documents.readers.odf import odp_slides
from proxy.documents.readers.table_form import cell, table
from proxy.documents.readers.text import tidy


def pptx_slides(data: bytes, job: Job) -> list[tuple[str, str, str]]:
    """(title, body, speaker notes) of each slide, in order."""
    import pptx

    open_zip(data, "PPTX file", verify=True).close()
    try:
        deck: Any = pptx.Presentation(io.BytesIO(data))
    except Exception as exc:
        raise ExtractError(
            f"is not a readable PPTX file ({type(exc).__name__}: {exc})", "corrupt_document"
        ) from exc
    job.title(deck.core_properties.title)
    slides = []
    for slide in deck.slides:
        title_shape = slide.shapes.title
        title = " ".join((title_shape.text_frame.text if title_shape is not None else "").split())
        body = _shapes(slide.shapes, title_shape, job, title)
        notes = ""
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text
        slides.append((title, "\n\n".join(body), notes))
    return slides


def _shapes(shapes: Iterable[Any], title_shape: Any, job: Job, title: str) -> list[str]:
    """The slide's text and tables (captioned with the slide's title), groups opened."""
    out: list[str] = []
    for shape in shapes:
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            out.append(table(_table_rows(shape.table, job), title))
        elif hasattr(shape, "shapes"):  # a group
            out.extend(_shapes(shape.shapes, None, job, title))
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            lines = []
            for paragraph in shape.text_frame.paragraphs:
                text = "".join(run.text for run in paragraph.runs) or paragraph.text
                if text.strip():
                    lines.append("  " * paragraph.level + "- " + text.strip())
            out.append("\n".join(lines))
    return [block for block in out if block.strip()]


def _table_rows(grid: Any, job: Job) -> list[list[str]]:
    """Rows on the table's grid: a merged cell's text in its first column, repeated down the
    rows it spans, the other columns it spans empty."""
    rows: list[list[str]] = []
    down: dict[int, tuple[str, int]] = {}  # column -> (text of a merge above, rows left)
    for row in grid.rows:
        cells: list[str] = []
        for column, item in enumerate(row.cells):
            if item.is_spanned:
                text = down[column][0] if column in down else ""
            else:
                text, cut = cell(item.text)
                if cut:
                    job.warn("cell_cut", "table cells longer than 2000 characters were cut")
                if item.is_merge_origin and item.span_height > 1:
                    down[column] = (text, item.span_height)
            cells.append(text)
        down = {c: (t, left - 1) for c, (t, left) in down.items() if left > 1}
        rows.append(cells)
    return [cells for cells in rows if any(cells)]


def slide_units(kind: str, data: bytes, job: Job) -> Units:
    slides = pptx_slides(data, job) if kind == "pptx" else odp_slides(data, job)
    job.check_pages(len(slides), "slides")
    job.on_count(len(slides))
    first_title = next((title for title, _, _ in slides if title), "")
    job.title(first_title)
    for number, (title, body, notes) in enumerate(slides, start=1):
        head = f"## Slide {number}: {title}" if title else f"## Slide {number}"
        parts = [head, body]
        if notes.strip():
            parts.append("Speaker notes:\n" + notes.strip())
        yield Unit(number, tidy("\n\n".join(p for p in parts if p)), f"slide={number}", title)
