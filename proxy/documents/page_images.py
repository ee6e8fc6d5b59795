"""Pages as images, from the parent's side: which pages of a document are drawn (asked of a
parse worker once per document) and those pages rendered (in a worker, bounded, cached)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import structlog
from cachetools import LRUCache

from proxy.documents.model import DrawnPage, ParsedDocument
from proxy.documents.pool import WorkerCrashed, WorkerPool, WorkerTimeout, WorkerUnavailable

log = structlog.get_logger(__name__)

DRAWABLE_KINDS = frozenset({"pdf", "xps", "cbz", "image"})
"""What PyMuPDF lays out as pages it can draw. Its Office and e-book readers reflow the text
into pages of its own (a PPTX slide loses its charts and layout), so those are never drawn."""
PHOTOGRAPHIC = frozenset({"image", "scan"})
SURVEYS_REMEMBERED = 1024
"""Documents whose survey (complete, cut short or failed) is kept in memory."""
IMAGE_CACHE_BYTES = 64 * 1024 * 1024
"""Rendered pages kept in memory (as data URLs): a conversation resends its document every
turn, and the same pages go again."""


class PagesFailed(Exception):
    """A worker could not survey or render a document's pages; the text still goes. `lasting`:
    the document's own doing (a time-out, a crash, an error), so trying again would fail
    again; not when no worker could be started."""

    def __init__(self, reason: str, *, lasting: bool = True) -> None:
        super().__init__(reason)
        self.lasting = lasting


@dataclass(frozen=True)
class Survey:
    """What looking for a document's drawn pages came to: the pages found and, when it stopped
    short, why (`cut`) and the last page looked at (`through`; 0 when none was). Remembered per
    document whatever it came to, so that a document too slow to survey costs its time once."""

    pages: tuple[DrawnPage, ...]
    cut: str = ""
    through: int = 0

    @property
    def failed(self) -> bool:
        return bool(self.cut) and not self.through and not self.pages


def survey_budget(timeout_s: float) -> float:
    """The worker stops looking at pages after this long and sends what it found; the time
    limit itself (a second or a tenth later) only catches a page that hangs."""
    return max(0.0, timeout_s - max(1.0, timeout_s * 0.1))


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
        self._surveys: LRUCache[str, Survey] = LRUCache(maxsize=SURVEYS_REMEMBERED)
        self._surveying: dict[tuple[str, str], asyncio.Future[Survey]] = {}
        self._images: LRUCache[tuple[str, int, int, int], PageImage] = LRUCache(
            maxsize=IMAGE_CACHE_BYTES, getsizeof=lambda image: len(image.url)
        )
        # Pages whose rendering ran out of time or crashed the worker: left out from then on.
        self._unrendered: LRUCache[tuple[str, int, int, int], str] = LRUCache(
            maxsize=SURVEYS_REMEMBERED
        )

    async def survey(
        self, document: ParsedDocument, data: bytes, *, owner: str = ""
    ) -> tuple[DrawnPage, ...]:
        """The drawn pages of a document (remembered by its sha256); () for kinds that are
        not laid out as pages. PagesFailed when none could be looked at."""
        found = await self.surveyed(document, data, owner=owner)
        if found.failed:
            raise PagesFailed(found.cut)
        return found.pages

    async def surveyed(self, document: ParsedDocument, data: bytes, *, owner: str = "") -> Survey:
        """The survey of a document's drawn pages, complete or cut short, remembered by the
        document's sha256. `owner`: the key asking, which waits for a parse worker in its own
        turn; its requests for the same document at once share one survey."""
        if document.kind not in DRAWABLE_KINDS:
            return Survey(())
        cached = self._surveys.get(document.sha256)
        if cached is not None:
            return cached
        key = (owner, document.sha256)
        while (pending := self._surveying.get(key)) is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if pending.cancelled() and not (current and current.cancelling()):
                    continue  # the request surveying it went away: survey it for this one
                raise
        future: asyncio.Future[Survey] = asyncio.get_running_loop().create_future()
        self._surveying[key] = future
        try:
            found = await self._survey(document, data, owner)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so an unawaited future does not warn
            raise
        else:
            future.set_result(found)
            return found
        finally:
            self._surveying.pop(key, None)
            del future

    async def _survey(self, document: ParsedDocument, data: bytes, owner: str) -> Survey:
        # Pages without a text layer (OCR'd, or left empty with OCR off) are scans.
        scanned = [page.number for page in document.pages if page.ocr or not page.text.strip()]
        job = {
            "task": "survey",
            "kind": document.kind,
            "name": document.name,
            "scanned": scanned,
            "budget_s": survey_budget(self.survey_timeout_s),
        }
        found: list[DrawnPage] = []
        through: int | None = None

        def on_message(message: dict[str, Any]) -> None:
            nonlocal through
            if message.get("t") == "drawn":
                found.extend(DrawnPage(*page) for page in message.get("pages", ()))
                if message.get("through") is not None:
                    through = int(message["through"])
            elif message.get("t") == "error":
                raise PagesFailed(str(message.get("reason", "failed")))

        try:
            await self._run(job, data, self.survey_timeout_s, on_message, owner)
        except PagesFailed as failure:
            if not failure.lasting:
                raise  # no worker could start: nothing learnt about the document
            result = Survey((), cut=str(failure))
        else:
            limit = f"its time ran out ({self.survey_timeout_s:g} s, documents.parse_timeout_s)"
            cut = "" if through is None else limit
            result = Survey(tuple(found), cut, through or 0)
        if result.cut:
            log.info(
                "pages surveyed in part",
                file=document.name,
                through=result.through,
                reason=result.cut,
            )
        self._surveys[document.sha256] = result
        return result

    async def render(
        self,
        document: ParsedDocument,
        data: bytes,
        wanted: list[tuple[int, int, int, str]],
        *,
        owner: str = "",
    ) -> dict[int, PageImage]:
        """Pages `(number, width, height, reason)` as images; a page over the size limit even
        when scaled down, or one that could not be rendered before, is missing from the answer.
        `owner`: the key asking, which waits for a parse worker in its own turn."""
        images: dict[int, PageImage] = {}
        missing = []
        for number, width, height, reason in wanted:
            place = (document.sha256, number, width, height)
            cached = self._images.get(place)
            if cached is not None:
                images[number] = cached
            elif place not in self._unrendered:
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
        answered: set[int] = set()

        def on_message(message: dict[str, Any]) -> None:
            kind = message.get("t")
            if kind == "image":
                answered.add(int(message["n"]))
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

        try:
            await self._run(job, data, self.render_timeout_s, on_message, owner)
        except PagesFailed as failure:
            # The page being drawn when the time ran out (or the worker died) is left out from
            # now on: the next request renders the others instead of failing on it again.
            stuck = next((page for page in missing if int(page[0]) not in answered), None)
            if failure.lasting and stuck is not None:
                number = int(stuck[0])
                self._unrendered[(document.sha256, number, *sizes[number])] = str(failure)
            raise
        return images

    async def _run(
        self, job: dict[str, Any], data: bytes, timeout_s: float, on_message: Any, owner: str
    ) -> None:
        def handle(message: dict[str, Any]) -> float | None:
            on_message(message)
            return None

        try:
            await self.pool.run(job, data, timeout_s, handle, owner)
        except WorkerTimeout:
            raise PagesFailed(f"took longer than {timeout_s:g} s") from None
        except WorkerCrashed as exc:
            raise PagesFailed(str(exc)) from None
        except WorkerUnavailable as exc:
            raise PagesFailed(str(exc), lasting=False) from None
