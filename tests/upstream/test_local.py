"""`upstream.spawn` settings → the launch of a local server, with the model's chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from proxy.config import load_settings
from proxy.upstream.local import default_threads, make_local_server

gguf = pytest.importorskip("gguf")


def gguf_file(path: Path, architecture: str, template: str | None = None) -> str:
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("Tiny Test")
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return str(path)


async def launch_of(tmp_path: Path, model: str, **sections: Any) -> tuple[list[str], list[Any]]:
    spawn = {"enabled": True, "model": model, **sections.pop("spawn", {})}
    settings = load_settings(None, environ={}, overrides={"upstream": {"spawn": spawn}, **sections})
    with capture_logs() as logs:
        server, _ = await make_local_server(settings, tmp_path / "server.log")
    return server.argv, [e for e in logs if e["log_level"] == "warning"]


def template_of(argv: list[str]) -> str | None:
    return argv[argv.index("--chat-template") + 1] if "--chat-template" in argv else None


async def test_gemma_without_template_gets_gemmas(tmp_path: Path) -> None:
    argv, warnings = await launch_of(tmp_path, gguf_file(tmp_path / "g.gguf", "gemma3"))
    assert template_of(argv) == "gemma" and "--no-jinja" in argv
    assert argv[1:3] == ["-m", "proxy.upstream.xllamacpp_child"]
    assert warnings == []


async def test_a_model_with_its_own_template_keeps_it(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "q.gguf", "qwen2", template="{{ messages }}")
    argv, warnings = await launch_of(tmp_path, model)
    assert template_of(argv) is None and "--no-jinja" not in argv and warnings == []


@pytest.mark.parametrize("key", ["my-llama", "my-llama.gguf", "Tiny Test", "my-*"])
async def test_models_format_names_the_template(tmp_path: Path, key: str) -> None:
    model = gguf_file(tmp_path / "my-llama.gguf", "llama")
    argv, warnings = await launch_of(tmp_path, model, models={key: {"format": "llama3"}})
    assert template_of(argv) == "llama3" and warnings == []


async def test_unknown_family_warns_and_names_the_fallback(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "base.gguf", "llama")
    argv, warnings = await launch_of(tmp_path, model, models={"other": {"format": "gemma"}})
    assert template_of(argv) is None
    (warning,) = warnings
    assert "model base.gguf has no chat template" in warning["detail"]
    assert "falls back to chatml" in warning["detail"]


async def test_explicit_chat_template_and_backend_defaults(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "g.gguf", "gemma3")
    argv, _ = await launch_of(
        tmp_path,
        model,
        spawn={"chat_template": "chatml", "backend": "binary", "binary": "/opt/llama-server"},
    )
    assert argv[0] == "/opt/llama-server" and template_of(argv) == "chatml"
    # The binary backend's default extra options; xllamacpp has none.
    assert argv[-1] == "--no-repack"
    argv, _ = await launch_of(tmp_path, model, spawn={"threads": 1, "ctx_size": 2048})
    assert argv[-5:] == ["-t", "1", "--no-jinja", "--chat-template", "gemma"]
    assert argv[argv.index("-c") + 1] == "2048"


async def test_an_unreadable_model_file_only_warns(tmp_path: Path) -> None:
    model = tmp_path / "not.gguf"
    model.write_bytes(b"not a gguf at all")
    _, warnings = await launch_of(tmp_path, str(model))
    assert [w["event"] for w in warnings] == [
        "spawn.gguf_unreadable",
        "spawn.chat_template_fallback",
    ]


def test_default_threads_leave_room_for_the_proxy() -> None:
    assert [default_threads(n) for n in (None, 1, 2, 3, 8)] == [1, 1, 1, 1, 4]
