"""files, vector_stores, tool_search: uploads, OpenAI's vector stores, the model's own searches."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from proxy.config.base import Section


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
            " removed at start and then every this many minutes, by one process of all the"
            " replicas per interval; 0 = never. See docs/replicas.md."
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
