"""The parsed form of a document: its pages of text, keyed by the sha256 of its bytes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

StatusSink = Callable[[str], None]
"""Receives progress lines such as `Parsing file report.pdf... (40%)`."""


@dataclass(frozen=True)
class Page:
    """One page of extracted text; `number` is 1-based as a reader would cite it."""

    number: int
    text: str


@dataclass(frozen=True)
class ParsedDocument:
    """A document turned into text, page by page."""

    name: str
    sha256: str
    kind: str
    library: str
    pages: tuple[Page, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(page.text for page in self.pages if page.text)

    @property
    def char_count(self) -> int:
        return sum(len(page.text) for page in self.pages)
