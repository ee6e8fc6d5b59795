"""The settings reference (docs/settings-reference.md), written from the settings' declarations."""

from __future__ import annotations

import argparse
import json
import re
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from proxy.config import EnrichFields, OneOf, Settings, request_options

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "settings-reference.md"
COMMAND = "python -m proxy.config_reference"

INTRO = f"""\
# Settings reference

Every setting and request option, with its type, default and meaning. Written from the
declarations in `proxy/config/` by `{COMMAND}`; a test fails when this page and they
differ, so edit the declarations and run the command again. How settings are given (the YAML file,
`PROXY__<SECTION>__<KEY>` environment variables, flags) is in [Configuration](configuration.md);
[config.example.yaml](../config.example.yaml) holds every key with its default.
"""

OPTIONS_INTRO = """\
Per request, as keys of the body's `enrich` object or as `X-Enrich-*` headers, and per model in
`models.<name>.enrich`. Key by key, the body wins over the headers, the headers over the model's
defaults, and those over the default below (a setting's value, where one is named). Headers are
read like the body's values (a bad one is a 400 naming the header); a list is comma-separated.
"""

PLAIN_TYPES: dict[Any, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    Path: "path",
    Any: "any",
}


def _union_members(annotation: Any) -> tuple[Any, ...]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return typing.get_args(annotation)
    return (annotation,)


def _bounds(metadata: list[Any], unit: str) -> list[str]:
    """Constraints as a reader writes them: `1 to 10`, `> 0`, `at most 64 characters`."""
    found: dict[str, Any] = {}
    for item in metadata:
        for name in ("ge", "gt", "le", "lt", "min_length", "max_length"):
            if hasattr(item, name):
                found[name] = getattr(item, name)
    words = []
    if "ge" in found and "le" in found:
        words.append(f"{found['ge']} to {found['le']}")
    else:
        words += [f"{sign} {found[name]}" for name, sign in _SIGNS if name in found]
    least, most = found.get("min_length"), found.get("max_length")
    if least is not None and most is not None:
        words.append(f"{least} to {most} {unit}")
    elif least is not None:
        words.append(f"at least {least} {unit.removesuffix('s') if least == 1 else unit}")
    elif most is not None:
        words.append(f"at most {most} {unit}")
    return words


_SIGNS = (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<"))


def _unit(annotation: Any) -> str:
    members = [m for m in _union_members(annotation) if m is not type(None)]
    origin = typing.get_origin(members[0]) if members else None
    return "items" if origin in (list, dict) else "characters"


def type_text(annotation: Any, metadata: list[Any] | None = None) -> str:
    """A field's type in words: `integer (>= 1)`, `` `a` | `b` or null``, `list of string`."""
    words = []
    for member in _union_members(annotation):
        inner: list[Any] = []
        while typing.get_origin(member) is Annotated:
            member, *extra = typing.get_args(member)
            inner += [item for info in extra for item in getattr(info, "metadata", [info])]
        origin = typing.get_origin(member)
        choices = next(
            (item for item in [*inner, *(metadata or [])] if isinstance(item, OneOf)), None
        )
        if member is type(None):
            text = "null"
        elif choices is not None:
            text = " | ".join(f"`{value}`" for value in choices.values())
        elif origin is Literal:
            text = " | ".join(f"`{value}`" for value in typing.get_args(member))
        elif origin is list:
            text = "list of " + type_text(typing.get_args(member)[0])
        elif origin is dict:
            text = "mapping of name to " + type_text(typing.get_args(member)[1])
        elif isinstance(member, type) and issubclass(member, BaseModel):
            text = "section"
        elif origin in (typing.Union, types.UnionType):
            text = type_text(member)
        else:
            text = PLAIN_TYPES.get(member, getattr(member, "__name__", str(member)))
        bounds = _bounds(inner, _unit(member))
        words.append(f"{text} ({', '.join(bounds)})" if bounds else text)
    bounds = _bounds(metadata or [], _unit(annotation))
    joined = " or ".join(words)
    return f"{joined} ({', '.join(bounds)})" if bounds else joined


def value_text(value: Any) -> str:
    """A default as it is written in the YAML file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Path):
        return str(value) if value.is_absolute() else f"./{value}"
    if isinstance(value, tuple | list | dict):
        return json.dumps(list(value) if isinstance(value, tuple) else value)
    return str(value)


def default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        return "" if isinstance(value, BaseModel) else f"`{value_text(value)}`"
    if field.default is PydanticUndefined:
        return "required"
    return f"`{value_text(field.default)}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def section_of(annotation: Any) -> tuple[type[BaseModel], str] | None:
    """The section a field holds, and how its path goes on (`.`, `[]`, `.<name>`)."""
    for member in _union_members(annotation):
        origin = typing.get_origin(member)
        args = typing.get_args(member)
        if origin is list:
            member = args[0]
            while typing.get_origin(member) is Annotated:
                member = typing.get_args(member)[0]
            suffix = "[]"
        elif origin is dict:
            member, suffix = args[1], ".<name>"
        else:
            suffix = ""
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member, suffix
    return None


def anchor(heading: str) -> str:
    """The fragment GitHub gives a heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-")


def _sections(model: type[BaseModel], path: str) -> Iterator[tuple[str, type[BaseModel]]]:
    """The section at `path` and every section inside it, depth first."""
    yield path, model
    for name, field in model.model_fields.items():
        held = section_of(field.annotation)
        if held is None or held[0] is EnrichFields:
            continue
        section, suffix = held
        yield from _sections(section, f"{path}.{name}{suffix}")


def _section_table(model: type[BaseModel], path: str) -> list[str]:
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        held = section_of(field.annotation)
        kind = type_text(field.annotation, field.metadata)
        if held is not None:
            section, suffix = held
            target = "Request options" if section is EnrichFields else f"{path}.{name}{suffix}"
            kind = kind.replace("section", f"[section](#{anchor(target)})")
        cells = [f"`{name}`", kind, default_text(field), field.description or ""]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return rows


def _options_table() -> list[str]:
    rows = [
        "| `enrich` key | header (example) | type | default | description |",
        "|---|---|---|---|---|",
    ]
    for name, option in request_options().items():
        field = EnrichFields.model_fields[name]
        given = type_text(field.annotation, field.metadata).replace(" or null", "")
        default = f"`{option.setting}`" if option.setting else f"`{value_text(option.default)}`"
        cells = [
            f"`{name}`",
            f"`{option.header}: {option.example}`",
            given,
            default,
            field.description or "",
        ]
        rows.append("| " + " | ".join(_cell(cell) for cell in cells) + " |")
    return rows


def render_reference() -> str:
    """The whole page, from the declarations."""
    lines = [INTRO, "## Request options", "", OPTIONS_INTRO, *_options_table(), ""]
    for name, field in Settings.model_fields.items():
        held = section_of(field.annotation)
        assert held is not None, name  # every top-level key is a section
        section, suffix = held
        for path, model in _sections(section, name + suffix):
            described = field.description if path == name + suffix else None
            if described is None:
                parent, _, key = path.rstrip("[]").removesuffix(".<name>").rpartition(".")
                described = _description_at(parent, key)
            lines += [f"## `{path}`", ""]
            if described:
                lines += [" ".join(described.split()), ""]
            own = model.__dict__.get("__doc__")
            if own and model not in (Settings,):
                lines += [" ".join(own.split()), ""]
            lines += [*_section_table(model, path), ""]
    return "\n".join(lines).rstrip("\n") + "\n"


def _description_at(parent: str, key: str) -> str | None:
    """The description of the field `key` in the section at `parent` (a rendered path)."""
    model: type[BaseModel] = Settings
    for part in re.split(r"\.|\[\]", parent):
        if not part or part == "<name>":
            continue
        held = section_of(model.model_fields[part].annotation)
        assert held is not None
        model = held[0]
    return model.model_fields[key].description


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is out of date")
    parser.add_argument("--output", type=Path, default=REFERENCE)
    args = parser.parse_args(argv)
    text = render_reference()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else ""
    if args.check:
        if current != text:
            print(f"{args.output} is out of date: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
