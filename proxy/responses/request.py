"""A Responses API request as the Chat Completions request the pipeline works on (pure)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from proxy.pipeline.file_search import FileSearch
from proxy.responses.items import STATELESS, bad, input_messages, text_of
from proxy.stores.filters import parse_filter

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
    file_search: FileSearch | None = None  # searched by the proxy before the model answers
    include_results: bool = False  # include: ["file_search_call.results"]


def _file_search(tool: dict[str, Any], where: str) -> FileSearch:
    """The file_search tool: the proxy searches the stores itself (see docs/replicas.md)."""
    ids = tool.get("vector_store_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise bad("must be a non-empty array of vector store ids", f"{where}.vector_store_ids")
    limit = tool.get("max_num_results")
    if limit is not None and (
        isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 50
    ):
        raise bad("must be an integer from 1 to 50", f"{where}.max_num_results")
    ranking = tool.get("ranking_options") or {}
    if not isinstance(ranking, dict):
        raise bad("must be an object", f"{where}.ranking_options", "invalid_type")
    threshold = ranking.get("score_threshold")
    if threshold is not None and (
        isinstance(threshold, bool)
        or not isinstance(threshold, int | float)
        or not 0 <= threshold <= 1
    ):
        raise bad("must be a number from 0 to 1", f"{where}.ranking_options.score_threshold")
    filters = tool.get("filters")
    return FileSearch(
        vector_store_ids=tuple(ids),
        max_num_results=limit,
        filters=None if filters is None else parse_filter(filters, f"{where}.filters"),
        score_threshold=None if threshold is None else float(threshold),
    )


def _tools(value: Any) -> tuple[list[dict[str, Any]], FileSearch | None]:
    """Function tools in chat's shape, and the file_search tool (the proxy's own work)."""
    if not isinstance(value, list):
        raise bad("must be an array", "tools", "invalid_type")
    tools = []
    search: FileSearch | None = None
    for index, tool in enumerate(value):
        where = f"tools[{index}]"
        if isinstance(tool, dict) and tool.get("type") == "file_search":
            if search is not None:
                raise bad("give one file_search tool (it takes several stores)", where)
            search = _file_search(tool, where)
            continue
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad(
                f"only function tools and file_search are supported here, not {kind!r}", where
            )
        function = {"name": text_of(tool.get("name"), f"{where}.name")}
        for key in ("description", "parameters", "strict"):
            if tool.get(key) is not None:
                function[key] = tool[key]
        tools.append({"type": "function", "function": function})
    return tools, search


def _tool_choice(value: Any) -> Any:
    if value in ("auto", "none", "required"):
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        return {"type": "function", "function": {"name": text_of(value.get("name"), "tool_choice")}}
    raise bad("must be auto, none, required or {type: function, name}", "tool_choice")


def _response_format(text: Any) -> dict[str, Any] | None:
    if not isinstance(text, dict):
        raise bad("must be an object", "text", "invalid_type")
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
        schema = {"name": text_of(fmt.get("name"), "text.format.name"), "schema": fmt.get("schema")}
        if not isinstance(schema["schema"], dict):
            raise bad("must be an object", "text.format.schema", "invalid_type")
        for key in ("description", "strict"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        return {"type": "json_schema", "json_schema": schema}
    raise bad("type must be text, json_object or json_schema", "text.format")


def _number(body: dict[str, Any], key: str) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad("must be a number", key, "invalid_type")
    return value


def _refuse_state(body: dict[str, Any]) -> None:
    for key in ("previous_response_id", "conversation"):
        if body.get(key) is not None:
            raise bad(STATELESS, key, "unsupported_parameter")
    if body.get("background"):
        raise bad("background responses are not supported by this proxy", "background")
    if body.get("prompt") is not None:
        raise bad("stored prompt templates are not supported by this proxy", "prompt")


def chat_request(
    body: dict[str, Any], max_items: int | None = None
) -> tuple[dict[str, Any], Asked]:
    """The chat body for a Responses body, and what the response object must repeat; an
    `input` of more than `max_items` items is refused before it is translated."""
    _refuse_state(body)
    if "input" not in body:
        raise bad("is required", "input", "missing_required_parameter")
    messages = input_messages(body["input"], max_items)
    instructions = body.get("instructions")
    if instructions is not None:
        messages.insert(0, {"role": "system", "content": text_of(instructions, "instructions")})
    chat: dict[str, Any] = {
        key: value for key, value in body.items() if key not in TRANSLATED | IGNORED
    }
    if isinstance(body.get("model"), str):
        chat["model"] = body["model"]
    chat["messages"] = messages
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise bad("must be a boolean", "stream", "invalid_type")
    if stream:
        # Usage arrives in a last chunk only when asked for; response.completed reports it.
        chat.update(stream=True, stream_options={"include_usage": True})
    max_output = body.get("max_output_tokens")
    if max_output is not None:
        if isinstance(max_output, bool) or not isinstance(max_output, int) or max_output < 1:
            raise bad("must be a positive integer", "max_output_tokens")
        chat["max_tokens"] = max_output
    for key in ("temperature", "top_p"):
        if _number(body, key) is not None:
            chat[key] = body[key]
    tools, file_search = _tools(body["tools"]) if body.get("tools") else ([], None)
    if tools:
        chat["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "file_search":
        # The model's first turn searches (when the model writes the searches; searched once,
        # the proxy searches whenever the tool is given).
        if file_search is not None:
            file_search = dataclasses.replace(file_search, forced=True)
    elif choice is not None:
        chat["tool_choice"] = _tool_choice(choice)
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
        raise bad("must be an object of strings", "metadata", "invalid_type")
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
        file_search=file_search,
        include_results=_includes(body.get("include"), "file_search_call.results"),
    )
    return chat, asked


def take_file_search(body: dict[str, Any]) -> tuple[FileSearch | None, bool]:
    """For an upstream that speaks Responses: the file_search tool taken out of `body` (the
    proxy runs the search; the upstream would not know the stores), and whether its results
    are to be included."""
    tools = body.get("tools")
    if not isinstance(tools, list):
        return None, False
    found: FileSearch | None = None
    kept = []
    for index, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "file_search":
            if found is not None:
                raise bad("give one file_search tool (it takes several stores)", f"tools[{index}]")
            found = _file_search(tool, f"tools[{index}]")
        else:
            kept.append(tool)
    if found is None:
        return None, False
    if kept:
        body["tools"] = kept
    else:
        body.pop("tools")
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "file_search":
        body.pop("tool_choice")
    return found, _includes(body.get("include"), "file_search_call.results")


def _includes(value: Any, wanted: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise bad("must be an array of strings", "include", "invalid_type")
    return wanted in value
