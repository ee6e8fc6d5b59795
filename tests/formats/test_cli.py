"""`formats list | show | render | import | export`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from proxy.formats import FormatRegistry, import_preset, render_prompt
from proxy.formats.cli import formats_command
from tests.formats.test_sillytavern import ST_CHATML

MESSAGES = [
    {"role": "system", "content": "You are {{char}}."},
    {"role": "user", "content": "Hi, I am {{user}}. {{ 7*7 }}"},
]


def test_list_and_show(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert formats_command(["--dir", str(tmp_path), "list"]) == 0
    out = capsys.readouterr().out
    assert "chatml" in out and "mistral-v7" in out and "gemma" in out
    assert formats_command(["--dir", str(tmp_path), "show", "llama3"]) == 0
    out = capsys.readouterr().out
    assert "meta-llama" in out and "<|start_header_id|>user<|end_header_id|>" in out


def test_render_prints_exact_prompt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"messages": MESSAGES}))
    argv = ["--dir", str(tmp_path / "none"), "render", "gemma", str(path), "--var", "char=Bob"]
    assert formats_command([*argv, "--var", "user=Ann"]) == 0
    out = capsys.readouterr().out
    assert out == (
        "<start_of_turn>user\nYou are Bob.\n\nHi, I am Ann. {{ 7*7 }}<end_of_turn>\n"
        "<start_of_turn>model\n"
    )
    assert formats_command([*argv, "--bos", "--no-generation-prompt"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("<bos><start_of_turn>user\n") and out.endswith("<end_of_turn>\n")


def test_import_sillytavern_then_use(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "ChatML.json"
    src.write_text(json.dumps(ST_CHATML))
    store = tmp_path / "formats"
    assert formats_command(["--dir", str(store), "import", str(src), "--name", "st-chatml"]) == 0
    saved = json.loads((store / "st-chatml.json").read_text())
    assert saved["version"] == 2
    fmt = import_preset(saved)
    messages = [{"role": "user", "content": "x"}]
    assert render_prompt(fmt, messages) == render_prompt(FormatRegistry().get("chatml"), messages)
    # again without --force: refused; the registry now has it
    assert formats_command(["--dir", str(store), "import", str(src), "--name", "st-chatml"]) == 1
    capsys.readouterr()
    assert formats_command(["export", "st-chatml", "--dir", str(store)]) == 0
    assert json.loads(capsys.readouterr().out) == saved


def test_import_refuses_unsafe_preset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    chatml = FormatRegistry().get("chatml").model_dump(mode="json")
    chatml["templates"]["user"]["template"] = "{{ content.__class__.__mro__ }}"
    bad.write_text(json.dumps(chatml))
    assert formats_command(["--dir", str(tmp_path / "out"), "import", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "not allowed" in err and not (tmp_path / "out").exists()


def test_errors_and_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert formats_command(["--dir", str(tmp_path), "export", "nope"]) == 1
    assert "known formats" in capsys.readouterr().err
    assert formats_command(["--dir", str(tmp_path), "render", "chatml", str(tmp_path / "x")]) == 1
    assert formats_command(["bogus"]) == 2
    assert formats_command(["--help"]) == 0
