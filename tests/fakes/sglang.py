"""A fake SGLang (sgl-project/sglang srt/entrypoints): `/get_model_info`, `max_model_len` in
its model cards, its `/tokenize`, and its refusal of a prompt over the window.

`GET /get_model_info` → `{"model_path", "tokenizer_path", "is_generation", ...}`;
`GET /v1/models` → cards with `owned_by: "sglang"` and `max_model_len`;
`POST /tokenize {prompt, add_special_tokens}` → `{"tokens", "count", "max_model_len"}`;
a prompt over the window: 400 `{"object": "error", "message": "The input (N tokens) is longer
than the model's context length (M tokens).", "type": "BadRequestError", "param": null,
"code": 400}` (protocol.py `ErrorResponse`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import OpenAIServer, Refused, Seen, words
from tests.fakes.upstream import RECORDED


@dataclass
class FakeSglang(OpenAIServer):
    model_id: str = "Qwen/Qwen2.5-7B-Instruct"
    owned_by: str = "sglang"
    label: str = "SGLang"

    def card(self) -> dict[str, Any]:
        return {**super().card(), "root": self.model_id, "max_model_len": self.window}

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/get_model_info", self.model_info)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/v1/tokenize", self.tokenize)

    async def model_info(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "model_path": self.model_id,
                "tokenizer_path": self.model_id,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
            }
        )

    async def tokenize(self, request: web.Request) -> web.Response:
        tokens = words(str(request[RECORDED].json.get("prompt", "")))
        return web.json_response(
            {"tokens": list(range(len(tokens))), "count": len(tokens), "max_model_len": self.window}
        )

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        if len(tokens) >= self.window:
            message = (
                f"The input ({len(tokens)} tokens) is longer than the model's context length "
                f"({self.window} tokens)."
            )
            error = {
                "object": "error",
                "message": message,
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
            raise Refused(web.json_response(error, status=400))
        return Seen(path, tokens)
