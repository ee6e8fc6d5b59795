"""Stage: the cited sources as a header, and as a "Sources:" block when the style asks for it."""

from __future__ import annotations

from proxy.pipeline.citing import sources_block, sources_header
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services


async def cite_sources(exchange: Exchange, services: Services) -> None:
    if not exchange.citations:
        return
    exchange.response_headers["X-Enrich-Sources"] = sources_header(exchange.citations)
    if exchange.options.citations in ("inline", "both"):
        exchange.sources_block = sources_block(exchange.search_results)
