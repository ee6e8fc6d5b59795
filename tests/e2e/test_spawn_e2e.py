"""The proxy's own local server (`upstream.spawn`), as the README's first command runs it."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proxy.config import load_settings
from proxy.http.app import make_app
from proxy.upstream.launch import xllamacpp_installed
from proxy.upstream.spawn import LlamaServer
from tests.e2e.conftest import CHAT_ARGS, spawn_settings, start_spawned
from tests.fakes.servers import ServerThread

pytestmark = pytest.mark.e2e

HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}]


def apply_template(base: str) -> str:
    response = httpx.post(f"{base}/apply-template", json={"messages": HELLO}, timeout=60)
    assert response.status_code == 200, response.text
    prompt: str = response.json()["prompt"]
    return prompt


def test_the_spawned_gemma_speaks_its_own_format(llama_server: str) -> None:
    # The GGUF has no template: without ours llama.cpp would render ChatML (<|im_start|>).
    assert apply_template(llama_server) == (
        "<start_of_turn>user\nBe brief.\n\nHello<end_of_turn>\n<start_of_turn>model\n"
    )


async def test_binary_backend(llama_binary: str, gemma_model: str, tmp_path: Path) -> None:
    spawn = spawn_settings(
        gemma_model, backend="binary", binary=llama_binary, extra_args=["--no-repack", *CHAT_ARGS]
    )
    server: LlamaServer = await start_spawned(tmp_path, spawn)
    try:
        assert "<start_of_turn>user\n" in apply_template(server.base_url)
        answer = httpx.post(
            f"{server.base_url}/v1/chat/completions",
            json={"messages": HELLO, "max_tokens": 4, "temperature": 0},
            timeout=120,
        )
        assert answer.status_code == 200, answer.text
    finally:
        await server.stop()


@pytest.fixture
def spawning_proxy(tmp_path: Path, gemma_model: str) -> Iterator[str]:
    if not xllamacpp_installed():
        pytest.skip("xllamacpp is not installed (pip install '.[local]')")
    thread = ServerThread()
    overrides: dict[str, Any] = {
        "upstream": {"spawn": spawn_settings(gemma_model, extra_args=CHAT_ARGS)},
        "server": {"data_dir": str(tmp_path / "data")},
    }
    try:
        yield thread.serve(make_app(load_settings(None, environ={}, overrides=overrides)))
    finally:
        thread.close()


def test_first_command_answers_about_a_pdf(spawning_proxy: str, corpus_dir: Path) -> None:
    pdf = base64.b64encode((corpus_dir / "pdf" / "tracemonkey.pdf").read_bytes()).decode()
    body = {
        "max_tokens": 24,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is this document about?"},
                    {
                        "type": "file",
                        "file": {
                            "filename": "paper.pdf",
                            "file_data": "data:application/pdf;base64," + pdf,
                        },
                    },
                ],
            }
        ],
    }
    health = httpx.get(f"{spawning_proxy}/healthz", timeout=30).json()
    assert (health["status"], health["proxy"], health["upstream"]) == ("ok", "ok", 200)
    response = httpx.post(f"{spawning_proxy}/v1/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    assert response.headers["X-Enrich-Strategy"] == "retrieval"
    answer = response.json()
    assert answer["choices"][0]["message"]["content"]
    assert answer["citations"], json.dumps(answer)[:500]
    assert all(c.startswith("paper.pdf#page=") for c in answer["citations"])


# -- answers that end, under a name people recognise -------------------------------------------

ALIAS = "gemma-3-270m-q4_k_m"
END_OF_TURN = 106  # Gemma's <end_of_turn>


def chat(base: str, **body: Any) -> dict[str, Any]:
    body.setdefault("messages", [{"role": "user", "content": "Name a colour."}])
    response = httpx.post(f"{base}/v1/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()
    return answer


def test_the_model_is_called_by_its_file_name(spawning_proxy: str) -> None:
    models = httpx.get(f"{spawning_proxy}/v1/models", timeout=60).json()
    assert [card["id"] for card in models["data"]] == [ALIAS]
    assert chat(spawning_proxy, max_tokens=2)["model"] == ALIAS  # whatever name was asked for


def test_the_end_of_turn_token_ends_an_answer(llama_server: str) -> None:
    # The GGUF names no end-of-turn token; llama.cpp finds <end_of_turn> in the vocabulary.
    # Forced as the first token, it ends the answer there.
    answer = chat(llama_server, max_tokens=20, logit_bias={str(END_OF_TURN): 100})
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] <= 1
    assert answer["choices"][0]["message"]["content"] == ""


def test_a_base_model_stops_at_the_first_blank_line(llama_server: str) -> None:
    prompt = "Fruit, one per paragraph.\n\napple\n\npear\n\nplum\n\n"

    def complete(**extra: Any) -> dict[str, Any]:
        body = {"prompt": prompt, "n_predict": 40, "temperature": 0, **extra}
        response = httpx.post(f"{llama_server}/completion", json=body, timeout=600)
        assert response.status_code == 200, response.text
        done: dict[str, Any] = response.json()
        return done

    stopped = complete()
    assert (stopped["stop_type"], stopped["stopping_word"]) == ("word", "\n\n")
    assert "\n\n" not in stopped["content"]
    # A request's own stop replaces the server's.
    assert "\n\n" in complete(stop=["no such words"])["content"]


async def test_answers_get_a_length_unless_the_request_sets_one(
    gemma_model: str, tmp_path: Path
) -> None:
    spawn = spawn_settings(gemma_model, n_predict=8, stop=[], extra_args=CHAT_ARGS)
    server: LlamaServer = await start_spawned(tmp_path, spawn)
    try:
        capped = chat(server.base_url)
        assert capped["usage"]["completion_tokens"] <= 8
        assert capped["choices"][0]["finish_reason"] in ("length", "stop")
        asked = chat(server.base_url, max_tokens=12, messages=HELLO)
        assert 8 < asked["usage"]["completion_tokens"] <= 12 or (
            asked["choices"][0]["finish_reason"] == "stop"
        )
    finally:
        await server.stop()


def test_a_responses_answer_without_a_length_completes(spawning_proxy: str) -> None:
    # What the OpenAI Agents SDK's non-streamed Runner.run sends: no max_output_tokens. It
    # raises on an `incomplete` response; the bundled model's answer ends at a blank line.
    body = {"model": "any", "instructions": "Answer briefly.", "input": "Name a colour."}
    response = httpx.post(f"{spawning_proxy}/v1/responses", json=body, timeout=600)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["status"] == "completed", json.dumps(answer)[:500]
    assert answer["model"] == ALIAS


def copy_with_sampling(source: str, target: Path, **sampling: float) -> Path:
    """The GGUF again, with `general.sampling.*` keys added (its makers' recommendation)."""
    gguf = pytest.importorskip("gguf")
    reader = gguf.GGUFReader(source)
    writer = gguf.GGUFWriter(str(target), arch=reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = field.types[0]
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_array(key, field.contents())
        else:
            writer.add_key_value(key, field.contents(), kind)
    for name, value in sampling.items():
        writer.add_float32(f"general.sampling.{name}", value)
    for tensor in reader.tensors:
        writer.add_tensor_info(
            tensor.name,
            tensor.data.shape,
            tensor.data.dtype,
            tensor.data.nbytes,
            tensor.tensor_type,
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data)
    writer.close()
    return target


async def test_the_ggufs_sampling_applies_below_the_command_line(
    gemma_model: str, tmp_path: Path
) -> None:
    model = copy_with_sampling(gemma_model, tmp_path / "sampled.gguf", temp=0.25, top_p=0.5)

    async def sampling(extra: list[str]) -> dict[str, Any]:
        spawn = spawn_settings(str(model), extra_args=[*extra, *CHAT_ARGS])
        log_dir = tmp_path / f"server-{len(extra)}"
        log_dir.mkdir()
        server: LlamaServer = await start_spawned(log_dir, spawn)
        try:
            props = httpx.get(f"{server.base_url}/props", timeout=60).json()
        finally:
            await server.stop()
        params: dict[str, Any] = props["default_generation_settings"]["params"]
        return params

    plain = await sampling([])
    assert (round(plain["temperature"], 2), round(plain["top_p"], 2)) == (0.25, 0.5)
    given = await sampling(["--temp", "0.9"])  # the command line wins, the rest stays the GGUF's
    assert (round(given["temperature"], 2), round(given["top_p"], 2)) == (0.9, 0.5)
