"""The edges a request's stages talk to, created once per process (see proxy.wiring)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proxy.config import Settings
from proxy.metrics import Metrics
from proxy.pipeline.decision_log import DecisionLog
from proxy.upstream.client import UpstreamClient

if TYPE_CHECKING:
    from proxy.documents.parser import DocumentParser
    from proxy.files.protocol import FileStore
    from proxy.formats import FormatRegistry
    from proxy.guard.texts import GuardedTexts
    from proxy.retrieval.retriever import Retriever
    from proxy.stores.service import VectorStores
    from proxy.upstream.introspection import ModelIntrospection
    from proxy.upstream.spawn import LlamaServer
    from proxy.upstream.tokens import TokenCache


@dataclass
class Services:
    """Shared resources: the upstream connection, the document edges, the caches."""

    settings: Settings
    upstream: UpstreamClient
    metrics: Metrics
    files: FileStore
    parser: DocumentParser
    introspection: ModelIntrospection
    guarded: GuardedTexts
    token_cache: TokenCache
    formats: FormatRegistry
    decisions: DecisionLog = field(default_factory=DecisionLog)
    retriever_factory: Callable[[], Retriever] | None = field(repr=False, default=None)
    local_upstream: LlamaServer | None = field(default=None, repr=False)
    vector_stores: VectorStores | None = field(default=None, repr=False)
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

    async def aclose(self) -> None:
        """Stop the stores' indexing jobs and the parser workers, close the index, stop a
        spawned llama-server."""
        if self.vector_stores is not None:
            await self.vector_stores.close()
        await self.parser.close()
        if self._retriever is not None:
            await self._retriever.close()
            self._retriever = None
        if self.local_upstream is not None:
            await self.local_upstream.stop()
