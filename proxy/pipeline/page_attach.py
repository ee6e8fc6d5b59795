"""The pages stage's second half: what choosing the pages found recorded, the planned page
images rendered, put before the enriched prompt in the last user message, counted and cited."""

from __future__ import annotations

from typing import Any

import structlog

from proxy.documents.page_images import PageImage, PagesFailed
from proxy.guard.safe_names import safe_name
from proxy.images.choice import PageChoice
from proxy.images.plan import LABEL_TOKENS, ImagePlan, PageCandidate
from proxy.pipeline.exchange import Exchange
from proxy.pipeline.file_refs import last_user_index
from proxy.pipeline.page_state import PagesState
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import INJECT, RETRIEVAL

log = structlog.get_logger(__name__)


def note(exchange: Exchange, line: str) -> None:
    """A line in the decision's images record (and the log) saying what went otherwise."""
    record = exchange.decision.images
    if record is not None:
        record.note = "; ".join(filter(None, [record.note, line]))
    log.warning("pages as images", request_id=exchange.request_id, note=line)


def record_choice(exchange: Exchange, choice: PageChoice) -> None:
    """What choosing the pages found, in the decision record's images entry: the room the
    images had, and a note for each survey cut short and for a budget given back."""
    record = exchange.decision.images
    assert record is not None  # written by the `sight` stage
    record.room = choice.room
    for line in choice.notes:
        note(exchange, line)


async def render_and_attach(
    exchange: Exchange, services: Services, state: PagesState, plan: ImagePlan
) -> None:
    record = exchange.decision.images
    assert record is not None
    rendered: dict[tuple[str, int], PageImage] = {}
    for sha256 in dict.fromkeys(image.page.sha256 for image in plan.images):
        document = state.documents[sha256]
        wanted = [
            (image.page.number, image.width, image.height, image.page.reason)
            for image in plan.images
            if image.page.sha256 == sha256
        ]
        exchange.status(f"Rendering {len(wanted)} pages of {document.name} as images...")
        try:
            images = await services.page_images.render(
                document, state.data[sha256], wanted, owner=exchange.caller.name
            )
        except PagesFailed as error:
            note(exchange, f"{document.name}: its pages could not be rendered ({error})")
            continue
        for number, page_image in images.items():
            rendered[(sha256, number)] = page_image
    sent = []
    parts: list[dict[str, Any]] = []
    for planned in plan.images:
        image = rendered.get((planned.page.sha256, planned.page.number))
        if image is None:
            record.left_out.append(_page_json(planned.page, "not rendered"))
            continue
        tokens = planned.tokens
        size = (image.width, image.height)
        if size != (planned.width, planned.height):
            # Scaled down to fit vision.max_image_kb: fewer pixels, priced again.
            counts = await services.vision.counts(exchange.model, state.sight, {size})
            tokens = counts[size] + LABEL_TOKENS
        sent.append((planned, image, tokens))
        label = safe_name(planned.page.place, exchange.control_tokens)
        parts.append({"type": "text", "text": f"Page image: {label}"})
        parts.append(
            {"type": "image_url", "image_url": {"url": image.url, "detail": planned.detail}}
        )
    for page, why in plan.left_out:
        record.left_out.append(_page_json(page, why))
    if not sent:
        return
    _attach(exchange, parts)
    record.tokens = sum(tokens for _, _, tokens in sent)
    record.pages = [
        {
            **_page_json(planned.page),
            "detail": planned.detail,
            "width": image.width,
            "height": image.height,
            "mime": image.mime,
            "bytes": image.size,
            "tokens": tokens,
        }
        for planned, image, tokens in sent
    ]
    exchange.response_headers["X-Enrich-Images"] = str(len(sent))
    _cite(exchange, [planned.page for planned, _, _ in sent])
    exchange.status(f"Sending {len(sent)} pages as images: {_listed(sent)}")
    tokens_header = exchange.response_headers.get("X-Enrich-Tokens")
    if exchange.strategy == INJECT and tokens_header and "/" in tokens_header:
        used, window = tokens_header.split("/", 1)
        exchange.response_headers["X-Enrich-Tokens"] = f"{int(used) + record.tokens}/{window}"


def _page_json(page: PageCandidate, why: str | None = None) -> dict[str, Any]:
    found: dict[str, Any] = {"file": page.file, "page": page.number, "reason": page.reason}
    if why is not None:
        found["why"] = why
    return found


def _listed(sent: list[tuple[Any, PageImage, int]]) -> str:
    by_file: dict[str, list[int]] = {}
    for planned, _, _ in sent:
        by_file.setdefault(planned.page.file, []).append(planned.page.number)
    return "; ".join(
        f"{name} (page{'s' if len(pages) > 1 else ''} {', '.join(map(str, pages))})"
        for name, pages in by_file.items()
    )


def _attach(exchange: Exchange, parts: list[dict[str, Any]]) -> None:
    """The page images (each after its label) before the enriched prompt in the last user
    message: the question stays last, where models look for it."""
    messages = exchange.messages
    index = last_user_index(messages)
    if index is None:
        return
    message = dict(messages[index])
    content = message.get("content")
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    message["content"] = [*parts, *(content or [])]
    exchange.body["messages"] = [*messages[:index], message, *messages[index + 1 :]]


def _cite(exchange: Exchange, pages: list[PageCandidate]) -> None:
    """Full content: the pages sent as images are the citations. Retrieval: the passages'
    search results on those pages say so (`page_image`)."""
    places = {(page.file, page.number) for page in pages}
    if exchange.strategy == RETRIEVAL:
        for result in exchange.search_results:
            if (result.get("title"), result.get("page")) in places:
                result["page_image"] = True
        return
    file_ids = {ref.name: ref.file_id for ref in exchange.new_refs if ref.file_id}
    for page in pages:
        exchange.citations.append(page.place)
        found: dict[str, Any] = {
            "title": page.file,
            "url": page.place,
            "snippet": "",
            "source": "attachment",
            "location": f"page={page.number}",
            "page": page.number,
            "page_image": True,
        }
        if file_ids.get(page.file):
            found["file_id"] = file_ids[page.file]
        exchange.search_results.append(found)
