"""Chunking: page ranges, overlap, sizes, order, empty pages, on made-up and corpus documents."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from proxy.retrieval.chunking import chunk_document
from tests.retrieval.support import cl100k, corpus_document, text_document


def words_page(page: int, count: int) -> str:
    """Prose whose every word says which page it is on, hard-wrapped like PDF text."""
    sentences = [" ".join(f"p{page}w{i + j}" for j in range(8)) + "." for i in range(0, count, 8)]
    text = " ".join(sentences)
    return re.sub(r"(\S+ \S+ \S+ \S+ \S+ \S+) ", r"\1\n", text)


def pages_of(text: str) -> list[int]:
    return [int(page) for page in re.findall(r"p(\d+)w\d+", text)]


def test_page_ranges_match_the_words_in_each_chunk() -> None:
    doc = text_document([words_page(n, 150) for n in range(1, 6)])
    chunks = chunk_document(doc, chunk_tokens=100, overlap=20, count_tokens=cl100k())
    assert len(chunks) > 5
    for chunk in chunks:
        pages = pages_of(chunk.text)
        assert (chunk.page_start, chunk.page_end) == (min(pages), max(pages))
        assert chunk.doc_sha256 == doc.sha256 and chunk.filename == doc.name
    assert {chunk.page_start for chunk in chunks} == {1, 2, 3, 4, 5}


def test_a_chunk_across_a_page_break_names_both_pages() -> None:
    doc = text_document(["Alpha beta gamma.", "Delta epsilon zeta."])
    [chunk] = chunk_document(doc, chunk_tokens=200, overlap=30, count_tokens=cl100k())
    assert (chunk.page_start, chunk.page_end) == (1, 2)
    assert "gamma." in chunk.text and "Delta" in chunk.text


def test_consecutive_chunks_overlap_and_without_overlap_do_not() -> None:
    doc = text_document([words_page(1, 600)])
    overlapping = chunk_document(doc, chunk_tokens=100, overlap=25, count_tokens=cl100k())
    for before, after in itertools.pairwise(overlapping):
        assert set(before.text.split()) & set(after.text.split())
    disjoint = chunk_document(doc, chunk_tokens=100, overlap=0, count_tokens=cl100k())
    for before, after in itertools.pairwise(disjoint):
        assert not set(before.text.split()) & set(after.text.split())
    covered = set().union(*(set(chunk.text.split()) for chunk in disjoint))
    assert covered == set(doc.pages[0].text.split())


def test_chunks_are_in_document_order_and_numbered() -> None:
    doc = text_document([words_page(n, 200) for n in range(1, 4)])
    chunks = chunk_document(doc, chunk_tokens=80, overlap=10, count_tokens=cl100k())
    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    firsts = [
        int(re.findall(r"w(\d+)", chunk.text)[0]) + 1000 * chunk.page_start for chunk in chunks
    ]
    assert firsts == sorted(firsts)


def test_empty_pages_are_skipped_and_numbering_kept() -> None:
    doc = text_document(["", "  \n ", "Only the third page has text.", "", "And the fifth."])
    chunks = chunk_document(doc, chunk_tokens=5, overlap=0, count_tokens=cl100k())
    assert chunks and all(chunk.text.strip() for chunk in chunks)
    assert chunks[0].page_start == 3
    assert chunks[-1].page_end == 5
    empty = text_document(["", " \n\n "])
    assert chunk_document(empty, chunk_tokens=200, overlap=30, count_tokens=cl100k()) == []


def test_chunk_text_is_the_original_text_with_its_line_breaks() -> None:
    page = "First line of a wrapped\nparagraph that goes on.\n\nSecond paragraph here."
    [chunk] = chunk_document(text_document([page]), chunk_tokens=200, overlap=0, count_tokens=len)
    assert chunk.text == page


def test_invalid_sizes_are_refused() -> None:
    doc = text_document(["text"])
    with pytest.raises(ValueError):
        chunk_document(doc, chunk_tokens=0, overlap=0, count_tokens=len)
    with pytest.raises(ValueError):
        chunk_document(doc, chunk_tokens=10, overlap=10, count_tokens=len)


@pytest.mark.parametrize("name", ["pdf/tracemonkey.pdf", "pdf/freeculture.pdf"])
def test_corpus_chunks_stay_within_the_limit(corpus_dir: Path, name: str) -> None:
    doc = corpus_document(corpus_dir / name)
    count = cl100k()
    chunks = chunk_document(doc, chunk_tokens=200, overlap=30, count_tokens=count)
    assert all(0 < count(chunk.text) <= 200 for chunk in chunks)
    pages = {page.number: page.text for page in doc.pages}
    for chunk in chunks[::25]:
        if chunk.page_start == chunk.page_end:
            assert chunk.text in pages[chunk.page_start]
    assert chunks[-1].page_end == max(p.number for p in doc.pages if p.text.strip())


def test_structure_decides_where_a_passage_ends() -> None:
    # Each section fits a passage alone, two do not: passages end at headings, not mid-list.
    section = "{title}\n" + "\n".join(f"- item {{n}}.{i} is a short list entry." for i in range(6))
    text = "\n".join(section.format(title=f"Part {n}", n=n) for n in range(1, 4))
    doc = text_document([text])
    chunks = chunk_document(doc, chunk_tokens=70, overlap=10, count_tokens=lambda t: len(t.split()))
    assert [chunk.text.splitlines()[0] for chunk in chunks] == ["Part 1", "Part 2", "Part 3"]
    # A passage ending at a heading repeats nothing of the one before.
    assert all("Part" not in chunk.text.splitlines()[-1] for chunk in chunks)


def test_the_minilm_word_piece_count_is_exact(corpus_dir: Path) -> None:
    from proxy.retrieval.embeddings import DefaultEmbedder, _minilm_tokenizer

    tokenizer = _minilm_tokenizer()
    count = DefaultEmbedder().count_tokens
    for name in ("pdf/GeoTopo-komprimiert.pdf", "pdf/issue20232.pdf", "html/hukumusume-ja.html"):
        for page in corpus_document(corpus_dir / name).pages[:20]:
            exact = len(tokenizer.encode(page.text, add_special_tokens=False).ids)
            assert count(page.text) == exact, (name, page.number)


@pytest.mark.parametrize("name", ["pdf/GeoTopo-komprimiert.pdf", "pdf/freeculture.pdf"])
def test_corpus_passages_fit_what_minilm_reads(corpus_dir: Path, name: str) -> None:
    from proxy.retrieval.embeddings import DefaultEmbedder

    count = DefaultEmbedder().count_tokens
    chunks = chunk_document(corpus_document(corpus_dir / name), count_tokens=count)
    sizes = [count(chunk.shown) for chunk in chunks]
    assert max(sizes) <= 250 and sum(sizes) / len(sizes) > 150  # whole, and not tiny
