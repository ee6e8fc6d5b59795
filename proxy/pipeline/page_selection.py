"""The drawn pages of the documents chosen as images for a model that sees (the `sight`
stage): for full content, the drawn pages in the room the 70% rule leaves after their text;
for retrieval, the pages the kept passages come from, best first, in the passage budget.
Each decides here what the request allows, then makes one call down (`proxy.images.choice`)
with the edges it may ask: the parse workers' surveys and the upstream's image counts; what
it came to stays on the page state, for the `pages` stage to record and render."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from functools import partial

from proxy.documents.model import ParsedDocument
from proxy.images.choice import (
    Pricer,
    Selector,
    Surveyor,
    choose_for_passages,
    choose_in_room,
)
from proxy.images.plan import Asked
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import FileRef
from proxy.pipeline.page_state import PagesState
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import available_tokens, measure_context
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection


def _asked(exchange: Exchange, document: ParsedDocument) -> Asked:
    refs = [*exchange.new_refs, *exchange.old_refs]
    for ref in refs:
        if ref.name == document.name and ref.detail:
            return ref.detail  # type: ignore[return-value]
    asked: Asked = exchange.options.images
    return asked


async def _digest(data: bytes) -> str:
    if len(data) < 1024 * 1024:
        return hashlib.sha256(data).hexdigest()
    return (await asyncio.to_thread(hashlib.sha256, data)).hexdigest()  # releases the GIL


async def _remember(
    state: PagesState, documents: Sequence[ParsedDocument], refs: Sequence[FileRef]
) -> None:
    """The documents whose pages may go, and the bytes each was parsed from (by sha256)."""
    for document in documents:
        state.documents.setdefault(document.sha256, document)
    for ref in refs:
        if not ref.data or len(state.data) == len(state.documents):
            continue
        digest = await _digest(ref.data)
        if digest in state.documents:
            state.data.setdefault(digest, ref.data)


def _edges(exchange: Exchange, services: Services, state: PagesState) -> tuple[Surveyor, Pricer]:
    """The two facts the choice may ask for, as the lower modules' own methods bound to this
    request: a document's survey, in the caller's turn for the parse workers
    (`PageImages.surveyed`), and the token count of each image size, for this model and its
    sight (`VisionIntrospection.counts`)."""
    survey = partial(services.page_images.surveyed, owner=exchange.caller.name)
    price = partial(services.vision.counts, exchange.model, state.sight)
    return survey, price


async def plan_full_content(exchange: Exchange, services: Services) -> None:
    """Full content: the documents' drawn pages, in page order, in the room their text left."""
    state = exchange.pages
    assert state is not None
    documents = exchange.new_documents
    await _remember(state, documents, exchange.new_refs)
    room = await _room_after_text(exchange, services)
    asked = [_asked(exchange, document) for document in documents]
    survey, price = _edges(exchange, services, state)
    vision = services.settings.vision
    state.choice = await choose_in_room(
        documents, asked, state.data, room, vision, state.sizes, survey, price
    )


async def _room_after_text(exchange: Exchange, services: Services) -> int | None:
    """What the 70% rule leaves once the documents' text and the question are in: from
    decide's counts, or (a strategy forced, nothing counted) the rewritten prompt counted."""
    budget = exchange.decision.budget
    if budget is not None and budget.available_tokens is not None:
        return max(0, budget.available_tokens - budget.file_tokens - budget.prompt_tokens)
    window = await services.introspection.context_window(exchange.model)
    if window.tokens is None:
        return None
    counter = await services.introspection.counter(exchange.model)
    used = await counter.count_messages(exchange.messages)
    return available_tokens(measure_context(used, window.tokens))


async def select_with_pages(
    exchange: Exchange,
    services: Services,
    sources: Sequence[ParsedDocument],
    candidates: list[list[Passage]],
    budget: PassageBudget,
    budget_unit: str,
    select: Selector,
) -> PassageSelection:
    """Retrieval's passages and, for a model that sees, the drawn pages they come from as
    images, in the same budget (`proxy.images.choice.choose_for_passages`)."""
    state = exchange.pages
    if state is None:  # the model does not see, or no image may go (the `sight` stage)
        return await select(budget)
    await _remember(state, sources, [*exchange.new_refs, *exchange.old_refs])
    asked = [_asked(exchange, document) for document in sources]
    survey, price = _edges(exchange, services, state)
    vision = services.settings.vision
    choice = await choose_for_passages(
        sources,
        candidates,
        asked,
        state.data,
        budget,
        budget_unit,
        vision,
        state.sizes,
        survey,
        price,
        select,
    )
    state.choice = choice  # recorded and rendered by the `pages` stage
    assert choice.selection is not None
    return choice.selection
