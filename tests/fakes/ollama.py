"""A fake Ollama answering with Ollama's shapes, and cutting prompts exactly as Ollama does.

Shapes from ollama/ollama: api/types.go (`ChatRequest`, `ChatResponse`, `ShowResponse`,
`ProcessModelResponse`), server/routes.go (`/api/version`, `PsHandler`, `ShowHandler`,
`GenerateHandler`: an empty prompt loads the model and answers `done_reason: "load"`,
`streamResponse`: NDJSON, errors as `{"error": "..."}`), openai/openai.go and
middleware/openai.go (the OpenAI-compatible layer: it sets no `num_ctx` and takes no `options`
nor `keep_alive`, so the model runs with the window it is loaded with; openai/responses.go:
`/v1/responses`, stateless, from 0.13.3, the same).

`version` says which Ollama it is (0.13.0 unless told); what differs between versions:
- the default window (server/routes.go, envconfig): 2,048 before 0.6.7, 4,096 from then on,
  and from 0.15.5 by the GPUs' memory ("vram-based default context": 4,096 under 23 GiB,
  32,768 from 23 GiB, 262,144 from 47 GiB: `gpu_memory_gib`); `default_num_ctx` is the
  server's OLLAMA_CONTEXT_LENGTH when it was started with one;
- what a prompt over the window meets (below): the Go runner (runner/ollamarunner/runner.go)
  before 0.30.0, llama-server from 0.30.0 (#16031).

Windows: a model is loaded with the request's `options.num_ctx`, else its Modelfile's
`num_ctx`, else the server's default, never past its trained window. A request whose runner
options (api/types.go `Runner`: num_ctx, num_batch, num_gpu, main_gpu, use_mmap, num_thread)
differ from those the model runs with reloads it (server/sched.go needsReload: `reloads`);
`keep_alive: 0` unloads it once the request is answered (`unloads`).

A prompt longer than the window:
- server/prompt.go `chatPrompt`: with `truncate` (true by default; the field exists since
  0.12.4) the oldest messages, save system messages and the last message, are dropped until
  the rendered prompt fits;
- then the prompt's tokens are cut, keeping the first `num_keep` (4) and the last ones, with a
  200 and "truncating input prompt" in the server's log only: to exactly num_ctx by the Go
  runner; to num_ctx - 1 by llama-server, and from 0.30.11 (`contextShiftPromptLimit`, #16856)
  to num_ctx - (num_ctx - num_keep) / 2;
- the answer then goes on: when it reaches the window's end the context is shifted (half the
  tokens after num_keep discarded) and generation continues (runner.go ShiftCacheSlot;
  llama-server --context-shift), so it is whole and ends with "stop" unless the request sets
  `shift: false` (then "length" where the window ends);
- with `truncate: false` the server refuses instead: 400 "the input length exceeds the context
  length" (Go runner), or, from 0.30.0, llama-server's own refusal passed through as the error
  text (llm/llama_server.go `statusErrorMessage`: `{"error": "{\"error\":{\"code\":400,
  \"message\":\"request (N tokens) exceeds the available context size (M tokens), try
  increasing it\",\"type\":\"exceed_context_size_error\",...}}"}`).

Tokens: one per whitespace-separated word, four per message for its frame, three for the
generation prompt — a tokenizer the proxy cannot see, as with the real server.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.upstream import RECORDED, Recorded, record

NUM_KEEP = 4
ANSWER_WORDS = ["The", "answer", "from", "the", "fake", "Ollama", "."]
# api/types.go `Runner`: what a model is loaded with (num_ctx apart, compared on its own).
RUNNER_OPTIONS = ("num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread")
DEFAULT_BY_VRAM = ((47, 262144), (23, 32768), (0, 4096))  # GiB → window, from 0.15.5


def version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("-")[0].split(".")[:3])


# The start of llama3.2's Go template as `ollama show` gives it: `.Tools` makes it take tools.
LLAMA32_TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\n{{ if .System }}{{ .System }}\n{{- end }}\n"
    "{{- if .Tools }}When you receive a tool call response, use the output to format an answer "
    "to the orginal user question.\n\nYou are a helpful assistant with tool calling "
    "capabilities.\n{{- end }}<|eot_id|>\n{{- range $i, $_ := .Messages }} ..."
)
NO_TEMPLATE = "{{ .Prompt }}"  # template.DefaultTemplate: a model created without one


@dataclass
class OllamaModel:
    name: str = "llama3.2:latest"
    architecture: str = "llama"
    trained: int = 131072
    modelfile_num_ctx: int | None = None
    vision: bool = False  # a model with a projector (llava, gemma3, qwen2.5vl)
    # A base model (a GGUF without a chat template, no TEMPLATE in its Modelfile): /api/show's
    # template is {{ .Prompt }} and its capabilities say completion only.
    base: bool = False
    renderer: str | None = None  # a built-in chat renderer (qwen3-coder, ...)

    def capabilities(self) -> list[str]:
        """server/images.go Capabilities: tools when the template uses .Tools (or the
        renderer's parser takes them), vision with a projector."""
        tools = [] if self.base else ["tools"]
        return ["completion", *tools, *(["vision"] if self.vision else [])]


@dataclass
class Seen:
    """One prompt as the model saw it, after whatever the server cut."""

    path: str
    words: list[str]
    num_ctx: int
    truncated: bool


def prompt_words(messages: list[dict[str, Any]]) -> list[str]:
    """The model's rendering, as words (each a token), frames included."""
    words: list[str] = []
    for message in messages:
        words += [f"<{message.get('role')}>", "<m>", "<m>", "<m>"]  # four frame tokens
        words += str(message.get("content") or "").split()
        words += ["<image>"] * (768 * len(message.get("images") or []))
        for call in message.get("tool_calls") or []:
            words += json.dumps(call).split()
    return [*words, "<assistant>", "<g>", "<g>"]


def openai_messages(messages: list[Any]) -> list[dict[str, Any]]:
    """Ollama's OpenAI layer: each content part a message of its own."""
    out: list[dict[str, Any]] = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            for part in content:
                if part.get("type") == "text":
                    out.append({"role": message["role"], "content": part["text"]})
                else:
                    out.append({"role": message["role"], "content": "", "images": ["img"]})
        else:
            out.append({**message, "content": content or ""})
    return out


@dataclass
class FakeOllama:
    version: str = "0.13.0"
    models: dict[str, OllamaModel] = field(
        default_factory=lambda: {"llama3.2:latest": OllamaModel()}
    )
    # OLLAMA_CONTEXT_LENGTH, when `ollama serve` was started with one; else the version's
    # default (by the GPUs' memory from 0.15.5).
    default_num_ctx: int | None = None
    gpu_memory_gib: float = 0.0
    # How far a prompt over the window is cut (llama-server from 0.30.11: to about half the
    # window; before, to the whole window); None: as the version does.
    shift_truncation: bool | None = None
    requests: list[Recorded] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    loaded: dict[str, tuple[int, bool]] = field(default_factory=dict)  # name → (num_ctx, auto)
    runner_options: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → as loaded
    loads: int = 0  # a model loaded that was not (first load, or after an unload)
    reloads: int = 0  # a loaded model loaded again with other settings
    unloads: int = 0
    translations: dict[str, str] = field(default_factory=dict)  # question → its translation
    rewrites: dict[str, str] = field(default_factory=dict)  # follow-up → standalone question
    tool_call: dict[str, Any] | None = None  # answer with this call when tools are offered
    thinking: str | None = None  # a reasoning model: this thinking comes first
    fail_midstream: str | None = None  # a stream breaks off with this error after 2 lines
    chunk_delay: float = 0.0

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024, middlewares=[self.recorder])
        app.router.add_get("/", self.root)
        app.router.add_get("/api/version", self.api_version)
        app.router.add_get("/api/tags", self.tags)
        app.router.add_post("/api/show", self.show)
        app.router.add_get("/api/ps", self.ps)
        app.router.add_post("/api/chat", self.chat)
        app.router.add_post("/api/generate", self.generate)
        app.router.add_post("/v1/chat/completions", self.openai_chat)
        app.router.add_post("/v1/responses", self.openai_responses)
        app.router.add_get("/v1/models", self.openai_models)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        return app

    @web.middleware
    async def recorder(self, request: web.Request, handler: Any) -> web.StreamResponse:
        await record(request, self.requests)
        response: web.StreamResponse = await handler(request)
        return response

    def to(self, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.path == path]

    # -- what the server says of its models ---------------------------------------------
    async def root(self, request: web.Request) -> web.Response:
        return web.Response(text="Ollama is running")

    async def api_version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": self.version})

    async def not_found(self, request: web.Request) -> web.Response:
        return web.Response(status=404, text="404 page not found")

    def model(self, name: str) -> OllamaModel | None:
        full = name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"
        return self.models.get(full)

    def details(self, model: OllamaModel) -> dict[str, Any]:
        return {
            "parent_model": "",
            "format": "gguf",
            "family": model.architecture,
            "families": [model.architecture],
            "parameter_size": "3.2B",
            "quantization_level": "Q4_K_M",
        }

    async def tags(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "models": [
                    {
                        "name": m.name,
                        "model": m.name,
                        "modified_at": "2026-08-01T10:00:00Z",
                        "size": 2019393189,
                        "digest": "a80c4f17acd5",
                        "details": self.details(m),
                    }
                    for m in self.models.values()
                ]
            }
        )

    async def show(self, request: web.Request) -> web.Response:
        body = request[RECORDED].json
        name = body.get("model") or body.get("name") or ""
        model = self.model(name)
        if model is None:
            return web.json_response({"error": f"model '{name}' not found"}, status=404)
        parameters = ['stop                           "<|eot_id|>"']
        if model.modelfile_num_ctx:
            parameters.insert(0, f"num_ctx                        {model.modelfile_num_ctx}")
        shown: dict[str, Any] = {
            "modelfile": f'# Modelfile generated by "ollama show"\nFROM {model.name}\n',
            "parameters": "\n".join(parameters),
            "template": NO_TEMPLATE if model.base else LLAMA32_TEMPLATE,
            "details": self.details(model),
            "model_info": {
                "general.architecture": model.architecture,
                "general.parameter_count": 3212749888,
                f"{model.architecture}.context_length": model.trained,
                f"{model.architecture}.embedding_length": 3072,
                "tokenizer.ggml.model": "gpt2",
            },
            "modified_at": "2026-08-01T10:00:00Z",
        }
        if model.renderer:
            shown["renderer"] = shown["parser"] = model.renderer
        if self.release() >= (0, 6, 4):  # api: return model capabilities from the show endpoint
            shown["capabilities"] = model.capabilities()
        return web.json_response(shown)

    def release(self) -> tuple[int, ...]:
        return tuple(int(part) for part in self.version.split("-")[0].split("."))

    async def ps(self, request: web.Request) -> web.Response:
        running = []
        for name, (num_ctx, _) in self.loaded.items():
            model = self.models[name]
            running.append(
                {
                    "name": name,
                    "model": name,
                    "size": 3825819519,
                    "digest": "a80c4f17acd5",
                    "details": self.details(model),
                    "expires_at": "2026-08-01T10:05:00Z",
                    "size_vram": 3825819519,
                    "context_length": num_ctx,
                }
            )
        return web.json_response({"models": running})

    async def openai_models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"id": m.name, "object": "model", "created": 1754042400, "owned_by": "library"}
                    for m in self.models.values()
                ],
            }
        )

    # -- running a model ------------------------------------------------------------------
    def at_least(self, version: tuple[int, ...]) -> bool:
        return version_tuple(self.version) >= version

    def server_default(self) -> int:
        """The window a model runs with when neither the request nor its Modelfile sets one."""
        if self.default_num_ctx is not None:
            return self.default_num_ctx
        if not self.at_least((0, 6, 7)):
            return 2048
        if not self.at_least((0, 15, 5)):
            return 4096
        return next(size for gib, size in DEFAULT_BY_VRAM if self.gpu_memory_gib >= gib)

    def load(
        self, model: OllamaModel, asked: int | None, runner: dict[str, Any] | None = None
    ) -> int:
        """The window the model runs with for this request (a different window, or other
        runner options, reload it)."""
        runner = {name: (runner or {}).get(name) for name in RUNNER_OPTIONS}
        if isinstance(runner["num_gpu"], int) and runner["num_gpu"] < 0:
            runner["num_gpu"] = None  # num_gpu -1 never reloads (needsReload)
        auto = asked is None and model.modelfile_num_ctx is None
        num_ctx = asked or model.modelfile_num_ctx or self.server_default()
        num_ctx = min(num_ctx, model.trained)
        current = self.loaded.get(model.name)
        if current is None:
            self.loads += 1
        else:
            running, running_auto = current
            # A model loaded by a test's hand was loaded with the defaults.
            same_runner = (
                self.runner_options.get(model.name, dict.fromkeys(RUNNER_OPTIONS)) == runner
            )
            if same_runner and ((running_auto and auto) or running == num_ctx):
                return running  # kept as it runs
            self.reloads += 1
        self.loaded[model.name] = (num_ctx, auto)
        self.runner_options[model.name] = runner
        return num_ctx

    def after(self, model: OllamaModel, keep_alive: Any) -> None:
        """`keep_alive: 0` (or "0s"): the model is unloaded once the request is answered."""
        if keep_alive in (0, "0", "0s", "0m") and self.loaded.pop(model.name, None):
            self.runner_options.pop(model.name, None)
            self.unloads += 1

    def refusal(self, tokens: int, num_ctx: int) -> str:
        if not self.at_least((0, 30, 0)):
            return "the input length exceeds the context length"
        # llama-server's own answer, passed through as Ollama's error text.
        error = {
            "code": 400,
            "message": f"request ({tokens} tokens) exceeds the available context size "
            f"({num_ctx} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": tokens,
            "n_ctx": num_ctx,
        }
        return json.dumps({"error": error})

    def cut_limit(self, num_ctx: int) -> int:
        halves = self.shift_truncation
        if halves is None:
            halves = self.at_least((0, 30, 11))
        if halves:
            return num_ctx - (num_ctx - NUM_KEEP) // 2
        return num_ctx - 1 if self.at_least((0, 30, 0)) else num_ctx

    def answer_words(self, messages: list[dict[str, Any]]) -> list[str]:
        system = str(messages[0].get("content") or "") if messages else ""
        if system.startswith("Rewrite the last question"):
            asked = str(messages[-1].get("content") or "").rsplit("Last question: ", 1)[-1]
            if asked in self.rewrites:
                return self.rewrites[asked].split()
        if "Translate the user's question" in system:
            translated = self.translations.get(str(messages[-1].get("content") or ""))
            if translated is not None:
                return translated.split()
        return ANSWER_WORDS

    def run(
        self, path: str, model: OllamaModel, messages: list[dict[str, Any]], options: dict[str, Any]
    ) -> tuple[int, dict[str, Any] | str]:
        """What the model does with the request: (status, answer fields | error text)."""
        asked = options.get("num_ctx")
        num_ctx = self.load(model, asked if isinstance(asked, int) else None, options)
        truncate = options.get("_truncate", True) or not self.at_least((0, 12, 4))
        shift = options.get("_shift", True) or not self.at_least((0, 12, 4))
        words = prompt_words(messages)
        truncated = False
        if len(words) > num_ctx and truncate:
            # server/prompt.go: drop the oldest messages, keep system ones and the last.
            kept = list(messages)
            while len(prompt_words(kept)) > num_ctx:
                droppable = [i for i, m in enumerate(kept[:-1]) if m.get("role") != "system"]
                if not droppable:
                    break
                del kept[droppable[0]]
            words = prompt_words(kept)
            truncated = len(kept) < len(messages)
        if len(words) > num_ctx:
            if not truncate:
                return 400, self.refusal(len(words), num_ctx)
            if not shift and self.at_least((0, 30, 0)):
                # llama-server launched without context shift: no cutting either.
                return 400, (
                    "the prompt is longer than the context length currently available to the "
                    "model; shorten the prompt, adjust the context length in settings, or use "
                    "a model with a longer context length"
                )
            limit = self.cut_limit(num_ctx)
            words = words[:NUM_KEEP] + words[len(words) - (limit - NUM_KEEP) :]
            truncated = True
        self.seen.append(Seen(path, words, num_ctx, truncated))
        answer = self.answer_words(messages)
        # With context shift the answer goes on past the window's end; without, it stops there.
        room = len(answer) if shift else num_ctx - len(words)
        predict = options.get("num_predict")
        wanted = len(answer) if not isinstance(predict, int) or predict < 0 else predict
        produced = max(0, min(len(answer), wanted, room))
        reason = "stop" if produced == len(answer) else "length"
        return 200, {
            "words": answer[:produced],
            "done_reason": reason,
            "prompt_eval_count": len(words),
            "eval_count": produced,
        }

    def _message(self, request_body: dict[str, Any], words: list[str]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": " ".join(words)}
        if self.tool_call is not None and request_body.get("tools"):
            message["content"] = ""
            message["tool_calls"] = [
                {"id": "call_x1y2z3w4", "function": {"index": 0, **self.tool_call}}
            ]
        return message

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """POST /api/chat: NDJSON unless `stream` is false (it streams by default)."""
        body = request[RECORDED].json
        model = self.model(str(body.get("model") or ""))
        if model is None:
            return web.json_response(
                {"error": f"model '{body.get('model')}' not found"}, status=404
            )
        options = dict(body.get("options") or {})
        options["_truncate"] = body.get("truncate", True) is not False
        options["_shift"] = body.get("shift", True) is not False
        status, outcome = self.run("/api/chat", model, body.get("messages") or [], options)
        self.after(model, body.get("keep_alive"))
        if isinstance(outcome, str):
            return web.json_response({"error": outcome}, status=status)
        created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        metrics = {
            "total_duration": 4883583458,
            "load_duration": 1334875,
            "prompt_eval_count": outcome["prompt_eval_count"],
            "prompt_eval_duration": 342546000,
            "eval_count": outcome["eval_count"],
            "eval_duration": 4535599000,
        }
        message = self._message(body, outcome["words"])
        if body.get("stream", True) is False:
            if self.thinking:
                message["thinking"] = self.thinking
            return web.json_response(
                {
                    "model": model.name,
                    "created_at": created,
                    "message": message,
                    "done": True,
                    "done_reason": outcome["done_reason"],
                    **metrics,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        lines: list[dict[str, Any]] = []
        if self.thinking:
            lines.append({"role": "assistant", "content": "", "thinking": self.thinking})
        if "tool_calls" in message:
            lines.append(message)
        else:
            lines += [
                {"role": "assistant", "content": (" " if i else "") + word}
                for i, word in enumerate(outcome["words"])
            ]
        for number, line in enumerate(lines):
            if self.fail_midstream and number == 2:
                await response.write(json.dumps({"error": self.fail_midstream}).encode() + b"\n")
                await response.write_eof()
                return response
            chunk = {"model": model.name, "created_at": created, "message": line, "done": False}
            await response.write(json.dumps(chunk).encode() + b"\n")
            if self.chunk_delay:
                await asyncio.sleep(self.chunk_delay)
        final = {
            "model": model.name,
            "created_at": created,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": outcome["done_reason"],
            **metrics,
        }
        await response.write(json.dumps(final).encode() + b"\n")
        await response.write_eof()
        return response

    async def generate(self, request: web.Request) -> web.Response:
        """POST /api/generate: only what the proxy may send — an empty prompt, which loads the
        model with the request's options (or unloads it with `keep_alive: 0`)."""
        body = request[RECORDED].json
        model = self.model(str(body.get("model") or ""))
        if model is None:
            return web.json_response(
                {"error": f"model '{body.get('model')}' not found"}, status=404
            )
        if body.get("prompt"):
            return web.json_response({"error": "the fake generates through /api/chat"}, 501)
        created = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        reason = "load"
        if body.get("keep_alive") in (0, "0", "0s"):
            self.after(model, 0)
            reason = "unload"
        else:
            options = body.get("options") or {}
            asked = options.get("num_ctx")
            self.load(model, asked if isinstance(asked, int) else None, options)
        return web.json_response(
            {
                "model": model.name,
                "created_at": created,
                "response": "",
                "done": True,
                "done_reason": reason,
            }
        )

    async def openai_chat(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/chat/completions: OpenAI's shapes; no num_ctx reaches the model."""
        body = request[RECORDED].json
        model = self.model(str(body.get("model") or ""))
        if model is None:
            error = {"message": f"model '{body.get('model')}' not found", "type": "not_found_error"}
            return web.json_response({"error": {**error, "param": None, "code": None}}, status=404)
        options: dict[str, Any] = {}
        if body.get("max_tokens"):
            options["num_predict"] = body["max_tokens"]
        _, outcome = self.run(
            "/v1/chat/completions", model, openai_messages(body.get("messages") or []), options
        )
        assert not isinstance(outcome, str)
        usage = {
            "prompt_tokens": outcome["prompt_eval_count"],
            "completion_tokens": outcome["eval_count"],
            "total_tokens": outcome["prompt_eval_count"] + outcome["eval_count"],
        }
        common = {
            "id": "chatcmpl-123",
            "created": int(time.time()),
            "model": model.name,
            "system_fingerprint": "fp_ollama",
        }
        text = " ".join(outcome["words"])
        if not body.get("stream"):
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": outcome["done_reason"],
            }
            return web.json_response(
                {**common, "object": "chat.completion", "choices": [choice], "usage": usage}
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunks = [
            {"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None},
            {"index": 0, "delta": {}, "finish_reason": outcome["done_reason"]},
        ]
        for choice in chunks:
            event = {**common, "object": "chat.completion.chunk", "choices": [choice]}
            await response.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def openai_responses(self, request: web.Request) -> web.Response:
        """POST /v1/responses (0.13.3+, openai/responses.go): the input as chat messages, no
        num_ctx (the loaded window, cut as on every route), one response object back."""
        body = request[RECORDED].json
        model = self.model(str(body.get("model") or ""))
        if model is None:
            return web.json_response(
                {"error": {"message": f"model '{body.get('model')}' not found"}}, status=404
            )
        items = body.get("input")
        messages: list[dict[str, Any]] = []
        if body.get("instructions"):
            messages.append({"role": "system", "content": body["instructions"]})
        for item in [{"role": "user", "content": items}] if isinstance(items, str) else items:
            content = item.get("content")
            if isinstance(content, list):
                if any(part.get("type") == "input_file" for part in content):
                    error = {"message": "file inputs are not currently supported"}
                    return web.json_response({"error": error}, status=400)
                content = "".join(str(part.get("text") or "") for part in content)
            messages.append({"role": item.get("role", "user"), "content": content or ""})
        options: dict[str, Any] = {}
        if isinstance(body.get("max_output_tokens"), int):
            options["num_predict"] = body["max_output_tokens"]
        _, outcome = self.run("/v1/responses", model, messages, options)
        assert not isinstance(outcome, str)
        text = " ".join(outcome["words"])
        message = {
            "id": "msg_1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}],
        }
        usage = {
            "input_tokens": outcome["prompt_eval_count"],
            "output_tokens": outcome["eval_count"],
            "total_tokens": outcome["prompt_eval_count"] + outcome["eval_count"],
        }
        return web.json_response(
            {
                "id": "resp_123456",
                "object": "response",
                "created_at": int(time.time()),
                "status": "completed",
                "model": model.name,
                "output": [message],
                "usage": usage,
                "store": False,
            }
        )
