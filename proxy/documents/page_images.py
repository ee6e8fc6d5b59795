"""Pages as images, from the parent's side: which pages of a document are drawn (asked of a
parse worker once per document) and those pages rendered (in a worker, bounded, cached)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import structlog
from cachetools import LRUCache

from proxy.documents.drawn import DrawnPage
from proxy.documents.model import ParsedDocument
from proxy.documents.pool import WorkerCrashed, WorkerPool, WorkerTimeout, WorkerUnavailable

log = structlog.get_logger(__name__)

DRAWABLE_KINDS = frozenset({"pdf", "xps", "cbz", "image"})
"""What PyMuPDF lays out as pages it can draw. Its Office and e-book readers reflow the text
into pages of its own (a PPTX slide loses its charts and layout), so those are never drawn."""
PHOTOGRAPHIC = frozenset({"image", "scan"})
IMAGE_CACHE_BYTES = 64 * 1024 * 1024
"""Rendered pages kept in memory (as data URLs): a conversation resends its document every
turn, and the same pages go again."""


class PagesFailed(Exception):
    """A worker could not survey or render a document's pages; the text still goes."""


@dataclass(frozen=True)
class PageImage:
    """A rendered page: its number, type, pixel size, encoded size and `data:` URL."""

    number: int
    mime: str
    width: int
    height: int
    size: int
    url: str


class PageImages:
    """Surveys and renders in the parse workers; one instance per event loop."""

    def __init__(
        self,
        pool: WorkerPool,
        *,
        survey_timeout_s: float,
        render_timeout_s: float,
        max_image_bytes: int,
    ) -> None:
        self.pool = pool
        self.max_image_bytes = max_image_bytes
        self.survey_timeout_s = survey_timeout_s
        self.render_timeout_s = render_timeout_s
        self._surveys: LRUCache[str, tuple[DrawnPage, ...]] = LRUCache(maxsize=1024)
        self._images: LRUCache[tuple[str, int, int, int], PageImage] = LRUCache(
            maxsize=IMAGE_CACHE_BYTES, getsizeof=lambda image: len(image.url)
        )

    async def survey(self, document: ParsedDocument, data: bytes) -> tuple[DrawnPage, ...]:
        """The drawn pages of a document (remembered by its sha256); () for kinds that are
        not laid out as pages."""
        if document.kind not in DRAWABLE_KINDS:
            return ()
        cached = self._surveys.get(document.sha256)
        if cached is not None:
            return cached
        # Pages without a text layer (OCR'd, or left empty with OCR off) are scans.
        scanned = [page.number for page in document.pages if page.ocr or not page.text.strip()]
        job = {"task": "survey", "kind": document.kind, "name": document.name, "scanned": scanned}
        found: list[DrawnPage] = []

        def on_message(message: dict[str, Any]) -> None:
            if message.get("t") == "drawn":
                found.extend(DrawnPage(*page) for page in message.get("pages", ()))
            elif message.get("t") == "error":
                raise PagesFailed(str(message.get("reason", "failed")))

        await self._run(job, data, self.survey_timeout_s, on_message, document.name)
        pages = tuple(found)
        self._surveys[document.sha256] = pages
        return pages

    async def render(
        self, document: ParsedDocument, data: bytes, wanted: list[tuple[int, int, int, str]]
    ) -> dict[int, PageImage]:
        """Pages `(number, width, height, reason)` as images; a page over the size limit even
        when scaled down is missing from the answer."""
        images: dict[int, PageImage] = {}
        missing = []
        for number, width, height, reason in wanted:
            cached = self._images.get((document.sha256, number, width, height))
            if cached is not None:
                images[number] = cached
            else:
                missing.append([number, width, height, reason in PHOTOGRAPHIC])
        if not missing:
            return images
        job = {
            "task": "render",
            "kind": document.kind,
            "name": document.name,
            "pages": missing,
            "max_bytes": self.max_image_bytes,
        }
        sizes = {int(page[0]): (int(page[1]), int(page[2])) for page in missing}

        def on_message(message: dict[str, Any]) -> None:
            kind = message.get("t")
            if kind == "image" and "b64" in message:
                number = int(message["n"])
                mime = str(message["mime"])
                image = PageImage(
                    number,
                    mime,
                    int(message["w"]),
                    int(message["h"]),
                    int(message["bytes"]),
                    f"data:{mime};base64,{message['b64']}",
                )
                images[number] = image
                self._images[(document.sha256, number, *sizes[number])] = image
            elif kind == "image":
                log.info("page image left out", file=document.name, page=message.get("n"))
            elif kind == "error":
                raise PagesFailed(str(message.get("reason", "failed")))

        await self._run(job, data, self.render_timeout_s, on_message, document.name)
        return images

    async def _run(
        self, job: dict[str, Any], data: bytes, timeout_s: float, on_message: Any, name: str
    ) -> None:
        def handle(message: dict[str, Any]) -> float | None:
            on_message(message)
            return None

        try:
            await self.pool.run(job, data, timeout_s, handle)
        except WorkerTimeout:
            raise PagesFailed(f"took longer than {timeout_s:g} s") from None
        except (WorkerCrashed, WorkerUnavailable) as exc:
            raise PagesFailed(str(exc)) from None
