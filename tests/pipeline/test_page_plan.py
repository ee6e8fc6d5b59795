"""Choosing the pages that go as images, and their detail, within the room (pure)."""

from __future__ import annotations

from proxy.pipeline.page_plan import (
    LABEL_TOKENS,
    Asked,
    Detail,
    PageCandidate,
    details,
    plan_images,
    sizes_wanted,
)

SIZES = {"high": (1000, 1280), "low": (400, 512)}
TOKENS = {(1000, 1280): 1000, (400, 512): 200}


def size(page: PageCandidate, detail: Detail) -> tuple[int, int]:
    return SIZES[detail]


def page(number: int, asked: Asked = "auto", file: str = "a.pdf") -> PageCandidate:
    return PageCandidate(file, f"sha-{file}", number, "figure", 612, 792, asked)


def planned(
    plan_pages: list[PageCandidate], room: int, max_pages: int = 8
) -> list[tuple[int, str]]:
    plan = plan_images(plan_pages, room, max_pages, size, TOKENS)
    return [(image.page.number, image.detail) for image in plan.images]


def test_auto_takes_high_while_it_fits_then_low() -> None:
    room = 1000 + LABEL_TOKENS + 200 + LABEL_TOKENS
    assert planned([page(1), page(2)], room) == [(1, "high"), (2, "low")]


def test_a_page_that_fits_nowhere_is_left_out_and_later_ones_still_get_their_chance() -> None:
    pages = [page(1, "high"), page(2, "low")]
    plan = plan_images(pages, 200 + LABEL_TOKENS, 8, size, TOKENS)
    assert [(image.page.number, image.detail) for image in plan.images] == [(2, "low")]
    assert [(left.number, why) for left, why in plan.left_out] == [(1, "over budget")]
    assert plan.tokens == 200 + LABEL_TOKENS


def test_the_label_counts_and_the_room_is_never_overrun() -> None:
    assert planned([page(1, "low")], 200) == []
    assert planned([page(1, "low")], 200 + LABEL_TOKENS) == [(1, "low")]


def test_max_pages_and_none_and_each_page_once() -> None:
    pages = [page(1, "low"), page(1, "low"), page(2, "low"), page(3, "low"), page(4, "none")]
    plan = plan_images(pages, 100_000, 2, size, TOKENS)
    assert [image.page.number for image in plan.images] == [1, 2]
    assert [(left.number, why) for left, why in plan.left_out] == [(3, "vision.max_pages")]


def test_the_same_page_number_of_two_files_is_two_pages() -> None:
    pages = [page(1, "low", "a.pdf"), page(1, "low", "b.pdf")]
    assert len(plan_images(pages, 100_000, 8, size, TOKENS).images) == 2


def test_details_and_sizes_wanted() -> None:
    assert details("auto") == ("high", "low")
    assert details("none") == ()
    assert details("low") == ("low",)
    assert sizes_wanted([page(1), page(2, "low"), page(3, "none")], size) == set(TOKENS)
    assert page(4).place == "a.pdf#page=4"
