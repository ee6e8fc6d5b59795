"""A request's option layers (`X-Enrich-*` headers, the `enrich` object) read, checked and merged
over the defaults into `Options`, all derived from the declarations on EnrichFields."""

from __future__ import annotations

import dataclasses
import functools
import typing
from collections.abc import Collection, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from proxy.config import EnrichFields, Settings, request_options
from proxy.errors import BadRequest
from proxy.pipeline.strategy import Strategy
from proxy.suggest import did_you_mean

# Everything below derives from the declarations on EnrichFields (proxy.config): an option is
# added there, with its header and default, and nowhere else.
REQUEST_OPTIONS = request_options()
# Request headers for clients that can set headers but no body fields (the `llm` CLI, some UIs).
HEADER_NAMES = {name: option.header for name, option in REQUEST_OPTIONS.items()}
OPTION_HEADERS = {header.lower(): name for name, header in HEADER_NAMES.items()}
BODY_NAMES = {name: f"enrich.{name}" for name in REQUEST_OPTIONS}


def _header_form(annotation: Any) -> str:
    """How a header's text is read for a field of this type: list, int, float or text."""
    kinds = {typing.get_origin(arg) or arg for arg in typing.get_args(annotation)} or {annotation}
    for form, kind in (("list", list), ("int", int), ("float", float)):
        if kind in kinds:
            return form
    return "text"


HEADER_FORMS = {
    name: _header_form(field.annotation) for name, field in EnrichFields.model_fields.items()
}


def setting_value(settings: Settings, path: str) -> Any:
    """The setting at a dotted path (`retrieval.limit`)."""
    return functools.reduce(getattr, path.split("."), settings)


def config_defaults(settings: Settings) -> dict[str, Any]:
    """Each option's value when no request layer gives it: its setting's, else its default."""
    return {
        name: setting_value(settings, option.setting) if option.setting else option.default
        for name, option in REQUEST_OPTIONS.items()
    }


# What an option falls back to when the caller's defaults leave it out: the setting's default.
BUILT_IN_DEFAULTS = config_defaults(Settings())

HELD_AS: dict[str, Any] = {"strategy": Strategy, "vector_store_ids": tuple[str, ...]}
"""Options held in another form than requests give them: a strategy's name as a Strategy, the
stores' ids as a tuple; every other option as its declared type."""


def resolved_type(name: str) -> Any:
    """An option's type once every layer is merged: as HELD_AS says, else its declared type
    without the None that means "not given" (kept where None is what no layer giving it means:
    no affinity threshold)."""
    if name in HELD_AS:
        return HELD_AS[name]
    annotation = EnrichFields.model_fields[name].annotation
    if BUILT_IN_DEFAULTS[name] is None:
        return annotation
    given = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
    return given[0] if len(given) == 1 else annotation


def _held(options: Any) -> None:
    # Built from options as layers give them (a strategy's name, a list of ids).
    for name, kind in HELD_AS.items():
        setattr(options, name, (typing.get_origin(kind) or kind)(getattr(options, name)))


if TYPE_CHECKING:

    class Options:
        """The checker's view of the derived class below: each option is typed where it is
        declared (EnrichFields), and read here as it is."""

        retrieval_limit_given: bool

        def __init__(self, **options: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

else:
    Options = dataclasses.make_dataclass(
        "Options",
        [
            *(
                (name, resolved_type(name), dataclasses.field(default=BUILT_IN_DEFAULTS[name]))
                for name in REQUEST_OPTIONS
            ),
            # Sent by the client: honoured exactly, no budget fill.
            ("retrieval_limit_given", bool, dataclasses.field(default=False)),
        ],
        namespace={
            "__post_init__": _held,
            "__doc__": "A request's options with every layer merged (a model's defaults, "
            "`X-Enrich-*` headers, the body's `enrich` object) and the config's defaults filled "
            "in: one field per option declared on EnrichFields, at its type and default.",
        },
    )
    Options.__module__ = __name__


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


def repeated_option_header(headers: Iterable[str]) -> BadRequest | None:
    """An option header sent twice is refused: which one a client meant is not ours to guess
    (servers and intermediaries differ on whether the first, the last or both count)."""
    seen: set[str] = set()
    for name in headers:
        lowered = name.lower()
        if lowered in OPTION_HEADERS:
            if lowered in seen:
                written = HEADER_NAMES[OPTION_HEADERS[lowered]]
                return BadRequest(
                    f"{written}: sent more than once; send it once (X-Enrich-Vector-Stores"
                    " takes several ids, comma-separated)",
                    param=written,
                    code="duplicate_option_header",
                )
            seen.add(lowered)
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
    return _validated(raw, BODY_NAMES, "enrich")


def _header_value(field: str, text: str) -> Any:
    """Header text as the type the field wants; left as text when it does not parse, so the
    validator names the header and says what it expected."""
    text = text.strip()
    form = HEADER_FORMS[field]
    if form == "list":  # vs_a,vs_b
        return [part.strip() for part in text.split(",") if part.strip()]
    if form == "int" and text.lstrip("-").isdigit():
        return int(text)
    if form == "float":
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


def merge_options(*layers: EnrichFields, defaults: Mapping[str, Any]) -> Options:
    """Later layers win key by key; what no layer gives comes from `defaults` (by option name,
    the config's: `config_defaults`), else from the option's setting's default."""
    given = {**BUILT_IN_DEFAULTS, **defaults}
    for layer in layers:
        given.update(layer.model_dump(exclude_none=True))
    return Options(**given)
