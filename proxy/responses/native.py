"""For upstreams that speak Responses themselves: enrich `input` in place, cite in the answer."""

from __future__ import annotations

import copy
from typing import Any

from proxy.responses.answer import Cited, file_citations


def input_part(part: dict[str, Any]) -> dict[str, Any]:
    """A chat content part back in the Responses shape."""
    if part.get("type") == "text":
        return {"type": "input_text", "text": part.get("text", "")}
    if part.get("type") == "image_url":
        image = part.get("image_url") or {}
        back = {"type": "input_image", "image_url": image.get("url")}
        return {**back, "detail": image.get("detail", "auto")}
    return part


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "input_text", "text": content}]
    return [input_part(part) for part in content or [] if isinstance(part, dict)]


def patch_input(
    items: list[Any], origins: list[int], before: int, enriched: list[dict[str, Any]]
) -> list[Any]:
    """`items` with each user item's content as the pipeline left it: the last one holds the
    enriched prompt, earlier ones an `[attached: name]` marker where a file was.

    `origins[i]` is the input item chat message `i` came from (-1: none, an earlier turn of a
    chain the proxy searched with); `before` is how many chat messages there were. The
    pipeline may drop the oldest turns (context shifting); the messages it kept are the last
    ones, so they are matched from the end.
    """
    patched = list(items)
    kept = len(enriched)
    for offset in range(1, min(kept, before) + 1):
        message, origin = enriched[kept - offset], origins[before - offset]
        if origin < 0:  # an earlier turn of the chain, which the upstream keeps itself
            continue
        item = patched[origin]
        if message.get("role") == "user" and isinstance(item, dict) and item.get("role") == "user":
            patched[origin] = {**item, "content": _content(message)}
    return patched


def _first_text(output: list[Any]) -> tuple[int, dict[str, Any]] | None:
    for index, item in enumerate(output):
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    return index, part
    return None


def cite_part(part: dict[str, Any], cited: Cited, answered: int) -> None:
    """The block after the model's text and the `file_citation` annotations, in place."""
    part["text"] = str(part.get("text") or "")[:answered] + cited.block
    notes = file_citations(cited.search_results, answered, cited.block)
    part["annotations"] = [*(part.get("annotations") or []), *notes]


def cite_response(response: dict[str, Any], cited: Cited) -> dict[str, Any]:
    """The upstream's `response` with the proxy's file search first in its output and the
    sources on its first output text."""
    if not cited.search_results and cited.file_search is None:
        return response
    response = copy.deepcopy(response)
    if cited.file_search is not None and isinstance(response.get("output"), list):
        response["output"].insert(0, cited.file_search)
    found = _first_text(response.get("output") or [])
    if found is not None and cited.search_results:
        part = found[1]
        cite_part(part, cited, len(str(part.get("text") or "")))
    response.update(cited.fields)
    return response


class NativeStream:
    """The upstream's Responses events with the sources added to its first output text: one
    more delta for the "Sources:" block, annotation events, patched done events, and the
    sequence numbers after them shifted to stay in order."""

    def __init__(self, cited: Cited) -> None:
        self.cited = cited
        self.shift = 0
        self.target: tuple[str, int] | None = None  # (item id, content index)
        self.answered = 0
        self.inserted = False
        self.searched = cited.file_search is None  # the file_search_call item went out

    def _search_events(self, before: dict[str, Any]) -> list[dict[str, Any]]:
        """The proxy's file search as output item 0, ahead of the upstream's own items."""
        item = self.cited.file_search
        assert item is not None
        self.searched = True
        where = {"output_index": 0, "item_id": item["id"]}
        opened = {**item, "status": "in_progress", "queries": [], "results": None}
        events = [
            {"type": "response.output_item.added", "output_index": 0, "item": opened},
            *[
                {"type": f"response.file_search_call.{stage}", **where}
                for stage in ("in_progress", "searching", "completed")
            ],
            {"type": "response.output_item.done", "output_index": 0, "item": item},
        ]
        base = before.get("sequence_number")
        for event in events:
            if isinstance(base, int):
                event["sequence_number"] = base + self.shift
            self.shift += 1
        return events

    def _here(self, event: dict[str, Any]) -> bool:
        return self.target == (event.get("item_id"), event.get("content_index"))

    def feed(self, event: dict[str, Any]) -> list[dict[str, Any]]:
        if not self.cited.search_results and self.cited.file_search is None:
            return [event]
        event = copy.deepcopy(event)
        kind = event.get("type")
        searched: list[dict[str, Any]] = []
        if self.cited.file_search is not None:
            if not self.searched and kind not in ("response.created", "response.in_progress"):
                searched = self._search_events(event)
            if isinstance(event.get("output_index"), int):
                event["output_index"] += 1
            response = event.get("response")
            finished = kind in ("response.completed", "response.incomplete", "response.failed")
            if finished and isinstance(response, dict) and isinstance(response.get("output"), list):
                response["output"].insert(0, self.cited.file_search)
        if not self.cited.search_results:
            if isinstance(event.get("sequence_number"), int):
                event["sequence_number"] += self.shift
            return [*searched, event]
        part = event.get("part") or {}
        if (
            kind == "response.content_part.added"
            and self.target is None
            and (part.get("type") == "output_text")
        ):
            self.target = (str(event.get("item_id")), int(event.get("content_index") or 0))
        out: list[dict[str, Any]] = []
        if kind == "response.output_text.done" and self._here(event) and not self.inserted:
            self.inserted = True
            self.answered = len(str(event.get("text") or ""))
            out += self._inserted(event)
            event["text"] = str(event.get("text") or "") + self.cited.block
        elif kind == "response.content_part.done" and self._here(event):
            cite_part(event["part"], self.cited, self.answered)
        elif kind == "response.output_item.done" and self.target is not None:
            item = event.get("item") or {}
            if item.get("id") == self.target[0]:
                self._cite_item(item)
        elif kind in ("response.completed", "response.incomplete") and self.target is not None:
            response = event.get("response") or {}
            for item in response.get("output") or []:
                if isinstance(item, dict) and item.get("id") == self.target[0]:
                    self._cite_item(item)
            response.update(self.cited.fields)
        if isinstance(event.get("sequence_number"), int):
            event["sequence_number"] += self.shift
        return [*searched, *out, event]

    def _cite_item(self, item: dict[str, Any]) -> None:
        assert self.target is not None
        content = item.get("content") or []
        index = self.target[1]
        if isinstance(index, int) and 0 <= index < len(content):
            cite_part(content[index], self.cited, self.answered)

    def _inserted(self, done: dict[str, Any]) -> list[dict[str, Any]]:
        where = {
            "item_id": done.get("item_id"),
            "output_index": done.get("output_index"),
            "content_index": done.get("content_index"),
        }
        events: list[dict[str, Any]] = []
        if self.cited.block:
            events.append(
                {
                    "type": "response.output_text.delta",
                    **where,
                    "delta": self.cited.block,
                    "logprobs": [],
                }
            )
        notes = file_citations(self.cited.search_results, self.answered, self.cited.block)
        for number, note in enumerate(notes):
            events.append(
                {
                    "type": "response.output_text.annotation.added",
                    **where,
                    "annotation_index": number,
                    "annotation": note,
                }
            )
        base = done.get("sequence_number")
        for event in events:
            if isinstance(base, int):
                event["sequence_number"] = base + self.shift
            self.shift += 1
        return events
