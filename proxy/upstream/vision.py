"""Does the upstream model see images, and what does an image cost it: one function per kind.

- llama.cpp: `GET /props` → `modalities.vision` (true when llama-server runs with `--mmproj`;
  tools/server `handle_props`). The projector is not named by any endpoint: its family is
  guessed from the chat template's image markers (an estimate, said so).
- vLLM: `/v1/models` says nothing of modalities. `POST /tokenize` with an image part is
  answered for a multimodal model and refused with a 400 for a text-only one ("... is not a
  multimodal model": `MultiModalRegistry.create_processor`, reached from the chat parser's
  item tracker). Newer builds serve `POST /v1/chat/completions/render`, whose `token_ids` hold
  the image's placeholder tokens expanded by the model's own processor: the exact count.
  (`/tokenize` does not expand them: one placeholder per image.)
- Ollama: `POST /api/show` lists the model's `capabilities`; `vision` is among them for a
  model with a projector (server/images.go `Capabilities`). What an image costs is not said:
  estimated from the model's name.
- LM Studio: `GET /api/v1/models` (0.4+) gives each model's `capabilities.vision`; before
  that, `GET /api/v0/models` gives `type: vlm` for a vision model (lmstudio-ai/docs
  1_developer/2_rest). Costs estimated from the model's name.
- other servers: unknown, so no images, unless `models.<name>.vision: true` says otherwise.

`models.<name>.vision` and `models.<name>.image_tokens` override what is learnt. Another kind
of server is one more entry in `LEARNERS`.
"""

from __future__ import annotations

import asyncio
import base64
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog
from cachetools import LRUCache

from proxy.config import Settings
from proxy.errors import ProxyError
from proxy.logs import probe_failed
from proxy.upstream.client import UpstreamClient
from proxy.upstream.image_cost import ImageCost, configured, guessed
from proxy.upstream.learnt import Learnt

log = structlog.get_logger(__name__)

RENDER_PATH = "/v1/chat/completions/render"


@dataclass(frozen=True)
class Sight:
    """Whether a model sees images, where that was learnt, and what an image costs it."""

    sees: bool
    source: str
    cost: ImageCost
    server_counts: bool = False  # the upstream counts an image's tokens itself (vLLM render)
    keep: bool = True  # False: learnt from a failure; asked again next time

    def to_json(self) -> dict[str, Any]:
        return {
            "sees": self.sees,
            "source": self.source,
            "image_tokens": "counted by the upstream" if self.server_counts else self.cost.family,
            "image_tokens_source": self.cost.source,
            "estimated": self.cost.estimated and not self.server_counts,
        }


ESTIMATE = ImageCost("estimate", "estimated: one token per 28×28 pixels", estimated=True)
Learner = Callable[[UpstreamClient, str | None], Awaitable[Sight]]


def blank_png(width: int, height: int) -> bytes:
    """A white RGB PNG: what the server counts depends only on an image's size."""
    row = b"\x00" + b"\xff" * (3 * width)

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    pixels = zlib.compress(row * height, 9)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


def data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


_PROBE_IMAGE = data_url(blank_png(56, 56))


def _image_message(url: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]


async def llamacpp(upstream: UpstreamClient, model: str | None) -> Sight:
    status, props = await upstream.get_json("/props")
    if status != 200 or not isinstance(props, dict):
        return Sight(False, f"llama.cpp /props answered {status}", ESTIMATE, keep=status != 401)
    modalities = props.get("modalities")
    if not isinstance(modalities, dict):
        return Sight(
            False, "llama.cpp /props names no modalities (no multimodal support)", ESTIMATE
        )
    names = f"{props.get('model_alias') or ''} {props.get('model_path') or ''}"
    cost = guessed(str(props.get("chat_template") or ""), names)
    if modalities.get("vision") is True:
        return Sight(True, "llama.cpp /props modalities.vision", cost)
    return Sight(False, "llama.cpp /props modalities.vision is false (no --mmproj)", cost)


async def vllm(upstream: UpstreamClient, model: str | None) -> Sight:
    payload: dict[str, Any] = {"messages": _image_message(_PROBE_IMAGE)}
    if model:
        payload["model"] = model
    status, body = await upstream.post_json("/tokenize", payload)
    cost = guessed("", model or "")
    if status in (401, 403):
        return Sight(False, f"vLLM /tokenize answered {status}", cost, keep=False)
    if status != 200:
        message = error_message(body)
        return Sight(False, f"vLLM /tokenize refused an image ({status}: {message})", cost)
    status, rendered = await upstream.post_json(RENDER_PATH, payload)
    counts = status == 200 and _token_ids(rendered) is not None
    return Sight(True, "vLLM /tokenize took an image", cost, server_counts=counts)


async def ollama(upstream: UpstreamClient, model: str | None) -> Sight:
    if not model:
        return Sight(False, "Ollama: no model named, so none asked about", ESTIMATE, keep=False)
    status, shown = await upstream.post_json("/api/show", {"model": model})
    cost = guessed("", model)
    if status != 200 or not isinstance(shown, dict):
        return Sight(False, f"Ollama /api/show answered {status}", cost, keep=status == 404)
    capabilities = shown.get("capabilities")
    if isinstance(capabilities, list) and "vision" in capabilities:
        return Sight(True, "Ollama /api/show capabilities: vision", cost)
    return Sight(False, "Ollama /api/show capabilities without vision", cost)


def lmstudio_card(listing: Any, key: str, model: str | None) -> dict[str, Any] | None:
    cards = listing.get(key) if isinstance(listing, dict) else None
    if not isinstance(cards, list):
        return None
    dicts = [card for card in cards if isinstance(card, dict)]
    if not model:  # none named: the one model listed answers, if there is only one
        return dicts[0] if len(dicts) == 1 else None
    return next((card for card in dicts if model in (card.get("key"), card.get("id"))), None)


async def lmstudio(upstream: UpstreamClient, model: str | None) -> Sight:
    cost = guessed("", model or "")
    status, listing = await upstream.get_json("/api/v1/models")
    card = lmstudio_card(listing, "models", model) if status == 200 else None
    if card is not None and isinstance(card.get("capabilities"), dict):
        if card["capabilities"].get("vision") is True:
            return Sight(True, "LM Studio /api/v1/models capabilities.vision", cost)
        return Sight(False, "LM Studio /api/v1/models capabilities.vision is false", cost)
    status, listing = await upstream.get_json("/api/v0/models")
    card = lmstudio_card(listing, "data", model) if status == 200 else None
    if card is None:
        return Sight(False, f"LM Studio does not list the model ({status})", cost, keep=False)
    if card.get("type") == "vlm":
        return Sight(True, "LM Studio /api/v0/models type: vlm", cost)
    return Sight(False, f"LM Studio /api/v0/models type: {card.get('type')}", cost)


async def other(upstream: UpstreamClient, model: str | None) -> Sight:
    return Sight(False, "unknown: the upstream does not say whether the model sees", ESTIMATE)


LEARNERS: dict[str, Learner] = {
    "llamacpp": llamacpp,
    "vllm": vllm,
    "ollama": ollama,
    "lmstudio": lmstudio,
}


def error_message(body: Any) -> str:
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        body = error
    text = body.get("message") if isinstance(body, dict) else None
    return str(text)[:200] if text else "no message"


def _token_ids(body: Any) -> list[Any] | None:
    if isinstance(body, list) and body:  # some builds answer a list of renders
        body = body[0]
    if not isinstance(body, dict):
        return None
    ids = body.get("token_ids", body.get("prompt_token_ids"))
    return ids if isinstance(ids, list) else None


class VisionIntrospection:
    """Learns each model's sight once per `upstream.context_ttl_s`; the upstream's own image
    counts (vLLM render) are remembered per model and image size."""

    def __init__(
        self,
        settings: Settings,
        upstream: UpstreamClient,
        kind: Callable[[], Awaitable[str]],
    ) -> None:
        self.settings = settings
        self.upstream = upstream
        self._kind = kind
        self._sights: Learnt[Sight] = Learnt(
            settings.upstream.context_ttl_s, lambda sight: sight.keep
        )
        self._counts: LRUCache[tuple[str, int, int], int] = LRUCache(maxsize=4096)

    async def sight(self, model: str | None) -> Sight:
        sight, now = await self._sights.get(model or "", lambda: self._learn(model))
        if now:
            (log.info if sight.keep else log.debug)(
                "model sight learnt", model=model, sees=sight.sees, source=sight.source
            )
        return sight

    async def _learn(self, model: str | None) -> Sight:
        configured_settings = self.settings.model_settings(model)
        if configured_settings.vision is False:
            return Sight(False, f"models.{model or '*'}.vision: false", ESTIMATE)
        try:
            kind = await self._kind()
            learnt = await LEARNERS.get(kind, other)(self.upstream, model)
        except ProxyError as error:
            probe_failed(log, "could not learn whether the model sees", error.code, error.message)
            learnt = Sight(False, f"unknown: {error.message}", ESTIMATE, keep=False)
        if configured_settings.vision is True:
            learnt = replace(learnt, sees=True, source=f"models.{model or '*'}.vision: true")
        if configured_settings.image_tokens is not None:
            cost = configured(configured_settings.image_tokens, model)
            learnt = replace(learnt, cost=cost, server_counts=False)
        return learnt

    async def counts(
        self, model: str | None, sight: Sight, sizes: set[tuple[int, int]]
    ) -> dict[tuple[int, int], int]:
        """Tokens of an image of each size: the upstream's own count where it gives one,
        else the cost model's."""
        found = {size: sight.cost.tokens(*size) for size in sizes}
        if not sight.server_counts:
            return found
        for width, height in sorted(sizes):
            key = (model or "", width, height)
            if key not in self._counts:
                counted = await self._server_count(model, width, height)
                if counted is None:
                    return found  # the render endpoint failed: the estimate for all
                self._counts[key] = counted
            found[(width, height)] = self._counts[key]
        return found

    async def _server_count(self, model: str | None, width: int, height: int) -> int | None:
        png = await asyncio.to_thread(blank_png, width, height)
        base: dict[str, Any] = {"model": model} if model else {}
        with_image = {**base, "messages": _image_message(data_url(png))}
        without = {
            **base,
            "messages": [{"role": "user", "content": [{"type": "text", "text": ""}]}],
        }
        status, rendered = await self.upstream.post_json(RENDER_PATH, with_image)
        status_empty, empty = await self.upstream.post_json(RENDER_PATH, without)
        ids, none = _token_ids(rendered), _token_ids(empty)
        if status != 200 or status_empty != 200 or ids is None or none is None:
            log.warning("the upstream did not count an image", status=status, size=(width, height))
            return None
        return max(1, len(ids) - len(none))
