"""Responses `input` items as chat messages (pure)."""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest

STATELESS = (
    "this proxy keeps no responses (store is not supported): send the whole conversation in"
    " `input` instead, earlier turns' files included (they are searched as old files)"
)
FILE_FIELDS = ("file_id", "file_data", "file_url", "filename", "detail")


def bad(message: str, param: str, code: str = "invalid_value") -> BadRequest:
    return BadRequest(f"{param}: {message}", param=param, code=code)


def text_of(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise bad("must be a string", where, "invalid_type")
    return value


def _image_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    url = part.get("image_url")
    if not isinstance(url, str) or not url:
        raise bad(
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
        raise bad("a content part must be an object", where, "invalid_type")
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": text_of(part.get("text"), f"{where}.text")}
    if kind == "refusal":
        return {"type": "text", "text": text_of(part.get("refusal"), f"{where}.refusal")}
    if kind == "input_image":
        return _image_part(part, where)
    if kind == "input_file":
        return {
            "type": "input_file",
            **{k: part[k] for k in FILE_FIELDS if part.get(k) is not None},
        }
    raise bad(f"content part type {kind!r} is not supported", where)


def _joined(parts: list[dict[str, Any]], where: str) -> str:
    """Text parts as one string: system and assistant turns read best that way in templates."""
    texts = []
    for position, part in enumerate(parts):
        if part["type"] != "text":
            raise bad("only text parts are allowed in this role's content", f"{where}[{position}]")
        texts.append(part["text"])
    return "\n".join(texts)


ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = ROLES.get(item.get("role"))  # type: ignore[arg-type]
    if role is None:
        raise bad("role must be user, assistant, system or developer", f"{where}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise bad("must be a string or an array of content parts", f"{where}.content")
    parts = [_part(part, f"{where}.content[{i}]") for i, part in enumerate(content)]
    if role == "user":
        return {"role": role, "content": parts}
    return {"role": role, "content": _joined(parts, f"{where}.content")}


def _tool_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    return {
        "id": text_of(item.get("call_id"), f"{where}.call_id"),
        "type": "function",
        "function": {
            "name": text_of(item.get("name"), f"{where}.name"),
            "arguments": text_of(item.get("arguments", ""), f"{where}.arguments"),
        },
    }


def _tool_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    output = item.get("output")
    if isinstance(output, list):
        parts = [_part(part, f"{where}.output[{i}]") for i, part in enumerate(output)]
        output = _joined(parts, f"{where}.output")
    return {
        "role": "tool",
        "tool_call_id": text_of(item.get("call_id"), f"{where}.call_id"),
        "content": text_of(output, f"{where}.output"),
    }


def input_messages(value: Any, max_items: int | None = None) -> list[dict[str, Any]]:
    """`input` (a string or a list of items) as chat messages."""
    return translate_input(value, max_items)[0]


def translate_input(
    value: Any, max_items: int | None = None
) -> tuple[list[dict[str, Any]], list[int]]:
    """Chat messages for `input`, and for each the index of the input item it came from; more
    than `max_items` items are refused before any is read."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}], [0]
    if not isinstance(value, list) or not value:
        raise bad("must be a string or a non-empty array of input items", "input")
    if max_items is not None and len(value) > max_items:
        raise BadRequest(
            f"'input' has {len(value)} items; at most {max_items} are accepted"
            " (server.max_messages)",
            param="input",
            code="too_many_messages",
        )
    messages: list[dict[str, Any]] = []
    origins: list[int] = []
    for index, item in enumerate(value):
        where = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad("an input item must be an object", where, "invalid_type")
        kind = item.get("type", "message")
        if kind == "function_call":
            call = _tool_call(item, where)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                # Calls made in one turn are one assistant message, as chat templates expect;
                # appended in place (a list rebuilt per call made 40,000 calls take seconds).
                last.setdefault("tool_calls", []).append(call)
                continue
            message: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call]}
        elif kind == "message":
            message = _message(item, where)
        elif kind == "function_call_output":
            message = _tool_output(item, where)
        elif kind in ("reasoning", "file_search_call"):
            # A model's reasoning summary, a search the proxy ran (a client that sends a
            # response's output back): nothing a chat upstream can take back.
            continue
        elif kind == "item_reference":
            raise bad(STATELESS, where, "unsupported_parameter")
        else:
            raise bad(f"input item type {kind!r} is not supported by this proxy", where)
        messages.append(message)
        origins.append(index)
    return messages, origins
