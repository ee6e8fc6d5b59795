"""Stage: the request's options: a model's defaults, `X-Enrich-*` headers, the `enrich` object."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from pydantic import ValidationError

from proxy.config import CitationStyle, EnrichFields, ImageDetail
from proxy.errors import BadRequest
from proxy.pipeline.exchange import Exchange, Options
from proxy.pipeline.services import Services
from proxy.pipeline.strategy import Strategy
from proxy.suggest import did_you_mean

# Request headers for clients that can set headers but no body fields (the `llm` CLI, some UIs).
OPTION_HEADERS = {
    "x-enrich-strategy": "strategy",
    "x-enrich-retrieval-limit": "retrieval_limit",
    "x-enrich-affinity-threshold": "affinity_threshold",
    "x-enrich-citations": "citations",
    "x-enrich-vector-stores": "vector_store_ids",
    "x-enrich-images": "images",
    "x-enrich-prompt": "prompt",
}
HEADER_NAMES = {
    "strategy": "X-Enrich-Strategy",
    "retrieval_limit": "X-Enrich-Retrieval-Limit",
    "affinity_threshold": "X-Enrich-Affinity-Threshold",
    "citations": "X-Enrich-Citations",
    "vector_store_ids": "X-Enrich-Vector-Stores",
    "images": "X-Enrich-Images",
    "prompt": "X-Enrich-Prompt",
}


def unknown_option_header(headers: Mapping[str, str]) -> BadRequest | None:
    """An `X-Enrich-*` request header the proxy does not know is a typo, refused like an
    unknown `enrich` key, with the closest known name (and never forwarded, known or not)."""
    for name in headers:
        lowered = name.lower()
        if lowered.startswith("x-enrich-") and lowered not in OPTION_HEADERS:
            # Named as people write it: clients may send header names in lower case.
            written = "-".join(part.capitalize() for part in name.split("-"))
            return unknown_name(written, list(HEADER_NAMES.values()), "option header")
    return None


def unknown_name(name: str, known: Collection[str], what: str) -> BadRequest:
    """A 400 for a name the proxy does not know, with the closest known one (or all of them)."""
    hint = did_you_mean(name, known) or f"; known: {', '.join(known)}"
    return BadRequest(f"{name}: unknown {what}{hint}", param=name, code="unknown_parameter")


def _validated(raw: dict[str, Any], name_of: Mapping[str, str], fallback: str) -> EnrichFields:
    try:
        return EnrichFields.model_validate(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else ""
        where = name_of.get(field, f"{fallback}.{field}" if field else fallback)
        if error["type"] == "extra_forbidden":
            raise unknown_name(where, list(EnrichFields.model_fields), "option") from None
        raise BadRequest(f"{where}: {error['msg']}", param=where, code="invalid_value") from None


def enrich_from_body(raw: Any) -> EnrichFields:
    """The body's `enrich` object, validated; a bad key or value is a 400 naming it."""
    if raw is None:
        return EnrichFields()
    if not isinstance(raw, dict):
        raise BadRequest("'enrich' must be an object", param="enrich")
    return _validated(raw, {key: f"enrich.{key}" for key in EnrichFields.model_fields}, "enrich")


def _header_value(field: str, text: str) -> Any:
    """Header text as the type the field wants; left as text when it does not parse, so the
    validator names the header and says what it expected."""
    text = text.strip()
    if field == "vector_store_ids":  # vs_a,vs_b
        return [part.strip() for part in text.split(",") if part.strip()]
    if field == "retrieval_limit" and text.lstrip("-").isdigit():
        return int(text)
    if field == "affinity_threshold":
        try:
            return float(text)
        except ValueError:
            return text
    return text


def enrich_from_headers(headers: Mapping[str, str]) -> EnrichFields:
    """The `X-Enrich-*` request headers (names in any case), validated like the `enrich` object."""
    raw: dict[str, Any] = {}
    for name, value in headers.items():
        field = OPTION_HEADERS.get(name.lower())
        if field is not None:
            raw[field] = _header_value(field, value)
        elif name.lower().startswith("x-enrich-"):
            # Named as people write it: clients may send header names in lower case.
            written = "-".join(part.capitalize() for part in name.split("-"))
            raise unknown_name(written, list(HEADER_NAMES.values()), "option header")
    return _validated(raw, HEADER_NAMES, "headers")


def merge_options(
    *layers: EnrichFields,
    default_limit: int,
    default_threshold: float | None,
    default_citations: CitationStyle,
    default_images: ImageDetail = "auto",
) -> Options:
    """Later layers win key by key; what no layer gives comes from the config."""
    given: dict[str, Any] = {}
    for layer in layers:
        given.update(layer.model_dump(exclude_none=True))
    return Options(
        strategy=Strategy(given.get("strategy", "auto")),
        retrieval_limit=given.get("retrieval_limit", default_limit),
        affinity_threshold=given.get("affinity_threshold", default_threshold),
        citations=given.get("citations", default_citations),
        vector_store_ids=tuple(given.get("vector_store_ids", ())),
        images=given.get("images", default_images),
        prompt=given.get("prompt", "auto"),
    )


async def read_options(exchange: Exchange, services: Services) -> None:
    settings = services.settings
    retrieval = settings.retrieval
    model = settings.model_settings(exchange.model)
    raw = exchange.body.pop("enrich", None)
    if model.upstream_model:
        # An alias (`enrich-full`) names options, not a model: the upstream gets the real name.
        exchange.body["model"] = model.upstream_model
    if raw is None and not exchange.option_headers and not model.enrich.model_fields_set:
        # Most requests choose nothing: the config's defaults, without a pydantic validation.
        exchange.options = Options(
            retrieval_limit=retrieval.limit,
            affinity_threshold=retrieval.affinity_threshold,
            citations=retrieval.citations,
            images=settings.vision.images,
        )
        return
    body_layer = enrich_from_body(raw)
    header_layer = enrich_from_headers(exchange.option_headers)
    exchange.options = merge_options(
        model.enrich,
        header_layer,
        body_layer,  # the body wins over headers, headers over the model's defaults
        default_limit=retrieval.limit,
        default_threshold=retrieval.affinity_threshold,
        default_citations=retrieval.citations,
        default_images=settings.vision.images,
    )
    # A limit this request sets is taken as given; a configured one is a floor (budget fill).
    exchange.options.retrieval_limit_given = (
        body_layer.retrieval_limit is not None or header_layer.retrieval_limit is not None
    )
