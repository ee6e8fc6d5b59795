"""Context shifting: drop the oldest whole turns until the rendered prompt fits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest

Counter = Callable[[list[dict[str, Any]]], Awaitable[int]]
"""Counts the tokens of the messages as rendered for the model (may be an HTTP call)."""


class ContextOverflow(BadRequest):
    """Even with every droppable turn gone the prompt does not fit (400)."""

    def __init__(self, tokens: int, limit: int, dropped: int, hint: str = "") -> None:
        super().__init__(
            f"the prompt needs {tokens} tokens after dropping {dropped} older messages, "
            f"but the context allows {limit}" + (f"; {hint}" if hint else ""),
            code="context_length_exceeded",
            param="messages",
        )
        self.dropped = dropped
        self.tokens = tokens
        self.limit = limit


@dataclass(frozen=True)
class ShiftResult:
    messages: list[dict[str, Any]]
    dropped: int
    tokens: int


def _split(messages: Sequence[Mapping[str, Any]]) -> tuple[int, list[list[int]], int]:
    """Leading system count, droppable turns (lists of indexes), start of the kept tail."""
    head = 0
    while head < len(messages) and messages[head].get("role") in ("system", "developer"):
        head += 1
    users = [i for i in range(head, len(messages)) if messages[i].get("role") == "user"]
    tail = users[-1] if users else head  # no user message: nothing is safe to drop
    turns: list[list[int]] = []
    for i in range(head, tail):
        # A turn opens at a user message; what precedes the first one is a turn of its own.
        if not turns or messages[i].get("role") == "user":
            turns.append([])
        turns[-1].append(i)
    return head, turns, tail


async def shift_context(
    messages: Sequence[Mapping[str, Any]], count: Counter, limit: int
) -> ShiftResult:
    """Drop the fewest oldest turns so that `count(messages) <= limit`.

    Never drops the leading system message(s) nor the last user message and what follows.
    Dropping more turns never adds tokens, so the smallest fitting number of turns is found
    by binary search: 1 count when it already fits, else about 2 + log2(turns) counts.
    """
    msgs = [dict(m) for m in messages]
    head, turns, tail = _split(msgs)
    cache: dict[int, int] = {}

    def keep(k: int) -> list[dict[str, Any]]:
        kept = [i for turn in turns[k:] for i in turn]
        return msgs[:head] + [msgs[i] for i in kept] + msgs[tail:]

    async def tokens(k: int) -> int:
        if k not in cache:
            cache[k] = await count(keep(k))
        return cache[k]

    def dropped(k: int) -> int:
        return sum(len(t) for t in turns[:k])

    if await tokens(0) <= limit:
        return ShiftResult(msgs, 0, cache[0])
    n = len(turns)
    if n == 0 or await tokens(n) > limit:
        raise ContextOverflow(cache[n], limit, dropped(n))
    bad, good = 0, n
    while good - bad > 1:
        mid = (bad + good) // 2
        if await tokens(mid) <= limit:
            good = mid
        else:
            bad = mid
    return ShiftResult(keep(good), dropped(good), cache[good])
