"""Which prompt the documents go in: the chat prompts, or the completion shape (base models)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.config import PromptShape
from proxy.pipeline.decision import PromptRecord
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.services import Services
from proxy.upstream.facts import Fact

CHAT = "chat"
COMPLETION = "completion"
TOOL_FIELDS = ("tools", "functions")


@dataclass(frozen=True)
class ShapeChoice:
    """The prompt's shape and the reason, in words for the decision record and /ui."""

    shape: str
    reason: str


def has_images(messages: Sequence[Any]) -> bool:
    """Whether any message holds an image part (a text completion cannot carry one)."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            isinstance(part, dict) and part.get("type") in ("image_url", "input_image")
            for part in content
        ):
            return True
    return False


def choose_shape(
    asked: PromptShape,
    instruct: Fact[bool | None],
    *,
    adapter: str,
    tools: bool,
    images: bool,
    fixed_route: bool,
) -> ShapeChoice:
    """The chat prompts (proxy/pipeline/prompts.py) are written for a model that follows
    instructions; a base model (not instruction-tuned) continues text, so it gets a text in
    which the answer comes next."""
    if fixed_route:
        return ShapeChoice(CHAT, "the body goes to the caller's own route (native Responses)")
    if asked == CHAT:
        return ShapeChoice(CHAT, "asked for (prompt: chat)")
    if tools:
        return ShapeChoice(CHAT, "the request offers tools, which a text completion cannot call")
    if images:
        return ShapeChoice(CHAT, "the request holds images, which a text completion cannot carry")
    if asked == COMPLETION:
        return ShapeChoice(COMPLETION, "asked for (prompt: completion)")
    if adapter == "text":
        return ShapeChoice(CHAT, "the model's instruct format renders it (adapter: text)")
    if instruct.value is False:
        return ShapeChoice(
            COMPLETION,
            f"the model is not instruction-tuned ({instruct.source}): it continues text rather "
            "than follow instructions, so the question ends a text where its answer comes next",
        )
    if instruct.value is None:
        return ShapeChoice(
            CHAT, f"whether the model is instruction-tuned is unknown ({instruct.source})"
        )
    return ShapeChoice(CHAT, f"the model is instruction-tuned ({instruct.source})")


async def plan_shape(exchange: Exchange, services: Services) -> ShapeChoice:
    """The request's shape, written into the decision record."""
    asked = exchange.options.prompt
    instruct: Fact[bool | None] = Fact(None, False, "not asked: the request chose its prompt")
    if asked == "auto" and not exchange.fixed_route:
        instruct = (await services.abilities.of(exchange.model)).instruct
    tools = any(exchange.body.get(field) for field in TOOL_FIELDS)
    images = has_images(exchange.messages)
    choice = choose_shape(
        asked,
        instruct,
        adapter=services.settings.model_settings(exchange.model).adapter,
        tools=tools,
        images=images,
        fixed_route=exchange.fixed_route,
    )
    exchange.decision.prompt = PromptRecord(choice.shape, choice.reason)
    return choice


def completion_shaped(exchange: Exchange) -> bool:
    """Whether the documents go in the completion shape (decided by `plan_shape`)."""
    record = exchange.decision.prompt
    return record is not None and record.shape == COMPLETION
