"""OpenDocument text, spreadsheets and presentations (ODT, ODS, ODP), read with lxml.

odfpy builds a Python object per XML node of every member (content, styles, settings) through
SAX: a 4 MB spreadsheet took 15 s to load before a cell was read. Only content.xml and meta.xml
are needed, and lxml reads them ten times faster, through a parser that resolves no entities,
loads no DTD and refuses trees deeper than 256 levels.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterator
from typing import Any

from lxml import etree

from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.readers.archive import open_zip
from proxy.documents.readers.markdown_blocks import heading
from proxy.documents.readers.table_form import Block, Caption, Table, cell, join_blocks
from proxy.documents.readers.text import tidy

Grid = list[tuple[int, list[str]]]

OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"
TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
TABLE = "urn:oasis:names:tc:opendocument:xmlns:table:1.0"
DRAW = "urn:oasis:names:tc:opendocument:xmlns:drawing:1.0"
PRESENTATION = "urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"
DC = "http://purl.org/dc/elements/1.1/"

_PARSER = etree.XMLParser(
    resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, remove_comments=True
)
_H, _P, _LIST, _SPAN_S, _TAB, _BREAK, _NOTE, _SEQUENCE = (
    f"{{{TEXT}}}{name}" for name in ("h", "p", "list", "s", "tab", "line-break", "note", "sequence")
)
_TABLE, _ROW, _CELL, _COVERED = (
    f"{{{TABLE}}}{name}" for name in ("table", "table-row", "table-cell", "covered-table-cell")
)
_ROW_GROUPS = frozenset(
    f"{{{TABLE}}}{name}" for name in ("table-header-rows", "table-rows", "table-row-group")
)
_CAPTION_SEQUENCES = frozenset({"table", "tabelle", "таблица", "tableau", "tabla", "tabella"})
_MAX_SPAN = 1000  # rows a vertically merged cell is repeated into, at most


def _attr(node: Any, namespace: str, name: str) -> str:
    return str(node.get(f"{{{namespace}}}{name}") or "")


def load_odf(data: bytes, label: str, job: Job) -> Any:
    """The document's body (office:text, office:spreadsheet or office:presentation)."""
    with open_zip(data, label, verify=True) as archive:  # bounds first
        try:
            content = etree.fromstring(archive.read("content.xml"), _PARSER)
            meta = _meta(archive)
        except (KeyError, etree.XMLSyntaxError, zipfile.BadZipFile, ValueError) as exc:
            raise ExtractError(
                f"is not a readable {label} ({type(exc).__name__}: {exc})", "corrupt_document"
            ) from exc
    if meta is not None:
        title = meta.find(f".//{{{DC}}}title")
        if title is not None:
            job.title(inline(title))
    body = content.find(f"{{{OFFICE}}}body")
    if body is None or len(body) == 0:
        raise ExtractError(f"is not a readable {label} (it has no body)", "corrupt_document")
    return body[0]


def _meta(archive: zipfile.ZipFile) -> Any:
    try:
        return etree.fromstring(archive.read("meta.xml"), _PARSER)
    except (KeyError, etree.XMLSyntaxError):
        return None  # the title is optional: a document without it is still read


def inline(node: Any) -> str:
    """The text of a paragraph-like element, with ODF's encoded spaces, tabs and breaks."""
    out: list[str] = []
    _inline(node, out)
    return "".join(out)


def _inline(node: Any, out: list[str]) -> None:
    # Recursion is bounded: the parser refuses trees deeper than 256 levels.
    if node.text:
        out.append(node.text)
    for child in node:
        tag = child.tag
        if tag == _SPAN_S:
            count = _attr(child, TEXT, "c")
            out.append(" " * (min(int(count), 1000) if count.isdigit() else 1))
        elif tag == _TAB:
            out.append("\t")
        elif tag == _BREAK:
            out.append("\n")
        elif tag != _NOTE:  # footnote bodies would interrupt the sentence
            _inline(child, out)
        if child.tail:
            out.append(child.tail)


def blocks(node: Any, job: Job, depth: int = 0) -> list[Block]:
    """Blocks of a text container: headings, paragraphs, lists, captions and tables."""
    out: list[Block] = []
    for child in node:
        tag = child.tag
        if tag == _H:
            level = _attr(child, TEXT, "outline-level")
            out.append(heading(int(level) if level.isdigit() else 1, inline(child)))
        elif tag == _P:
            text = inline(child)
            named = any(
                _attr(sequence, TEXT, "name").lower() in _CAPTION_SEQUENCES
                for sequence in child.iter(_SEQUENCE)
            )
            out.append(Caption(" ".join(text.split())) if named else text)
        elif tag == _LIST:
            for item in child:
                inner = [text for text in _texts(blocks(item, job, depth + 1)) if text.strip()]
                if inner:
                    first, *rest = inner
                    lead = first if first.lstrip().startswith("- ") else f"- {first}"
                    out.append("  " * depth + lead + "".join("\n" + line for line in rest))
        elif tag == _TABLE:
            out.append(Table([cells for _, cells in grid(child, job)]))
        elif isinstance(tag, str):
            out.extend(blocks(child, job, depth))
    return [block for block in out if not isinstance(block, str) or block.strip()]


def _texts(items: list[Block]) -> list[str]:
    """Blocks inside a list item as lines (a table there is rendered in place)."""
    return [join_blocks([item]) for item in items]


def markdown(node: Any, job: Job) -> str:
    return join_blocks(blocks(node, job))


def _rows(table: Any) -> Iterator[Any]:
    for child in table:
        if child.tag == _ROW:
            yield child
        elif child.tag in _ROW_GROUPS:
            yield from _rows(child)


_ROWS_SPANNED = f"{{{TABLE}}}number-rows-spanned"
_COLUMNS_REPEATED = f"{{{TABLE}}}number-columns-repeated"
_ROWS_REPEATED = f"{{{TABLE}}}number-rows-repeated"


def _number(value: str | None) -> int:
    return int(value) if value and value.isdigit() and int(value) > 0 else 1


def grid(node: Any, job: Job) -> Grid:
    """A table's numbered rows of cells, expanding repeats (capped), empty rows and trailing
    empty cells dropped; merged cells on the grid as table_form says."""
    rows: Grid = []
    number = 0
    cut_rows = cut_columns = False
    spanned: dict[int, tuple[str, int]] = {}  # column -> (text, rows it still covers)
    for row in _rows(node):
        cells: list[str] = []
        for item in row:
            tag = item.tag
            if tag != _CELL and tag != _COVERED:
                continue
            column = len(cells)
            if tag == _COVERED and column in spanned:
                text = spanned[column][0]
            else:
                text = _cell_text(item, job)
            down = item.get(_ROWS_SPANNED)
            if down is not None and text and _number(down) > 1:
                spanned[column] = (text, min(_number(down), _MAX_SPAN))
            repeat = _number(item.get(_COLUMNS_REPEATED))
            # Spreadsheets pad rows with a million repeated empty cells: keep real ones only.
            room = job.max_columns - column
            if text and repeat > room:
                cut_columns = True
            cells.extend([text] * min(repeat if text else min(repeat, room), room))
        if spanned:
            spanned = {c: (t, left - 1) for c, (t, left) in spanned.items() if left > 1}
        while cells and not cells[-1]:
            cells.pop()
        repeat = _number(row.get(_ROWS_REPEATED))
        if not cells:
            number += repeat
            continue
        for _ in range(repeat):
            if len(rows) >= job.max_rows:
                cut_rows = True
                break
            number += 1
            rows.append((number, cells))
        if cut_rows:
            break
    if cut_rows:
        job.warn("rows_cut", f"tables were cut to their first {job.max_rows} rows")
    if cut_columns:
        job.warn("columns_cut", f"tables were cut to their first {job.max_columns} columns")
    return rows


def _cell_text(item: Any, job: Job) -> str:
    if len(item) == 1:
        only = item[0]
        if only.tag == _P and len(only) == 0:  # the common cell: one paragraph of plain text
            text, cut = cell(only.text)
            if cut:
                job.warn("cell_cut", "table cells longer than 2000 characters were cut")
            return text
    parts = []
    for paragraph in item.iter(_P, _H):
        # A paragraph of plain text (most cells) is its .text; others are read in full.
        parts.append(paragraph.text or "" if len(paragraph) == 0 else inline(paragraph))
    text, cut = cell(" ".join(parts))
    if cut:
        job.warn("cell_cut", "table cells longer than 2000 characters were cut")
    return text


def odt_to_text(data: bytes, job: Job) -> str:
    return tidy(markdown(load_odf(data, "ODT file", job), job))


def ods_sheets(data: bytes, job: Job) -> list[tuple[str, Grid]]:
    spreadsheet = load_odf(data, "ODS file", job)
    sheets: list[tuple[str, Grid]] = []
    for child in spreadsheet.iterchildren(_TABLE):
        name = _attr(child, TABLE, "name") or f"Sheet{len(sheets) + 1}"
        sheets.append((name, grid(child, job)))
    return sheets


def odp_slides(data: bytes, job: Job) -> list[tuple[str, str, str]]:
    """(title, body, speaker notes) of each slide."""
    presentation = load_odf(data, "ODP file", job)
    slides = []
    for page in presentation.iterchildren(f"{{{DRAW}}}page"):
        title, body, notes = "", [], []
        for child in page:
            if child.tag == f"{{{PRESENTATION}}}notes":
                notes.extend(blocks(child, job))
            elif _attr(child, PRESENTATION, "class") == "title" and not title:
                title = " ".join(inline(child).split())
            else:
                body.extend(blocks(child, job))
        for block in body:
            if isinstance(block, Table) and not block.caption:
                block.caption = title
        slides.append((title, join_blocks(body), join_blocks(notes)))
    return slides
