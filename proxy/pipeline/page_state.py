"""What a request's page images need between stages: the model's sight, the documents whose
pages may go, the sizes and prices of their pages, and the plan."""

from __future__ import annotations

from dataclasses import dataclass, field

from proxy.documents.model import ParsedDocument
from proxy.images.choice import PageChoice
from proxy.images.plan import ImagePlan, PageSizes
from proxy.upstream.vision import Sight


@dataclass
class PagesState:
    """A request's page images: the model's sight and the sizes it takes pages at (the
    `sight` stage), the documents (and their bytes) whose pages may go, and what choosing them
    came to (the `passages` stage for retrieval, the `pages` stage for full content)."""

    sight: Sight
    sizes: PageSizes
    documents: dict[str, ParsedDocument] = field(default_factory=dict)
    data: dict[str, bytes] = field(default_factory=dict)
    choice: PageChoice | None = None

    @property
    def plan(self) -> ImagePlan | None:
        return self.choice.plan if self.choice is not None else None
