"""Stage: read and remove the per-request `enrich` object (what `extra_body` sends)."""

from __future__ import annotations

from typing import Any

from ..errors import BadRequest
from ..exchange import Exchange, Options
from ..services import Services
from ..strategy import STRATEGIES

KEYS = {"strategy", "retrieval_limit", "affinity_threshold"}


def parse_options(raw: Any, *, default_limit: int, default_threshold: float | None) -> Options:
    options = Options(retrieval_limit=default_limit, affinity_threshold=default_threshold)
    if raw is None:
        return options
    if not isinstance(raw, dict):
        raise BadRequest("'enrich' must be an object", param="enrich")
    unknown = sorted(set(raw) - KEYS)
    if unknown:
        raise BadRequest(
            f"unknown key(s) in 'enrich': {', '.join(unknown)} (known: {', '.join(sorted(KEYS))})",
            param="enrich",
        )
    strategy = raw.get("strategy", "auto")
    if not isinstance(strategy, str) or strategy not in STRATEGIES | {"auto"}:
        raise BadRequest(
            "enrich.strategy must be one of auto, inject-full-content, retrieval, none",
            param="enrich.strategy",
        )
    options.strategy = strategy
    if "retrieval_limit" in raw:
        limit = raw["retrieval_limit"]
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10:
            raise BadRequest(
                "enrich.retrieval_limit must be an integer from 1 to 10",
                param="enrich.retrieval_limit",
            )
        options.retrieval_limit = limit
    if "affinity_threshold" in raw:
        threshold = raw["affinity_threshold"]
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not (0.0 <= threshold <= 1.0)
        ):
            raise BadRequest(
                "enrich.affinity_threshold must be a number from 0.0 to 1.0",
                param="enrich.affinity_threshold",
            )
        options.affinity_threshold = float(threshold)
    return options


async def read_options(exchange: Exchange, services: Services) -> None:
    retrieval = services.settings.retrieval
    exchange.options = parse_options(
        exchange.body.pop("enrich", None),
        default_limit=retrieval.limit,
        default_threshold=retrieval.affinity_threshold,
    )
