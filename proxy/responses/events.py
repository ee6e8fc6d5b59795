"""Chat completion chunks in, the Responses API's stream events out, numbered in order (pure)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from proxy.errors import ProxyError
from proxy.responses.answer import (
    INCOMPLETE,
    Cited,
    Ids,
    file_citations,
    file_search_item,
    function_call_item,
    message_item,
    output_text,
    response_object,
    usage_from_chat,
)
from proxy.responses.request import Asked


@dataclass
class _Call:
    output_index: int
    item_id: str
    call_id: str
    name: str
    arguments: str = ""
    done: bool = False


@dataclass
class _Message:
    output_index: int
    item_id: str
    text: str = ""


@dataclass
class ResponseStream:
    """One streamed response: `start()`, `feed(chunk)` for each chat chunk, `finish()`.

    The message item stays open until the end, so the "Sources:" block and the annotations
    land on it however text and tool calls interleave; each tool call is its own item.
    """

    asked: Asked
    ids: Ids
    cited: Cited
    created_at: int
    sequence: int = 0
    model: str | None = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    finished: bool = False
    items: int = 0
    message: _Message | None = None
    calls: dict[int, _Call] = field(default_factory=dict)
    done_items: dict[int, dict[str, Any]] = field(default_factory=dict)
    searching: dict[str, int] = field(default_factory=dict)  # search item id → output index
    started: bool = False

    def _event(self, kind: str, **fields: Any) -> dict[str, Any]:
        event = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return event

    def _response(self, status: str) -> dict[str, Any]:
        output = [self.done_items[index] for index in sorted(self.done_items)]
        return response_object(
            self.asked,
            self.ids,
            created_at=self.created_at,
            status=status,
            model=self.model,
            output=output,
            usage=self.usage,
            finish_reason=self.finish_reason,
        )

    def start(self) -> list[dict[str, Any]]:
        self.started = True
        response = self._response("in_progress")
        return [
            self._event("response.created", response=response),
            self._event("response.in_progress", response=response),
            *self._file_search(),
        ]

    def _file_search(self) -> list[dict[str, Any]]:
        """The search the proxy ran before the model answered, as the first output item."""
        item = self.cited.file_search
        if item is None:
            return []
        return [*self.search_begun(item["id"]), *self.search_done(item)]

    def search_begun(self, item_id: str) -> list[dict[str, Any]]:
        """A search starts: its `file_search_call` item opens at the next output index."""
        index, self.items = self.items, self.items + 1
        self.searching[item_id] = index
        where = {"output_index": index, "item_id": item_id}
        opened = file_search_item(item_id, [], [], False, "in_progress")
        return [
            self._event("response.output_item.added", output_index=index, item=opened),
            *[
                self._event(f"response.file_search_call.{stage}", **where)
                for stage in ("in_progress", "searching")
            ],
        ]

    def search_done(self, item: dict[str, Any]) -> list[dict[str, Any]]:
        """The search begun for `item["id"]` has run: its item is complete."""
        index = self.searching.pop(item["id"])
        self.done_items[index] = item
        return [
            self._event(
                "response.file_search_call.completed", output_index=index, item_id=item["id"]
            ),
            self._event("response.output_item.done", output_index=index, item=item),
        ]

    def _open_message(self) -> list[dict[str, Any]]:
        self.message = _Message(self.items, self.ids.message())
        self.items += 1
        item = message_item(self.message.item_id, [], "in_progress")
        return [
            self._event(
                "response.output_item.added", output_index=self.message.output_index, item=item
            ),
            self._event(
                "response.content_part.added",
                item_id=self.message.item_id,
                output_index=self.message.output_index,
                content_index=0,
                part=output_text("", []),
            ),
        ]

    def _text(self, delta: str) -> list[dict[str, Any]]:
        events = self._open_message() if self.message is None else []
        assert self.message is not None
        self.message.text += delta
        events.append(
            self._event(
                "response.output_text.delta",
                item_id=self.message.item_id,
                output_index=self.message.output_index,
                content_index=0,
                delta=delta,
                logprobs=[],
            )
        )
        return events

    def _call(self, delta: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        index = delta.get("index", 0)
        function = delta.get("function") or {}
        call = self.calls.get(index)
        if call is None:
            # A new call ends the ones before it: their arguments are complete.
            for earlier in self.calls.values():
                events += self._close_call(earlier)
            number = len(self.calls)
            call = _Call(
                self.items,
                self.ids.call(number),
                str(delta.get("id") or self.ids.call(number)),
                str(function.get("name") or ""),
            )
            self.items += 1
            self.calls[index] = call
            item = function_call_item(call.item_id, call.call_id, call.name, "", "in_progress")
            events.append(
                self._event("response.output_item.added", output_index=call.output_index, item=item)
            )
        pieces = function.get("arguments")
        if isinstance(pieces, str) and pieces:
            call.arguments += pieces
            events.append(
                self._event(
                    "response.function_call_arguments.delta",
                    item_id=call.item_id,
                    output_index=call.output_index,
                    delta=pieces,
                )
            )
        return events

    def _close_call(self, call: _Call) -> list[dict[str, Any]]:
        if call.done:
            return []
        call.done = True
        item = function_call_item(call.item_id, call.call_id, call.name, call.arguments)
        self.done_items[call.output_index] = item
        return [
            self._event(
                "response.function_call_arguments.done",
                item_id=call.item_id,
                output_index=call.output_index,
                arguments=call.arguments,
            ),
            self._event("response.output_item.done", output_index=call.output_index, item=item),
        ]

    def _close_message(self) -> list[dict[str, Any]]:
        message = self.message
        if message is None:
            return []
        events: list[dict[str, Any]] = []
        answered = len(message.text)
        block = self.cited.block if self.finish_reason != "tool_calls" else ""
        if block:
            events += self._text(block)
        annotations = file_citations(self.cited.search_results, answered, block)
        where = {"item_id": message.item_id, "output_index": message.output_index}
        for number, annotation in enumerate(annotations):
            events.append(
                self._event(
                    "response.output_text.annotation.added",
                    **where,
                    content_index=0,
                    annotation_index=number,
                    annotation=annotation,
                )
            )
        part = output_text(message.text, annotations)
        status = "incomplete" if self.finish_reason in INCOMPLETE else "completed"
        item = message_item(message.item_id, [part], status)
        self.done_items[message.output_index] = item
        events += [
            self._event(
                "response.output_text.done",
                **where,
                content_index=0,
                text=message.text,
                logprobs=[],
            ),
            self._event("response.content_part.done", **where, content_index=0, part=part),
            self._event("response.output_item.done", output_index=message.output_index, item=item),
        ]
        return events

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        """The events for one `chat.completion.chunk`."""
        if isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self.usage = usage_from_chat(chunk["usage"])
        events: list[dict[str, Any]] = []
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n > 1 has no Responses equivalent: the first choice is the answer
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                events += self._text(content)
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    events += self._call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def finish(self) -> list[dict[str, Any]]:
        """Close what is open and complete the response (once)."""
        if self.finished:
            return []
        self.finished = True
        # An empty answer is still an answer: one message with no text.
        events = self._open_message() if self.message is None and not self.calls else []
        events += self._close_message()
        for call in self.calls.values():
            events += self._close_call(call)
        # `response.completed` also for a cut-off answer (status `incomplete`): the openai
        # SDK's stream helper only finishes on `response.completed`.
        response = {**self._response("completed"), **self.cited.fields}
        events.append(self._event("response.completed", response=response))
        return events

    def fail(self, message: str, code: str | None = None) -> list[dict[str, Any]]:
        """The stream broke off (the upstream died, or failed): it ends failed (once)."""
        if self.finished:
            return []
        # The SDK's stream helper wants to know the response before it can fail.
        opened = [] if self.started else self.start()
        self.finished = True
        events = failure_events(self.sequence, self._response("failed"), message, code)
        self.sequence += len(events)
        return [*opened, *events]

    def ending(self, error: ProxyError) -> bytes:
        """The stream's last bytes when `error` ends it (see proxy.upstream.relay.Ending)."""
        return b"".join(sse(event) for event in self.fail(error.message, error.code))


def failure_events(
    sequence: int, response: dict[str, Any], message: str, code: str | None
) -> list[dict[str, Any]]:
    """How a Responses stream that cannot finish ends: an `error` event, then
    `response.failed` with the response as far as it got (never chat's `data: [DONE]`)."""
    failed = {**response, "status": "failed", "error": {"code": "server_error", "message": message}}
    return [
        {
            "type": "error",
            "sequence_number": sequence,
            "code": code or "server_error",
            "message": message,
            "param": None,
        },
        {"type": "response.failed", "sequence_number": sequence + 1, "response": failed},
    ]


def sse(event: dict[str, Any]) -> bytes:
    """One event as the Responses API sends it: an `event:` line naming its type, then data."""
    data = json.dumps(event, ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()
