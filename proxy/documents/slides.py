"""Presentations (PPTX with python-pptx, ODP with odfpy): one unit per slide, notes included."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import Any

from proxy.documents.archive import open_zip
from proxy.documents.failure import ExtractError
from proxy.documents.job import Job, Unit, Units
from proxy.documents.table_form import cell, table
from proxy.documents.odf_text import odp_slides
from proxy.documents.text import tidy


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
        body = _shapes(slide.shapes, title_shape, job)
        notes = ""
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            notes = slide.notes_slide.notes_text_frame.text
        slides.append((title, "\n\n".join(body), notes))
    return slides


def _shapes(shapes: Iterable[Any], title_shape: Any, job: Job) -> list[str]:
    out: list[str] = []
    for shape in shapes:
        if title_shape is not None and shape.shape_id == title_shape.shape_id:
            continue
        if getattr(shape, "has_table", False) and shape.has_table:
            rows = []
            for row in shape.table.rows:
                cells = [cell(item.text) for item in row.cells]
                if any(cut for _, cut in cells):
                    job.warn("cell_cut", "table cells longer than 2000 characters were cut")
                rows.append([text for text, _ in cells])
            out.append(table(rows))
        elif hasattr(shape, "shapes"):  # a group
            out.extend(_shapes(shape.shapes, None, job))
        elif getattr(shape, "has_text_frame", False) and shape.has_text_frame:
            lines = []
            for paragraph in shape.text_frame.paragraphs:
                text = "".join(run.text for run in paragraph.runs) or paragraph.text
                if text.strip():
                    lines.append("  " * paragraph.level + "- " + text.strip())
            out.append("\n".join(lines))
    return [block for block in out if block.strip()]


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
