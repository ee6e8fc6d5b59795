"""retrieval: chunking, ranking, citing, and the searches a follow-up gets from its conversation."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from proxy.config.base import Section
from proxy.config.embeddings import RerankSettings
from proxy.config.options import CitationStyle


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
            " phrase naming what the last turn named), in the lexical index's languages."
        ),
    )
    continuing: float = Field(
        1.0,
        ge=0.0,
        le=8.0,
        description=(
            "With `reply_pointing`, the last answer's weight for a question pointing at nothing"
            ' that opens by continuing the exchange ("And if it drops?", "¿Y si ...?", "Et'
            " pour ...?\"), or one written in a script none of the index's languages uses"
            " (Han, kana, Hangul, Greek, Arabic, ...: its pointing words are not known); 0, or"
            " `reply` 0: not searched."
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
