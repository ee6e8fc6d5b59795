"""The file_search tool as a request asks for it, and the search function the model is offered
under that name: what it covers and what its calls have given."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.documents.model import ParsedDocument
from proxy.guard.neutralise import GuardReport
from proxy.guard.safe_names import safe_name
from proxy.pipeline.decision import SearchCall, SearchesRecord
from proxy.retrieval.budget import PassageBudget

if TYPE_CHECKING:
    from proxy.stores.filters import Filter
    from proxy.stores.records import StoreRecord


@dataclass(frozen=True)
class FileSearch:
    """The Responses API's file_search tool: the stores, how many results, which files."""

    vector_store_ids: tuple[str, ...]
    max_num_results: int | None = None
    filters: Filter | None = None
    score_threshold: float | None = None
    forced: bool = False  # tool_choice {"type": "file_search"}: the model's first turn searches


@dataclass(frozen=True)
class Origin:
    """Where a source's passages come from: a file id (uploaded, or a vector store's file) and
    the vector store, if any."""

    file_id: str | None = None
    vector_store_id: str | None = None


@dataclass
class CallResult:
    """What one search call gives back: the tool message's text, the passages as a Responses
    `file_search_call` reports them, and the record of it."""

    text: str
    results: list[dict[str, Any]]
    record: SearchCall


@dataclass
class ModelSearch:
    """A request whose searches the model writes: what its function covers, what was given."""

    record: SearchesRecord
    file_search: FileSearch | None = None
    sources: list[ParsedDocument] = field(default_factory=list)  # attached, when retrieved
    origins: list[Origin] = field(default_factory=list)
    stores: list[StoreRecord] = field(default_factory=list)
    budget: PassageBudget | None = None
    measure: Callable[[str], Awaitable[int]] | None = None  # in the budget's unit
    unit: str = "tokens"
    used: int = 0  # of the budget, by everything given so far
    given: set[str] = field(default_factory=set)  # passage texts already given
    reports: dict[str, GuardReport] = field(default_factory=dict)
    attributes: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @property
    def armed(self) -> bool:
        """Whether there is anything for the function to search."""
        return bool(self.sources or self.stores)

    def scope(self, control_tokens: tuple[str, ...] = ()) -> list[str]:
        """The names of what it covers, guarded (the model reads them in the description)."""
        names = [safe_name(document.name, control_tokens) for document in self.sources]
        for store in self.stores:
            label = store.name or store.id
            names.append(f"vector store {safe_name(label, control_tokens)}")
        return names
