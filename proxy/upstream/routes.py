"""Which upstream routes the proxy forwards: an allow-list, everything else is refused.

The upstream is called with the proxy's own credential (`upstream.api_key`), so a route
forwarded is a route every key may use with it. Forwarded: the stateless OpenAI surface, the
read-only endpoints of llama.cpp's server and vLLM's API server, as their sources define them
(llama.cpp `tools/server/server.cpp`, vLLM `vllm/entrypoints/`), and those of the other kinds
of server the proxy knows (proxy.upstream.kinds) that say what the model is, its window and its
token counts: the very routes the proxy reads itself to learn them. Not forwarded unless the
operator names them: admin routes (llama.cpp `/slots`, `POST /slots/{id}`, `POST /props`,
`POST /lora-adapters`; vLLM `/sleep`, `/wake_up`, `/reset_prefix_cache`, `/collective_rpc`,
`/v1/load_lora_adapter`, ...; Ollama's `/api/pull`, `/api/create`, `/api/delete`, ...; loading
and unloading models anywhere), routes that show another caller's generation (KoboldCpp's
`/api/extra/generate/check`, `/api/extra/last_logprobs`), generation under a server's own names
other than llama.cpp's (Ollama's `/api/chat` and `/api/generate` take `keep_alive` and
`options.num_ctx`, which unload or reload the model for every caller, and cut a prompt over the
window unseen), stateful OpenAI routes whose ids would have no owner here (`/v1/batches`,
`/v1/fine_tuning`, `/v1/assistants`, `/v1/threads`, ...), and the upstream's own `/metrics`
(counters of every caller's traffic, prefix-cache hits included; the path is the proxy's own
/metrics anyway).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

ANY = "*"

# (method, path pattern): `*` stands for one path segment. HEAD goes where GET goes.
FORWARDED: tuple[tuple[str, str], ...] = (
    # OpenAI's stateless surface (chat, responses, files and vector stores are the proxy's own).
    ("GET", "/v1/models"),
    ("GET", "/v1/models/*"),
    ("POST", "/v1/completions"),
    ("POST", "/v1/embeddings"),
    ("POST", "/v1/moderations"),
    ("POST", "/v1/audio/transcriptions"),
    ("POST", "/v1/audio/translations"),
    ("POST", "/v1/audio/speech"),
    ("POST", "/v1/images/generations"),
    ("POST", "/v1/chat/completions/input_tokens"),
    # Rerankers and scorers (llama.cpp, vLLM, Jina/Cohere-style servers).
    ("POST", "/rerank"),
    ("POST", "/reranking"),
    ("POST", "/v1/rerank"),
    ("POST", "/v1/reranking"),
    ("POST", "/v2/rerank"),
    ("POST", "/score"),
    ("POST", "/v1/score"),
    ("POST", "/pooling"),
    ("POST", "/classify"),
    ("POST", "/v1/classify"),
    # Anthropic's Messages API, which llama.cpp and vLLM also serve.
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    # llama.cpp: generation under its own names, and read-only introspection.
    ("POST", "/completion"),
    ("POST", "/completions"),
    ("POST", "/infill"),
    ("POST", "/embedding"),
    ("POST", "/embeddings"),
    ("POST", "/tokenize"),
    ("POST", "/detokenize"),
    ("POST", "/apply-template"),
    ("GET", "/props"),
    ("GET", "/models"),
    ("GET", "/health"),
    ("GET", "/v1/health"),
    ("GET", "/lora-adapters"),
    # vLLM: read-only.
    ("GET", "/ping"),
    ("GET", "/version"),
    ("GET", "/load"),
    ("GET", "/tokenizer_info"),
    ("POST", "/v1/chat/completions/render"),
    ("POST", "/v1/completions/render"),
    # The other kinds (proxy.upstream.detect, windows, tokens): what the model is, its window,
    # its token counts; nothing that loads, unloads, generates or shows another caller's work.
    # Several serve it without a key, and it is the proxy's own view of them (/healthz).
    ("GET", "/.well-known/serviceinfo"),  # TabbyAPI, KoboldCpp, Aphrodite
    ("GET", "/get_model_info"),  # SGLang
    # Ollama (server/routes.go): /api/ps says which models are loaded, with which window and
    # until when, as vLLM's /load says how busy it is.
    ("GET", "/api/version"),
    ("GET", "/api/tags"),
    ("POST", "/api/show"),
    ("GET", "/api/ps"),
    # LM Studio's REST API: models with their trained and loaded windows.
    ("GET", "/api/v0/models"),
    ("GET", "/api/v0/models/*"),
    ("GET", "/api/v1/models"),
    ("GET", "/info"),  # TGI (/tokenize is above)
    ("POST", "/chat_tokenize"),
    # KoboldCpp (koboldcpp.py): its name, model, window and token counts.
    ("GET", "/api/extra/version"),
    ("GET", "/api/extra/true_max_context_length"),
    ("POST", "/api/extra/tokencount"),
    ("GET", "/api/v1/model"),
    ("GET", "/api/v1/config/max_context_length"),
    # TabbyAPI: the loaded model's card, its tokenizer.
    ("GET", "/v1/model"),
    ("POST", "/v1/token/encode"),
    ("POST", "/v1/token/decode"),
    # text-generation-webui (its OpenAI extension's internal routes).
    ("GET", "/v1/internal/model/info"),
    ("POST", "/v1/internal/token-count"),
    ("POST", "/v1/internal/encode"),
    ("POST", "/v1/internal/decode"),
    ("POST", "/v1/internal/chat-prompt"),
    # llama-cpp-python's server.
    ("POST", "/extras/tokenize"),
    ("POST", "/extras/tokenize/count"),
    ("POST", "/extras/detokenize"),
)


@dataclass(frozen=True)
class RoutePattern:
    """One allowed route: a method (or any) and a path pattern."""

    method: str
    path: str

    @classmethod
    def parse(cls, entry: str) -> RoutePattern:
        """`"GET /slots"`, `"POST /slots/*"`, or `"/x"` (any method)."""
        method, _, path = entry.strip().rpartition(" ")
        return cls(method.upper() or ANY, path)

    def matches(self, method: str, path: PurePosixPath) -> bool:
        if self.method not in (ANY, method) and not (self.method == "GET" and method == "HEAD"):
            return False
        return path.match(self.path)


def plain_path(path: str, raw_path: str) -> PurePosixPath | None:
    """The request's path to match, or None for one that could name another route once the
    upstream decodes or normalises it: `.`/`..` segments, encoded slashes, backslashes."""
    raw = raw_path.partition("?")[0].lower()
    if any(encoded in raw for encoded in ("%2f", "%5c", "%2e")) or "\\" in path:
        return None
    if any(part in (".", "..") for part in (*path.split("/"), *raw.split("/"))):
        return None
    return PurePosixPath(path)


class UpstreamRoutes:
    """The built-in allow-list, `upstream.allowed_routes` (every key) and
    `upstream.admin_routes` (admin keys only)."""

    def __init__(self, allowed: list[str], admin: list[str]) -> None:
        self.allowed = [RoutePattern(m, p) for m, p in FORWARDED] + [
            RoutePattern.parse(entry) for entry in allowed
        ]
        self.admin = [RoutePattern.parse(entry) for entry in admin]

    def forwarded(self, method: str, path: str, raw_path: str, *, admin: bool) -> bool:
        """Whether the request may go upstream."""
        plain = plain_path(path, raw_path)
        if plain is None:
            return False
        if any(route.matches(method, plain) for route in self.allowed):
            return True
        return admin and any(route.matches(method, plain) for route in self.admin)
