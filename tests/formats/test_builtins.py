"""Each built-in renders exactly what its family's official jinja template renders, minus BOS."""

from __future__ import annotations

from typing import Any

import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from proxy.formats import FormatRegistry, InstructFormat, builtin_presets, render_prompt
from tests.formats.official_templates import ALPACA_NO_INPUT, OFFICIAL

REGISTRY = FormatRegistry()


def _raise(message: str) -> None:
    raise ValueError(message)


# transformers renders chat templates this way (apply_chat_template): trim/lstrip blocks.
HF_ENV = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
HF_ENV.globals["raise_exception"] = _raise


def official(name: str, messages: list[dict[str, Any]]) -> str:
    template, bos, eos = OFFICIAL[name]
    return HF_ENV.from_string(template).render(
        messages=messages, bos_token=bos, eos_token=eos, add_generation_prompt=True
    )


ORDINARY = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you"},
]
# llama.cpp's test conversation: untrimmed content shows which families trim.
WHITESPACE = [
    {"role": "system", "content": "  You are a helpful assistant\n"},
    {"role": "user", "content": " Hello "},
    {"role": "assistant", "content": "   I am an assistant   "},
    {"role": "user", "content": "Another question\n\n"},
]
LONGER = [
    *ORDINARY,
    {"role": "assistant", "content": "An assistant."},
    {"role": "user", "content": "Write {{ 7*7 }} and {% raw %} literally"},
]
NO_SYSTEM = ORDINARY[1:]
CONVERSATIONS = {"ordinary": ORDINARY, "whitespace": WHITESPACE, "longer": LONGER}


@pytest.mark.parametrize("conv", sorted(CONVERSATIONS))
@pytest.mark.parametrize("name", sorted(OFFICIAL))
def test_matches_official_template(name: str, conv: str) -> None:
    messages = CONVERSATIONS[conv]
    fmt = REGISTRY.get(name)
    reference = official(name, messages)
    assert render_prompt(fmt, messages, include_bos=True) == reference
    bos = OFFICIAL[name][1]
    expected = reference[len(bos) :] if bos and reference.startswith(bos) else reference
    assert render_prompt(fmt, messages) == expected  # default: BOS left to the backend


@pytest.mark.parametrize("name", sorted(set(OFFICIAL) - {"mistral-v7-tekken"}))
def test_matches_official_without_system(name: str) -> None:
    # Mistral-Small's template adds a dated default system prompt; we never invent one.
    assert render_prompt(REGISTRY.get(name), NO_SYSTEM, include_bos=True) == official(
        name, NO_SYSTEM
    )


def test_bos_is_not_doubled_by_default() -> None:
    for fmt in builtin_presets():
        prompt = render_prompt(fmt, ORDINARY)
        assert not (fmt.bos and prompt.startswith(fmt.bos)), fmt.name
        with_bos = render_prompt(fmt, ORDINARY, include_bos=True)
        assert with_bos.count(fmt.bos or "\x00") == (1 if fmt.bos_in_prompt else 0), fmt.name


def test_alpaca_matches_stanford_prompt() -> None:
    system = (
        "Below is an instruction that describes a task. "
        "Write a response that appropriately completes the request."
    )
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Name a fruit."}]
    expected = ALPACA_NO_INPUT.format(instruction="Name a fruit.")
    assert render_prompt(REGISTRY.get("alpaca"), messages) == expected


@pytest.mark.parametrize("fmt", builtin_presets(), ids=lambda f: f.name)
def test_presets_are_complete(fmt: InstructFormat) -> None:
    assert fmt.source and ("huggingface.co" in fmt.source or "github.com" in fmt.source)
    assert fmt.stop
    # A trailing space at the end of a prompt becomes a stray token.
    prompt = render_prompt(fmt, ORDINARY)
    assert not prompt.endswith(" ")
    assert fmt.eos in fmt.stop or fmt.eos in fmt.special_tokens


def test_required_names_exist() -> None:
    for name in ("chatml", "llama3", "alpaca", "mistral", "mistral-v1", "mistral-v3"):
        assert name in REGISTRY
    for name in ("mistral-v7", "command-r", "gemma"):
        assert name in REGISTRY


def test_mistral_is_mistral_v3() -> None:
    a, b = REGISTRY.get("mistral"), REGISTRY.get("mistral-v3")
    assert a.templates == b.templates and a.system_mode == b.system_mode


TOOL_CONV = [
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "Calling."},
    {"role": "tool", "content": '{"temp": 21}', "name": "weather"},
]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("chatml", '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response><|im_end|>\n'),
        ("llama3", '<|start_header_id|>ipython<|end_header_id|>\n\n"{\\"temp\\": 21}"<|eot_id|>'),
        ("mistral-v3", '[TOOL_RESULTS] {"content": {"temp": 21}, "call_id": "000000000"}[/TOOL_RESULTS]'),  # noqa: E501
        ("mistral-v3-tekken", '[TOOL_RESULTS]{"content": {"temp": 21}, "call_id": "000000000"}[/TOOL_RESULTS]'),  # noqa: E501
        ("gemma", '<start_of_turn>user\n{"temp": 21}<end_of_turn>\n'),
        ("command-r", '<|SYSTEM_TOKEN|><results>\n{"temp": 21}</results><|END_OF_TURN_TOKEN|>'),
    ],
)  # fmt: skip
def test_tool_messages(name: str, expected: str) -> None:
    prompt = render_prompt(REGISTRY.get(name), TOOL_CONV, add_generation_prompt=False)
    assert prompt.endswith(expected)


def test_system_without_user_in_folding_formats() -> None:
    only_system = [{"role": "system", "content": "Be brief."}]
    assert render_prompt(REGISTRY.get("gemma"), only_system) == (
        "<start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>model\n"
    )


def test_later_system_message_joins_the_user_turn_in_gemma() -> None:
    # A user turn of its own would break Gemma's alternation: it is merged into the one before.
    messages = [*NO_SYSTEM, {"role": "system", "content": "Answer in French."}]
    prompt = render_prompt(REGISTRY.get("gemma"), messages)
    assert prompt.endswith(
        "<start_of_turn>user\nWho are you\n\nAnswer in French.<end_of_turn>\n<start_of_turn>model\n"
    )


def test_developer_role_and_text_parts() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "developer", "content": "Rules."},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    assert render_prompt(REGISTRY.get("chatml"), messages) == (
        "<|im_start|>system\nRules.<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_special_stops_are_reported() -> None:
    assert "<|im_end|>" in REGISTRY.get("chatml").special_stops
    assert REGISTRY.get("alpaca").special_stops == []
