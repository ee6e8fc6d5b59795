"""A fake TGI (huggingface/text-generation-inference router): `/info`, its tokenizers and its
refusal of a prompt that leaves no room.

`GET /info` → `{"model_id", "max_input_tokens", "max_total_tokens", "router", "version", ...}`;
`POST /tokenize {inputs}` → `[{"id", "text", "start", "stop"}, ...]`;
`POST /chat_tokenize` (a chat request) → `{"tokenize_response": [...], "templated_text"}`;
a prompt with its `max_new_tokens` over `max_total_tokens`: 422 `{"error": "Input validation
error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: ...", "error_type":
"validation"}` (router/src/validation.rs).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import OpenAIServer, Refused, Seen, words
from tests.fakes.upstream import RECORDED


@dataclass
class FakeTgi(OpenAIServer):
    model_id: str = "meta-llama/Llama-3.1-8B-Instruct"
    label: str = "TGI"

    def card(self) -> dict[str, Any]:
        return {"id": self.model_id, "object": "model", "created": 0, "owned_by": self.model_id}

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/info", self.info)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/chat_tokenize", self.chat_tokenize)

    async def info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_id": self.model_id,
                "model_sha": None,
                "model_pipeline_tag": "text-generation",
                "max_concurrent_requests": 128,
                "max_best_of": 2,
                "max_stop_sequences": 4,
                "max_input_tokens": self.window - 1,
                "max_total_tokens": self.window,
                "validation_workers": 2,
                "max_client_batch_size": 4,
                "router": "text-generation-router",
                "version": "3.3.6",
                "sha": None,
                "docker_label": None,
            }
        )

    @staticmethod
    def simple(tokens: list[str]) -> list[dict[str, Any]]:
        return [{"id": n, "text": t, "start": 0, "stop": len(t)} for n, t in enumerate(tokens)]

    async def tokenize(self, request: web.Request) -> web.Response:
        return web.json_response(self.simple(words(str(request[RECORDED].json["inputs"]))))

    async def chat_tokenize(self, request: web.Request) -> web.Response:
        tokens = self.chat_words(request[RECORDED].json["messages"])
        return web.json_response(
            {"tokenize_response": self.simple(tokens), "templated_text": " ".join(tokens)}
        )

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        if len(tokens) + max_tokens > self.window:
            message = (
                "Input validation error: `inputs` tokens + `max_new_tokens` must be <= "
                f"{self.window}. Given: {len(tokens)} `inputs` tokens and {max_tokens} "
                "`max_new_tokens`"
            )
            raise Refused(
                web.json_response({"error": message, "error_type": "validation"}, status=422)
            )
        return Seen(path, tokens)
