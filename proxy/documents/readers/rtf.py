"""RTF documents as plain text, read with striprtf (loaded only by a worker that meets one)."""

from __future__ import annotations

from proxy.documents.failure import ExtractError
from proxy.documents.readers.text import decode_text, tidy


def rtf_to_text(data: bytes) -> str:
    """The text of an RTF document, tidied; a file striprtf cannot read is corrupt."""
    from striprtf.striprtf import rtf_to_text as strip_rtf

    # RTF is 7-bit text with escapes; stray 8-bit bytes are read as the common Windows code page.
    source = (
        decode_text(data) if data.startswith(b"\xef\xbb\xbf") else data.decode("cp1252", "replace")
    )
    try:
        return tidy(str(strip_rtf(source, errors="ignore")))  # type: ignore[no-untyped-call]
    except Exception as exc:
        raise ExtractError(f"is not a readable RTF file ({exc})", "corrupt_document") from exc
