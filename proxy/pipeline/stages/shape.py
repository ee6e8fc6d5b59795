"""Stage: which prompt the documents go in — the chat prompts, or a base model's completion."""

from __future__ import annotations

from proxy.pipeline.answer_shape import plan_shape
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import INJECT, RETRIEVAL


async def shape_prompt(exchange: Exchange, services: Services) -> None:
    """The stage: when the proxy puts the documents into the prompt itself (not when the model
    is offered its search function: a model that calls tools follows instructions)."""
    if exchange.model_search is None and exchange.strategy in (INJECT, RETRIEVAL):
        await plan_shape(exchange, services)
