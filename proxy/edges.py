"""Creating the shared edges of one proxy process from its settings."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .config import Settings
from .documents import DocumentParser, ParseLimits
from .files import FileStore
from .formats import FormatRegistry
from .tokens import load_encoding

if TYPE_CHECKING:
    from .retrieval.embeddings import Embedder
    from .retrieval.retriever import Retriever


def data_dir(settings: Settings) -> Path:
    path = settings.server.data_dir
    path.mkdir(parents=True, exist_ok=True)
    return path


def make_files(settings: Settings) -> FileStore:
    return FileStore(
        data_dir(settings) / "files", int(settings.documents.max_file_mb * 1024 * 1024)
    )


def make_parser(settings: Settings) -> DocumentParser:
    documents = settings.documents
    limits = ParseLimits(
        max_file_bytes=int(documents.max_file_mb * 1024 * 1024),
        max_pages=documents.max_pages,
        max_chars=documents.max_chars,
        timeout_s=documents.parse_timeout_s,
    )
    return DocumentParser(
        data_dir(settings) / "parsed",
        limits,
        documents.parse_workers,
        cache_max_bytes=int(documents.cache_max_mb * 1024 * 1024),
    )


def make_formats(settings: Settings) -> FormatRegistry:
    # Default: where `python -m proxy formats import` puts presets (<data_dir>/formats).
    presets = settings.formats.presets_dir or settings.server.data_dir / "formats"
    return FormatRegistry(user_dir=presets, inline=settings.formats.custom)


def make_embedder_from(settings: Settings) -> Embedder:
    # Imported here: chromadb and openai take ~2 s to import, and only retrieval needs them.
    from .retrieval.embeddings import make_embedder

    embeddings = settings.embeddings
    if embeddings.backend == "default":
        return make_embedder("default", batch_size=embeddings.batch_size)
    if not embeddings.base_url:
        from .config import ConfigError

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
    )


def make_retriever(settings: Settings) -> Retriever:
    # Everything that can fail comes before the index, which locks its directory.
    from .retrieval.index import VectorIndex
    from .retrieval.retriever import Retriever

    encoding = load_encoding("cl100k_base")
    embedder = make_embedder_from(settings)
    store = settings.vector_store
    if store.mode == "server":
        index = VectorIndex.server(store.host, store.port, embedder)
    else:
        index = VectorIndex.embedded(store.path or data_dir(settings) / "chroma", embedder)
    return Retriever(
        index=index,
        embedder=embedder,
        chunk_tokens=settings.retrieval.chunk_tokens,
        chunk_overlap=settings.retrieval.chunk_overlap,
        count_tokens=lambda text: len(encoding.encode_ordinary(text)),
    )
