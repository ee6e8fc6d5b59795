"""Parsed documents in the object store every replica shares: the level under the local cache.

Entries are content-addressed, `parsed/v<FORMAT_VERSION>/<sha256[:2]>/<sha256>.<kind>.json`,
in the local cache's own format, so a document parsed by one replica is read, not parsed, by
the others. A new document asked on several replicas at once is parsed by the one that claims
its lease (`proxy/files/lease.py`); the others wait for its entry (or take over when the
holder stops renewing, e.g. because it died).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import obstore
import structlog

from proxy.documents.cache import FORMAT_VERSION, decode_entry, encode_entry
from proxy.documents.model import ParsedDocument
from proxy.files.lease import ObjectLeases
from proxy.files.objects import MISSING

if TYPE_CHECKING:
    from obstore.store import S3Store

log = structlog.get_logger(__name__)

POLL_S = 0.25
"""How often a replica waiting for another's parse looks for its entry."""
_INLINE_BYTES = 1 << 20


class SharedParseCache:
    """Get, put and parse-once of parsed documents in a shared object store."""

    def __init__(self, store: S3Store, leases: ObjectLeases) -> None:
        self.objects = store
        self.leases = leases

    @staticmethod
    def key(sha256: str, kind: str) -> str:
        return f"parsed/v{FORMAT_VERSION}/{sha256[:2]}/{sha256}.{kind}.json"

    async def load(self, sha256: str, kind: str) -> ParsedDocument | None:
        """The shared entry, if there is a valid one; a failing store is only a miss."""
        try:
            found = await obstore.get_async(self.objects, self.key(sha256, kind))
            data = bytes(await found.bytes_async())
        except MISSING:
            return None
        except Exception as error:
            log.warning("shared parse cache unreadable", error=str(error)[:200])
            return None
        try:
            if len(data) < _INLINE_BYTES:
                return decode_entry(data, sha256, kind)
            return await asyncio.to_thread(decode_entry, data, sha256, kind)
        except (ValueError, KeyError, TypeError) as error:
            log.warning("ignoring corrupt shared cache entry", sha256=sha256, error=repr(error))
            return None

    async def save(self, document: ParsedDocument) -> None:
        try:
            data = await asyncio.to_thread(encode_entry, document)
            await obstore.put_async(self.objects, self.key(document.sha256, document.kind), data)
        except Exception as error:  # the local cache still has it; other replicas parse it
            log.warning("could not share a parsed document", error=str(error)[:200])

    async def parse_once(
        self, sha256: str, kind: str, parse: Callable[[], Awaitable[ParsedDocument]]
    ) -> tuple[ParsedDocument, bool]:
        """The shared entry, or `parse()` run here when this replica claims the document
        (and its result shared); True when it was parsed here."""
        name = f"parse/{sha256}.{kind}"
        while True:
            found = await self.load(sha256, kind)
            if found is not None:
                return found, False
            try:
                etag = await self.leases.claim(name)
            except Exception as error:  # no lease to be had: parse here rather than fail
                log.warning("parse lease unavailable", error=str(error)[:200])
                return await parse(), True
            if etag is not None:
                async with self.leases.held(name, etag):
                    # Its holder may have shared it and let go between our look and our claim.
                    found = await self.load(sha256, kind)
                    if found is not None:
                        return found, False
                    document = await parse()
                    await self.save(document)
                return document, True
            await asyncio.sleep(POLL_S)
