"""Telling what the guard changed in the documents of a request."""

from __future__ import annotations

import structlog

from proxy.guard.neutralise import GuardReport
from proxy.pipeline.exchange import Exchange

log = structlog.get_logger(__name__)


def note_guard(exchange: Exchange, reports: dict[str, GuardReport]) -> None:
    """What the guard changed, per file: decision record, a header, a warning line."""
    total = sum(report.changes for report in reports.values())
    exchange.decision.guard = {name: report.by_kind for name, report in reports.items()}
    exchange.response_headers["X-Enrich-Guard-Changes"] = str(total)
    if total:
        log.warning(
            "document text neutralised",
            request_id=exchange.request_id,
            changes=total,
            per_file=exchange.decision.guard,
        )
