"""Where a place a question names lies in a document: the passages of its chapter, section,
table, page, sheet or slide, of its conclusion, or at its very end (pure functions)."""

from __future__ import annotations

import bisect
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from proxy.retrieval.chunking import Chunk
from proxy.retrieval.headings import SEPARATOR
from proxy.retrieval.overview import is_summary_heading
from proxy.retrieval.places import LAST, NUMBER_WORDS, UNITS, Place, roman_value
from proxy.retrieval.sentence_windows import document_text

REGION_PASSAGES = 3
"""Passages given for "at the very end" or "at the beginning": the last (first) of the body."""
CONTRIBUTION_REACH = 2
"""A list of contributions starts in the passage that names them and goes on in the next."""

_WORDS_BY_KIND = {
    kind: re.compile(rf"^\s*(?:{words})\s*", re.IGNORECASE) for kind, words in UNITS.items()
}
_NUMBER = r"(?P<n>\d{1,3}(?:\.\d{1,3}){0,3}|[ivxlc]{1,7}|[A-Z]|" + "|".join(NUMBER_WORDS) + r")"
_LEADING_NUMBER = re.compile(r"^\s*(?P<n>\d{1,3}(?:\.\d{1,3}){0,3})(?:[.:)]\s*|\s+)(?=\S)")
_HEADING_LINE = re.compile(
    r"^[ \t]*(?:(?P<n>\d{1,2}(?:\.\d{1,2}){0,3})\.?[ \t]+"
    r"|(?P<m>\d{1,2}\.|\d{1,2}(?:\.\d{1,2}){1,3}\.?)[ \t]*\n(?:[ \t]*\n)?[ \t]*)"
    r"(?P<title>[A-ZÀ-ÖØ-ÞА-ЯЁ][^\n]{1,69})$",
    re.MULTILINE,
)
"""A numbered heading line in a document without an outline: "3 Overview" on one line, or a
number of its own ("7." or "3.1") over its title, as PDFs of papers give them; short and not a
sentence (checked below)."""
_CAPTION_LINE = {
    kind: re.compile(rf"^\s*(?:{UNITS[kind]})\s*{_NUMBER}\b", re.IGNORECASE | re.MULTILINE)
    for kind in ("table", "figure")
}
_MENTION = {
    kind: re.compile(rf"(?<!\w)(?:{UNITS[kind]})\s*{_NUMBER}\b", re.IGNORECASE)
    for kind in ("table", "figure")
}
_INTRODUCTION = re.compile(
    r"^\s*(?:\d{1,2}\.?\s+)?(?:introduction|einleitung|einführung|introducci[oó]n|introduzione"
    r"|inleiding|введение)\s*$",
    re.IGNORECASE,
)
_ABSTRACT = re.compile(
    r"^\s*(?:abstract|kurzfassung|r[ée]sum[ée]|resumen|sommario|samenvatting|аннотация)\s*$",
    re.IGNORECASE,
)
_FRONT_MATTER = re.compile(
    r"^\s*(?:cover|title page|half title|copyright(?: page)?|contents|table of contents"
    r"|brief contents|inhalt|inhaltsverzeichnis|table des matières|sommaire|índice|indice"
    r"|inhoud(?:sopgave)?|содержание|оглавление)\s*\.?\s*$",
    re.IGNORECASE,
)
_BACK_MATTER = re.compile(
    r"^\s*(?:\d{1,2}\.?\s+|(?:appendix|anhang|annexe|ap[eé]ndice|appendice|bijlage|приложение)"
    r"\s+\w{1,3}\.?\s+)?(?:index|notes|endnotes|references|bibliography|works cited"
    r"|acknowledge?ments?|about the authors?|colophon|copyright(?: page)?"
    r"|(?:the )?(?:gnu )?(?:general public |free documentation )?licen[cs]e"
    r"|the full project gutenberg licen[cs]e|register|anmerkungen|literatur(?:verzeichnis)?"
    r"|quellen(?:verzeichnis)?|danksagung|bibliographie|remerciements|bibliograf[ií]a|notas"
    r"|agradecimientos|bibliografia|ringraziamenti|literatuur|dankwoord|примечания"
    r"|литература|список литературы|указатель|благодарности)\s*\.?\s*$",
    re.IGNORECASE,
)
_LEADER = re.compile(r"\.{4,}|…{2,}|(?:\. ){3,}")
_MATTER_LINE = re.compile(r"^[^\n]{2,60}$", re.MULTILINE)
_CONTRIBUTION = re.compile(rf"(?<!\w)(?:{UNITS['contribution']})(?!\w)", re.IGNORECASE)


@dataclass(frozen=True)
class Heading:
    """A heading of the document: where its section starts (a passage), how deep it sits, and
    its words; from the section paths the parsers give, or from a numbered heading line."""

    start: int
    depth: int
    label: str


@dataclass(frozen=True)
class Found:
    """The passages of the place, in the document's order, and what was taken for it."""

    passages: list[int]
    what: str


def find_place(
    place: Place, chunks: Sequence[Chunk], question: str = "", text: str = ""
) -> Found | None:
    """The passages of the document where the place lies; None when it has no such place.
    `text` is the document's text the chunks' offsets point into (heading lines are read there:
    a cut between two passages can split a number from its title); made from the chunks when
    not given."""
    if not chunks:
        return None
    if place.kind in ("end", "start"):
        return _region(place.kind, chunks, text or document_text(list(chunks)))
    if place.kind in ("sheet", "slide"):
        return _listed(place, chunks, question)
    if place.kind == "page":
        return _page(place, chunks)
    if place.kind in ("table", "figure"):
        return _caption(place, chunks)
    if place.kind == "contribution":
        return _contributions(chunks)
    headings = outline(chunks, text or document_text(list(chunks)))
    if place.kind in ("conclusion", "introduction", "abstract"):
        found = [h for h in headings if _names_region(place.kind, _bare(h.label))]
        return _section(found[0], headings, chunks) if found else None
    return _numbered_section(place, headings, chunks)


def _names_region(kind: str, label: str) -> bool:
    if kind == "conclusion":
        return is_summary_heading(label) and not _ABSTRACT.match(label)
    pattern = _INTRODUCTION if kind == "introduction" else _ABSTRACT
    return pattern.match(label) is not None


def outline(chunks: Sequence[Chunk], text: str = "") -> list[Heading]:
    """The document's headings in order: each level of the section paths where it changes (the
    document's title, shared by all, left out), else its numbered heading lines, read in the
    document's `text` (made from the chunks when not given)."""
    paths = [_parts(chunk.section) for chunk in chunks]
    # The document's title heads (nearly) every path, and EPUBs repeat it inside chapters.
    counts = Counter(part.casefold() for path in paths for part in set(path))
    shared, seen = counts.most_common(1)[0] if counts else ("", 0)
    if seen < 0.8 * len(chunks):
        shared = ""
    headings: list[Heading] = []
    before: list[str] = []
    for chunk, path in zip(chunks, paths, strict=True):
        path = [part for part in path if part.casefold() != shared]
        for depth, label in enumerate(path):
            if before[: depth + 1] != path[: depth + 1]:
                headings.append(Heading(chunk.index, depth, label))
        before = path
    if len(headings) > 1:
        return headings
    lines = []
    starts = [chunk.start for chunk in chunks]
    whole = text or document_text(list(chunks))
    for match in _HEADING_LINE.finditer(whole):
        number = (match.group("n") or match.group("m")).rstrip(".")
        title = match.group("title").strip()
        if title.endswith((".", ",", ";")) and len(title.split()) > 3:
            continue  # a sentence after a number: a list item, not a heading
        if _LEADER.search(title):
            continue  # a line of the table of contents
        at = max(0, bisect.bisect_right(starts, match.start("title")) - 1)  # where it starts
        lines.append(Heading(chunks[at].index, number.count("."), f"{number} {title}"))
    # Back matter after the body ("References", "Acknowledgments") ends the last section.
    for match in _MATTER_LINE.finditer(whole, len(whole) // 2):
        if _BACK_MATTER.match(match.group(0)):
            at = max(0, bisect.bisect_right(starts, match.start()) - 1)
            lines.append(Heading(chunks[at].index, 0, match.group(0).strip()))
    lines.sort(key=lambda heading: heading.start)
    return lines if len(lines) > 1 else headings


def _parts(section: str) -> list[str]:
    return [part.strip() for part in section.split(SEPARATOR) if part.strip()] if section else []


def _bare(label: str) -> str:
    return label.strip().strip(".:")


def _section(heading: Heading, headings: list[Heading], chunks: Sequence[Chunk]) -> Found:
    """From the heading's passage to the next new heading as deep or less deep: a heading seen
    before (a title DOCX and EPUB paths come back to) does not end it."""
    seen = {h.label for h in headings if h.start <= heading.start}
    top = _top_number(heading.label)
    after = [
        h.start
        for h in headings
        if h.start > heading.start
        and h.label not in seen
        # "3.1 Trees" ends section 2 even where no "3" heading stands before it
        and (
            h.depth <= heading.depth
            or (top is not None and _top_number(h.label) not in (None, top))
        )
    ]
    end = after[0] if after else chunks[-1].index + 1
    start = heading.start
    if start > 0 and _holds_heading(chunks[start - 1], heading.label):
        start -= 1  # the passage before ends with the heading and the section's first lines
    return Found(list(range(start, max(end, start + 1))), heading.label)


def _holds_heading(chunk: Chunk, label: str) -> bool:
    """Whether one of the passage's lines is the heading (Markdown's `#` marks aside)."""
    wanted = label.strip().casefold()
    return any(
        line.strip().lstrip("#").strip().casefold() == wanted for line in chunk.text.splitlines()
    )


def _numbered_heading(kind: str, label: str) -> bool:
    """ "3: Catalogs", "Chapter 3", "Chapter Three": a heading that carries its number."""
    if _top_number(label) is not None:
        return True
    words = _WORDS_BY_KIND[kind]
    return words.match(label) is not None and _number_of(words.sub("", label, count=1)) is not None


def _top_number(label: str) -> str | None:
    """`3` of "3.1 Trees", "3: Catalogs"; None for a heading without a leading number."""
    match = _LEADING_NUMBER.match(label)
    return match.group("n").split(".")[0] if match else None


def _numbered_section(
    place: Place, headings: list[Heading], chunks: Sequence[Chunk]
) -> Found | None:
    """A chapter, section, part or appendix: by the number its heading carries ("Chapter 3",
    "3: Catalogs", "4.2 Results", "Appendix B"), else by its rank among its kind's headings
    ("the third chapter", "the last chapter")."""
    named = [h for h in headings if _WORDS_BY_KIND[place.kind].match(h.label)]
    wanted = place.label or (str(place.number) if place.number not in (None, LAST) else None)
    if wanted is not None:
        for heading in named:
            rest = _WORDS_BY_KIND[place.kind].sub("", heading.label, count=1)
            if _number_of(rest, letters=place.kind == "appendix") == wanted:
                return _section(heading, headings, chunks)
        numbered = [h for h in headings if _LEADING_NUMBER.match(h.label)]
        for heading in sorted(numbered, key=lambda h: h.depth):
            match = _LEADING_NUMBER.match(heading.label)
            if match is not None and match.group("n") == wanted:
                if place.kind in ("chapter", "part") and "." in wanted:
                    continue
                return _section(heading, headings, chunks)
    if place.number is None:
        return None
    counted = _counted(place.kind, named, headings)
    if not counted:
        return None
    if place.number == LAST:
        return _section(counted[-1], headings, chunks)
    if any(_numbered_heading(place.kind, h.label) for h in counted):
        # Numbered units, none with this number: counting them would land on the wrong one
        # where the outline skips one (a PDF whose bookmarks miss chapter 8).
        return None
    if place.number <= len(counted):
        return _section(counted[place.number - 1], headings, chunks)
    return None


def _counted(kind: str, named: list[Heading], headings: list[Heading]) -> list[Heading]:
    """The headings "the third", "the last" count among: those named by the unit's word and,
    at their level, those numbered without it ("2: Mere Copyists" after "Chapter 1: Creators");
    chapters named by neither are the outline's top level, front and back matter left out."""
    numbered = [
        h
        for h in headings
        if (match := _LEADING_NUMBER.match(h.label)) is not None and "." not in match.group("n")
    ]
    if named or (numbered and kind in ("chapter", "section", "part")):
        depth = min(h.depth for h in named or numbered)
        pool = {id(h) for h in named} | {id(h) for h in numbered if kind != "appendix"}
        return _once([h for h in headings if id(h) in pool and h.depth == depth])
    if kind != "chapter":
        return []
    top = min((h.depth for h in headings), default=0)
    return _once(
        [
            h
            for h in headings
            if h.depth == top
            and not _FRONT_MATTER.match(_bare(h.label))
            and not _BACK_MATTER.match(_bare(h.label))
        ]
    )


def _once(headings: list[Heading]) -> list[Heading]:
    """Each heading where it first appears."""
    first: dict[str, Heading] = {}
    for heading in headings:
        first.setdefault(heading.label, heading)
    return list(first.values())


def _number_of(rest: str, *, letters: bool = False) -> str | None:
    """The number at the start of what follows a unit's word: `3`, `III` → `3`, `Three` → `3`,
    `4.2`; with `letters` (appendices) a lone letter stays one: `B`, `C`."""
    match = re.match(_NUMBER + r"(?!\w)", rest.strip(), re.IGNORECASE)
    if match is None:
        return None
    text = match.group("n")
    if text.casefold() in NUMBER_WORDS:
        return str(NUMBER_WORDS[text.casefold()])
    single = len(text) == 1 and text.isalpha()
    roman = re.fullmatch(r"[ivxlc]+", text, re.IGNORECASE) and _valid_roman(text)
    if roman and not (single and letters):
        return str(roman_value(text.casefold()))
    return text.upper() if single else text


def _valid_roman(text: str) -> bool:
    return re.fullmatch(r"(c{0,3})(xc|xl|l?x{0,3})(ix|iv|v?i{0,3})", text.casefold()) is not None


def _region(kind: str, chunks: Sequence[Chunk], text: str) -> Found | None:
    """The body's first or last passages: front matter (cover, contents) and back matter
    (notes, index, references, a licence) left out where the outline or heading lines show
    them."""
    body = [c.index for c in chunks if not _in_matter(c)]
    # A heading line of back matter in the text's second half ends the body there.
    for match in _MATTER_LINE.finditer(text, len(text) // 2):
        if _BACK_MATTER.match(match.group(0)):
            body = [i for i in body if chunks[i].start < match.start()] or body
            break
    body = body or [c.index for c in chunks]
    if kind == "end":
        return Found(body[-REGION_PASSAGES:], "the end of the text")
    return Found(body[:REGION_PASSAGES], "the beginning of the text")


def _in_matter(chunk: Chunk) -> bool:
    parts = _parts(chunk.section)
    if any(_BACK_MATTER.match(part) or _FRONT_MATTER.match(part) for part in parts[1:] or parts):
        return True
    first = next((line for line in chunk.text.splitlines() if line.strip()), "")
    return bool(_BACK_MATTER.match(first) or _FRONT_MATTER.match(first))


def _listed(place: Place, chunks: Sequence[Chunk], question: str) -> Found | None:
    """A sheet or slide, by its name in the question, or by its rank among the document's."""
    key = place.kind + "="
    names = list(dict.fromkeys(c.location for c in chunks if c.location.startswith(key)))
    if not names:
        return None
    chosen: str | None = None
    if place.number == LAST:
        chosen = names[-1]
    elif place.number is not None and place.number <= len(names):
        chosen = names[place.number - 1]
    elif place.number is None and place.label is None:
        # Named in the question: the longest name it holds ("Language families" over
        # "Languages" in "the Language families sheet").
        asked = question.casefold()
        named = [
            (len(title), name)
            for name in names
            if (title := name[len(key) :].split("(")[0].strip().casefold())
            and re.search(rf"(?<!\w){re.escape(title)}(?!\w)", asked)
        ]
        chosen = max(named)[1] if named else None
    if chosen is None:
        return None
    return Found([c.index for c in chunks if c.location == chosen], chosen[len(key) :])


def _page(place: Place, chunks: Sequence[Chunk]) -> Found | None:
    paged = [c for c in chunks if c.location.startswith("page=")]
    if not paged or place.number is None:
        return None
    number = max(c.page_end for c in paged) if place.number == LAST else place.number
    found = [c.index for c in paged if c.page_start <= number <= c.page_end]
    return Found(found, f"page {number}") if found else None


def _caption(place: Place, chunks: Sequence[Chunk]) -> Found | None:
    """A table or figure: the passages whose lines start with its caption ("Table 2: ...",
    "Figure 11."), else the passages that name it."""
    wanted = place.label or (str(place.number) if place.number not in (None, LAST) else None)
    if wanted is None:
        return None
    for pattern in (_CAPTION_LINE[place.kind], _MENTION[place.kind]):
        found = [
            c.index
            for c in chunks
            if any(_number_of(m.group("n")) == wanted for m in pattern.finditer(_read(c)))
        ]
        if found:
            return Found(found[:2] if pattern is _MENTION[place.kind] else found, place.describe())
    return None


def _read(chunk: Chunk) -> str:
    return f"{chunk.context}\n{chunk.text}" if chunk.context else chunk.text


def _contributions(chunks: Sequence[Chunk]) -> Found | None:
    """Where a paper lists its contributions: the first passage in its first half naming them,
    and the next."""
    half = chunks[: max(1, len(chunks) // 2)]
    for chunk in half:
        if _CONTRIBUTION.search(chunk.text):
            last = min(chunk.index + CONTRIBUTION_REACH, chunks[-1].index + 1)
            return Found(list(range(chunk.index, last)), "the list of contributions")
    return None
