"""DOCX to text with python-docx: paragraphs and tables in document order."""

from __future__ import annotations

import io

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from proxy.documents.failure import ExtractError
from proxy.documents.text import tidy


def docx_to_text(data: bytes) -> str:
    """Body text of a Word document; headings get Markdown `#` marks, table rows `|` cells."""
    try:
        document = docx.Document(io.BytesIO(data))
    except Exception as exc:
        raise ExtractError(
            f"is not a readable DOCX file ({type(exc).__name__}: {exc})", "corrupt_document"
        ) from exc
    blocks: list[str] = []
    for item in document.iter_inner_content():
        if isinstance(item, Paragraph):
            blocks.append(_paragraph(item))
        elif isinstance(item, Table):
            blocks.append(_table(item))
    return tidy("\n\n".join(block for block in blocks if block.strip()))


def _paragraph(paragraph: Paragraph) -> str:
    text = paragraph.text
    style = paragraph.style.name if paragraph.style is not None else ""
    if text.strip() and style and style.startswith("Heading "):
        level = style.removeprefix("Heading ").strip()
        if level.isdigit():
            return "#" * min(int(level), 6) + " " + text
    return text


def _table(table: Table) -> str:
    rows: list[str] = []
    for row in table.rows:
        cells: list[str] = []
        previous = None
        for cell in row.cells:
            # Merged cells come back once per grid column: keep one copy.
            if previous is not None and cell._tc is previous:
                continue
            previous = cell._tc
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)
