"""Versioned presets: validation, v1 -> v2 migration, export round trip and the registry."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from proxy.errors import BadRequest
from proxy.formats import (
    PRESET_VERSION,
    FormatRegistry,
    InstructFormat,
    PresetError,
    builtin_presets,
    export_preset,
    import_preset,
    migrate,
    render_prompt,
)

V1_CHATML: dict[str, Any] = {
    "version": 1,
    "name": "old-chatml",
    "system_template": "<|im_start|>system\n{{ content }}<|im_end|>\n",
    "user_template": "<|im_start|>user\n{{ content }}<|im_end|>\n",
    "assistant_template": "<|im_start|>assistant\n{{ content }}<|im_end|>\n",
    "tool_template": "<|im_start|>tool\n{{ content }}<|im_end|>\n",
    "assistant_prefix": "<|im_start|>assistant\n",
    "stop_sequences": ["<|im_end|>", "<|im_start|>"],
    "eos_token": "<|im_end|>",
    "system_role": "native",
}
CONV = [
    {"role": "system", "content": "S"},
    {"role": "user", "content": "U"},
    {"role": "assistant", "content": "A"},
    {"role": "user", "content": "U2"},
]


@pytest.mark.parametrize("fmt", builtin_presets(), ids=lambda f: f.name)
def test_export_import_round_trip(fmt: InstructFormat) -> None:
    exported = export_preset(fmt)
    assert json.loads(json.dumps(exported)) == exported  # plain JSON-safe values
    assert exported["version"] == PRESET_VERSION
    assert import_preset(exported) == fmt


def test_v1_migrates_to_v2() -> None:
    migrated = migrate(V1_CHATML)
    assert migrated["version"] == 2
    assert migrated["stop"] == ["<|im_end|>", "<|im_start|>"]
    assert migrated["generation_prompt"] == "<|im_start|>assistant\n"
    assert migrated["templates"]["user"] == {
        "template": "<|im_start|>user\n{{ content }}<|im_end|>\n"
    }
    assert "stop_sequences" not in migrated and "user_template" not in migrated
    assert V1_CHATML["version"] == 1  # the input is not modified
    old = import_preset(V1_CHATML)
    chatml = FormatRegistry().get("chatml")
    assert render_prompt(old, CONV) == render_prompt(chatml, CONV)
    assert old.stop == chatml.stop


def test_v1_merge_system_role() -> None:
    data = {**V1_CHATML, "system_role": "merge"}
    assert import_preset(data).system_mode == "merge_first_user"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "x"}, "no integer 'version'"),
        ({**V1_CHATML, "version": 99}, "newer than supported"),
        ({**V1_CHATML, "version": 0}, "not valid"),
        ({**V1_CHATML, "name": "Bad Name!"}, "name"),
        ({**V1_CHATML, "unknown_field": 1}, "unknown_field"),
        ({**V1_CHATML, "stop_sequences": [""]}, "stop strings must not be empty"),
        ({**V1_CHATML, "system_role": "native", "bos_token": 5}, "bos"),
    ],
)
def test_invalid_presets_are_refused(data: dict[str, Any], message: str) -> None:
    with pytest.raises(PresetError, match=message):
        import_preset(data)


def test_registry_unknown_name_lists_known() -> None:
    registry = FormatRegistry()
    with pytest.raises(BadRequest) as info:
        registry.get("nope")
    assert info.value.code == "unknown_format"
    assert "chatml" in info.value.message and "llama3" in info.value.message


def test_registry_user_dir_and_inline(tmp_path: Path) -> None:
    (tmp_path / "mine.json").write_text(json.dumps({**V1_CHATML, "name": "mine"}))
    (tmp_path / "st.json").write_text(
        json.dumps({"name": "My ST", "input_sequence": "U:", "output_sequence": "A:"})
    )
    inline = {"plain": {"templates": export_preset(FormatRegistry().get("alpaca"))["templates"]}}
    registry = FormatRegistry(user_dir=tmp_path, inline=inline)
    assert {"mine", "my-st", "plain", "chatml"} <= set(registry.names())
    assert registry.get("plain").name == "plain"
    assert render_prompt(registry.get("my-st"), [{"role": "user", "content": "hi"}]) == (
        "U:\nhi\nA:\n"
    )


def test_registry_inline_errors_name_the_entry() -> None:
    bad = {"broken": {"templates": {"user": {"template": "{{ content.__class__ }}"}}}}
    with pytest.raises(PresetError, match=r"formats\.broken"):
        FormatRegistry(inline=bad)


def test_registry_bad_file_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(PresetError, match=r"bad\.json"):
        FormatRegistry(user_dir=tmp_path)


def test_names_match_case_insensitively() -> None:
    registry = FormatRegistry(inline={"My-Format": {"name": "x", **_inline_chatml()}})
    assert registry.get("ChatML").name == "chatml"
    assert registry.get(" MISTRAL-v3 ").name == "mistral-v3"
    assert registry.get("my-format").name == "my-format"
    assert registry.get("MY-FORMAT") is registry.get("My-Format")
    assert "Gemma" in registry and "gemmaa" not in registry


def _inline_chatml() -> dict[str, Any]:
    fields = export_preset(FormatRegistry().get("chatml"))
    return {k: v for k, v in fields.items() if k not in ("name", "version")}
