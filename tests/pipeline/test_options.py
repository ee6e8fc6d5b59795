"""Options from a model's defaults, X-Enrich-* headers and the body, with plain values."""

from __future__ import annotations

import pytest

from proxy.config import EnrichFields
from proxy.errors import BadRequest
from proxy.pipeline.stages.options import enrich_from_body, enrich_from_headers, merge_options
from proxy.pipeline.strategy import Strategy

DEFAULTS = {"default_limit": 3, "default_threshold": None, "default_citations": "fields"}


def test_headers_read_like_the_enrich_object() -> None:
    headers = {
        "x-enrich-strategy": "retrieval",
        "X-Enrich-Retrieval-Limit": " 5 ",
        "X-ENRICH-AFFINITY-THRESHOLD": "0.25",
        "X-Enrich-Citations": "inline",
        "X-Other": "ignored",
    }
    assert enrich_from_headers(headers) == EnrichFields(
        strategy="retrieval", retrieval_limit=5, affinity_threshold=0.25, citations="inline"
    )


def test_vector_stores_are_a_comma_separated_header() -> None:
    fields = enrich_from_headers({"X-Enrich-Vector-Stores": " vs_a, vs_b ,, vs c "})
    assert fields.vector_store_ids == ["vs_a", "vs_b", "vs c"]


@pytest.mark.parametrize(
    ("header", "value", "words"),
    [
        ("X-Enrich-Strategy", "fast", "'auto', 'inject-full-content'"),
        ("X-Enrich-Retrieval-Limit", "0", "greater than or equal to 1"),
        ("X-Enrich-Retrieval-Limit", "-3", "greater than or equal to 1"),  # a number, too small
        ("X-Enrich-Retrieval-Limit", "2.5", "valid integer"),
        ("X-Enrich-Retrieval-Limit", "eleven", "valid integer"),
        ("X-Enrich-Affinity-Threshold", "1.5", "less than or equal to 1"),
        ("X-Enrich-Affinity-Threshold", "nan", "Input should be"),
        ("X-Enrich-Citations", "footnotes", "'fields', 'inline' or 'both'"),
        ("X-Enrich-Affinity-Threshold", "high", "valid number"),  # not a number: left as text
        ("X-Enrich-Vector-Stores", "vs_" + "a" * 70, "at most 64 characters"),
    ],
)
def test_a_bad_header_is_a_400_naming_it(header: str, value: str, words: str) -> None:
    with pytest.raises(BadRequest) as caught:
        enrich_from_headers({header: value})
    assert (caught.value.param, caught.value.code, caught.value.status) == (
        header,
        "invalid_value",
        400,
    )
    assert caught.value.message.startswith(f"{header}: ") and words in caught.value.message


def test_body_errors_name_the_key() -> None:
    with pytest.raises(BadRequest, match=r"enrich\.retrieval_limit"):
        enrich_from_body({"retrieval_limit": "5"})
    with pytest.raises(BadRequest, match=r"enrich\.colour"):
        enrich_from_body({"colour": "red"})
    with pytest.raises(BadRequest) as not_an_object:
        enrich_from_body([1])
    assert (not_an_object.value.message, not_an_object.value.param) == (
        "'enrich' must be an object",
        "enrich",
    )
    with pytest.raises(BadRequest) as nested:
        enrich_from_body({"vector_store_ids": ["vs_" + "a" * 70]})
    assert (nested.value.param, nested.value.code) == ("enrich.vector_store_ids", "invalid_value")
    assert nested.value.message.startswith("enrich.vector_store_ids: ")
    assert enrich_from_body(None) == EnrichFields()


def test_layers_merge_key_by_key_body_last() -> None:
    model = EnrichFields(strategy="inject-full-content", citations="both", retrieval_limit=7)
    headers = EnrichFields(strategy="retrieval", citations="inline")
    body = EnrichFields(strategy="none")
    options = merge_options(model, headers, body, **DEFAULTS)  # type: ignore[arg-type]
    assert options.strategy == Strategy.NONE  # the body wins
    assert options.citations == "inline"  # headers over the model's defaults
    assert options.retrieval_limit == 7  # only the model gave it
    assert options.affinity_threshold is None  # nobody did: the config's default
    bare = merge_options(EnrichFields(), **{**DEFAULTS, "default_citations": "both"})  # type: ignore[arg-type]
    assert (bare.strategy, bare.retrieval_limit, bare.citations) == (Strategy.AUTO, 3, "both")
