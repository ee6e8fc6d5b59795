"""Reflowable text cut on its own structure, each unit with a location a person can find."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.documents.readers.sections import Section, chapter_lines, merge_units, split_sections


def test_headings_make_sections_named_by_their_heading() -> None:
    text = (
        "# Handbook\n\nIntro text.\n\n## 2.3 Refunds\n\nRefunds within 14 days.\n\n"
        "## 2.4 Returns\n\nReturns by post."
    )
    units = split_sections(text)
    assert [(u.location, u.title) for u in units] == [
        ("section=Handbook", "Handbook"),
        ("section=2.3 Refunds", "Handbook > 2.3 Refunds"),
        ("section=2.4 Returns", "Handbook > 2.4 Returns"),
    ]
    assert units[1].text == "## 2.3 Refunds\n\nRefunds within 14 days."


def test_a_heading_with_no_body_joins_the_next_section() -> None:
    units = split_sections("# Policies\n\n## Refunds\n\nPaid back.")
    expected = Section(
        "# Policies\n\n## Refunds\n\nPaid back.", "section=Refunds", "Policies > Refunds"
    )
    assert units == [expected]


def test_repeated_headings_are_told_apart_by_their_path() -> None:
    units = split_sections("# A\n\n## Summary\n\nx\n\n# B\n\n## Summary\n\ny")
    assert [u.location for u in units] == [
        "section=Summary",
        "section=B > Summary",
    ]


def test_hashes_in_code_blocks_are_not_headings() -> None:
    units = split_sections("# Setup\n\n```sh\n# install it\npip install x\n```\n\nDone.")
    assert [u.location for u in units] == ["section=Setup"]
    assert "# install it" in units[0].text


def test_text_without_headings_is_located_by_paragraph_or_line() -> None:
    paragraphs = [f"Paragraph {n}. " + "word " * 150 for n in range(1, 13)]
    by_paragraph = split_sections("\n\n".join(paragraphs), part_chars=2000)
    assert len(by_paragraph) > 1
    for unit in by_paragraph:
        number = int(unit.location.removeprefix("paragraph="))
        assert unit.text.startswith(f"Paragraph {number}.")
    text = "line one\nline two\n\n\n\nline six\n" + "\n".join(f"l{n} " * 40 for n in range(200))
    by_line = split_sections(text, anchor="line", headings=False, part_chars=2000)
    lines = text.split("\n")
    for unit in by_line:
        number = int(unit.location.removeprefix("line="))
        assert lines[number - 1].strip() == unit.text.split("\n", 1)[0].strip()


def test_plain_text_ignores_markdown_headings_when_told() -> None:
    units = split_sections("# not a heading in a .txt\nplain", anchor="line", headings=False)
    assert [u.location for u in units] == ["line=1"]


BOOK = (
    "THE STORM BOOK\n\nby Someone\n\n\n"
    "CHAPTER I.\n\nIt was a dark night,\nand cold.\n\n"
    "Chapter II. The Harbour\n\nThe boats came in.\n\n"
    "Part of the problem was the wind.\n\n"
    "Глава 3\n\nНочь была тёмной."
)


def test_a_plain_text_books_chapter_lines_open_sections() -> None:
    units = split_sections(BOOK, anchor="line", headings=False, chapters=True)
    assert [(u.location, u.title) for u in units] == [
        ("line=1", ""),
        ("section=CHAPTER I.", "CHAPTER I."),
        ("section=Chapter II. The Harbour", "Chapter II. The Harbour"),
        ("section=Глава 3", "Глава 3"),
    ]
    # A sentence that opens like a chapter is not one, and every line is kept.
    assert "Part of the problem was the wind." in units[2].text
    assert "\n".join(u.text for u in units).split() == BOOK.split()


@pytest.mark.parametrize(
    "text",
    [
        "Notes\n\nPart 2\n\nonly one part named",  # one is no book
        "CHAPTER I. is where\nit starts\n\nCHAPTER II. follows\nat once",  # not alone
        "Chapter 1 " + "of a sentence that runs on " * 4 + "\n\nChapter 2",  # too long: one left
        "# Chapter 1\n\n# Chapter 2",  # Markdown headings are not chapter lines
        "Part mix\n\nChapter dim\n\nthe letters of Roman numbers, no number",
    ],
)
def test_lines_that_only_look_like_chapters_are_text(text: str) -> None:
    assert chapter_lines(text) == frozenset()
    units = split_sections(text, anchor="line", headings=False, chapters=True)
    assert all(unit.location.startswith("line=") for unit in units)


def test_without_chapters_plain_text_keeps_its_lines() -> None:
    units = split_sections(BOOK, anchor="line", headings=False)
    assert all(unit.location.startswith("line=") for unit in units)


def test_units_are_merged_down_to_the_limit_without_losing_text() -> None:
    text = "\n\n".join(f"# H{n}\n\nbody {n}" for n in range(50))
    units = split_sections(text, max_units=7)
    assert len(units) <= 7
    assert units[0].location == "section=H0"
    joined = "\n\n".join(u.text for u in units)
    assert all(f"body {n}" in joined for n in range(50))
    assert merge_units(units, 100) == units


@given(
    st.lists(
        st.one_of(
            st.sampled_from(["# Title", "## Sub", "```", "", "- item", "text"]),
            st.text(alphabet="ab #\n`", max_size=30),
        ),
        max_size=60,
    )
)
def test_every_word_is_kept_once(lines: list[str]) -> None:
    text = "\n".join(lines)
    units = split_sections(text, part_chars=50)
    words = "".join(text.split())
    assert "".join("".join(u.text for u in units).split()) == words
    assert all(u.location for u in units)
