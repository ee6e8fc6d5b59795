"""The edges a request's stages talk to, created once per process (see proxy.wiring)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from proxy.config import Settings
from proxy.metrics import Metrics
from proxy.pipeline.decision_log import DecisionLog
from proxy.pipeline.inflight import BytesInFlight
from proxy.upstream.client import UpstreamClient
from proxy.upstream.routes import UpstreamRoutes

if TYPE_CHECKING:
    from proxy.documents.page_images import PageImages
    from proxy.documents.parser import DocumentParser
    from proxy.files.protocol import FileStore
    from proxy.formats import FormatRegistry
    from proxy.guard.texts import GuardedTexts
    from proxy.model_files import ModelFiles
    from proxy.responses.owners import Owners
    from proxy.retrieval.retriever import Retriever
    from proxy.retrieval.rewriter import QuestionRewriter
    from proxy.retrieval.translation import QueryTranslator
    from proxy.stores.service import VectorStores
    from proxy.upstream.abilities import AbilityIntrospection
    from proxy.upstream.introspection import ModelIntrospection
    from proxy.upstream.side_server import SideServer
    from proxy.upstream.spawn import LlamaServer
    from proxy.upstream.tokens import TokenCache
    from proxy.upstream.vision import VisionIntrospection


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
    vision: VisionIntrospection  # does the model see images, and what does one cost it
    page_images: PageImages  # drawn pages surveyed and rendered in the parse workers
    abilities: AbilityIntrospection  # is the model instruction-tuned; does it call tools
    decisions: DecisionLog = field(default_factory=DecisionLog)
    in_flight: BytesInFlight = field(default_factory=BytesInFlight)  # document bytes per key
    retriever_factory: Callable[[], Retriever] | None = field(repr=False, default=None)
    local_upstream: LlamaServer | None = field(default=None, repr=False)
    vector_stores: VectorStores | None = field(default=None, repr=False)
    # upstream.responses: native: who created each response and conversation id.
    owners: Owners | None = field(default=None, repr=False)
    translator: QueryTranslator | None = field(default=None, repr=False)
    # A follow-up's standalone question (retrieval.rewrite), and the server asked, if not the
    # upstream.
    rewriter: QuestionRewriter | None = field(default=None, repr=False)
    rewrite_server: SideServer | None = field(default=None, repr=False)
    # The model files the configuration needs (/healthz), and MiniLM's fetch at start-up.
    model_files: ModelFiles | None = field(default=None, repr=False)
    # files.backend: s3: the sweep of what failed uploads and deletes left in the bucket.
    file_sweep: asyncio.Task[None] | None = field(default=None, repr=False)
    _opening: asyncio.Task[Retriever] | None = field(default=None, repr=False)

    @functools.cached_property
    def routes(self) -> UpstreamRoutes:
        """The upstream routes a request may be forwarded to."""
        upstream = self.settings.upstream
        return UpstreamRoutes(upstream.allowed_routes, upstream.admin_routes)

    async def retriever(self) -> Retriever:
        """The vector index, opened on first use: requests that never retrieve never load it.

        Opening imports chromadb (seconds) and may load a model: done in a thread, once (an
        opening that failed is tried again by the next caller).
        """
        opening = self._opening
        if opening is None or (
            opening.done() and (opening.cancelled() or opening.exception() is not None)
        ):
            assert self.retriever_factory is not None
            opening = self._opening = asyncio.create_task(asyncio.to_thread(self.retriever_factory))
        # Shielded: a caller cancelled meanwhile (a client gone, a shutdown) must not drop an
        # index opened in the thread all the same, which would hold the store's lock for good.
        return await asyncio.shield(opening)

    async def aclose(self) -> None:
        """Stop the stores' indexing jobs and the parser workers, close the index (waiting for
        one being opened), stop a spawned llama-server and a detection of its kind."""
        await self.introspection.aclose()
        if self.file_sweep is not None:
            self.file_sweep.cancel()
            with contextlib.suppress(BaseException):
                await self.file_sweep
        if self.vector_stores is not None:
            await self.vector_stores.close()
        await self.parser.close()
        opening, self._opening = self._opening, None
        if opening is not None:
            with contextlib.suppress(Exception):
                retriever = await opening
                await retriever.close()
        if self.local_upstream is not None:
            await self.local_upstream.stop()
        if self.model_files is not None:
            await self.model_files.aclose()
