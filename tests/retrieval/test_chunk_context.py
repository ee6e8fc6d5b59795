"""Passages that can be read alone: tables keep their rows whole and carry caption and header;
every passage carries the document's title and the section path where it starts."""

from __future__ import annotations

import dataclasses
import re

from proxy.documents.model import Page
from proxy.retrieval.chunking import Chunk, chunk_document
from proxy.retrieval.headings import section_paths
from tests.retrieval.support import cl100k, text_document


def words(text: str) -> int:
    return len(text.split())


def cost_table(rows: int, caption: str = "Table: Installation costs") -> str:
    lines = [caption, "| Item | Unit | Price (EUR) |", "|---|---|---|"]
    lines += [f"| Item {n}. Fitted by us. | piece | {n * 10} |" for n in range(1, rows + 1)]
    return "\n".join(lines)


def test_a_long_table_keeps_its_rows_whole_and_every_passage_its_header() -> None:
    doc = text_document(["Some words before.\n\n" + cost_table(60) + "\n\nClosing words."])
    chunks = chunk_document(doc, chunk_tokens=60, overlap=10, count_tokens=words)
    rows = [line for line in doc.pages[0].text.splitlines() if "Fitted" in line]
    seen: list[str] = []
    for chunk in chunks:
        for line in chunk.text.splitlines():
            if line.startswith("|") and "Fitted" in line:
                assert line in rows  # whole, never cut inside
                seen.append(line)
        if chunk.text.startswith("| Item ") and "Unit" not in chunk.text.splitlines()[0]:
            # Starts among the rows: caption and header come with it.
            assert chunk.context == (
                "Table: Installation costs\n| Item | Unit | Price (EUR) |\n|---|---|---|"
            )
            assert chunk.shown == chunk.context + "\n" + chunk.text
        assert words(chunk.shown) <= 60
    assert seen == rows  # every row once, in order: no row shared by two passages
    [first] = [c for c in chunks if "| Item | Unit |" in c.text]
    assert "Table: Installation costs\n| Item | Unit |" in first.text  # caption stays


def test_a_sentence_end_inside_a_cell_is_no_boundary() -> None:
    # A short row, then a long one: the long row's start is not in the passage's second half,
    # so only a cut inside that row (at a sentence end) would fill the passage better.
    short = "| Short row. | y |"
    long = "| " + " ".join(f"Word{n}." for n in range(33)) + " | x |"
    doc = text_document(["| A | B |\n|---|---|\n" + "\n".join([short, long] * 4)])
    chunks = chunk_document(doc, chunk_tokens=45, overlap=5, count_tokens=words)
    lines = [line for chunk in chunks for line in chunk.text.splitlines() if "Word" in line]
    assert lines == [long] * 4


def test_the_context_takes_at_most_a_third_of_a_passage() -> None:
    wide = "| " + " | ".join(f"column {n}" for n in range(40)) + " |"
    table = wide + "\n|" + "---|" * 40 + "\n" + "\n".join(f"| row {n} |" for n in range(30))
    chunks = chunk_document(text_document([table]), chunk_tokens=90, overlap=0, count_tokens=words)
    assert len(chunks) > 1
    for chunk in chunks:
        assert words(chunk.section) + words(chunk.context) + 2 <= 30
        assert words(chunk.shown) <= 90


def test_passages_carry_the_document_title_and_section_path() -> None:
    prose = " ".join(f"Sentence {n} about gardens." for n in range(30))
    pages = (
        Page(1, prose, title="Part I > 2. Gardens"),
        Page(2, prose, title="Part I > 2. Gardens"),
        Page(3, "# Tools\n\n" + prose + "\n\n## Spades\n\n" + prose, title="Part II"),
    )
    doc = dataclasses.replace(text_document(["x"]), pages=pages, title="The Garden Book")
    chunks = chunk_document(doc, chunk_tokens=80, overlap=0, count_tokens=words)
    sections = [chunk.section for chunk in chunks]
    assert sections[0] == "The Garden Book > Part I > 2. Gardens"
    assert "The Garden Book > Part II > Tools" in sections
    assert sections[-1] == "The Garden Book > Part II > Tools > Spades"
    assert all(chunk.shown == chunk.section + "\n" + chunk.text for chunk in chunks)
    assert all(chunk.embedded == chunk.searched == chunk.shown for chunk in chunks)
    assert all(words(chunk.shown) <= 80 for chunk in chunks)


def test_section_paths_nest_markdown_headings_and_skip_code() -> None:
    text = "# A\ntext\n## B\ntext\n```\n# not a heading\n```\n### C\ntext\n## D\ntext"
    paths = section_paths(text, [0], [""])
    at = {name: paths.at(text.index(f"# {name}") + 1) for name in "ABCD"}
    assert at == {"A": "A", "B": "A > B", "C": "A > B > C", "D": "A > D"}
    assert paths.at(text.index("not a heading")) == "A > B"


def test_a_chapter_heading_under_its_own_title_is_not_repeated() -> None:
    text = "# Loomings\nCall me Ishmael."
    paths = section_paths(text, [0], ["Loomings"])
    assert paths.at(len(text) - 1) == "Loomings"
    continued = section_paths("a\n\nb", [0, 3], ["Intro", "Intro (continued)"])
    assert continued.paths == ("Intro",)


def test_no_title_and_no_sections_means_no_context() -> None:
    [chunk] = chunk_document(text_document(["Plain words."]), count_tokens=cl100k())
    assert chunk.section == chunk.context == "" and chunk.shown == "Plain words."


def test_chunks_with_context_round_trip_as_stored() -> None:
    chunk = Chunk("s" * 64, "a.pdf", 0, "text", 1, 1, "page=1", 0, 4, "Title > Part", "| a |")
    assert Chunk(**dataclasses.asdict(chunk)) == chunk
    assert re.fullmatch(r"Title > Part\n\| a \|\ntext", chunk.shown)
