"""SillyTavern instruct presets import, old field names included, and render as ST does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.formats import (
    FormatRegistry,
    PresetError,
    export_preset,
    import_any,
    import_preset,
    import_sillytavern,
    render_prompt,
)
from proxy.formats.sillytavern import migrate_sillytavern, slug

# SillyTavern/SillyTavern default/content/presets/instruct/ChatML.json (commit 58c6d0ef), verbatim.
ST_CHATML: dict[str, Any] = {
    "input_sequence": "<|im_start|>user",
    "output_sequence": "<|im_start|>assistant",
    "last_output_sequence": "",
    "system_sequence": "<|im_start|>system",
    "stop_sequence": "<|im_end|>",
    "wrap": True,
    "macro": True,
    "names_behavior": "force",
    "activation_regex": "",
    "first_output_sequence": "",
    "skip_examples": False,
    "output_suffix": "<|im_end|>\n",
    "input_suffix": "<|im_end|>\n",
    "system_suffix": "<|im_end|>\n",
    "user_alignment_message": "",
    "system_same_as_user": False,
    "last_system_sequence": "",
    "first_input_sequence": "",
    "last_input_sequence": "",
    "sequences_as_stop_strings": True,
    "story_string_prefix": "<|im_start|>system",
    "story_string_suffix": "<|im_end|>\n",
    "name": "ChatML",
}

# default/content/presets/instruct/Mistral V2 & V3.json (commit 00a72b5a), verbatim.
ST_MISTRAL: dict[str, Any] = {
    "input_sequence": "[INST] ",
    "output_sequence": "[/INST] ",
    "last_output_sequence": "[/INST]",
    "system_sequence": "",
    "stop_sequence": "",
    "wrap": False,
    "macro": True,
    "names_behavior": "force",
    "activation_regex": "",
    "system_sequence_prefix": "",
    "system_sequence_suffix": "",
    "first_output_sequence": "",
    "skip_examples": False,
    "output_suffix": "</s>",
    "input_suffix": "",
    "system_suffix": "",
    "user_alignment_message": "Let's get started. Please respond based on the information and "
    "instructions provided above.",
    "system_same_as_user": True,
    "last_system_sequence": "",
    "name": "Mistral V2 & V3",
}

# default/content/presets/instruct/Alpaca.json (commit 7bceed65), an old-format preset.
ST_ALPACA_OLD: dict[str, Any] = {
    "system_prompt": "Below is an instruction that describes a task. Write a response that "
    "appropriately completes the request.\n\nWrite {{char}}'s next reply in a fictional roleplay "
    "chat between {{user}} and {{char}}.\n",
    "input_sequence": "### Instruction:",
    "output_sequence": "### Response:",
    "last_output_sequence": "",
    "system_sequence": "### Input:",
    "stop_sequence": "",
    "wrap": True,
    "macro": True,
    "names": False,
    "names_force_groups": True,
    "activation_regex": "",
    "system_sequence_prefix": "",
    "system_sequence_suffix": "",
    "first_output_sequence": "",
    "skip_examples": False,
    "output_suffix": "\n\n",
    "input_suffix": "\n\n",
    "system_suffix": "\n\n",
    "user_alignment_message": "",
    "system_same_as_user": False,
    "last_system_sequence": "",
    "name": "Alpaca",
}

CONV = [
    {"role": "system", "content": "You are a helpful assistant"},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Who are you"},
]


def test_st_chatml_renders_like_builtin_chatml() -> None:
    fmt = import_sillytavern(ST_CHATML)
    assert fmt.name == "chatml"
    builtin = FormatRegistry().get("chatml")
    for conv in (CONV, CONV[1:], [*CONV, {"role": "assistant", "content": " x "}]):
        assert render_prompt(fmt, conv) == render_prompt(builtin, conv)
    assert fmt.stop[0] == "<|im_end|>"
    assert "\n<|im_start|>user" in fmt.stop
    assert fmt.special_tokens == ["<|im_start|>", "<|im_end|>"]


def test_st_import_survives_export_and_reimport() -> None:
    fmt = import_sillytavern(ST_CHATML, name="st-chatml")
    assert import_preset(export_preset(fmt)) == fmt


def test_st_mistral_no_wrap_same_as_user_and_alignment() -> None:
    fmt = import_any(ST_MISTRAL)  # detected as SillyTavern
    assert fmt.name == "mistral-v2-v3"
    assert render_prompt(fmt, CONV) == (
        "[INST] You are a helpful assistant[INST] Hello[/INST] Hi there</s>"
        "[INST] Who are you[/INST]"
    )
    greeting_first = [CONV[0], {"role": "assistant", "content": "Hi!"}, CONV[1]]
    assert render_prompt(fmt, greeting_first) == (
        "[INST] You are a helpful assistant[INST] Let's get started. Please respond based on the "
        "information and instructions provided above.[/INST] Hi!</s>[INST] Hello[/INST]"
    )


def test_old_field_names_are_migrated() -> None:
    assert migrate_sillytavern(ST_ALPACA_OLD)["names_behavior"] == "force"
    old = {**ST_ALPACA_OLD, "names": True, "separator_sequence": "\n###\n"}
    del old["output_suffix"]
    migrated = migrate_sillytavern(old)
    assert migrated["names_behavior"] == "always"
    assert migrated["output_suffix"] == "\n###\n"
    assert "names" not in migrated and "names_force_groups" not in migrated
    none = migrate_sillytavern({**ST_ALPACA_OLD, "names_force_groups": False})
    assert none["names_behavior"] == "none"

    fmt = import_sillytavern(old)
    prompt = render_prompt(
        fmt,
        [
            {"role": "system", "content": "Sys"},
            {"role": "user", "content": "Hi", "name": "Ann"},
            {"role": "assistant", "content": "Yo", "name": "Bot"},
        ],
    )
    assert prompt == (
        "### Input:\nSys\n\n### Instruction:\nAnn: Hi\n\n"
        "### Response:\nBot: Yo\n###\n### Response:\n"
    )


def test_names_behavior_none_drops_names() -> None:
    fmt = import_sillytavern({**ST_CHATML, "names_behavior": "none"})
    prompt = render_prompt(fmt, [{"role": "user", "content": "Hi", "name": "Ann"}])
    assert "Ann" not in prompt


def test_first_last_sequences_and_name_macro() -> None:
    preset = {
        **ST_CHATML,
        "first_input_sequence": "<|im_start|>user first",
        "last_input_sequence": "<|im_start|>user last",
        "first_output_sequence": "<|im_start|>{{name}}",
        "last_output_sequence": "<|im_start|>assistant final",
    }
    fmt = import_sillytavern(preset)
    prompt = render_prompt(fmt, [*CONV, {"role": "assistant", "content": "A2"}, CONV[3]])
    assert prompt.count("<|im_start|>user first\n") == 1
    assert prompt.count("<|im_start|>user last\n") == 1
    assert "<|im_start|>Assistant\nHi there" in prompt  # {{name}} without a name
    assert prompt.endswith("<|im_start|>assistant final\n")


def test_st_sequences_are_literal_text() -> None:
    fmt = import_sillytavern({**ST_CHATML, "input_sequence": "{% if 1 %}{{ 7*7 }}"})
    prompt = render_prompt(fmt, [{"role": "user", "content": "x"}])
    assert prompt.startswith("{% if 1 %}{{ 7*7 }}\nx")


@pytest.mark.parametrize(
    "bad",
    [
        {**ST_CHATML, "names_behavior": "sometimes"},
        {**ST_CHATML, "input_sequence": 5},
    ],
)
def test_invalid_st_presets(bad: dict[str, Any]) -> None:
    with pytest.raises(PresetError):
        import_sillytavern(bad)


def test_slug() -> None:
    assert slug("Llama 3 Instruct") == "llama-3-instruct"
    assert slug("!!!") == "sillytavern"


# As SillyTavern's default/content/presets/instruct/Llama 3 Instruct.json has it (fields that
# change nothing here left out).
ST_LLAMA3: dict[str, Any] = {
    "input_sequence": "<|start_header_id|>user<|end_header_id|>\n\n",
    "output_sequence": "<|start_header_id|>assistant<|end_header_id|>\n\n",
    "system_sequence": "<|start_header_id|>system<|end_header_id|>\n\n",
    "stop_sequence": "<|eot_id|>",
    "wrap": False,
    "names_behavior": "force",
    "output_suffix": "<|eot_id|>",
    "input_suffix": "<|eot_id|>",
    "system_suffix": "<|eot_id|>",
    "system_same_as_user": False,
    "name": "Llama 3 Instruct",
}


def test_an_imported_preset_answers_to_its_sillytavern_name(tmp_path: Path) -> None:
    fmt = import_sillytavern(ST_LLAMA3)
    assert fmt.name == "llama-3-instruct" and fmt.aliases == ["Llama 3 Instruct"]
    (tmp_path / f"{fmt.name}.json").write_text(json.dumps(export_preset(fmt)))
    registry = FormatRegistry(user_dir=tmp_path)
    for name in ("Llama 3 Instruct", "llama 3 instruct", "LLAMA-3-INSTRUCT"):
        assert registry.get(name) == fmt
    assert render_prompt(fmt, CONV) == render_prompt(registry.get("llama3"), CONV)
    # The name SillyTavern shows for ChatML is the built-in's own name: one format either way.
    assert import_sillytavern(ST_CHATML).aliases == ["ChatML"]
