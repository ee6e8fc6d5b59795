"""Stage: the body must be a chat completion request we can work on."""

from __future__ import annotations

from proxy.errors import BadRequest
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.images import sorted_image_parts
from proxy.pipeline.services import Services


def check_count(count: int, limit: int, param: str) -> None:
    """Refuse a conversation longer than server.max_messages before any stage walks it."""
    if count > limit:
        raise BadRequest(
            f"'{param}' has {count} items; at most {limit} are accepted (server.max_messages)",
            param=param,
            code="too_many_messages",
        )


async def validate_request(exchange: Exchange, services: Services) -> None:
    messages = exchange.body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest(
            "'messages' must be a non-empty array of messages",
            param="messages",
            code="invalid_value",
        )
    check_count(len(messages), services.settings.server.max_messages, "messages")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise BadRequest(
                f"messages[{index}] must be an object",
                param=f"messages[{index}]",
                code="invalid_type",
            )
        if not isinstance(message.get("role"), str):
            raise BadRequest(
                f"messages[{index}].role must be a string",
                param=f"messages[{index}].role",
                code="invalid_value",
            )
        content = message.get("content")
        if content is not None and not isinstance(content, str | list):
            raise BadRequest(
                f"messages[{index}].content must be a string or an array of content parts",
                param=f"messages[{index}].content",
                code="invalid_type",
            )
    sorted_messages, moved = sorted_image_parts(messages)
    if moved:  # documents sent as pictures are read as the documents they are
        exchange.body["messages"] = sorted_messages
        exchange.decision.warnings.extend(moved)
    if "stream" in exchange.body and not isinstance(exchange.body["stream"], bool):
        raise BadRequest("'stream' must be a boolean", param="stream", code="invalid_type")
