"""Versioned JSON presets: import (validate + migrate), export, built-ins and the registry."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from proxy.errors import BadRequest
from proxy.formats.model import PRESET_VERSION, InstructFormat
from proxy.formats.sandbox import TemplateRejected
from proxy.formats.sillytavern import sillytavern_to_preset


class PresetError(BadRequest):
    """A preset that cannot be imported; the message says which field and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_format", param="format")


def _v1_to_v2(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 had flat `<role>_template` fields, `stop_sequences`, `bos_token`/`eos_token`,
    `assistant_prefix` for the generation prompt and `system_role: "native"|"merge"`."""
    out = {k: v for k, v in data.items() if not k.endswith("_template")}
    out["templates"] = {
        role: {"template": data.get(f"{role}_template", "{{ content }}")}
        for role in ("system", "user", "assistant", "tool")
    }
    for old, new in (
        ("stop_sequences", "stop"),
        ("bos_token", "bos"),
        ("eos_token", "eos"),
        ("assistant_prefix", "generation_prompt"),
    ):
        if old in out:
            out[new] = out.pop(old)
    if "system_role" in out:
        out["system_mode"] = {"merge": "merge_first_user"}.get(out["system_role"], "native")
        del out["system_role"]
    out["version"] = 2
    return out


MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {1: _v1_to_v2}


def migrate(data: Mapping[str, Any]) -> dict[str, Any]:
    """Bring a preset dict of any known version up to PRESET_VERSION."""
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise PresetError(
            "preset has no integer 'version' (SillyTavern presets: use import_sillytavern)"
        )
    if version > PRESET_VERSION:
        raise PresetError(f"preset version {version} is newer than supported ({PRESET_VERSION})")
    if version < 1:
        raise PresetError(f"preset version {version} is not valid")
    out = copy.deepcopy(dict(data))
    while out["version"] < PRESET_VERSION:
        out = MIGRATIONS[out["version"]](out)
    return out


def _describe(exc: ValidationError) -> str:
    errs = exc.errors()
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'preset'}: {e['msg']}" for e in errs)


def import_preset(data: Mapping[str, Any], *, name: str | None = None) -> InstructFormat:
    """Validate (and migrate) a preset dict into a usable format; `name` overrides its name."""
    if not isinstance(data, Mapping):
        raise PresetError("a preset must be a JSON object")
    fields = migrate(data)
    if name is not None:
        fields["name"] = name
    try:
        return InstructFormat.model_validate(fields)
    except ValidationError as exc:
        raise PresetError(f"invalid preset {fields.get('name')!r}: {_describe(exc)}") from exc
    except TemplateRejected as exc:
        raise PresetError(exc.message) from exc


def export_preset(fmt: InstructFormat) -> dict[str, Any]:
    """Plain JSON-safe values, current version; import_preset(export_preset(f)) == f."""
    out: dict[str, Any] = fmt.model_dump(mode="json", exclude_none=True)
    return out


def is_sillytavern(data: Mapping[str, Any]) -> bool:
    """SillyTavern instruct presets carry sequences and no `version`."""
    return "version" not in data and any(
        k in data for k in ("input_sequence", "output_sequence", "system_sequence")
    )


def import_sillytavern(data: Mapping[str, Any], *, name: str | None = None) -> InstructFormat:
    """Convert a SillyTavern instruct preset (old field names included) and validate it."""
    if not isinstance(data, Mapping):
        raise PresetError("a SillyTavern preset must be a JSON object")
    try:
        preset = sillytavern_to_preset(data, name=name)
    except (TypeError, ValueError) as exc:
        raise PresetError(f"invalid SillyTavern preset: {exc}") from exc
    return import_preset(preset)


def import_any(data: Mapping[str, Any], *, name: str | None = None) -> InstructFormat:
    """Our preset, or a SillyTavern instruct preset (detected by its fields)."""
    if isinstance(data, Mapping) and is_sillytavern(data):
        return import_sillytavern(data, name=name)
    return import_preset(data, name=name)


def builtin_presets() -> list[InstructFormat]:
    """The presets shipped in proxy/formats/presets/*.json."""
    root = resources.files("proxy.formats") / "presets"
    out = []
    for entry in sorted(root.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            out.append(import_preset(json.loads(entry.read_text(encoding="utf-8"))))
    return out


def load_preset_file(path: Path) -> InstructFormat:
    """Read and import one preset file (ours or SillyTavern's); errors name the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PresetError(f"{path}: cannot read preset: {exc}") from exc
    try:
        return import_any(data, name=None)
    except BadRequest as exc:
        raise PresetError(f"{path}: {exc.message}") from exc


def _key(name: str) -> str:
    return name.strip().casefold()


class FormatRegistry:
    """Formats by name: built-ins, then a user preset dir, then inline config (later wins).

    Names and aliases match case-insensitively: `ChatML`, `chatml` and an imported
    SillyTavern preset's own title (`Llama 3 Instruct`) all find their format.
    """

    def __init__(
        self,
        builtins: Iterable[InstructFormat] | None = None,
        user_dir: Path | None = None,
        inline: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        self._formats: dict[str, InstructFormat] = {}
        for fmt in builtin_presets() if builtins is None else builtins:
            self._formats[fmt.name] = fmt
        if user_dir is not None and user_dir.is_dir():
            for path in sorted(user_dir.glob("*.json")):
                fmt = load_preset_file(path)
                self._formats[fmt.name] = fmt
        for key, data in (inline or {}).items():
            # Hand-written config may omit the version: it is then the current one.
            fields = (
                dict(data)
                if "version" in data or is_sillytavern(data)
                else {
                    **data,
                    "version": PRESET_VERSION,
                }
            )
            try:
                fmt = import_any(fields, name=_key(key))
            except BadRequest as exc:
                raise PresetError(f"formats.{key}: {exc.message}") from exc
            if key != fmt.name:
                fmt = fmt.model_copy(update={"aliases": [*fmt.aliases, key]})
            self._formats[fmt.name] = fmt
        # Later formats' aliases win over earlier ones'; a name always wins over an alias.
        self._aliases: dict[str, str] = {}
        for fmt in self._formats.values():
            for alias in fmt.aliases:
                self._aliases[_key(alias)] = fmt.name

    def names(self) -> list[str]:
        return sorted(self._formats)

    def get(self, name: str) -> InstructFormat:
        key = _key(name)
        found = self._formats.get(key) or self._formats.get(self._aliases.get(key, ""))
        if found is None:
            raise BadRequest(
                f"unknown instruct format {name!r}; known formats: {', '.join(self.names())}",
                code="unknown_format",
                param="format",
            )
        return found

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        key = _key(name)
        return key in self._formats or key in self._aliases
