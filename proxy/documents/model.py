"""A parsed document: its units of text (pages, sections, sheets, slides) and its drawn pages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

StatusSink = Callable[[str], None]
"""Receives progress lines such as `Parsing file report.pdf... (40%)`."""


@dataclass(frozen=True)
class Page:
    """One unit of extracted text, in reading order.

    `number` is 1-based: the page number for paged formats (PDF, XPS, images), else the unit's
    position. `location` is where a person finds it: `page=4`, `section=2.3 Refunds`,
    `sheet=Q3`, `slide=4`, `line=120`; empty means `page=<number>` (older cache entries).
    """

    number: int
    text: str
    location: str = ""
    title: str = ""
    ocr: bool = False

    @property
    def where(self) -> str:
        return self.location or f"page={self.number}"


@dataclass(frozen=True)
class DocumentWarning:
    """Something lossy happened while reading (repaired file, OCR, rows cut); `message`
    completes "<file>: ..."."""

    code: str
    message: str


@dataclass(frozen=True)
class ParsedDocument:
    """A document turned into text, unit by unit; `title` is the document's own title, if any."""

    name: str
    sha256: str
    kind: str
    library: str
    pages: tuple[Page, ...]
    title: str | None = None
    warnings: tuple[DocumentWarning, ...] = ()

    @property
    def text(self) -> str:
        return "\n\n".join(page.text for page in self.pages if page.text)

    @property
    def char_count(self) -> int:
        return sum(len(page.text) for page in self.pages)

    @property
    def ocr_pages(self) -> list[int]:
        return [page.number for page in self.pages if page.ocr]


@dataclass(frozen=True)
class DrawnPage:
    """A page whose content is drawn rather than written: why, how much of it, and its size."""

    number: int
    width: float  # points
    height: float
    reason: str  # "figure" | "image" | "scan"
    share: float  # of the page area covered by what is drawn

    def frame(self) -> list[Any]:
        return [self.number, round(self.width, 2), round(self.height, 2), self.reason, self.share]
