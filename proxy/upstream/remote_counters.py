"""Counting tokens with the tokenize endpoints of the other server kinds (SGLang, KoboldCpp,
TabbyAPI, text-generation-webui, TGI, llama-cpp-python): one class per server."""

from __future__ import annotations

from typing import Any

from proxy.upstream.client import UpstreamClient, upstream_failure
from proxy.upstream.tokens import chatml, text_only

# What a chat template adds after the last message to open the answer (TabbyAPI's token
# endpoint renders without it): `<|im_start|>assistant\n` and its kin are a few tokens.
GENERATION_PROMPT_TOKENS = 8


class RemoteCounter:
    """A server's own tokenizer behind one endpoint; without a template endpoint, messages are
    counted as the proxy's ChatML rendering (exact tokens, estimated framing)."""

    kind = "remote"
    exact = False  # whether messages are counted with the server's own chat template

    def __init__(self, upstream: UpstreamClient, model: str | None = None) -> None:
        self.upstream = upstream
        self.model = model
        self.calls = 0

    def _for_model(self, payload: dict[str, Any]) -> dict[str, Any]:
        """The payload, naming the model where one is set (servers that host several)."""
        return {**payload, "model": self.model} if self.model else payload

    async def _post(self, path: str, payload: dict[str, Any]) -> Any:
        self.calls += 1
        status, body = await self.upstream.post_json(path, payload)
        if status != 200 or body is None:
            raise upstream_failure(status, body, path)
        return body

    async def tokens(self, text: str, special: bool) -> int:
        raise NotImplementedError

    async def count_text(self, text: str) -> int:
        return await self.tokens(text, False)

    async def count_prompt(self, prompt: str) -> int:
        return await self.tokens(prompt, True)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        return await self.tokens(chatml(messages), True)


def _int_field(body: Any, key: str, what: str) -> int:
    value = body.get(key) if isinstance(body, dict) else None
    if not isinstance(value, int) or isinstance(value, bool):
        raise upstream_failure(200, body, what)
    return value


class SglangCounter(RemoteCounter):
    """SGLang's `POST /tokenize {prompt, add_special_tokens}` → `{tokens, count, max_model_len}`
    (srt/entrypoints/openai/serving_tokenize.py); it takes no messages."""

    kind = "sglang"

    async def tokens(self, text: str, special: bool) -> int:
        payload = self._for_model({"prompt": text, "add_special_tokens": special})
        return _int_field(await self._post("/tokenize", payload), "count", "/tokenize")


class KoboldCppCounter(RemoteCounter):
    """KoboldCpp's `POST /api/extra/tokencount {prompt, special}` → `{value, ids}` (koboldcpp.py).

    It answers 0 for a text of 50,000 tokens or more (a guard in its handler), so long texts
    are counted in pieces short enough never to reach that, whatever the script."""

    kind = "koboldcpp"
    PIECE_CHARS = 16_000  # ≤ 48,000 tokens even at three tokens per character

    async def tokens(self, text: str, special: bool) -> int:
        total = 0
        for number, piece in enumerate(pieces(text, self.PIECE_CHARS)):
            body = await self._post(
                "/api/extra/tokencount", {"prompt": piece, "special": special and number == 0}
            )
            count = _int_field(body, "value", "/api/extra/tokencount")
            if count < 0:
                raise upstream_failure(200, body, "/api/extra/tokencount")
            total += count
        return total


def pieces(text: str, size: int) -> list[str]:
    """`text` in pieces of at most `size` characters, each cut just before a space where there
    is one (a BPE token holds its leading space, so the pieces' counts add up)."""
    out: list[str] = []
    start = 0
    while start < len(text) or not out:
        end = start + size
        if end < len(text):
            space = text.rfind(" ", start + 1, end)
            end = space if space > start else end
        out.append(text[start:end])
        start = end
    return out


class TabbyApiCounter(RemoteCounter):
    """TabbyAPI's `POST /v1/token/encode` (endpoints/core/types/token.py): `text` a string, or
    chat messages rendered with the model's own template → `{tokens, length}`."""

    kind = "tabbyapi"
    exact = True

    async def _encode(self, text: str | list[dict[str, Any]], bos: bool) -> int:
        body = await self._post("/v1/token/encode", {"text": text, "add_bos_token": bos})
        return _int_field(body, "length", "/v1/token/encode")

    async def tokens(self, text: str, special: bool) -> int:
        return await self._encode(text, special)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        # The template is applied without the generation prompt: a few tokens more follow.
        return await self._encode(text_only(messages), True) + GENERATION_PROMPT_TOKENS


class TextgenCounter(RemoteCounter):
    """text-generation-webui: `POST /v1/internal/token-count {text}` → `{length}`, and the chat
    prompt its own template makes from messages, `POST /v1/internal/chat-prompt` → `{prompt}`
    (modules/api/script.py)."""

    kind = "textgen"
    exact = True

    async def tokens(self, text: str, special: bool) -> int:
        body = await self._post("/v1/internal/token-count", {"text": text})
        return _int_field(body, "length", "/v1/internal/token-count")

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        payload = self._for_model({"messages": text_only(messages)})
        body = await self._post("/v1/internal/chat-prompt", payload)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str):
            raise upstream_failure(200, body, "/v1/internal/chat-prompt")
        return await self.tokens(prompt, True)


class TgiCounter(RemoteCounter):
    """TGI: `POST /tokenize {inputs}` → a list of tokens, and `POST /chat_tokenize` (a chat
    request, templated) → `{tokenize_response: [...], templated_text}` (router/src/server.rs)."""

    kind = "tgi"
    exact = True

    async def tokens(self, text: str, special: bool) -> int:
        body = await self._post("/tokenize", {"inputs": text})
        if not isinstance(body, list):
            raise upstream_failure(200, body, "/tokenize")
        return len(body)

    async def count_messages(self, messages: list[dict[str, Any]]) -> int:
        payload = self._for_model({"messages": text_only(messages)})
        body = await self._post("/chat_tokenize", payload)
        tokens = body.get("tokenize_response") if isinstance(body, dict) else None
        if not isinstance(tokens, list):
            raise upstream_failure(200, body, "/chat_tokenize")
        return len(tokens)


class LlamaCppPythonCounter(RemoteCounter):
    """llama-cpp-python's `POST /extras/tokenize/count {input, model}` → `{count}`
    (llama_cpp/server/app.py; special tokens parsed)."""

    kind = "llama-cpp-python"

    async def tokens(self, text: str, special: bool) -> int:
        payload = self._for_model({"input": text})
        body = await self._post("/extras/tokenize/count", payload)
        return _int_field(body, "count", "/extras/tokenize/count")
