"""Parsed text cached by the sha256 of the bytes: a small in-memory LRU over JSON files."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections import OrderedDict
from pathlib import Path

import structlog

from proxy.disk import DiskRoom
from proxy.documents.model import DocumentWarning, Page, ParsedDocument

log = structlog.get_logger(__name__)

FORMAT_VERSION = 6
"""2: units carry a location, a title and an OCR mark; documents a title and warnings.
3: tables in the one form of table_form (captions, merged cells on the grid, sheets in blocks).
4: text without line/paragraph separators, odd spaces, ligatures or soft hyphens.
5: a PDF page's title is its outline path (`Part II > 7. Tables`), not the last entry alone.
6: a plain-text book's chapter lines ("CHAPTER I.", "Глава 3") open units of their own."""


def encode_entry(document: ParsedDocument) -> bytes:
    """A parsed document as a cache entry (JSON), the same on disk and in the object store."""
    entry = {
        "v": FORMAT_VERSION,
        "sha256": document.sha256,
        "kind": document.kind,
        "library": document.library,
        "name": document.name,
        "title": document.title,
        "warnings": [[warning.code, warning.message] for warning in document.warnings],
        "pages": [
            [page.number, page.text, page.location, page.title, page.ocr] for page in document.pages
        ],
    }
    return json.dumps(entry, ensure_ascii=False).encode("utf-8")


def decode_entry(data: bytes, sha256: str, kind: str) -> ParsedDocument:
    """A cache entry back; ValueError (or KeyError, TypeError) when it is not one for this key."""
    entry = json.loads(data)
    if entry["v"] != FORMAT_VERSION or entry["sha256"] != sha256 or entry["kind"] != kind:
        raise ValueError("entry does not match its key")
    pages = tuple(
        Page(int(number), str(text), str(location), str(title), bool(ocr))
        for number, text, location, title, ocr in entry["pages"]
    )
    warnings = tuple(DocumentWarning(str(c), str(m)) for c, m in entry["warnings"])
    title = entry["title"]
    return ParsedDocument(
        entry["name"],
        sha256,
        kind,
        str(entry["library"]),
        pages,
        str(title) if title else None,
        warnings,
    )


class DocumentCache:
    """Entries are keyed by sha256 and kind; the name stored is whatever the first caller used."""

    def __init__(
        self,
        directory: Path,
        memory_entries: int = 32,
        max_bytes: int | None = None,
        disk: DiskRoom | None = None,
    ) -> None:
        self._directory = directory
        self._disk = disk  # no entry is written below its reserve
        self._memory: OrderedDict[tuple[str, str], ParsedDocument] = OrderedDict()
        self._memory_entries = memory_entries
        # Bounded by text held as well as by count: a few 5M-character books are plenty.
        self._memory_chars = 0
        self._max_memory_chars = 50_000_000
        self._max_bytes = max_bytes
        self._disk_bytes: int | None = None  # learnt by one scan, then kept up to date

    def recall(self, sha256: str, kind: str) -> ParsedDocument | None:
        """The in-memory entry, if any (event loop thread)."""
        key = (sha256, kind)
        document = self._memory.get(key)
        if document is not None:
            self._memory.move_to_end(key)
        return document

    def get(self, sha256: str, kind: str) -> ParsedDocument | None:
        """Memory, then disk; a disk hit is remembered."""
        document = self.recall(sha256, kind) or self.load(sha256, kind)
        if document is not None:
            self.remember(document)
        return document

    def remember(self, document: ParsedDocument) -> None:
        """Keep in memory (event loop thread); `store` writes the file (any thread)."""
        key = (document.sha256, document.kind)
        previous = self._memory.pop(key, None)
        if previous is not None:
            self._memory_chars -= previous.char_count
        self._memory[key] = document
        self._memory_chars += document.char_count
        while len(self._memory) > 1 and (
            len(self._memory) > self._memory_entries or self._memory_chars > self._max_memory_chars
        ):
            _, dropped = self._memory.popitem(last=False)
            self._memory_chars -= dropped.char_count

    def _path(self, sha256: str, kind: str) -> Path:
        return self._directory / sha256[:2] / f"{sha256}.{kind}.json"

    def load(self, sha256: str, kind: str) -> ParsedDocument | None:
        """The on-disk entry, if valid (any thread: touches no shared state)."""
        path = self._path(sha256, kind)
        try:
            return decode_entry(path.read_bytes(), sha256, kind)
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            # A torn or tampered entry is only a cache miss: the document is parsed again.
            log.warning("ignoring corrupt cache entry", path=str(path), error=repr(exc))
            return None
        finally:
            # The file's time is its last use: pruning removes the least recently used.
            with contextlib.suppress(OSError):
                os.utime(path)

    def store(self, document: ParsedDocument) -> None:
        path = self._path(document.sha256, document.kind)
        if self._disk is not None and self._disk.low():
            log.warning("cache entry not written: the data folder is nearly full", path=str(path))
            return
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(encode_entry(document))
                os.replace(temp, path)
            except BaseException:
                os.unlink(temp)
                raise
        except OSError as exc:
            log.warning("could not write cache entry", path=str(path), error=repr(exc))
            return
        self._account(path)

    def _entries(self) -> list[tuple[float, int, Path]]:
        entries = []
        for path in self._directory.glob("*/*.json"):
            with contextlib.suppress(OSError):
                stat = path.stat()
                entries.append((stat.st_mtime, stat.st_size, path))
        return entries

    def _account(self, path: Path) -> None:
        """Keep the directory under `max_bytes`, dropping the least recently used entries."""
        if self._max_bytes is None:
            return
        if self._disk_bytes is None:
            self._disk_bytes = sum(size for _, size, _ in self._entries())
        else:
            with contextlib.suppress(OSError):
                self._disk_bytes += path.stat().st_size
        if self._disk_bytes <= self._max_bytes:
            return
        entries = sorted(self._entries())
        total = sum(size for _, size, _ in entries)
        # Down to 90%, so that the next few entries do not each trigger a scan.
        for _, size, old in entries:
            if total <= self._max_bytes * 0.9 or old == path:
                break
            with contextlib.suppress(OSError):
                old.unlink()
                total -= size
        self._disk_bytes = total
