"""What every section shares: strict sections, choices read where they are declared, URLs."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yarl
from pydantic import BaseModel, ConfigDict, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema


class Section(BaseModel):
    """A config section: unknown keys are typos, and typos are errors."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class OneOf:
    """A string setting's values, read where they are declared each time one is checked (the
    server kinds from proxy/server_kinds.py): a kind registered there is valid here too."""

    values: Callable[[], tuple[str, ...]]

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        found = handler(schema)
        found["enum"] = list(self.values())
        return found

    def check(self, value: str) -> str:
        allowed = self.values()
        if value in allowed:
            return value
        listed = [repr(name) for name in allowed]
        expected = " or ".join(filter(None, (", ".join(listed[:-1]), listed[-1])))
        # The message a Literal gives, so that a bad kind reads like any other bad choice.
        raise PydanticCustomError(
            "literal_error", "Input should be {expected}", {"expected": expected}
        )


DEFAULT_PORTS = {"http": 80, "https": 443}


def origin_of(value: str) -> str | None:
    """`value` as the origin a browser would send (`scheme://host[:port]`, lower case, no
    default port), or None when it is not an http(s) origin."""
    try:
        url = yarl.URL(value)
    except ValueError:
        return None
    if url.scheme not in DEFAULT_PORTS or not url.host or url.user or url.password:
        return None
    if url.raw_path not in ("", "/") or url.raw_query_string or url.raw_fragment:
        return None
    host = url.raw_host or ""
    origin = f"{url.scheme}://{'[' + host + ']' if ':' in host else host.lower()}"
    if url.explicit_port is not None and url.explicit_port != DEFAULT_PORTS[url.scheme]:
        origin += f":{url.explicit_port}"
    return origin


def without_credentials(url: str) -> str:
    """`url` without a `user:password@` part, for printing it."""
    try:
        parsed = yarl.URL(url)
    except ValueError:
        return "(an invalid URL)"
    if parsed.user is None and parsed.password is None:
        return url
    return str(parsed.with_user(None))
