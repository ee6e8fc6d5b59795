"""Fixtures for the document tests: generated PDFs and parsers wired to a temporary cache."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pymupdf
import pytest

_mupdf: Any = pymupdf

PdfMaker = Callable[[list[str]], bytes]


def _make_pdf(page_texts: list[str]) -> bytes:
    document = _mupdf.open()
    for text in page_texts:
        page = document.new_page()
        page.insert_text((72, 72), text)
    data: bytes = document.tobytes()
    document.close()
    return data


@pytest.fixture(scope="session")
def make_pdf() -> PdfMaker:
    """Builds a PDF with one page per text, the text written at the top of its page."""
    return _make_pdf


@pytest.fixture(scope="session")
def page_texts() -> list[str]:
    return [f"This is page number {n} of the test document." for n in range(1, 8)]
