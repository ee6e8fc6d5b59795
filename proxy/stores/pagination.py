"""Cursor pagination as OpenAI lists do it: limit, order by creation, after/before an id (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, TypeVar

from proxy.errors import BadRequest

T = TypeVar("T")
DEFAULT_LIMIT = 20
MAX_LIMIT = 100


@dataclass(frozen=True)
class PageRequest:
    limit: int = DEFAULT_LIMIT
    order: Literal["asc", "desc"] = "desc"
    after: str | None = None
    before: str | None = None


def page_request(query: Mapping[str, str]) -> PageRequest:
    """`limit`, `order`, `after`, `before` from a query string; a bad value is a 400 naming it."""
    raw = query.get("limit")
    limit = DEFAULT_LIMIT
    if raw is not None:
        if not raw.strip().isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
            raise BadRequest(
                f"limit must be an integer from 1 to {MAX_LIMIT}",
                param="limit",
                code="invalid_value",
            )
        limit = int(raw)
    order: Literal["asc", "desc"]
    given = query.get("order", "desc")
    if given == "asc":
        order = "asc"
    elif given == "desc":
        order = "desc"
    else:
        raise BadRequest("order must be asc or desc", param="order", code="invalid_value")
    return PageRequest(limit, order, query.get("after") or None, query.get("before") or None)


def paginate(
    items: Sequence[T], request: PageRequest, key: Callable[[T], tuple[float, str]]
) -> tuple[list[T], bool]:
    """The page of `items` (ordered by `key` = (creation time, id)) the request asks for, and
    whether more follow in its direction. An unknown cursor gives an empty page."""
    ordered = sorted(items, key=key, reverse=request.order == "desc")
    ids = [key(item)[1] for item in ordered]
    start, end = 0, len(ordered)
    if request.after is not None:
        start = ids.index(request.after) + 1 if request.after in ids else len(ordered)
    if request.before is not None:
        end = ids.index(request.before) if request.before in ids else 0
    window = ordered[start:end]
    if request.before is not None and request.after is None:
        # Before a cursor: the items just before it, still in the list's order.
        return window[-request.limit :], len(window) > request.limit
    return window[: request.limit], len(window) > request.limit
