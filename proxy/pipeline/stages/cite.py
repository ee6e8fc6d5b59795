"""Stage: the cited sources as a header, and as a "Sources:" block when the style asks for it."""

from __future__ import annotations

from proxy.pipeline.citing import distinct_places, sources_block, sources_header
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services


async def cite_sources(exchange: Exchange, services: Services) -> None:
    if exchange.search_results:
        # The prompt numbers passages; what the client sees names places, each once.
        exchange.search_results = distinct_places(exchange.search_results)
        exchange.citations = list(dict.fromkeys(exchange.citations))
    names = [str(document["title"]) for document in exchange.whole_documents]
    if not exchange.citations and not names:
        return
    exchange.response_headers["X-Enrich-Sources"] = sources_header([*exchange.citations, *names])
    if exchange.options.citations in ("inline", "both"):
        exchange.sources_block = sources_block(exchange.sources)
