"""The edges a request's stages talk to, created once per application."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .config import Settings
from .metrics import Metrics
from .upstream.client import UpstreamClient

if TYPE_CHECKING:
    from .documents.parser import DocumentParser
    from .files import FileStore
    from .formats import FormatRegistry
    from .guarding import GuardedTexts
    from .introspection import ModelIntrospection
    from .retrieval.retriever import Retriever
    from .stages.decide import TokenCache


@dataclass
class Services:
    """Shared resources: the upstream connection, the document edges, the caches."""

    settings: Settings
    upstream: UpstreamClient
    metrics: Metrics
    files: FileStore
    parser: DocumentParser
    tokens: ModelIntrospection
    guarded: GuardedTexts
    token_cache: TokenCache
    formats: FormatRegistry
    retriever_factory: Callable[[], Retriever] | None = field(repr=False, default=None)
    _retriever: Retriever | None = field(default=None, repr=False)
    _opening: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    async def retriever(self) -> Retriever:
        """The vector index, opened on first use: requests that never retrieve never load it.

        Opening imports chromadb (seconds) and may load a model: done in a thread, once.
        """
        if self._retriever is None:
            async with self._opening:
                if self._retriever is None:
                    assert self.retriever_factory is not None
                    self._retriever = await asyncio.to_thread(self.retriever_factory)
        opened: Retriever = self._retriever
        return opened
