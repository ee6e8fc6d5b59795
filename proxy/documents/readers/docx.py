"""DOCX to Markdown: headings, lists, captioned tables in document order.

python-docx opens the package (relationships, parts, its hardened XML parser); the body is then
read straight from its lxml tree. python-docx's object layer costs more than the text: every
`paragraph.style` searches the styles part (the default style by a scan of all of them), and
every `row.cells` rebuilds the row's grid, following vertical merges up the table. Styles are
resolved once per style here, and each table is read in one pass over its rows.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import docx
from lxml import etree

from proxy.documents.failure import ExtractError
from proxy.documents.job import Job
from proxy.documents.readers.archive import open_zip
from proxy.documents.readers.markdown_blocks import heading
from proxy.documents.readers.table_form import Block, Caption, Table, cell, join_blocks
from proxy.documents.readers.text import tidy

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_NS = {"w": W}


def _w(name: str) -> str:
    return f"{{{W}}}{name}"


_P, _TBL, _TR, _TC, _SDT, _SDT_CONTENT, _CUSTOM_XML = (
    _w(name) for name in ("p", "tbl", "tr", "tc", "sdt", "sdtContent", "customXml")
)
_VAL = _w("val")
# The text of a paragraph: its runs' text, tabs and breaks, in order, wherever the runs sit
# (hyperlinks, insertions, content controls, fields), but not deleted or moved-away text, and
# not text boxes anchored in it (their paragraphs are the drawing's, and come twice: once in
# the drawing, once in its fallback picture).
_RUN_CONTENT = etree.XPath(
    ".//w:r[not(ancestor::w:txbxContent or ancestor::w:del or ancestor::w:moveFrom)]"
    "/*[self::w:t or self::w:tab or self::w:br or self::w:cr or self::w:noBreakHyphen"
    " or self::w:ptab]",
    namespaces=_NS,
)
_TEXT = {_w("tab"): "\t", _w("cr"): "\n", _w("noBreakHyphen"): "-", _w("ptab"): "\t"}
_T, _BR = _w("t"), _w("br")
_STYLE_ID = etree.XPath("string(w:pPr/w:pStyle/@w:val)", namespaces=_NS)
_OUTLINE = etree.XPath("string(w:pPr/w:outlineLvl/@w:val)", namespaces=_NS)
_NUMBERING = etree.XPath("w:pPr/w:numPr", namespaces=_NS)
_NUM_LEVEL = etree.XPath("string(w:ilvl/@w:val)", namespaces=_NS)
_NUM_ID = etree.XPath("string(w:numId/@w:val)", namespaces=_NS)
_GRID_SPAN = etree.XPath("string(w:tcPr/w:gridSpan/@w:val)", namespaces=_NS)
_V_MERGE = etree.XPath("w:tcPr/w:vMerge", namespaces=_NS)
_GRID_BEFORE = etree.XPath("string(w:trPr/w:gridBefore/@w:val)", namespaces=_NS)
_STYLE_NAME = etree.XPath("string(w:name/@w:val)", namespaces=_NS)
_BASED_ON = etree.XPath("string(w:basedOn/@w:val)", namespaces=_NS)
_LIST_STYLE = re.compile(r"^list (?:bullet|number|paragraph|continue)(?: (\d))?$")
_HEADING_STYLE = re.compile(r"^heading (\d)$")
_MAX_SPAN = 64  # a gridSpan is a count of grid columns: a hostile one is not expanded


@dataclass(frozen=True)
class _Style:
    """What a paragraph style makes of a paragraph."""

    heading: int = 0  # 1-9, 0 for none
    list_depth: int = -1  # -1 for none
    caption: bool = False


class _Styles:
    """The styles part resolved once: style id to heading level, list depth or caption."""

    def __init__(self, root: Any) -> None:
        self._raw: dict[str, tuple[str, str, str, bool]] = {}
        self.default = ""
        for style in root.iterchildren(_w("style")):
            if style.get(_w("type")) != "paragraph":
                continue
            style_id = style.get(_w("styleId")) or ""
            name = str(_STYLE_NAME(style)).lower()
            based_on = str(_BASED_ON(style))
            outline = str(_OUTLINE(style))
            numbered = bool(_NUMBERING(style))
            self._raw[style_id] = (name, based_on, outline, numbered)
            if style.get(_w("default")) in ("1", "true", "on"):
                self.default = style_id
        self._resolved: dict[str, _Style] = {}

    def get(self, style_id: str) -> _Style:
        key = style_id or self.default
        found = self._resolved.get(key)
        if found is None:
            found = self._resolved[key] = self._resolve(key)
        return found

    def _resolve(self, style_id: str) -> _Style:
        # Word's own styles are stored by their English names ("heading 1", "caption"); a
        # style based on one (a custom heading) is what it is based on, unless it says more.
        seen: set[str] = set()
        current = style_id
        while current in self._raw and current not in seen:
            seen.add(current)
            name, based_on, outline, numbered = self._raw[current]
            if name == "title":
                return _Style(heading=1)
            matched = _HEADING_STYLE.match(name)
            if matched and matched.group(1) != "0":
                return _Style(heading=int(matched.group(1)))
            if outline.isdigit() and int(outline) < 9:
                return _Style(heading=int(outline) + 1)
            if name == "caption":
                return _Style(caption=True)
            listed = _LIST_STYLE.match(name)
            if listed:
                return _Style(list_depth=int(listed.group(1) or 1) - 1)
            if numbered:
                return _Style(list_depth=0)
            current = based_on
        return _Style()


def docx_to_text(data: bytes, job: Job | None = None) -> str:
    """Body of a Word document as Markdown: `#` headings, `-` list items, `|` tables."""
    open_zip(data, "DOCX file", verify=True).close()
    try:
        document = docx.Document(io.BytesIO(data))
        body = document.element.body
        styles = _Styles(document.styles.element)
    except Exception as exc:
        raise ExtractError(
            f"is not a readable DOCX file ({type(exc).__name__}: {exc})", "corrupt_document"
        ) from exc
    if job is not None:
        job.title(document.core_properties.title)
    reader = _Reader(styles, job)
    return tidy(join_blocks(list(reader.blocks(body))))


class _Reader:
    def __init__(self, styles: _Styles, job: Job | None) -> None:
        self.styles = styles
        self.job = job

    def blocks(self, body: Any) -> Iterator[Block]:
        """The paragraphs and tables of the body, in order."""
        for child in _flat(body, _P, _TBL):
            if child.tag == _P:
                yield self.paragraph(child)
            else:
                yield Table(self.table(child))

    def paragraph(self, p: Any) -> Block:
        text = _text(p)
        if not text.strip():
            return text
        style = self.styles.get(str(_STYLE_ID(p)))
        outline = str(_OUTLINE(p))
        if outline.isdigit() and int(outline) < 9:
            return heading(int(outline) + 1, text)
        if style.heading:
            return heading(style.heading, text)
        if style.caption:
            return Caption(" ".join(text.split()))
        depth = style.list_depth
        numbering = _NUMBERING(p)
        if numbering and str(_NUM_ID(numbering[0])) != "0":
            level = str(_NUM_LEVEL(numbering[0]))
            depth = int(level) if level.isdigit() and int(level) < 10 else max(depth, 0)
        if depth >= 0:
            return "  " * depth + "- " + text.strip()
        return text

    def table(self, tbl: Any) -> list[list[str]]:
        """Rows of cells on the table's grid: a merged cell's text once, in its first column;
        a vertically merged cell's text in each of its rows."""
        rows: list[list[str]] = []
        above: dict[int, str] = {}  # grid column -> text of the cell there in the row above
        for tr in _flat(tbl, _TR):
            cells: list[str] = []
            before = str(_GRID_BEFORE(tr))
            if before.isdigit():
                cells.extend([""] * min(int(before), _MAX_SPAN))
            for tc in _flat(tr, _TC):
                column = len(cells)
                merge = _V_MERGE(tc)
                if merge and merge[0].get(_VAL) in (None, "continue"):
                    text = above.get(column, "")
                else:
                    text = self.cell_text(tc)
                span = str(_GRID_SPAN(tc))
                cells.append(text)
                if span.isdigit() and int(span) > 1:
                    cells.extend([""] * (min(int(span), _MAX_SPAN) - 1))
            above = dict(enumerate(cells))
            if any(cells):
                rows.append(cells)
        return rows

    def cell_text(self, tc: Any) -> str:
        parts: list[str] = []
        for child in _flat(tc, _P, _TBL):
            if child.tag == _P:
                parts.append(_text(child))
            else:  # a nested table, flattened into the cell
                parts.append(
                    "; ".join(" / ".join(c for c in row if c) for row in self.table(child))
                )
        text, cut = cell("\n".join(parts))
        if cut and self.job is not None:
            self.job.warn("cell_cut", "table cells longer than 2000 characters were cut")
        return text


def _flat(container: Any, *tags: str) -> Iterator[Any]:
    """The children of `container` with one of `tags`, looking through content controls and
    custom XML (python-docx skips what they hold); nesting is bounded by the XML parser."""
    for child in container.iterchildren(*tags, _SDT, _CUSTOM_XML):
        if child.tag == _SDT:
            content = child.find(_SDT_CONTENT)
            if content is not None:
                yield from _flat(content, *tags)
        elif child.tag == _CUSTOM_XML:
            yield from _flat(child, *tags)
        else:
            yield child


def _text(p: Any) -> str:
    out: list[str] = []
    for element in _RUN_CONTENT(p):
        tag = element.tag
        if tag == _T:
            out.append(element.text or "")
        elif tag == _BR:
            # Page and column breaks are layout, not text: python-docx reads them as "".
            if element.get(_w("type")) in (None, "textWrapping"):
                out.append("\n")
        else:
            out.append(_TEXT[tag])
    return "".join(out)
