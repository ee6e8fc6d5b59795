"""Stage: the drawn pages of the documents (charts, figures, scans) as images for a model that
sees (the `sight` stage) — planned here for full content, or taken from retrieval's plan
(proxy.pipeline.page_selection chooses them; proxy.pipeline.page_attach renders and attaches
them). Text-only models get exactly what they got before."""

from __future__ import annotations

from proxy.pipeline.exchange import Exchange
from proxy.pipeline.page_attach import record_choice, render_and_attach
from proxy.pipeline.page_selection import plan_full_content
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import INJECT


async def send_pages(exchange: Exchange, services: Services) -> None:
    """The stage: plan (full content) or take retrieval's plan, record, render, attach, cite."""
    if exchange.pages is not None and exchange.strategy == INJECT:
        await plan_full_content(exchange, services)
    state = exchange.pages
    if state is None or state.choice is None:
        return
    record_choice(exchange, state.choice)
    if state.plan is None or not state.plan.images:
        return
    await render_and_attach(exchange, services, state, state.plan)
