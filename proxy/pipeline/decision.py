"""The decision record: every input and outcome of a request's enrichment, typed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from proxy.pipeline.strategy import Strategy


@dataclass
class TokenBudget:
    """What `choose_strategy` saw: counts in the model's tokens and the window they fill."""

    counter: str
    counts_exact: bool
    context_window: int | None
    context_window_source: str
    tokens_in_context: int
    remaining_context: int | None
    occupied_percent: float | None
    available_tokens: int | None
    prompt_tokens: int
    file_tokens: int
    file_tokens_per_file: dict[str, int | None]


@dataclass
class Candidate:
    """One passage retrieval found, and what became of it."""

    file: str
    page: int
    location: str
    score: float
    outcome: str  # "kept" | "shortened" | "below threshold" | "over budget"
    snippet: str
    passage: int | None = None  # the passage's number in its document (0-based)
    dense: float | None = None  # cosine affinity: what the threshold compares (= score)
    lexical: float | None = None  # BM25, None when no query term is in it
    fused: float | None = None  # reciprocal-rank-fusion score of the hybrid ranking
    rerank: float | None = None  # the reranker's relevance score, when one is configured
    overview: bool = False  # given for a question about the whole document, by where it sits
    place: bool = False  # from the place the question names ("chapter 3"), by where it sits


@dataclass
class RetrievalRecord:
    """What retrieval searched, scored, kept and left out."""

    sources: list[str]
    limit: int
    affinity_threshold: float
    embedder: str
    scores: list[list[float]]
    budget_limit: int
    budget_unit: str  # "tokens" | "characters"
    selected_per_source: list[int]
    left_out: int
    candidates: list[Candidate] = field(default_factory=list)
    ranking: str = "dense"  # "hybrid" | "dense" | "lexical", + "+rerank"
    fill: str = "none"  # what room left in the budget is filled with: "passages" | "neighbours"
    depth: int = 0  # candidates asked for per file (the limit, or more to fill the budget)
    indexed: dict[str, int] = field(default_factory=dict)  # % of each file's dense index ready
    indexing: dict[str, str] = field(default_factory=dict)
    """How each file was ranked by meaning: "complete" (indexed before), "whole before the
    answer" (a small document, embedded while the request waited), "in part, the rest in the
    background" (a large one: its candidates and what was ready), "by its words"."""
    window: dict[str, int] = field(default_factory=dict)  # tokens joined before/after each hit
    query_language: str | None = None  # as told from the question's words (None: unsure)
    translations: list[dict[str, Any]] = field(default_factory=list)
    """The question translated into each document's language that differed from it."""
    ranked_by_words: list[str] = field(default_factory=list)
    """Files in a language the embedder does not read: ranked by their words, no threshold."""
    multilingual: list[str] = field(default_factory=list)
    """Files in a language the embedder leaves to the multilingual one (with MiniLM: all but
    English), ranked by its cosines put on the embedder's scale, held to the same threshold."""
    overview: list[str] = field(default_factory=list)
    """Files whose opening and conclusion came first: the question is about a whole document."""
    searched: list[dict[str, Any]] = field(default_factory=list)
    """What the files were searched for: the question, and the question with its
    conversation's earlier turns, each `{text, weight, from}` (question | conversation |
    reply | terms | rewrite); the rankings are fused at those weights. A `terms` entry
    adds `carried` (the words it could carry, the first `near` said next to the question's
    words) and `words` (by file: those it was searched with)."""
    store_down: dict[str, str] = field(default_factory=dict)
    """Files ranked by their words because the vector store could not be read or written (a
    Chroma server restarting, a full disk), with the reason; they are in ranked_by_words too."""
    rewrite: dict[str, Any] | None = None
    """A follow-up's standalone question written by the model: `{outcome, why, text?, weight?,
    model?, server?, endpoint?, seconds?, cached?}` (None: the request is no follow-up)."""
    places: dict[str, str] = field(default_factory=dict)
    """The place the question names, per file: what was taken for it (`chapter 3: "3:
    Catalogs", passages 105-115`), or `not found` (then the passages are ranked as usual)."""


@dataclass
class ContextShift:
    """Oldest turns dropped so that the conversation and the answer fit the window."""

    dropped_messages: int
    tokens: int
    limit: int


@dataclass
class AdapterRecord:
    """How a chat request was rendered for a text-completion upstream."""

    kind: str
    format: str
    stop: list[str]


@dataclass
class PromptRecord:
    """Which prompt the documents went in, and why: the chat prompts (`chat`), or the
    completion-shaped one a base model can follow (`completion`: one worked example, the
    passages, `Question: ... Answer:`, sent as a text completion that stops at the line's end)."""

    shape: str  # "chat" | "completion"
    reason: str
    sampling: str = ""  # completion: "greedy (the request set no temperature)" or the request's


@dataclass
class UpstreamRecord:
    """The upstream as this request met it: its kind, the window and tokenizer used (each exact
    or estimated, and where it was learnt), and how the prompt was made to fit the window the
    server really runs with (`route`: `openai`, or `native` for Ollama's /api/chat)."""

    kind: str
    kind_source: str
    window: int | None
    window_exact: bool
    window_source: str
    tokenizer: str
    tokenizer_exact: bool
    tokenizer_source: str
    route: str = "openai"
    prompt_tokens: int | None = None  # the prompt as sent, when it had to be counted
    answer_tokens: int | None = None  # room kept for the answer
    loaded_window: int | None = None  # the window the server runs the model with (Ollama)
    num_ctx: int | None = None  # the window asked of Ollama on its native API
    upstream_prompt_tokens: int | None = None  # the server's own count, from its answer
    note: str = ""
    # Is the model instruction-tuned, does the server parse its tool calls (None: unknown),
    # and where each was learnt (proxy.upstream.abilities).
    instruct: bool | None = None
    instruct_source: str = ""
    tools: bool | None = None
    tools_source: str = ""
    asked_num_ctx: int | None = None  # Ollama: the caller's options.num_ctx, before bounding
    dropped_options: dict[str, str] = field(default_factory=dict)
    """Ollama: what the caller sent that would reload or unload the model for every caller, not
    sent (`keep_alive`, `options.num_gpu`, ...), each with why."""
    kind_known: bool = True  # False: the probes failed or went unanswered (kind_source says why)


@dataclass
class WindowShare:
    """How the request fills the model's context window, in its tokens: the parts it sends and
    the room left for the answer. Parts named in `estimated` were not counted by the model's
    tokenizer but estimated from their characters (`note` says how)."""

    context_window: int | None
    system: int
    history: int
    documents: int
    question: int
    answer_room: int | None
    max_tokens: int | None
    estimated: list[str]
    note: str


@dataclass
class ImagesRecord:
    """Drawn pages sent to a vision model as images: whether the model sees (and where that
    was learnt), what an image costs it, the room images had, and each page sent or left out."""

    sees: bool
    source: str
    image_tokens: str  # the projector family, a fixed count, or "counted by the upstream"
    image_tokens_source: str
    estimated: bool
    asked: str  # none | low | high | auto (the request's option; files may ask their own)
    room: int | None = None  # tokens the images could take
    tokens: int = 0  # what the images sent take, labels included
    pages: list[dict[str, Any]] = field(default_factory=list)
    left_out: list[dict[str, Any]] = field(default_factory=list)
    note: str = ""


@dataclass
class SearchCall:
    """One call of the search function the model made, and what came of it."""

    round: int  # the model turn it was made in (1-based)
    queries: list[str]
    found: int = 0  # passages above the threshold, each once
    given: int = 0  # passages the model got back (within max_num_results and the budget)
    left_out: int = 0  # found but not given: past max_num_results, given before, over budget
    error: str = ""  # what the model was told instead (bad arguments, an unknown function)


@dataclass
class SearchesRecord:
    """Who wrote the searches — the model in a tool loop (`tool`), the proxy once for the last
    user message (`once`), nobody (`off`: tool_choice none) — why, and each search made."""

    mode: str
    asked: str  # enrich.search: auto | tool | once
    reason: str
    scope: list[str] = field(default_factory=list)  # the files and stores the function covers
    calls: list[SearchCall] = field(default_factory=list)
    rounds: int = 0  # model turns sent upstream, the answer's included
    tokens: int = 0  # tokens the model wrote in the turns that searched
    forced: str = ""  # why the answer was asked for without tools, if it was
    stopped: str = ""  # why the loop ended early: a function of the client's was called
    budget_limit: int | None = None  # the passage budget of all the searches together
    budget_used: int = 0
    budget_unit: str = ""
    written_calls: int = 0  # search calls the model wrote as text, its server did not parse
    searched_for_model: str = ""  # why the proxy wrote the first search (a forced one not made)


@dataclass
class Decision:
    """Written by the stages in order; read by the preview, the debug log and the headers."""

    new_files: list[str] = field(default_factory=list)
    old_files: list[str] = field(default_factory=list)
    vector_stores: list[str] = field(default_factory=list)  # searched like old files
    requested_strategy: Strategy = Strategy.AUTO
    strategy: Strategy = Strategy.NONE
    reason: str = ""
    budget: TokenBudget | None = None
    guard: dict[str, dict[str, int]] | None = None
    retrieval: RetrievalRecord | None = None
    context_shift: ContextShift | None = None
    adapter: AdapterRecord | None = None
    window: WindowShare | None = None
    upstream: UpstreamRecord | None = None
    images: ImagesRecord | None = None
    searches: SearchesRecord | None = None  # who wrote the searches, and each one made
    prompt: PromptRecord | None = None
    documents: list[dict[str, Any]] = field(default_factory=list)
    """Each parsed document: kind, title, locations, OCR'd pages, warnings (document_report.py)."""
    warnings: list[str] = field(default_factory=list)
    """Lossy steps, one line each: `report.pdf: was damaged and has been repaired; ...`."""
    chain: dict[str, Any] | None = None
    """A Responses turn chained to earlier ones the upstream keeps (`previous_response_id`,
    `conversation`): `{from, id, messages, files, not_kept, deleted}`, what the proxy kept of
    them and searched the turn with (proxy.responses.chain)."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values; the budget's numbers sit at the top level, absent parts are left
        out (the shape `POST /v1/enrich/preview` has always returned)."""
        record: dict[str, Any] = {
            "new_files": self.new_files,
            "old_files": self.old_files,
            "requested_strategy": str(self.requested_strategy),
            "strategy": str(self.strategy),
            "reason": self.reason,
        }
        if self.vector_stores:
            record["vector_stores"] = self.vector_stores
        if self.budget is not None:
            record.update(dataclasses.asdict(self.budget))
        if self.guard is not None:
            record["guard"] = self.guard
        if self.documents:
            record["documents"] = self.documents
        if self.warnings:
            record["warnings"] = self.warnings
        if self.chain is not None:
            record["chain"] = self.chain
        for name, part in (
            ("retrieval", self.retrieval),
            ("context_shift", self.context_shift),
            ("adapter", self.adapter),
            ("window", self.window),
            ("upstream", self.upstream),
            ("images", self.images),
            ("searches", self.searches),
            ("prompt", self.prompt),
        ):
            if part is not None:
                record[name] = dataclasses.asdict(part)
        return record
