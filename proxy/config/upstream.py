"""upstream: the server behind the proxy, its kind, credentials, timeouts and routes."""

from __future__ import annotations

import base64
from typing import Annotated, Literal

import yarl
from pydantic import Field, PrivateAttr, field_validator, model_validator

from proxy.config.base import OneOf, Section
from proxy.config.spawn import SpawnSettings
from proxy.server_kinds import counting_kinds, kind_names


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
    responses_chains: bool = Field(
        True,
        description=(
            "native: keep each turn's questions, the answer's ends and its file ids with the "
            "response and conversation ids (data_dir or the bucket), so that a turn chained by "
            "previous_response_id or conversation is searched in its conversation; false: keep "
            "only who owns each id (no conversation text at rest)."
        ),
    )
    responses_keep_days: float = Field(
        30,
        ge=0,
        description=(
            "native: a response id's record (its owner and chain) is forgotten this many days "
            "after the response was created, as OpenAI keeps responses 30 days: the id is then "
            "a 404 like an unknown one. Conversations are kept until deleted, as OpenAI's are. "
            "0: responses too."
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
