"""Which drawn pages go to a vision model as images, at which detail, within the room (pure)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

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
