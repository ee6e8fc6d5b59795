"""A chat completion turned into a Responses API `response` object (pure)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.pipeline.citing import place_of, place_offsets, source_offsets
from proxy.responses.request import Asked

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


@dataclass(frozen=True)
class Ids:
    """The ids of one response and its output items, from one random token."""

    token: str

    @classmethod
    def new(cls) -> Ids:
        return cls(os.urandom(12).hex())

    @property
    def response(self) -> str:
        return f"resp_{self.token}"

    def message(self, number: int = 0) -> str:
        return f"msg_{self.token}" + (f"_{number}" if number else "")

    def call(self, number: int) -> str:
        return f"fc_{self.token}_{number}"

    @property
    def file_search(self) -> str:
        return f"fs_{self.token}"

    def search(self, number: int) -> str:
        """The id of the model's `number`th search call (a loop may make several)."""
        return f"fs_{self.token}_{number}"


@dataclass(frozen=True)
class Cited:
    """What the answer says about its sources: passages, the inline block, top-level fields."""

    search_results: list[dict[str, Any]] = field(default_factory=list)
    block: str = ""  # the "Sources:" block appended to the text (inline or both), else ''
    fields: dict[str, Any] = field(default_factory=dict)  # citations + search_results, or {}
    file_search: dict[str, Any] | None = None  # the file_search_call item, when one was asked
    searches: list[dict[str, Any]] = field(default_factory=list)  # the model's own, in order


def file_citations(
    search_results: Sequence[dict[str, Any]], text_length: int, block: str
) -> list[dict[str, Any]]:
    """One `file_citation` per file and place, in the order first cited, never two alike. With
    a "Sources:" block its index points at the place in the file's line (`4` in `pages 1, 4`);
    without one, at the end of the model's text — so there, one per file."""
    places = place_offsets(search_results) if block else {}
    lines = source_offsets(search_results) if block else {}
    annotations: list[dict[str, Any]] = []
    for result in search_results:
        name = str(result.get("title") or result.get("url") or "document")
        annotation: dict[str, Any] = {"type": "file_citation"}
        if result.get("file_id"):
            annotation["file_id"] = result["file_id"]
        annotation["filename"] = name
        at = places.get((name, place_of(result) or ("", "")), lines.get(name, 0))
        annotation["index"] = text_length + at if block else text_length
        if annotation not in annotations:
            annotations.append(annotation)
    return annotations


def file_search_item(
    item_id: str,
    queries: list[str],
    results: list[dict[str, Any]],
    include_results: bool,
    status: str = "completed",
) -> dict[str, Any]:
    """The search the proxy ran for a file_search tool, as a `file_search_call` output item;
    its results only when `include: ["file_search_call.results"]` asked for them."""
    return {
        "id": item_id,
        "type": "file_search_call",
        "status": status,
        "queries": queries,
        "results": results if include_results and status == "completed" else None,
    }


def output_text(text: str, annotations: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": annotations, "logprobs": []}


def message_item(
    item_id: str, content: list[dict[str, Any]], status: str = "completed"
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def function_call_item(
    item_id: str, call_id: str, name: str, arguments: str, status: str = "completed"
) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def usage_from_chat(usage: Any) -> dict[str, Any] | None:
    """Chat `usage` (prompt/completion tokens) in the Responses shape (input/output tokens)."""
    if not isinstance(usage, dict):
        return None
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    prompt_details = usage.get("prompt_tokens_details") or {}
    completion_details = usage.get("completion_tokens_details") or {}
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(prompt_details.get("cached_tokens") or 0)},
        "output_tokens": completion,
        "output_tokens_details": {
            "reasoning_tokens": int(completion_details.get("reasoning_tokens") or 0)
        },
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def response_object(
    asked: Asked,
    ids: Ids,
    *,
    created_at: int,
    status: str,
    model: str | None = None,
    output: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """The `response` object with everything the request asked for repeated back."""
    incomplete = INCOMPLETE.get(finish_reason or "")
    if incomplete and status == "completed":
        status = "incomplete"
    return {
        "id": ids.response,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        "instructions": asked.instructions,
        "max_output_tokens": asked.max_output_tokens,
        "model": model or asked.model or "unknown",
        "output": output or [],
        "parallel_tool_calls": asked.parallel_tool_calls,
        "previous_response_id": None,
        "store": False,
        "temperature": asked.temperature,
        "text": asked.text,
        "tool_choice": asked.tool_choice,
        "tools": asked.tools,
        "top_p": asked.top_p,
        "truncation": "disabled",
        "usage": usage,
        "user": asked.user,
        "metadata": asked.metadata,
    }


def _text_of(content: Any) -> str | None:
    if isinstance(content, str) or content is None:
        return content
    if isinstance(content, list):  # a few servers answer in parts
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def response_from_chat(
    completion: dict[str, Any], asked: Asked, ids: Ids, cited: Cited, *, created_at: int
) -> dict[str, Any]:
    """A `chat.completion` as a `response`: the message as an `output_text` with its
    `file_citation` annotations (and the "Sources:" block, inline), tool calls as
    `function_call` items, usage in input/output tokens."""
    choices = completion.get("choices")
    choice = choices[0] if isinstance(choices, list) and choices else {}
    message = choice.get("message") if isinstance(choice, dict) else None
    message = message if isinstance(message, dict) else {}
    finish = choice.get("finish_reason") if isinstance(choice, dict) else None
    status = "incomplete" if finish in INCOMPLETE else "completed"
    output: list[dict[str, Any]] = [cited.file_search] if cited.file_search else []
    output += cited.searches
    text = _text_of(message.get("content"))
    listed = message.get("tool_calls")
    calls: list[Any] = listed if isinstance(listed, list) else []
    refusal = message.get("refusal")
    if text is not None or not calls:
        text = text or ""
        block = cited.block if finish != "tool_calls" else ""
        content = [
            output_text(text + block, file_citations(cited.search_results, len(text), block))
        ]
        if isinstance(refusal, str) and refusal:
            content.append({"type": "refusal", "refusal": refusal})
        output.append(message_item(ids.message(), content, status))
    for number, call in enumerate(call for call in calls if isinstance(call, dict)):
        function = call.get("function") or {}
        output.append(
            function_call_item(
                ids.call(number),
                str(call.get("id") or ids.call(number)),
                str(function.get("name") or ""),
                str(function.get("arguments") or ""),
            )
        )
    response = response_object(
        asked,
        ids,
        created_at=created_at,
        status="completed",
        model=completion.get("model"),
        output=output,
        usage=usage_from_chat(completion.get("usage")),
        finish_reason=finish,
    )
    response.update(cited.fields)
    return response
