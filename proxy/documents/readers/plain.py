"""Text formats in units: plain text and Markdown by their structure, CSV as tables, JSON and
source code verbatim in fenced blocks."""

from __future__ import annotations

from proxy.documents.formats import Kind, code_language
from proxy.documents.job import Job, Unit, Units
from proxy.documents.readers.markdown_blocks import fence
from proxy.documents.readers.sections import Section, merge_units, split_sections
from proxy.documents.readers.sheets import csv_sheet, sheet_sections
from proxy.documents.readers.text import PAGE_CHARS, decode_text

FIRST_HEADING_LINES = 200


def text_sections(kind: str, name: str, data: bytes, job: Job) -> list[Section]:
    """Units of a text-like file (decoded here), bounded by `job.max_pages` units."""
    text = decode_text(data)
    if kind == Kind.CSV:
        sections = sheet_sections([(name, csv_sheet(text, name, job))], location="row")
    elif kind in (Kind.JSON, Kind.CODE):
        language = "json" if kind == Kind.JSON else code_language(name)
        sections = [
            Section(fence(part, language), f"line={line}") for line, part in line_parts(text)
        ]
    else:
        markdown = kind == Kind.MARKDOWN
        sections = split_sections(text, anchor="line", headings=markdown, chapters=not markdown)
        if markdown:
            first_heading(text, job)
    return merge_units(sections, job.max_pages)


def first_heading(markdown: str, job: Job) -> None:
    for line in markdown.split("\n", FIRST_HEADING_LINES)[:FIRST_HEADING_LINES]:
        if line.startswith("#"):
            job.title(line.lstrip("#"))
            return


def line_parts(text: str, size: int = PAGE_CHARS) -> list[tuple[int, str]]:
    """Verbatim text cut between lines into parts of about `size`, with each part's first line."""
    parts: list[tuple[int, str]] = []
    lines = text.split("\n")
    start, chars = 1, 0
    current: list[str] = []
    for number, line in enumerate(lines, start=1):
        if current and chars + len(line) + 1 > size:
            parts.append((start, "\n".join(current)))
            start, chars, current = number, 0, []
        current.append(line)
        chars += len(line) + 1
    if current and "\n".join(current).strip():
        parts.append((start, "\n".join(current)))
    return [(line, part) for line, part in parts if part.strip()]


def units_of(sections: list[Section], job: Job) -> Units:
    """Sections numbered as units, after reporting how many there are."""
    job.on_count(len(sections))
    for number, section in enumerate(sections, start=1):
        yield Unit(number, section.text, section.location, section.title)
