"""A fake text-generation-webui (oobabooga, modules/api): its internal endpoints and its quiet
truncation.

`GET /v1/internal/model/info` → `{"model_name", "lora_names", "loader"}` (no window);
`POST /v1/internal/token-count {text}` → `{"length"}`;
`POST /v1/internal/chat-prompt` (a chat request) → `{"prompt"}`, the chat as its template
renders it. A request's `truncation_length` (0: its setting, `truncation_length`, which the UI
sets and which was 2,048 for years whatever the model could hold) bounds the prompt: the
chat's oldest messages are dropped, then `encode(truncation_length=...)` keeps the last
`truncation_length - max_new_tokens` tokens (modules/text_generation.py), with a 200 and
nothing said. `max_tokens` defaults to 512.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import OpenAIServer, Seen, message_text, words
from tests.fakes.upstream import RECORDED


def render(messages: list[dict[str, Any]]) -> str:
    """Its instruction template (ChatML here), with the generation prompt."""
    turns = [
        f"<|im_start|>{m.get('role')}\n{message_text(m.get('content'))}<|im_end|>\n"
        for m in messages
    ]
    return "".join(turns) + "<|im_start|>assistant\n"


@dataclass
class FakeTextgen(OpenAIServer):
    model_id: str = "Qwen2.5-7B-Instruct-Q4_K_M.gguf"
    owned_by: str = "user"
    label: str = "text-generation-webui"
    default_max_tokens: int = 512
    truncation_setting: int = 2048  # the UI's truncation_length; `window` is the model's n_ctx

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/v1/internal/model/info", self.model_info)
        app.router.add_post("/v1/internal/token-count", self.token_count)
        app.router.add_post("/v1/internal/chat-prompt", self.chat_prompt)

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"model_name": self.model_id, "lora_names": [], "loader": "llama.cpp"}
        )

    async def token_count(self, request: web.Request) -> web.Response:
        return web.json_response({"length": len(words(str(request[RECORDED].json["text"])))})

    async def chat_prompt(self, request: web.Request) -> web.Response:
        return web.json_response({"prompt": render(request[RECORDED].json["messages"])})

    def chat_words(self, messages: list[dict[str, Any]]) -> list[str]:
        return words(render(messages))

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        limit = (body.get("truncation_length") or self.truncation_setting) - max_tokens
        if path == "/v1/chat/completions":
            messages = list(body.get("messages") or [])
            dropped = False
            while len(words(render(messages))) > limit and len(messages) > 1:
                del messages[1 if messages[0].get("role") == "system" else 0]
                dropped = True
            tokens = words(render(messages))
            if dropped:
                return Seen(path, tokens[-limit:], truncated=True)
        if len(tokens) > limit:
            return Seen(path, tokens[-limit:], truncated=True)
        return Seen(path, tokens)
