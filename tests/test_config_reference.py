"""The settings reference, config.example.yaml and docs/configuration.md against the config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

from proxy.config import EnrichFields, Settings, request_options
from proxy.config_reference import COMMAND, REFERENCE, main, render_reference, section_of

ROOT = Path(__file__).resolve().parent.parent


def _keys(model: type[BaseModel], path: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Every key path below `model`; a list's or mapping's entries as `*`."""
    found = []
    for name, field in model.model_fields.items():
        found.append((*path, name))
        held = section_of(field.annotation)
        if held is not None and held[0] is not EnrichFields:
            section, suffix = held
            found += _keys(section, (*path, name, "*") if suffix else (*path, name))
    return found


def test_the_reference_page_is_the_one_the_declarations_write() -> None:
    committed = REFERENCE.read_text(encoding="utf-8")
    assert committed == render_reference(), (
        f"{REFERENCE.relative_to(ROOT)} differs from the declarations in proxy/config/:"
        f" regenerate it with `{COMMAND}` and commit it"
    )


def test_the_page_has_a_row_for_every_setting_and_option() -> None:
    page = render_reference()
    for path in _keys(Settings, ()):
        row = f"## `{path[0]}" if len(path) == 1 else f"| `{path[-1]}` |"
        assert row in page, ".".join(path)
    for name, option in request_options().items():
        assert f"| `{name}` | `{option.header}: {option.example}` |" in page
    headings = re.findall(r"^## `(.+)`$", page, re.MULTILINE)
    assert "server.api_keys[]" in headings and "models.<name>" in headings
    assert "retrieval.rerank" in headings and "upstream.spawn" in headings


def test_every_setting_and_option_says_what_it_does() -> None:
    # The reference is written from the descriptions: a field without one is a blank cell.
    blank = []
    sections: list[tuple[type[BaseModel], str]] = [(Settings, "")]
    while sections:
        model, path = sections.pop()
        for name, field in model.model_fields.items():
            if not (field.description or "").strip():
                blank.append(f"{path}{name}")
            held = section_of(field.annotation)
            if held is not None:
                sections.append((held[0], f"{path}{name}{held[1]}."))
    assert not blank, f"no description=: {blank}"


def test_check_fails_on_a_stale_page_and_passes_once_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "reference.md"
    page.write_text(render_reference() + "| `edited` | by hand |\n", encoding="utf-8")
    assert main(["--check", "--output", str(page)]) == 1
    assert COMMAND in capsys.readouterr().err
    assert main(["--output", str(page)]) == 0
    assert main(["--check", "--output", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == render_reference()


def test_config_example_names_every_key() -> None:
    """Keys of sections the example leaves empty (models, rerank, api_keys) are in its comments."""
    text = (ROOT / "config.example.yaml").read_text(encoding="utf-8")
    loaded = yaml.safe_load(text)
    missing = []
    for path in _keys(Settings, ()):
        node = loaded
        for part in path:
            if isinstance(node, dict) and part in node:
                node = node[part]
            else:
                if not re.search(rf"[\s{{,]{re.escape(path[-1])}:", text):
                    missing.append(".".join(path))
                break
    assert not missing, f"config.example.yaml does not name {missing}"


def test_the_configuration_page_shows_every_option_header() -> None:
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name, option in request_options().items():
        assert f"`{option.header}" in page and f"`{name}`" in page, name
