"""A model that calls tools, answering in llama.cpp's or vLLM's exact shapes (streamed and not).

Each turn's reply is chosen by a script from the request the model gets (its messages and
tools), so a test says what the model does in the conversation the proxy builds.

llama.cpp (tools/server `to_json_oaicompat_chat_stream`, common/chat.cpp
`common_chat_msg_diff_to_json_oaicompat`): a first chunk `{"role": "assistant", "content":
null}`; a call's first delta `{index, id, type: "function", function: {name, arguments: ""}}`,
then `{index, function: {arguments: "<piece>"}}`; a last chunk with an empty delta and
`finish_reason: "tool_calls"`; with `include_usage`, a chunk with `choices: []` and `usage`;
ids are 32 random letters and digits. Not streamed, the message's `content` is `""` beside its
`tool_calls`. vLLM (entrypoints/openai/serving_chat.py, tool_parsers/hermes_tool_parser.py): a
first chunk `{"role": "assistant", "content": ""}` with `logprobs: null`; a call's first delta
`{id: "chatcmpl-tool-<hex>", type: "function", index, function: {name}}`, the arguments after
it, the last piece of them in the chunk that carries `finish_reason: "tool_calls"`; not
streamed, `content: null` beside the calls.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import string
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass(frozen=True)
class Say:
    """A turn that answers: text (and, for a model that reasons aloud, its thinking)."""

    text: str
    reasoning: str = ""
    finish: str = "stop"  # "length": cut off at the token limit


@dataclass(frozen=True)
class Call:
    """One tool call as the model writes it: a name and its arguments' text."""

    name: str
    arguments: str


def search(*queries: str) -> Call:
    return Call("file_search", json.dumps({"queries": list(queries)}))


@dataclass(frozen=True)
class Calls:
    """A turn that calls tools (after some text, if given)."""

    calls: tuple[Call, ...]
    text: str = ""
    finish: str = "tool_calls"  # "length": cut off at the token limit
    reasoning: str = ""

    @classmethod
    def of(
        cls, *calls: Call, text: str = "", finish: str = "tool_calls", reasoning: str = ""
    ) -> Calls:
        return cls(tuple(calls), text, finish, reasoning)


Reply = Say | Calls
Script = Callable[[dict[str, Any]], Reply]


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool messages of the conversation the model got, in order."""
    return [
        str(message.get("content"))
        for message in body.get("messages") or []
        if isinstance(message, dict) and message.get("role") == "tool"
    ]


CREATED = 1_767_225_600
"""2026-01-01: the first turn says it was created a second after, the second two seconds, …"""


def _pieces(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


@dataclass
class ToolModel:
    """The fake's chat route for a model that calls tools."""

    script: Script
    dialect: str = "llamacpp"  # llamacpp | vllm
    die_in_turn: int | None = None  # that turn's stream breaks off after its first chunks
    hang_in_turn: int | None = None  # that turn's stream stalls until the proxy hangs up
    fail_in_turn: int | None = None  # that turn is answered with llama.cpp's error (500)
    models: tuple[str, ...] = ()  # the model each turn says answered (else the request's)
    bare: bool = False  # chunks and answers without id, created and model (a server may omit them)
    call_ids: bool = True  # False: tool calls without an id
    whole: bool = False  # one JSON answer even when asked to stream (a server that ignores it)
    raw: Callable[[int], web.Response | None] | None = None  # turn n answered as given, if not None
    turns: int = 0
    answered: list[dict[str, Any]] = field(default_factory=list)  # names, usage, call ids
    peers: list[Any] = field(default_factory=list)  # each turn's client address (its connection)
    cancelled: threading.Event = field(default_factory=threading.Event)

    def _llama_id(self) -> str:
        return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(32))

    def _call_id(self) -> str:
        if not self.call_ids:
            return ""
        made = (
            f"chatcmpl-tool-{secrets.token_hex(16)}" if self.dialect == "vllm" else self._llama_id()
        )
        self.answered[-1].setdefault("call_ids", []).append(made)
        return made

    def _meta(self, body: dict[str, Any], completion_id: str) -> dict[str, Any]:
        """The turn's id, created and model, as answered (and kept in `answered`): each turn
        its own time, a fixed one, so that which turn named the answer shows."""
        turn = len(self.answered) + 1
        models = self.models
        meta = {
            "id": completion_id,
            "created": CREATED + turn,
            "model": models[turn - 1] if turn <= len(models) else body.get("model", "fake-model"),
        }
        self.answered.append(meta)
        return {} if self.bare else meta

    def _base(self, body: dict[str, Any], completion_id: str) -> dict[str, Any]:
        meta = self._meta(body, completion_id)
        base: dict[str, Any] = {**meta, "object": "chat.completion.chunk"}
        if self.dialect == "llamacpp":
            base["system_fingerprint"] = "b0-unknown"
        return base

    def _choice(self, delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
        if self.dialect == "vllm":
            choice["logprobs"] = None
        return choice

    def _usage(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        prompt = sum(len(str(m.get("content") or "").split()) for m in body.get("messages") or [])
        written = len(reply.text.split()) + (
            sum(len(c.arguments) // 4 + 1 for c in reply.calls) if isinstance(reply, Calls) else 0
        )
        return {
            "prompt_tokens": prompt,
            "completion_tokens": written,
            "total_tokens": prompt + written,
        }

    def chunks(self, body: dict[str, Any], reply: Reply) -> list[dict[str, Any]]:
        completion_id = (
            f"chatcmpl-{self._llama_id()}"
            if self.dialect == "llamacpp"
            else f"chatcmpl-{secrets.token_hex(16)}"
        )
        base = self._base(body, completion_id)
        first = {"role": "assistant", "content": None if self.dialect == "llamacpp" else ""}
        out = [{**base, "choices": [self._choice(first, None)]}]
        for piece in _pieces(reply.reasoning) if reply.reasoning else []:
            out.append({**base, "choices": [self._choice({"reasoning_content": piece}, None)]})
        for piece in _pieces(reply.text) if reply.text else []:
            out.append({**base, "choices": [self._choice({"content": piece}, None)]})
        finish = reply.finish
        last_delta: dict[str, Any] = {}
        if isinstance(reply, Calls):
            for index, call in enumerate(reply.calls):
                pieces = _pieces(call.arguments, 5)
                if self.dialect == "llamacpp":
                    opening = {"name": call.name, "arguments": ""}
                else:
                    opening = {"name": call.name}
                head = {"index": index, "id": self._call_id(), "type": "function"}
                if self.dialect == "vllm":  # vLLM's field order: id, type, index
                    head = {"id": head["id"], "type": "function", "index": index}
                if not head["id"]:
                    del head["id"]
                out.append(
                    {
                        **base,
                        "choices": [
                            self._choice({"tool_calls": [{**head, "function": opening}]}, None)
                        ],
                    }
                )
                last_call = index == len(reply.calls) - 1
                for number, piece in enumerate(pieces):
                    delta = {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}
                    if self.dialect == "vllm" and last_call and number == len(pieces) - 1:
                        last_delta = delta  # vLLM: the last piece rides with the finish
                        continue
                    out.append({**base, "choices": [self._choice(delta, None)]})
        out.append({**base, "choices": [self._choice(last_delta, finish)]})
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = self.answered[-1]["usage"] = self._usage(body, reply)
            out.append({**base, "choices": [], "usage": usage})
        return out

    def completion(self, body: dict[str, Any], reply: Reply) -> dict[str, Any]:
        meta = self._meta(body, f"chatcmpl-{secrets.token_hex(8)}")
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        finish = reply.finish
        if isinstance(reply, Say) and reply.reasoning:
            message["reasoning_content"] = reply.reasoning
        if isinstance(reply, Calls):
            if self.dialect == "vllm":
                message = {"role": "assistant", "reasoning_content": None, "content": None}
            message["tool_calls"] = [
                {
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                    **({"id": self._call_id()} if self.call_ids else {}),
                }
                for call in reply.calls
            ]
        usage = self.answered[-1]["usage"] = self._usage(body, reply)
        return {
            **meta,
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }

    def refused(self, body: dict[str, Any]) -> web.Response | None:
        """llama.cpp parses the arguments of the calls in the conversation for a template that
        takes them as an object, and fails the request on one that is not JSON (seen with
        xllamacpp 2026.10: "Failed to parse tool call arguments as JSON: ...")."""
        if self.dialect != "llamacpp":
            return None
        for message in body.get("messages") or []:
            for call in (message.get("tool_calls") or []) if isinstance(message, dict) else []:
                arguments = (call.get("function") or {}).get("arguments", "")
                try:
                    json.loads(arguments)
                except ValueError as error:
                    message_text = f"Failed to parse tool call arguments as JSON: {error}"
                    payload = {"code": 500, "message": message_text, "type": "server_error"}
                    return web.json_response({"error": payload}, status=500)
        return None

    async def answer(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        self.turns += 1
        turn = self.turns
        transport = request.transport
        self.peers.append(transport.get_extra_info("peername") if transport else None)
        refusal = self.refused(body)
        if refusal is not None:
            return refusal
        given = self.raw(turn) if self.raw is not None else None
        if given is not None:
            return given
        if turn == self.fail_in_turn:
            error = {"code": 500, "message": "slot unavailable", "type": "server_error"}
            return web.json_response({"error": error}, status=500)
        reply = self.script(body)
        if not body.get("stream") or self.whole:
            return web.json_response(self.completion(body, reply))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            for position, chunk in enumerate(self.chunks(body, reply)):
                if turn == self.die_in_turn and position == 2:
                    await asyncio.sleep(0.05)  # what went out reaches the proxy first
                    assert request.transport is not None
                    request.transport.close()
                    return response
                if turn == self.hang_in_turn and position == 2:
                    await asyncio.sleep(3600)
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            await response.write(b"data: [DONE]\n\n")
        except (asyncio.CancelledError, ConnectionResetError):
            self.cancelled.set()
            raise
        await response.write_eof()
        return response
