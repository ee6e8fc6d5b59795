"""An OpenAI chat request as a request to Ollama's native `/api/chat` (pure).

The translation is the one Ollama's own OpenAI layer makes (openai/openai.go
`FromChatRequest`), so a request reads the same to the model whichever door it takes, plus
what that layer cannot send: `options.num_ctx` and `truncate: false`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from proxy import jsonio
from proxy.errors import BadRequest

# Ollama's `think` for OpenAI's reasoning effort (openai.go thinkFromReasoningEffort).
THINK = {
    "none": False,
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "max": "max",
    "xhigh": "max",
    "ultra": "max",
}
# Ollama options a client may send at the top level (extra_body), Modelfile parameter names
# (docs/modelfile.mdx in Ollama's repository); Ollama's OpenAI layer drops them, its native API
# takes them. Sampling only: what changes the loaded model is in RUNNER_OPTIONS.
OLLAMA_OPTIONS = (
    "top_k",
    "min_p",
    "typical_p",
    "repeat_penalty",
    "repeat_last_n",
    "num_keep",
    "mirostat",
    "mirostat_tau",
    "mirostat_eta",
)
# Options that change the model as Ollama has it loaded, for every caller: api/types.go `Runner`
# (0.6.7 to 0.33: num_ctx, num_batch, num_gpu, main_gpu, use_mmap, num_thread; 0.30 adds
# draft_num_predict; before 0.6.7 also low_vram, f16_kv, logits_all, vocab_only, use_mlock,
# numa; 0.1 also num_gqa and the rope ones). server/sched.go `needsReload` reloads the model
# whenever a request's `Runner` differs from the one it runs with. `num_ctx` is bounded
# (`bound_num_ctx`), the others are never sent.
RUNNER_OPTIONS = (
    "num_batch",
    "num_gpu",
    "main_gpu",
    "use_mmap",
    "num_thread",
    "draft_num_predict",
    "low_vram",
    "f16_kv",
    "logits_all",
    "vocab_only",
    "use_mlock",
    "numa",
    "num_gqa",
    "rope_frequency_base",
    "rope_frequency_scale",
)
RELOADS = "reloads the model for every caller (server/sched.go needsReload)"
# Fields of /api/chat that change the loaded model for everyone: `keep_alive` is how long it
# stays loaded after this request (0 unloads it, a negative value pins it: server/sched.go
# sessionDuration); `shift` is a launch setting of llama-server's (needsReload compares it).
SHARED_FIELDS = {
    "keep_alive": "unloads the model, or keeps it loaded, for every caller (server/sched.go)",
    "shift": RELOADS,
}
IMAGE_PREFIXES = tuple(f"data:image/{kind};base64," for kind in ("jpeg", "jpg", "png", "webp"))


def _image(url: Any) -> str:
    """An `image_url` as Ollama takes images: bare base64 (openai.go decodeImageURL)."""
    if isinstance(url, dict):
        url = url.get("url")
    if not isinstance(url, str):
        raise BadRequest("invalid message format", param="messages")
    if url.startswith(("http://", "https://")):
        raise BadRequest(
            "image URLs are not supported by Ollama, send base64 data: URLs instead",
            param="messages",
        )
    if url.startswith("data:;base64,"):
        return url.removeprefix("data:;base64,")
    for prefix in IMAGE_PREFIXES:
        if url.startswith(prefix):
            return url.removeprefix(prefix)
    raise BadRequest("invalid image input: Ollama takes JPEG, PNG or WebP", param="messages")


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    out = []
    for call in calls if isinstance(calls, list) else []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise BadRequest("invalid tool call", param="messages")
        arguments = function.get("arguments") or "{}"
        try:
            parsed = jsonio.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            raise BadRequest("invalid tool call arguments", param="messages") from None
        entry: dict[str, Any] = {"function": {"name": function.get("name"), "arguments": parsed}}
        if call.get("id"):
            entry["id"] = call["id"]
        out.append(entry)
    return out


def _tool_names(messages: list[Any]) -> dict[Any, str]:
    """The function each call id names, from the assistants' calls (a later call with the same
    id wins): read once, so a conversation of many calls and results costs one pass."""
    names: dict[Any, str] = {}
    for message in messages:
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict) and isinstance(call.get("id"), str):
                function = call.get("function")
                name = function.get("name") if isinstance(function, dict) else None
                names[call["id"]] = str(name or "")
    return names


def native_messages(messages: list[Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    names: dict[Any, str] | None = None
    for message in messages:
        if not isinstance(message, dict):
            raise BadRequest("invalid message format", param="messages")
        role = str(message.get("role") or "user")
        role = "system" if role == "developer" else role
        extra: dict[str, Any] = {}
        if role == "tool":
            name = message.get("name")
            if not name:
                names = _tool_names(messages) if names is None else names
                call_id = message.get("tool_call_id")
                name = names.get(call_id, "") if isinstance(call_id, str) else ""
            if name:
                extra["tool_name"] = name
        if message.get("tool_call_id"):
            extra["tool_call_id"] = message["tool_call_id"]
        thinking = message.get("reasoning") or message.get("reasoning_content")
        if isinstance(thinking, str) and thinking:
            extra["thinking"] = thinking
        calls = _tool_calls(message.get("tool_calls"))
        content = message.get("content")
        if isinstance(content, list):
            # Each part a message of its own, as Ollama's OpenAI layer sends them; the tool
            # calls go on the last one.
            parts: list[dict[str, Any]] = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text":
                    parts.append({"role": role, "content": str(part.get("text") or "")})
                elif kind == "image_url":
                    image = _image(part.get("image_url"))
                    parts.append({"role": role, "content": "", "images": [image]})
                elif kind == "input_audio":
                    # Ollama takes audio where it takes images, as base64 (openai.go).
                    audio = part.get("input_audio")
                    data = audio.get("data") if isinstance(audio, dict) else None
                    if not isinstance(data, str):
                        raise BadRequest("invalid input_audio format", param="messages")
                    parts.append({"role": role, "content": "", "images": [data]})
                else:
                    raise BadRequest(
                        f"content part type {kind!r} is not supported by Ollama", param="messages"
                    )
            if parts and (calls or extra):
                parts[-1].update(extra)
                if calls:
                    parts[-1]["tool_calls"] = calls
            out.extend(parts)
            continue
        entry: dict[str, Any] = {
            "role": role,
            "content": content if isinstance(content, str) else "",
        }
        if content is not None and not isinstance(content, str):
            raise BadRequest("invalid message content", param="messages")
        entry.update(extra)
        if calls:
            entry["tool_calls"] = calls
        out.append(entry)
    return out


def _stops(value: Any) -> list[str] | None:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for s in value if isinstance(s, str)]
    return None


def _format(response_format: Any) -> Any:
    if not isinstance(response_format, dict):
        return None
    kind = str(response_format.get("type") or "").strip().lower()
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        schema = response_format.get("json_schema")
        return schema.get("schema") if isinstance(schema, dict) else None
    return None


def _think(body: Mapping[str, Any]) -> Any:
    reasoning = body.get("reasoning")
    effort = reasoning.get("effort") if isinstance(reasoning, dict) else None
    effort = effort or body.get("reasoning_effort")
    if not effort:
        return None
    if effort not in THINK:
        raise BadRequest(f"invalid reasoning value: {effort!r}", param="reasoning_effort")
    return THINK[effort]


@dataclass(frozen=True)
class SharedSettings:
    """What a caller asked of Ollama that would change the model for every caller: the window
    it asked for (`options.num_ctx`, bounded before it is sent) and what is never sent, each
    with why (`keep_alive`, `options.num_gpu`, ...)."""

    asked_num_ctx: int | None = None
    dropped: dict[str, str] = field(default_factory=dict)


def _asked_window(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value >= 1 else None


def without_shared_settings(body: Mapping[str, Any]) -> tuple[dict[str, Any], SharedSettings]:
    """`body` without what changes the loaded model for every caller — `keep_alive`, `shift`,
    the runner options at the top level or in `options`, and `options.num_ctx` (returned as
    asked, for the fit stage to bound) — and what was taken out. A copy; `body` is untouched."""
    out = dict(body)
    dropped: dict[str, str] = {}
    for name, why in SHARED_FIELDS.items():
        if name in out:
            del out[name]
            dropped[name] = why
    for name in RUNNER_OPTIONS:
        if name in out:
            del out[name]
            dropped[name] = RELOADS
    asked = None
    options = out.get("options")
    if isinstance(options, dict):
        options = dict(options)
        for name in RUNNER_OPTIONS:
            if name in options:
                del options[name]
                dropped[f"options.{name}"] = RELOADS
        if "num_ctx" in options:
            asked = _asked_window(options.pop("num_ctx"))
        out["options"] = options
    return out, SharedSettings(asked, dropped)


def native_chat_request(
    body: Mapping[str, Any], *, num_ctx: int, num_predict: int | None, truncate_field: bool
) -> dict[str, Any]:
    """`body` (an OpenAI chat request) for `POST /api/chat`, run with a window of `num_ctx`.

    `num_predict` caps the answer when the client set no max_tokens (the room left in the
    window), so that the answer stops at the window's end instead of pushing the prompt out.
    `truncate_field` sends `truncate: false` (Ollama ≥ 0.12.6 then refuses, never cuts).
    Nothing that changes the loaded model for every caller is sent but `num_ctx`: a larger
    `options.num_ctx` in `body` is kept, so the fit stage takes the caller's out first
    (`without_shared_settings`) and bounds it.
    """
    messages = body.get("messages")
    options: dict[str, Any] = {}
    client_options = body.get("options")
    if isinstance(client_options, dict):
        options.update(
            (name, value) for name, value in client_options.items() if name not in RUNNER_OPTIONS
        )
    for name in OLLAMA_OPTIONS:
        if name in body:
            options[name] = body[name]
    stops = _stops(body.get("stop"))
    if stops is not None:
        options["stop"] = stops
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    if isinstance(max_tokens, int) and max_tokens > 0:
        options["num_predict"] = max_tokens
    elif num_predict is not None:
        options["num_predict"] = num_predict
    # OpenAI's defaults, as Ollama's OpenAI layer sets them (not the Modelfile's).
    options["temperature"] = body["temperature"] if body.get("temperature") is not None else 1.0
    options["top_p"] = body["top_p"] if body.get("top_p") is not None else 1.0
    for name in ("seed", "frequency_penalty", "presence_penalty"):
        if body.get(name) is not None:
            options[name] = body[name]
    asked = options.get("num_ctx")
    options["num_ctx"] = max(num_ctx, asked) if isinstance(asked, int) else num_ctx
    request: dict[str, Any] = {
        "model": body.get("model"),
        "messages": native_messages(messages if isinstance(messages, list) else []),
        "stream": bool(body.get("stream")),
        "options": options,
    }
    if truncate_field:
        request["truncate"] = False
    response_format = _format(body.get("response_format"))
    if response_format is not None:
        request["format"] = response_format
    if body.get("tools"):
        request["tools"] = body["tools"]
    think = _think(body)
    if think is not None:
        request["think"] = think
    if body.get("logprobs"):
        request["logprobs"] = True
        if isinstance(body.get("top_logprobs"), int):
            request["top_logprobs"] = body["top_logprobs"]
    return request
