"""Each document's passages and their lexical index, made once and kept on disk by sha256."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog
from cachetools import LRUCache

from proxy.disk import DiskRoom
from proxy.documents.model import ParsedDocument
from proxy.retrieval.chunking import Chunk
from proxy.retrieval.lexical import LexicalIndex
from proxy.retrieval.sentence_windows import document_text

log = structlog.get_logger(__name__)

KEPT_IN_MEMORY = 16
"""Documents whose passages stay in memory: a 352-page book's take ~1.5 MB."""


@dataclass(frozen=True)
class DocumentPassages:
    """A document's passages (index i is chunk i) and BM25 over them."""

    sha256: str
    name: str
    chunks: list[Chunk]
    lexical: LexicalIndex
    fresh: bool = False  # made now, not yet on disk

    @functools.cached_property
    def text(self) -> str:
        """The document's text as its passages hold it, at their offsets (for windows)."""
        return document_text(self.chunks)

    def around(self, index: int, before: int = 1, after: int = 1) -> Chunk:
        """Passage `index` joined with its neighbours, shared text once."""
        first = max(0, index - before)
        last = min(len(self.chunks) - 1, index + after)
        merged = self.chunks[first]
        for chunk in self.chunks[first + 1 : last + 1]:
            shared = merged.end - chunk.start
            tail = chunk.text[shared:] if shared > 0 else "\n" + chunk.text
            merged = dataclasses.replace(
                merged, text=merged.text + tail, page_end=chunk.page_end, end=chunk.end
            )
        return dataclasses.replace(merged, index=index)


class PassagesMissing(LookupError):
    """A document given by reference only (no pages) whose passages are not stored."""


class PassageStore:
    """Chunks and lexical indexes in `<root>/<sha256>/<settings>/`, the recent ones in memory.

    A document's passages depend on the chunking settings, so each set of settings has its own
    folder: a changed `chunk_tokens` makes new passages and leaves the old ones unread.
    """

    def __init__(
        self,
        root: Path | None,
        settings: str,
        chunker: Callable[[ParsedDocument], list[Chunk]],
        disk: DiskRoom | None = None,
    ) -> None:
        self.root = root
        self.disk = disk  # passages are not written below its reserve (made again when needed)
        self.settings = settings
        self._folder = hashlib.sha256(settings.encode()).hexdigest()[:16]
        self._chunker = chunker
        self._memory: LRUCache[str, DocumentPassages] = LRUCache(maxsize=KEPT_IN_MEMORY)
        self._building: dict[str, asyncio.Future[DocumentPassages]] = {}
        self._saving: set[asyncio.Future[None]] = set()

    async def open(self, doc: ParsedDocument) -> DocumentPassages:
        """The document's passages: from memory, from disk, or made now (once per document)."""
        found = self._memory.get(doc.sha256)
        if found is not None:
            return found
        pending = self._building.get(doc.sha256)
        if pending is None:
            pending = asyncio.ensure_future(asyncio.to_thread(self._load_or_build, doc))
            pending.add_done_callback(self._save_later)
            self._building[doc.sha256] = pending
            try:
                passages = await asyncio.shield(pending)
            finally:
                self._building.pop(doc.sha256, None)
            self._memory[doc.sha256] = passages
            return passages
        return await asyncio.shield(pending)

    def _path(self, sha256: str) -> Path | None:
        return None if self.root is None else self.root / sha256 / self._folder

    def _load_or_build(self, doc: ParsedDocument) -> DocumentPassages:
        path = self._path(doc.sha256)
        if path is not None:
            loaded = self._load(doc, path)
            if loaded is not None:
                return loaded
        if not doc.pages:
            # A reference to a document indexed before (a vector store's file): its passages
            # must be read, never made from nothing (that would store an empty document).
            raise PassagesMissing(doc.sha256)
        chunks = self._chunker(doc)
        lexical = LexicalIndex.build([chunk.searched for chunk in chunks])
        return DocumentPassages(doc.sha256, doc.name, chunks, lexical, fresh=True)

    def _save_later(self, done: asyncio.Future[DocumentPassages]) -> None:
        """Write new passages to disk after the request that made them has them."""
        if done.cancelled() or done.exception() is not None:
            return
        passages = done.result()
        path = self._path(passages.sha256)
        if self.disk is not None and self.disk.low():
            log.warning("passages not written: the data folder is nearly full", file=passages.name)
            return
        if path is not None and passages.fresh:
            task = asyncio.ensure_future(asyncio.to_thread(self._save, passages, path))
            self._saving.add(task)
            task.add_done_callback(self._saving.discard)

    async def flush(self) -> None:
        """Wait for passages still being written (at shutdown, in tests)."""
        while self._saving:
            await asyncio.gather(*self._saving, return_exceptions=True)

    @staticmethod
    def _load(doc: ParsedDocument, path: Path) -> DocumentPassages | None:
        try:
            rows = json.loads((path / "chunks.json").read_text())
            chunks = [Chunk(**{**row, "filename": doc.name}) for row in rows]
        except (OSError, ValueError, TypeError):
            return None
        lexical = LexicalIndex.load(path / "bm25")
        if lexical is None or lexical.size != len(chunks):
            # Made again from the passages (an index saved by an earlier version, or damaged):
            # they are what it is made of, so a document given by reference is searchable too.
            lexical = LexicalIndex.build([chunk.searched for chunk in chunks])
            return DocumentPassages(doc.sha256, doc.name, chunks, lexical, fresh=True)
        return DocumentPassages(doc.sha256, doc.name, chunks, lexical)

    def _save(self, passages: DocumentPassages, path: Path) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
            passages.lexical.save(path / "bm25")
            rows = [dataclasses.asdict(chunk) for chunk in passages.chunks]
            partial = path / "chunks.json.partial"
            partial.write_text(json.dumps(rows, ensure_ascii=False))
            partial.replace(path / "chunks.json")  # the chunks last: their presence means complete
        except OSError as error:
            # Made again from the document when next needed; a half-written index is never read
            # (without chunks.json it is not loaded, and a damaged one is rebuilt).
            log.warning("passages not written", file=passages.name, error=str(error)[:200])
            (path / "chunks.json.partial").unlink(missing_ok=True)
