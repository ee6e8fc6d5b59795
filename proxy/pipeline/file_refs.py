"""Finding file references in chat messages and taking the file parts out (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from proxy.errors import BadRequest
from proxy.files.remote import url_name
from proxy.guard.safe_names import safe_name

FILE_PART_TYPES = frozenset({"file", "input_file"})
IMAGE_DETAILS = ("auto", "low", "high")  # an input_file's `detail`: how its pages go as images


Origin = Literal["file_data", "file_id", "path", "url"]


@dataclass(frozen=True)
class FileRef:
    """A document the user attached: where it is read from, and its bytes once read."""

    name: str
    origin: Origin
    locator: str  # the base64 data, the file id, the `root/path` or the URL, as the client gave it
    message_index: int
    new: bool  # in the last user message (a new file) or an earlier one (an old file)
    data: bytes = b""
    file_id: str | None = None
    # False: the name is ours (`document-N`), and the document's own title may replace it.
    named: bool = True
    dropped: int = 0  # the size of `data`, once the bytes were dropped after the pipeline
    detail: str | None = None  # Responses input_file `detail`: auto | low | high (page images)

    @property
    def size(self) -> int:
        """Bytes read for this reference (still known after they are dropped)."""
        return len(self.data) or self.dropped


@dataclass(frozen=True)
class Found:
    """The references of a conversation and the messages with their file parts taken out."""

    refs: list[FileRef]
    messages: list[dict[str, Any]]
    last_user_index: int | None
    query: str
    markers: int = 0  # `[attached: name]` markers put in place of file parts


def last_user_index(messages: list[dict[str, Any]]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].get("role") == "user":
            return index
    return None


def _file_fields(part: dict[str, Any], where: str) -> dict[str, Any]:
    if part.get("type") == "file":
        fields = part.get("file")
        if not isinstance(fields, dict):
            raise BadRequest(f"{where}.file must be an object", param=where)
        return fields
    return part  # Responses-style input_file keeps its fields on the part itself


def _spec_from_part(part: dict[str, Any], where: str, index: int, new: bool, n: int) -> FileRef:
    fields = _file_fields(part, where)
    name = fields.get("filename") or fields.get("file_name")
    if name is not None and not isinstance(name, str):
        raise BadRequest(f"{where}: filename must be a string", param=where)
    data, file_id, url = fields.get("file_data"), fields.get("file_id"), fields.get("file_url")
    detail = fields.get("detail")
    if detail is not None and detail not in IMAGE_DETAILS:
        raise BadRequest(
            f"{where}: detail must be one of auto, low, high", param=where, code="invalid_value"
        )
    if isinstance(data, str) and data:
        return FileRef(name or f"attachment-{n + 1}", "file_data", data, index, new, detail=detail)
    if isinstance(file_id, str) and file_id:
        return FileRef(name or file_id, "file_id", file_id, index, new, detail=detail)
    if isinstance(url, str) and url:
        # Fetched only if documents.allowed_url_prefixes lists it (checked when it is read).
        return FileRef(name or url_name(url) or url, "url", url, index, new, detail=detail)
    raise BadRequest(f"{where}: a file part needs file_data, file_id or file_url", param=where)


def _path_pattern(prefix: str) -> re.Pattern[str]:
    return re.compile(re.escape(prefix) + r"(\S+)")


def _text_of(parts: list[Any]) -> str:
    return "\n".join(
        part["text"]
        for part in parts
        if isinstance(part, dict)
        and part.get("type") == "text"
        and isinstance(part.get("text"), str)
    )


def attached_marker(name: Any, tokens: tuple[str, ...] = ()) -> str:
    """`[attached: name]`, in place of a file part of an earlier message; the name guarded
    like document text (`tokens`: the model's control tokens and the text adapter's markers)."""
    return f"[attached: {safe_name(str(name), tokens)}]"


def _without_file_parts(message: dict[str, Any], tokens: tuple[str, ...]) -> dict[str, Any]:
    """A non-user message with any file part replaced by a marker: upstreams reject them, and
    only users attach documents."""
    content = message.get("content")
    if not isinstance(content, list) or not any(
        isinstance(part, dict) and part.get("type") in FILE_PART_TYPES for part in content
    ):
        return message
    parts = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in FILE_PART_TYPES:
            inner = part.get("file")
            fields: dict[str, Any] = inner if isinstance(inner, dict) else part
            name = fields.get("filename") or fields.get("file_name") or "file"
            parts.append({"type": "text", "text": attached_marker(name, tokens)})
        else:
            parts.append(part)
    return {**message, "content": parts}


def find_references(
    messages: list[dict[str, Any]], *, path_prefix: str | None, tokens: tuple[str, ...] = ()
) -> Found:
    """File parts and `#file:` references of user messages; the last user message's are new.

    The returned messages have every file part removed (upstreams reject them); in earlier
    messages a short `[attached: name]` marker keeps the conversation readable (its name guarded
    against `tokens`). Path references in text become their plain path.
    """
    last = last_user_index(messages)
    pattern = _path_pattern(path_prefix) if path_prefix else None
    refs: list[FileRef] = []
    cleaned: list[dict[str, Any]] = []
    query = ""
    markers = 0
    for index, message in enumerate(messages):
        if message.get("role") != "user":
            out = _without_file_parts(message, tokens)
            markers += out is not message
            cleaned.append(out)
            continue
        new = index == last
        content = message.get("content")
        out = dict(message)
        if isinstance(content, str):
            if pattern is not None:
                for match in pattern.finditer(content):
                    refs.append(
                        FileRef(
                            match.group(1).rsplit("/", 1)[-1], "path", match.group(1), index, new
                        )
                    )
                content = pattern.sub(lambda m: m.group(1), content)
                out["content"] = content
            if new:
                query = content
        elif isinstance(content, list):
            parts: list[Any] = []
            for position, part in enumerate(content):
                where = f"messages[{index}].content[{position}]"
                if isinstance(part, dict) and part.get("type") in FILE_PART_TYPES:
                    spec = _spec_from_part(part, where, index, new, len(refs))
                    refs.append(spec)
                    if not new:
                        parts.append({"type": "text", "text": attached_marker(spec.name, tokens)})
                        markers += 1
                    continue
                if (
                    pattern is not None
                    and isinstance(part, dict)
                    and part.get("type") == "text"
                    and isinstance(part.get("text"), str)
                ):
                    text = part["text"]
                    for match in pattern.finditer(text):
                        refs.append(
                            FileRef(
                                match.group(1).rsplit("/", 1)[-1],
                                "path",
                                match.group(1),
                                index,
                                new,
                            )
                        )
                    part = {**part, "text": pattern.sub(lambda m: m.group(1), text)}
                parts.append(part)
            out["content"] = parts
            if new:
                query = _text_of(parts)
        cleaned.append(out)
    return Found(refs, cleaned, last, query, markers)
