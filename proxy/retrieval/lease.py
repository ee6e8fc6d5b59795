"""Who indexes a document: a lease with an expiry, kept in the vector store beside its records.

Proxies sharing a Chroma server would otherwise each embed the same new document. Chroma has
no compare-and-set, so a claim is written, then read back after a short pause: of two
proxies claiming at once, the one whose write landed last sees its own name and goes on, the
other sees a foreign live lease and stands back. The holder renews the lease while it works; a
holder that crashed stops renewing, its lease expires, and the next proxy takes over (resuming
from the passages already stored).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from proxy.retrieval.index import VectorIndex
from proxy.retrieval.vectors import manifest_position

LEASE_S = 60.0
"""How long a claim holds without renewal: several embedding batches on a busy CPU."""


def lease_id(doc_sha256: str) -> str:
    return f"lease:{doc_sha256}"


def may_claim(record: Mapping[str, Any] | None, holder: str, now: float) -> bool:
    """A document may be claimed when nobody holds it, we hold it, or the holder's time ran out."""
    if not record:
        return True
    return str(record.get("holder")) == holder or float(str(record.get("until", 0))) <= now


class Leases:
    """Claims, renewals and releases of documents' indexing leases in one vector store."""

    def __init__(
        self,
        index: VectorIndex,
        holder: str,
        *,
        lease_s: float = LEASE_S,
        settle_s: float = 0.2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.index = index
        self.holder = holder
        self.lease_s = lease_s
        self.settle_s = settle_s
        self.clock = clock

    async def claim(self, doc_sha256: str) -> bool:
        """Take or renew the lease; False when another live holder has it."""
        if not may_claim(await self.holder_of(doc_sha256), self.holder, self.clock()):
            return False
        await self._write(doc_sha256, self.clock() + self.lease_s)
        if self.settle_s:
            await asyncio.sleep(self.settle_s)
        record = await self.holder_of(doc_sha256)
        return record is not None and str(record.get("holder")) == self.holder

    async def renew(self, doc_sha256: str) -> bool:
        """Extend our lease; False if it was taken over meanwhile (we then stop)."""
        record = await self.holder_of(doc_sha256)
        if (
            record is not None
            and str(record.get("holder")) != self.holder
            and float(str(record.get("until", 0))) > self.clock()
        ):
            return False
        await self._write(doc_sha256, self.clock() + self.lease_s)
        return True

    async def release(self, doc_sha256: str) -> None:
        record = await self.holder_of(doc_sha256)
        if record is not None and str(record.get("holder")) == self.holder:
            key = lease_id(doc_sha256)
            await self.index.call(lambda: self.index.manifest().delete(ids=[key]))

    async def holder_of(self, doc_sha256: str) -> Mapping[str, Any] | None:
        key = lease_id(doc_sha256)
        found = await self.index.call(
            lambda: self.index.manifest().get(ids=[key], include=["metadatas"])
        )
        metadatas = found["metadatas"] or []
        return metadatas[0] if found["ids"] and metadatas else None

    async def _write(self, doc_sha256: str, until: float) -> None:
        key = lease_id(doc_sha256)
        position = np.array([[manifest_position(key)]], dtype=np.float32)
        meta: Any = {"holder": self.holder, "until": until}
        await self.index.call(
            lambda: self.index.manifest().upsert(ids=[key], embeddings=position, metadatas=[meta])
        )
