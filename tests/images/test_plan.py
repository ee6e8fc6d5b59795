"""Choosing the pages that go as images, and their detail, within the room (pure)."""

from __future__ import annotations

from proxy.documents.model import DrawnPage, Page, ParsedDocument
from proxy.images.plan import (
    LABEL_TOKENS,
    Asked,
    Detail,
    PageCandidate,
    best_first,
    details,
    grouped,
    image_reserve,
    pages_of,
    plan_images,
    sizes_wanted,
)
from proxy.retrieval.budget import Passage, PassageSelection

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


def passage(source: int, rank: int, start: int, end: int | None = None) -> Passage:
    return Passage(source, rank, f"p{source}.{rank}", {"page_start": start, "page_end": end})


def test_best_first_takes_rank_by_rank_with_files_taking_turns() -> None:
    by_source = [[passage(0, 0, 1), passage(0, 1, 2), passage(0, 2, 3)], [passage(1, 0, 1)]]
    order = [(p.source, p.rank) for p in best_first(by_source)]
    assert order == [(0, 0), (1, 0), (0, 1), (0, 2)]
    assert best_first([]) == []


def test_grouped_gives_the_kept_passages_by_file_in_file_order() -> None:
    kept = [passage(1, 0, 1), passage(0, 0, 1), passage(1, 1, 2)]
    selection = PassageSelection(kept, [1, 2], 0, used=10)
    assert [[p.rank for p in group] for group in grouped(selection)] == [[0], [0, 1]]
    assert [group[0].source for group in grouped(selection)] == [0, 1]


def test_pages_of_gives_each_drawn_page_once_in_the_passages_order() -> None:
    sources = [
        ParsedDocument("a.pdf", "sha-a", "pdf", "PyMuPDF", (Page(1, "x"), Page(2, "y"))),
        ParsedDocument("b.pdf", "sha-b", "pdf", "PyMuPDF", (Page(1, "z"),)),
    ]
    drawn = {
        (0, 2): DrawnPage(2, 612, 792, "figure", 0.2),
        (0, 3): DrawnPage(3, 612, 792, "scan", 1.0),
        (1, 1): DrawnPage(1, 400, 300, "chart", 0.5),
    }
    # A passage over pages 1-3 of a.pdf (page 1 is not drawn), one on b.pdf, a.pdf's page 2 again.
    passages = [passage(0, 0, 1, 3), passage(1, 0, 1), passage(0, 1, 2)]
    pages = pages_of(passages, drawn, sources, ["auto", "low"])
    assert [(p.file, p.number, p.reason, p.asked) for p in pages] == [
        ("a.pdf", 2, "figure", "auto"),
        ("a.pdf", 3, "scan", "auto"),
        ("b.pdf", 1, "chart", "low"),
    ]
    assert (pages[2].width_pt, pages[2].height_pt, pages[2].sha256) == (400, 300, "sha-b")


def test_image_reserve_keeps_the_cheapest_pages_at_their_cheapest_detail() -> None:
    offered = [page(1), page(2, "high"), page(3, "none")]
    # page 1 at low (200), page 2 at high (1000); a page asked as none costs nothing.
    both = 200 + LABEL_TOKENS + 1000 + LABEL_TOKENS
    assert image_reserve(offered, size, TOKENS, 10_000, 1, 0.5, 8) == both
    assert image_reserve(offered, size, TOKENS, 10_000, 1, 0.5, 1) == 200 + LABEL_TOKENS
    # In characters, four per token; never more than the share, never the whole budget.
    assert image_reserve(offered, size, TOKENS, 100_000, 4, 0.5, 8) == 4 * both
    assert image_reserve(offered, size, TOKENS, 1000, 1, 0.5, 8) == 500
    assert image_reserve(offered, size, TOKENS, 1000, 1, 1.0, 8) == 999
