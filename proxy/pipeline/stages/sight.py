"""Stage: whether the model sees images, learnt once for a request whose documents' drawn pages
may go as images; the `passages` and `pages` stages read it from the exchange."""

from __future__ import annotations

from proxy.images.plan import PageSizes
from proxy.pipeline.answer_shape import completion_shaped
from proxy.pipeline.decision import ImagesRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.page_state import PagesState
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import INJECT, RETRIEVAL


def wants_images(exchange: Exchange) -> bool:
    """Whether the request (`enrich.images`) or one of its files (Responses' `detail`) lets
    pages go as images."""
    asked: set[str] = {exchange.options.images}
    asked.update(ref.detail for ref in [*exchange.new_refs, *exchange.old_refs] if ref.detail)
    return asked != {"none"}


def may_show_pages(exchange: Exchange, services: Services) -> bool:
    """Documents go into the prompt (whole or as passages) and an image has a place there:
    not `images: none`, not a rendered text prompt, not a base model's completion shape."""
    if exchange.strategy not in (INJECT, RETRIEVAL):
        return False
    if not (exchange.new_documents or exchange.old_refs) or not wants_images(exchange):
        return False
    if services.settings.model_settings(exchange.model).adapter == "text":
        return False  # a rendered text prompt has no place for an image
    return not completion_shaped(exchange)  # nor has a base model's completion-shaped prompt


async def learn_sight(exchange: Exchange, services: Services) -> None:
    """The stage: the model's sight asked once (cached per model), written into the decision
    record; for a model that sees, the request's page state, with the sizes its image cost
    and `vision.low_px`/`high_px` give a page at each detail."""
    if not may_show_pages(exchange, services):
        return
    sight = await services.vision.sight(exchange.model)
    found = sight.to_json()
    exchange.decision.images = ImagesRecord(
        sees=sight.sees,
        source=sight.source,
        image_tokens=found["image_tokens"],
        image_tokens_source=found["image_tokens_source"],
        estimated=found["estimated"],
        asked=exchange.options.images,
    )
    if sight.sees:
        vision = services.settings.vision
        exchange.pages = PagesState(sight, PageSizes(sight.cost, vision.low_px, vision.high_px))
