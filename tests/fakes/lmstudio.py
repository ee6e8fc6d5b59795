"""A fake LM Studio server (lmstudio-ai/docs 1_developer/2_rest): its model lists with the
loaded and the maximum context, and what it does with a prompt over the loaded context.

`GET /api/v1/models` (0.4+) → `{"models": [{"key", "type", "loaded_instances": [{"id",
"config": {"context_length"}}], "max_context_length", ...}]}`;
`GET /api/v0/models` (0.3.6+) → OpenAI's list with `state`, `max_context_length` and, once
loaded, `loaded_context_length`, and `capabilities: ["tool_use"]` for a model trained for
tools; v1's `capabilities` as lmstudio-bug-tracker #1659 shows them (0.4.6).

A prompt over the loaded context, by `version`:
- 0.3 (GGUF engine): a 200 with no content at all (lmstudio-bug-tracker #2339: "silent empty
  stream (200 OK, zero deltas)");
- 0.4 (0.4.21 modelled): refused. Not streamed, a 400 `{"error": "The number of tokens to keep
  from the initial prompt is greater than the context length (n_keep: N>= n_ctx: W). Try to
  load the model with a larger context length, or provide a shorter input."}` (as reported
  against 0.4 in Gitlawb/openclaude #353); streamed, a 200 `text/event-stream` whose one event
  is `event: error` with `data: {"error": {"message": "Input does not fit in context length.
  The input has N tokens, but the context length only supports W tokens."}, "message": ...}`
  (lmstudio-bug-tracker #2322, aaif-goose/goose #11318).

Its tokenizer is the model's own, which the proxy cannot ask (LM Studio has no tokenizer
endpoint): here `density` tokens a word, a fifth more than tiktoken's one by default.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import ANSWER, OpenAIServer, Refused, Seen


@dataclass
class FakeLmStudio(OpenAIServer):
    model_id: str = "qwen3-coder-30b-a3b-instruct"
    owned_by: str = "organization_owner"
    label: str = "LM Studio"
    version: str = "0.4.21"
    max_context: int = 262144
    loaded: bool = True
    v1: bool = True  # LM Studio 0.4 and later
    vision: bool = False  # a vision model (type vlm)
    # capabilities.trained_for_tool_use (v1) and ["tool_use"] (v0); v0_capabilities False:
    # an older build whose v0 list names no capabilities.
    trained_for_tools: bool = True
    v0_capabilities: bool = True
    density: float = 1.2  # the model's tokens per word

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
        # `density` tokens a word: whole extra tokens as the fractions add up (1.2: one more
        # every fifth word).
        extra = round((self.density - 1) * 1000)
        out: list[str] = []
        owed = 0
        for word in super().chat_words(messages):
            out.append(word)
            owed += extra
            while owed >= 1000:
                out.append("<x>")
                owed -= 1000
        return out

    def refuses(self) -> bool:
        major, minor = (int(part) for part in self.version.split(".")[:2])
        return (major, minor) >= (0, 4)

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        over = len(tokens) > self.window
        if over and self.refuses():
            raise Refused(self.refusal(len(tokens), bool(body.get("stream"))))
        return Seen(path, tokens, truncated=over)

    def refusal(self, tokens: int, stream: bool) -> web.Response:
        headers = {"X-Powered-By": "Express"}
        if not stream:
            message = (
                "The number of tokens to keep from the initial prompt is greater than the "
                f"context length (n_keep: {tokens}>= n_ctx: {self.window}). Try to load the "
                "model with a larger context length, or provide a shorter input."
            )
            return web.json_response({"error": message}, status=400, headers=headers)
        message = (
            f"Input does not fit in context length. The input has {tokens} tokens, but the "
            f"context length only supports {self.window} tokens."
        )
        frame = {"error": {"message": message}, "message": message}
        body = b"event: error\ndata: " + json.dumps(frame).encode() + b"\n\n"
        return web.Response(
            body=body,
            headers={**headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
        )

    def answer(self, seen: Seen, max_tokens: int) -> tuple[list[str], str]:
        if seen.truncated:
            return [], "stop"  # a 200 with nothing in it (0.3)
        return ANSWER[: min(len(ANSWER), max_tokens)], "stop"
