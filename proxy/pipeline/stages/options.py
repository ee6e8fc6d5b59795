"""Stage: read and remove the per-request `enrich` object (what `extra_body` sends)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proxy.errors import BadRequest
from proxy.pipeline.exchange import Exchange, Options
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import Strategy


class EnrichObject(BaseModel):
    """The `enrich` object as clients may send it; strict, so `"5"` is not a number."""

    model_config = ConfigDict(extra="forbid", strict=True)

    strategy: Literal["auto", "inject-full-content", "retrieval", "none"] = "auto"
    retrieval_limit: int | None = Field(None, ge=1, le=10)
    affinity_threshold: float | None = Field(None, ge=0.0, le=1.0)


def parse_options(raw: Any, *, default_limit: int, default_threshold: float | None) -> Options:
    if raw is None:
        # Most requests carry no `enrich` object: the defaults, without a pydantic validation.
        return Options(retrieval_limit=default_limit, affinity_threshold=default_threshold)
    if not isinstance(raw, dict):
        raise BadRequest("'enrich' must be an object", param="enrich")
    try:
        given = EnrichObject.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join(str(part) for part in ("enrich", *error["loc"]))
        raise BadRequest(f"{key}: {error['msg']}", param=key) from None
    return Options(
        strategy=Strategy(given.strategy),
        retrieval_limit=given.retrieval_limit or default_limit,
        affinity_threshold=(
            default_threshold if given.affinity_threshold is None else given.affinity_threshold
        ),
    )


async def read_options(exchange: Exchange, services: Services) -> None:
    retrieval = services.settings.retrieval
    exchange.options = parse_options(
        exchange.body.pop("enrich", None),
        default_limit=retrieval.limit,
        default_threshold=retrieval.affinity_threshold,
    )
