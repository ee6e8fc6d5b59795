"""The callers tests of per-key scoping use: two teams and an operator, and an SDK client."""

from __future__ import annotations

import openai

KEY_A = "team-a-secret-key-0001"
KEY_B = "team-b-secret-key-0002"
KEY_ADMIN = "operator-secret-key-03"
KEYS = [
    {"name": "team-a", "key": KEY_A},
    {"name": "team-b", "key": KEY_B},
    {"name": "ops", "key": KEY_ADMIN, "admin": True},
]


def sdk(base: str, key: str = "none", **headers: str) -> openai.OpenAI:
    """The openai SDK against the proxy at `base`, as the caller holding `key`; no retries."""
    return openai.OpenAI(
        base_url=base + "/v1", api_key=key, max_retries=0, default_headers=headers or None
    )
