"""Request bodies of the vector store routes, validated as OpenAI validates them (pure)."""

from __future__ import annotations

import math
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from proxy.errors import BadRequest
from proxy.stores.filters import Filter, parse_filter
from proxy.stores.records import Chunking, ExpiresAfter

MAX_PAIRS = 16
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 512
MAX_BATCH_FILES = 2000
MAX_QUERIES = 16

M = TypeVar("M", bound=BaseModel)


class Params(BaseModel):
    """Unknown keys are refused, as OpenAI does, and types are not coerced ("5" is no number)."""

    model_config = ConfigDict(extra="forbid", strict=True)


class StaticSizes(Params):
    max_chunk_size_tokens: int = Field(ge=100, le=4096)
    chunk_overlap_tokens: int = Field(ge=0)

    @model_validator(mode="after")
    def _overlap_at_most_half(self) -> StaticSizes:
        if self.chunk_overlap_tokens > self.max_chunk_size_tokens // 2:
            raise ValueError("chunk_overlap_tokens must not exceed half of max_chunk_size_tokens")
        return self


class ChunkingStrategy(Params):
    type: Literal["auto", "static"]
    static: StaticSizes | None = None

    @model_validator(mode="after")
    def _sizes_with_static(self) -> ChunkingStrategy:
        if self.type == "static" and self.static is None:
            raise ValueError("a static chunking strategy needs `static`")
        if self.type == "auto" and self.static is not None:
            raise ValueError("an auto chunking strategy takes no `static`")
        return self

    def record(self) -> Chunking:
        if self.static is None:
            return Chunking()
        return Chunking(
            type="static",
            max_chunk_size_tokens=self.static.max_chunk_size_tokens,
            chunk_overlap_tokens=self.static.chunk_overlap_tokens,
        )


class Expiry(Params):
    anchor: Literal["last_active_at"]
    days: int = Field(ge=1, le=365)

    def record(self) -> ExpiresAfter:
        return ExpiresAfter(days=self.days)


class CreateStore(Params):
    name: str | None = Field(None, max_length=256)
    description: str | None = Field(None, max_length=512)
    file_ids: list[str] = Field(default_factory=list, max_length=MAX_BATCH_FILES)
    chunking_strategy: ChunkingStrategy | None = None
    metadata: dict[str, Any] | None = None
    expires_after: Expiry | None = None


class ModifyStore(Params):
    name: str | None = Field(None, max_length=256)
    metadata: dict[str, Any] | None = None
    expires_after: Expiry | None = None


class AttachFile(Params):
    file_id: str
    attributes: dict[str, Any] | None = None
    chunking_strategy: ChunkingStrategy | None = None


class CreateBatch(Params):
    file_ids: list[str] | None = Field(None, max_length=MAX_BATCH_FILES)
    files: list[AttachFile] | None = Field(None, max_length=MAX_BATCH_FILES)
    attributes: dict[str, Any] | None = None
    chunking_strategy: ChunkingStrategy | None = None

    @model_validator(mode="after")
    def _one_list(self) -> CreateBatch:
        if (self.file_ids is None) == (self.files is None):
            raise ValueError("give either file_ids or files")
        return self

    def attachments(self) -> list[AttachFile]:
        """Each file with its own attributes and chunking, or the batch's."""
        if self.files is not None:
            return self.files
        return [
            AttachFile(
                file_id=file_id,
                attributes=self.attributes,
                chunking_strategy=self.chunking_strategy,
            )
            for file_id in self.file_ids or []
        ]


class UpdateFile(Params):
    attributes: dict[str, Any] | None


class HybridWeights(Params):
    embedding_weight: float
    text_weight: float


class RankingOptions(Params):
    ranker: Literal["none", "auto", "default-2024-11-15"] | None = None
    score_threshold: float | None = Field(None, ge=0.0, le=1.0)
    hybrid_search: HybridWeights | None = None  # accepted; the proxy's fusion is fixed


class Search(Params):
    query: str | list[str]
    filters: dict[str, Any] | None = None
    max_num_results: int | None = Field(None, ge=1, le=50)
    ranking_options: RankingOptions | None = None
    rewrite_query: bool | None = None  # accepted; queries are searched as written

    def queries(self) -> list[str]:
        queries = [self.query] if isinstance(self.query, str) else self.query
        if not queries or len(queries) > MAX_QUERIES or not all(q.strip() for q in queries):
            raise BadRequest(
                f"query must be a non-empty string or a list of 1 to {MAX_QUERIES} of them",
                param="query",
                code="invalid_value",
            )
        return queries

    def filter(self) -> Filter | None:
        return None if self.filters is None else parse_filter(self.filters, "filters")


def validated(model: type[M], body: Any) -> M:
    """`body` as `model`; the first problem is a 400 naming the field (`files[2].file_id`)."""
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object", code="invalid_body")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = _location(error["loc"])
        message = str(error["msg"]).removeprefix("Value error, ")
        raise BadRequest(
            f"{where}: {message}" if where else message, param=where or None, code="invalid_value"
        ) from None


def _location(loc: tuple[int | str, ...]) -> str:
    where = ""
    for part in loc:
        where += f"[{part}]" if isinstance(part, int) else (f".{part}" if where else str(part))
    return where


def metadata(value: dict[str, Any] | None, param: str = "metadata") -> dict[str, str]:
    """OpenAI's metadata: up to 16 pairs, keys up to 64 characters, string values up to 512."""
    pairs = _pairs(value, param)
    for key, item in pairs.items():
        if not isinstance(item, str) or len(item) > MAX_VALUE_CHARS:
            raise BadRequest(
                f"{param}.{key}: values must be strings of at most {MAX_VALUE_CHARS} characters",
                param=f"{param}.{key}",
                code="invalid_value",
            )
    return pairs


def attributes(value: dict[str, Any] | None, param: str = "attributes") -> dict[str, Any]:
    """OpenAI's file attributes: up to 16 pairs, keys up to 64 characters, values strings (up
    to 512 characters), booleans or numbers."""
    pairs = _pairs(value, param)
    for key, item in pairs.items():
        if isinstance(item, str):
            ok = len(item) <= MAX_VALUE_CHARS
        elif isinstance(item, bool):
            ok = True
        else:
            ok = isinstance(item, int | float) and math.isfinite(item)
        if not ok:
            raise BadRequest(
                f"{param}.{key}: values must be strings of at most {MAX_VALUE_CHARS} "
                "characters, booleans or numbers",
                param=f"{param}.{key}",
                code="invalid_value",
            )
    return pairs


def _pairs(value: dict[str, Any] | None, param: str) -> dict[str, Any]:
    if value is None:
        return {}
    if len(value) > MAX_PAIRS:
        raise BadRequest(f"{param}: at most {MAX_PAIRS} pairs", param=param, code="invalid_value")
    for key in value:
        if not key or len(key) > MAX_KEY_CHARS:
            raise BadRequest(
                f"{param}: keys must be 1 to {MAX_KEY_CHARS} characters",
                param=param,
                code="invalid_value",
            )
    return dict(value)
