"""Stage: put the documents into the last user message in full, or offer the model its search
function (retrieval by the proxy is the stages after it: query, retrieve, passages)."""

from __future__ import annotations

from proxy.guard.neutralise import GuardReport
from proxy.guard.safe_names import safe_name
from proxy.pipeline.answer_shape import completion_shaped
from proxy.pipeline.citing import whole_document
from proxy.pipeline.completion_prompt import CompletionPrompt
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.guard_report import note_guard
from proxy.pipeline.prompts import full_content_prompt
from proxy.pipeline.rewrite import replace_last_user_text
from proxy.pipeline.search_space import open_space
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import INJECT, NONE, RETRIEVAL


async def inject(exchange: Exchange, services: Services) -> None:
    if exchange.model_search is not None:
        # A model that calls tools follows instructions: the chat prompts, never the
        # completion shape.
        exchange.search_offered = True
        await offer_search(exchange, services)
        return
    if exchange.strategy == INJECT:
        await inject_full_content(exchange, services)


async def offer_search(exchange: Exchange, services: Services) -> None:
    """The model writes the searches: documents that fit go in whole as ever, the rest and the
    vector stores are what its search function covers; the question stays as it was asked."""
    search = exchange.model_search
    assert search is not None
    if exchange.strategy == INJECT:
        await inject_full_content(exchange, services)
    if exchange.strategy != NONE:
        await open_space(exchange, services, documents=exchange.strategy == RETRIEVAL)
    if not search.armed:
        search.record.mode = "off"
        search.record.reason = (
            "enrich.strategy none: nothing is searched"
            if exchange.strategy == NONE
            else "nothing left to search: the documents were given whole"
        )
        exchange.response_headers["X-Enrich-Search"] = "off"
        exchange.model_search = None


async def inject_full_content(exchange: Exchange, services: Services) -> None:
    files = []
    reports: dict[str, GuardReport] = {}
    for document in exchange.new_documents:
        guarded = await services.guarded.document(document, exchange.control_tokens)
        files.append((safe_name(document.name, exchange.control_tokens), guarded.text))
        reports[document.name] = guarded.report
    prompt = full_content_prompt(files, exchange.query)
    exchange.body["messages"] = replace_last_user_text(exchange.messages, prompt)
    if completion_shaped(exchange):
        documents = tuple(f"{name}:\n{text}" for name, text in files)
        exchange.completion = CompletionPrompt(documents, exchange.query)
    note_guard(exchange, reports)
    file_ids = {ref.name: ref.file_id for ref in exchange.new_refs}
    exchange.whole_documents = [
        whole_document(document.name, file_ids.get(document.name))
        for document in exchange.new_documents
    ]
