"""The settings, one module per section; every public name is importable from here."""

from proxy.config.base import DEFAULT_PORTS, OneOf, Section, origin_of, without_credentials
from proxy.config.documents import DocumentSettings, GuardSettings, OcrSettings
from proxy.config.embeddings import EmbeddingSettings, RerankSettings, VectorStoreSettings
from proxy.config.files import FileStoreSettings, ToolSearchSettings, VectorStoresSettings
from proxy.config.loading import (
    ENV_PREFIX,
    RETIRED_KEYS,
    ConfigError,
    known_keys,
    load_settings,
    problem_lines,
    without_retired,
)
from proxy.config.models import DEFAULT_MODEL_SETTINGS, FormatSettings, ModelSettings, Projector
from proxy.config.options import (
    CitationStyle,
    EnrichFields,
    ImageDetail,
    PromptShape,
    RequestOption,
    SearchMode,
    request_options,
)
from proxy.config.retrieval import HistorySettings, RetrievalSettings, RewriteSettings
from proxy.config.server import HOST_NAME, MIN_KEY_CHARS, ApiKey, ServerSettings
from proxy.config.settings import Settings
from proxy.config.spawn import SpawnSettings
from proxy.config.upstream import (
    OllamaSettings,
    TokenizerSetting,
    UpstreamKind,
    UpstreamKindSetting,
    UpstreamSettings,
)
from proxy.config.vision import VisionSettings

__all__ = [
    "DEFAULT_MODEL_SETTINGS",
    "DEFAULT_PORTS",
    "ENV_PREFIX",
    "HOST_NAME",
    "MIN_KEY_CHARS",
    "RETIRED_KEYS",
    "ApiKey",
    "CitationStyle",
    "ConfigError",
    "DocumentSettings",
    "EmbeddingSettings",
    "EnrichFields",
    "FileStoreSettings",
    "FormatSettings",
    "GuardSettings",
    "HistorySettings",
    "ImageDetail",
    "ModelSettings",
    "OcrSettings",
    "OllamaSettings",
    "OneOf",
    "Projector",
    "PromptShape",
    "RequestOption",
    "RerankSettings",
    "RetrievalSettings",
    "RewriteSettings",
    "SearchMode",
    "Section",
    "ServerSettings",
    "Settings",
    "SpawnSettings",
    "TokenizerSetting",
    "ToolSearchSettings",
    "UpstreamKind",
    "UpstreamKindSetting",
    "UpstreamSettings",
    "VectorStoreSettings",
    "VectorStoresSettings",
    "VisionSettings",
    "known_keys",
    "load_settings",
    "origin_of",
    "problem_lines",
    "request_options",
    "without_credentials",
    "without_retired",
]
