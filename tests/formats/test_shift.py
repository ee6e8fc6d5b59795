"""Context shifting drops whole oldest turns, with O(log n) counts, and refuses what can't fit."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.formats import ContextOverflow, shift_context


class Counter:
    """Counts one token per character of content plus 4 per message; records each call."""

    def __init__(self) -> None:
        self.calls = 0

    async def __call__(self, messages: list[dict[str, Any]]) -> int:
        self.calls += 1
        return sum(4 + len(m.get("content") or "") for m in messages)


def msg(role: str, n: int, tag: str = "") -> dict[str, Any]:
    return {"role": role, "content": (tag or role[0]) * n}


def conversation(turns: int) -> list[dict[str, Any]]:
    out = [msg("system", 6)]  # 10 tokens
    for i in range(turns):
        out += [msg("user", 6, str(i % 10)), msg("assistant", 16)]  # 30 tokens a turn
    return [*out, msg("user", 6, "L")]  # 10 tokens


async def test_fits_already_one_call() -> None:
    count = Counter()
    conv = conversation(3)  # 10 + 90 + 10 = 110
    result = await shift_context(conv, count, 110)  # exactly at the limit
    assert result.messages == conv and result.dropped == 0 and result.tokens == 110
    assert count.calls == 1


async def test_one_over_drops_one_turn() -> None:
    count = Counter()
    result = await shift_context(conversation(3), count, 109)
    assert result.dropped == 2 and result.tokens == 80
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant"] * 1 + [
        "user",
        "assistant",
        "user",
    ]
    assert result.messages[1]["content"] == "111111"  # turn 0 went, turn 1 stays


async def test_whole_turns_with_tool_messages() -> None:
    conv = [
        msg("system", 6),
        msg("user", 6),
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        msg("tool", 6),
        msg("assistant", 6),
        msg("user", 6, "2"),
        msg("assistant", 6),
        msg("user", 6, "L"),
    ]
    result = await shift_context(conv, Counter(), 45)
    assert result.dropped == 4
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "user"]


async def test_only_system_and_last_user() -> None:
    conv = [msg("system", 6), msg("user", 6)]
    assert (await shift_context(conv, Counter(), 20)).dropped == 0
    with pytest.raises(ContextOverflow) as info:
        await shift_context(conv, Counter(), 19)
    err = info.value
    assert isinstance(err, BadRequest) and err.code == "context_length_exceeded"
    assert "20" in err.message and "19" in err.message


async def test_nothing_droppable_after_last_user() -> None:
    # What follows the last user message (an assistant prefill) is kept too.
    conv = [msg("user", 6), msg("assistant", 40)]
    with pytest.raises(ContextOverflow):
        await shift_context(conv, Counter(), 30)


async def test_minimum_does_not_fit() -> None:
    count = Counter()
    with pytest.raises(ContextOverflow) as info:
        await shift_context(conversation(5), count, 15)
    assert info.value.tokens == 20 and info.value.limit == 15
    assert count.calls == 2


async def test_leading_assistant_greeting_is_dropped_first() -> None:
    conv = [
        msg("system", 6),
        msg("assistant", 6),
        msg("user", 6),
        msg("assistant", 6),
        msg("user", 6),
    ]
    result = await shift_context(conv, Counter(), 40)
    assert [m["role"] for m in result.messages] == ["system", "user", "assistant", "user"]


@pytest.mark.parametrize("limit", range(20, 3030, 137))
async def test_binary_search_is_minimal_and_cheap(limit: int) -> None:
    count = Counter()
    conv = conversation(100)  # 3020 tokens
    result = await shift_context(conv, count, limit)
    assert result.tokens <= limit
    assert result.dropped % 2 == 0
    if result.dropped:  # one turn fewer dropped would not fit
        assert result.tokens + 30 > limit
    assert count.calls <= 2 + 7  # 2 + ceil(log2(100))
