"""`upstream.spawn` settings → the launch of a local server, with the model's chat template."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from proxy.config import ConfigError, load_settings
from proxy.upstream.local import default_threads, make_local_server

gguf = pytest.importorskip("gguf")


def gguf_file(
    path: Path,
    architecture: str,
    template: str | None = None,
    *,
    finetune: str | None = None,
    temp: float | None = None,
    top_k: int | None = None,
) -> str:
    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name("Tiny Test")
    if finetune is not None:
        writer.add_finetune(finetune)
    if temp is not None:
        writer.add_sampling_temp(temp)
    if top_k is not None:
        writer.add_sampling_top_k(top_k)
    if template is not None:
        writer.add_chat_template(template)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return str(path)


async def launch_of(tmp_path: Path, model: str, **sections: Any) -> tuple[list[str], list[Any]]:
    """The command line and the warnings logged on the way."""
    argv, logs = await launch_logs(tmp_path, model, **sections)
    return argv, [e for e in logs if e["log_level"] == "warning"]


async def launch_logs(tmp_path: Path, model: str, **sections: Any) -> tuple[list[str], list[Any]]:
    """The command line and everything logged on the way."""
    spawn = {"enabled": True, "model": model, **sections.pop("spawn", {})}
    settings = load_settings(None, environ={}, overrides={"upstream": {"spawn": spawn}, **sections})
    with capture_logs() as logs:
        server, _ = await make_local_server(settings, tmp_path / "server.log")
    return server.argv, logs


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
    at = argv.index("-t")
    assert argv[at : at + 5] == ["-t", "1", "--no-jinja", "--chat-template", "gemma"]
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


def option_values(argv: list[str], name: str) -> list[str]:
    return [argv[at + 1] for at, arg in enumerate(argv) if arg == name]


async def test_the_model_is_called_by_its_file_name_or_its_alias(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "gemma-3-270m-q4_k_m.gguf", "gemma3")
    argv, _ = await launch_of(tmp_path, model)
    assert option_values(argv, "--alias") == ["gemma-3-270m-q4_k_m"]
    argv, _ = await launch_of(tmp_path, model, spawn={"alias": "gemma-small"})
    assert option_values(argv, "--alias") == ["gemma-small"]


async def test_answers_get_a_length_unless_told_otherwise(tmp_path: Path) -> None:
    model = gguf_file(tmp_path / "g.gguf", "gemma3")
    argv, _ = await launch_of(tmp_path, model)
    assert option_values(argv, "--n-predict") == ["512"]
    argv, _ = await launch_of(tmp_path, model, spawn={"n_predict": -1})
    assert option_values(argv, "--n-predict") == ["-1"]
    with pytest.raises(ConfigError, match=r"upstream\.spawn\.n_predict"):
        load_settings(None, environ={}, overrides={"upstream": {"spawn": {"n_predict": 0}}})


async def test_a_base_model_stops_at_the_first_blank_line(tmp_path: Path) -> None:
    base = gguf_file(tmp_path / "base.gguf", "gemma3")
    tuned = gguf_file(tmp_path / "it.gguf", "gemma3", finetune="it")
    templated = gguf_file(tmp_path / "t.gguf", "qwen2", template="{{ messages }}")
    argv, logs = await launch_logs(tmp_path, base)
    assert option_values(argv, "--reverse-prompt") == ["\n\n"]
    (note,) = [e for e in logs if e["event"] == "spawn.base_model"]
    assert "base.gguf is a pre-trained model" in note["detail"]
    assert "upstream.spawn.stop: [] turns that off" in note["detail"]
    for model in (tuned, templated):
        argv, _ = await launch_of(tmp_path, model)
        assert option_values(argv, "--reverse-prompt") == []
    argv, _ = await launch_of(tmp_path, base, spawn={"stop": []})
    assert option_values(argv, "--reverse-prompt") == []
    argv, _ = await launch_of(tmp_path, tuned, spawn={"stop": ["###", "User:"]})
    assert option_values(argv, "--reverse-prompt") == ["###", "User:"]
    # A header that cannot be read tells nothing about the model: no stop is guessed.
    unreadable = tmp_path / "not.gguf"
    unreadable.write_bytes(b"not a gguf")
    argv, logs = await launch_logs(tmp_path, str(unreadable))
    assert option_values(argv, "--reverse-prompt") == []
    assert not [e for e in logs if e["event"] == "spawn.base_model"]


async def test_the_sampling_the_gguf_recommends_is_left_to_llamacpp_and_said(
    tmp_path: Path,
) -> None:
    sampled = gguf_file(tmp_path / "s.gguf", "gemma3", temp=0.25, top_k=7)
    plain = gguf_file(tmp_path / "p.gguf", "gemma3")
    for model, said in (
        (sampled, "the GGUF's own: temp 0.25, top_k 7"),
        (plain, "llama.cpp's defaults (the GGUF recommends none)"),
    ):
        argv, logs = await launch_logs(tmp_path, model)
        (launch,) = [e for e in logs if e["event"] == "spawn.model"]
        assert launch["sampling"] == said
        # llama.cpp reads general.sampling.* itself; passing them again would only hide them.
        assert "--temp" not in argv and "--top-k" not in argv
