"""DOCX to Markdown with python-docx: headings, lists and tables in document order."""

from __future__ import annotations

import io
import re

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from proxy.documents.archive import open_zip
from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.markdown import cell, heading, table
from proxy.documents.text import tidy

_LIST_LEVEL = re.compile(r"^List (?:Bullet|Number|Paragraph|Continue)(?: (\d))?$")


def docx_to_text(data: bytes, job: Job | None = None) -> str:
    """Body of a Word document as Markdown: `#` headings, `-` list items, `|` tables."""
    open_zip(data, "DOCX file", verify=True).close()
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:
        raise ExtractError(
            f"is not a readable DOCX file ({type(exc).__name__}: {exc})", "corrupt_document"
        ) from exc
    if job is not None:
        job.title(document.core_properties.title)
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            blocks.append(_paragraph(item))
        elif isinstance(item, Table):
            blocks.append(_table(item, job))
    return tidy("\n\n".join(block for block in blocks if block.strip()))


def _paragraph(paragraph: Paragraph) -> str:
    text = paragraph.text
    style = paragraph.style.name if paragraph.style is not None else ""
    if not text.strip() or not style:
        return text
    if style == "Title":
        return heading(1, text)
    if style.startswith("Heading "):
        level = style.removeprefix("Heading ").strip()
        if level.isdigit():
            return heading(int(level), text)
    listed = _LIST_LEVEL.match(style)
    if listed:
        depth = int(listed.group(1) or 1) - 1
        return "  " * depth + "- " + text.strip()
    return text


def _table(table_: Table, job: Job | None) -> str:
    rows: list[list[str]] = []
    for row in table_.rows:
        cells: list[str] = []
        previous = None
        for docx_cell in row.cells:
            # Merged cells come back once per grid column: keep one copy.
            if previous is not None and docx_cell._tc is previous:
                continue
            previous = docx_cell._tc
            text, cut = cell(docx_cell.text)
            if cut and job is not None:
                job.warn("cell_cut", "table cells longer than 2000 characters were cut")
            cells.append(text)
        if any(cells):
            rows.append(cells)
    return table(rows)
