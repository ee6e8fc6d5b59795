"""The root of the settings: every section under its key, and a model's settings looked up."""

from __future__ import annotations

import fnmatch

from pydantic import Field, PrivateAttr

from proxy.config.base import Section
from proxy.config.documents import DocumentSettings, GuardSettings
from proxy.config.embeddings import EmbeddingSettings, VectorStoreSettings
from proxy.config.files import FileStoreSettings, ToolSearchSettings, VectorStoresSettings
from proxy.config.models import DEFAULT_MODEL_SETTINGS, FormatSettings, ModelSettings
from proxy.config.retrieval import RetrievalSettings
from proxy.config.server import ServerSettings
from proxy.config.upstream import UpstreamSettings
from proxy.config.vision import VisionSettings


class Settings(Section):
    """Everything the proxy can be told; see config.example.yaml."""

    _retired: list[str] = PrivateAttr(default_factory=list)

    @property
    def retired(self) -> list[str]:
        """A note for each removed key its sources set, which was ignored (`load_settings`)."""
        return list(self._retired)

    server: ServerSettings = Field(
        default_factory=ServerSettings,
        description=(
            "The listening socket, proxy keys, body and connection limits, logs and data directory."
        ),
    )
    upstream: UpstreamSettings = Field(
        default_factory=UpstreamSettings,
        description="The OpenAI-compatible server behind the proxy, how it is reached and probed.",
    )
    documents: DocumentSettings = Field(
        default_factory=DocumentSettings,
        description="How documents are referenced, parsed, bounded and cached.",
    )
    models: dict[str, ModelSettings] = Field(
        default_factory=dict,
        description=(
            'Per model name (exact, or a glob like "llama-*"; an exact name first, then the '
            "first matching glob)."
        ),
    )
    embeddings: EmbeddingSettings = Field(
        default_factory=EmbeddingSettings,
        description="The embedding model that indexes passages for retrieval.",
    )
    vector_store: VectorStoreSettings = Field(
        default_factory=VectorStoreSettings,
        description="The Chroma store holding the passage index.",
    )
    retrieval: RetrievalSettings = Field(
        default_factory=RetrievalSettings,
        description="How passages are chunked, ranked and cited.",
    )
    vision: VisionSettings = Field(
        default_factory=VisionSettings,
        description=(
            "Drawn pages (charts, figures, scans) of documents as images for models that see "
            "(docs/vision.md)."
        ),
    )
    guard: GuardSettings = Field(
        default_factory=GuardSettings,
        description="Prompt-injection guarding of document text.",
    )
    formats: FormatSettings = Field(
        default_factory=FormatSettings,
        description="Instruct formats for models served through /v1/completions (adapter: text).",
    )
    files: FileStoreSettings = Field(
        default_factory=FileStoreSettings,
        description="Where Files API uploads live (docs/replicas.md).",
    )
    vector_stores: VectorStoresSettings = Field(
        default_factory=VectorStoresSettings,
        description=(
            "OpenAI's /v1/vector_stores and the Responses file_search tool "
            "(docs/vector-stores.md); records under <data_dir>/vector_stores, or in the bucket "
            "with files.backend: s3."
        ),
    )
    tool_search: ToolSearchSettings = Field(
        default_factory=ToolSearchSettings,
        description=(
            "Searches the model decides on: for a Responses file_search tool (or enrich.search:"
            " tool) and a server that parses the model's tool calls, the proxy offers the model"
            " a search function and runs its queries in a loop (docs/vector-stores.md)."
        ),
    )

    def model_settings(self, model: str | None) -> ModelSettings:
        """The settings for `model`: an exact key first, then the first matching glob."""
        if model is not None:
            if model in self.models:
                return self.models[model]
            for pattern, settings in self.models.items():
                if fnmatch.fnmatchcase(model, pattern):
                    return settings
        return DEFAULT_MODEL_SETTINGS
