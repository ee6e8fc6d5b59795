"""Retrieval with page images: the budget kept back for the kept passages' drawn pages, and
given back when none of them is drawn (driven with stubs of the parse workers and the upstream)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from proxy.config import load_settings
from proxy.documents.model import DrawnPage, Page, ParsedDocument
from proxy.documents.page_images import Survey
from proxy.images.plan import PageSizes
from proxy.pipeline import page_selection as stage
from proxy.pipeline.decision import ImagesRecord
from proxy.pipeline.exchange import Caller, Exchange
from proxy.pipeline.page_attach import record_choice
from proxy.pipeline.page_state import PagesState
from proxy.retrieval.budget import Passage, PassageBudget, PassageSelection
from proxy.upstream.image_cost import ImageCost
from proxy.upstream.vision import Sight

DOCUMENT = ParsedDocument("a.pdf", "sha-a", "pdf", "PyMuPDF", (Page(1, "x"), Page(2, "y")))


def passage(rank: int, page: int) -> Passage:
    return Passage(0, rank, f"passage {rank}", {"page_start": page, "page_end": page})


@pytest.fixture
def stubbed() -> Exchange:
    sight = Sight(True, "test", ImageCost("gemma3", "test", estimated=False))
    exchange = Exchange("r", {"model": "m", "messages": []})
    settings = load_settings(None, environ={})
    vision = settings.vision
    # What the `sight` stage leaves for a model that sees; the document's bytes at hand.
    exchange.pages = PagesState(sight, PageSizes(sight.cost, vision.low_px, vision.high_px))
    exchange.pages.data["sha-a"] = b"%PDF-"
    exchange.decision.images = ImagesRecord(True, "test", "gemma3", "test", False, "auto")

    async def surveyed(document: Any, data: bytes, owner: str = "") -> Survey:
        return Survey((DrawnPage(2, 612, 792, "figure", 0.2),))

    async def counts(model: Any, sight: Any, sizes: Any) -> dict[Any, int]:
        return {size: 258 for size in sizes}

    exchange.status = lambda line: None
    services = SimpleNamespace(
        settings=settings,
        vision=SimpleNamespace(counts=counts),
        page_images=SimpleNamespace(surveyed=surveyed),
    )
    exchange.services = services  # type: ignore[attr-defined]
    return exchange


async def run(exchange: Exchange, kept_page: int) -> tuple[list[int], PassageSelection]:
    limits: list[int] = []

    async def select(budget: PassageBudget) -> PassageSelection:
        limits.append(budget.limit)
        chosen = [passage(0, kept_page)]
        return PassageSelection(chosen, [1], 0, used=300)

    async def measure(text: str) -> int:
        return len(text)

    offered = [[passage(0, kept_page), passage(1, 2)]]
    selection = await stage.select_with_pages(
        exchange,
        exchange.services,  # type: ignore[attr-defined]
        [DOCUMENT],
        offered,
        PassageBudget(2048, measure),
        "tokens",
        select,
    )
    assert exchange.pages is not None and exchange.pages.choice is not None
    record_choice(exchange, exchange.pages.choice)  # as the `pages` stage records it
    return limits, selection


async def test_room_is_kept_back_for_a_drawn_page_of_a_kept_passage(stubbed: Exchange) -> None:
    limits, _ = await run(stubbed, kept_page=2)
    assert limits == [2048 - (258 + 16)]  # the page's cost (with its label) kept back, once
    assert stubbed.pages is not None and stubbed.pages.plan is not None
    assert [image.page.number for image in stubbed.pages.plan.images] == [2]
    assert stubbed.decision.images is not None and stubbed.decision.images.room == 2048 - 300


async def test_the_budget_is_given_back_when_no_kept_passage_is_on_a_drawn_page(
    stubbed: Exchange,
) -> None:
    limits, _ = await run(stubbed, kept_page=1)
    assert limits == [2048 - (258 + 16), 2048]  # selected again with the whole budget
    assert stubbed.pages is not None and stubbed.pages.plan is None
    assert stubbed.decision.images is not None
    assert "the passages took the whole budget" in stubbed.decision.images.note


async def test_the_edges_handed_down_ask_in_the_callers_turn_for_the_model_and_its_sight(
    stubbed: Exchange,
) -> None:
    """The survey waits for a parse worker in the caller's own turn; the counts are asked for
    the request's model and the sight the `sight` stage learnt."""
    asked: list[tuple[str, Any]] = []
    services = stubbed.services  # type: ignore[attr-defined]
    surveyed, counts = services.page_images.surveyed, services.vision.counts

    async def surveyed_for(document: Any, data: bytes, owner: str = "") -> Survey:
        asked.append(("survey", (document.name, owner)))
        return await surveyed(document, data, owner)

    async def counts_for(model: Any, sight: Any, sizes: Any) -> dict[Any, int]:
        asked.append(("counts", (model, sight)))
        return await counts(model, sight, sizes)

    services.page_images.surveyed, services.vision.counts = surveyed_for, counts_for
    stubbed.caller = Caller("alice")
    await run(stubbed, kept_page=2)
    assert stubbed.pages is not None
    assert asked == [("survey", ("a.pdf", "alice")), ("counts", ("m", stubbed.pages.sight))]
