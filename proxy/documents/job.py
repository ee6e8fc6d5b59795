"""What a parser gets (the job's limits and callbacks) and gives back (units of text)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from proxy.documents.failure import ExtractError


@dataclass(frozen=True)
class Unit:
    """One page, section, sheet or slide, in reading order (see `model.Page`)."""

    number: int
    text: str
    location: str
    title: str = ""
    ocr: bool = False

    def frame(self) -> list[Any]:
        return [self.number, self.text, self.location, self.title, self.ocr]


@dataclass(frozen=True)
class OcrOptions:
    """How pages without a text layer are read; `tessdata` is the language data folder."""

    languages: tuple[str, ...] = ("eng",)
    dpi: int = 300
    max_pages: int = 50
    tessdata: str = ""

    @property
    def language(self) -> str:
        return "+".join(self.languages)


def _ignore(*_: Any) -> None:
    pass


@dataclass
class Job:
    """One document to parse, with the limits it must obey and where to report to."""

    kind: str
    name: str = ""
    max_pages: int = 2000
    max_chars: int = 5_000_000
    max_rows: int = 5000
    max_columns: int = 100
    ocr: OcrOptions | None = None
    tables: bool = True
    on_count: Callable[[int], None] = _ignore
    on_ocr: Callable[[int, int], None] = _ignore
    on_warning: Callable[[str, str], None] = _ignore
    on_title: Callable[[str], None] = _ignore
    warned: set[str] = field(default_factory=set)

    def warn(self, code: str, message: str) -> None:
        """Report a lossy step once per code and message."""
        key = f"{code}:{message}"
        if key not in self.warned:
            self.warned.add(key)
            self.on_warning(code, message)

    def title(self, value: object) -> None:
        text = " ".join(str(value or "").split())[:200]
        if text and text.lower() not in ("untitled", "untitled document", "title"):
            self.on_title(text)

    def check_pages(self, count: int, what: str = "pages") -> None:
        if count > self.max_pages:
            raise ExtractError(
                f"has {count} {what}, more than the limit of {self.max_pages} pages",
                "too_many_pages",
            )


Units = Iterator[Unit]
