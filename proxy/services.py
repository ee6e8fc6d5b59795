"""The edges a request's stages talk to, created once per application."""

from __future__ import annotations

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
    from .retrieval.retriever import Retriever
    from .stages.decide import TokenCache
    from .tokens import ModelIntrospection


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
    retriever_factory: object = field(repr=False, default=None)
    _retriever: Retriever | None = field(default=None, repr=False)

    @property
    def retriever(self) -> Retriever:
        """The vector index, opened on first use: requests that never retrieve never load it."""
        if self._retriever is None:
            assert callable(self.retriever_factory)
            self._retriever = self.retriever_factory()
        return self._retriever
