"""Guarded document text, computed once per document and remembered (the guard is pure)."""

from __future__ import annotations

import asyncio

from cachetools import LRUCache

from proxy.documents.model import ParsedDocument
from proxy.guard.neutralise import Guarded, neutralise

# Neutralising a long book takes a while: do it in a thread rather than stall the loop.
OFF_LOOP_CHARS = 50_000


class GuardedTexts:
    """Neutralised document texts by the document's sha256, least recently used leave first.

    Bounded by the characters held as well as by count: a few 5M-character books are plenty.
    """

    def __init__(
        self, *, redact_overrides: bool, size: int = 64, max_chars: int = 50_000_000
    ) -> None:
        self.redact_overrides = redact_overrides
        self.max_chars = max_chars
        self._cache: LRUCache[tuple[str, tuple[str, ...]], Guarded] = LRUCache(
            maxsize=max_chars, getsizeof=lambda guarded: max(1, len(guarded.text))
        )
        self._size = size

    @property
    def chars(self) -> int:
        """Characters of guarded text held now."""
        return int(self._cache.currsize)

    def guard(self, text: str, extra_tokens: tuple[str, ...] = ()) -> Guarded:
        return neutralise(text, extra_tokens=extra_tokens, redact_overrides=self.redact_overrides)

    async def document(
        self, document: ParsedDocument, extra_tokens: tuple[str, ...] = ()
    ) -> Guarded:
        key = (document.sha256, extra_tokens)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        text = document.text
        if len(text) > OFF_LOOP_CHARS:
            guarded = await asyncio.to_thread(self.guard, text, extra_tokens)
        else:
            guarded = self.guard(text, extra_tokens)
        if len(guarded.text) <= self.max_chars:  # a bigger one would not fit at all
            self._cache[key] = guarded
            while len(self._cache) > self._size:
                self._cache.popitem()
        return guarded
