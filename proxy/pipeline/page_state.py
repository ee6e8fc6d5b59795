"""What a request's page images need between stages: the model's sight, the documents whose
pages may go, their prices and the plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.documents.model import ParsedDocument
from proxy.pipeline.page_plan import Detail, ImagePlan, PageCandidate
from proxy.upstream.vision import Sight


@dataclass
class Pricing:
    """Sizes and token counts of candidate pages at each detail, for one request."""

    sight: Sight
    low_px: int
    high_px: int
    counts: dict[tuple[int, int], int]

    def size(self, page: PageCandidate, detail: Detail) -> tuple[int, int]:
        return self.sight.cost.size(
            page.width_pt, page.height_pt, detail, self.low_px, self.high_px
        )


@dataclass
class PagesState:
    """A request's page images: the model's sight, the documents (and their bytes) whose pages
    may go, how they are priced, and the plan once made."""

    sight: Sight
    documents: dict[str, ParsedDocument] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    pricing: Pricing | None = None
    plan: ImagePlan | None = None
