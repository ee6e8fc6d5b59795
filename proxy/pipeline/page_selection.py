"""The drawn pages of the documents chosen as images for a model that sees: for full content,
the drawn pages in the room the 70% rule leaves after their text; for retrieval, the pages the
kept passages come from, best first, in the passage budget (`select_with_pages`)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Sequence

import structlog

from proxy.documents.model import DrawnPage, ParsedDocument
from proxy.documents.page_images import PagesFailed
from proxy.pipeline.answer_shape import completion_shaped
from proxy.pipeline.decision import ImagesRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import FileRef
from proxy.pipeline.page_attach import note
from proxy.pipeline.page_plan import (
    Asked,
    PageCandidate,
    best_first,
    candidate,
    grouped,
    image_reserve,
    pages_of,
    plan_images,
    sizes_wanted,
)
from proxy.pipeline.page_state import PagesState, Pricing
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import available_tokens, measure_context
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection
from proxy.upstream.vision import Sight

log = structlog.get_logger(__name__)

CHARS_PER_TOKEN = 4
"""A budget in characters (no known window) prices an image at this many per token."""


def _wants_images(exchange: Exchange) -> bool:
    asked: set[str] = {exchange.options.images}
    asked.update(ref.detail for ref in [*exchange.new_refs, *exchange.old_refs] if ref.detail)
    return asked != {"none"}


async def sight_for(exchange: Exchange, services: Services) -> Sight | None:
    """The model's sight when the request has documents and may send images; the decision
    record says what was found. None when images cannot go (text adapter, images: none)."""
    if not (exchange.new_documents or exchange.old_refs) or not _wants_images(exchange):
        return None
    if services.settings.model_settings(exchange.model).adapter == "text":
        return None  # a rendered text prompt has no place for an image
    if completion_shaped(exchange):
        return None  # nor has a base model's completion-shaped prompt
    sight = await services.vision.sight(exchange.model)
    record = exchange.decision.images
    if record is None:
        found = sight.to_json()
        exchange.decision.images = ImagesRecord(
            sees=sight.sees,
            source=sight.source,
            image_tokens=found["image_tokens"],
            image_tokens_source=found["image_tokens_source"],
            estimated=found["estimated"],
            asked=exchange.options.images,
        )
    if not sight.sees:
        return None
    if exchange.pages is None:
        exchange.pages = PagesState(sight)
    return sight


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


async def _surveys(
    services: Services,
    owner: str,
    state: PagesState,
    documents: Sequence[ParsedDocument],
    notes: list[str],
) -> dict[str, tuple[DrawnPage, ...]]:
    """Each document's drawn pages, surveyed in the caller's turn for the parse workers. A
    survey that failed or ran out of time is remembered as it came out (the same document is
    not surveyed again): what it found may go as images, the rest goes as text only, and a line
    in `notes` (the decision record's images note, on every request that meets it) says so."""
    surveys: dict[str, tuple[DrawnPage, ...]] = {}
    for document in documents:
        if document.sha256 not in state.data or document.sha256 in surveys:
            continue
        try:
            found = await services.page_images.surveyed(
                document, state.data[document.sha256], owner=owner
            )
        except PagesFailed as error:
            notes.append(f"{document.name}: its pages could not be surveyed ({error})")
            continue
        surveys[document.sha256] = found.pages
        if found.failed:
            notes.append(
                f"{document.name}: its pages could not be surveyed ({found.cut}); its text goes"
                " alone, and it is not surveyed again"
            )
        elif found.cut:
            notes.append(
                f"{document.name}: its pages were surveyed through page {found.through} of"
                f" {len(document.pages)} ({found.cut}); the later pages go as text only, and it"
                " is not surveyed again"
            )
    return surveys


async def _pricing(
    model: str | None, services: Services, state: PagesState, candidates: list[PageCandidate]
) -> Pricing:
    """The token count of every size the candidates could be sent at, asked once."""
    vision = services.settings.vision
    pricing = Pricing(state.sight, vision.low_px, vision.high_px, {})
    sizes = sizes_wanted(candidates, pricing.size)
    pricing.counts = await services.vision.counts(model, state.sight, sizes)
    state.pricing = pricing
    return pricing


def _write(exchange: Exchange, room: int | None, notes: Sequence[str]) -> None:
    """What the images planning found, in the decision record's images entry."""
    record = exchange.decision.images
    assert record is not None
    record.room = room
    for line in notes:
        note(exchange, line)


async def plan_full_content(exchange: Exchange, services: Services) -> None:
    """Full content: the documents' drawn pages, in page order, in the room their text left.
    The facts first (surveys, the room, the prices), then the plan, then the record."""
    state = exchange.pages
    assert state is not None
    documents = exchange.new_documents
    notes: list[str] = []
    await _remember(state, documents, exchange.new_refs)
    surveys = await _surveys(services, exchange.caller.name, state, documents, notes)
    room = await _room_after_text(exchange, services)
    candidates = [
        candidate(document, page, _asked(exchange, document))
        for document in documents
        for page in surveys.get(document.sha256, ())
    ]
    if candidates and room is not None:
        pricing = await _pricing(exchange.model, services, state, candidates)
        state.plan = plan_images(
            candidates, room, services.settings.vision.max_pages, pricing.size, pricing.counts
        )
    _write(exchange, room, notes)


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
    select: Callable[[PassageBudget], Awaitable[PassageSelection]],
) -> PassageSelection:
    """Retrieval's passages, and the drawn pages they come from as images.

    When the passages offered come from drawn pages, up to `vision.budget_share` of the budget
    is kept for their images; the passages are selected in the rest, then the drawn pages of
    the kept passages — best passage first, files taking turns — take what is left, each at
    the best detail that fits. If no image fits after all, the passages get the whole budget
    again (selected anew)."""
    if await sight_for(exchange, services) is None:
        return await select(budget)
    state = exchange.pages
    assert state is not None
    notes: list[str] = []
    await _remember(state, sources, [*exchange.new_refs, *exchange.old_refs])
    surveys = await _surveys(services, exchange.caller.name, state, sources, notes)
    drawn = {
        (source, page.number): page
        for source, document in enumerate(sources)
        for page in surveys.get(document.sha256, ())
    }
    asked = [_asked(exchange, document) for document in sources]
    offered = pages_of(best_first(candidates), drawn, sources, asked)
    pricing = await _pricing(exchange.model, services, state, offered) if offered else None
    if pricing is None:
        _write(exchange, None, notes)
        return await select(budget)
    unit = CHARS_PER_TOKEN if budget_unit == "characters" else 1
    vision = services.settings.vision
    reserve = image_reserve(
        offered,
        pricing.size,
        pricing.counts,
        budget.limit,
        unit,
        vision.budget_share,
        vision.max_pages,
    )
    if reserve <= 0:
        _write(exchange, None, notes)
        return await select(budget)
    selection = await select(budget.with_limit(budget.limit - reserve))
    room = (budget.limit - selection.used) // unit
    kept = pages_of(best_first(grouped(selection)), drawn, sources, asked)
    plan = plan_images(kept, room, vision.max_pages, pricing.size, pricing.counts)
    if not plan.images:
        notes.append("no kept passage's drawn page fitted: the passages took the whole budget")
        _write(exchange, room, notes)
        return await select(budget)
    state.plan = plan
    _write(exchange, room, notes)
    return selection
