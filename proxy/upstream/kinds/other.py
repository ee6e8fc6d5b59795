"""Any other OpenAI-compatible server: nothing known beyond the OpenAI API."""

from __future__ import annotations

from proxy.upstream.kinds.profile import ServerKind
from proxy.upstream.windows import from_listing

PROFILE = ServerKind(
    "other",
    "an OpenAI-compatible server",
    truncates=False,
    window=from_listing,
)
