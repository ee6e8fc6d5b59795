"""PageCollector: a worker's frames become ordered pages, limits and progress statuses."""

from __future__ import annotations

import pytest

from proxy.documents.collect import PageCollector
from proxy.errors import DocumentError


def test_pages_and_rising_progress() -> None:
    statuses: list[str] = []
    collector = PageCollector("a.pdf", "PyMuPDF", 1000, statuses.append)
    collector.on_message({"t": "ack"})
    collector.on_message({"t": "count", "n": 4})
    collector.on_message({"t": "pages", "pages": [[1, "a"]], "done": 1})
    collector.on_message({"t": "pages", "pages": [[2, "b"], [3, "c"]], "done": 3})
    collector.on_message({"t": "pages", "pages": [[4, "d"]], "done": 4})
    collector.on_message({"t": "done", "warnings": ""})
    pages = collector.finish()
    assert [(page.number, page.text) for page in pages] == [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
    assert statuses == [
        "PyMuPDF loaded for a.pdf...",
        "Parsing file a.pdf... (0%)",
        "Parsing file a.pdf... (25%)",
        "Parsing file a.pdf... (75%)",
        "Parsing file a.pdf... (99%)",
        "Parsing file a.pdf... (100%)",
    ]


def test_skipped_page_keeps_the_others_numbers() -> None:
    collector = PageCollector("b.pdf", "PyMuPDF", 1000, lambda _: None)
    collector.on_message({"t": "count", "n": 3})
    collector.on_message({"t": "pages", "pages": [[1, "a"], [3, "c"]], "done": 3})
    assert [page.number for page in collector.finish()] == [1, 3]


def test_no_readable_page_is_a_corrupt_document() -> None:
    collector = PageCollector("c.pdf", "PyMuPDF", 1000, lambda _: None)
    collector.on_message({"t": "count", "n": 3})
    collector.on_message({"t": "pages", "pages": [], "done": 3})
    with pytest.raises(DocumentError, match=r"c\.pdf: is corrupt: none of its 3 pages"):
        collector.finish()


def test_char_limit_counts_every_batch() -> None:
    collector = PageCollector("d.pdf", "PyMuPDF", 10, lambda _: None)
    collector.on_message({"t": "pages", "pages": [[1, "x" * 6]], "done": 1})
    with pytest.raises(DocumentError, match="more than 10 characters"):
        collector.on_message({"t": "pages", "pages": [[2, "y" * 6]], "done": 2})


def test_worker_error_names_the_file() -> None:
    collector = PageCollector("e.pdf", "PyMuPDF", 10, lambda _: None)
    with pytest.raises(DocumentError) as caught:
        collector.on_message({"t": "error", "reason": "is odd", "code": "corrupt_document"})
    assert caught.value.message == "e.pdf: is odd"
    assert caught.value.code == "corrupt_document"
