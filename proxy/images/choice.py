"""Which drawn pages go as images, the facts asked through the callables given: the documents'
surveys, then the token count of each size the offered pages could take, then the plan
(`plan.py`). The caller decides whether pages may go and hands the edges down."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field

from proxy.config import VisionSettings
from proxy.documents.model import DrawnPage, ParsedDocument
from proxy.documents.page_images import PagesFailed, Survey
from proxy.images.plan import (
    Asked,
    ImagePlan,
    PageSizes,
    Size,
    best_first,
    candidate,
    grouped,
    image_reserve,
    pages_of,
    plan_images,
    sizes_wanted,
)
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection

CHARS_PER_TOKEN = 4
"""A budget in characters (no known window) prices an image at this many per token."""

Surveyor = Callable[[ParsedDocument, bytes], Awaitable[Survey]]
"""A document's drawn pages, surveyed in a parse worker (`PageImages.surveyed`)."""
Pricer = Callable[[set[Size]], Awaitable[dict[Size, int]]]
"""The token count of an image of each size (`VisionIntrospection.counts`)."""
Selector = Callable[[PassageBudget], Awaitable[PassageSelection]]
"""Retrieval's passages selected in a budget."""


@dataclass
class PageChoice:
    """What choosing came to: the plan (None when no page was planned), the room the images had,
    the token counts asked, the lines the decision record's images note gets and, for retrieval,
    the passages selected."""

    plan: ImagePlan | None = None
    room: int | None = None
    counts: dict[Size, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    selection: PassageSelection | None = None


async def drawn_pages(
    documents: Sequence[ParsedDocument],
    data: Mapping[str, bytes],
    survey: Surveyor,
    notes: list[str],
) -> dict[str, tuple[DrawnPage, ...]]:
    """Each document's drawn pages, for those whose bytes are at hand (by sha256). A survey that
    failed or ran out of time is remembered as it came out (the same document is not surveyed
    again): what it found may go as images, the rest goes as text only, and a line in `notes`
    (the decision record's images note, on every request that meets it) says so."""
    surveys: dict[str, tuple[DrawnPage, ...]] = {}
    for document in documents:
        if document.sha256 not in data or document.sha256 in surveys:
            continue
        try:
            found = await survey(document, data[document.sha256])
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


async def choose_in_room(
    documents: Sequence[ParsedDocument],
    asked: Sequence[Asked],
    data: Mapping[str, bytes],
    room: int | None,
    vision: VisionSettings,
    sizes: PageSizes,
    survey: Surveyor,
    price: Pricer,
) -> PageChoice:
    """Full content: the documents' drawn pages (`asked`: the detail by document), in page
    order, in the room their text left (None: unknown, so no image)."""
    choice = PageChoice(room=room)
    surveys = await drawn_pages(documents, data, survey, choice.notes)
    candidates = [
        candidate(document, page, wanted)
        for document, wanted in zip(documents, asked, strict=True)
        for page in surveys.get(document.sha256, ())
    ]
    if candidates and room is not None:
        choice.counts = await price(sizes_wanted(candidates, sizes.size))
        choice.plan = plan_images(candidates, room, vision.max_pages, sizes.size, choice.counts)
    return choice


async def choose_for_passages(
    sources: Sequence[ParsedDocument],
    candidates: Sequence[Sequence[Passage]],
    asked: Sequence[Asked],
    data: Mapping[str, bytes],
    budget: PassageBudget,
    budget_unit: str,
    vision: VisionSettings,
    sizes: PageSizes,
    survey: Surveyor,
    price: Pricer,
    select: Selector,
) -> PageChoice:
    """Retrieval's passages, and the drawn pages they come from as images.

    When the passages offered come from drawn pages, up to `vision.budget_share` of the budget
    is kept for their images; the passages are selected in the rest, then the drawn pages of
    the kept passages — best passage first, files taking turns — take what is left, each at
    the best detail that fits. If no image fits after all, the passages get the whole budget
    again (selected anew)."""
    choice = PageChoice()
    surveys = await drawn_pages(sources, data, survey, choice.notes)
    drawn = {
        (source, page.number): page
        for source, document in enumerate(sources)
        for page in surveys.get(document.sha256, ())
    }
    offered = pages_of(best_first(candidates), drawn, sources, asked)
    if not offered:
        choice.selection = await select(budget)
        return choice
    choice.counts = await price(sizes_wanted(offered, sizes.size))
    unit = CHARS_PER_TOKEN if budget_unit == "characters" else 1
    reserve = image_reserve(
        offered,
        sizes.size,
        choice.counts,
        budget.limit,
        unit,
        vision.budget_share,
        vision.max_pages,
    )
    if reserve <= 0:
        choice.selection = await select(budget)
        return choice
    selection = await select(budget.with_limit(budget.limit - reserve))
    choice.room = (budget.limit - selection.used) // unit
    kept = pages_of(best_first(grouped(selection)), drawn, sources, asked)
    plan = plan_images(kept, choice.room, vision.max_pages, sizes.size, choice.counts)
    if not plan.images:
        choice.notes.append(
            "no kept passage's drawn page fitted: the passages took the whole budget"
        )
        choice.selection = await select(budget)
        return choice
    choice.plan, choice.selection = plan, selection
    return choice
