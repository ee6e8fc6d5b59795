"""The cited files and pages where people look: a "Sources:" block, a header, a stream chunk."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from proxy.pipeline.exchange import Exchange

SOURCES_HEADING = "\n\nSources:\n"
HEADER_CHARS = 1024
WHOLE_DOCUMENT = "whole document"
"""The place of a document the model got in full (`- report.pdf, whole document`)."""


def whole_document(name: str, file_id: str | None = None) -> dict[str, Any]:
    """A document injected in full, as a source: named like a search result, placed nowhere."""
    source: dict[str, Any] = {"title": name, "location": WHOLE_DOCUMENT}
    if file_id:
        source["file_id"] = file_id
    return source


def _file_of(result: dict[str, Any]) -> str:
    return str(result.get("title") or result.get("url") or "document")


def _location(result: dict[str, Any]) -> tuple[str, str] | None:
    """(`page`, `4`) from a search result's `location` (`page=4`, `section=2.3 Refunds`,
    `sheet=Q3`, `slide=4`, `line=10`) or its `page`."""
    location = result.get("location")
    if isinstance(location, str) and location:
        kind, _, value = location.partition("=")
        return (kind, value) if value else ("", kind)
    page = result.get("page")
    if isinstance(page, int) and not isinstance(page, bool):
        return ("page", str(page))
    return None


Place = tuple[str, str]
"""(`page`, `4`), (`section`, `2.3 Refunds`), (``, `whole document`)."""


def _places_by_file(search_results: Sequence[dict[str, Any]]) -> dict[str, dict[str, list[str]]]:
    places: dict[str, dict[str, list[str]]] = {}
    for result in search_results:
        kinds = places.setdefault(_file_of(result), {})
        found = _location(result)
        if found is not None and found[1] not in kinds.setdefault(found[0], []):
            kinds[found[0]].append(found[1])
    return places


def _line(name: str, kinds: dict[str, list[str]]) -> tuple[str, dict[Place, int]]:
    """A file's line of the block, and where in it each of its places is written: numbered
    places of one kind together and in order (`pages 1, 4`), others as cited."""
    line = f"- {name}"
    spots: dict[Place, int] = {}
    first = True

    def put(text: str) -> int:
        nonlocal line, first
        line += (", " if first else "; ") + text
        first = False
        return len(line) - len(text)

    for kind, values in kinds.items():
        if values and all(value.isdigit() for value in values):
            ordered = sorted(values, key=int)
            plural = "s" if kind and len(values) > 1 else ""
            head = f"{kind}{plural} " if kind else ""
            at = put(head + ", ".join(ordered)) + len(head)
            for value in ordered:
                spots[(kind, value)] = at
                at += len(value) + 2
        else:
            for value in values:
                spots[(kind, value)] = put(f"{kind} {value}".strip())
    return line, spots


def cited_files(search_results: Sequence[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """Each cited file once, in the order first cited, with where in it: numbered places of
    one kind together and in order (`pages 1, 4`), others as cited (`section 2.3 Refunds`)."""
    files = []
    for name, kinds in _places_by_file(search_results).items():
        line, _ = _line(name, kinds)
        places = line.removeprefix(f"- {name}").removeprefix(", ")
        files.append((name, places.split("; ") if places else []))
    return files


def sources_block(search_results: Sequence[dict[str, Any]]) -> str:
    """`\\n\\nSources:\\n- report.pdf, pages 1, 4\\n- handbook.docx, section Refunds`, appended
    after the model's own text; '' when nothing was cited."""
    places = _places_by_file(search_results)
    if not places:
        return ""
    return SOURCES_HEADING + "\n".join(_line(name, kinds)[0] for name, kinds in places.items())


def source_offsets(search_results: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Where each file's line starts inside `sources_block(...)`."""
    offsets: dict[str, int] = {}
    at = len(SOURCES_HEADING)
    for name, kinds in _places_by_file(search_results).items():
        offsets[name] = at
        at += len(_line(name, kinds)[0]) + 1
    return offsets


def place_offsets(search_results: Sequence[dict[str, Any]]) -> dict[tuple[str, Place], int]:
    """Where each file's place is written inside `sources_block(...)` (`4` in `pages 1, 4`)."""
    offsets: dict[tuple[str, Place], int] = {}
    at = len(SOURCES_HEADING)
    for name, kinds in _places_by_file(search_results).items():
        line, spots = _line(name, kinds)
        for place, spot in spots.items():
            offsets[(name, place)] = at + spot
        at += len(line) + 1
    return offsets


def place_of(result: dict[str, Any]) -> Place | None:
    """Where in its file a search result (or a whole document) is."""
    return _location(result)


def distinct_places(
    search_results: Sequence[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Each file's place once, in the order first cited: a second passage from the same page
    adds nothing a person can follow. The first passage's snippet stays, with the best score."""
    kept: dict[tuple[str, str, Place | None], dict[str, Any]] = {}
    for result in search_results:
        key = (_file_of(result), str(result.get("file_id") or ""), _location(result))
        first = kept.get(key)
        if first is None:
            kept[key] = dict(result)
        elif isinstance(result.get("score"), int | float) and (
            not isinstance(first.get("score"), int | float) or result["score"] > first["score"]
        ):
            first["score"] = result["score"]
    return list(kept.values())


def sources_header(citations: Sequence[str], limit: int = HEADER_CHARS) -> str:
    """`report.pdf#page=4, notes%2C%20v2.md#page=1`: each citation once, percent-encoded (so a
    comma always separates two), at most `limit` characters, `+N more` when some did not fit."""
    unique = list(dict.fromkeys(citations))
    parts: list[str] = []
    size = 0  # of ", ".join(parts)
    for position, citation in enumerate(unique):
        encoded = quote(citation, safe="#=/")
        grown = size + (2 if parts else 0) + len(encoded)
        # Room is kept for the "+N more" that would have to follow if the next one did not fit.
        rest = len(unique) - position - 1
        reserve = len(f", +{rest} more") if rest else 0
        if grown + reserve > limit:
            parts.append(f"+{len(unique) - position} more")
            break
        parts.append(encoded)
        size = grown
    return ", ".join(parts)


class StreamSources:
    """Puts the "Sources:" block into a chat stream as one more content delta, right before
    the chunk that ends the answer (or before `[DONE]` when no chunk says so)."""

    def __init__(self, block: str) -> None:
        self.block = block
        self.done = not block
        self.last: dict[str, Any] = {}

    def _chunk(self, finish_reason: str | None) -> dict[str, Any]:
        chunk: dict[str, Any] = {
            key: self.last[key] for key in ("id", "created", "model") if key in self.last
        }
        choice = {"index": 0, "delta": {"content": self.block}, "finish_reason": finish_reason}
        return {**chunk, "object": "chat.completion.chunk", "choices": [choice]}

    def feed(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        if self.done:
            return [chunk]
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return [chunk]
        self.last = chunk
        for position, choice in enumerate(choices):
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            reason = choice.get("finish_reason")
            if reason is None:
                continue
            self.done = True
            if reason == "tool_calls":
                return [chunk]  # not an answer yet: the model asked for a tool
            # The chunk's own delta goes first, the block after it carries the finish reason.
            opened = [*choices]
            opened[position] = {**choice, "finish_reason": None}
            return [{**chunk, "choices": opened}, self._chunk(reason)]
        return [chunk]

    def finish(self) -> list[dict[str, Any]]:
        """At the end of the stream: the block, if no chunk carried a finish reason."""
        if self.done or not self.last:
            return []
        self.done = True
        return [self._chunk(None)]


def with_sources(payload: dict[str, Any], block: str) -> dict[str, Any]:
    """A `chat.completion` whose first message ends with the block (a tool call gets none)."""
    choices = payload.get("choices")
    if not block or not isinstance(choices, list) or not choices:
        return payload
    first = choices[0]
    message = first.get("message") if isinstance(first, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("content"), str):
        return payload
    if first.get("finish_reason") == "tool_calls":
        return payload
    message = {**message, "content": message["content"] + block}
    return {**payload, "choices": [{**first, "message": message}, *choices[1:]]}


def name_sources(exchange: Exchange) -> None:
    """The exchange's cited sources named for the client: each place once, the
    X-Enrich-Sources header, and the "Sources:" block when the style asks for it."""
    if exchange.search_results:
        # The prompt numbers passages; what the client sees names places, each once.
        exchange.search_results = distinct_places(exchange.search_results)
        exchange.citations = list(dict.fromkeys(exchange.citations))
    names = [str(document["title"]) for document in exchange.whole_documents]
    if not exchange.citations and not names:
        return
    exchange.response_headers["X-Enrich-Sources"] = sources_header([*exchange.citations, *names])
    if exchange.options.citations in ("inline", "both"):
        exchange.sources_block = sources_block(exchange.sources)
