"""A fake OpenRouter (openrouter.ai/docs: Models API, Message Transforms): model cards with
`context_length` and `top_provider`, and middle-out compression.

`GET /v1/models` (under the API's base, `https://openrouter.ai/api`) → `{"data": [{"id",
"name", "context_length", "architecture": {"tokenizer", ...}, "pricing", "top_provider":
{"context_length", "max_completion_tokens", "is_moderated"}, ...}]}`. With `transforms:
["middle-out"]` — the default, in its docs, for models of 8,192 tokens or less — a prompt
over the window loses its middle messages; `transforms: []` turns that off.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tests.fakes.openai_like import OpenAIServer, Seen


@dataclass
class FakeOpenRouter(OpenAIServer):
    model_id: str = "mistralai/mistral-7b-instruct"
    label: str = "OpenRouter"
    window: int = 8192

    def card(self) -> dict[str, Any]:
        return {
            "id": self.model_id,
            "canonical_slug": self.model_id,
            "name": "Mistral: Mistral 7B Instruct",
            "created": 1716768000,
            "description": "A 7.3B parameter model.",
            "context_length": self.window,
            "architecture": {
                "modality": "text->text",
                "input_modalities": ["text"],
                "output_modalities": ["text"],
                "tokenizer": "Mistral",
                "instruct_type": "mistral",
            },
            "pricing": {"prompt": "0.000000028", "completion": "0.000000054"},
            "top_provider": {
                "context_length": self.window,
                "max_completion_tokens": 4096,
                "is_moderated": False,
            },
            "per_request_limits": None,
            "supported_parameters": ["max_tokens", "temperature", "tools"],
        }

    def fit(self, path: str, tokens: list[str], max_tokens: int, body: dict[str, Any]) -> Seen:
        transforms = body.get("transforms", ["middle-out"] if self.window <= 8192 else [])
        if "middle-out" in transforms and len(tokens) > self.window:
            half = self.window // 2
            return Seen(path, tokens[:half] + tokens[len(tokens) - half :], truncated=True)
        return Seen(path, tokens)
