"""A fake KoboldCpp (koboldcpp.py, LostRuins/koboldcpp): its extra endpoints and its truncation.

`GET /api/extra/version` → `{"result": "KoboldCpp", "version", ...}`;
`GET /api/extra/true_max_context_length` → `{"value": maxctx}` (the --contextsize);
`POST /api/extra/tokencount {prompt, special}` → `{"value", "ids"}`, 0 for 50,000 tokens or more;
OpenAI routes with usage 100/100/200 (placeholders in 1.76) and `max_tokens` defaults of 400
(chat) and 180 (completions). A prompt that leaves less than `max_length` of the context is cut
from the front without an error (gpttype_adapter.cpp "truncate to front of the prompt").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import OpenAIServer, Seen, message_text, words
from tests.fakes.upstream import RECORDED

COUNT_LIMIT = 50_000


@dataclass
class FakeKoboldCpp(OpenAIServer):
    model_id: str = "koboldcpp/mistral-7b"
    owned_by: str = "koboldcpp"
    label: str = "KoboldCpp"

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/api/extra/version", self.version)
        app.router.add_get("/api/extra/true_max_context_length", self.true_max)
        app.router.add_get("/api/v1/config/max_context_length", self.true_max)
        app.router.add_post("/api/extra/tokencount", self.tokencount)

    async def version(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "result": "KoboldCpp",
                "version": "1.76",
                "protected": False,
                "txt2img": False,
                "vision": False,
                "transcribe": False,
            }
        )

    async def true_max(self, request: web.Request) -> web.Response:
        return web.json_response({"value": self.window})

    async def tokencount(self, request: web.Request) -> web.Response:
        body = request[RECORDED].json
        ids = [len(word) for word in words(str(body.get("prompt", "")))]
        if len(ids) >= COUNT_LIMIT:
            ids = []  # "protects the server in case the count limit got corrupted"
        return web.json_response({"value": len(ids), "ids": ids})

    def chat_words(self, messages: list[dict[str, Any]]) -> list[str]:
        # Its chat completions adapter, Alpaca's tags by default.
        out: list[str] = []
        for message in messages:
            tag = "Response:" if message.get("role") == "assistant" else "Instruction:"
            out += ["###", tag, *words(message_text(message.get("content")))]
        return [*out, "###", "Response:"]

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        if not body.get("max_tokens"):
            max_tokens = 400 if path == "/v1/chat/completions" else 180
        if len(tokens) + max_tokens > self.window:
            keep = self.window - max_tokens
            return Seen(path, tokens[len(tokens) - keep :], truncated=True)
        return Seen(path, tokens)

    def usage(self, seen: Seen, produced: int) -> dict[str, int]:
        return {"prompt_tokens": 100, "completion_tokens": 100, "total_tokens": 200}
