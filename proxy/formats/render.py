"""Renders a clean message array into a prompt string with an instruct format, once."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.errors import BadRequest
from proxy.formats.model import InstructFormat, Role
from proxy.formats.sandbox import DEFAULT_LIMITS, OutputTooLarge, RenderLimits, render_template
from proxy.formats.tools import encode_calls, encode_result, groups_results, parse_tool_calls

_ROLE_ALIASES: dict[str, Role] = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}

_MACRO = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_.-]*)\s*\}\}")


def resolve_macros(
    messages: Sequence[Mapping[str, Any]], variables: Mapping[str, str]
) -> list[dict[str, Any]]:
    """Replace `{{user}}`, `{{char}}` and custom variables in message text.

    Plain string substitution in one pass: unknown `{{...}}` stays as written, and a value
    that itself contains `{{x}}` is not expanded again. Names are case-insensitive.
    """
    table = {k.lower(): v for k, v in variables.items()}

    def sub(text: str) -> str:
        return _MACRO.sub(lambda m: table.get(m.group(1).lower(), m.group(0)), text)

    out: list[dict[str, Any]] = []
    for msg in messages:
        new = dict(msg)
        content = msg.get("content")
        if isinstance(content, str):
            new["content"] = sub(content)
        elif isinstance(content, list):
            new["content"] = [
                {**p, "text": sub(p["text"])}
                if isinstance(p, dict) and isinstance(p.get("text"), str)
                else p
                for p in content
            ]
        out.append(new)
    return out


def message_text(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined by newlines.

    Non-text parts (images, audio) cannot be put in a text prompt and are left out.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(texts)
    raise BadRequest("message content must be a string or a list of parts", param="messages")


@dataclass(frozen=True)
class _Item:
    role: Role
    text: str
    name: str
    index: int = -1
    """Position in the request's messages (-1: inserted here), for error messages."""
    calls: bool = False
    """An assistant message carrying tool calls: `text` is already in the format's convention."""


def _normalise(fmt: InstructFormat, messages: Sequence[Mapping[str, Any]]) -> list[_Item]:
    items: list[_Item] = []
    for i, msg in enumerate(messages):
        raw_role = msg.get("role")
        role = _ROLE_ALIASES.get(raw_role) if isinstance(raw_role, str) else None
        if role is None:
            raise BadRequest(f"messages[{i}] has unsupported role {raw_role!r}", param="messages")
        name = msg.get("name")
        name = name if isinstance(name, str) else ""
        text = message_text(msg.get("content"))
        if role == "assistant" and msg.get("tool_calls"):
            calls = parse_tool_calls(msg["tool_calls"], i)
            text = encode_calls(fmt.tool_convention, calls, text, fmt=fmt.name, index=i)
            items.append(_Item("assistant", text, name, i, calls=True))
            continue
        if role == "tool":
            call_id = msg.get("tool_call_id")
            text = _trim(fmt, "tool", text)
            text = encode_result(
                fmt.tool_convention, text, call_id if isinstance(call_id, str) else ""
            )
            if fmt.tool_mode == "as_user":
                role = "user"
        items.append(_Item(role, text, name, i))
    return items


def _trim(fmt: InstructFormat, role: Role, text: str) -> str:
    return text.strip() if fmt.templates.for_role(role).trim else text


def _retrim(fmt: InstructFormat, item: _Item, role: Role | None = None) -> _Item:
    """`item` as `role` (default: its own), its text trimmed as that role's template wants.
    Tool calls and tool results are already written in the format's convention."""
    role = role or item.role
    if item.calls or item.role == "tool":
        return _Item(role, item.text, item.name, item.index, item.calls)
    return _Item(role, _trim(fmt, role, item.text), item.name, item.index)


def _apply_system_mode(fmt: InstructFormat, items: list[_Item]) -> list[_Item]:
    mode = fmt.system_mode
    if mode == "native":
        return [_retrim(fmt, m) for m in items]
    if mode == "as_user":
        return [_retrim(fmt, m, "user" if m.role == "system" else m.role) for m in items]
    lead = 0
    while lead < len(items) and items[lead].role == "system":
        lead += 1
    # Official templates fold the system text untrimmed before the (trimmed) user text.
    system_text = fmt.system_merge_separator.join(
        _trim(fmt, "system", m.text) for m in items[:lead]
    )
    rest = items[lead:]
    users = [i for i, m in enumerate(rest) if m.role == "user" and not m.calls]
    out = [_retrim(fmt, m, "user" if m.role == "system" else m.role) for m in rest]
    if lead:
        if users:
            at = users[0] if mode == "merge_first_user" else users[-1]
            target = out[at]
            merged = system_text + fmt.system_merge_separator + target.text
            out[at] = _Item("user", merged, target.name, target.index)
        else:
            out.insert(0, _Item("user", system_text, ""))
    return out


def _group_results(fmt: InstructFormat, items: list[_Item]) -> list[_Item]:
    """Consecutive tool results as one turn, where the convention wants it (Qwen2.5/Hermes)."""
    if not groups_results(fmt.tool_convention):
        return items
    out: list[_Item] = []
    for item in items:
        if out and item.role == "tool" and out[-1].role == "tool":
            last = out[-1]
            out[-1] = _Item("tool", last.text + item.text, last.name, last.index)
        else:
            out.append(item)
    return out


def _align(fmt: InstructFormat, items: list[_Item]) -> list[_Item]:
    if not fmt.user_alignment_message:
        return items
    lead = 0
    while lead < len(items) and items[lead].role == "system":
        lead += 1
    if lead < len(items) and items[lead].role != "user":
        items = [*items[:lead], _Item("user", fmt.user_alignment_message, ""), *items[lead:]]
    return items


def _alternate(fmt: InstructFormat, items: list[_Item]) -> list[_Item]:
    """Merge consecutive user (or assistant) messages; refuse what cannot alternate.

    As in the official templates, tool calls and tool results written with the family's own
    markup stand outside the alternation (Mistral); where a family has none, they are plain
    user and assistant turns (Gemma). A leading system message is system_mode's business.
    """
    if not fmt.alternate_roles:
        return items
    markup = fmt.tool_convention != "json"

    def plain(item: _Item) -> bool:
        return item.role in ("user", "assistant") and not (item.calls and markup)

    out: list[_Item] = []
    for item in items:
        last = out[-1] if out else None
        if last and plain(item) and plain(last) and last.role == item.role:
            text = last.text + fmt.merge_separator + item.text
            out[-1] = _Item(item.role, text, last.name, last.index)
        else:
            out.append(item)
    turns = [m for m in out if plain(m)]
    for position, item in enumerate(turns):
        expected = "user" if position % 2 == 0 else "assistant"
        if item.role != expected:
            where = f"messages[{item.index}]" if item.index >= 0 else "the conversation"
            raise BadRequest(
                f"format {fmt.name!r} needs user and assistant turns to alternate, starting "
                f"with the user (tool calls and results aside); {where} is a {item.role} turn "
                f"where a {expected} turn must be, and cannot be merged with the previous one",
                code="roles_must_alternate",
                param="messages",
            )
    return out


def render_prompt(
    fmt: InstructFormat,
    messages: Sequence[Mapping[str, Any]],
    *,
    include_bos: bool = False,
    add_generation_prompt: bool = True,
    limits: RenderLimits = DEFAULT_LIMITS,
) -> str:
    """The prompt string for `messages` (macros must already be resolved).

    `include_bos=False` (the default) leaves BOS out because llama.cpp, vLLM and KoboldCpp
    add it themselves; pass True only for an upstream that does not.
    """
    items = _apply_system_mode(fmt, _normalise(fmt, messages))
    items = _alternate(fmt, _align(fmt, _group_results(fmt, items)))
    first: dict[Role, int] = {}
    last: dict[Role, int] = {}
    for i, m in enumerate(items):
        first.setdefault(m.role, i)
        last[m.role] = i
    parts: list[str] = [fmt.bos] if include_bos and fmt.bos_in_prompt else []
    size = len(parts[0]) if parts else 0
    for i, m in enumerate(items):
        spec = fmt.templates.for_role(m.role)
        if m.calls and fmt.templates.tool_calls is not None:
            spec = fmt.templates.tool_calls
        source = spec.template
        if spec.last is not None and last[m.role] == i:
            source = spec.last
        elif spec.first is not None and first[m.role] == i:
            source = spec.first
        if i and fmt.separator:
            parts.append(fmt.separator)
        text = render_template(source, content=m.text, role=m.role, name=m.name, limits=limits)
        parts.append(text)
        size += len(text) + len(fmt.separator)
        if size > limits.max_prompt_chars:
            raise OutputTooLarge("prompt", limits.max_prompt_chars)
    if add_generation_prompt:
        parts.append(fmt.generation_prompt)
    return "".join(parts)
