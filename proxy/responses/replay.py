"""A whole `response` as the stream of events it would have been (pure)."""

from __future__ import annotations

from typing import Any

from proxy.responses.answer import output_text


def events_from_response(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole `response` as the event sequence a stream would have given (for an upstream that
    answered a streamed request with one JSON body)."""
    sequence = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "sequence_number": next(sequence), **fields}

    started = {**response, "status": "in_progress", "output": [], "usage": None}
    events = [event("response.created", response=started)]
    events.append(event("response.in_progress", response=started))
    for index, item in enumerate(response.get("output") or []):
        opened = {**item, "status": "in_progress"}
        if item["type"] == "message":
            opened["content"] = []
        if item["type"] == "function_call":
            opened["arguments"] = ""
        if item["type"] == "file_search_call":
            opened.update(queries=[], results=None)
        events.append(event("response.output_item.added", output_index=index, item=opened))
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "file_search_call":
            for stage in ("in_progress", "searching", "completed"):
                events.append(event(f"response.file_search_call.{stage}", **where))
        if item["type"] == "function_call":
            if item["arguments"]:
                events.append(
                    event(
                        "response.function_call_arguments.delta", **where, delta=item["arguments"]
                    )
                )
            events.append(
                event("response.function_call_arguments.done", **where, arguments=item["arguments"])
            )
        for number, part in enumerate(item.get("content") or []):
            place = {**where, "content_index": number}
            if part["type"] != "output_text":
                events.append(event("response.content_part.added", **place, part=part))
                events.append(event("response.content_part.done", **place, part=part))
                continue
            events.append(event("response.content_part.added", **place, part=output_text("", [])))
            if part["text"]:
                events.append(
                    event("response.output_text.delta", **place, delta=part["text"], logprobs=[])
                )
            for at, annotation in enumerate(part["annotations"]):
                events.append(
                    event(
                        "response.output_text.annotation.added",
                        **place,
                        annotation_index=at,
                        annotation=annotation,
                    )
                )
            events.append(
                event("response.output_text.done", **place, text=part["text"], logprobs=[])
            )
            events.append(event("response.content_part.done", **place, part=part))
        events.append(event("response.output_item.done", output_index=index, item=item))
    events.append(event("response.completed", response=response))
    return events
