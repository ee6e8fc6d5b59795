"""What every fake server of another kind shares: recording, a tokenizer of its own (one token
per word), the OpenAI-compatible chat and completion routes, and a hook for what the kind does
with a prompt longer than its window (refuse with its own error, or cut it and answer 200)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.upstream import RECORDED, Recorded, record

ANSWER = ["The", "answer", "."]


class Refused(Exception):
    """The kind refuses the prompt: this response goes back."""

    def __init__(self, response: web.Response) -> None:
        super().__init__("refused")
        self.response = response


def words(text: str) -> list[str]:
    return text.split()


def message_text(content: Any) -> str:
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


@dataclass
class Seen:
    """A prompt as the model saw it."""

    path: str
    words: list[str]
    truncated: bool = False


@dataclass
class OpenAIServer:
    model_id: str = "the-model"
    owned_by: str = "owner"
    window: int = 4096
    label: str = "fake"
    default_max_tokens: int = 16  # what the server generates when max_tokens is absent
    requests: list[Recorded] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self.recorder])
        self.routes(app)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        return app

    def routes(self, app: web.Application) -> None:
        """The kind's own endpoints."""

    @web.middleware
    async def recorder(self, request: web.Request, handler: Any) -> web.StreamResponse:
        await record(request, self.requests)
        response: web.StreamResponse = await handler(request)
        return response

    def to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    async def not_found(self, request: web.Request) -> web.Response:
        return web.json_response({"detail": "Not Found"}, status=404)

    def card(self) -> dict[str, Any]:
        return {"id": self.model_id, "object": "model", "created": 0, "owned_by": self.owned_by}

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self.card()]})

    # -- the model ------------------------------------------------------------------------
    def chat_words(self, messages: list[dict[str, Any]]) -> list[str]:
        """The prompt the server's chat template makes, as tokens: two frame tokens a message."""
        out: list[str] = []
        for message in messages:
            out += [f"<{message.get('role')}>", *words(message_text(message.get("content"))), "<e>"]
        return [*out, "<assistant>"]

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        """What the kind does with the prompt; overridden by the kinds that refuse or cut."""
        return Seen(path, tokens)

    def _max_tokens(self, body: dict[str, Any]) -> int:
        value = body.get("max_tokens") or body.get("max_completion_tokens")
        return value if isinstance(value, int) and value > 0 else self.default_max_tokens

    def usage(self, seen: Seen, produced: int) -> dict[str, int]:
        return {
            "prompt_tokens": len(seen.words),
            "completion_tokens": produced,
            "total_tokens": len(seen.words) + produced,
        }

    def answer(self, seen: Seen, max_tokens: int) -> tuple[list[str], str]:
        room = self.window - len(seen.words)
        produced = min(len(ANSWER), max_tokens, max(room, 0))
        return ANSWER[:produced], "stop" if produced == len(ANSWER) else "length"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        body = request[RECORDED].json
        max_tokens = self._max_tokens(body)
        try:
            seen = self.fit(
                request.path, self.chat_words(body.get("messages") or []), max_tokens, body
            )
        except Refused as refusal:
            return refusal.response
        self.seen.append(seen)
        pieces, reason = self.answer(seen, max_tokens)
        common = {"id": "chatcmpl-1", "created": int(time.time()), "model": self.model_id}
        if not body.get("stream"):
            message = {"role": "assistant", "content": " ".join(pieces)}
            choice = {"index": 0, "message": message, "finish_reason": reason}
            return web.json_response(
                {
                    **common,
                    "object": "chat.completion",
                    "choices": [choice],
                    "usage": self.usage(seen, len(pieces)),
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        deltas = [{"role": "assistant", "content": ""}] + [
            {"content": (" " if i else "") + piece} for i, piece in enumerate(pieces)
        ]
        for delta in deltas:
            chunk = {"index": 0, "delta": delta, "finish_reason": None}
            event = {**common, "object": "chat.completion.chunk", "choices": [chunk]}
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        end = {"index": 0, "delta": {}, "finish_reason": reason}
        event = {**common, "object": "chat.completion.chunk", "choices": [end]}
        await response.write(b"data: " + json.dumps(event).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response

    async def completions(self, request: web.Request) -> web.StreamResponse:
        body = request[RECORDED].json
        max_tokens = self._max_tokens(body)
        try:
            seen = self.fit(request.path, words(str(body.get("prompt") or "")), max_tokens, body)
        except Refused as refusal:
            return refusal.response
        self.seen.append(seen)
        pieces, reason = self.answer(seen, max_tokens)
        common = {"id": "cmpl-1", "created": int(time.time()), "model": self.model_id}
        choice = {"index": 0, "text": " ".join(pieces), "finish_reason": reason, "logprobs": None}
        if not body.get("stream"):
            return web.json_response(
                {
                    **common,
                    "object": "text_completion",
                    "choices": [choice],
                    "usage": self.usage(seen, len(pieces)),
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        event = {**common, "object": "text_completion", "choices": [choice]}
        await response.write(b"data: " + json.dumps(event).encode() + b"\n\ndata: [DONE]\n\n")
        await response.write_eof()
        return response
