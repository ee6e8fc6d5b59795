"""The most tokens a conversation can be, whatever the tokenizer; the room its answer needs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from proxy.config import UpstreamKind
from proxy.upstream.kinds import profile
from proxy.upstream.kinds.profile import ANSWER_RESERVE

# Template overhead per message no chat format exceeds (role markers, separators, BOS/EOS).
TEMPLATE_TOKENS_PER_MESSAGE = 16
# Conversations longer than this are rendered in a thread: a template runs per message, and
# context shifting renders the conversation once per step of its search.
OFF_LOOP_MESSAGES = 64


def long_conversation(messages: list[dict[str, Any]]) -> bool:
    """Messages, and tool calls in them, beyond what the event loop walks in passing."""
    count = len(messages)
    for message in messages:
        calls = message.get("tool_calls")
        count += len(calls) if isinstance(calls, list) else 0
        if count > OFF_LOOP_MESSAGES:
            return True
    return False


def token_bound(messages: list[dict[str, Any]]) -> int | None:
    """The most tokens the conversation can be, whatever the tokenizer; None when it has parts
    other than text (images), which only counting can tell.

    Every token of a byte-level or byte-fallback tokenizer covers at least one UTF-8 byte, so
    bytes plus a per-message allowance bound the count: short chats skip the tokenize calls.
    """
    size = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, str):
            size += len(content.encode())
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    size += len(part["text"].encode())
                else:
                    return None  # images and other parts: count properly
        calls = message.get("tool_calls")
        if calls:
            # Rendered into the prompt too (as JSON in most formats' conventions); encoded call
            # by call, so that 40,000 calls are not one call of the encoder holding the GIL.
            items = calls if isinstance(calls, list) else [calls]
            size += sum(len(json.dumps(call, ensure_ascii=False).encode()) for call in items)
            size += len(items) + 1  # the list's commas and brackets
        size += TEMPLATE_TOKENS_PER_MESSAGE
    return size


def surely_fits(messages: list[dict[str, Any]], limit: int) -> bool:
    """True when the conversation cannot exceed `limit` tokens, whatever the tokenizer."""
    bound = token_bound(messages)
    return bound is not None and bound <= limit


async def bound_of(messages: list[dict[str, Any]]) -> int | None:
    """`token_bound`, in a thread for a long conversation (tool calls are JSON-encoded)."""
    if long_conversation(messages):
        return await asyncio.to_thread(token_bound, messages)
    return token_bound(messages)


async def surely_fits_async(messages: list[dict[str, Any]], limit: int) -> bool:
    """`surely_fits`, in a thread for a long conversation."""
    bound = await bound_of(messages)
    return bound is not None and bound <= limit


def answer_budget(body: dict[str, Any]) -> int:
    value = body.get("max_tokens") or body.get("max_completion_tokens") or 0
    return value if isinstance(value, int) and value > 0 else 0


def answer_room(body: dict[str, Any], kind: UpstreamKind) -> int:
    """Tokens the answer needs beside the prompt: the request's max_tokens; on servers that
    cut a prompt leaving too little room, a reserve when the request sets none."""
    return answer_budget(body) or (ANSWER_RESERVE if profile(kind).truncates else 0)
