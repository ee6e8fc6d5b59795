"""Stage: what retrieval searches — documents, question, conversation, standalone question."""

from __future__ import annotations

from proxy.pipeline.candidates import index_sources
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import last_user_index
from proxy.pipeline.retrieval_state import Searches, Translations
from proxy.pipeline.searches import conversation_texts
from proxy.pipeline.services import Services
from proxy.pipeline.standalone_question import standalone_question
from proxy.pipeline.strategy import RETRIEVAL
from proxy.retrieval.history import earlier_turns


async def plan_searches(exchange: Exchange, services: Services) -> None:
    """The stage: when retrieval was decided and the model was not offered its own searches."""
    if exchange.strategy != RETRIEVAL or exchange.search_offered:
        return
    exchange.status("Retrieving relevant citations for user query...")
    sources = await index_sources(exchange, services)
    translations = Translations.of(exchange.query)
    # A follow-up that leans on its conversation: its standalone question, written by the model.
    searching = bool(sources) or exchange.store_search is not None
    # The conversation before the question, read once for both.
    earlier = earlier_turns(exchange.messages, last_user_index(exchange.messages))
    standalone = await standalone_question(exchange, services, earlier) if searching else None
    texts = conversation_texts(exchange, services, earlier, standalone)
    exchange.searches = Searches(sources, texts, standalone, translations)
