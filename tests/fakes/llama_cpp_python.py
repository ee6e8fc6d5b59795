"""A fake llama-cpp-python server (abetlen/llama-cpp-python llama_cpp/server): its extras and
its refusal of a prompt over the window.

`POST /extras/tokenize/count {input, model}` → `{"count"}`; `/v1/models` cards with
`owned_by: "me"`; no endpoint states the window. A prompt over it: 400 `{"error": {"message":
"This model's maximum context length is M tokens. However, you requested N tokens (P in the
messages, C in the completion). ...", "type": "invalid_request_error", "param": "messages",
"code": "context_length_exceeded"}}` (server/errors.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.fakes.openai_like import OpenAIServer, Refused, Seen, words
from tests.fakes.upstream import RECORDED


@dataclass
class FakeLlamaCppPython(OpenAIServer):
    model_id: str = "models/qwen2.5-0.5b-instruct-q4_k_m.gguf"
    owned_by: str = "me"
    label: str = "llama-cpp-python"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/extras/tokenize/count", self.count)

    async def count(self, request: web.Request) -> web.Response:
        return web.json_response({"count": len(words(str(request[RECORDED].json["input"])))})

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        if len(tokens) + max_tokens > self.window:
            message = (
                f"This model's maximum context length is {self.window} tokens. However, you "
                f"requested {len(tokens) + max_tokens} tokens ({len(tokens)} in the messages, "
                f"{max_tokens} in the completion). Please reduce the length of the messages "
                "or completion."
            )
            error = {
                "message": message,
                "type": "invalid_request_error",
                "param": "messages",
                "code": "context_length_exceeded",
            }
            raise Refused(web.json_response({"error": error}, status=400))
        return Seen(path, tokens)
