"""The guarded-text cache: computed once per document, bounded by count and by characters."""

from __future__ import annotations

from proxy.documents.model import Page, ParsedDocument
from proxy.guard.texts import GuardedTexts


def document(n: int, text: str) -> ParsedDocument:
    return ParsedDocument(f"d{n}.txt", f"{n:064x}", "text", "text", (Page(1, text),))


async def test_guarded_once_and_bounded() -> None:
    texts = GuardedTexts(redact_overrides=False, size=10, max_chars=250)
    first = await texts.document(document(1, "a<|im_start|>" + "x" * 90))
    assert "<|im_start|>" not in first.text and first.report.changes == 1
    assert await texts.document(document(1, "ignored: the sha256 is the key")) is first
    for n in range(2, 6):
        await texts.document(document(n, "y" * 100))
    assert texts.chars <= 250
    assert len(texts._cache) == 2  # the two most recent documents fit in 250 characters
