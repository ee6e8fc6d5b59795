"""Gathers the frames of one worker job into units, a title, warnings and progress statuses."""

from __future__ import annotations

import structlog

from proxy.documents.model import DocumentWarning, Page, StatusSink
from proxy.errors import DocumentError

log = structlog.get_logger(__name__)


class PageCollector:
    """One per document: `on_message` receives the worker's frames, on the event loop.

    It returns the seconds to add to the job's time limit: each page read by OCR earns
    `ocr_page_s` more, since OCR takes seconds where text extraction takes milliseconds.
    """

    def __init__(
        self, name: str, library: str, max_chars: int, emit: StatusSink, ocr_page_s: float = 0.0
    ) -> None:
        self.name = name
        self.pages: list[Page] = []
        self.total = 0
        self.title: str | None = None
        self.warnings: list[DocumentWarning] = []
        self.rss = 0
        self._library = library
        self._max_chars = max_chars
        self._emit = emit
        self._ocr_page_s = ocr_page_s
        self._chars = 0
        self._reported = -1

    def finish(self) -> list[Page]:
        """The units read, in order; reports 100%."""
        if self.total and not self.pages:
            raise DocumentError(
                self.name,
                f"is corrupt: none of its {self.total} pages could be read",
                code="corrupt_document",
            )
        self._report(100)
        # Pages read by OCR arrive after the others.
        self.pages.sort(key=lambda page: page.number)
        if self.warnings:
            log.info(
                "document read with warnings",
                file=self.name,
                warnings=[warning.message for warning in self.warnings],
            )
        return self.pages

    def on_message(self, message: dict[str, object]) -> float:
        tag = message["t"]
        if tag == "ack":
            self._emit(f"{self._library} loaded for {self.name}...")
        elif tag == "count":
            self.total = int(str(message["n"]))
            self._report(0)
        elif tag == "pages":
            batch = message["pages"]
            assert isinstance(batch, list)
            self.add([_page(item) for item in batch])
            if self.total:
                # 100% is for finish(): the text is not complete until the job says done.
                self._report(min(99, int(str(message["done"])) * 100 // self.total))
        elif tag == "ocr":
            self._emit(f"OCR page {message['n']} of {message['total']} of {self.name}...")
            return self._ocr_page_s
        elif tag == "warn":
            self.warnings.append(DocumentWarning(str(message["code"]), str(message["message"])))
        elif tag == "title":
            self.title = self.title or str(message["title"])
        elif tag == "error":
            self.rss = int(str(message.get("rss", 0)))
            log.warning(
                "document rejected",
                file=self.name,
                reason=message["reason"],
                mupdf=message.get("warnings", ""),
            )
            raise DocumentError(self.name, str(message["reason"]), code=str(message["code"]))
        elif tag == "done":
            self.rss = int(str(message.get("rss", 0)))
            if message.get("warnings"):
                log.debug("parser warnings", file=self.name, mupdf=message["warnings"])
        return 0.0

    def add(self, pages: list[Page]) -> None:
        self.pages.extend(pages)
        self._chars += sum(len(page.text) for page in pages)
        if self._chars > self._max_chars:
            raise DocumentError(
                self.name,
                f"has more than {self._max_chars} characters of text, over the limit",
                code="too_much_text",
            )

    def _report(self, percent: int) -> None:
        if percent > self._reported:
            self._reported = percent
            self._emit(f"Parsing file {self.name}... ({percent}%)")


def _page(item: list[object]) -> Page:
    number, text, *rest = item
    location = str(rest[0]) if rest else ""
    title = str(rest[1]) if len(rest) > 1 else ""
    return Page(
        int(str(number)), str(text), location, title, bool(rest[2]) if len(rest) > 2 else False
    )
