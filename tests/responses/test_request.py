"""Responses requests and their input items → chat requests, with plain values."""

from __future__ import annotations

import pytest

from proxy.errors import BadRequest
from proxy.responses.items import input_messages, translate_input
from proxy.responses.request import Asked, chat_request


def test_string_input_is_one_user_message() -> None:
    chat, asked = chat_request({"model": "m", "input": "hi"})
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert asked == Asked(model="m")


def test_parts_become_chat_parts_and_files_stay_for_the_references_stage() -> None:
    messages = input_messages(
        [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "look"},
                    {
                        "type": "input_image",
                        "image_url": "data:image/png;base64,AA",
                        "detail": "low",
                    },
                    {
                        "type": "input_file",
                        "file_id": "file-1",
                        "filename": "a.pdf",
                        "detail": "low",
                    },
                    {"type": "input_file", "file_id": "file-2", "purpose": "x"},
                ],
            }
        ]
    )
    assert messages == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AA", "detail": "low"},
                },
                # An input_file's detail chooses how its drawn pages go to a vision model
                # (checked by the references stage); other fields are not kept.
                {"type": "input_file", "file_id": "file-1", "filename": "a.pdf", "detail": "low"},
                {"type": "input_file", "file_id": "file-2"},
            ],
        }
    ]


def test_roles_history_and_tool_turns() -> None:
    messages, origins = translate_input(
        [
            {
                "type": "message",
                "role": "developer",
                "content": [{"type": "input_text", "text": "d"}],
            },
            {"role": "user", "content": "q"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"role": "assistant", "content": [{"type": "output_text", "text": "let me see"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": '{"a":1}'},
            {"type": "function_call_output", "call_id": "c1", "output": "one"},
            {
                "type": "function_call_output",
                "call_id": "c2",
                "output": [{"type": "input_text", "text": "two"}],
            },
        ]
    )
    assert messages[0] == {"role": "system", "content": "d"}
    assert messages[1] == {"role": "user", "content": "q"}
    # Both calls join the assistant turn they were made in.
    assistant = messages[2]
    assert assistant["content"] == "let me see"
    assert [call["id"] for call in assistant["tool_calls"]] == ["c1", "c2"]
    assert assistant["tool_calls"][1]["function"] == {"name": "g", "arguments": '{"a":1}'}
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
    ]
    assert origins == [0, 1, 3, 6, 7]  # the reasoning item and the merged call give none


def test_call_without_an_assistant_turn_is_its_own_message() -> None:
    messages = input_messages(
        [
            {"role": "user", "content": "q"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        ]
    )
    assert messages[1]["role"] == "assistant" and messages[1]["content"] is None


def test_every_option_translated() -> None:
    chat, asked = chat_request(
        {
            "model": "m",
            "input": "q",
            "instructions": "be brief",
            "max_output_tokens": 40,
            "temperature": 0.2,
            "top_p": 0.9,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "parallel_tool_calls": False,
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {}, "strict": True}},
            "metadata": {"k": "v"},
            "user": "u1",
            "stream": True,
            "store": True,
            "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "low"},
            "top_k": 5,
            "enrich": {"strategy": "none"},
        }
    )
    assert chat == {
        "model": "m",
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q"}],
        "top_k": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 40,
        "temperature": 0.2,
        "top_p": 0.9,
        "tools": [
            {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        ],
        "tool_choice": {"type": "function", "function": {"name": "f"}},
        "parallel_tool_calls": False,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "s", "schema": {}, "strict": True},
        },
        "user": "u1",
        "enrich": {"strategy": "none"},
    }
    assert asked.instructions == "be brief" and asked.metadata == {"k": "v"}
    assert asked.max_output_tokens == 40 and asked.parallel_tool_calls is False
    assert asked.tool_choice == {"type": "function", "name": "f"} and asked.stream


def test_json_object_and_text_formats() -> None:
    chat, _ = chat_request({"input": "q", "text": {"format": {"type": "json_object"}}})
    assert chat["response_format"] == {"type": "json_object"}
    chat, _ = chat_request({"input": "q", "text": {"format": {"type": "text"}, "verbosity": "low"}})
    assert "response_format" not in chat


@pytest.mark.parametrize(
    ("body", "param", "words"),
    [
        ({"input": "q", "previous_response_id": "resp_1"}, "previous_response_id", "keeps no"),
        ({"input": "q", "conversation": "conv_1"}, "conversation", "keeps no"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0]", "keeps no"),
        ({"input": "q", "background": True}, "background", "not supported"),
        ({}, "input", "required"),
        ({"input": []}, "input", "non-empty"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "role"),
        (
            {"input": [{"role": "user", "content": [{"type": "audio"}]}]},
            "input[0].content[0]",
            "audio",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0]",
            "image_url",
        ),
        ({"input": [{"type": "web_search_call"}]}, "input[0]", "web_search_call"),
        ({"input": "q", "tools": [{"type": "web_search"}]}, "tools[0]", "function tools"),
        ({"input": "q", "tool_choice": "sometimes"}, "tool_choice", "auto, none"),
        ({"input": "q", "max_output_tokens": 0}, "max_output_tokens", "positive"),
        ({"input": "q", "temperature": "hot"}, "temperature", "number"),
        ({"input": "q", "stream": "yes"}, "stream", "boolean"),
        ({"input": "q", "text": {"format": {"type": "yaml"}}}, "text.format", "json_schema"),
        (
            {"input": [{"role": "system", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0]",
            "text parts",
        ),
    ],
)
def test_bad_requests_name_the_field(body: dict[str, object], param: str, words: str) -> None:
    with pytest.raises(BadRequest) as caught:
        chat_request(body)
    assert caught.value.param == param
    assert words in caught.value.message


def test_more_input_items_than_the_cap_are_refused_before_any_is_translated() -> None:
    items = [{"role": "user", "content": "hi"}] * 3
    assert len(chat_request({"input": items}, max_items=3)[0]["messages"]) == 3
    for translate in (
        lambda: chat_request({"input": [*items, "not an item"]}, max_items=3),
        lambda: translate_input([*items, "not an item"], max_items=3),
    ):
        with pytest.raises(BadRequest) as raised:
            translate()
        error = raised.value
        assert (error.param, error.code) == ("input", "too_many_messages")
        assert error.message == "'input' has 4 items; at most 3 are accepted (server.max_messages)"


def test_many_function_calls_of_one_turn_are_one_assistant_message() -> None:
    calls = [
        {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"}
        for n in range(5000)
    ]
    messages = input_messages([{"role": "user", "content": "go"}, *calls])
    assert len(messages) == 2
    assert [call["id"] for call in messages[1]["tool_calls"]] == [f"c{n}" for n in range(5000)]
