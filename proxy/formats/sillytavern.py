"""Converts SillyTavern instruct presets (public/scripts/instruct-mode.js) into our presets."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from proxy.formats.model import PRESET_VERSION
from proxy.formats.sandbox import escape_literal

_NAME_MACRO = re.compile(r"\{\{name\}\}", re.IGNORECASE)
_SPECIAL = re.compile(r"<\|[^|<>\s]+\|>|</?(?:s|bos|eos|start_of_turn|end_of_turn)>|\[/?[A-Z_]+\]")
_NAMES = {"none", "force", "always"}


def migrate_sillytavern(data: Mapping[str, Any]) -> dict[str, Any]:
    """ST's own migrateInstructModeSettings: old field names to the current ones."""
    out = dict(data)
    if "separator_sequence" in out:
        out["output_suffix"] = out.pop("separator_sequence") or ""
    if "names" in out:
        names = out.pop("names")
        force = out.pop("names_force_groups", True)
        out["names_behavior"] = "always" if names else ("force" if force else "none")
    out.setdefault("names_behavior", "force")
    return out


def _text(data: Mapping[str, Any], key: str) -> str:
    value = data.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise TypeError(f"field {key!r} must be a string, not {type(value).__name__}")
    return value


def _literal(text: str, fallback_name: str) -> str:
    """Template source for a sequence: literal text, with ST's {{name}} macro kept working."""
    pieces = [escape_literal(p) for p in _NAME_MACRO.split(text)]
    return ("{{ name or '" + fallback_name + "' }}").join(pieces)


def slug(name: str) -> str:
    """A format name from a SillyTavern preset name: `Mistral V2 & V3` -> `mistral-v2-v3`."""
    s = re.sub(r"[^a-z0-9._]+", "-", name.lower()).strip("-._")
    return s[:64] or "sillytavern"


def sillytavern_to_preset(data: Mapping[str, Any], *, name: str | None = None) -> dict[str, Any]:
    """Our version-2 preset dict rendering as SillyTavern renders the chat.

    A message is `prefix + sep + [name + ": "] + content + suffix` with `sep = "\\n"` when
    `wrap` is on (and an empty suffix becomes "\\n"); the generation prompt is
    `last_output_sequence or output_sequence`, right-trimmed and followed by "\\n" with wrap.
    """
    st = migrate_sillytavern(data)
    wrap = bool(st.get("wrap", True))
    sep = "\n" if wrap else ""
    behavior = st.get("names_behavior")
    if behavior not in _NAMES:
        raise ValueError(f"names_behavior must be one of {sorted(_NAMES)}, not {behavior!r}")
    # "force" adds names in group chats; a client sends a `name` only when there are several.
    name_part = "{% if name %}{{ name }}: {% endif %}" if behavior != "none" else ""

    def body(prefix: str, suffix: str, who: str) -> str:
        suffix = suffix or sep
        head = _literal(prefix, who) + sep if prefix else ""
        return head + name_part + "{{ content }}" + _literal(suffix, who)

    def role(seq: str, suffix: str, who: str, first: str = "", last: str = "") -> dict[str, Any]:
        out: dict[str, Any] = {"template": body(_text(st, seq), _text(st, suffix), who)}
        if _text(st, first):
            out["first"] = body(_text(st, first), _text(st, suffix), who)
        if last and _text(st, last):
            out["last"] = body(_text(st, last), _text(st, suffix), who)
        return out

    user = role(
        "input_sequence", "input_suffix", "User", "first_input_sequence", "last_input_sequence"
    )
    assistant = role("output_sequence", "output_suffix", "Assistant", "first_output_sequence")
    system = (
        {"template": user["template"]}
        if st.get("system_same_as_user")
        else role("system_sequence", "system_suffix", "System")
    )
    gen = _text(st, "last_output_sequence") or _text(st, "output_sequence")
    gen = gen.rstrip() + "\n" if wrap else gen

    stop: list[str] = []
    if _text(st, "stop_sequence"):
        stop.append(_text(st, "stop_sequence"))
    if st.get("sequences_as_stop_strings", True):
        keys = ("input_sequence", "output_sequence", "first_output_sequence",
                "last_output_sequence", "system_sequence", "last_system_sequence")  # fmt: skip
        for line in "\n".join(_text(st, k) for k in keys).split("\n"):
            if line.strip() and "{{" not in line:
                stop.append(sep + line)
    stop = list(dict.fromkeys(stop))

    seq_text = " ".join(str(v) for k, v in st.items() if isinstance(v, str) and k != "name")
    title = _text(st, "name")
    preset_name = name or slug(title)
    return {
        "version": PRESET_VERSION,
        "name": preset_name,
        # The name SillyTavern shows (`Llama 3 Instruct`) finds it too.
        "aliases": [title] if title and title != preset_name else [],
        "description": f"Imported from the SillyTavern instruct preset {title!r}",
        "source": "SillyTavern instruct preset",
        "system_mode": "native",
        "templates": {
            "system": system,
            "user": user,
            "assistant": assistant,
            "tool": {"template": user["template"]},
        },
        "generation_prompt": gen,
        "stop": stop,
        "special_tokens": list(dict.fromkeys(_SPECIAL.findall(seq_text))),
        "user_alignment_message": _text(st, "user_alignment_message"),
    }
