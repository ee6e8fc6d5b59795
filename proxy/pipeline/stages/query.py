"""Stage: what retrieval searches — documents, question, conversation, standalone question."""

from __future__ import annotations

from proxy.pipeline.candidates import index_sources
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.retrieval_state import Searches, Translations
from proxy.pipeline.services import Services
from proxy.pipeline.standalone_question import follow_up_searches
from proxy.pipeline.strategy import RETRIEVAL


async def plan_searches(exchange: Exchange, services: Services) -> None:
    """The stage: when retrieval was decided and the model was not offered its own searches."""
    if exchange.strategy != RETRIEVAL or exchange.search_offered:
        return
    exchange.status("Retrieving relevant citations for user query...")
    sources = await index_sources(exchange, services)
    translations = Translations.of(exchange.query)
    # A follow-up that leans on its conversation: its standalone question, written by the model.
    searching = bool(sources) or exchange.store_search is not None
    standalone, texts = await follow_up_searches(exchange, services, searching)
    exchange.searches = Searches(sources, texts, standalone, translations)
