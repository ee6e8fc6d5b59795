"""Which drawn pages go to a vision model as images, at which detail, in which room (pure)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from proxy.documents.model import DrawnPage, ParsedDocument
from proxy.retrieval.budget import Passage, PassageSelection
from proxy.upstream.image_cost import ImageCost

Detail = Literal["low", "high"]
Asked = Literal["none", "low", "high", "auto"]

LABEL_TOKENS = 16
"""Each image follows a one-line label naming its page (`report.pdf#page=4, as an image:`): a
dozen tokens in any tokenizer, counted as this many so that the room is never overrun."""


@dataclass(frozen=True)
class PageCandidate:
    """A drawn page that could go as an image: its file, page, why it is drawn, its size in
    points, and the detail the request asks for it (per file: Responses' `detail`)."""

    file: str
    sha256: str
    number: int
    reason: str
    width_pt: float
    height_pt: float
    asked: Asked = "auto"

    @property
    def place(self) -> str:
        return f"{self.file}#page={self.number}"


@dataclass(frozen=True)
class PlannedImage:
    """A page that goes as an image: at which detail and pixel size, for how many tokens
    (the image's own, with its label)."""

    page: PageCandidate
    detail: Detail
    width: int
    height: int
    tokens: int


@dataclass
class ImagePlan:
    """The pages planned as images, the tokens they take, and the pages left out and why."""

    images: list[PlannedImage] = field(default_factory=list)
    left_out: list[tuple[PageCandidate, str]] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(image.tokens for image in self.images)


Size = tuple[int, int]
Sizer = Callable[[PageCandidate, Detail], Size]


@dataclass(frozen=True)
class PageSizes:
    """The pixel size a page goes at, for each detail: the model's image cost and the boxes
    `vision.low_px` and `vision.high_px`."""

    cost: ImageCost
    low_px: int
    high_px: int

    def size(self, page: PageCandidate, detail: Detail) -> Size:
        return self.cost.size(page.width_pt, page.height_pt, detail, self.low_px, self.high_px)


def details(asked: Asked) -> tuple[Detail, ...]:
    """The details to try, best first: `auto` takes `high` while the room allows, else `low`."""
    if asked == "none":
        return ()
    if asked == "auto":
        return ("high", "low")
    return (asked,)


def sizes_wanted(candidates: Iterable[PageCandidate], size: Sizer) -> set[Size]:
    """Every pixel size the plan may price: one count per size is asked of the upstream."""
    return {size(page, detail) for page in candidates for detail in details(page.asked)}


def plan_images(
    candidates: Iterable[PageCandidate],
    room: int,
    max_pages: int,
    size: Sizer,
    tokens: Mapping[Size, int],
) -> ImagePlan:
    """Take the candidates in order (the caller's: page order, or the kept passages' rank),
    each once, at the best detail it asks for that fits into what is left of `room`, until
    `max_pages` are planned. A page that fits at no detail is left out and later ones still
    get their chance."""
    plan = ImagePlan()
    seen: set[tuple[str, int]] = set()
    for page in candidates:
        key = (page.sha256, page.number)
        if key in seen:
            continue
        seen.add(key)
        tried = details(page.asked)
        if not tried:
            continue
        if len(plan.images) >= max_pages:
            plan.left_out.append((page, "vision.max_pages"))
            continue
        for detail in tried:
            width, height = size(page, detail)
            cost = tokens[(width, height)] + LABEL_TOKENS
            if cost <= room:
                plan.images.append(PlannedImage(page, detail, width, height, cost))
                room -= cost
                break
        else:
            plan.left_out.append((page, "over budget"))
    return plan


def candidate(document: ParsedDocument, page: DrawnPage, asked: Asked) -> PageCandidate:
    """A document's drawn page, as the plan weighs it."""
    return PageCandidate(
        document.name, document.sha256, page.number, page.reason, page.width, page.height, asked
    )


def grouped(selection: PassageSelection) -> list[list[Passage]]:
    """The kept passages by file, in file order."""
    by_source: dict[int, list[Passage]] = {}
    for passage in selection.passages:
        by_source.setdefault(passage.source, []).append(passage)
    return [by_source[source] for source in sorted(by_source)]


def best_first(by_source: Sequence[Sequence[Passage]]) -> list[Passage]:
    """Rank by rank, files taking turns: the order the budget takes passages in."""
    most = max((len(passages) for passages in by_source), default=0)
    return [
        p
        for rank in range(most)
        for passages in by_source
        if rank < len(passages)
        for p in [passages[rank]]
    ]


def pages_of(
    passages: Iterable[Passage],
    drawn: Mapping[tuple[int, int], DrawnPage],
    sources: Sequence[ParsedDocument],
    asked: Sequence[Asked],
) -> list[PageCandidate]:
    """The drawn pages (by source and page number) the passages come from, in the passages'
    order, each once, at the detail asked for its file (`asked`, by source)."""
    pages: list[PageCandidate] = []
    seen: set[tuple[int, int]] = set()
    for passage in passages:
        start = int(passage.meta.get("page_start") or 0)
        end = int(passage.meta.get("page_end") or start)
        for number in range(start, max(start, end) + 1):
            key = (passage.source, number)
            if key in drawn and key not in seen:
                seen.add(key)
                pages.append(candidate(sources[passage.source], drawn[key], asked[passage.source]))
    return pages


def image_reserve(
    offered: Iterable[PageCandidate],
    size: Sizer,
    tokens: Mapping[Size, int],
    limit: int,
    unit: int,
    share: float,
    max_pages: int,
) -> int:
    """What the passage budget (`limit`, in units of `unit` per token) keeps back for images:
    the cheapest `max_pages` offered pages at their cheapest detail, labels included, at most
    `share` of the budget, and never all of it."""
    cheapest = sorted(
        min(tokens[size(page, detail)] for detail in details(page.asked))
        for page in offered
        if details(page.asked)
    )
    wanted = unit * sum(cost + LABEL_TOKENS for cost in cheapest[:max_pages])
    return min(math.floor(limit * share), wanted, limit - 1)
