"""Gathers the frames of one worker job into pages and progress statuses."""

from __future__ import annotations

import structlog

from proxy.documents.model import Page, StatusSink
from proxy.documents.pool import Message
from proxy.errors import DocumentError

log = structlog.get_logger(__name__)


class PageCollector:
    """One per document: `on_message` receives the worker's frames, on the event loop."""

    def __init__(self, name: str, library: str, max_chars: int, emit: StatusSink) -> None:
        self.name = name
        self.pages: list[Page] = []
        self.total = 0
        self._library = library
        self._max_chars = max_chars
        self._emit = emit
        self._chars = 0
        self._reported = -1

    def finish(self) -> list[Page]:
        """The pages read; reports 100% and logs the numbers of pages that could not be read."""
        if self.total and not self.pages:
            raise DocumentError(
                self.name,
                f"is corrupt: none of its {self.total} pages could be read",
                code="corrupt_document",
            )
        self._report(100)
        if len(self.pages) < self.total:
            read = {page.number for page in self.pages}
            missing = [n for n in range(1, self.total + 1) if n not in read]
            log.warning("unreadable pages skipped", file=self.name, pages=missing[:50])
        return self.pages

    def on_message(self, message: Message) -> None:
        tag = message["t"]
        if tag == "ack":
            self._emit(f"{self._library} loaded for {self.name}...")
        elif tag == "count":
            self.total = int(message["n"])
            self._report(0)
        elif tag == "pages":
            self._add([Page(int(number), str(text)) for number, text in message["pages"]])
            if self.total:
                # 100% is for finish(): the text is not complete until the job says done.
                self._report(min(99, int(message["done"]) * 100 // self.total))
        elif tag == "error":
            log.warning(
                "document rejected",
                file=self.name,
                reason=message["reason"],
                mupdf=message.get("warnings", ""),
            )
            raise DocumentError(self.name, str(message["reason"]), code=str(message["code"]))
        elif tag == "done" and message.get("warnings"):
            log.debug("parser warnings", file=self.name, mupdf=message["warnings"])

    def _add(self, batch: list[Page]) -> None:
        self.pages.extend(batch)
        self._chars += sum(len(page.text) for page in batch)
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
