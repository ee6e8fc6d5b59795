"""How a request fills the context window: counted parts, estimated parts, after shifting."""

from __future__ import annotations

import json
from typing import Any

from proxy.pipeline.bounds import TEMPLATE_TOKENS_PER_MESSAGE, surely_fits
from proxy.pipeline.window import PromptSizes, after_shift, prompt_sizes, share_window


def test_prompt_sizes_split_system_history_documents_question() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Be brief."},  # 9
        {"role": "user", "content": "hello"},  # 5
        {"role": "assistant", "content": "hi there"},  # 8
        {"role": "user", "content": [{"type": "text", "text": "DOCS + frame\nUser query: why?"}]},
    ]
    sizes = prompt_sizes(messages, "why?", injected=True)
    assert sizes == PromptSizes(system=9, history=13, documents=25, question=4)
    # Without injection the whole last user message is the question.
    assert prompt_sizes(messages, "why?", injected=False).question == 29


def test_counted_full_content_and_the_rest_of_the_window() -> None:
    sizes = PromptSizes(system=100, history=300, documents=4_100, question=40)
    share = share_window(
        sizes,
        context_window=8_192,
        conversation_tokens=130,  # system + history + question, template applied
        question_tokens=10,
        counted_files=(1_000, 4_000),  # 4 characters per token
        full_content=True,
        max_tokens=512,
    )
    assert share.question == 10
    assert (share.system, share.history) == (30, 90)  # 120 shared by characters 100:300
    assert share.documents == 1_000 + 25  # the frame's 100 characters at the files' rate
    assert share.answer_room == 8_192 - (30 + 90 + 1_025 + 10)
    assert share.estimated == ["system", "history"]
    assert "frame (100 characters) estimated" in share.note


def test_nothing_counted_is_all_estimated_at_four_characters_per_token() -> None:
    sizes = PromptSizes(system=0, history=0, documents=0, question=41)
    share = share_window(
        sizes,
        context_window=None,
        conversation_tokens=None,
        question_tokens=None,
        counted_files=None,
        full_content=False,
        max_tokens=None,
    )
    assert share.question == 11
    assert share.answer_room is None
    assert share.estimated == ["question"]
    assert "4.00 characters per token" in share.note


def test_passages_are_estimated_at_the_rate_of_the_counted_files() -> None:
    sizes = PromptSizes(system=0, history=0, documents=900, question=20)
    share = share_window(
        sizes,
        context_window=4_096,
        conversation_tokens=12,
        question_tokens=5,
        counted_files=(3_000, 9_000),  # 3 characters per token
        full_content=False,
        max_tokens=None,
    )
    assert share.documents == 300
    assert share.estimated == ["documents"]
    # No system message: the conversation's other tokens are all history, and counted.
    assert (share.system, share.history) == (0, 7)


def test_after_shift_the_counted_prompt_leaves_the_history_and_the_room() -> None:
    sizes = PromptSizes(system=40, history=40_000, documents=0, question=40)
    share = share_window(
        sizes,
        context_window=4_096,
        conversation_tokens=10_030,
        question_tokens=10,
        counted_files=None,
        full_content=False,
        max_tokens=1_000,
    )
    assert share.answer_room == 0
    shifted = after_shift(share, prompt_tokens=3_000, dropped=12)
    assert shifted.history == 3_000 - shifted.system - shifted.question
    assert shifted.answer_room == 1_096
    assert "12 old messages dropped" in shifted.note


def test_a_conversation_surely_fits_by_its_bytes_and_a_per_message_allowance() -> None:
    def fits(messages: list[dict[str, Any]], limit: int) -> tuple[bool, bool]:
        return surely_fits(messages, limit), surely_fits(messages, limit - 1)

    per_message = TEMPLATE_TOKENS_PER_MESSAGE
    # Exactly the bytes plus the allowance fit; one less does not.
    assert fits([{"role": "user", "content": "abcé"}], 5 + per_message) == (True, False)
    parts = [{"type": "text", "text": "ab"}, {"type": "text", "text": "cde"}]
    assert fits([{"role": "user", "content": parts}], 5 + per_message) == (True, False)
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    with_calls = [{"role": "assistant", "content": "x", "tool_calls": calls}]
    size = 1 + len(json.dumps(calls).encode()) + per_message
    assert fits(with_calls, size) == (True, False)
    two = [{"role": "user", "content": "ab"}, {"role": "assistant", "content": "c"}]
    assert fits(two, 3 + 2 * per_message) == (True, False)
    # An image cannot be bounded by bytes: it is always counted.
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert surely_fits([{"role": "user", "content": [image]}], 10**9) is False
