"""The ordered list of stages a chat completion request goes through before it is forwarded."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.pipeline.stages.adapt import adapt
from proxy.pipeline.stages.cite import cite_sources
from proxy.pipeline.stages.decide import decide
from proxy.pipeline.stages.documents import parse_new_documents
from proxy.pipeline.stages.fit import fit_window
from proxy.pipeline.stages.inject import inject
from proxy.pipeline.stages.names import name_references
from proxy.pipeline.stages.options import read_options
from proxy.pipeline.stages.pages import send_pages
from proxy.pipeline.stages.passages import place_passages
from proxy.pipeline.stages.query import plan_searches
from proxy.pipeline.stages.references import extract_references
from proxy.pipeline.stages.retrieve import retrieve_candidates
from proxy.pipeline.stages.search_mode import choose_search
from proxy.pipeline.stages.shape import shape_prompt
from proxy.pipeline.stages.sight import learn_sight
from proxy.pipeline.stages.stores import find_stores
from proxy.pipeline.stages.validate import validate_request
from proxy.pipeline.stages.window import measure_window, settle_window

Stage = Callable[[Exchange, Services], Awaitable[None]]

# Read this list to know what the proxy does to a chat request, in order.
STAGES: list[tuple[str, Stage]] = [
    ("validate", validate_request),  # a JSON object with messages we can work on
    ("options", read_options),  # model defaults < X-Enrich-* headers < the body's `enrich`
    ("references", extract_references),  # file parts, file ids, #file: paths → bytes
    ("names", name_references),  # basenames; placeholders and hashes → document-N (or title)
    ("documents", parse_new_documents),  # new documents → pages of text (cached by sha256)
    ("stores", find_stores),  # vector stores to search, searched like old files (file_search)
    ("search", choose_search),  # who writes the searches: the model (a tool loop) or the proxy
    ("decide", decide),  # token counts + context window → strategy (docs/strategy.md)
    ("shape", shape_prompt),  # the chat prompts, or the completion shape for a base model
    ("sight", learn_sight),  # does the model see images, when the documents' pages may go
    ("inject", inject),  # full content, or the model offered its search function
    # Retrieval by the proxy (retrieval.md), when decided and the model writes no searches:
    ("query", plan_searches),  # what is searched: the question, its conversation, translations
    ("retrieve", retrieve_candidates),  # documents and vector stores → ranked candidates
    ("passages", place_passages),  # the budget, focus pages, the citation prompt, the record
    ("pages", send_pages),  # drawn pages (charts, scans) as images, for a model that sees
    ("window", measure_window),  # how the prompt fills the context window (no extra calls)
    ("adapt", adapt),  # context shifting; text-completion upstreams get a rendered prompt
    ("settle", settle_window),  # the window again if shifting counted the whole prompt
    ("fit", fit_window),  # fits the window the server runs with, or Ollama's native API, or 400
    ("cite", cite_sources),  # X-Enrich-Sources; the "Sources:" block for inline citations
]


async def run_pipeline(exchange: Exchange, services: Services) -> None:
    for name, stage in STAGES:
        started = time.perf_counter()
        await stage(exchange, services)
        exchange.timed(name, time.perf_counter() - started)
