"""The request options (`enrich`, `X-Enrich-*`, `models.<name>.enrich`), each declared once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

CitationStyle = Literal["fields", "inline", "both"]
ImageDetail = Literal["none", "low", "high", "auto"]
"""How a vision model gets a document's drawn pages: not at all, small, large, or large while
the budget allows and small after (see docs/vision.md)."""
SearchMode = Literal["auto", "tool", "once"]
"""Who writes the searches: the model in a tool loop, the proxy once, or chosen per request."""
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
