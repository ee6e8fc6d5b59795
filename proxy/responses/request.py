"""A Responses API request as the Chat Completions request the pipeline works on (pure)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from proxy.errors import BadRequest

# Accepted and left out: they tune OpenAI's own service and mean nothing to a chat upstream.
IGNORED = frozenset(
    {
        "include",
        "truncation",
        "service_tier",
        "reasoning",
        "prompt_cache_key",
        "prompt_cache_retention",
        "safety_identifier",
        "stream_options",
        "top_logprobs",
        "max_tool_calls",
        "store",
        "background",
        "context_management",
    }
)
# Translated here; everything not named in either set goes to the upstream as it came
# (llama.cpp's `top_k`, `cache_prompt`, a `seed`, anything sent with `extra_body`).
TRANSLATED = frozenset(
    {
        "input",
        "instructions",
        "max_output_tokens",
        "temperature",
        "top_p",
        "tools",
        "tool_choice",
        "text",
        "metadata",
        "stream",
        "parallel_tool_calls",
        "user",
        "model",
        "previous_response_id",
        "conversation",
        "prompt",
        "enrich",
    }
)
STATELESS = (
    "this proxy keeps no responses (store is not supported): send the whole conversation in"
    " `input` instead, earlier turns' files included (they are searched as old files)"
)
FILE_FIELDS = ("file_id", "file_data", "file_url", "filename")


@dataclass(frozen=True)
class Asked:
    """What the client asked for that the `response` object repeats back to it."""

    model: str | None = None
    instructions: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: int | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    text: dict[str, Any] = field(default_factory=lambda: {"format": {"type": "text"}})
    parallel_tool_calls: bool = True
    stream: bool = False
    user: str | None = None


def _bad(message: str, param: str, code: str = "invalid_value") -> BadRequest:
    return BadRequest(f"{param}: {message}", param=param, code=code)


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _bad("must be a string", where, "invalid_type")
    return value


def _image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise _bad(
            "an input_image needs image_url (a URL or a data: URL); file_id images are not"
            " supported by this proxy",
            where,
        )
    image: dict[str, Any] = {"url": url}
    if isinstance(part.get("detail"), str):
        image["detail"] = part["detail"]
    return {"type": "image_url", "image_url": image}


def _part(part: Any, where: str) -> dict[str, Any]:
    """One content part as chat has it; `input_file` stays for the references stage."""
    if not isinstance(part, dict):
        raise _bad("a content part must be an object", where, "invalid_type")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": _text(part.get("text"), f"{where}.text")}
    if kind == "refusal":
        return {"type": "text", "text": _text(part.get("refusal"), f"{where}.refusal")}
    if kind == "input_image":
        return _image_part(part, where)
    if kind == "input_file":
        return {
            "type": "input_file",
            **{k: part[k] for k in FILE_FIELDS if part.get(k) is not None},
        }
    raise _bad(f"content part type {kind!r} is not supported", where)


def _joined(parts: list[dict[str, Any]], where: str) -> str:
    """Text parts as one string: system and assistant turns read best that way in templates."""
    texts = []
    for position, part in enumerate(parts):
        if part["type"] != "text":
            raise _bad("only text parts are allowed in this role's content", f"{where}[{position}]")
        texts.append(part["text"])
    return "\n".join(texts)


ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise _bad("role must be user, assistant, system or developer", f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise _bad("must be a string or an array of content parts", f"{where}.content")
    parts = [_part(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
    if role == "user":
        return {"role": role, "content": parts}
    return {"role": role, "content": _joined(parts, f"{where}.content")}


def _tool_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    return {
        "id": _text(item.get("call_id"), f"{where}.call_id"),
        "type": "function",
        "function": {
            "name": _text(item.get("name"), f"{where}.name"),
            "arguments": _text(item.get("arguments", ""), f"{where}.arguments"),
        },
    }


def _tool_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    output = item.get("output")
    if isinstance(output, list):
        parts = [_part(part, f"{where}.output[{i}]") for i, part in enumerate(output)]
        output = _joined(parts, f"{where}.output")
    return {
        "role": "tool",
        "tool_call_id": _text(item.get("call_id"), f"{where}.call_id"),
        "content": _text(output, f"{where}.output"),
    }


def input_messages(value: Any) -> list[dict[str, Any]]:
    """`input` (a string or a list of items) as chat messages."""
    return translate_input(value)[0]


def translate_input(value: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """Chat messages for `input`, and for each the index of the input item it came from."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}], [0]
    if not isinstance(value, list) or not value:
        raise _bad("must be a string or a non-empty array of input items", "input")
    messages: list[dict[str, Any]] = []
    origins: list[int] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise _bad("an input item must be an object", where, "invalid_type")
        kind = item.get("type", "message")
        if kind == "function_call":
            call = _tool_call(item, where)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                # Calls made in one turn are one assistant message, as chat templates expect.
                last["tool_calls"] = [*last.get("tool_calls", []), call]
                continue
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "message":
            message = _message(item, where)
        elif kind == "function_call_output":
            message = _tool_output(item, where)
        elif kind == "reasoning":
            continue  # a model's reasoning summary: not something a chat upstream can take back
        elif kind == "item_reference":
            raise _bad(STATELESS, where, "unsupported_parameter")
        else:
            raise _bad(f"input item type {kind!r} is not supported by this proxy", where)
        messages.append(message)
        origins.append(index)
    return messages, origins


def _tools(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise _bad("must be an array", "tools", "invalid_type")
    tools = []
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise _bad(f"only function tools are supported here, not {kind!r}", where)
        function = {"name": _text(tool.get("name"), f"{where}.name")}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        tools.append({"type": "function", "function": function})
    return tools


def _tool_choice(value: Any) -> Any:
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        return {"type": "function", "function": {"name": _text(value.get("name"), "tool_choice")}}
    raise _bad("must be auto, none, required or {type: function, name}", "tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    if not isinstance(text, dict):
        raise _bad("must be an object", "text", "invalid_type")
    fmt = text.get("format")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_schema":
        assert isinstance(fmt, dict)
        schema = {"name": _text(fmt.get("name"), "text.format.name"), "schema": fmt.get("schema")}
        if not isinstance(schema["schema"], dict):
            raise _bad("must be an object", "text.format.schema", "invalid_type")
        for key in ("description", "strict"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    raise _bad("type must be text, json_object or json_schema", "text.format")


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad("must be a number", key, "invalid_type")
    return value


def _refuse_state(body: dict[str, Any]) -> None:
    for key in ("previous_response_id", "conversation"):
        if body.get(key) is not None:
            raise _bad(STATELESS, key, "unsupported_parameter")
    if body.get("background"):
        raise _bad("background responses are not supported by this proxy", "background")
    if body.get("prompt") is not None:
        raise _bad("stored prompt templates are not supported by this proxy", "prompt")


def chat_request(body: dict[str, Any]) -> tuple[dict[str, Any], Asked]:
    """The chat body for a Responses body, and what the response object must repeat."""
    _refuse_state(body)
    if "input" not in body:
        raise _bad("is required", "input", "missing_required_parameter")
    messages = input_messages(body["input"])
    instructions = body.get("instructions")
    if instructions is not None:
        messages.insert(0, {"role": "system", "content": _text(instructions, "instructions")})
    chat: dict[str, Any] = {
        key: value for key, value in body.items() if key not in TRANSLATED | IGNORED
    }
    if isinstance(body.get("model"), str):
        chat["model"] = body["model"]
    chat["messages"] = messages
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise _bad("must be a boolean", "stream", "invalid_type")
    if stream:
        # Usage arrives in a last chunk only when asked for; response.completed reports it.
        chat.update(stream=True, stream_options={"include_usage": True})
    max_output = body.get("max_output_tokens")
    if max_output is not None:
        if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 1:
            raise _bad("must be a positive integer", "max_output_tokens")
        chat["max_tokens"] = max_output
    for key in ("temperature", "top_p"):
        if _number(body, key) is not None:
            chat[key] = body[key]
    tools = _tools(body["tools"]) if body.get("tools") else []
    if tools:
        chat["tools"] = tools
    if body.get("tool_choice") is not None:
        chat["tool_choice"] = _tool_choice(body["tool_choice"])
    if isinstance(body.get("parallel_tool_calls"), bool):
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    response_format = _response_format(body["text"]) if body.get("text") is not None else None
    if response_format is not None:
        chat["response_format"] = response_format
    if isinstance(body.get("user"), str):
        chat["user"] = body["user"]
    if "enrich" in body:
        chat["enrich"] = body["enrich"]
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _bad("must be an object of strings", "metadata", "invalid_type")
    asked = Asked(
        model=body.get("model") if isinstance(body.get("model"), str) else None,
        instructions=instructions,
        metadata=metadata or {},
        temperature=_number(body, "temperature"),
        top_p=_number(body, "top_p"),
        max_output_tokens=max_output,
        tools=list(body.get("tools") or []),
        tool_choice=body.get("tool_choice") or "auto",
        text=body["text"] if isinstance(body.get("text"), dict) else Asked().text,
        parallel_tool_calls=body.get("parallel_tool_calls", True) is not False,
        stream=stream,
        user=body.get("user") if isinstance(body.get("user"), str) else None,
    )
    return chat, asked
