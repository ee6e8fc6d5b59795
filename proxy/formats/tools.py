"""Assistant tool calls and tool results as each model family writes them in its prompt (pure).

The conventions follow the families' official chat templates (see tests/formats/
official_templates.py); `arguments` are JSON text in OpenAI's API and are parsed here, so they
render as those templates render a parsed object (`tojson`, as transformers defines it).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from proxy import jsonio
from proxy.errors import BadRequest

ToolConvention = Literal["json", "llama3", "mistral", "chatml", "command-r"]
"""How a format writes tool calls and results:
- json: no family convention; the calls as a JSON list after the assistant's text;
- llama3: Llama 3.1 `{"name": ..., "parameters": ...}`, results as JSON strings (role ipython);
- mistral: `[{"name", "arguments", "id"}]` after [TOOL_CALLS]; `{"content", "call_id"}` results;
- chatml: Qwen2.5 / Hermes `<tool_call>` tags; results in `<tool_response>` tags, grouped;
- command-r: Command R `Action:` JSON block; results in `<results>`."""

MISTRAL_ID_LENGTH = 9


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Any
    """The parsed JSON object when `arguments` was JSON text, else the value as given."""


def _dumps(value: Any, indent: int | None = None) -> str:
    # transformers' `tojson` for chat templates: json.dumps, non-ASCII kept.
    return json.dumps(value, ensure_ascii=False, indent=indent)


def parse_tool_calls(raw: Any, index: int) -> list[ToolCall]:
    """OpenAI `tool_calls` of messages[index]; a 400 naming the problem when malformed."""
    where = f"messages[{index}].tool_calls"
    if not isinstance(raw, list):
        raise BadRequest(f"{where} must be a list", param="messages")
    calls = []
    for n, call in enumerate(raw):
        function = call.get("function") if isinstance(call, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not name:
            raise BadRequest(f"{where}[{n}] needs a function with a name", param="messages")
        assert isinstance(function, Mapping) and isinstance(call, Mapping)
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            # Not JSON: kept as text, rendered as a JSON string.
            with contextlib.suppress(ValueError):
                arguments = jsonio.loads(arguments) if arguments.strip() else {}
        call_id = call.get("id")
        calls.append(ToolCall(call_id if isinstance(call_id, str) else "", name, arguments))
    return calls


def mistral_id(call_id: str) -> str:
    """Mistral's 9-character call id: the last nine characters, as Mistral-Small's template and
    vLLM do with OpenAI's longer `call_...` ids; shorter ids are padded with zeros."""
    return call_id[-MISTRAL_ID_LENGTH:].rjust(MISTRAL_ID_LENGTH, "0")


def _command_r_call(call: ToolCall) -> str:
    # Command R's template indents with jinja's `indent`: lines after the first, non-blank ones.
    arguments = call.arguments
    if len(arguments) > 0 if isinstance(arguments, dict | list | str) else arguments is not None:
        lines = _dumps(arguments, indent=4).split("\n")
        parameters = "\n".join(
            [lines[0], *(" " * 8 + line if line else line for line in lines[1:])]
        )
        parameters += "\n"
    else:
        parameters = "{}\n"
    return f'    {{\n        "tool_name": "{call.name}",\n        "parameters": {parameters}    }}'


def encode_calls(
    convention: ToolConvention, calls: Sequence[ToolCall], text: str, *, fmt: str, index: int
) -> str:
    """The assistant turn's content for a message with tool calls (its `tool_calls` template
    wraps it). `text` is the message's own content, kept where the convention has a place."""
    if convention == "llama3":
        if len(calls) != 1:
            raise BadRequest(
                f"format {fmt!r} writes one tool call per assistant message, as Llama 3.1's "
                f"template does; messages[{index}] has {len(calls)}",
                code="unsupported_tool_calls",
                param="messages",
            )
        call = calls[0]
        return f'{{"name": "{call.name}", "parameters": {_dumps(call.arguments)}}}'
    if convention == "mistral":
        items = []
        for call in calls:
            function = _dumps({"name": call.name, "arguments": call.arguments})
            items.append(f'{function[:-1]}, "id": "{mistral_id(call.id)}"}}')
        return "[" + ", ".join(items) + "]"
    if convention == "chatml":
        blocks = [
            f'\n<tool_call>\n{{"name": "{c.name}", "arguments": {_dumps(c.arguments)}}}'
            "\n</tool_call>"
            for c in calls
        ]
        return ("\n" + text if text else "") + "".join(blocks)
    if convention == "command-r":
        body = ",\n".join(_command_r_call(call) for call in calls)
        return text.strip() + "\nAction:\n```json\n[\n" + body + "\n]```\n"
    listed = _dumps([{"name": c.name, "arguments": c.arguments} for c in calls])
    return f"{text}\n{listed}" if text else listed


def encode_result(convention: ToolConvention, text: str, tool_call_id: str) -> str:
    """The tool turn's content for one tool result."""
    if convention == "llama3":
        # Llama 3.1's template: `message.content | tojson` (a string is iterable in jinja).
        return _dumps(text)
    if convention == "mistral":
        return f'{{"content": {text}, "call_id": "{mistral_id(tool_call_id)}"}}'
    if convention == "chatml":
        return f"\n<tool_response>\n{text}\n</tool_response>"
    return text


def groups_results(convention: ToolConvention) -> bool:
    """Consecutive tool results form one turn (Qwen2.5 / Hermes)."""
    return convention == "chatml"
