"""How servers word their refusal of a prompt over the window (pure): the phrases, read in their
sources and trackers, and the message inside an error that carries another server's answer."""

from __future__ import annotations

import json
from typing import Any

PHRASES = (
    # Ollama's Go runner (runner/ollamarunner/runner.go errorInputTooLong), truncate: false.
    "exceeds the context length",
    # Ollama's llama-server runner launched without context shift (llm/llama_server.go).
    "longer than the context length",
    # llama-server's exceed_context_size_error, which Ollama 0.30+ passes through as its own
    # error text (llm/llama_server.go statusErrorMessage).
    "exceeds the available context size",
    # LM Studio 0.4: "The number of tokens to keep from the initial prompt is greater than the
    # context length" (400, or an `event: error` frame), "Input does not fit in context
    # length" (0.4.21, lmstudio-bug-tracker #2322), its MLX engine's "Context size has been
    # exceeded" (#2339), and 0.3's "Trying to keep the first N tokens when context the
    # overflows" (#546).
    "greater than the context length",
    "does not fit in context length",
    "context size has been exceeded",
    "when context the overflows",
    "when context overflows",
)
NESTED_LIMIT = 64 * 1024
"""An error text longer than this is not read as JSON (it is shown as it is)."""


def says_overflow(message: str) -> bool:
    """Whether an error message is a server's refusal of a prompt over its window."""
    lowered = message.lower()
    return any(phrase in lowered for phrase in PHRASES)


def _message_of(payload: Any) -> str | None:
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return str(error["message"])
    if isinstance(error, str) and error:
        return error
    return None


def inner_message(message: str) -> str:
    """The message of the error object `message` holds when it is one (Ollama passes
    llama-server's whole answer through as its error text: `{"error": {"message": ...}}`),
    else `message` as it is."""
    text = message.strip()
    if not text.startswith("{") or len(text) > NESTED_LIMIT:
        return message
    try:
        payload = json.loads(text)
    except ValueError:
        return message
    return _message_of(payload) or message
