"""DocumentParser: detect, parse out of process, cache; the one entry point for documents."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path, PurePath
from typing import TYPE_CHECKING

import structlog

from proxy.disk import DiskRoom
from proxy.documents.cache import DocumentCache
from proxy.documents.collect import PageCollector
from proxy.documents.detect import declared_kind, detect
from proxy.documents.failure import ExtractError
from proxy.documents.formats import LIBRARY, PAGED_KINDS, TEXT_KINDS, Kind
from proxy.documents.job import Job
from proxy.documents.limits import ParseLimits
from proxy.documents.model import DocumentWarning, Page, ParsedDocument, StatusSink
from proxy.documents.ocr import ENABLE_HINT, OcrStatus
from proxy.documents.pool import (
    WorkerCrashed,
    WorkerPool,
    WorkerTimeout,
    WorkerUnavailable,
)
from proxy.documents.readers.plain import text_sections
from proxy.errors import DocumentError, PayloadTooLarge, ProxyError

if TYPE_CHECKING:
    from proxy.documents.shared import SharedParseCache

log = structlog.get_logger(__name__)

_INLINE_BYTES = 4 * 1024 * 1024
_KINDS_REMEMBERED = 4096
_SCANNABLE = frozenset({Kind.PDF, Kind.XPS, Kind.CBZ, Kind.IMAGE})
_OCR_OFF = OcrStatus(None, "not configured")


def _quiet(_: str) -> None:
    pass


def parser_unavailable() -> ProxyError:
    """No parser worker could be started (a broken installation, not a bad document)."""
    return ProxyError(
        "the document parser is unavailable: its worker process could not start; ask again, and"
        " if this repeats, the proxy's log says why",
        status=503,
        type="server_error",
        code="parser_unavailable",
    )


class DocumentParser:
    """Turns document bytes into pages of text; one instance per event loop."""

    def __init__(
        self,
        cache_dir: Path,
        limits: ParseLimits | None = None,
        workers: int = 2,
        *,
        worker_argv: Sequence[str] | None = None,
        cache_max_bytes: int | None = None,
        ocr: OcrStatus = _OCR_OFF,
        recycle_rss_bytes: int | None = None,
        per_key: int | None = None,
        shared: SharedParseCache | None = None,
        count: Callable[[str], None] = _quiet,
        disk: DiskRoom | None = None,
    ) -> None:
        self.limits = limits or ParseLimits()
        self.ocr = ocr
        self.cache = DocumentCache(cache_dir, max_bytes=cache_max_bytes, disk=disk)
        # The second level, shared with other replicas through the object store (files: s3).
        self.shared = shared
        self.count = count  # where a document's text came from: parsed | cache | shared
        recycle = {} if recycle_rss_bytes is None else {"recycle_rss_bytes": recycle_rss_bytes}
        self.pool = WorkerPool(workers, argv=worker_argv, per_key=per_key, **recycle)
        self._inflight: dict[str, asyncio.Future[ParsedDocument]] = {}
        self._kinds: dict[tuple[str, str, Kind | None], Kind | tuple[str, str]] = {}

    async def start(self) -> None:
        """Optional warm-up: spawn the worker processes before the first parse."""
        await self.pool.start()

    async def close(self) -> None:
        await self.pool.close()

    async def parse(
        self, name: str, data: bytes, status: StatusSink | None = None, *, owner: str = ""
    ) -> ParsedDocument:
        """Parse `data` (named `name` for messages); raise DocumentError or PayloadTooLarge.
        `owner`: the key asking, which gets its fair share of the parser processes."""
        emit = status or _quiet
        limit = self.limits.max_file_bytes
        if len(data) > limit:
            raise PayloadTooLarge(
                f"{name}: is {len(data)} bytes, over the limit of {limit} bytes per document",
                code="document_too_large",
            )
        sha256 = await self._digest(data)
        kind = await self._kind(name, data, sha256)
        if kind == Kind.IMAGE and not self.ocr.on:
            raise DocumentError(
                name,
                "is an image, not a document; send it as an image_url part for a vision model,"
                f" or have its text read: OCR is off ({self.ocr.reason}); to turn it on,"
                f" {ENABLE_HINT}",
                code="image_not_document",
            )
        declared = declared_kind(name)
        if declared is not None and declared != kind:
            # Clients label by habit (every attachment "application/pdf", any name): the
            # bytes decide, and the disagreement is worth a line when a parse looks odd.
            log.info(
                "content differs from the declared type",
                file=name,
                declared=str(declared),
                parsed_as=str(kind),
            )
        cached = await self._cached(sha256, kind)
        if cached is not None:
            self.count("cache")
            self._check_size(name, cached)
            return cached if cached.name == name else replace(cached, name=name)
        # Many clients sending the same new document at once parse it once.
        while (pending := self._inflight.get(sha256)) is not None:
            try:
                document = await asyncio.shield(pending)
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if pending.cancelled() and not (current and current.cancelling()):
                    continue  # the request parsing it went away: parse it for this one
                raise
            return document if document.name == name else replace(document, name=name)
        future: asyncio.Future[ParsedDocument] = asyncio.get_running_loop().create_future()
        self._inflight[sha256] = future
        try:
            document = await self._parse_or_share(name, kind, data, sha256, emit, owner)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved here, so an unawaited future does not warn
            raise
        else:
            future.set_result(document)
            return document
        finally:
            self._inflight.pop(sha256, None)
            # The future holds the error, whose traceback holds this frame: without this the
            # cycle (and the document's bytes with it) would wait for the garbage collector.
            del future

    async def _parse_or_share(
        self, name: str, kind: Kind, data: bytes, sha256: str, emit: StatusSink, owner: str
    ) -> ParsedDocument:
        """Parsed here, or by another replica (its entry in the shared cache, waited for when
        it is parsing the same document right now)."""
        if self.shared is None:
            return await self._parse_new(name, kind, data, sha256, emit, owner)
        document, parsed_here = await self.shared.parse_once(
            sha256, kind, lambda: self._parse_new(name, kind, data, sha256, emit, owner)
        )
        if not parsed_here:
            self.count("shared")
            self._check_size(name, document)
            self.cache.remember(document)
            await asyncio.to_thread(self.cache.store, document)
        return document if document.name == name else replace(document, name=name)

    async def _parse_new(
        self, name: str, kind: Kind, data: bytes, sha256: str, emit: StatusSink, owner: str
    ) -> ParsedDocument:
        started = time.perf_counter()
        library = LIBRARY[kind]
        emit(f"Loading parser for {name}...")
        collector = PageCollector(
            name, library, self.limits.max_chars, emit, self.limits.ocr_page_s
        )
        if kind in TEXT_KINDS:
            pages = await self._parse_text(name, kind, data, collector)
        else:
            pages = await self._parse_in_worker(name, kind, data, collector, owner)
        document = ParsedDocument(
            name,
            sha256,
            kind,
            library,
            tuple(pages),
            collector.title,
            tuple(collector.warnings),
        )
        self._check_size(name, document)
        if not any(page.text.strip() for page in document.pages):
            raise DocumentError(name, f"has no extractable text{self._hint(kind)}", code="no_text")
        self.count("parsed")
        self.cache.remember(document)
        await asyncio.to_thread(self.cache.store, document)
        log.info(
            "document parsed",
            file=name,
            kind=str(kind),
            pages=len(document.pages),
            chars=document.char_count,
            seconds=round(time.perf_counter() - started, 3),
        )
        return document

    async def kind_of(self, name: str, data: bytes) -> Kind:
        """The kind `parse` would take `data` for (DocumentError when it takes none)."""
        return await self._kind(name, data, await self._digest(data))

    async def _digest(self, data: bytes) -> str:
        if len(data) < _INLINE_BYTES:
            return hashlib.sha256(data).hexdigest()
        # hashlib releases the GIL: big inputs are hashed without holding up the loop.
        return (await asyncio.to_thread(hashlib.sha256, data)).hexdigest()

    async def _kind(self, name: str, data: bytes, sha256: str) -> Kind:
        """Detected once per bytes and name (the extension counts), in a thread: telling a
        container's format lists its entries, which is not for the event loop. The outcome,
        a refusal included, is remembered, so a document sent again (or named 20 times in one
        request) is not detected again."""
        key = (sha256, PurePath(name).suffix.lower(), declared_kind(name))
        known = self._kinds.get(key)
        if known is None:
            try:
                known = await asyncio.to_thread(detect, name, data)
            except DocumentError as error:
                # The reason only: the error's traceback would keep the bytes alive.
                known = (error.reason, error.code or "invalid_document")
            self._kinds[key] = known
            while len(self._kinds) > _KINDS_REMEMBERED:
                del self._kinds[next(iter(self._kinds))]
        if isinstance(known, tuple):
            reason, code = known
            raise DocumentError(name, reason, code=code)
        return known

    async def _cached(self, sha256: str, kind: Kind) -> ParsedDocument | None:
        """The cached document, if any."""
        document = self.cache.recall(sha256, kind)
        if document is None:
            # Reading and decoding an entry of up to max_chars is kept off the loop too.
            document = await asyncio.to_thread(self.cache.load, sha256, kind)
            if document is not None:
                self.cache.remember(document)
        return document

    def _hint(self, kind: Kind) -> str:
        if kind not in _SCANNABLE:
            return ""
        if self.ocr.on:
            return "; it may be a scanned document, and OCR found no text on its pages either"
        return (
            "; it may be a scanned document without a text layer. Reading scans (OCR) is off"
            f" ({self.ocr.reason}): to turn it on, {ENABLE_HINT}"
        )

    def _check_size(self, name: str, document: ParsedDocument) -> None:
        # Also applies to cache hits: the limits may be lower than when the entry was made.
        # Characters first: text formats have pages only because the parser cuts them.
        if document.char_count > self.limits.max_chars:
            raise self._too_much_text(name)
        # Reflowable formats have as many sections as they have headings: their units are
        # merged down to max_pages instead, and max_chars bounds them.
        if document.kind in PAGED_KINDS and len(document.pages) > self.limits.max_pages:
            raise DocumentError(
                name,
                f"has {len(document.pages)} pages, more than the limit of"
                f" {self.limits.max_pages} pages",
                code="too_many_pages",
            )

    def _too_much_text(self, name: str) -> DocumentError:
        return DocumentError(
            name,
            f"has more than {self.limits.max_chars} characters of text, over the limit",
            code="too_much_text",
        )

    async def _parse_text(
        self, name: str, kind: Kind, data: bytes, collector: PageCollector
    ) -> list[Page]:
        # Decoding text runs no native parser that could hang or crash, and is linear in
        # the (already size-limited) input: a thread is safe and skips the pool hop.
        # No encoding spends more than 4 bytes on a character: refuse before decoding.
        if len(data) > 4 * self.limits.max_chars:
            raise self._too_much_text(name)
        collector.on_message({"t": "ack"})
        job = Job(
            kind,
            name,
            max_pages=self.limits.max_pages,
            max_chars=self.limits.max_chars,
            max_rows=self.limits.max_rows,
            max_columns=self.limits.max_columns,
            on_warning=lambda code, message: collector.warnings.append(
                DocumentWarning(code, message)
            ),
        )
        titles: list[str] = []
        job.on_title = titles.append
        try:
            # asyncio.timeout, not wait_for: Python 3.11's wait_for loses a cancellation that
            # lands as the thread finishes, and a stopping job would then carry on.
            async with asyncio.timeout(self.limits.timeout_s):
                sections = await asyncio.to_thread(text_sections, kind, name, data, job)
        except ExtractError as exc:
            raise DocumentError(name, exc.reason, code=exc.code) from None
        except TimeoutError:
            raise self._timeout(name) from None
        collector.title = titles[0] if titles else None
        collector.on_message({"t": "count", "n": len(sections)})
        collector.add(
            [
                Page(number, section.text, section.location, section.title)
                for number, section in enumerate(sections, start=1)
            ]
        )
        return collector.finish()

    async def _parse_in_worker(
        self, name: str, kind: Kind, data: bytes, collector: PageCollector, owner: str
    ) -> list[Page]:
        ocr = self.ocr.options
        job = {
            "kind": str(kind),
            "name": name,
            "max_pages": self.limits.max_pages,
            "max_chars": self.limits.max_chars,
            "max_rows": self.limits.max_rows,
            "max_columns": self.limits.max_columns,
            "tables": self.limits.pdf_tables,
            "ocr": None
            if ocr is None
            else {
                "languages": list(ocr.languages),
                "dpi": ocr.dpi,
                "max_pages": ocr.max_pages,
                "tessdata": ocr.tessdata,
            },
        }
        try:
            await self.pool.run(job, data, self.limits.timeout_s, collector.on_message, owner)
        except WorkerTimeout:
            raise self._timeout(name) from None
        except WorkerUnavailable as exc:
            log.error("document parser unavailable", file=name, error=str(exc))
            raise parser_unavailable() from None
        except WorkerCrashed as exc:
            raise DocumentError(
                name,
                f"crashed the parser (exit code {exc.returncode}); the file may be corrupt",
                code="parser_crashed",
            ) from None
        return collector.finish()

    def _timeout(self, name: str) -> DocumentError:
        return DocumentError(
            name,
            f"took longer than the limit of {self.limits.timeout_s:g} seconds to parse",
            code="parse_timeout",
        )
