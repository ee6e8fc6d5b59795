"""Choosing the pages with the edges handed down: the surveys, then the prices of the sizes
the pages could take, then the plan; each fact asked only when the one before calls for it."""

from __future__ import annotations

from proxy.config import load_settings
from proxy.documents.model import DrawnPage, Page, ParsedDocument
from proxy.documents.page_images import PagesFailed, Survey
from proxy.images.choice import choose_in_room, drawn_pages
from proxy.images.plan import LABEL_TOKENS, PageSizes, Size
from proxy.upstream.image_cost import ImageCost

VISION = load_settings(None, environ={}).vision
SIZES = PageSizes(ImageCost("gemma3", "test", estimated=False), VISION.low_px, VISION.high_px)
CHART = DrawnPage(2, 612, 792, "figure", 0.3)


def document(name: str, pages: int = 3) -> ParsedDocument:
    return ParsedDocument(
        name, f"sha-{name}", "pdf", "PyMuPDF", tuple(Page(n, "x") for n in range(1, pages + 1))
    )


class Edges:
    """The parse workers' surveys and the upstream's counts, recorded."""

    def __init__(self, surveys: dict[str, Survey | PagesFailed]) -> None:
        self.surveys = surveys
        self.surveyed: list[str] = []
        self.priced: list[set[Size]] = []

    async def survey(self, found: ParsedDocument, data: bytes) -> Survey:
        self.surveyed.append(found.name)
        answer = self.surveys[found.name]
        if isinstance(answer, PagesFailed):
            raise answer
        return answer

    async def price(self, sizes: set[Size]) -> dict[Size, int]:
        self.priced.append(sizes)
        return {size: 256 for size in sizes}


async def test_only_documents_whose_bytes_are_at_hand_are_surveyed_and_notes_say_what_failed() -> (
    None
):
    documents = [document("a.pdf"), document("b.pdf"), document("c.pdf", 12), document("d.pdf")]
    edges = Edges(
        {
            "a.pdf": Survey((CHART,)),
            "b.pdf": PagesFailed("no parse worker could start", lasting=False),
            "c.pdf": Survey((CHART,), cut="its time ran out", through=5),
        }
    )
    data = {f"sha-{name}": b"%PDF-" for name in ("a.pdf", "b.pdf", "c.pdf")}  # d.pdf: by reference
    notes: list[str] = []
    found = await drawn_pages(documents, data, edges.survey, notes)
    assert edges.surveyed == ["a.pdf", "b.pdf", "c.pdf"]
    assert found == {"sha-a.pdf": (CHART,), "sha-c.pdf": (CHART,)}
    assert notes == [
        "b.pdf: its pages could not be surveyed (no parse worker could start)",
        "c.pdf: its pages were surveyed through page 5 of 12 (its time ran out); the later pages"
        " go as text only, and it is not surveyed again",
    ]


async def test_full_content_prices_only_when_there_is_a_room_and_a_drawn_page() -> None:
    edges = Edges({"a.pdf": Survey((CHART,))})
    data = {"sha-a.pdf": b"%PDF-"}
    unknown = await choose_in_room(
        [document("a.pdf")], ["auto"], data, None, VISION, SIZES, edges.survey, edges.price
    )
    assert unknown.plan is None and edges.priced == []  # no room known: nothing priced
    chosen = await choose_in_room(
        [document("a.pdf")], ["auto"], data, 4096, VISION, SIZES, edges.survey, edges.price
    )
    assert len(edges.priced) == 1 and chosen.room == 4096
    assert chosen.plan is not None
    [image] = chosen.plan.images
    assert (image.page.number, image.detail, image.tokens) == (2, "high", 256 + LABEL_TOKENS)
    empty = Edges({"a.pdf": Survey(())})
    nothing = await choose_in_room(
        [document("a.pdf")], ["auto"], data, 4096, VISION, SIZES, empty.survey, empty.price
    )
    assert nothing.plan is None and empty.priced == []  # no drawn page: nothing priced
