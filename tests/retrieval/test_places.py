"""Places a question names: read from its words (plain values), found in a document's
passages (made-up documents and corpus ones), and given first by the retriever."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from proxy.retrieval.chunking import Chunk, chunk_document
from proxy.retrieval.index import VectorIndex
from proxy.retrieval.place_finder import find_place, outline
from proxy.retrieval.places import LAST, Place, parse_place
from proxy.retrieval.retriever import Retriever
from tests.retrieval.support import CountingEmbedder, HashEmbedder, text_document

# ---------------------------------------------------------------------------------------------
# Reading the place from the question


@pytest.mark.parametrize(
    ("question", "kind", "number", "label"),
    [
        ("What does chapter 3 say about radio?", "chapter", 3, None),
        ("What happens in Chapter Three?", "chapter", 3, None),
        ("Summarise chapter IV.", "chapter", 4, None),
        ("What is in the third chapter?", "chapter", 3, None),
        ("How does the last chapter end?", "chapter", LAST, None),
        ("What does the final chapter conclude?", "chapter", LAST, None),
        ("What does Table 2 show?", "table", 2, None),
        ("Explain figure 11.", "figure", 11, None),
        ("What does section 4.2 require?", "section", None, "4.2"),
        ("What does § 3 say?", "section", 3, None),
        ("What is in Appendix B?", "appendix", None, "B"),
        ("What is on page 12?", "page", 12, None),
        ("Which codes are on the last sheet?", "sheet", LAST, None),
        ("What is on the second sheet?", "sheet", 2, None),
        ("What is the first contribution?", "contribution", 1, None),
        ("What is the paper's second main contribution?", "contribution", 2, None),
        ("What is on slide 4?", "slide", 4, None),
        # German, French, Spanish, Italian, Dutch, Russian
        ("Was steht in Kapitel 3 über Funk?", "chapter", 3, None),
        ("Was passiert im letzten Kapitel?", "chapter", LAST, None),
        ("Was zeigt Tabelle 2?", "table", 2, None),
        ("Was steht im dritten Abschnitt?", "section", 3, None),
        ("Que dit le chapitre 3 ?", "chapter", 3, None),
        ("Que contient le dernier chapitre ?", "chapter", LAST, None),
        ("Que montre le tableau 2 ?", "table", 2, None),
        ("¿Qué dice el capítulo 3?", "chapter", 3, None),
        ("¿Qué hay en la última hoja?", "sheet", LAST, None),
        ("Cosa dice il capitolo 3?", "chapter", 3, None),
        ("Cosa mostra la tabella 2?", "table", 2, None),
        ("Wat staat er in hoofdstuk 3?", "chapter", 3, None),
        ("Wat staat er in het laatste hoofdstuk?", "chapter", LAST, None),
        ("О чём говорится в третьей главе?", "chapter", 3, None),
        ("Что написано в главе 5?", "chapter", 5, None),
        ("Что показывает таблица 2?", "table", 2, None),
        ("Что на последнем листе?", "sheet", LAST, None),
        ("Что сказано в приложении Б?", "appendix", None, "Б"),
    ],
)
def test_a_numbered_or_counted_unit_is_read(
    question: str, kind: str, number: int | None, label: str | None
) -> None:
    place = parse_place(question)
    assert place is not None, question
    assert (place.kind, place.number, place.label) == (kind, number, label)
    assert place.phrase and place.phrase in question


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("What happens at the very end?", "end"),
        ("What does the narrator say towards the end?", "end"),
        ("How is the ending of the story?", "end"),
        ("What is said at the beginning?", "start"),
        ("What do the authors say in the conclusion?", "conclusion"),
        ("What does the conclusion say about speed?", "conclusion"),
        ("What is promised in the introduction?", "introduction"),
        ("What is claimed in the abstract?", "abstract"),
        ("Was steht am Ende?", "end"),
        ("Was steht im Fazit?", "conclusion"),
        ("Que dit-il à la toute fin ?", "end"),
        ("¿Qué dice en la conclusión?", "conclusion"),
        ("Cosa succede alla fine?", "end"),
        ("Wat staat er in de conclusie?", "conclusion"),
        ("Что говорится в самом конце?", "end"),
        ("Что сказано в заключении?", "conclusion"),
        ("Which currencies are on the Currencies sheet?", "sheet"),
    ],
)
def test_a_region_or_a_named_sheet_is_read(question: str, kind: str) -> None:
    place = parse_place(question)
    assert place is not None and place.kind == kind and place.number is None, question


@pytest.mark.parametrize(
    "question",
    [
        "Who fed sardines to the cats?",
        "Which chapter talks about piracy?",  # a chapter asked for, not named
        "What table of values does the paper give?",
        "When did the first radio station open?",  # an ordinal, no unit after it
        "What is part i of the plan?",  # a lower-case i is a word, not a numeral
        "How many tables does the restaurant have?",
        "Wie viele Seiten hat das Buch?",
        "What happened in the end of the war?",  # "the end" of something else
    ],
)
def test_questions_naming_no_place_get_none(question: str) -> None:
    assert parse_place(question) is None


def test_a_place_describes_itself() -> None:
    assert Place("chapter", 3).describe() == "chapter 3"
    assert Place("sheet", LAST).describe() == "the last sheet"
    assert Place("section", None, "4.2").describe() == "section 4.2"
    assert Place("end").describe() == "the end"


# ---------------------------------------------------------------------------------------------
# Finding it in a document


def chunk(index: int, text: str, section: str = "", location: str = "", page: int = 1) -> Chunk:
    return Chunk("0" * 64, "doc", index, text, page, page, location, 0, 0, section)


def book() -> list[Chunk]:
    """A book whose outline names chapter 1 with its word and the others by number."""
    parts = [
        ("Contents", "Chapter 1 ... 2 ... 3"),
        ("Chapter 1: Creators", "Disney made a cartoon."),
        ("Chapter 1: Creators", "Steamboat Willie followed."),
        ("2: Copyists", "The camera came."),
        ("3: Catalogs", "A student built a search engine."),
        ("3: Catalogs", "He settled for his savings."),
        ("Conclusion", "Culture needs balance."),
        ("Notes", "1. See the record."),
        ("Index", "Disney, 3"),
    ]
    return [
        chunk(i, text, f"The Book > {title}", f"page={i + 1}", i + 1)
        for i, (title, text) in enumerate(parts)
    ]


@pytest.mark.parametrize(
    ("question", "passages"),
    [
        ("What is chapter 3 about?", [4, 5]),
        ("What happens in chapter one?", [1, 2]),
        ("What is in the second chapter?", [3]),
        ("What is in the last chapter?", [4, 5]),
        ("What does the conclusion say?", [6]),
        ("What is said at the very end?", [4, 5, 6]),  # notes and index are not the end
        ("What is said at the beginning?", [1, 2, 3]),  # nor the contents its beginning
        ("What is on page 4?", [3]),
        ("Was steht in Kapitel 3?", [4, 5]),
        ("Что в третьей главе?", [4, 5]),
    ],
)
def test_a_place_is_found_in_the_books_outline(question: str, passages: list[int]) -> None:
    place = parse_place(question)
    assert place is not None
    found = find_place(place, book(), question)
    assert found is not None and found.passages == passages, found


def test_a_place_the_document_lacks_is_not_found() -> None:
    for question in ("What is in chapter 9?", "What does Table 2 show?", "The last sheet?"):
        place = parse_place(question)
        assert place is not None and find_place(place, book(), question) is None


def test_numbered_heading_lines_make_the_outline_of_a_paper_without_one() -> None:
    # A PDF's text: the number on its own line, its title on the next; the cut between two
    # passages falls between them, so headings are read in the whole text.
    pages = [
        "Fast Traces\nAbstract\nWe trace loops.\n1.",
        "Introduction\nDynamic languages are slow. This paper makes the following "
        "contributions: a tracer and a compiler.",
        "2.\nOverview\nA loop is recorded. 3 primes are found.",
        "3.1\nTrees\nTrees hold traces.\nTable 2. Speed of the benchmarks\n| a | 3 |",
        "4.\nConclusions\nTracing is fast.\nAcknowledgments\nWe thank our readers.",
        "References\n[1] A. Author. A long paper about loops. 1999.\n[2] B. Author. 2001.",
    ]
    chunks, at = [], 0
    for index, text in enumerate(pages):  # one passage a page, at their offsets
        chunks.append(Chunk("0" * 64, "paper.pdf", index, text, index + 1, index + 1,
                            f"page={index + 1}", at, at + len(text)))  # fmt: skip
        at += len(text) + 2
    assert [h.label for h in outline(chunks)] == [
        "1 Introduction",
        "2 Overview",
        "3.1 Trees",
        "4 Conclusions",
        "Acknowledgments",  # back matter after the body ends its last section
        "References",
    ]
    expect = {
        "What is in section 2?": [2],
        "What does the introduction say?": [1],
        "What do the authors say in the conclusion?": [4],
        "What does Table 2 show?": [3],
        "What is the first contribution?": [1, 2],
        "What is said at the very end?": [2, 3, 4],  # the references are not its end
    }
    for question, passages in expect.items():
        place = parse_place(question)
        assert place is not None
        found = find_place(place, chunks, question)
        assert found is not None and found.passages == passages, (question, found)


def test_sheets_are_found_by_rank_or_by_their_name_in_the_question() -> None:
    sheets = ["Countries (ISO 3166-1)", "Languages (ISO 639-2)", "Language families (ISO 639-5)"]
    chunks = [
        chunk(i, f"| row {i} |", f"book.xlsx > {name}", f"sheet={name}")
        for i, name in enumerate(sheet for sheet in sheets for _ in range(2))
    ]
    cases = {
        "What is on the last sheet?": [4, 5],
        "What is in the second sheet?": [2, 3],
        # the longest name the question holds, not the first
        "Which codes are on the Language families sheet?": [4, 5],
        "¿Qué hay en la hoja Countries?": [0, 1],
    }
    for question, passages in cases.items():
        place = parse_place(question)
        assert place is not None
        found = find_place(place, chunks, question)
        assert found is not None and found.passages == passages, question
    unnamed = parse_place("What is on the sheet about planets?")
    assert unnamed is not None and find_place(unnamed, chunks, "about planets") is None


# ---------------------------------------------------------------------------------------------
# The retriever gives the place first


@pytest_asyncio.fixture
async def retriever(tmp_path: Path) -> AsyncIterator[Retriever]:
    embedder = CountingEmbedder(HashEmbedder())
    made = Retriever(
        index=VectorIndex.embedded(tmp_path / "chroma", embedder),
        embedder=embedder,
        count_tokens=embedder.count_tokens,
        chunk_tokens=40,
        chunk_overlap=0,
        new_document_candidates=2,
    )
    yield made
    await made.close()


def chaptered() -> str:
    """Markdown chapters that all speak of the harbour; only chapter 3 speaks of its end."""
    chapters = []
    for n in range(1, 7):
        extra = " The ferry stopped running that winter." if n == 3 else ""
        chapters.append(
            f"# Chapter {n}\n\nThe harbour of chapter {n} had boats and fishermen and a"
            f" lighthouse keeper.{extra}\n\nThe harbour master counted the boats again."
        )
    return "\n\n".join(chapters)


async def test_a_question_naming_a_chapter_gets_its_passages_first(retriever: Retriever) -> None:
    from proxy.retrieval.places import parse_place as parse

    document = text_document([chaptered()], name="harbour.md")
    places: dict[str, str] = {}
    question = "What does chapter 5 say about the harbour?"
    assert retriever.places and parse(question) is not None
    ranked, _ = await retriever.search([document], question, 6, places=places)
    first = ranked[0][0]
    assert first.place and "chapter 5" in first.chunk.text
    marked = [item for item in ranked[0] if item.place]
    assert marked and all("Chapter 5" in item.chunk.section for item in marked)
    assert places == {"harbour.md": places["harbour.md"]}
    assert places["harbour.md"].startswith('chapter 5: "Chapter 5", passage')
    # The rest of the document is still there, after the place.
    assert any(not item.place for item in ranked[0])


async def test_a_place_not_in_the_document_leaves_the_ranking_as_it_was(
    retriever: Retriever,
) -> None:
    document = text_document([chaptered()], name="harbour.md")
    places: dict[str, str] = {}
    asked, _ = await retriever.search(
        [document], "When did the ferry stop in chapter 9?", 4, places=places
    )
    plain, _ = await retriever.search([document], "When did the ferry stop in chapter 9?", 4)
    assert places == {"harbour.md": "chapter 9: not found"}
    assert not any(item.place for item in asked[0])
    assert [i.chunk.index for i in asked[0]] == [i.chunk.index for i in plain[0]]


async def test_places_can_be_turned_off(retriever: Retriever) -> None:
    document = text_document([chaptered()], name="harbour.md")
    retriever.places = False
    places: dict[str, str] = {}
    ranked, _ = await retriever.search([document], "What does chapter 5 say?", 4, places=places)
    assert places == {} and not any(item.place for item in ranked[0])


# ---------------------------------------------------------------------------------------------
# Real documents of the corpus


@pytest.mark.slow
@pytest.mark.parametrize(
    ("file", "question", "heading"),
    [
        ("pdf/freeculture.pdf", "What is chapter 3 about?", "3: Catalogs"),
        ("pdf/freeculture.pdf", "What does the last chapter say?", "14: Eldred II"),
        ("pdf/freeculture.pdf", "What do I read in the conclusion?", "CONCLUSION"),
        ("pdf/tracemonkey.pdf", "What does the conclusion say?", "9 Conclusions"),
        ("pdf/tracemonkey.pdf", "What is in section 4?", "4 Nested Trace Tree Formation"),
        ("epub/moby-dick.epub", "What happens in chapter 42?", "Chapter 42."),
    ],
)
async def test_places_in_corpus_documents(
    tmp_path: Path, corpus_dir: Path, file: str, question: str, heading: str
) -> None:
    from proxy.documents.parser import DocumentParser
    from proxy.retrieval.embeddings import DefaultEmbedder

    path = corpus_dir / file
    parser = DocumentParser(tmp_path, workers=1)
    try:
        document = await parser.parse(path.name, path.read_bytes())
    finally:
        await parser.close()
    chunks = chunk_document(document, count_tokens=DefaultEmbedder().count_tokens)
    place = parse_place(question)
    assert place is not None
    found = find_place(place, chunks, question)
    assert found is not None and found.what.startswith(heading), found


def test_a_numbered_chapter_missing_from_the_outline_is_not_counted_to() -> None:
    # The outline skips chapter 2: "chapter 2" is not found, rather than the second heading.
    chunks = [c for c in book() if "2: Copyists" not in c.section]
    chunks = [Chunk(c.doc_sha256, c.filename, i, c.text, c.page_start, c.page_end, c.location,
                    0, 0, c.section) for i, c in enumerate(chunks)]  # fmt: skip
    place = parse_place("What is in chapter 2?")
    assert place is not None and find_place(place, chunks) is None
    # Unnumbered chapters are counted.
    plain = [chunk(i, f"Text {i}.", f"Tale > {title}") for i, title in enumerate("ABC")]
    second = parse_place("What happens in the second chapter?")
    assert second is not None
    found = find_place(second, plain)
    assert found is not None and found.passages == [1]
