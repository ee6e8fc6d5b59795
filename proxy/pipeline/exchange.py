"""The one object that travels through every stage of a chat request."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from proxy.documents.model import ParsedDocument
from proxy.pipeline.completion_prompt import CompletionPrompt
from proxy.pipeline.decision import Decision
from proxy.pipeline.file_refs import FileRef
from proxy.pipeline.file_search import FileSearch, ModelSearch
from proxy.pipeline.option_layers import Options
from proxy.pipeline.strategy import Strategy
from proxy.upstream.kinds.profile import ResponseConverter

if TYPE_CHECKING:
    from proxy.pipeline.inflight import Held
    from proxy.pipeline.page_state import PagesState
    from proxy.pipeline.retrieval_state import Ranked, Searches
    from proxy.stores.records import StoreRecord


@dataclass(frozen=True)
class Caller:
    """Who is asking: the name of the proxy key presented (what it owns), or `anonymous` when
    the proxy has no keys; an admin key sees every identity's things."""

    name: str = "anonymous"
    admin: bool = False

    @property
    def scope(self) -> str | None:
        """Whose files and records this caller sees: its own, or (admin) everyone's (None)."""
        return None if self.admin else self.name


ANONYMOUS = Caller()


@dataclass
class StoreSearch:
    """What searching vector stores for the request found (a file_search_call reports it)."""

    stores: list[StoreRecord]
    queries: list[str] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Exchange:
    """A chat completion request on its way through the pipeline, and everything learnt about it."""

    request_id: str
    body: dict[str, Any]
    caller: Caller = ANONYMOUS
    option_headers: dict[str, str] = field(default_factory=dict)  # the request's X-Enrich-*
    options: Options = field(default_factory=Options)
    new_refs: list[FileRef] = field(default_factory=list)
    old_refs: list[FileRef] = field(default_factory=list)
    new_documents: list[ParsedDocument] = field(default_factory=list)
    document_chars: int = 0  # text of the documents parsed so far (documents.max_request_chars)
    held: Held | None = None  # the documents' bytes, counted against the key until released
    query: str = ""
    decision: Decision = field(default_factory=Decision)
    citations: list[str] = field(default_factory=list)
    search_results: list[dict[str, Any]] = field(default_factory=list)
    response_headers: dict[str, str] = field(default_factory=dict)
    sources_block: str = ""  # the inline "Sources:" text appended to the answer, if any
    # Documents the model got in full, as sources (`citing.whole_document`).
    whole_documents: list[dict[str, Any]] = field(default_factory=list)
    file_search: FileSearch | None = None  # asked for by a Responses file_search tool
    store_search: StoreSearch | None = None  # the vector stores searched, and what was found
    model_search: ModelSearch | None = None  # the model writes the searches (a tool loop)
    search_offered: bool = (
        False  # the model was offered its search function: the proxy searches not
    )
    upstream_path: str = "/v1/chat/completions"
    fixed_route: bool = False  # the body goes where the caller sends it (native Responses)
    response_converter: ResponseConverter | None = None
    error_frames: bool = False  # the upstream may end a 200 stream with `event: error`
    window_hint: str = ""  # how to make the model's window larger, added to a refusal of it
    completion: CompletionPrompt | None = None  # a base model's prompt, rendered by `adapt`
    control_tokens: tuple[str, ...] = ()  # declared by the upstream model, for the guard
    searches: Searches | None = None  # what retrieval searches (the `query` stage)
    ranked: Ranked | None = None  # what retrieval found, ranked (the `retrieve` stage)
    pages: PagesState | None = None  # drawn pages as images: what was planned, for which model
    timings: dict[str, float] = field(default_factory=dict)
    status: Callable[[str], None] = field(default=lambda line: None, repr=False)
    started: float = field(default_factory=time.perf_counter)

    @property
    def strategy(self) -> Strategy:
        return self.decision.strategy

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def model(self) -> str | None:
        model = self.body.get("model")
        return model if isinstance(model, str) else None

    @property
    def messages(self) -> list[dict[str, Any]]:
        messages = self.body.get("messages")
        return messages if isinstance(messages, list) else []

    def release_documents(self) -> None:
        """The pipeline is done with the documents' bytes: drop them and give them back to the
        key's budget (the parsed text stays; the bytes would otherwise live as long as the
        request, or longer where an error's traceback holds it)."""
        for refs in (self.new_refs, self.old_refs):
            refs[:] = [
                dataclasses.replace(ref, data=b"", dropped=len(ref.data)) if ref.data else ref
                for ref in refs
            ]
        if self.held is not None:
            self.held.release()

    @property
    def sources(self) -> list[dict[str, Any]]:
        """Everything the answer drew on: the cited passages' places, then whole documents."""
        return [*self.search_results, *self.whole_documents]

    def timed(self, name: str, seconds: float) -> None:
        self.timings[name] = round(self.timings.get(name, 0.0) + seconds, 6)
