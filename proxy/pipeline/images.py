"""What an `image_url` part holds, told from its bytes: a picture goes on, a document becomes a
file part, anything else is a 400 naming the part (never forwarded for the upstream to fail on)."""

from __future__ import annotations

import base64
import binascii
from typing import Any

from proxy.errors import BadRequest

HEAD_CHARS = 256
"""A data URL's header is read within this many characters: the data after it can be megabytes."""
SNIFF_BYTES = 48
"""Bytes decoded from the data's start: enough for every signature below."""

# Raster formats vision servers decode (llama.cpp's stb_image, vLLM's and Ollama's image
# libraries), by their first bytes.
_PICTURES = (
    (0, b"\x89PNG\r\n\x1a\n"),
    (0, b"\xff\xd8\xff"),  # JPEG
    (0, b"GIF87a"),
    (0, b"GIF89a"),
    (0, b"BM"),  # BMP
    (0, b"II*\x00"),  # TIFF, little-endian
    (0, b"MM\x00*"),  # TIFF, big-endian
)
_RIFF_WEBP = (b"RIFF", b"WEBP")
_HEIF_BRANDS = (b"avif", b"avis", b"heic", b"heix", b"mif1")

# Documents people send where a picture goes (chat front ends that attach every file as an
# image): the MIME type the file part gets, by signature. The parser tells a ZIP's or OLE
# file's real format from its contents.
_DOCUMENTS = (
    (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "application/zip"),
    (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1", "application/x-ole-storage"),
    (b"{\\rtf", "application/rtf"),
)


def data_url_type(url: str) -> str | None:
    """The MIME type of a `data:` URL (`application/pdf`), '' when it names none; None for
    any other URL."""
    if url[:5].lower() != "data:":
        return None
    comma = url.find(",", 5, HEAD_CHARS)
    head = url[5 : comma if comma >= 0 else HEAD_CHARS]
    return head.split(";", 1)[0].strip().lower()


def data_head(url: str) -> tuple[bytes, int] | None:
    """The first bytes of a base64 `data:` URL's data, and where the data starts; None when it
    is not base64 or does not decode."""
    comma = url.find(",", 5, HEAD_CHARS)
    if comma < 0 or ";base64" not in url[5:comma].lower():
        return None
    chunk = "".join(url[comma + 1 : comma + 1 + SNIFF_BYTES * 2].split())
    chunk = chunk[: len(chunk) // 4 * 4]
    try:
        return base64.b64decode(chunk, validate=True)[:SNIFF_BYTES], comma + 1
    except (binascii.Error, ValueError):
        return None


def is_picture(head: bytes) -> bool:
    if any(head[at : at + len(magic)] == magic for at, magic in _PICTURES):
        return True
    if head[:4] == _RIFF_WEBP[0] and head[8:12] == _RIFF_WEBP[1]:
        return True
    return head[4:8] == b"ftyp" and head[8:12] in _HEIF_BRANDS


def document_type(head: bytes) -> str | None:
    """The MIME type of a document the bytes start like, or None."""
    return next((mime for magic, mime in _DOCUMENTS if head.startswith(magic)), None)


def _describe(label: str | None, head: bytes | None) -> str:
    said = f"labelled {label}" if label else "with no type"
    if head is None:
        return f"{said}, whose data is not base64"
    shown = head[:8].decode("ascii", "replace").encode("unicode_escape").decode()
    return f"{said}, whose data starts {shown!r}, which is no image format"


def sorted_image_parts(messages: list[Any]) -> tuple[list[Any], list[str]]:
    """The messages with each `image_url` data URL told from its bytes, whatever its label
    says: a picture stays, a document becomes a file part (`where` each was, for the record),
    and anything else is a 400 naming the part: the upstream would fail on it (llama.cpp
    answers 500, which the openai SDK retries twice)."""
    moved: list[str] = []
    out = list(messages)
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        parts = list(content)
        changed = False
        for number, part in enumerate(content):
            image = part.get("image_url") if isinstance(part, dict) else None
            url = image.get("url") if isinstance(image, dict) else image
            label = data_url_type(url) if isinstance(url, str) else None
            if label is None:
                continue  # an https URL: the upstream fetches it
            assert isinstance(url, str)
            where = f"messages[{index}].content[{number}]"
            sniffed = data_head(url)
            head = sniffed[0] if sniffed else None
            if head is not None and is_picture(head):
                continue
            mime = document_type(head) if head is not None else None
            if mime is None or sniffed is None:
                raise BadRequest(
                    f"{where} is an image_url part {_describe(label, head)}: send a picture "
                    "(PNG, JPEG, GIF, WebP) there, or a document as a file part, "
                    '{"type": "file", "file": {"filename": "report.pdf", "file_data": '
                    '"data:application/pdf;base64,..."}}',
                    param=f"{where}.image_url",
                    code="invalid_image",
                )
            data = f"data:{mime};base64,{url[sniffed[1] :]}"
            parts[number] = {"type": "file", "file": {"file_data": data}}
            changed = True
            moved.append(f"{where}: an image_url part held a document ({mime}): read as a file")
        if changed:
            out[index] = {**message, "content": parts}
    return out, moved
