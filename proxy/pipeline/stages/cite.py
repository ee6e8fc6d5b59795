"""Stage: the cited sources as a header, and as a "Sources:" block when the style asks for it."""

from __future__ import annotations

from proxy.pipeline.citing import name_sources
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services


async def cite_sources(exchange: Exchange, services: Services) -> None:
    name_sources(exchange)
