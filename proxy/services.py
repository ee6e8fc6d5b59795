"""The edges a request's stages talk to, created once per application."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .config import Settings
from .metrics import Metrics
from .upstream.client import UpstreamClient


@dataclass
class Services:
    """Shared resources: the upstream connection and, as they start, the document edges."""

    settings: Settings
    upstream: UpstreamClient
    metrics: Metrics
    files: Any = None
    parser: Any = None
    tokens: Any = None
    retriever: Any = None
    formats: Any = None
