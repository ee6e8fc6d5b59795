"""A fake TabbyAPI (theroyallab/tabbyAPI endpoints/core): its service info, its llama.cpp-like
`/props`, its model card and token endpoint, and its refusal of a prompt over `max_seq_len`.

`GET /.well-known/serviceinfo` → `{"software": {"name": "TabbyAPI", ...}, ...}`;
`GET /props` → `{"total_slots", "chat_template", "default_generation_settings": {"n_ctx"}}`;
`GET /v1/model` → a ModelCard with `parameters.max_seq_len`;
`POST /v1/token/encode {text: str | messages, add_bos_token}` → `{"tokens", "length"}`;
a prompt over the window: 400 `{"error": {"message": "Prompt length N exceeds the available
context size of M tokens", "type": "invalid_request_error", "code": "context_length_exceeded"}}`
(common/errors.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import OpenAIServer, Refused, Seen, words
from tests.fakes.upstream import RECORDED


@dataclass
class FakeTabbyApi(OpenAIServer):
    model_id: str = "Llama-3.1-8B-Instruct-exl2"
    owned_by: str = "tabbyAPI"
    label: str = "TabbyAPI"

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/.well-known/serviceinfo", self.service_info)
        app.router.add_get("/props", self.props)
        app.router.add_get("/v1/model", self.model)
        app.router.add_post("/v1/token/encode", self.encode)

    async def service_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "version": 0.1,
                "software": {
                    "name": "TabbyAPI",
                    "repository": "https://github.com/theroyallab/tabbyAPI",
                    "homepage": "https://github.com/theroyallab/tabbyAPI",
                },
                "api": {"openai": {"name": "OpenAI API", "relative_url": "/v1", "version": 1}},
            }
        )

    async def props(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "total_slots": 1,
                "chat_template": "{{ messages }}",
                "default_generation_settings": {"n_ctx": self.window},
            }
        )

    async def model(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "id": self.model_id,
                "object": "model",
                "created": 0,
                "owned_by": "tabbyAPI",
                "parameters": {"max_seq_len": self.window, "cache_size": self.window},
            }
        )

    async def encode(self, request: web.Request) -> web.Response:
        body = request[RECORDED].json
        text = body.get("text")
        # Messages are rendered without the generation prompt.
        tokens = self.chat_words(text)[:-1] if isinstance(text, list) else words(str(text))
        return web.json_response({"tokens": list(range(len(tokens))), "length": len(tokens)})

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        if len(tokens) > self.window:
            message = (
                f"Prompt length {len(tokens)} exceeds the available context size of "
                f"{self.window} tokens"
            )
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "context_length_exceeded",
            }
            raise Refused(web.json_response({"error": error}, status=400))
        return Seen(path, tokens)
