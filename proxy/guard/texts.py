"""Guarded document text, computed once per document and remembered (the guard is pure)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict

from proxy.documents.model import ParsedDocument
from proxy.guard.neutralise import Guarded, neutralise

# Neutralising a long book takes a while: do it in a thread rather than stall the loop.
OFF_LOOP_CHARS = 50_000


class GuardedTexts:
    """An LRU of neutralised document texts, keyed by the document's sha256."""

    def __init__(
        self, *, redact_overrides: bool, size: int = 64, max_chars: int = 50_000_000
    ) -> None:
        self.redact_overrides = redact_overrides
        self.size = size
        # Bounded by text held as well as by count: a few 5M-character books are plenty.
        self.max_chars = max_chars
        self._chars = 0
        self._cache: OrderedDict[tuple[str, tuple[str, ...]], Guarded] = OrderedDict()

    def guard(self, text: str, extra_tokens: tuple[str, ...] = ()) -> Guarded:
        return neutralise(text, extra_tokens=extra_tokens, redact_overrides=self.redact_overrides)

    async def document(
        self, document: ParsedDocument, extra_tokens: tuple[str, ...] = ()
    ) -> Guarded:
        key = (document.sha256, extra_tokens)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached
        text = document.text
        if len(text) > OFF_LOOP_CHARS:
            guarded = await asyncio.to_thread(self.guard, text, extra_tokens)
        else:
            guarded = self.guard(text, extra_tokens)
        self._cache[key] = guarded
        self._chars += len(guarded.text)
        while len(self._cache) > 1 and (
            len(self._cache) > self.size or self._chars > self.max_chars
        ):
            _, dropped = self._cache.popitem(last=False)
            self._chars -= len(dropped.text)
        return guarded
