"""Templates are sandboxed: escapes and unbounded work are refused at import, output is capped."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.formats import (
    FormatRegistry,
    OutputTooLarge,
    PresetError,
    RenderLimits,
    export_preset,
    import_preset,
    render_prompt,
    resolve_macros,
)
from proxy.formats.sandbox import MAX_TEMPLATE_CHARS, render_template

CHATML = FormatRegistry().get("chatml")


def with_user_template(template: str) -> dict[str, Any]:
    data = export_preset(CHATML)
    data["name"] = "custom"
    data["templates"]["user"]["template"] = template
    return data


@pytest.mark.parametrize(
    "template",
    [
        "{{ content.__class__ }}",
        "{{ content.__class__.__mro__[1].__subclasses__() }}",
        "{{ content['__class__'] }}{{ content }}",
        "{{ cycler }}{{ content }}",
        "{{ cycler('a', 'b').next() }}{{ content }}",
        "{{ joiner(',') }}{{ content }}",
        "{{ lipsum() }}{{ content }}",
        "{{ namespace() }}{{ content }}",
        "{% for i in range(10**9) %}{{ content }}{% endfor %}",
        "{{ range(10**9)|length }}{{ content }}",
        "{{ ''.join(content) }}",
        "{{ ''.join }}{{ content }}",
        "{{ content.upper() }}",
        "{{ content * 1000000 }}",
        "{{ 'x' * 10**9 }}{{ content }}",
        "{{ '%999999999s' % content }}",
        "{% set big = content ~ content %}{{ big }}",
        "{% macro m() %}{{ content }}{% endmacro %}{{ m() }}",
        "{% include 'secrets.txt' %}{{ content }}",
        "{% import 'x' as y %}{{ content }}",
        "{% extends 'base' %}",
        "{{ content|replace('', 'x' * 100) }}",
        "{{ content|format(1) }}",
        "{{ config }}{{ content }}",
        "{{ self }}{{ content }}",
        "{{ messages }}{{ content }}",
        "{{ undefined_name }}{{ content }}",
        "{{ content",  # syntax error
        "no content at all",
        "{{ " + " ~ ".join(["content"] * 17) + " }}",
        "x" * (MAX_TEMPLATE_CHARS + 1) + "{{ content }}",
    ],
)
def test_unsafe_or_broken_templates_refused_at_import(template: str) -> None:
    with pytest.raises(PresetError) as info:
        import_preset(with_user_template(template))
    assert "user template" in info.value.message


def test_template_failing_on_sample_is_refused() -> None:
    # Valid syntax, but rendering fails (a strict undefined): refused now, not per request.
    with pytest.raises(PresetError, match=r"test rendering failed|only content, role and name"):
        import_preset(with_user_template("{{ content }}{{ name['x'] }}"))


def test_allowed_helpers_work() -> None:
    fmt = import_preset(
        with_user_template(
            "<|im_start|>user\n{% if name %}{{ name|upper }}: {% endif %}"
            "{{ content|trim }}{{ '!' if role == 'user' else '' }}<|im_end|>\n"
        )
    )
    prompt = render_prompt(fmt, [{"role": "user", "content": "  hi  ", "name": "ann"}])
    assert prompt.startswith("<|im_start|>user\nANN: hi!<|im_end|>\n")


def test_user_content_is_data_not_template() -> None:
    tricky = "{{ 7*7 }} {% for x in range(3) %}x{% endfor %} {{ content.__class__ }} {# c #}"
    prompt = render_prompt(CHATML, [{"role": "user", "content": tricky}])
    assert tricky in prompt and "49" not in prompt


def test_macros_never_expand_template_syntax() -> None:
    messages = [{"role": "user", "content": "{{user}} meets {{ char }}: {{ 7*7 }} {% if x %}"}]
    resolved = resolve_macros(messages, {"user": "Ann", "char": "{{user}}"})
    # One pass: a value containing a macro is not expanded again; unknown names stay.
    assert resolved[0]["content"] == "Ann meets {{user}}: {{ 7*7 }} {% if x %}"
    prompt = render_prompt(CHATML, resolved)
    assert "Ann meets {{user}}: {{ 7*7 }} {% if x %}" in prompt


def test_macros_custom_variables_parts_and_case() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are {{Char}} in {{place}}."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hi {{CHAR}}"}, {"type": "image_url"}],
        },
    ]
    out = resolve_macros(messages, {"char": "Bob", "place": "Paris"})
    assert out[0]["content"] == "You are Bob in Paris."
    assert out[1]["content"][0]["text"] == "Hi Bob"
    assert messages[0]["content"] == "You are {{Char}} in {{place}}."  # input untouched


def test_message_output_is_capped() -> None:
    limits = RenderLimits(max_message_chars=1000, max_prompt_chars=10_000)
    with pytest.raises(OutputTooLarge):
        render_prompt(CHATML, [{"role": "user", "content": "x" * 2000}], limits=limits)


def test_prompt_output_is_capped() -> None:
    limits = RenderLimits(max_message_chars=1000, max_prompt_chars=2500)
    messages = [{"role": "user", "content": "x" * 900}] * 3
    with pytest.raises(OutputTooLarge) as info:
        render_prompt(CHATML, messages, limits=limits)
    assert info.value.status == 413


def test_cap_stops_rendering_early() -> None:
    # 16 copies of a large content in separate outputs: refused at the cap, not after.
    source = "{{ content }}" * 16
    with pytest.raises(OutputTooLarge):
        render_template(source, "y" * 100_000, "user", "", RenderLimits(max_message_chars=150_000))
