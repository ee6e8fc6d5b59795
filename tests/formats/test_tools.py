"""Tool calls and tool results in every built-in format with a convention, compared with the
official templates; role alternation where the family requires it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from proxy.errors import BadRequest
from proxy.formats import FormatRegistry, render_prompt
from proxy.formats.tools import mistral_id
from tests.formats.official_templates import (
    LLAMA31_DATED_PREAMBLE,
    OFFICIAL,
    OFFICIAL_TOOLS,
)

REGISTRY = FormatRegistry()


def _raise(message: str) -> None:
    raise ValueError(message)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **_: Any) -> str:
    # transformers' chat-template `tojson` (not jinja's HTML-safe one).
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent)


HF_ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
HF_ENV.globals["raise_exception"] = _raise
HF_ENV.filters["tojson"] = _tojson


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    """A tool call as the OpenAI API carries it: arguments are JSON text."""
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


SYSTEM = {"role": "system", "content": "You are a helpful assistant"}
ONE_CALL = [
    {"role": "user", "content": "Weather in Oslo?"},
    {"role": "assistant", "content": None, "tool_calls": [call("call_8f2kQ9xZr", "weather", city="Oslo")]},  # noqa: E501
    {"role": "tool", "tool_call_id": "call_8f2kQ9xZr", "content": '{"temp": -3, "sky": "snø"}'},
    {"role": "assistant", "content": "It is -3 °C and snowing."},
    {"role": "user", "content": "Thanks!"},
]  # fmt: skip
TWO_CALLS = [
    {"role": "user", "content": "Oslo and Paris?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("call_Aa1Bb2Cc3Dd", "weather", city="Oslo", days=[1, 2]),
            call("call_Ee4Ff5Gg6Hh", "weather", city="Paris"),
        ],
    },
    {"role": "tool", "tool_call_id": "call_Aa1Bb2Cc3Dd", "content": "snow"},
    {"role": "tool", "tool_call_id": "call_Ee4Ff5Gg6Hh", "content": "rain"},
    {"role": "assistant", "content": "Snow in Oslo, rain in Paris."},
    {"role": "user", "content": "Which is warmer?"},
]
EMPTY_ARGS = [
    {"role": "user", "content": "What time is it?"},
    {"role": "assistant", "content": "Let me look.", "tool_calls": [call("call_0000now01", "now")]},
    {"role": "tool", "tool_call_id": "call_0000now01", "content": "12:00"},
    {"role": "assistant", "content": "Noon."},
    {"role": "user", "content": "ok"},
]


def official_view(name: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same conversation as the HF templates expect it: arguments as objects, Mistral's
    9-character ids, no null content."""
    mistral = name.startswith("mistral")
    out = []
    for message in messages:
        message = dict(message)
        if message.get("content") is None:
            message["content"] = ""
        if "tool_calls" in message:
            message["tool_calls"] = [
                {
                    "id": mistral_id(c["id"]) if mistral else c["id"],
                    "type": "function",
                    "function": {
                        "name": c["function"]["name"],
                        "arguments": json.loads(c["function"]["arguments"]),
                    },
                }
                for c in message["tool_calls"]
            ]
        if mistral and "tool_call_id" in message:
            message["tool_call_id"] = mistral_id(message["tool_call_id"])
        out.append(message)
    return out


def official(name: str, messages: list[dict[str, Any]]) -> str:
    template, bos, eos = OFFICIAL_TOOLS[name]
    rendered = HF_ENV.from_string(template).render(
        messages=official_view(name, messages),
        bos_token=bos,
        eos_token=eos,
        add_generation_prompt=True,
        tools=[] if name == "command-r" else None,
    )
    if name == "llama3":
        return rendered.replace(LLAMA31_DATED_PREAMBLE, "", 1)
    if name == "command-r":
        # Cut the template's own preamble turn and its closing instruction turn.
        _, _, body = rendered.partition("<|END_OF_TURN_TOKEN|>")
        instruction = body.rindex("<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>Write 'Action:'")
        end = body.index("<|END_OF_TURN_TOKEN|>", instruction) + len("<|END_OF_TURN_TOKEN|>")
        return bos + body[:instruction] + body[end:]
    return rendered


def ours(name: str, messages: list[dict[str, Any]]) -> str:
    return render_prompt(REGISTRY.get(name), messages, include_bos=True)


def with_system(name: str, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    # Command R's tool_use template puts the system text into its own preamble: compared
    # without one. The others are compared with one (Qwen and Mistral-Small add a default).
    return messages if name == "command-r" else [SYSTEM, *messages]


@pytest.mark.parametrize("name", sorted(OFFICIAL_TOOLS))
def test_one_tool_call_matches_official(name: str) -> None:
    messages = with_system(name, ONE_CALL)
    assert ours(name, messages) == official(name, messages)


@pytest.mark.parametrize("name", sorted(set(OFFICIAL_TOOLS) - {"llama3"}))
@pytest.mark.parametrize("conversation", ["two_calls", "empty_args"])
def test_parallel_calls_and_grouped_results_match_official(name: str, conversation: str) -> None:
    messages = with_system(name, {"two_calls": TWO_CALLS, "empty_args": EMPTY_ARGS}[conversation])
    assert ours(name, messages) == official(name, messages)


def test_llama3_refuses_parallel_calls_as_its_template_does() -> None:
    messages = [SYSTEM, *TWO_CALLS]
    with pytest.raises(ValueError, match="single tool-calls"):
        official("llama3", messages)
    with pytest.raises(
        BadRequest, match=r"one tool call per assistant message.*messages\[2\] has 2"
    ):
        ours("llama3", messages)


def test_the_conventions_as_text() -> None:
    prompts = {name: render_prompt(REGISTRY.get(name), ONE_CALL) for name in REGISTRY.names()}
    assert '{"name": "weather", "parameters": {"city": "Oslo"}}<|eot_id|>' in prompts["llama3"]
    assert (
        '<|end_header_id|>\n\n"{\\"temp\\": -3, \\"sky\\": \\"snø\\"}"<|eot_id|>'
        in prompts["llama3"]
    )
    assert (
        '[TOOL_CALLS] [{"name": "weather", "arguments": {"city": "Oslo"}, "id": "8f2kQ9xZr"}]</s>'
        in prompts["mistral-v3"]
    )
    assert (
        '[TOOL_RESULTS]{"content": {"temp": -3, "sky": "snø"}, "call_id": "8f2kQ9xZr"}'
        "[/TOOL_RESULTS]" in prompts["mistral-v3-tekken"]
    )
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "weather", "arguments": {"city": "Oslo"}}'
        "\n</tool_call><|im_end|>" in prompts["chatml"]
    )
    assert "<|im_start|>user\n<tool_response>\n" in prompts["chatml"]
    assert '\nAction:\n```json\n[\n    {\n        "tool_name": "weather",' in prompts["command-r"]
    # No family convention: the calls as JSON after the text, the result as a user turn.
    assert (
        '<start_of_turn>model\n[{"name": "weather", "arguments": {"city": "Oslo"}}]<end_of_turn>'
        in prompts["gemma"]
    )
    assert (
        '### Response:\n[{"name": "weather", "arguments": {"city": "Oslo"}}]' in prompts["alpaca"]
    )
    for name, prompt in prompts.items():
        assert "weather" in prompt and "Oslo" in prompt, name  # never silently dropped


def test_text_beside_calls_is_kept_where_the_convention_has_room() -> None:
    assert "<|im_start|>assistant\nLet me look.\n<tool_call>" in ours(
        "chatml", [SYSTEM, *EMPTY_ARGS]
    )
    assert "<|CHATBOT_TOKEN|>Let me look.\nAction:" in ours("command-r", EMPTY_ARGS)
    assert 'Let me look.\n[{"name": "now", "arguments": {}}]' in ours("gemma", EMPTY_ARGS)


def test_arguments_that_are_not_json_stay_text() -> None:
    messages = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "not json"}}],
        },
    ]
    assert '{"name": "f", "arguments": "not json"}' in ours("chatml", messages)


@pytest.mark.parametrize(
    "tool_calls",
    ["nope", [{"function": {"arguments": "{}"}}], [42], [{"function": {"name": ""}}]],
)
def test_malformed_tool_calls_are_a_400(tool_calls: Any) -> None:
    messages = [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": tool_calls}]
    with pytest.raises(BadRequest, match=r"messages\[1\]\.tool_calls"):
        ours("chatml", messages)


# -- role alternation ---------------------------------------------------------------------------

DOUBLE_USER = [
    {"role": "user", "content": "First part."},
    {"role": "user", "content": "Second part."},
    {"role": "assistant", "content": "One"},
    {"role": "assistant", "content": "Two"},
    {"role": "user", "content": "Go on."},
]
MERGED = [
    {"role": "user", "content": "First part.\n\nSecond part."},
    {"role": "assistant", "content": "One\n\nTwo"},
    {"role": "user", "content": "Go on."},
]


@pytest.mark.parametrize("name", ["mistral-v1", "mistral-v3", "mistral-v3-tekken", "gemma"])
def test_consecutive_messages_are_merged_as_the_official_template_needs(name: str) -> None:
    with pytest.raises(ValueError, match="alternate"):
        HF_ENV.from_string(OFFICIAL[name][0]).render(
            messages=DOUBLE_USER, bos_token="", eos_token="", add_generation_prompt=True
        )
    template, bos, eos = OFFICIAL[name]
    expected = HF_ENV.from_string(template).render(
        messages=MERGED, bos_token=bos, eos_token=eos, add_generation_prompt=True
    )
    assert render_prompt(REGISTRY.get(name), DOUBLE_USER, include_bos=True) == expected


def test_formats_without_the_rule_keep_every_message() -> None:
    assert ours("chatml", DOUBLE_USER).count("<|im_start|>user") == 3


@pytest.mark.parametrize("name", ["mistral-v3", "mistral-v7", "gemma"])
def test_a_conversation_that_cannot_alternate_is_a_400(name: str) -> None:
    starts_with_assistant = [
        {"role": "assistant", "content": "Hello, I am here."},
        {"role": "user", "content": "Hi"},
    ]
    with pytest.raises(BadRequest, match=r"alternate.*messages\[0\] is a assistant turn"):
        ours(name, starts_with_assistant)


def test_user_turns_split_by_a_tool_exchange_cannot_be_merged() -> None:
    messages = [*ONE_CALL[:3], {"role": "user", "content": "And tomorrow?"}]
    with pytest.raises(BadRequest, match=r"messages\[3\] is a user turn"):
        ours("mistral-v3", messages)


def test_gemma_tool_results_become_user_turns_merged_with_the_next() -> None:
    messages = [*TWO_CALLS[:4], TWO_CALLS[-1]]  # no assistant reply between results and user
    prompt = ours("gemma", messages)
    assert "<start_of_turn>user\nsnow\n\nrain\n\nWhich is warmer?<end_of_turn>" in prompt
    assert prompt.count("<start_of_turn>user") == 2
