"""Stage: the request's options: a model's defaults, `X-Enrich-*` headers, the `enrich` object."""

from __future__ import annotations

from proxy.pipeline.exchange import Exchange
from proxy.pipeline.option_layers import (
    config_defaults,
    enrich_from_body,
    enrich_from_headers,
    merge_options,
)
from proxy.pipeline.services import Services


async def read_options(exchange: Exchange, services: Services) -> None:
    settings = services.settings
    model = settings.model_settings(exchange.model)
    raw = exchange.body.pop("enrich", None)
    if model.upstream_model:
        # An alias (`enrich-full`) names options, not a model: the upstream gets the real name.
        exchange.body["model"] = model.upstream_model
    defaults = config_defaults(settings)
    if raw is None and not exchange.option_headers and not model.enrich.model_fields_set:
        # Most requests choose nothing: the config's defaults, without a pydantic validation.
        exchange.options = merge_options(defaults=defaults)
        return
    body_layer = enrich_from_body(raw)
    header_layer = enrich_from_headers(exchange.option_headers)
    # The body wins over headers, headers over the model's defaults.
    exchange.options = merge_options(model.enrich, header_layer, body_layer, defaults=defaults)
    # A limit this request sets is taken as given; a configured one is a floor (budget fill).
    exchange.options.retrieval_limit_given = (
        body_layer.retrieval_limit is not None or header_layer.retrieval_limit is not None
    )
