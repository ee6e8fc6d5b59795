"""server: the listening socket, proxy keys, body and connection limits, logs, data_dir."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator, model_validator

from proxy.config.base import Section, origin_of

# Shorter proxy keys are refused: an empty one (an unset environment variable) would otherwise
# look like a key, and a short one can be guessed.
MIN_KEY_CHARS = 16


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
