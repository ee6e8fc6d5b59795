"""A document sent as an image (`image_url` with a PDF data URL): said plainly, with the fix."""

from __future__ import annotations

from typing import Any

from proxy.errors import BadRequest

# Data URLs of these kinds are pictures a vision model can take; anything else is not.
PICTURE = "image/"
HEAD_CHARS = 256


def data_url_type(url: str) -> str | None:
    """The MIME type of a `data:` URL (`application/pdf`), '' when it names none; None for
    any other URL."""
    if url[:5].lower() != "data:":
        return None
    # Only the head is looked at: the data after the comma can be megabytes.
    comma = url.find(",", 5, HEAD_CHARS)
    head = url[5 : comma if comma >= 0 else HEAD_CHARS]
    return head.split(";", 1)[0].strip().lower()


def refuse_documents_as_images(messages: list[Any]) -> None:
    """A data URL that is not a picture, in an `image_url` part, is a document sent the wrong
    way: the upstream would fail on it (llama.cpp answers 500), so it is a 400 that says what
    to send instead."""
    for index, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        for number, part in enumerate(content):
            image = part.get("image_url") if isinstance(part, dict) else None
            url = image.get("url") if isinstance(image, dict) else image
            kind = data_url_type(url) if isinstance(url, str) else None
            if kind is None or kind.startswith(PICTURE):
                continue
            where = f"messages[{index}].content[{number}]"
            raise BadRequest(
                f"{where} is an image_url part holding {kind or 'a data URL of no type'}, not "
                'an image: send a document as a file part, {"type": "file", "file": '
                '{"filename": "report.pdf", "file_data": "data:application/pdf;base64,..."}} '
                '(Responses: {"type": "input_file", "filename", "file_data"})',
                param=f"{where}.image_url",
                code="document_as_image",
            )
