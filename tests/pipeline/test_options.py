"""Options from a model's defaults, X-Enrich-* headers and the body, with plain values."""

from __future__ import annotations

import dataclasses
import typing

import pytest

from proxy.config import EnrichFields, Settings
from proxy.errors import BadRequest
from proxy.pipeline.option_layers import (
    BUILT_IN_DEFAULTS,
    HELD_AS,
    OPTION_HEADERS,
    REQUEST_OPTIONS,
    Options,
    config_defaults,
    enrich_from_body,
    enrich_from_headers,
    merge_options,
)
from proxy.pipeline.strategy import Strategy

CONFIG = {"retrieval_limit": 3, "affinity_threshold": None, "citations": "fields"}


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
    options = merge_options(model, headers, body, defaults=CONFIG)
    assert options.strategy == Strategy.NONE  # the body wins
    assert options.citations == "inline"  # headers over the model's defaults
    assert options.retrieval_limit == 7  # only the model gave it
    assert options.affinity_threshold is None  # nobody did: the config's default
    bare = merge_options(EnrichFields(), defaults={**CONFIG, "citations": "both"})
    assert (bare.strategy, bare.retrieval_limit, bare.citations) == (Strategy.AUTO, 3, "both")


def test_every_declared_header_reads_as_its_enrich_key() -> None:
    """Each option's header, with the example the reference shows, gives what the body's key
    gives: the header, its parsing and the body key all come from the one declaration."""
    for name, option in REQUEST_OPTIONS.items():
        from_header = enrich_from_headers({option.header: option.example})
        given = from_header.model_dump(exclude_none=True)
        assert list(given) == [name], (option.header, given)
        assert enrich_from_body(given) == from_header
    assert set(OPTION_HEADERS) == {option.header.lower() for option in REQUEST_OPTIONS.values()}


def test_what_no_layer_gives_comes_from_the_declared_setting() -> None:
    settings = Settings.model_validate(
        {"retrieval": {"limit": 6, "citations": "both"}, "vision": {"images": "low"}}
    )
    options = merge_options(EnrichFields(images="high"), defaults=config_defaults(settings))
    assert (options.retrieval_limit, options.citations, options.images) == (6, "both", "high")
    assert options.strategy is Strategy.AUTO and options.vector_store_ids == ()


def test_the_resolved_record_is_derived_from_the_declarations() -> None:
    """`Options` is the typed view stages read, derived from EnrichFields: one field per declared
    option in its order (and whether the limit was given), each at its declared type without
    the None of "not given" and at its default in a configuration left alone."""
    fields = {field.name: field for field in dataclasses.fields(Options)}
    assert list(fields) == [*REQUEST_OPTIONS, "retrieval_limit_given"]
    for name, declared in EnrichFields.model_fields.items():
        held = fields[name]
        assert held.default == BUILT_IN_DEFAULTS[name]
        if name in HELD_AS:
            assert held.type == HELD_AS[name]
            continue
        assert held.type | None == declared.annotation
        # None stays only where it is what no layer giving the option means (no threshold).
        assert (type(None) in typing.get_args(held.type)) == (BUILT_IN_DEFAULTS[name] is None)
    assert {str(strategy) for strategy in Strategy} == set(
        typing.get_args(typing.get_args(EnrichFields.model_fields["strategy"].annotation)[0])
    )
    assert merge_options(defaults=config_defaults(Settings())) == Options()
