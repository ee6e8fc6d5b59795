"""Who does a piece of work once for every replica: a lease with an expiry in the object store.

A claim is a create that fails when the key exists (If-None-Match: *): of replicas claiming at
once exactly one wins, by the store's own guarantee. The holder renews it by compare-and-swap
(If-Match) while it works; a holder that crashed stops renewing, its lease runs out, and the
next claimant replaces the expired lease by compare-and-swap too. Expiry compares wall
clocks: replicas' clocks must agree to well within `lease_s` (NTP does).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import obstore

from proxy.files.objects import CONFLICTS, MISSING
from proxy.tasks import cancel_and_wait

if TYPE_CHECKING:
    from obstore.store import S3Store


def expired(record: dict[str, Any], now: float) -> bool:
    return float(record.get("until", 0)) <= now


class ObjectLeases:
    """Claims on keys under `leases/` of one object store, held by `holder`."""

    def __init__(
        self,
        store: S3Store,
        holder: str,
        *,
        lease_s: float = 30.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.holder = holder
        self.lease_s = lease_s
        self.clock = clock

    def _record(self) -> bytes:
        return json.dumps({"holder": self.holder, "until": self.clock() + self.lease_s}).encode()

    async def claim(self, name: str) -> str | None:
        """The lease's ETag if we now hold it; None when another live holder has it."""
        key = f"leases/{name}"
        try:
            written = await obstore.put_async(self.store, key, self._record(), mode="create")
            return written["e_tag"]
        except CONFLICTS:
            pass
        try:
            found = await obstore.get_async(self.store, key)
        except MISSING:
            return None  # released just now: the caller looks for the result, then claims again
        record = json.loads(bytes(await found.bytes_async()))
        if not expired(record, self.clock()):
            return None
        try:
            mode: Any = {"e_tag": found.meta["e_tag"]}
            taken = await obstore.put_async(self.store, key, self._record(), mode=mode)
            return taken["e_tag"]
        except CONFLICTS:
            return None  # another replica took it over first

    async def release(self, name: str) -> None:
        with contextlib.suppress(*MISSING):
            await obstore.delete_async(self.store, f"leases/{name}")

    @contextlib.asynccontextmanager
    async def held(self, name: str, etag: str) -> AsyncIterator[None]:
        """Renew the claim every third of its time while the block runs; release it after."""

        async def renew() -> None:
            tag = etag
            while True:
                await asyncio.sleep(self.lease_s / 3)
                try:
                    mode: Any = {"e_tag": tag}
                    written = await obstore.put_async(
                        self.store, f"leases/{name}", self._record(), mode=mode
                    )
                    tag = written["e_tag"] or tag
                except CONFLICTS:
                    return  # taken over (we were too slow): the work finishes anyway
                except Exception:  # the store hiccuped: try again at the next turn
                    continue

        task = asyncio.create_task(renew())
        try:
            yield
        finally:
            await cancel_and_wait(task)
            with contextlib.suppress(Exception):
                await self.release(name)
