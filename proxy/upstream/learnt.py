"""What is learnt about each model from the upstream: one probe at a time, kept while sure."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from cachetools import TTLCache

T = TypeVar("T")


class Learnt(Generic[T]):
    """Facts per model, learnt by `learn` and kept for `ttl_s` when `kept(fact)`: a fact that
    is unknown for want of an answer is asked again next time. Requests meanwhile wait for the
    one probe under way instead of each making their own."""

    def __init__(self, ttl_s: float, kept: Callable[[T], bool]) -> None:
        self._facts: TTLCache[str, T] = TTLCache(maxsize=256, ttl=ttl_s, timer=time.monotonic)
        self._kept = kept
        self._lock = asyncio.Lock()

    async def get(self, key: str, learn: Callable[[], Awaitable[T]]) -> tuple[T, bool]:
        """The fact for `key`, and whether it was learnt by this call (False: remembered)."""
        found = self._facts.get(key)
        if found is not None:
            return found, False
        async with self._lock:  # one probe per model at a time
            found = self._facts.get(key)
            if found is not None:
                return found, False
            found = await learn()
            if self._kept(found):
                self._facts[key] = found
            return found, True
