"""The recent requests' decision records: a bounded ring in memory, read by /ui."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from proxy.pipeline.decision import Decision
from proxy.pipeline.exchange import Caller, Exchange

SNIPPET_CHARS = 200
"""A passage's snippet in the log: enough to recognise it, never the document."""

ERROR_CHARS = 500
QUESTION_CHARS = 200
"""A request's question in the log: enough to tell requests about one document apart."""


@dataclass(frozen=True)
class LoggedDocument:
    """A document of a request: its name and sizes, never its text."""

    name: str
    new: bool
    bytes: int
    pages: int | None  # None: not parsed by this request (old files, failed parses)
    kind: str | None


@dataclass
class RequestRecord:
    """One finished request: who, which model, what was decided, how it went."""

    request_id: str
    time: float  # Unix seconds
    caller: str
    route: str
    status: int
    duration_s: float
    error: str | None = None
    model: str | None = None
    stream: bool = False
    documents: list[LoggedDocument] = field(default_factory=list)
    decision: dict[str, Any] = field(default_factory=dict)
    timings_s: dict[str, float] = field(default_factory=dict)
    citations: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    question: str | None = None  # its start; None when the log keeps no snippets

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "time": self.time,
            "caller": self.caller,
            "route": self.route,
            "status": self.status,
            "error": self.error,
            "duration_s": round(self.duration_s, 6),
            "model": self.model,
            "stream": self.stream,
            "documents": [vars(document) for document in self.documents],
            # None when the request failed before a strategy was decided.
            "strategy": self.decision.get("strategy") if self.decision.get("reason") else None,
            "decision": self.decision,
            "timings_s": self.timings_s,
            "citations": self.citations,
            "warnings": self.warnings,
            "question": self.question,
        }


def documents_of(exchange: Exchange) -> list[LoggedDocument]:
    """New files with the pages this request parsed, then old files (bytes only)."""
    parsed = exchange.new_documents
    logged = []
    for index, ref in enumerate(exchange.new_refs):
        document = parsed[index] if index < len(parsed) else None
        logged.append(
            LoggedDocument(
                name=ref.name,
                new=True,
                bytes=ref.size,
                pages=len(document.pages) if document else None,
                kind=document.kind if document else None,
            )
        )
    for ref in exchange.old_refs:
        logged.append(LoggedDocument(ref.name, False, ref.size, None, None))
    return logged


def warnings_of(decision: Decision) -> list[str]:
    """What a person tuning the proxy should notice about a decision."""
    warnings = []
    budget = decision.budget
    if budget is not None:
        if not budget.counts_exact:
            warnings.append(f"token counts are estimates ({budget.counter})")
        if budget.context_window is None:
            warnings.append("the context window is unknown: passages were budgeted in characters")
        for name, tokens in budget.file_tokens_per_file.items():
            if tokens is None:
                warnings.append(f"{name} was not counted: the files before it filled the window")
    changes = sum(sum(kinds.values()) for kinds in (decision.guard or {}).values())
    if changes:
        warnings.append(f"the guard changed {changes} spans of document text")
    retrieval = decision.retrieval
    if retrieval is not None:
        if not sum(retrieval.selected_per_source):
            warnings.append("no passage was kept: none scored above the threshold or fitted")
        if retrieval.left_out:
            warnings.append(f"{retrieval.left_out} passages did not fit the passage budget")
    shift = decision.context_shift
    if shift is not None and shift.dropped_messages:
        warnings.append(f"{shift.dropped_messages} older messages dropped to fit the window")
    window = decision.window
    room = window.answer_room if window else None
    if window and window.max_tokens and room is not None and room < window.max_tokens:
        warnings.append(
            f"room for {room} answer tokens, less than max_tokens ({window.max_tokens})"
        )
    return warnings


def decision_json(decision: Decision, snippets: bool) -> dict[str, Any]:
    """The decision record with its passage snippets shortened; without snippets, no text of
    the documents or of the conversation: snippets, what was searched for (the question, its
    conversation and carried words, its rewrite, its translations, the model's queries)."""
    record = decision.to_json()
    retrieval = record.get("retrieval")
    retrieval = retrieval if isinstance(retrieval, dict) else {}
    for candidate in retrieval.get("candidates", []):
        if snippets and isinstance(candidate.get("snippet"), str):
            candidate["snippet"] = candidate["snippet"][:SNIPPET_CHARS]
        else:
            candidate.pop("snippet", None)
    if snippets:
        return record
    for searched in retrieval.get("searched", []):
        for key in ("text", "carried", "words"):
            searched.pop(key, None)
    for translation in retrieval.get("translations", []):
        translation.pop("query", None)
    if isinstance(retrieval.get("rewrite"), dict):
        retrieval["rewrite"].pop("text", None)
    searches = record.get("searches")
    for call in searches.get("calls", []) if isinstance(searches, dict) else []:
        call.pop("queries", None)
    return record


def record_of(
    exchange: Exchange | None,
    *,
    request_id: str,
    caller: Caller,
    route: str,
    status: int,
    error: str | None,
    time: float,
    duration_s: float,
    snippets: bool,
) -> RequestRecord:
    """What the log keeps of a finished request; `exchange` is None when its body was unusable."""
    record = RequestRecord(
        request_id=request_id,
        time=time,
        caller=caller.name,
        route=route,
        status=status,
        duration_s=duration_s,
        error=None if error is None else error[:ERROR_CHARS],
    )
    if exchange is not None:
        record.model = exchange.model
        record.stream = exchange.stream
        record.documents = documents_of(exchange)
        record.decision = decision_json(exchange.decision, snippets)
        record.timings_s = dict(exchange.timings)
        record.citations = list(exchange.citations)
        record.warnings = warnings_of(exchange.decision)
        if snippets and exchange.query.strip():
            record.question = " ".join(exchange.query.split())[:QUESTION_CHARS]
    return record


class DecisionLog:
    """The last `size` requests' records, newest last; 0 keeps none (and turns /ui off)."""

    def __init__(self, size: int = 200, snippets: bool = True) -> None:
        self.size = size
        self.snippets = snippets
        self._ring: deque[RequestRecord] = deque(maxlen=size)

    @property
    def enabled(self) -> bool:
        return self.size > 0

    def add(self, record: RequestRecord) -> None:
        if self.enabled:
            self._ring.append(record)

    def recent(self, caller: Caller, limit: int) -> list[RequestRecord]:
        """Newest first: the caller's own requests, or every request for an admin key."""
        found = []
        for record in reversed(self._ring):
            if caller.admin or record.caller == caller.name:
                found.append(record)
                if len(found) == limit:
                    break
        return found
