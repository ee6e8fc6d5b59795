"""OpenDocument text, spreadsheets and presentations (ODT, ODS, ODP) with odfpy."""

from __future__ import annotations

import io
from collections.abc import Iterator
from typing import Any

from odf.namespaces import DCNS, DRAWNS, PRESENTATIONNS, TABLENS, TEXTNS
from odf.opendocument import load

from proxy.documents.archive import open_zip
from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.markdown import heading
from proxy.documents.table_form import cell, table
from proxy.documents.text import tidy

Grid = list[tuple[int, list[str]]]
_TEXT_NODE = 3


def load_odf(data: bytes, label: str, job: Job) -> Any:
    open_zip(data, label, verify=True).close()  # bounds first: odfpy reads every member
    try:
        document = load(io.BytesIO(data))
    except Exception as exc:
        raise ExtractError(
            f"is not a readable {label} ({type(exc).__name__}: {exc})", "corrupt_document"
        ) from exc
    for node in _walk(document.meta):
        if _name(node) == (DCNS, "title"):
            job.title(inline(node))
            break
    return document


def _name(node: Any) -> tuple[str, str]:
    return getattr(node, "qname", ("", ""))


def _attr(node: Any, namespace: str, name: str) -> str:
    return str(getattr(node, "attributes", {}).get((namespace, name), "") or "")


def _walk(node: Any) -> Iterator[Any]:
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        stack.extend(reversed(getattr(current, "childNodes", [])))


def inline(node: Any) -> str:
    """The text of a paragraph-like element, with ODF's encoded spaces, tabs and breaks."""
    out: list[str] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if getattr(current, "nodeType", 0) == _TEXT_NODE:
            out.append(str(current.data))
            continue
        name = _name(current)
        if name == (TEXTNS, "s"):
            out.append(" " * int(_attr(current, TEXTNS, "c") or 1))
        elif name == (TEXTNS, "tab"):
            out.append("\t")
        elif name == (TEXTNS, "line-break"):
            out.append("\n")
        elif name == (TEXTNS, "note"):
            continue  # footnote bodies would interrupt the sentence
        stack.extend(reversed(getattr(current, "childNodes", [])))
    return "".join(out)


def blocks(node: Any, job: Job, depth: int = 0) -> list[str]:
    """Markdown blocks of a text container: headings, paragraphs, lists, tables."""
    out: list[str] = []
    for child in getattr(node, "childNodes", []):
        name = _name(child)
        if name == (TEXTNS, "h"):
            level = int(_attr(child, TEXTNS, "outline-level") or 1)
            out.append(heading(level, inline(child)))
        elif name == (TEXTNS, "p"):
            out.append(inline(child))
        elif name == (TEXTNS, "list"):
            for item in getattr(child, "childNodes", []):
                inner = blocks(item, job, depth + 1)
                if inner:
                    first, *rest = inner
                    lead = first if first.lstrip().startswith("- ") else f"- {first}"
                    out.append("  " * depth + lead + "".join("\n" + line for line in rest))
        elif name == (TABLENS, "table"):
            out.append(table([cells for _, cells in grid(child, job)]))
        elif name in ((DRAWNS, "frame"), (DRAWNS, "text-box"), (TEXTNS, "section")):
            out.extend(blocks(child, job, depth))
        else:
            out.extend(blocks(child, job, depth))
    return [block for block in out if block.strip()]


def grid(node: Any, job: Job) -> Grid:
    """A table's numbered rows of cells, expanding repeats (capped), empty rows and trailing
    empty cells dropped."""
    rows: Grid = []
    number = 0
    cut_rows = cut_columns = False
    for row in _walk(node):
        if _name(row) != (TABLENS, "table-row"):
            continue
        cells: list[str] = []
        for item in getattr(row, "childNodes", []):
            if _name(item) not in ((TABLENS, "table-cell"), (TABLENS, "covered-table-cell")):
                continue
            text, cut = cell(" ".join(inline(p) for p in _paragraphs(item)))
            if cut:
                job.warn("cell_cut", "table cells longer than 2000 characters were cut")
            repeat = int(_attr(item, TABLENS, "number-columns-repeated") or 1)
            # Spreadsheets pad rows with a million repeated empty cells: keep real ones only.
            room = job.max_columns - len(cells)
            if text and repeat > room:
                cut_columns = True
            cells.extend([text] * min(repeat if text else min(repeat, room), room))
        while cells and not cells[-1]:
            cells.pop()
        repeat = int(_attr(row, TABLENS, "number-rows-repeated") or 1)
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


def _paragraphs(node: Any) -> Iterator[Any]:
    for child in _walk(node):
        if _name(child) in ((TEXTNS, "p"), (TEXTNS, "h")):
            yield child


def odt_to_text(data: bytes, job: Job) -> str:
    document = load_odf(data, "ODT file", job)
    return tidy("\n\n".join(blocks(document.text, job)))


def ods_sheets(data: bytes, job: Job) -> list[tuple[str, Grid]]:
    document = load_odf(data, "ODS file", job)
    sheets: list[tuple[str, Grid]] = []
    for child in getattr(document.spreadsheet, "childNodes", []):
        if _name(child) == (TABLENS, "table"):
            sheets.append(
                (_attr(child, TABLENS, "name") or f"Sheet{len(sheets) + 1}", grid(child, job))
            )
    return sheets


def odp_slides(data: bytes, job: Job) -> list[tuple[str, str, str]]:
    """(title, body, speaker notes) of each slide."""
    document = load_odf(data, "ODP file", job)
    slides = []
    for page in getattr(document.presentation, "childNodes", []):
        if _name(page) != (DRAWNS, "page"):
            continue
        title, body, notes = "", [], []
        for child in getattr(page, "childNodes", []):
            name = _name(child)
            if name == (PRESENTATIONNS, "notes"):
                notes.extend(blocks(child, job))
            elif _attr(child, PRESENTATIONNS, "class") == "title" and not title:
                title = " ".join(inline(child).split())
            else:
                body.extend(blocks(child, job))
        slides.append((title, "\n\n".join(body), "\n\n".join(notes)))
    return slides
