"""The conversation a chained Responses turn is searched with: what the proxy saw of the turns
before it, kept with each response and conversation id (pure).

An upstream that speaks Responses keeps a chained turn's earlier input itself, as the enriched
prompts it was sent; the proxy keeps the questions as written, the answers' opening and end
and the files uploaded to it (file ids), so that a follow-up sent with `previous_response_id` or
`conversation` is searched in its conversation like one whose client resends it all.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_MESSAGES = 12
"""Messages kept per chain, the newest: the search reads the last two questions and the last
answer, the standalone rewrite a few turns more."""
MAX_CHARS = 2000
"""A question is kept by its last this many characters, all its text parts together (the search
reads its last 80 words, the rewrite its last 60)."""
ANSWER_HEAD_CHARS = 2000
ANSWER_TAIL_CHARS = 1000
"""An answer is kept by its opening and its end (the search reads its first 80 words, the
rewrite its first 90 and last 60)."""
ELISION = "\n…\n"
MAX_FILES = 8
"""Files of earlier turns searched again, the newest: each is read and searched every turn."""
MAX_LOCATOR_CHARS = 2048
"""A file id longer than this was not one the proxy gave out."""
MAX_NAMES = 16


@dataclass(frozen=True)
class Chain:
    """What the proxy kept of a chain's turns: chat messages (user and assistant, files by
    their id) and the names of the files sent by `file_data` or `file_url`, which it did not
    keep (their bytes are the caller's, or a site's that may change or go)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    not_kept: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"messages": self.messages, "not_kept": self.not_kept}

    def _file_parts(self) -> list[dict[str, Any]]:
        return [
            part
            for message in self.messages
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if part.get("type") == "input_file"
        ]

    @property
    def files(self) -> list[str]:
        """The names of the files it searches again."""
        return [str(part.get("filename") or part["file_id"]) for part in self._file_parts()]

    @property
    def file_ids(self) -> list[str]:
        return [part["file_id"] for part in self._file_parts()]

    def without(self, file_ids: set[str]) -> Chain:
        """The chain with these files as `[attached: name]` markers (deleted since)."""

        def part_of(part: dict[str, Any]) -> dict[str, Any]:
            if part.get("type") == "input_file" and part.get("file_id") in file_ids:
                return _marker(part)
            return part

        return self._parts(part_of)

    def named(self, names: Mapping[str, str]) -> Chain:
        """The chain with its files' stored names where the request gave none."""

        def part_of(part: dict[str, Any]) -> dict[str, Any]:
            if part.get("type") == "input_file" and "filename" not in part:
                name = names.get(part["file_id"])
                return part if name is None else {**part, "filename": name[:200]}
            return part

        return self._parts(part_of)

    def _parts(self, part_of: Callable[[dict[str, Any]], dict[str, Any]]) -> Chain:
        messages = [
            {**message, "content": [part_of(part) for part in message["content"]]}
            if isinstance(message.get("content"), list)
            else message
            for message in self.messages
        ]
        return Chain(messages, self.not_kept)


def _name(part: Mapping[str, Any]) -> str:
    name = part.get("filename") or part.get("file_name") or "file"
    return str(name)[:200]


def kept_answer(text: str) -> str:
    """An answer cut to its opening and its end."""
    if len(text) <= ANSWER_HEAD_CHARS + ANSWER_TAIL_CHARS + len(ELISION):
        return text
    return text[:ANSWER_HEAD_CHARS] + ELISION + text[-ANSWER_TAIL_CHARS:]


def _marker(part: Mapping[str, Any]) -> dict[str, Any]:
    """The text an earlier message's file becomes in a conversation: read as no question."""
    return {"type": "text", "text": f"[attached: {_name(part)}]"}


def _file(part: Mapping[str, Any]) -> dict[str, Any] | None:
    locator = part.get("file_id")
    if isinstance(locator, str) and 0 < len(locator) <= MAX_LOCATOR_CHARS:
        kept: dict[str, Any] = {"type": "input_file", "file_id": locator}
        if isinstance(part.get("filename"), str):
            kept["filename"] = _name(part)
        return kept
    return None


def _last_chars(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The parts with only their last MAX_CHARS characters of text, files all kept."""
    room = MAX_CHARS
    kept: list[dict[str, Any]] = []
    for part in reversed(parts):
        if part["type"] == "text":
            if room <= 0:
                continue
            part = {"type": "text", "text": part["text"][-room:]}
            room -= len(part["text"])
        kept.append(part)
    return kept[::-1]


def _user(content: Any, not_kept: list[str]) -> list[dict[str, Any]] | None:
    if isinstance(content, str):
        return [{"type": "text", "text": content[-MAX_CHARS:]}] if content else None
    if not isinstance(content, list):
        return None
    parts: list[dict[str, Any]] = []
    for part in content:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text" and isinstance(part.get("text"), str) and part["text"]:
            parts.append({"type": "text", "text": part["text"][-MAX_CHARS:]})
        elif kind in ("input_file", "file"):
            fields = part.get("file") if kind == "file" else part
            if not isinstance(fields, dict):
                continue
            kept = _file(fields)
            if kept is None:
                not_kept.append(_name(fields))
                kept = _marker(fields)
            parts.append(kept)
    return _last_chars(parts) or None


def kept_messages(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """A request's user and assistant messages as a chain keeps them (text and readable
    files; images, tool calls and system prompts left out), and the names of the files it
    attached by `file_data` or `file_url`."""
    kept: list[dict[str, Any]] = []
    not_kept: list[str] = []
    for message in messages:
        role, content = message.get("role"), message.get("content")
        if role == "user":
            parts = _user(content, not_kept)
            if parts is not None:
                kept.append({"role": "user", "content": parts})
        elif role == "assistant" and isinstance(content, str) and content:
            kept.append({"role": "assistant", "content": kept_answer(content)})
    return kept, not_kept


def answer_text(response: Mapping[str, Any]) -> str:
    """The text of a Responses answer's output messages, as the model wrote it."""
    texts = []
    for item in response.get("output") or []:
        if isinstance(item, dict) and item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") == "output_text":
                    texts.append(str(part.get("text") or ""))
    return "".join(texts)


def _fewer_files(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The newest MAX_FILES files kept as files, older ones as markers."""
    seen = 0
    out: list[dict[str, Any]] = []
    for message in reversed(messages):
        content = message["content"]
        if isinstance(content, list):
            parts = []
            for part in reversed(content):
                if part.get("type") == "input_file":
                    seen += 1
                    if seen > MAX_FILES:
                        part = _marker(part)
                parts.append(part)
            message = {**message, "content": parts[::-1]}
        out.append(message)
    return out[::-1]


def this_turn(messages: list[dict[str, Any]]) -> Chain:
    """A request's messages as a chain keeps them."""
    return Chain(*kept_messages(messages))


def extended(earlier: Chain, turn: Chain, answer: str) -> Chain:
    """`earlier` with a turn added: the request's messages (`this_turn`) and the answer."""
    added = [*turn.messages]
    if answer:
        added.append({"role": "assistant", "content": kept_answer(answer)})
    joined = _fewer_files([*earlier.messages, *added][-MAX_MESSAGES:])
    names = [*earlier.not_kept, *(n for n in turn.not_kept if n not in earlier.not_kept)]
    return Chain(joined, names[-MAX_NAMES:])


def _stored_part(part: Any) -> dict[str, Any] | None:
    if not isinstance(part, dict):
        return None
    if part.get("type") == "text" and isinstance(part.get("text"), str):
        return {"type": "text", "text": part["text"][-MAX_CHARS:]}
    if part.get("type") == "input_file":
        return _file(part)
    return None


def read_chain(stored: Any) -> Chain:
    """A chain as a record holds it, checked part by part (a record is a file anyone with the
    data_dir could have changed): what is not a kept message is left out."""
    if not isinstance(stored, dict):
        return Chain()
    messages: list[dict[str, Any]] = []
    for message in stored.get("messages") or []:
        if not isinstance(message, dict):
            continue
        role, content = message.get("role"), message.get("content")
        if role == "assistant" and isinstance(content, str):
            messages.append({"role": "assistant", "content": kept_answer(content)})
        elif role == "user" and isinstance(content, list):
            parts = [found for part in content if (found := _stored_part(part)) is not None]
            parts = _last_chars(parts)
            if parts:
                messages.append({"role": "user", "content": parts})
    names = [name[:200] for name in stored.get("not_kept") or [] if isinstance(name, str)]
    return Chain(_fewer_files(messages[-MAX_MESSAGES:]), names[-MAX_NAMES:])
