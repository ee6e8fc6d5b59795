"""Settings: a YAML file, then `PROXY__SECTION__KEY` environment variables, validated."""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ValidationError

from proxy.config.settings import Settings
from proxy.suggest import did_you_mean

ENV_PREFIX = "PROXY__"


class ConfigError(Exception):
    """The configuration is invalid; the message names the key."""


def _env_overrides(environ: dict[str, str]) -> dict[str, Any]:
    """`PROXY__UPSTREAM__BASE_URL=...` → `{"upstream": {"base_url": ...}}`; values parse as YAML."""
    tree: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith(ENV_PREFIX):
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__") if part]
        if not path:
            continue
        node = tree
        for part in path[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"environment variable {name} conflicts with another one")
        try:
            node[path[-1]] = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            node[path[-1]] = raw
    return tree


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


_LOST = "an experiment measured as losing, removed (2026-12-04)"
RETIRED_KEYS: dict[tuple[str, ...], str] = {
    ("retrieval", "history", "together"): _LOST,
    ("retrieval", "history", "both"): _LOST,
    ("retrieval", "history", "definite"): _LOST,
    ("retrieval", "history", "region"): _LOST,
    ("retrieval", "history", "terms_by_meaning"): _LOST,
    ("retrieval", "rewrite", "check"): _LOST,
}
"""Settings that were removed: a file still setting one (copied from an older
config.example.yaml) starts, the key ignored and named in the log at start."""


def without_retired(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`data` without the retired keys it sets, and a note for each (pure; `data` is left as
    it was)."""
    notes = []
    for path, why in RETIRED_KEYS.items():
        node: Any = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and path[-1] in node:
            data = _without(data, path)
            notes.append(f"config key {'.'.join(path)} is ignored: {why}")
    return data, notes


def _without(data: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any]:
    head, *rest = path
    if rest:
        return {**data, head: _without(data[head], tuple(rest))}
    return {key: value for key, value in data.items() if key != head}


def load_settings(
    path: Path | None = None,
    *,
    environ: dict[str, str] | None = None,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """Read the file, apply environment then explicit overrides, and validate the whole."""
    data: dict[str, Any] = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from exc
        except yaml.YAMLError as exc:
            raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"config file {path} must hold a mapping of sections")
        data = loaded
    data = _merge(data, _env_overrides(dict(os.environ if environ is None else environ)))
    data = _merge(data, overrides or {})
    data, retired = without_retired(data)
    try:
        settings = Settings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError("; ".join(problem_lines(exc, Settings, "config key "))) from exc
    settings._retired = retired
    return settings


def _unwrap(annotation: Any) -> Any:
    """`Annotated[X, ...]` and `X | None` as X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            annotation = next(a for a in typing.get_args(annotation) if a is not type(None))
        else:
            return annotation


def known_keys(model: type[BaseModel], path: Sequence[str | int]) -> list[str]:
    """The keys valid at `path` inside `model` (`("retrieval",)` → limit, citations, ...),
    stepping through lists and mappings (`models.<name>`, `server.api_keys.<n>`)."""
    node: Any = model
    for part in path:
        node = _unwrap(node)
        if isinstance(node, type) and issubclass(node, BaseModel):
            field = node.model_fields.get(str(part))
            if field is None:
                return []
            node = field.annotation
        elif typing.get_origin(node) in (list, dict) and typing.get_args(node):
            node = typing.get_args(node)[-1]  # `part` is an index or a key
        else:
            return []
    node = _unwrap(node)
    if isinstance(node, type) and issubclass(node, BaseModel):
        return list(node.model_fields)
    return []


def problem_lines(exc: ValidationError, model: type[BaseModel], prefix: str) -> list[str]:
    """One line per problem, naming the key; an unknown key gets the closest valid name."""
    problems = []
    for error in exc.errors():
        key = ".".join(str(part) for part in error["loc"]) or "(top level)"
        if error["type"] == "extra_forbidden" and error["loc"]:
            *parent, name = error["loc"]
            hint = did_you_mean(str(name), known_keys(model, parent))
            problems.append(f"{prefix}{key}: unknown key{hint}")
        else:
            problems.append(f"{prefix}{key}: {error['msg']}")
    return problems
