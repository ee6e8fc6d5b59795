"""A fake LM Studio server (lmstudio-ai/docs 1_developer/2_rest): its model lists with the
loaded and the maximum context, and its silence on a prompt over the loaded context.

`GET /api/v1/models` (0.4+) → `{"models": [{"key", "type", "loaded_instances": [{"id",
"config": {"context_length"}}], "max_context_length", ...}]}`;
`GET /api/v0/models` (0.3.6+) → OpenAI's list with `state`, `max_context_length` and, once
loaded, `loaded_context_length`, and `capabilities: ["tool_use"]` for a model trained for
tools; v1's `capabilities` as lmstudio-bug-tracker #1659 shows them (0.4.6). A prompt over the
loaded context gets a 200 with no content at all (lmstudio-bug-tracker #2339: "silent empty
stream (200 OK, zero deltas)").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import ANSWER, OpenAIServer, Seen


@dataclass
class FakeLmStudio(OpenAIServer):
    model_id: str = "qwen3-coder-30b-a3b-instruct"
    owned_by: str = "organization_owner"
    label: str = "LM Studio"
    max_context: int = 262144
    loaded: bool = True
    v1: bool = True  # LM Studio 0.4 and later
    vision: bool = False  # a vision model (type vlm)
    # capabilities.trained_for_tool_use (v1) and ["tool_use"] (v0); v0_capabilities False:
    # an older build whose v0 list names no capabilities.
    trained_for_tools: bool = True
    v0_capabilities: bool = True

    def routes(self, app: web.Application) -> None:
        if self.v1:
            app.router.add_get("/api/v1/models", self.v1_models)
        app.router.add_get("/api/v0/models", self.v0_models)

    async def v1_models(self, request: web.Request) -> web.Response:
        instances = (
            [{"id": self.model_id, "config": {"context_length": self.window}}]
            if self.loaded
            else []
        )
        return web.json_response(
            {
                "models": [
                    {
                        "type": "vlm" if self.vision else "llm",
                        "publisher": "lmstudio-community",
                        "key": self.model_id,
                        "display_name": "Qwen3 Coder 30B",
                        "architecture": "qwen3moe",
                        "quantization": {"name": "Q4_K_M", "bits_per_weight": 4},
                        "size_bytes": 18556688384,
                        "params_string": "30B",
                        "loaded_instances": instances,
                        "max_context_length": self.max_context,
                        "format": "gguf",
                        "capabilities": {
                            "vision": self.vision,
                            "trained_for_tool_use": self.trained_for_tools,
                        },
                        "description": None,
                    }
                ]
            }
        )

    async def v0_models(self, request: web.Request) -> web.Response:
        card: dict[str, Any] = {
            "id": self.model_id,
            "object": "model",
            "type": "vlm" if self.vision else "llm",
            "publisher": "lmstudio-community",
            "arch": "qwen3moe",
            "compatibility_type": "gguf",
            "quantization": "Q4_K_M",
            "state": "loaded" if self.loaded else "not-loaded",
            "max_context_length": self.max_context,
        }
        if self.loaded:
            card["loaded_context_length"] = self.window
        if self.v0_capabilities:
            card["capabilities"] = ["tool_use"] if self.trained_for_tools else []
        return web.json_response({"object": "list", "data": [card]})

    def chat_words(self, messages: list[dict[str, Any]]) -> list[str]:
        # A tokenizer of its own that counts a fifth more than one token a word, as a model's
        # may count more than tiktoken (which the proxy must use: LM Studio has no tokenizer
        # endpoint).
        out: list[str] = []
        for n, word in enumerate(super().chat_words(messages)):
            out += [word, "<x>"] if n % 5 == 4 else [word]
        return out

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        return Seen(path, tokens, truncated=len(tokens) > self.window)

    def answer(self, seen: Seen, max_tokens: int) -> tuple[list[str], str]:
        if seen.truncated:
            return [], "stop"  # a 200 with nothing in it
        return ANSWER[: min(len(ANSWER), max_tokens)], "stop"
